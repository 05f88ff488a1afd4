"""Hostile clients, part 1: request smuggling vectors and path attacks, against the real binary.

Complements test_protocol.py (which holds the framing vectors on a static file): here the
vectors it does not have (NUL and control bytes in every position of the request line,
the fields, the chunk-size line and the trailers; more Transfer-Encoding shapes), the same
body-level vectors against a mount that reads bodies (echo: the body is decoded in the
read buffer, or collected across reads, which are other code paths than the skip of a
static file's body), and path attacks on static files, a CGI mount and directory listings:
`..` in every encoding, NUL, symlinks leading out, long paths, FIFOs, sockets and devices.

Every test is bounded in time (socket timeouts of a few seconds); nothing leaves loopback.
A smuggling test always pipelines a valid request behind the bad one: if it is answered,
the server was desynchronised.
"""
import json
import os
import socket
import stat
import time

import pytest

from conftest import scaled

GOOD = b"GET /f.txt HTTP/1.1\r\nHost: t\r\n\r\n"
FILE_BODY = b"0123456789abcdef\n"
SECRET = b"TOP-SECRET-OUTSIDE-THE-ROOT\n"


# ---------------------------------------------------------------- helpers


@pytest.fixture
def connect(start_server):
    """connect(server) -> Client; closed before the servers are stopped."""
    clients = []

    def _connect(server, timeout=5.0):
        c = server.connect(timeout)
        clients.append(c)
        return c

    yield _connect
    for c in clients:
        c.close()


@pytest.fixture
def site(start_server, docroot):
    """A server with /f.txt, an echo handler (reads bodies) and short deadlines."""
    (docroot / "f.txt").write_bytes(FILE_BODY)
    return start_server(docroot, "handler /echo echo;\nheader_timeout 3s;\n")


def rejected_and_closed(c, status=400):
    """The next response is `status`, nothing follows it (the pipelined request is never
    answered), and the server closes the connection."""
    st, headers, body, head = c.read_response()
    assert st == status, head
    assert str(status).encode() in body
    assert c.buf == b"", "bytes after the %d: %r" % (status, c.buf[:200])
    assert c.is_closed(), "connection left open after %d" % status


def chunked_head(path=b"/f.txt"):
    return b"POST " + path + b" HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"


# ---------------------------------------------------------------- NUL and controls everywhere

# RFC 9112 section 2.2/3/5, RFC 9110 section 5.5: NUL, CR, LF and other controls are never
# valid in the request line or in a field; a recipient that "cleans" them disagrees with
# whatever sits in front of it. Each is 400 and close.
CONTROL_VECTORS = {
    "nul-in-method": b"GE\x00T /f.txt HTTP/1.1\r\nHost: t\r\n\r\n",
    "nul-before-method": b"\x00GET /f.txt HTTP/1.1\r\nHost: t\r\n\r\n",
    "nul-in-target": b"GET /f.txt\x00 HTTP/1.1\r\nHost: t\r\n\r\n",
    "nul-in-version": b"GET /f.txt HTTP/1.\x001\r\nHost: t\r\n\r\n",
    "nul-after-version": b"GET /f.txt HTTP/1.1\x00\r\nHost: t\r\n\r\n",
    "ctl-in-version": b"GET /f.txt HTTP/1\x0b1\r\nHost: t\r\n\r\n",
    "cr-in-version": b"GET /f.txt HTTP/1.1\r\r\nHost: t\r\n\r\n",
    "nul-in-field-name": b"GET /f.txt HTTP/1.1\r\nHost: t\r\nX-\x00A: b\r\n\r\n",
    "nul-ending-field-name": b"GET /f.txt HTTP/1.1\r\nHost: t\r\nX-A\x00: b\r\n\r\n",
    "nul-in-host-value": b"GET /f.txt HTTP/1.1\r\nHost: t\x00.evil\r\n\r\n",
    "nul-at-field-value-end": b"GET /f.txt HTTP/1.1\r\nHost: t\r\nX-A: b\x00\r\n\r\n",
    "vt-in-field-value": b"GET /f.txt HTTP/1.1\r\nHost: t\r\nX-A: a\x0bb\r\n\r\n",
    "ff-in-field-value": b"GET /f.txt HTTP/1.1\r\nHost: t\r\nX-A: a\x0cb\r\n\r\n",
    "obs-text-in-field-name": b"GET /f.txt HTTP/1.1\r\nHost: t\r\nX-\xffA: b\r\n\r\n",
    "nul-in-transfer-encoding": b"POST /f.txt HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\x00\r\n"
    b"\r\n0\r\n\r\n",
    "vt-before-chunked": b"POST /f.txt HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: \x0bchunked\r\n\r\n"
    b"0\r\n\r\n",
    "nul-in-content-length": b"POST /f.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 1\x000\r\n\r\n"
    b"0123456789",
    # the request line's shape
    "two-spaces-after-method": b"GET  /f.txt HTTP/1.1\r\nHost: t\r\n\r\n",
    "space-after-version": b"GET /f.txt HTTP/1.1 \r\nHost: t\r\n\r\n",
    "http-0.9-request": b"GET /f.txt\r\n\r\n",
    "lowercase-http-version": b"GET /f.txt http/1.1\r\nHost: t\r\n\r\n",
    "userinfo-in-absolute-form": b"GET http://user@t/f.txt HTTP/1.1\r\nHost: t\r\n\r\n",
}

