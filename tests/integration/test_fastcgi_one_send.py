"""An answer the application gave whole goes to the client in one send: PHP-FPM writes a
small page's STDOUT records and its END_REQUEST at once, lfhttpd reads them in one read,
and the head, the body and (chunked, PHP's answers having no length) the last chunk leave
in one write, one TCP segment, as nginx's one writev. Counted on the client's side: the
data segments its socket received (TCP_INFO's tcpi_data_segs_in), over keep-alive requests
one at a time, so that no two answers share a segment. Each way of passing: a connection per
request (Debian's snippet), a kept one, and with fastcgi_buffering on."""
import os
import socket
import struct

import pytest

from conftest import check_clean_exit
from fastcgi_harness import fpm, lfhttpd, php_root  # noqa: F401

REQUESTS = 20
DATA_SEGS_IN = 152  # struct tcp_info: __u32 tcpi_data_segs_in (Linux 4.6)

PASSING = {
    "a connection per request": ("", "fastcgi_pass unix:{sock};"),
    "kept": ("upstream php {{ server unix:{sock}; keepalive 2; }}\n",
             "fastcgi_pass php; fastcgi_keep_conn on;"),
    "buffering on": ("", "fastcgi_pass unix:{sock}; fastcgi_buffering on;"),
}


def data_segments_in(sock):
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    return struct.unpack_from("I", info, DATA_SEGS_IN)[0]


@pytest.fixture(params=list(PASSING))
def site(request, tmp_path, fpm):  # noqa: F811
    root = php_root(tmp_path)
    with open(os.path.join(root, "hello.php"), "w") as f:
        f.write("<?php echo 'hello';\n")
    top, passing = (t.format(sock=fpm.sock) for t in PASSING[request.param])
    s = lfhttpd(tmp_path / "lf", root,
                f"    location ~ \\.php$ {{ {passing} include fastcgi.conf; }}", top=top)
    yield s
    check_clean_exit(s)


def test_a_chunked_answer_read_whole_from_the_application_leaves_in_one_segment(site):
    c = site.connect(timeout=10)
    c.send(b"GET /hello.php HTTP/1.1\r\nHost: t\r\n\r\n")  # warm: a first connection made
    status, headers, body, _ = c.read_response()
    assert (status, body) == (200, b"hello")
    before = data_segments_in(c.sock)
    for _ in range(REQUESTS):
        c.send(b"GET /hello.php HTTP/1.1\r\nHost: t\r\n\r\n")
        status, headers, body, _ = c.read_response()
        assert (status, body) == (200, b"hello")
        assert headers.get("transfer-encoding") == "chunked"
    segments = data_segments_in(c.sock) - before
    c.close()
    assert segments == REQUESTS, f"{segments} segments for {REQUESTS} answers"
