"""Request-body limits for both framings (RFC 9112 6.3, 7.1; RFC 9110 15.5.14).

`max_body_size 0` means no limit, as in nginx: a body that is only skipped may be any
size. A body a handler wants whole (echo, CGI) is held in memory, so it has a bound of
its own, 64 MiB. Whatever the limit, a chunked body over it is answered as the equivalent
Content-Length is (413), and the connection closes: nothing after it is read as a request.
An error found in a body being collected is answered once, even to a client that reads
slowly.
"""
import subprocess
import time

import pytest

from conftest import SANITIZED, scaled

GET_HELLO = b"GET /hello HTTP/1.1\r\nHost: t\r\n\r\n"
HELLO = b"Hello, world!\n"


def chunked(data, size):
    out = b""
    for i in range(0, len(data), size):
        piece = data[i : i + size]
        out += b"%x\r\n%s\r\n" % (len(piece), piece)
    return out + b"0\r\n\r\n"


@pytest.fixture
def unlimited(start_server, docroot):
    (docroot / "f.txt").write_bytes(b"file\n")
    return start_server(docroot, conf_extra="handler /echo echo;\nhandler /hello hello;\n"
                                             "max_body_size 0;\n")


@pytest.fixture
def limited(start_server, docroot):
    (docroot / "f.txt").write_bytes(b"file\n")
    return start_server(docroot, conf_extra="handler /echo echo;\nhandler /hello hello;\n"
                                             "max_body_size 100k;\n")


BIG = bytes((i * 31 + i // 977) & 0xFF for i in range(300 * 1024))  # well past 64 KiB


def test_unlimited_chunked_body_is_echoed_whole_and_the_next_request_answered(unlimited,
                                                                              connect):
    c = connect(unlimited, timeout=scaled(20))
    c.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
           + chunked(BIG, 5000) + GET_HELLO)
    st, _, body, head = c.read_response(timeout=scaled(20))
    assert st == 200, head
    assert body == BIG
    st, _, body, head = c.read_response()
    assert (st, body) == (200, HELLO), head


def test_unlimited_content_length_body_is_echoed_whole_and_the_next_request_answered(
        unlimited, connect):
    c = connect(unlimited, timeout=scaled(20))
    c.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % len(BIG)
           + BIG + GET_HELLO)
    st, _, body, head = c.read_response(timeout=scaled(20))
    assert st == 200, head
    assert body == BIG
    st, _, body, head = c.read_response()
    assert (st, body) == (200, HELLO), head


def test_unlimited_body_of_a_static_request_is_skipped_whatever_its_size(unlimited,
                                                                         connect):
    size = 80 << 20  # past the bound on collected bodies: skipping holds none of it
    c = connect(unlimited, timeout=scaled(30))
    c.send(b"GET /f.txt HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % size)
    st, _, body, head = c.read_response()
    assert (st, body) == (200, b"file\n"), head
    piece = b"s" * (1 << 20)
    for _ in range(size // len(piece)):
        c.send(piece)
    c.send(GET_HELLO)
    st, _, body, head = c.read_response(timeout=scaled(30))
    assert (st, body) == (200, HELLO), head


def test_unlimited_collected_body_past_64_mib_is_413(unlimited, connect):
    c = connect(unlimited)
    c.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % ((64 << 20) + 1))
    st, h, _, head = c.read_response()
    assert st == 413, head
    assert h.get("connection") == "close", head


def test_unlimited_collected_chunked_body_past_64_mib_is_413(unlimited, connect):
    c = connect(unlimited, timeout=scaled(30))
    c.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
           b"%x\r\n" % ((64 << 20) + 1))
    st, h, _, head = c.read_response(timeout=scaled(30))
    assert st == 413, head
    assert h.get("connection") == "close", head


def over_the_limit_answers(c, framing):
    """Send a body of 200k (the limit is 100k) in the given framing, a request pipelined
    behind it, then read until the server closes: every status line that came back."""
    body = b"o" * (200 * 1024)
    if framing == "chunked":
        c.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
               + chunked(body, 8192) + GET_HELLO)
    else:
        c.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % len(body)
               + body + GET_HELLO)
    data = c.recv_all(timeout=scaled(5))
    return [line for line in data.split(b"\r\n") if line.startswith(b"HTTP/1.1 ")]


@pytest.mark.parametrize("framing", ["chunked", "content-length"])
def test_body_over_the_limit_is_413_and_closes_the_connection(limited, connect, framing):
    c = connect(limited)
    assert over_the_limit_answers(c, framing) == [b"HTTP/1.1 413 Content Too Large"]


def test_chunked_body_over_the_limit_arriving_later_is_413_and_closes(limited, connect):
    """The body is collected across events; the limit is passed in a later one."""
    c = connect(limited)
    c.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
           + b"2000\r\n" + b"a" * 0x2000 + b"\r\n")
    time.sleep(0.2)
    for _ in range(20):
        c.send(b"2000\r\n" + b"a" * 0x2000 + b"\r\n")
    c.send(b"0\r\n\r\n" + GET_HELLO)
    data = c.recv_all(timeout=scaled(5))
    lines = [line for line in data.split(b"\r\n") if line.startswith(b"HTTP/1.1 ")]
    assert lines == [b"HTTP/1.1 413 Content Too Large"]


# A library preloaded into the server: the first error answer it sends goes out 5 bytes
# short of whole, and the next send on that socket says EAGAIN, as a full socket would.
SHORT_SEND = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
static int parked_fd = -1, done;
ssize_t sendmsg(int fd, const struct msghdr *m, int flags)
{
    static ssize_t (*real)(int, const struct msghdr *, int);
    if (!real)
        real = (ssize_t (*)(int, const struct msghdr *, int))dlsym(RTLD_NEXT, "sendmsg");
    if (!done && fd == parked_fd) {
        done = 1;
        errno = EAGAIN;
        return -1;
    }
    if (parked_fd < 0 && m->msg_iovlen > 0 && m->msg_iov[0].iov_len > 20 &&
        memcmp(m->msg_iov[0].iov_base, "HTTP/1.1 4", 10) == 0) {
        parked_fd = fd;
        struct iovec one = {m->msg_iov[0].iov_base, 5};
        struct msghdr s = {.msg_iov = &one, .msg_iovlen = 1};
        return real(fd, &s, flags);
    }
    return real(fd, m, flags);
}
"""


def test_error_in_a_collected_body_is_answered_once_when_its_answer_parks(
        start_server, docroot, connect, tmp_path):
    src, lib = tmp_path / "short_send.c", tmp_path / "short_send.so"
    src.write_text(SHORT_SEND)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(src), "-ldl"], check=True)
    env = {"LD_PRELOAD": str(lib)}
    if SANITIZED:
        env["ASAN_OPTIONS"] = "verify_asan_link_order=0"
    server = start_server(docroot, conf_extra="handler /echo echo;\n", env=env)
    c = connect(server)
    c.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab")
    time.sleep(0.2)  # collected across events from here
    c.send(b"cde\r\nnot-a-chunk-size\r\n")
    data = c.recv_all(timeout=scaled(3))
    assert data.count(b"HTTP/1.1 ") == 1, data
    assert data.startswith(b"HTTP/1.1 400 Bad Request\r\n"), data
    assert data.endswith(b"</html>\n"), data  # whole, and then the close