# The same inside a chunked body: the size line, its extensions, the trailer section.
CHUNK_CONTROL_VECTORS = {
    "nul-in-chunk-size": b"5\x00\r\nhello\r\n0\r\n\r\n",
    "nul-before-chunk-size": b"\x005\r\nhello\r\n0\r\n\r\n",
    "space-before-chunk-size": b" 5\r\nhello\r\n0\r\n\r\n",
    "nul-in-chunk-ext-name": b"5;a\x00b\r\nhello\r\n0\r\n\r\n",
    "nul-in-chunk-ext-quoted": b'5;a="x\x00y"\r\nhello\r\n0\r\n\r\n',
    "cr-in-chunk-ext-quoted": b'5;a="x\ry"\r\nhello\r\n0\r\n\r\n',
    "nul-in-last-chunk": b"5\r\nhello\r\n0\x00\r\n\r\n",
    "nul-in-trailer-name": b"5\r\nhello\r\n0\r\nX-\x00T: v\r\n\r\n",
    "nul-in-trailer-value": b"5\r\nhello\r\n0\r\nX-T: v\x00w\r\n\r\n",
    "ctl-in-trailer-value": b"5\r\nhello\r\n0\r\nX-T: v\x01w\r\n\r\n",
    "space-before-trailer-colon": b"5\r\nhello\r\n0\r\nX-T : v\r\n\r\n",
    "trailer-without-colon": b"5\r\nhello\r\n0\r\nX-T v\r\n\r\n",
    "bare-cr-ending-body": b"5\r\nhello\r\n0\r\n\r",
    "chunk-data-short-of-size": b"6\r\nhello\r\n0\r\n\r\n",
    "lf-lf-ending-body": b"5\r\nhello\r\n0\r\n\n",
}

# More Transfer-Encoding and Content-Length shapes than test_protocol.py holds.
FRAMING_VECTORS = {
    # CL.TE and TE.CL with the smuggled request in the body
    "cl-te-smuggle": b"POST /f.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 6\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\nX",
    "te-cl-smuggle": b"POST /f.txt HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n"
    b"Content-Length: 3\r\n\r\n1e\r\nGET /evil HTTP/1.1\r\nHost: t\r\n\r\n\r\n0\r\n\r\n",
    "te-chunked-then-identity-field": b"POST /f.txt HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n"
    b"Transfer-Encoding: identity\r\n\r\n0\r\n\r\n",
    "te-identity-then-chunked-and-cl": b"POST /f.txt HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: identity,"
    b" chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n",
    "te-space-before-colon": b"POST /f.txt HTTP/1.1\r\nHost: t\r\nTransfer-Encoding : chunked\r\n"
    b"Content-Length: 5\r\n\r\n0\r\n\r\n",
    "te-obs-fold": b"POST /f.txt HTTP/1.1\r\nHost: t\r\nTransfer-Encoding:\r\n chunked\r\n\r\n"
    b"0\r\n\r\n",
    "te-quoted-chunked": b'POST /f.txt HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: "chunked"\r\n\r\n'
    b"0\r\n\r\n",
    "te-chunked-with-parameter": b"POST /f.txt HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked;q=1\r\n"
    b"\r\n0\r\n\r\n",
    "te-empty-list": b"POST /f.txt HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: ,\r\n\r\n0\r\n\r\n",
    "cl-obs-fold": b"POST /f.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n 6\r\n\r\nhello!",
    "cl-comma-different": b"POST /f.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 5,6\r\n\r\nhello!",
    "cl-space-before-colon-second": b"POST /f.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n"
    b"Content-Length : 0\r\n\r\nhello",
    "cl-bare-lf-hidden": b"POST /f.txt HTTP/1.1\r\nHost: t\r\nX-A: b\nContent-Length: 5\r\n\r\nhello",
}


