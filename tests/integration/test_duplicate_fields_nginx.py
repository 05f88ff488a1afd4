"""A request field that may appear once, sent twice: refused 400 as nginx 1.22 refuses it,
so that no two readers of a request (this server, an upstream behind it) can take
different ones. nginx is the oracle: each field is sent twice to nginx and to lfhttpd, and
the statuses must match. (Content-Type and Range twice are refused here and taken by nginx:
a deliberate difference, in the migration page.)"""
import socket

import pytest

from conftest import nginx_beside_lfhttpd

SITE = r"""
server {
    listen 127.0.0.1:{port0};
    root ROOT;
}
"""


@pytest.fixture(scope="module")
def daemons(tmp_path_factory):
    """(nginx's port, lfhttpd's port)."""
    root = tmp_path_factory.mktemp("www")
    (root / "a.txt").write_text("hello\n")
    for theirs, ours in nginx_beside_lfhttpd(tmp_path_factory, SITE.replace("ROOT", str(root))):
        yield theirs[0], ours[0]


def status(port, fields):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"GET /a.txt HTTP/1.1\r\nHost: x\r\n" + b"".join(f.encode() + b"\r\n"
                                                                 for f in fields) +
                  b"Connection: close\r\n\r\n")
        return int(s.recv(64).split(b" ")[1])


@pytest.mark.parametrize("field", [
    "Authorization: Basic dXNlcjpzZWNyZXQ=", "Content-Range: bytes 0-1/2",
    "Expect: 100-continue", "Transfer-Encoding: chunked", "Host: x", "Content-Length: 0",
    "If-Modified-Since: Mon, 28 Sep 1970 06:00:00 GMT", "If-None-Match: \"a\"",
    "If-Match: \"a\"", "If-Range: \"a\"",
])
def test_a_field_that_may_appear_once_sent_twice_is_400_as_nginx(daemons, field):
    theirs, ours = daemons
    assert status(theirs, [field, field]) == 400
    assert status(ours, [field, field]) == 400


@pytest.mark.parametrize("field", ["User-Agent: a", "Referer: http://a/", "Cookie: a=b",
                                   "X-Forwarded-For: 192.0.2.1", "Accept-Encoding: gzip"])
def test_a_field_nginx_takes_twice_is_taken(daemons, field):
    theirs, ours = daemons
    assert status(theirs, [field, field]) == 200
    assert status(ours, [field, field]) == 200
