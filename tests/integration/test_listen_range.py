"""`listen ADDR:FIRST-LAST`, a port range, as nginx takes it: the server listens on every
port of the range, each an address of its own (another server may be its default there),
and a range that ends before it starts, or leaves 1..65535, is refused at load.

The same configuration is run by nginx and by lfhttpd on ranges of free ports; each test
sends the same request to both and compares the answers.
"""
import random
import socket
import subprocess
import time

import pytest

from conftest import BIN, NGINX, Nginx, Server, check_clean_exit, scaled

SITE = r"""
server {
    listen 127.0.0.1:{first}-{last};
    server_name a.test;
    default_type text/plain;
    return 200 "a $server_port\n";
}
server {
    listen 127.0.0.1:{middle} default_server;
    server_name b.test;
    default_type text/plain;
    return 200 "b $server_port\n";
}
"""


def free_range(n):
    """n consecutive ports on 127.0.0.1 that nothing listens on right now."""
    for _ in range(200):
        base = random.randrange(20000, 60000)
        socks = []
        try:
            for p in range(base, base + n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free range of ports")


def site(base):
    return (SITE.replace("{first}", str(base)).replace("{last}", str(base + 2))
            .replace("{middle}", str(base + 1)))


def answers(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def wait_answering(ports):
    deadline = time.monotonic() + scaled(10)
    while time.monotonic() < deadline:
        if all(answers(p) for p in ports):
            return True
        time.sleep(0.05)
    return False


@pytest.fixture(scope="module")
def daemons(tmp_path_factory):
    for attempt in range(3):  # a range picked may be taken before a server binds it
        theirs_base, ours_base = free_range(3), free_range(3)
        if abs(theirs_base - ours_base) < 3:
            continue
        theirs = Nginx(tmp_path_factory.mktemp("nginx"), None, site(theirs_base), http=True)
        if not wait_answering(range(theirs_base, theirs_base + 3)):
            theirs.stop()
            continue
        try:
            ours = Server(tmp_path_factory.mktemp("lfhttpd"), None,
                          conf="threads 2;\nerror_log stderr debug;\nshutdown_timeout 5s;\n"
                          + site(ours_base))
        except RuntimeError as e:
            theirs.stop()
            if "in use" in str(e) and attempt < 2:
                continue
            raise
        break
    else:
        pytest.fail("no free ranges of ports")
    yield theirs_base, ours_base
    theirs.stop()
    check_clean_exit(ours)


def body(port, host):
    head = f"GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=scaled(10)) as s:
        s.sendall(head.encode())
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    return data.partition(b"\r\n\r\n")[2].decode()


def same(daemons, offset, host, expected):
    """Port base+offset of each server's range, asked for host, answers expected (with
    {port} the port asked)."""
    for who, base in zip(("nginx", "lfhttpd"), daemons):
        assert body(base + offset, host) == expected.format(port=base + offset), who


def test_first_port_of_the_range_answers(daemons):
    same(daemons, 0, "x.test", "a {port}\n")


def test_last_port_of_the_range_answers(daemons):
    same(daemons, 2, "x.test", "a {port}\n")


def test_middle_port_has_its_own_default_server(daemons):
    same(daemons, 1, "x.test", "b {port}\n")


def test_range_s_server_is_found_by_name_on_a_shared_port(daemons):
    same(daemons, 1, "a.test", "a {port}\n")


# --------------------------------------------------------------- at load


def nginx_t(tmp_path, server_text):
    d = tmp_path / "nginx-t"
    d.mkdir(exist_ok=True)
    conf = d / "nginx.conf"
    conf.write_text(f"error_log {d}/error.log;\npid {d}/nginx.pid;\nevents {{}}\n"
                    f"http {{\n    access_log off;\n{server_text}}}\n")
    r = subprocess.run([NGINX, "-t", "-p", f"{d}/", "-c", str(conf)], capture_output=True,
                       text=True)
    return r.returncode, r.stderr


def lfhttpd_t(tmp_path, server_text):
    conf = tmp_path / "lf.conf"
    conf.write_text(server_text)
    r = subprocess.run([BIN, "-t", "-c", str(conf)], capture_output=True, text=True)
    return r.returncode, r.stderr, str(conf)


def test_range_that_ends_before_it_starts_is_refused_at_load(tmp_path):
    text = "server {\n listen 127.0.0.1:8003-8000;\n}\n"
    rc, err = nginx_t(tmp_path, text)
    assert rc != 0 and 'invalid port range in "127.0.0.1:8003-8000"' in err, err
    rc, err, conf = lfhttpd_t(tmp_path, text)
    assert rc != 0 and f"{conf}:2" in err and \
        'invalid port range in "127.0.0.1:8003-8000"' in err, err


def test_range_past_the_last_port_is_refused_at_load(tmp_path):
    text = "server {\n listen 127.0.0.1:8000-70000;\n}\n"
    rc, err = nginx_t(tmp_path, text)
    assert rc != 0 and "invalid port" in err, err
    rc, err, conf = lfhttpd_t(tmp_path, text)
    assert rc != 0 and f"{conf}:2" in err and "127.0.0.1:8000-70000" in err, err


def test_bare_port_range_is_taken_at_load(tmp_path):
    text = "server {\n listen 8000-8003;\n}\n"
    assert nginx_t(tmp_path, text)[0] == 0
    rc, err, _ = lfhttpd_t(tmp_path, text)
    assert rc == 0, err
