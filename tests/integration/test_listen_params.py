"""nginx's `listen` parameters, observed on the real sockets: `backlog=` (a listening socket's
Send-Q in `ss -ltn`), `rcvbuf=` / `sndbuf=` (the accepted connection's skmem rb / tb, which
the kernel doubles), `so_keepalive=` (the accepted connection's keepalive timer in
`ss -tnoi`), `ipv6only=` (a [::] listener answering on 127.0.0.1 or not), `fastopen=` (the
listener's TCP_FASTOPEN queue), `deferred` and `bind` (accepted; the wildcard of a port
accepts for an address without `bind`, as nginx's), the FreeBSD-only `accept_filter=`
(ignored, as nginx on Linux) and `setfib=` (refused, as nginx on Linux), and an address's
parameters said in one `listen` only. Where it makes sense nginx runs the same
configuration beside lfhttpd and is observed the same way."""
import ctypes
import os
import re
import signal
import socket
import subprocess

import pytest

from conftest import (BIN, BY_DESIGN, NGINX, Nginx, Server, environment_fact, free_port,
                      nginx_beside_lfhttpd, scaled, wait_until)

PARTIAL = b"GET / HTTP/1.1\r\nHost: t\r\n"  # the server accepts it and waits for the rest


def ss(*args):
    return subprocess.run(["ss", *args], capture_output=True, text=True, check=True).stdout


def listen_queues(port):
    """The Send-Q (the backlog) of each socket listening on port."""
    out = ss("-ltnH", f"sport = :{port}")
    return [int(line.split()[2]) for line in out.splitlines() if line.strip()]


def accepted_socket(port, *flags):
    """ss's lines for the server's side of the connections to port (their local port)."""
    return ss("-tnH", *flags, "state", "established", f"( sport = :{port} )")


def get(host, port, host_header="t"):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect((host, port))
        s.sendall(f"GET / HTTP/1.1\r\nHost: {host_header}\r\nConnection: close\r\n\r\n"
                  .encode())
        data = b""
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body


def opened(port):
    """A connection to 127.0.0.1:port that has sent part of a request: accepted, and kept."""
    c = socket.create_connection(("127.0.0.1", port), timeout=5)
    c.sendall(PARTIAL)
    return c


def skmem(port):
    """rb and tb of the accepted connection to port, once the server has accepted it."""
    out = wait_until(lambda: re.search(r"skmem:\(r\d+,rb(\d+),t\d+,tb(\d+)",
                                       accepted_socket(port, "-m")), scaled(5))
    assert out, accepted_socket(port, "-m")
    return int(out.group(1)), int(out.group(2))


def keepalive_timer(port):
    """The accepted connection's keepalive timer as ss shows it ("29min"), or None."""
    out = wait_until(lambda: accepted_socket(port, "-o"), scaled(5))
    m = re.search(r"timer:\(keepalive,([^,]+),", out)
    return m.group(1) if m else None


def minutes(timer):
    m = re.fullmatch(r"(\d+)min(?:\d+sec)?|(\d+)sec|(\d+(?:\.\d+)?)ms", timer)
    assert m, timer
    return int(m.group(1)) if m.group(1) else 0


def ipv6_loopback_works():
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def check(tmp_path, site, name="lfhttpd.conf"):
    """lfhttpd -t of site (server blocks inside http { }): (exit status, output)."""
    conf = tmp_path / name
    conf.write_text("error_log stderr;\nevents {}\nhttp {\n" + site + "}\n")
    r = subprocess.run([BIN, "-t", "-c", str(conf)], capture_output=True, text=True,
                       timeout=30)
    return r.returncode, r.stdout + r.stderr, str(conf)


def nginx_check(tmp_path, site):
    """nginx -t of the same: (exit status, output)."""
    if not NGINX:
        pytest.fail("nginx is not installed (make check-deps installs nginx-light)")
    d = tmp_path / "nginx"
    d.mkdir(exist_ok=True)
    conf = d / "nginx.conf"
    conf.write_text(f"error_log stderr;\npid {d}/nginx.pid;\nevents {{}}\n"
                    f"http {{\naccess_log off;\n{site}}}\n")
    r = subprocess.run([NGINX, "-t", "-p", f"{d}/", "-c", str(conf)], capture_output=True,
                       text=True, timeout=30)
    return r.returncode, r.stdout + r.stderr


# ------------------------------------------------------- socket options, beside nginx