@pytest.mark.parametrize("raw", CONTROL_VECTORS.values(), ids=CONTROL_VECTORS.keys())
def test_control_bytes_in_request_head_are_400_and_close(site, connect, raw):
    c = connect(site)
    c.send(raw + GOOD)
    rejected_and_closed(c, 400)


@pytest.mark.parametrize("path", [b"/f.txt", b"/echo"], ids=["skipped-body", "read-body"])
@pytest.mark.parametrize("body", CHUNK_CONTROL_VECTORS.values(), ids=CHUNK_CONTROL_VECTORS.keys())
def test_bad_chunked_body_is_400_and_close(site, connect, body, path):
    """The whole request in one write: the body is judged in the read buffer (skipped for a
    static file, decoded in place for echo)."""
    c = connect(site)
    c.send(chunked_head(path) + body + GOOD)
    # a static file would answer 405 to POST, but the body in the buffer is judged first
    rejected_and_closed(c, 400)


@pytest.mark.parametrize("body", CHUNK_CONTROL_VECTORS.values(), ids=CHUNK_CONTROL_VECTORS.keys())
def test_bad_chunked_body_arriving_later_is_400_and_close(site, connect, body):
    """The head first, the body after a pause: echo collects it across reads
    (collect_event), which has its own decoder loop."""
    c = connect(site)
    c.send(chunked_head(b"/echo"))
    time.sleep(0.15)
    c.send(body[:3])
    time.sleep(0.1)
    try:
        c.send(body[3:] + GOOD)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the first bytes were enough to refuse it
    rejected_and_closed(c, 400)


@pytest.mark.parametrize("raw", FRAMING_VECTORS.values(), ids=FRAMING_VECTORS.keys())
@pytest.mark.parametrize("path", [b"/f.txt", b"/echo"], ids=["static", "echo"])
def test_more_framing_vectors_are_400_and_close(site, connect, raw, path):
    c = connect(site)
    c.send(raw.replace(b"/f.txt", path, 1) + GOOD)
    rejected_and_closed(c, 400)


@pytest.mark.parametrize("coding", [b"identity", b"xchunked", b"chunked2"])
def test_unknown_lone_transfer_coding_is_501_and_close(site, connect, coding):
    c = connect(site)
    c.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: " + coding + b"\r\n\r\n"
           b"0\r\n\r\n" + GOOD)
    rejected_and_closed(c, 501)


def test_echo_with_valid_chunked_body_then_pipelined_request(site, connect):
    """The control: the same shapes, valid, are served and the connection goes on."""
    c = connect(site)
    c.send(chunked_head(b"/echo") + b"5;a=\"x\"\r\nhello\r\n0\r\nX-T: v\r\n\r\n" + GOOD)
    st, _, body, head = c.read_response()
    assert st == 200 and body.endswith(b"hello"), head
    st, _, body, _ = c.read_response()
    assert st == 200 and body == FILE_BODY


# ---------------------------------------------------------------- Range amplification


@pytest.fixture
def range_site(start_server, docroot):
    (docroot / "f.txt").write_bytes(FILE_BODY)
    (docroot / "k.bin").write_bytes(bytes(range(256)) * 4)  # 1 KiB
    return start_server(docroot)


def ranged(server, connect, value):
    c = connect(server)
    c.send(b"GET /k.bin HTTP/1.1\r\nHost: t\r\nRange: " + value + b"\r\n\r\n")
    return c.read_response()


