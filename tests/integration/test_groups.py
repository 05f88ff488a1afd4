"""Thread groups (`groups N`): a class's threads split into N Leader/Followers groups,
each with its own handle set and its own listening socket on every address (SO_REUSEPORT).
Seen from outside: the listening sockets, the threads' names, the promotions on /status,
and that every group serves."""
import concurrent.futures
import json
import os
import signal
import socket
import subprocess

import pytest

from conftest import BIN, wait_until


def listening_sockets(pid, port):
    """Listening TCP sockets of process pid bound to port (from /proc)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    n = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)
            for line in f:
                fields = line.split()
                local, state, inode = fields[1], fields[3], fields[9]
                if state == "0A" and int(local.split(":")[1], 16) == port and inode in inodes:
                    n += 1
    return n


def thread_names(pid):
    names = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/comm") as f:
            names.append(f.read().strip())
    return names


@pytest.fixture
def docroot(docroot):
    (docroot / "index.html").write_bytes(b"x" * 1024)
    return docroot


def get(server, path="/index.html"):
    with socket.create_connection((server.host, server.port), timeout=10) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return int(data.split(b" ")[1]), data.partition(b"\r\n\r\n")[2]


def status(server):
    code, body = get(server, "/status?format=json")
    assert code == 200
    return json.loads(body)


def test_each_group_has_its_own_listening_socket_on_the_same_port(start_server, docroot):
    s = start_server(docroot, "threads 4;\ngroups 2;\n")
    assert listening_sockets(s.proc.pid, s.port) == 2
    assert "(class default, 2 sockets: one per thread group)" in s.error_log()
    assert "class default: 4 threads in 2 groups" in s.error_log()


def test_one_group_listens_on_one_socket(start_server, docroot):
    s = start_server(docroot, "threads 4;\ngroups 1;\n")
    assert listening_sockets(s.proc.pid, s.port) == 1


def test_groups_0_is_one_per_cpu_but_never_more_than_threads(start_server, docroot, tmp_path):
    cpus = os.sysconf("SC_NPROCESSORS_ONLN")
    s = start_server(docroot, "threads 64;\ngroups 0;\n")
    assert listening_sockets(s.proc.pid, s.port) == min(cpus, 64)
    one = start_server(docroot, "threads 1;\ngroups 0;\n")
    assert listening_sockets(one.proc.pid, one.port) == 1


def test_thread_names_are_numbered_across_the_groups(start_server, docroot):
    s = start_server(docroot, "threads 3;\ngroups 2;\n")
    def workers():
        return sorted(n for n in thread_names(s.proc.pid) if n.startswith("default-"))
    # Each thread names itself as it starts.
    assert wait_until(lambda: workers() == ["default-0", "default-1", "default-2"]), workers()


def test_every_request_on_many_connections_is_answered_by_two_groups(start_server, docroot):
    s = start_server(docroot, "threads 2;\ngroups 2;\n")
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        codes = list(pool.map(lambda _: get(s)[0], range(400)))
    assert codes == [200] * 400


def test_a_group_of_one_thread_never_promotes(start_server, docroot):
    """With one thread per group there is no follower to promote: the handle set is the
    thread's alone. (One group of two threads promotes on the same load: see below.)"""
    s = start_server(docroot, "threads 2;\ngroups 2;\nhandler /status status;\n")
    load(s)
    st = status(s)["groups"][0]
    assert st["events"] > 400 and st["handoffs"] == 0, st


def test_one_group_of_two_threads_promotes_under_the_same_load(start_server, docroot):
    s = start_server(docroot, "threads 2;\ngroups 1;\nhandler /status status;\n")
    load(s)
    st = status(s)["groups"][0]
    assert st["handoffs"] > 0, st


def load(server):
    """Keep-alive requests on 16 connections at once."""
    def client(_):
        with socket.create_connection((server.host, server.port), timeout=10) as c:
            for _ in range(40):
                c.sendall(b"GET /index.html HTTP/1.1\r\nHost: t\r\n\r\n")
                data = b""
                while b"\r\n\r\n" not in data:
                    data += c.recv(65536)
                head, _, body = data.partition(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                while len(body) < length:
                    body += c.recv(65536)
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(client, range(16)))