SITE = """
server { listen 127.0.0.1:{port0} backlog=123; return 200 "backlog\\n"; }
server { listen 127.0.0.1:{port1} rcvbuf=48k sndbuf=96k; return 200 "buffers\\n"; }
server { listen 127.0.0.1:{port2} so_keepalive=30m::; return 200 "keepidle\\n"; }
server { listen 127.0.0.1:{port3} so_keepalive=on; return 200 "keepalive\\n"; }
server { listen 127.0.0.1:{port4}; return 200 "plain\\n"; }
server { listen 127.0.0.1:{port5} fastopen=17 deferred; return 200 "fastopen\\n"; }
"""


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    yield from nginx_beside_lfhttpd(tmp_path_factory, SITE)


@pytest.fixture(params=["nginx", "lfhttpd"])
def ports(request, both):
    return both[0] if request.param == "nginx" else both[1]


def test_backlog_is_the_listening_sockets_queue(ports):
    queues = listen_queues(ports[0])
    assert queues and all(q == 123 for q in queues), queues


def test_rcvbuf_is_the_accepted_connections_receive_buffer(ports):
    with opened(ports[1]):
        rb, _ = skmem(ports[1])
    assert rb == 2 * 48 * 1024  # the kernel doubles what was set (the default is 128k)


def test_sndbuf_is_the_accepted_connections_send_buffer(ports):
    with opened(ports[1]):
        _, tb = skmem(ports[1])
    assert tb == 2 * 96 * 1024


def test_so_keepalive_idle_time_is_the_accepted_connections_keepalive_timer(ports):
    with opened(ports[2]):
        timer = keepalive_timer(ports[2])
    assert timer and 28 <= minutes(timer) <= 30, timer


def test_so_keepalive_on_starts_the_kernels_keepalive_timer(ports):
    with open("/proc/sys/net/ipv4/tcp_keepalive_time") as f:
        idle_min = int(f.read()) // 60
    with opened(ports[3]):
        timer = keepalive_timer(ports[3])
    assert timer and idle_min - 2 <= minutes(timer) <= idle_min, timer


def test_without_so_keepalive_there_is_no_keepalive_timer(ports):
    with opened(ports[4]):
        assert keepalive_timer(ports[4]) is None


def test_fastopen_is_the_listeners_fast_open_queue(ports, both):
    server_pid = listener_pid(ports[5])
    qlens = fastopen_queues(server_pid, ports[5])
    assert qlens and all(q == 17 for q in qlens), qlens


def test_deferred_and_fastopen_address_serves(ports):
    assert get("127.0.0.1", ports[5]) == (200, b"fastopen\n")


# TCP_FASTOPEN's queue is read on the listening socket itself: a copy of the server's
# descriptor (pidfd_getfd, Linux 5.6) and getsockopt on it.

SYS_PIDFD_GETFD = 438


def listener_pid(port):
    out = ss("-ltnpH", f"sport = :{port}")
    m = re.search(r"pid=(\d+)", out)
    assert m, out
    return int(m.group(1))


def fastopen_queues(pid, port):
    try:
        pidfd = os.pidfd_open(pid)
    except OSError as e:
        pytest.skip(f"pidfd_open: {e} " + BY_DESIGN + " " +
                    environment_fact("no pidfd_open"))
    libc = ctypes.CDLL(None, use_errno=True)
    queues = []
    try:
        for name in os.listdir(f"/proc/{pid}/fd"):
            fd = libc.syscall(SYS_PIDFD_GETFD, pidfd, int(name), 0)
            if fd < 0:
                pytest.skip(f"pidfd_getfd: {os.strerror(ctypes.get_errno())} (needs ptrace "
                            "rights over the server) " + BY_DESIGN + " " +
                            environment_fact("no pidfd_getfd"))
            try:
                s = socket.socket(fileno=fd)
            except OSError:
                os.close(fd)
                continue
            try:
                if (s.type == socket.SOCK_STREAM and s.getsockname()[1:2] == (port,) and
                        s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)):
                    queues.append(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_FASTOPEN))
            except OSError:
                pass
            finally:
                s.close()
    finally:
        os.close(pidfd)
    return queues


