"""Where the server listens and how many threads it starts, as the documentation promises: the
`listen` forms (`*:P`, `[::]:P`, a bare port; port 0 picks a free port and logs it),
`threads 0` and `-n 0` (one thread per CPU), the default configuration
conf/lfhttpd.conf found without `-c`, and the systemd unit that runs it."""
import json
import os
import re
import shutil
import socket
import subprocess

import pytest

from conftest import BIN, ROOT, wait_until


def get(host, port, path="/"):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.settimeout(5)
        sock.connect((host, port))
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while True:
            b = sock.recv(65536)
            if not b:
                break
            data += b
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body


def conf(docroot, listen, extra=""):
    return (f"listen {listen};\n"
            f'root "{docroot}";\n'
            "threads 2;\n"
            "access_log off;\n"
            "error_log stderr debug;\n"
            "shutdown_timeout 5s;\n" + extra)


def ipv6_loopback_works():
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


# ---------------------------------------------------------------- listen forms


@pytest.mark.parametrize("listen, logged, reach", [
    ("*:0", "0.0.0.0", "127.0.0.1"),
    ("0", "0.0.0.0", "127.0.0.1"),
    ("[::]:0", "[::]", "::1"),
])
def test_listen_form_binds_the_wildcard_address_and_logs_the_port(start_server, docroot,
                                                                   listen, logged, reach):
    """`*:P` and a bare `P` are every IPv4 address, `[::]:P` every IPv6 one; port 0 picks a free port, which the log names."""
    if ":" in reach and not ipv6_loopback_works():
        pytest.skip("IPv6 is not available on this machine (no ::1)")
    (docroot / "index.html").write_text("hello\n")
    s = start_server(docroot, conf=conf(docroot, listen))
    m = re.search(r"listening on (\S+):(\d+) ", s.error_log())
    assert m and m.group(1) == logged, s.error_log()
    port = int(m.group(2))
    assert port != 0
    assert get(reach, port) == (200, b"hello\n")


# ---------------------------------------------------------------- threads


def group_threads(server):
    """The default class's worker threads, as /proc names them (default-0, default-1...)."""
    names = []
    for tid in os.listdir(f"/proc/{server.proc.pid}/task"):
        try:
            with open(f"/proc/{server.proc.pid}/task/{tid}/comm") as f:
                names.append(f.read().strip())
        except FileNotFoundError:
            pass
    return sorted(n for n in names if re.fullmatch(r"default-\d+", n))


def status_threads(server):
    _, body = get(server.host, server.port, "/status?format=json")
    return next(g["threads"] for g in json.loads(body)["groups"] if g["name"] == "default")


@pytest.mark.parametrize("how", ["threads 0 in the file", "-n 0"])
def test_zero_threads_means_one_per_cpu(start_server, docroot, how):
    cpus = os.cpu_count()
    extra = "handler /status status;\n"
    if how == "-n 0":
        s = start_server(docroot, conf=conf(docroot, "127.0.0.1:0", extra), args=("-n", "0"))
    else:
        text = conf(docroot, "127.0.0.1:0", extra).replace("threads 2;", "threads 0;")
        s = start_server(docroot, conf=text)
    assert status_threads(s) == cpus
    assert wait_until(lambda: len(group_threads(s)) == cpus, 5), group_threads(s)
    assert wait_until(lambda: f"class default: {cpus} thread" in s.error_log(), 5), \
        s.error_log()


# ---------------------------------------------------------------- the default configuration


def repo_layout(tmp_path):
    """A copy of what the default configuration refers to: conf/ and www/."""
    top = tmp_path / "site"
    shutil.copytree(os.path.join(ROOT, "conf"), top / "conf")
    shutil.copytree(os.path.join(ROOT, "www"), top / "www")
    return top


def test_default_configuration_is_found_without_c(launch, tmp_path):
    """Started without -c in a directory holding conf/lfhttpd.conf, the server reads it:
    its `root www;` serves www/, and its `cgi /cgi-bin/ www/cgi-bin;` (which the
    built-in defaults do not have) runs the example script. `-l` replaces only the
    file's `listen 8080;`, so the test needs no fixed port."""
    top = repo_layout(tmp_path)
    s = launch(["-l", "127.0.0.1:0"], cwd=top)
    status, body = get(s.host, s.port, "/")
    assert status == 200
    assert body == (top / "www" / "index.html").read_bytes()
    script = (top / "www" / "cgi-bin" / "hello.sh").read_bytes()
    status, body = get(s.host, s.port, "/cgi-bin/hello.sh")
    assert status == 200 and body and body != script, body  # its output, not its text
    check = subprocess.run([BIN, "-t"], cwd=top, capture_output=True, text=True, timeout=10)
    assert check.returncode == 0, check.stderr
    assert "configuration conf/lfhttpd.conf is valid" in check.stdout


def test_without_c_and_without_the_default_file_the_built_in_defaults_apply(launch,
                                                                            tmp_path):
    """No conf/lfhttpd.conf here: the built-in defaults (root www, no CGI mount, so the
    script is a file like any other and its text is sent)."""
    top = repo_layout(tmp_path)
    shutil.rmtree(top / "conf")
    s = launch(["-l", "127.0.0.1:0"], cwd=top)
    assert get(s.host, s.port, "/") == (200, (top / "www" / "index.html").read_bytes())
    script = (top / "www" / "cgi-bin" / "hello.sh").read_bytes()
    assert get(s.host, s.port, "/cgi-bin/hello.sh") == (200, script)


# ---------------------------------------------------------------- systemd


def test_systemd_unit_passes_systemd_analyze_verify(tmp_path):
    """deploy/systemd/lfhttpd.service, verified with ExecStart and ExecStartPre pointing at
    the binary under test (the unit names /usr/local/sbin/lfhttpd, where `make install`
    puts it; the verifier checks that the executables exist) and WorkingDirectory at a real
    one."""
    tool = shutil.which("systemd-analyze")
    if not tool:
        pytest.skip("systemd-analyze is not installed (make check-deps installs systemd)")
    text = open(os.path.join(ROOT, "deploy", "systemd", "lfhttpd.service")).read()
    assert ("ExecStart=/usr/local/sbin/lfhttpd -c /usr/local/etc/lfhttpd/lfhttpd.conf"
            in text)
    unit = tmp_path / "lfhttpd.service"
    unit.write_text(text.replace("/usr/local/sbin/lfhttpd", BIN)
                    .replace("WorkingDirectory=/srv", f"WorkingDirectory={tmp_path}"))
    p = subprocess.run([tool, "verify", "--man=no", str(unit)], capture_output=True,
                       text=True, timeout=60, env=dict(os.environ, SYSTEMD_LOG_LEVEL="notice"))
    # Only what concerns this unit counts: verify also loads the system's units it
    # depends on (network-online.target...), which may be absent in a container.
    ours = [line for line in (p.stdout + p.stderr).splitlines() if "lfhttpd.service" in line]
    assert not ours, "\n".join(ours)
