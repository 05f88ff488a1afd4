"""`listen unix:PATH`, as nginx: a Unix-domain socket at the top level and in servers, its
file made readable and writable by all and removed at exit, a stale one replaced at start
(nginx refuses to start on one), kept across a reload; its clients' $remote_addr is
`unix:`, $server_addr `unix:PATH`, $server_port and $remote_port empty; `allow unix:` and
`deny unix:` match them alone; `proxy_pass http://unix:PATH:` reaches such a listener.
Each server also listens on a loopback TCP port (the harness learns it from the log)."""
import os
import signal
import socket
import stat
import subprocess

import pytest

from conftest import BIN, Nginx, scaled, wait_until


def over_unix(path, request=b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"):
    """One request on a new connection to the Unix socket at path: (status, body)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(scaled(10))
        s.connect(str(path))
        s.sendall(request)
        data = b""
        while d := s.recv(65536):
            data += d
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body


def over_tcp(server, path="/"):
    with socket.create_connection((server.host, server.port), timeout=scaled(10)) as s:
        s.sendall(b"GET " + path.encode() + b" HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        data = b""
        while d := s.recv(65536):
            data += d
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body


def conf(body, top=""):
    return ("listen 127.0.0.1:0;\nerror_log stderr info;\naccess_log off;\nthreads 4;\n" +
            top + body)


def files(docroot):
    """A docroot with a file, as access rules run before a file is answered (a `return`
    comes first, as nginx's rewrite phase does)."""
    (docroot / "f.txt").write_bytes(b"ok\n")
    return f'root "{docroot}";'


FILE = b"GET /f.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"


VARS = 'return 200 "$remote_addr|$server_addr|$server_port|$remote_port\\n";'


def test_unix_listener_variables_are_nginxs(tmp_path, start_server, docroot):
    sock_n, sock_l = tmp_path / "n.sock", tmp_path / "l.sock"
    theirs = Nginx(tmp_path / "nginx", docroot,
                   "server { listen 127.0.0.1:{port0}; listen unix:%s; %s }\n" % (sock_n, VARS),
                   http=True)
    try:
        want = over_unix(sock_n)
    finally:
        theirs.stop()
    start_server(docroot, conf=conf("server { listen unix:%s; %s }\n" % (sock_l, VARS)))
    got = over_unix(sock_l)
    assert want == (200, b"unix:|unix:%s||\n" % str(sock_n).encode())
    assert got == (200, b"unix:|unix:%s||\n" % str(sock_l).encode())


def test_top_level_listen_unix_answers(tmp_path, start_server, docroot):
    (docroot / "f.txt").write_bytes(b"file\n")
    sock = tmp_path / "u.sock"
    start_server(docroot, conf=conf(f'root "{docroot}";\n', top=f"listen unix:{sock};\n"))
    assert over_unix(sock, b"GET /f.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n") == \
        (200, b"file\n")


def test_unix_socket_file_is_read_write_for_all(tmp_path, start_server, docroot):
    sock = tmp_path / "u.sock"
    start_server(docroot, conf=conf(f"server {{ listen unix:{sock}; {VARS} }}\n"))
    mode = os.stat(sock).st_mode
    assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o666


def test_unix_socket_file_is_removed_at_exit(tmp_path, start_server, docroot):
    sock = tmp_path / "u.sock"
    s = start_server(docroot, conf=conf(f"server {{ listen unix:{sock}; {VARS} }}\n"))
    assert sock.exists()
    assert s.stop() == 0
    assert not os.path.lexists(sock)


def test_a_stale_unix_socket_file_is_replaced_at_start(tmp_path, start_server, docroot):
    """A socket file left by a process that is gone: nobody accepts there."""
    sock = tmp_path / "u.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as old:
        old.bind(str(sock))
    assert os.path.lexists(sock)
    s = start_server(docroot, conf=conf(f"server {{ listen unix:{sock}; {VARS} }}\n"))
    assert over_unix(sock)[0] == 200
    assert "replacing a stale socket file" in s.error_log()


def test_a_unix_socket_in_use_is_address_already_in_use(tmp_path, start_server, docroot):
    """A second server on the same path fails, and leaves the first one's socket alone."""
    sock = tmp_path / "u.sock"
    start_server(docroot, conf=conf(f"server {{ listen unix:{sock}; {VARS} }}\n"))
    path = tmp_path / "second.conf"
    path.write_text(conf(f"server {{ listen unix:{sock}; {VARS} }}\n"))
    r = subprocess.run([BIN, "-c", str(path)], capture_output=True, text=True,
                       timeout=scaled(20))
    assert r.returncode != 0
    assert f"listen on unix:{sock}: Address already in use" in r.stderr
    assert over_unix(sock)[0] == 200


def test_a_file_that_is_not_a_socket_is_not_replaced(tmp_path, start_server, docroot):
    sock = tmp_path / "u.sock"
    sock.write_text("data")
    path = tmp_path / "c.conf"
    path.write_text(conf(f"server {{ listen unix:{sock}; {VARS} }}\n"))
    r = subprocess.run([BIN, "-c", str(path)], capture_output=True, text=True,
                       timeout=scaled(20))
    assert r.returncode != 0 and "Address already in use" in r.stderr
    assert sock.read_text() == "data"


def test_the_server_on_a_unix_socket_is_chosen_by_its_path(tmp_path, start_server, docroot):
    a, b = tmp_path / "a.sock", tmp_path / "b.sock"
    s = start_server(docroot, conf=conf(
        f'server {{ listen unix:{a}; return 200 "a\\n"; }}\n'
        f'server {{ listen unix:{b}; return 200 "b\\n"; }}\n'
        'server { listen 127.0.0.1:0; return 200 "tcp\\n"; }\n'))
    assert over_unix(a) == (200, b"a\n")
    assert over_unix(b) == (200, b"b\n")
    assert over_tcp(s) == (200, b"tcp\n")


def test_the_default_server_of_a_unix_socket_is_chosen_by_name(tmp_path, start_server,
                                                               docroot):
    sock = tmp_path / "u.sock"
    start_server(docroot, conf=conf(
        f'server {{ listen unix:{sock}; server_name one; return 200 "one\\n"; }}\n'
        f'server {{ listen unix:{sock} default_server; server_name two; '
        'return 200 "two\\n"; }\n'))
    req = b"GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n"
    assert over_unix(sock, req % b"one") == (200, b"one\n")
    assert over_unix(sock, req % b"other") == (200, b"two\n")


def test_a_unix_socket_has_one_listener_with_several_groups(tmp_path, start_server, docroot):
    sock = tmp_path / "u.sock"
    s = start_server(docroot, conf=conf(f"server {{ listen unix:{sock}; {VARS} }}\n",
                                        top="groups 2;\n"))
    for _ in range(8):
        assert over_unix(sock)[0] == 200
    assert s.error_log().count(f"listening on unix:{sock} (class default)") == 1


def test_deny_unix_refuses_unix_clients_alone(tmp_path, start_server, docroot):
    sock = tmp_path / "u.sock"
    s = start_server(docroot, conf=conf(f"listen unix:{sock};\n{files(docroot)}\ndeny unix:;\n"))
    assert over_unix(sock, FILE)[0] == 403
    assert over_tcp(s, "/f.txt")[0] == 200


def test_allow_unix_lets_unix_clients_by_before_deny_all(tmp_path, start_server, docroot):
    sock = tmp_path / "u.sock"
    s = start_server(docroot, conf=conf(f"listen unix:{sock};\n{files(docroot)}\n"
                                        "allow unix:;\ndeny all;\n"))
    assert over_unix(sock, FILE)[0] == 200
    assert over_tcp(s, "/f.txt")[0] == 403


def test_an_address_rule_does_not_match_a_unix_client(tmp_path, start_server, docroot):
    sock = tmp_path / "u.sock"
    start_server(docroot, conf=conf(f"listen unix:{sock};\n{files(docroot)}\n"
                                    "deny 0.0.0.0/0;\ndeny ::/0;\n"))
    assert over_unix(sock, FILE)[0] == 200


def test_a_reload_keeps_the_unix_socket(tmp_path, start_server, docroot):
    sock = tmp_path / "u.sock"
    s = start_server(docroot, conf=conf(
        f'server {{ listen unix:{sock}; return 200 "before\\n"; }}\n'))
    assert over_unix(sock) == (200, b"before\n")
    with open(s.conf_path, "w") as f:
        f.write(conf(f'server {{ listen unix:{sock}; return 200 "after\\n"; }}\n'))
    before = len(s.error_log())
    s.proc.send_signal(signal.SIGHUP)
    assert wait_until(lambda: "configuration reloaded" in s.error_log()[before:], scaled(10))
    assert over_unix(sock) == (200, b"after\n")
    assert stat.S_ISSOCK(os.stat(sock).st_mode)


def test_proxy_pass_reaches_a_unix_listener(tmp_path, start_server, docroot):
    """One lfhttpd listens on a Unix socket; another proxies to it by path."""
    sock = tmp_path / "up.sock"
    start_server(docroot, conf=conf(
        f"server {{ listen unix:{sock}; "
        'location / { return 200 "up $uri $remote_addr\\n"; } }\n'))
    front = start_server(docroot, conf=conf(
        f"server {{ location /p/ {{ proxy_pass http://unix:{sock}:/q/; }} }}\n"))
    assert over_tcp(front, "/p/x") == (200, b"up /q/x unix:\n")


def test_a_unix_listen_path_too_long_is_a_config_error(tmp_path, docroot):
    """A socket's path has at most 107 bytes (sun_path's, its NUL aside)."""
    path = tmp_path / "c.conf"
    path.write_text(conf("server { listen unix:/" + "x" * 107 + "; }\n"))
    r = subprocess.run([BIN, "-t", "-c", str(path)], capture_output=True, text=True,
                       timeout=scaled(20))
    assert r.returncode != 0 and f"{path}:5" in r.stderr and "listen" in r.stderr


def test_set_real_ip_from_unix_trusts_a_unix_client_as_nginx(tmp_path, start_server, docroot):
    text = ("server { listen 127.0.0.1:{port0}; listen unix:%s; set_real_ip_from unix:; "
            "real_ip_header X-Real-IP; return 200 \"$remote_addr\\n\"; }\n")
    req = b"GET / HTTP/1.1\r\nHost: t\r\nX-Real-IP: 192.0.2.7\r\nConnection: close\r\n\r\n"
    sock_n, sock_l = tmp_path / "n.sock", tmp_path / "l.sock"
    theirs = Nginx(tmp_path / "nginx", docroot, text % sock_n, http=True)
    try:
        want = over_unix(sock_n, req)
    finally:
        theirs.stop()
    start_server(docroot, conf=conf(text.replace("127.0.0.1:{port0}", "127.0.0.1:0") % sock_l))
    assert over_unix(sock_l, req) == want == (200, b"192.0.2.7\n")


def test_a_unix_listener_with_ssl_speaks_tls(tmp_path, start_server, docroot):
    import ssl
    from tls_harness import self_signed, ssl_lines
    pair = self_signed(tmp_path / "pki", "localhost")
    sock = tmp_path / "t.sock"
    start_server(docroot, conf=conf(
        f"server {{ listen unix:{sock} ssl; {ssl_lines(pair)} "
        'return 200 "$https $server_addr\\n"; }\n'))
    ctx = ssl.create_default_context(cafile=str(pair.cert))
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as raw:
        raw.settimeout(scaled(10))
        raw.connect(str(sock))
        with ctx.wrap_socket(raw, server_hostname="localhost") as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            data = b""
            while d := s.recv(65536):
                data += d
    assert data.split(b"\r\n")[0] == b"HTTP/1.1 200 OK"
    assert data.endswith(b"on unix:%s\n" % str(sock).encode())


@pytest.mark.parametrize("strategy", ["leader_followers", "half_sync_half_async",
                                      "thread_per_connection"])
def test_a_unix_listener_serves_with_each_concurrency_strategy(tmp_path, start_server,
                                                               docroot, strategy):
    sock = tmp_path / "u.sock"
    start_server(docroot, conf=conf(f"server {{ listen unix:{sock}; {VARS} }}\n",
                                    top=f"concurrency {strategy};\n"))
    for _ in range(4):
        assert over_unix(sock)[0] == 200
    assert os.path.lexists(sock)


def test_a_dash_in_a_unix_socket_path_is_a_name_not_a_port_range(tmp_path, start_server,
                                                                  docroot):
    sock = tmp_path / "php-fpm-a.sock"
    start_server(docroot, conf=conf(f"server {{ listen unix:{sock}; {VARS} }}\n"))
    assert over_unix(sock)[0] == 200