def test_fastopen_client_data_in_the_syn_is_answered(tmp_path):
    with open("/proc/sys/net/ipv4/tcp_fastopen") as f:
        mode = int(f.read())
    if mode & 3 != 3:
        pytest.skip(f"net.ipv4.tcp_fastopen is {mode}: this machine's TCP does not do Fast "
                    "Open as both client (1) and server (2), and a test does not change it "
                    + BY_DESIGN + " " + environment_fact("net.ipv4.tcp_fastopen lacks 3"))
    server = Server(tmp_path, None, conf="listen 127.0.0.1:0 fastopen=16;\nthreads 2;\n"
                    "error_log stderr info;\nshutdown_timeout 5s;\n"
                    "server { return 200 \"tfo\\n\"; }\n")
    try:
        before = fastopen_passive()
        answers = []
        for _ in range(2):  # the first SYN fetches the cookie, the second carries data
            with socket.socket() as c:  # blocking: a timeout would make sendto's connect
                c.sendto(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
                         socket.MSG_FASTOPEN, ("127.0.0.1", server.port))
                c.settimeout(5)
                answers.append(c.recv(4096))
        assert all(a.startswith(b"HTTP/1.1 200") for a in answers), answers
        assert fastopen_passive() > before  # the second one's data came in its SYN
    finally:
        server.stop()


def fastopen_passive():
    """The kernel's count of connections accepted with data in their SYN."""
    with open("/proc/net/netstat") as f:
        text = f.read()
    names, values = [line.split() for line in text.splitlines() if line.startswith("TcpExt")]
    return int(dict(zip(names, values))["TCPFastOpenPassive"])


# ------------------------------------------------------------------ lfhttpd's own forms


def own(tmp_path, listen_line, extra=""):
    return Server(tmp_path, None, conf=listen_line + "threads 2;\nerror_log stderr info;\n"
                  "access_log off;\nshutdown_timeout 5s;\n" + extra +
                  "server { return 200 \"ok\\n\"; }\n")


def test_backlog_default_stays_4096(tmp_path):
    server = own(tmp_path, "listen 127.0.0.1:0;\n")
    try:
        queues = listen_queues(server.port)
        with open("/proc/sys/net/core/somaxconn") as f:
            cap = int(f.read())
        assert queues and all(q == min(4096, cap) for q in queues), queues
    finally:
        server.stop()


def test_top_level_listen_takes_the_socket_parameters(tmp_path):
    server = own(tmp_path, "listen 127.0.0.1:0 backlog=77 rcvbuf=32k;\n")
    try:
        queues = listen_queues(server.port)
        assert queues and all(q == 77 for q in queues), queues
        with opened(server.port):
            rb, _ = skmem(server.port)
        assert rb == 2 * 32 * 1024
    finally:
        server.stop()


def test_reload_with_a_changed_socket_parameter_is_refused_and_says_so(tmp_path):
    server = own(tmp_path, "listen 127.0.0.1:0 backlog=77;\n")
    try:
        with open(server.conf_path) as f:
            text = f.read()
        with open(server.conf_path, "w") as f:
            f.write(text.replace("backlog=77", "backlog=78"))
        server.proc.send_signal(signal.SIGHUP)
        assert wait_until(lambda: "not reloaded" in server.error_log(), scaled(10))
        assert "changing `listen` (backlog=" in server.error_log()
        assert all(q == 77 for q in listen_queues(server.port))
    finally:
        server.stop()


# ------------------------------------------------------------------------ ipv6only


def dual_port():
    """A port free on both 127.0.0.1 and [::]."""
    for _ in range(20):
        port = free_port()
        try:
            with socket.socket(socket.AF_INET6) as s:
                s.bind(("::", port))
            return port
        except OSError:
            continue
    pytest.skip("no port free on both 127.0.0.1 and [::] " + BY_DESIGN + " " +
                environment_fact("no dual-stack port"))


@pytest.mark.parametrize("flag, answers_ipv4", [("off", True), ("on", False)])
def test_ipv6only_decides_whether_a_v6_wildcard_takes_ipv4(tmp_path, flag, answers_ipv4):
    if not ipv6_loopback_works():
        pytest.skip("no IPv6 loopback on this machine " + BY_DESIGN + " " +
                    environment_fact("no IPv6 loopback"))
    port = dual_port()
    server = own(tmp_path, f"listen [::]:{port} ipv6only={flag};\n")
    try:
        assert get("::1", port) == (200, b"ok\n")
        if answers_ipv4:
            assert get("127.0.0.1", port) == (200, b"ok\n")
        else:
            with pytest.raises(ConnectionRefusedError):
                get("127.0.0.1", port)
    finally:
        server.stop()