@pytest.mark.parametrize("value", [
    b"bytes=" + b",".join([b"0-"] * 200),                       # Apache killer: overlaps
    b"bytes=0-1023," + b",".join(b"%d-%d" % (i, i) for i in range(10)),
    b"bytes=" + b",".join(b"%d-%d" % (i * 2, i * 2) for i in range(17)),  # 17 > 16 ranges
    b"bytes=" + b",".join([b"0-0"] * 1500),                     # a 6 KB field of them
    b"bytes=5-0,5-1,5-2,5-3",                                   # malformed (last < first)
    b"bytes=-99999999999999999999999",                          # overflow
    b"bytes=0-0,-1024",                                         # a suffix covering it all
])
def test_amplifying_ranges_get_the_plain_file(range_site, connect, value):
    """Overlapping, too many or malformed ranges are ignored (RFC 9110 section 14.2 allows
    it): the answer is the 1 KiB file once, never a multipart of it many times over."""
    st, h, body, head = ranged(range_site, connect, value)
    assert st == 200, head
    assert len(body) == 1024


def test_sixteen_disjoint_ranges_are_served_bounded(range_site, connect):
    st, h, body, head = ranged(range_site, connect, b"bytes=" + b",".join(
        b"%d-%d" % (i * 64, i * 64 + 9) for i in range(16)))
    assert st == 206, head
    assert "multipart/byteranges" in h["content-type"]
    assert body.count(b"Content-Range: bytes ") == 16
    assert len(body) < 16 * (10 + 200) + 100


@pytest.mark.parametrize("value", [b"bytes=1024-", b"bytes=18446744073709551615-",
                                   b"bytes=2000-3000,5000-"])
def test_unsatisfiable_ranges_are_416(range_site, connect, value):
    st, h, _, head = ranged(range_site, connect, value)
    assert st == 416, head
    assert h["content-range"] == "bytes */1024"


# ---------------------------------------------------------------- path attacks

TRAVERSALS = [
    "/../secret.txt",
    "/../../../../../../etc/passwd",
    "/%2e%2e/secret.txt",
    "/%2E%2e/secret.txt",
    "/%2e%2E/%2e%2e/secret.txt",
    "/.%2e/secret.txt",
    "/%2e./secret.txt",
    "/%252e%252e/secret.txt",
    "/%25%32%65%25%32%65/secret.txt",
    "/%c0%ae%c0%ae/secret.txt",
    "/%c0%2e%c0%2e/secret.txt",
    "/%e0%80%ae%e0%80%ae/secret.txt",
    "/..%c0%afsecret.txt",
    "/..\\secret.txt",
    "/..%5csecret.txt",
    "/%5c..%5csecret.txt",
    "/sub/..\\..\\secret.txt",
    "/./../secret.txt",
    "/sub/./../../secret.txt",
    "//../secret.txt",
    "/sub//../../secret.txt",
    "/sub/%2e%2e/%2e%2e/secret.txt",
    "/sub/..%2f..%2fsecret.txt",
    "/%2e%2e%2fsecret.txt",
    "/..%2fsecret.txt",
    "/..;/secret.txt",
    "/sub/../../secret.txt?x=/f.txt",
    "/f.txt/../../secret.txt",
    "/secret.txt%00.html",
    "/f.txt%00",
    "/f.txt%00/../../secret.txt",
    "/%00",
    "/..%00/secret.txt",
    "http://t/../secret.txt",
    "http://t/%2e%2e/secret.txt",
]


CAP_MKNOD = 27  # linux/capability.h


