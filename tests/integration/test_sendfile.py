"""`sendfile on|off`: how file bodies leave the server.

On (the default), the kernel sends a file's pages with sendfile(2). Off, the server reads
each piece of the file into its thread's buffer and writes it with the response head in
front of the first piece (what h2o always does, and nginx with `sendfile off`). Either way
the client must get the same bytes; these tests check that the copy path frames, resumes
and fails like the sendfile one, and that the directive really changes the path.

Which path ran is read from /proc/PID/io: sendfile(2) counts as a write system call
(syscw) there, while pread(2) and sendmsg(2) on a socket do not."""
import hashlib
import os
import time

import pytest

from conftest import past_buffers, scaled, wait_until

CHUNK = 64 * 1024  # the server's buffer: sizes below straddle it on purpose
BIG = 3 * CHUNK + 12345


def pattern(n):
    """n bytes with no period: any piece sent from the wrong offset changes them."""
    return b"".join(hashlib.sha256(i.to_bytes(4, "big")).digest()
                    for i in range(n // 32 + 1))[:n]


@pytest.fixture
def site(docroot):
    (docroot / "big.bin").write_bytes(pattern(BIG))
    (docroot / "small.txt").write_bytes(b"small file\n")
    return docroot


def quiet(extra):
    """No log line per request: the write count then belongs to file bodies alone."""
    return "access_log off;\nerror_log stderr info;\n" + extra


def syscw(pid):
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            if line.startswith("syscw:"):
                return int(line.split()[1])
    raise AssertionError("no syscw in /proc/PID/io")


def get(c, target, headers=""):
    c.send(f"GET {target} HTTP/1.1\r\nHost: t\r\n{headers}\r\n".encode())
    return c.read_response(timeout=scaled(10))


def test_sendfile_off_sends_a_large_file_byte_for_byte(start_server, connect, site):
    s = start_server(site, quiet("sendfile off;\n"))
    st, h, body, _ = get(connect(s), "/big.bin")
    assert st == 200
    assert int(h["content-length"]) == BIG
    assert body == pattern(BIG)


def test_sendfile_off_reads_the_file_instead_of_calling_sendfile(start_server, connect,
                                                                 site):
    s = start_server(site, quiet("sendfile off;\n"))
    c = connect(s)
    get(c, "/big.bin")  # the open-file cache and the thread's buffer are in place
    before = syscw(s.proc.pid)
    for _ in range(5):
        assert get(c, "/big.bin")[2] == pattern(BIG)
    assert syscw(s.proc.pid) - before == 0


def test_sendfile_on_sends_file_bodies_with_sendfile(start_server, connect, site):
    """The other half of the check above: the counter does see sendfile(2)."""
    s = start_server(site, quiet("sendfile on;\n"))
    c = connect(s)
    get(c, "/big.bin")
    before = syscw(s.proc.pid)
    for _ in range(5):
        assert get(c, "/big.bin")[2] == pattern(BIG)
    assert syscw(s.proc.pid) - before >= 5


def test_sendfile_off_serves_a_range_across_buffer_boundaries(start_server, connect, site):
    s = start_server(site, quiet("sendfile off;\n"))
    first, last = CHUNK - 100, 2 * CHUNK + 100
    st, h, body, _ = get(connect(s), "/big.bin", f"Range: bytes={first}-{last}\r\n")
    assert st == 206
    assert h["content-range"] == f"bytes {first}-{last}/{BIG}"
    assert body == pattern(BIG)[first:last + 1]


def test_sendfile_off_keeps_a_keep_alive_connection_in_step(start_server, connect, site):
    """Large and small responses back to back, some pipelined: each body ends where its
    Content-Length says, so the next response starts at the right byte."""
    s = start_server(site, quiet("sendfile off;\n"))
    c = connect(s)
    req = b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\nGET /small.txt HTTP/1.1\r\nHost: t\r\n\r\n"
    c.send(req * 2)
    for _ in range(2):
        assert c.read_response(timeout=scaled(10))[2] == pattern(BIG)
        assert c.read_response(timeout=scaled(10))[2] == b"small file\n"


def test_sendfile_off_a_slow_reader_gets_the_whole_file(start_server, connect, site):
    """The socket fills and the response parks; each resumption reads the file again
    from where the client's bytes ended."""
    s = start_server(site, quiet("sendfile off;\n"))
    c = connect(s, rcvbuf=4096)
    c.send(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n")
    got = b""
    deadline = time.monotonic() + scaled(30)
    while b"\r\n\r\n" not in got or len(got.partition(b"\r\n\r\n")[2]) < BIG:
        assert time.monotonic() < deadline
        got += c.sock.recv(8192)
        time.sleep(0.0005)
    assert got.partition(b"\r\n\r\n")[2] == pattern(BIG)


def test_sendfile_off_closes_when_the_file_shrinks_under_it(start_server, connect, docroot):
    """The length was promised: a file cut short mid-response ends the connection short of
    it (never padded, never hung), as with sendfile."""
    size = past_buffers(at_least=64 << 20)  # more than the send buffer holds
    path = docroot / "huge.bin"
    with open(path, "wb") as f:
        f.truncate(size)
    s = start_server(docroot, quiet("sendfile off;\n"))
    c = connect(s, rcvbuf=65536)
    c.send(b"GET /huge.bin HTTP/1.1\r\nHost: t\r\n\r\n")
    got = 0
    while got < (2 << 20):
        got += len(c.sock.recv(65536))
    os.truncate(path, 1 << 20)
    rest = len(c.recv_all(timeout=scaled(10)))
    assert got + rest < size
    assert wait_until(lambda: c.is_closed(0.1), scaled(5))