def test_nginx_ipv6only_off_takes_ipv4_too(tmp_path):
    if not ipv6_loopback_works():
        pytest.skip("no IPv6 loopback on this machine " + BY_DESIGN + " " +
                    environment_fact("no IPv6 loopback"))
    site = 'server { listen [::]:{port0} ipv6only=off; return 200 "ok\\n"; }\n'
    nginx = Nginx(tmp_path / "nginx", None, site, http=True)
    try:
        assert get("127.0.0.1", nginx.port) == (200, b"ok\n")
    finally:
        nginx.stop()


def test_h5bp_listen_lines_load_and_serve_on_both_families(tmp_path):
    port = dual_port()
    site = (f"server {{ listen {port} default_server deferred;\n"
            f"  listen [::]:{port} default_server deferred ipv6only=on;\n"
            '  return 200 "h5bp\\n"; }\n')
    server = Server(tmp_path, None, conf="threads 2;\nerror_log stderr info;\naccess_log off;\n"
                    "shutdown_timeout 5s;\nhttp {\n" + site + "}\n")
    try:
        assert get("127.0.0.1", port) == (200, b"h5bp\n")
        if ipv6_loopback_works():
            assert get("::1", port) == (200, b"h5bp\n")
    finally:
        server.stop()


# ------------------------------------------------------------------- bind and wildcards

WILD = """
server { listen {port0}; return 200 "wildcard\\n"; }
server { listen 127.0.0.1:{port0}; return 200 "loopback\\n"; }
"""


@pytest.fixture(scope="module")
def wild(tmp_path_factory):
    yield from nginx_beside_lfhttpd(tmp_path_factory, WILD)


@pytest.fixture(params=["nginx", "lfhttpd"])
def wild_port(request, wild):
    return (wild[0] if request.param == "nginx" else wild[1])[0]


def test_address_without_bind_is_accepted_by_the_wildcard_socket(wild_port):
    listening = ss("-ltnH", f"sport = :{wild_port}")
    assert "127.0.0.1:" not in listening and "0.0.0.0:" in listening, listening


def test_address_without_bind_still_chooses_its_own_servers(wild_port):
    assert get("127.0.0.1", wild_port) == (200, b"loopback\n")
    assert get("127.0.0.2", wild_port) == (200, b"wildcard\n")


def test_bind_beside_the_wildcard_of_its_port_is_refused_at_check(tmp_path):
    code, out, conf = check(tmp_path, "server { listen 18080; }\n"
                                      "server { listen 127.0.0.1:18080 bind; }\n")
    assert code != 0
    assert f"{conf}:5: listen: 18080 and 127.0.0.1:18080 cannot both be listened on" in out


def test_ipv6only_off_beside_an_ipv4_address_of_its_port_is_refused_at_check(tmp_path):
    code, out, conf = check(tmp_path, "server { listen 18080; listen [::]:18080 ipv6only=off; }\n")
    assert code != 0
    assert f"{conf}:4: listen: 18080 and [::]:18080 cannot both be listened on" in out


def test_bind_address_gets_its_own_socket(tmp_path):
    port = free_port()
    server = Server(tmp_path, None, conf="threads 2;\nerror_log stderr info;\n"
                    "access_log off;\nshutdown_timeout 5s;\nhttp {\n"
                    f'server {{ listen 127.0.0.1:{port} bind; return 200 "own\\n"; }}\n}}\n')
    try:
        assert "127.0.0.1:%d" % port in ss("-ltnH", f"sport = :{port}")
        assert get("127.0.0.1", port) == (200, b"own\n")
    finally:
        server.stop()


# ------------------------------------------------------------ refused and ignored words


def test_accept_filter_is_ignored_with_a_notice_as_nginx_on_linux(tmp_path):
    site = "server { listen 127.0.0.1:18080 accept_filter=httpready; }\n"
    code, out, conf = check(tmp_path, site)
    assert code == 0, out
    assert (f'{conf}:4: listen: "accept_filter=httpready": ignored: accept filters are '
            "FreeBSD's") in out
    ncode, nout = nginx_check(tmp_path, site)
    assert ncode == 0 and "not supported on this platform, ignored" in nout, nout


def test_setfib_is_refused_as_nginx_on_linux(tmp_path):
    site = "server { listen 127.0.0.1:18080 setfib=1; }\n"
    code, out, conf = check(tmp_path, site)
    assert code != 0
    assert f'{conf}:4: listen: unsupported parameter "setfib=1" (setfib is FreeBSD\'s' in out
    ncode, nout = nginx_check(tmp_path, site)
    assert ncode != 0 and 'invalid parameter "setfib=1"' in nout, nout