def has_capability(bit):
    """Whether this process has the capability in its effective set (root in a container
    may not: then mknod fails with EPERM, and only then are devices left out)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> bit & 1)
    return False


@pytest.fixture
def hostile_root(tmp_path, docroot):
    """docroot (with /f.txt, /sub/, links out of it, special files) beside a secret."""
    (tmp_path / "secret.txt").write_bytes(SECRET)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_bytes(SECRET)
    (docroot / "f.txt").write_bytes(FILE_BODY)
    (docroot / "sub").mkdir()
    (docroot / "sub" / "in.txt").write_bytes(b"inside\n")
    os.symlink("../secret.txt", docroot / "rel-link")
    os.symlink(str(tmp_path / "secret.txt"), docroot / "abs-link")
    os.symlink(str(outside), docroot / "dir-link")
    os.symlink("../../secret.txt", docroot / "sub" / "up-link")
    os.symlink("/etc/passwd", docroot / "passwd-link")
    os.symlink("/proc/self/environ", docroot / "environ-link")
    os.symlink("in.txt", docroot / "sub" / "ok-link")  # inside: served
    os.mkfifo(docroot / "fifo")
    us = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    us.bind(str(docroot / "sock"))
    us.listen(1)
    devices = []
    if has_capability(CAP_MKNOD):
        # With the capability, mknod must work: any failure is an error of the test
        # machine that would otherwise silently drop the device cases.
        for name, minor in (("null", 3), ("zero", 5), ("urandom", 9)):
            os.mknod(docroot / name, 0o666 | stat.S_IFCHR, os.makedev(1, minor))
            devices.append(name)
    yield docroot, devices
    us.close()


def fetch(server, connect, target, method=b"GET"):
    """One request on its own connection, bounded in time. Returns (status, headers, body)."""
    if isinstance(target, str):
        target = target.encode("latin-1")
    c = connect(server, timeout=5.0)
    c.send(method + b" " + target + b" HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    st, headers, body, _ = c.read_response(head_only=method == b"HEAD")
    return st, headers, body


def assert_not_leaked(st, body, target):
    assert st in (400, 403, 404, 414), (target, st)
    assert SECRET not in body and b"root:" not in body, target


@pytest.mark.parametrize("autoindex", ["off", "on"])
def test_traversal_in_every_encoding_never_leaves_the_root(start_server, hostile_root, connect,
                                                           autoindex):
    docroot, _ = hostile_root
    s = start_server(docroot, f"autoindex {autoindex};\n")
    for target in TRAVERSALS:
        st, _, body = fetch(s, connect, target)
        assert_not_leaked(st, body, target)
    # and the server is still well: the inside file and the inside link are served
    assert fetch(s, connect, "/f.txt")[2] == FILE_BODY
    assert fetch(s, connect, "/sub/ok-link")[2] == b"inside\n"


@pytest.mark.parametrize("target,want", [
    ("/../secret.txt", 400), ("/%2e%2e/secret.txt", 400), ("/%2E%2e/secret.txt", 400),
    ("/sub/../../secret.txt", 400), ("/f.txt%00", 400), ("/%00", 400),
    ("/%252e%252e/secret.txt", 404), ("/%c0%ae%c0%ae/secret.txt", 404),
    ("/..\\secret.txt", 404), ("/sub/./in.txt", 200), ("//sub//in.txt", 200),
    ("/sub/%2e/in.txt", 200), ("/sub/x/%2e%2e/in.txt", 200),
])
def test_traversal_statuses(start_server, hostile_root, connect, target, want):
    """What each encoding means: an encoded '.' is a '.', so %2e%2e climbs (400 above the
    root); %252e is the name "%2e"; overlong UTF-8 and backslashes are plain bytes of a
    name (404); dot segments inside the root resolve normally."""
    docroot, _ = hostile_root
    s = start_server(docroot)
    st, _, body = fetch(s, connect, target)
    assert st == want, (target, st)
    if want == 200:
        assert body == b"inside\n"


@pytest.mark.parametrize("name", ["rel-link", "abs-link", "dir-link/secret.txt", "sub/up-link",
                                  "passwd-link", "environ-link", "dir-link/"])
def test_symlinks_out_of_the_root_are_403(start_server, hostile_root, connect, name):
    docroot, _ = hostile_root
    s = start_server(docroot)
    st, _, body = fetch(s, connect, "/" + name)
    assert st == 403, (name, st)
    assert SECRET not in body and b"root:" not in body


class Inotify:
    """IN_OPEN events on a few files, through libc (ctypes): did anyone open them?"""

    IN_OPEN = 0x20

    def __init__(self, paths):
        import ctypes
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            pytest.skip("no inotify")
        self.names = {}
        for p in paths:
            wd = self.libc.inotify_add_watch(self.fd, str(p).encode(), self.IN_OPEN)
            assert wd >= 0, p
            self.names[wd] = str(p)

    def opened(self):
        import struct
        time.sleep(0.2)
        seen = []
        try:
            ev = os.read(self.fd, 65536)
        except BlockingIOError:
            return seen
        n = 0
        while n < len(ev):
            wd, mask, _, ln = struct.unpack_from("iIII", ev, n)
            n += 16 + ln
            if mask & self.IN_OPEN:
                seen.append(self.names.get(wd, wd))
        return seen

    def close(self):
        os.close(self.fd)


def test_symlinks_out_of_the_root_are_never_opened(start_server, tmp_path, docroot, connect):
    """A symlink leading out of the root is refused without opening what it points to:
    opening is already acting outside the root (a FIFO's writer sees a reader, a device
    driver runs its open, a file's atime may change), and a 403-or-404 that depends on
    whether the outside target exists tells a client what is on the disk outside the
    root. Checked with inotify (IN_OPEN) on the targets, and by comparing the answers for
    a link to an existing and to a missing outside file."""
    outside = tmp_path / "outside2"
    outside.mkdir()
    (outside / "secret.txt").write_bytes(SECRET)
    os.mkfifo(outside / "fifo")
    os.symlink(str(outside / "secret.txt"), docroot / "abs-link")
    os.symlink("../outside2/secret.txt", docroot / "rel-link")
    os.symlink(str(outside / "fifo"), docroot / "fifo-link")
    os.symlink(str(outside / "missing.txt"), docroot / "missing-link")
    (docroot / "f.txt").write_bytes(FILE_BODY)
    s = start_server(docroot, "autoindex on;\n")
    watch = Inotify([outside / "secret.txt", outside / "fifo"])
    try:
        answers = {}
        for name in ("abs-link", "rel-link", "fifo-link", "missing-link"):
            st, _, body = fetch(s, connect, "/" + name)
            assert SECRET not in body
            answers[name] = st
        fetch(s, connect, "/")  # the listing must not open them either
        opened = watch.opened()
    finally:
        watch.close()
    assert answers["abs-link"] == answers["rel-link"] == answers["fifo-link"] == 403, answers
    problems = []
    if opened:
        problems.append(f"files outside the root were opened: {sorted(set(opened))}")
    if answers["missing-link"] != 403:
        problems.append(f"a link out of the root answers {answers['missing-link']} when its "
                        f"target is missing and 403 when it exists: an oracle for files "
                        f"outside the root")
    assert not problems, "\n".join(problems)


def test_special_files_are_never_served_and_never_hang(start_server, hostile_root, connect):
    """A FIFO (no writer: an open for reading would block without O_NONBLOCK), a unix
    socket, and character devices made with mknod (/dev/zero's would stream forever):
    403, at once, with GET, HEAD and a Range."""
    docroot, devices = hostile_root
    s = start_server(docroot)
    for name in ["fifo", "sock"] + devices:
        for method in (b"GET", b"HEAD"):
            t0 = time.monotonic()
            st, _, body = fetch(s, connect, "/" + name, method)
            assert st == 403, (name, method, st)
            assert time.monotonic() - t0 < scaled(2.0), name
        c = connect(s)
        c.send(b"GET /" + name.encode() + b" HTTP/1.1\r\nHost: t\r\nRange: bytes=0-9\r\n\r\n")
        assert c.read_response()[0] == 403
    # a FIFO with a writer waiting on it is still not read
    fd = os.open(docroot / "fifo", os.O_RDWR | os.O_NONBLOCK)
    try:
        os.write(fd, b"data from the fifo")
        st, _, body = fetch(s, connect, "/fifo")
        assert st == 403 and b"data from the fifo" not in body
    finally:
        os.close(fd)
    assert fetch(s, connect, "/f.txt")[2] == FILE_BODY


def test_dirlist_never_lists_what_it_would_not_serve(start_server, hostile_root, connect):
    docroot, devices = hostile_root
    s = start_server(docroot, "autoindex on;\n")
    st, _, body = fetch(s, connect, "/?format=json")
    assert st == 200
    names = {e["name"].rstrip("/") for e in json.loads(body)}
    assert "f.txt" in names and "sub" in names
    for gone in ["fifo", "sock", "rel-link", "abs-link", "dir-link", "passwd-link",
                 "environ-link"] + devices:
        assert gone not in names, gone
    st, _, body = fetch(s, connect, "/sub/")
    assert st == 200 and b"up-link" not in body and b"in.txt" in body
    for target in ("/dir-link/", "/%2e%2e/", "/sub/%2e%2e/%2e%2e/", "/..%2f"):
        st, _, body = fetch(s, connect, target)
        assert st in (400, 403, 404), (target, st)
        assert b"secret.txt" not in body, target


@pytest.mark.parametrize("length,status", [(4096, 404), (8192, 414), (65536, 414)])
def test_very_long_paths_are_refused_quickly(start_server, hostile_root, connect, length,
                                             status):
    """A 4 KiB path fits the decoded-path buffer but names no file (its segment is longer
    than any file name): 404, as nginx; 8 and 64 KiB request lines are over max_header_size:
    414 and close. Never a hang, never a crash; the server goes on."""
    docroot, _ = hostile_root
    s = start_server(docroot)
    path = b"/" + b"a" * (length - 1)
    c = connect(s)
    t0 = time.monotonic()
    try:
        c.send(b"GET " + path + b" HTTP/1.1\r\nHost: t\r\n\r\n" + GOOD)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server may answer and close before taking 64 KiB
    st, _, _, head = c.read_response()
    assert st == status, head
    assert time.monotonic() - t0 < scaled(3.0)
    assert fetch(s, connect, "/f.txt")[2] == FILE_BODY


def test_long_path_that_normalizes_short_is_served(start_server, hostile_root, connect):
    """Long input is not long output: 3000 bytes of "x/../" end as /f.txt."""
    docroot, _ = hostile_root
    s = start_server(docroot)
    st, _, body = fetch(s, connect, "/" + "x/../" * 600 + "f.txt")
    assert st == 200 and body == FILE_BODY
    st, _, _ = fetch(s, connect, "/" + "%2e/" * 1000 + "f.txt")
    assert st == 200


def test_deep_directory_request_is_refused_or_served(start_server, hostile_root, connect):
    """2000 nested segments (a path of ~4 KiB): ENAMETOOLONG, ENOENT or 414; never 500."""
    docroot, _ = hostile_root
    s = start_server(docroot)
    st, _, _ = fetch(s, connect, "/" + "d/" * 2000)
    assert st in (404, 414), st


def test_directory_redirect_is_never_an_open_redirect(start_server, hostile_root, connect):
    """GET //evil.example/../sub names the directory /sub: the 301 that adds its slash
    must point into this site, not to "//evil.example/../sub/", which a browser reads as
    a network-path reference to the host evil.example (RFC 3986 section 4.2)."""
    docroot, _ = hostile_root
    s = start_server(docroot)
    leaving = []
    for target in ("//evil.example/../sub", "//evil.example/%2e%2e/sub",
                   "/%2fevil.example/../sub", "//evil.example/.././sub",
                   "/\\evil.example/../sub", "/%5cevil.example/../sub"):
        st, headers, _ = fetch(s, connect, target)
        assert st in (301, 400, 404), (target, st)
        loc = headers.get("location", "")
        # "//host" and "/\\host" (browsers read a backslash as a slash) leave the site
        if st == 301 and (loc.startswith("//") or loc.startswith("/\\")):
            leaving.append(f"{target} -> Location: {loc}")
    assert not leaving, "open redirects:\n" + "\n".join(leaving)


def test_directory_redirect_of_a_long_path_is_not_a_500(start_server, hostile_root, connect):
    """A 1.5 KB target that names the directory /sub ("/x/.." 300 times, then "/sub") is
    a valid request for it: 301 to its slash (ideally to "/sub/"), not a 500 because the
    raw target does not fit the Location line."""
    docroot, _ = hostile_root
    s = start_server(docroot)
    st, headers, _ = fetch(s, connect, "/x/.." * 300 + "/sub")
    assert st == 301, st
    assert headers["location"].endswith("/sub/")


# ---------------------------------------------------------------- the same on a CGI mount


@pytest.fixture
def cgi_root(tmp_path, docroot):
    """A cgi directory with one script, a FIFO, a socket, a device, links out; a script
    outside it that records whether it ever ran."""
    marker = tmp_path / "ran-outside"
    cgi = tmp_path / "cgi"
    cgi.mkdir()
    ok = cgi / "ok.sh"
    ok.write_text("#!/bin/sh\nprintf 'Content-Type: text/plain\\n\\nok:%s' \"$PATH_INFO\"\n")
    ok.chmod(0o755)
    outside = tmp_path / "outside"
    outside.mkdir(exist_ok=True)
    evil = outside / "evil.sh"
    evil.write_text(f"#!/bin/sh\ntouch '{marker}'\nprintf 'Content-Type: text/plain\\n\\nran'\n")
    evil.chmod(0o755)
    os.mkfifo(cgi / "fifo")
    us = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    us.bind(str(cgi / "sock"))
    if os.geteuid() == 0:
        try:
            os.mknod(cgi / "zero", 0o777 | stat.S_IFCHR, os.makedev(1, 5))
        except OSError:
            pass
    os.symlink(str(evil), cgi / "abs-link")
    os.symlink("../outside/evil.sh", cgi / "rel-link")
    (docroot / "f.txt").write_bytes(FILE_BODY)
    yield cgi, marker
    us.close()


CGI_TRAVERSALS = [
    "/cgi-bin/%252e%252e/outside/evil.sh",
    "/cgi-bin/%c0%ae%c0%ae/outside/evil.sh",
    "/cgi-bin/..\\outside\\evil.sh",
    "/cgi-bin/..%5coutside%5cevil.sh",
    "/cgi-bin/.%2e/outside/evil.sh",
    "/cgi-bin/%2E%2e%2Foutside%2Fevil.sh",
    "/cgi-bin//../outside/evil.sh",
    "/cgi-bin/./../outside/evil.sh",
    "/cgi-bin/ok.sh/../../outside/evil.sh",
    "/cgi-bin/evil.sh%00",
    "/cgi-bin/ok.sh%00.txt",
    "/cgi-bin/abs-link",
    "/cgi-bin/rel-link",
    "/cgi-bin/rel-link/x",
    "/cgi-bin/fifo",
    "/cgi-bin/sock",
    "/cgi-bin/zero",
    "/cgi-bin/" + "a" * 4090,
]


def test_cgi_mount_resists_path_attacks(start_server, docroot, cgi_root, connect):
    cgi, marker = cgi_root
    # a script run would end at cgi_timeout: far from the bound below, on any build
    s = start_server(docroot, f'cgi /cgi-bin/ "{cgi}";\ncgi_timeout {int(scaled(10))}s;\n')
    for target in CGI_TRAVERSALS:
        t0 = time.monotonic()
        st, _, body = fetch(s, connect, target)
        assert st in (400, 403, 404, 414), (target, st, body[:100])
        assert b"ran" not in body, target
        assert time.monotonic() - t0 < scaled(3.0), target
    assert not marker.exists(), "a script outside the cgi directory ran"
    st, _, body = fetch(s, connect, "/cgi-bin/ok.sh/x%2fy")
    assert st == 200 and body.startswith(b"ok:")
    # PATH_INFO is decoded; a script that uses it must see no NUL and no climbing
    st, _, body = fetch(s, connect, "/cgi-bin/ok.sh/../../../x")
    assert st == 400


# ---------------------------------------------------------------- reading the result


def test_server_survived_everything(start_server, hostile_root, connect):
    """All the vectors of this file in one connection each, as fast as they go, then a
    normal request: the server answers, and its descriptor count is back where it was."""
    docroot, _ = hostile_root
    s = start_server(docroot, "handler /echo echo;\n")
    pid = s.proc.pid
    assert fetch(s, connect, "/f.txt")[2] == FILE_BODY
    before = len(os.listdir(f"/proc/{pid}/fd"))
    raws = (list(CONTROL_VECTORS.values()) + list(FRAMING_VECTORS.values()) +
            [chunked_head(b"/echo") + b for b in CHUNK_CONTROL_VECTORS.values()] +
            [b"GET " + t.encode("latin-1") + b" HTTP/1.1\r\nHost: t\r\n\r\n" for t in TRAVERSALS])
    socks = []
    for raw in raws:
        so = socket.create_connection((s.host, s.port), timeout=5)
        so.sendall(raw)
        so.shutdown(socket.SHUT_WR)  # then EOF: every connection ends, answered or not
        socks.append(so)
    for so in socks:
        so.settimeout(5)
        try:
            while so.recv(65536):
                pass
        except (socket.timeout, ConnectionResetError):
            pass
        so.close()
    assert fetch(s, connect, "/f.txt")[2] == FILE_BODY
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        now = len(os.listdir(f"/proc/{pid}/fd"))
        if now <= before:
            break
        time.sleep(0.05)
    assert now <= before, f"descriptors: {before} before, {now} after"
