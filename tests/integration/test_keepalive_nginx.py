"""nginx's keep-alive rules that depend on the request and the connection's age, against
nginx: `keepalive_disable` (MSIE 6 and older on a POST, Safari on Mac OS X), `keepalive_time`
(a connection this old answers its request and closes), the `Connection: keep-alive` every
kept HTTP/1.1 answer carries in a file with nginx's `http { }`, and `$connection_time`,
`$connection_requests`. One configuration, inside `http { }`, is run by nginx and by
lfhttpd; each test sends the same requests to both on one connection and compares what
decides keep-alive: the Connection field of each answer, and whether the server closed.
"""
import os
import re
import socket
import time

import pytest

from conftest import Nginx, Server, check_clean_exit, free_port, scaled, with_ports

SITE = """
server {
    listen 127.0.0.1:{port0};
    root ROOT;
    add_header X-Conn $connection_requests:$connection_time;
    location / { }
    location /safari { keepalive_disable safari; }
    location /none { keepalive_disable none; }
    location /time { keepalive_time 1s; }
}
"""


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    root = tmp_path_factory.mktemp("kaw")
    for name in ("index.html", "safari", "none", "time"):
        (root / name).write_text("x\n")
    text = SITE.replace("ROOT", str(root))
    theirs = Nginx(tmp_path_factory.mktemp("nginx"), None, text, http=True)
    d = tmp_path_factory.mktemp("lfhttpd")
    try:
        ours = Server(d, None, conf="error_log stderr info;\naccess_log off;\nhttp {\n" +
                      with_ports(text, [free_port()]) + "}\n")
    except BaseException:
        theirs.stop()
        raise
    yield {"nginx": theirs.port, "lfhttpd": ours.port}
    theirs.stop()
    check_clean_exit(ours)


def on_one_connection(port, requests, pause=0.0):
    """Send each request on one connection (after `pause` seconds before the second);
    return [(Connection field, X-Conn field)...] of the answers read, and whether the
    server closed the connection after the last."""
    out = []
    s = socket.create_connection(("127.0.0.1", port), timeout=scaled(5))
    closed = False
    try:
        for i, (method, path, ua) in enumerate(requests):
            if i == 1 and pause:
                time.sleep(pause)
            body = b"x" if method == "POST" else b""
            head = (f"{method} {path} HTTP/1.1\r\nHost: t\r\nUser-Agent: {ua}\r\n" +
                    (f"Content-Length: {len(body)}\r\n" if body else "") + "\r\n")
            try:
                s.sendall(head.encode() + body)
            except OSError:
                closed = True
                break
            data = b""
            while b"\r\n\r\n" not in data or len(data) < data.index(b"\r\n\r\n") + 6:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
            if not data:
                closed = True
                break
            heads = data.split(b"\r\n\r\n", 1)[0].decode("latin-1")
            conn = re.search(r"(?im)^Connection: *(\S+)", heads)
            xc = re.search(r"(?im)^X-Conn: *(\S+)", heads)
            out.append((conn.group(1).lower() if conn else None, xc.group(1) if xc else None))
        s.settimeout(scaled(0.5))
        try:
            closed = closed or s.recv(1) == b""
        except socket.timeout:
            pass
    finally:
        s.close()
    return out, closed


def connection_fields(both, requests, pause=0.0):
    """{server: ([Connection...], closed)} for both servers."""
    got = {}
    for name, port in both.items():
        answers, closed = on_one_connection(port, requests, pause)
        got[name] = ([a[0] for a in answers], closed)
    return got


def test_a_kept_http11_answer_says_connection_keep_alive_as_nginx(both):
    got = connection_fields(both, [("GET", "/", "t")])
    assert got["nginx"] == (["keep-alive"], False)
    assert got["lfhttpd"] == got["nginx"]


def test_keepalive_disable_msie6_closes_after_an_old_msies_post_as_nginx(both):
    got = connection_fields(both, [("POST", "/", "Mozilla/4.0 (compatible; MSIE 5.0)")])
    assert got["nginx"] == (["close"], True)
    assert got["lfhttpd"] == got["nginx"]


def test_keepalive_disable_msie6_keeps_an_old_msies_get_as_nginx(both):
    got = connection_fields(both, [("GET", "/", "Mozilla/4.0 (compatible; MSIE 5.0)")])
    assert got["nginx"] == (["keep-alive"], False)
    assert got["lfhttpd"] == got["nginx"]


def test_keepalive_disable_msie6_keeps_a_newer_msies_post_as_nginx(both):
    got = connection_fields(both, [("POST", "/", "Mozilla/4.0 (compatible; MSIE 7.0)")])
    assert got["nginx"] == (["keep-alive"], False)
    assert got["lfhttpd"] == got["nginx"]


def test_keepalive_disable_safari_closes_after_safari_on_mac_os_x_as_nginx(both):
    ua = "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_7) Safari/7534.48.3"
    got = connection_fields(both, [("GET", "/safari", ua)])
    assert got["nginx"] == (["close"], True)
    assert got["lfhttpd"] == got["nginx"]


def test_keepalive_disable_none_keeps_an_old_msies_post_as_nginx(both):
    got = connection_fields(both, [("POST", "/none", "Mozilla/4.0 (compatible; MSIE 5.0)")])
    assert got["nginx"] == (["keep-alive"], False)
    assert got["lfhttpd"] == got["nginx"]


def test_keepalive_time_closes_a_connection_older_than_it_as_nginx(both):
    got = connection_fields(both, [("GET", "/time", "t"), ("GET", "/time", "t")], pause=1.2)
    assert got["nginx"] == (["keep-alive", "close"], True)
    assert got["lfhttpd"] == got["nginx"]


def test_connection_requests_and_time_count_from_the_connections_start_as_nginx(both):
    for name, port in both.items():
        answers, _ = on_one_connection(port, [("GET", "/", "t"), ("GET", "/", "t")],
                                       pause=0.3)
        first, second = answers[0][1], answers[1][1]
        n1, t1 = first.split(":")
        assert n1 == "1" and re.fullmatch(r"\d+\.\d{3}", t1), (name, first)
        n, t = second.split(":")
        assert n == "2" and re.fullmatch(r"\d+\.\d{3}", t) and float(t) >= 0.3, (name, second)
        # the first answer's time is the connection's age then: less than the pause made
        # before the second (a busy machine may take tens of milliseconds to answer)
        assert float(t1) < 0.3 and float(t1) < float(t), (name, first, second)