@pytest.mark.parametrize("word, message", [
    ("backlog=0", 'invalid backlog "backlog=0"'),
    ("backlog=-1", 'invalid backlog "backlog=-1"'),
    ("rcvbuf=1x", 'invalid rcvbuf "rcvbuf=1x"'),
    ("sndbuf=1g", 'invalid sndbuf "sndbuf=1g"'),
    ("fastopen=x", 'invalid fastopen "fastopen=x"'),
    ("so_keepalive=::", 'invalid so_keepalive value: "::"'),
    ("so_keepalive=0:0:0", 'invalid so_keepalive value: "0:0:0"'),
    ("so_keepalive=:10:x", 'invalid so_keepalive value: ":10:x"'),
    ("so_keepalive=1ms", 'invalid so_keepalive value: "1ms"'),
])
def test_invalid_parameter_value_is_refused_as_nginx_refuses_it(tmp_path, word, message):
    site = f"server {{ listen 127.0.0.1:18080 {word}; }}\n"
    code, out, conf = check(tmp_path, site)
    assert code != 0
    assert f"{conf}:4: listen: {message}" in out, out
    ncode, nout = nginx_check(tmp_path, site)
    assert ncode != 0 and message in nout, nout


def test_invalid_ipv6only_flag_is_refused(tmp_path):
    code, out, conf = check(tmp_path, "server { listen [::]:18080 ipv6only=yes; }\n")
    assert code != 0
    assert f'{conf}:4: listen: invalid ipv6only flags "yes"' in out


@pytest.mark.parametrize("word", ["so_keepalive=1m::", "so_keepalive=:1h30m:", "so_keepalive=::5",
                                  "fastopen=0", "backlog=1", "rcvbuf=8192", "sndbuf=1m",
                                  "ipv6only=on", "bind", "deferred"])
def test_valid_parameter_loads_as_in_nginx(tmp_path, word):
    site = f"server {{ listen 127.0.0.1:18080 {word}; }}\n"
    code, out, _ = check(tmp_path, site)
    assert code == 0, out
    ncode, nout = nginx_check(tmp_path, site)
    assert ncode == 0, nout


# ------------------------------------------------------------- one listen says the options


def test_socket_parameters_in_two_servers_for_one_address_are_refused(tmp_path):
    site = ("server { listen 127.0.0.1:18080 backlog=10; }\n"
            "server { listen 127.0.0.1:18080 rcvbuf=8k; }\n")
    code, out, conf = check(tmp_path, site)
    assert code != 0
    assert (f"{conf}:5: listen: duplicate listen options for 127.0.0.1:18080 (the first at "
            f"{conf}:4)") in out, out
    ncode, nout = nginx_check(tmp_path, site)
    assert ncode != 0 and "duplicate listen options for 127.0.0.1:18080" in nout, nout


def test_reuseport_in_two_servers_for_one_address_is_refused_as_nginx(tmp_path):
    site = ("server { listen 127.0.0.1:18080 reuseport; }\n"
            "server { listen 127.0.0.1:18080 reuseport; }\n")
    code, out, _ = check(tmp_path, site)
    assert code != 0
    assert "duplicate listen options for 127.0.0.1:18080" in out, out
    ncode, nout = nginx_check(tmp_path, site)
    assert ncode != 0 and "duplicate listen options for 127.0.0.1:18080" in nout, nout


def test_socket_parameters_in_one_server_of_an_address_load(tmp_path):
    site = ("server { listen 127.0.0.1:18080; }\n"
            "server { listen 127.0.0.1:18080 backlog=10 deferred; }\n")
    code, out, _ = check(tmp_path, site)
    assert code == 0, out
    ncode, nout = nginx_check(tmp_path, site)
    assert ncode == 0, nout


def test_the_one_servers_parameters_apply_to_the_shared_socket(tmp_path):
    port = free_port()
    site = (f'server {{ listen 127.0.0.1:{port}; return 200 "a\\n"; }}\n'
            f'server {{ listen 127.0.0.1:{port} backlog=55; server_name b; '
            'return 200 "b\\n"; }\n')
    server = Server(tmp_path, None, conf="threads 2;\nerror_log stderr info;\n"
                    "access_log off;\nshutdown_timeout 5s;\nhttp {\n" + site + "}\n")
    try:
        queues = listen_queues(port)
        assert queues and all(q == 55 for q in queues), queues
    finally:
        server.stop()