def test_a_class_splits_its_own_threads_into_groups(start_server, docroot):
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    s = start_server(docroot, "threads 2;\ngroups 1;\n"
                     f"class api {{\n listen 127.0.0.1:{port};\n threads 2;\n groups 2;\n}}\n")
    assert listening_sockets(s.proc.pid, port) == 2
    assert listening_sockets(s.proc.pid, s.port) == 1
    assert "class api: 2 threads in 2 groups" in s.error_log()


def reload_with(server, old, new):
    """Replace old by new in the server's file and send SIGHUP; returns a function giving
    the error log written since."""
    text = open(server.conf_path).read().replace(old, new)
    with open(server.conf_path, "w") as f:
        f.write(text)
    before = len(server.error_log())
    server.proc.send_signal(signal.SIGHUP)
    return lambda: server.error_log()[before:]


def test_changing_groups_needs_a_restart_and_a_reload_is_refused(start_server, docroot):
    s = start_server(docroot, "threads 2;\ngroups 2;\n")
    refusal = reload_with(s, "groups 2;", "groups 1;")
    assert wait_until(lambda: "configuration not reloaded" in refusal())
    assert "groups" in refusal()
    assert listening_sockets(s.proc.pid, s.port) == 2
    assert get(s)[0] == 200


# ---------------------------------------------------------------- reactivation


def check_conf(tmp_path, docroot, text):
    conf = tmp_path / "check.conf"
    conf.write_text(f'root "{docroot}";\nlisten 127.0.0.1:0;\n' + text)
    return subprocess.run([BIN, "-t", "-c", str(conf)], capture_output=True, text=True,
                          timeout=30)


def test_reactivation_edge_with_another_strategy_is_an_error_naming_both_lines(
        tmp_path, docroot):
    r = check_conf(tmp_path, docroot,
                   "concurrency half_sync_half_async;\nreactivation edge;\n")
    assert r.returncode != 0
    assert "check.conf:4: reactivation edge: only Leader/Followers has it, and concurrency " \
           "is half_sync_half_async" in r.stderr
    assert "check.conf:3)" in r.stderr


def test_reactivation_takes_edge_or_oneshot_and_nothing_else(tmp_path, docroot):
    assert check_conf(tmp_path, docroot, "reactivation oneshot;\n").returncode == 0
    assert check_conf(tmp_path, docroot, "reactivation edge;\n").returncode == 0
    r = check_conf(tmp_path, docroot, "reactivation level;\n")
    assert r.returncode != 0 and "check.conf:3:" in r.stderr


@pytest.mark.parametrize("react", ["edge", "oneshot"])
def test_pipelined_requests_split_across_writes_are_all_answered(start_server, docroot, react):
    """The second half of a request comes while the thread still owns the connection
    (edge: kept for it as pending; one-shot: re-armed after)."""
    s = start_server(docroot, f"threads 2;\ngroups 1;\nreactivation {react};\n")
    with socket.create_connection((s.host, s.port), timeout=10) as c:
        req = b"GET /index.html HTTP/1.1\r\nHost: t\r\n\r\n"
        for i in range(200):
            c.sendall(req * 3 + req[:10])
            c.sendall(req[10:])
        data = b""
        while data.count(b"HTTP/1.1 200") < 800:
            chunk = c.recv(1 << 20)
            assert chunk, "closed after %d responses" % data.count(b"HTTP/1.1 200")
            data += chunk
    assert data.count(b"HTTP/1.1 200") == 800


def test_changing_reactivation_needs_a_restart_and_a_reload_is_refused(start_server, docroot):
    s = start_server(docroot, "reactivation edge;\n")
    refusal = reload_with(s, "reactivation edge;", "reactivation oneshot;")
    assert wait_until(lambda: "configuration not reloaded" in refusal())
    assert "reactivation" in refusal()
