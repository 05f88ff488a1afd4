"""The open-file cache of mod_static (open_file_cache): a file served once stays open, and
later requests are answered from that descriptor without opening the path again, until
open_file_cache_valid has passed; then the file is looked at again beneath the root, and
whatever changed (rewritten, replaced, deleted, a symlink now leading out) is seen.

Tests that wait for the window sleep well past it (the server's clock is monotonic, so a
sleep here is at least as long there); nothing asserts what is served inside it except
where the window is set to a minute on purpose."""
import gzip
import hashlib
import os
import random
import socket
import subprocess
import threading
import time

import pytest

from conftest import BIN, Client, past_buffers, wait_until

WINDOW = "open_file_cache_valid 300ms;\n"
PAST_WINDOW_S = 0.6


def get(server, connect, path, headers=(), method="GET"):
    c = connect(server)
    extra = "".join(f"{k}: {v}\r\n" for k, v in headers)
    c.send(f"{method} {path} HTTP/1.1\r\nHost: t\r\n{extra}\r\n".encode())
    st, h, body, _ = c.read_response(head_only=method == "HEAD")
    return st, h, body


def fds_to(pid, path):
    """The server's descriptors open on path (as /proc shows their targets)."""
    out = []
    d = f"/proc/{pid}/fd"
    for name in os.listdir(d):
        try:
            target = os.readlink(os.path.join(d, name))
        except OSError:
            continue
        if target == str(path) or target == f"{path} (deleted)":
            out.append(int(name))
    return out


# ---------------------------------------------------------------- hits


def test_many_hits_keep_one_descriptor_of_the_file(start_server, docroot, connect):
    (docroot / "a.txt").write_bytes(b"a" * 1000)
    s = start_server(docroot)
    c = connect(s)
    c.send(b"GET /a.txt HTTP/1.1\r\nHost: t\r\n\r\n")
    assert c.read_response()[0] == 200
    fds = fds_to(s.proc.pid, docroot / "a.txt")
    assert len(fds) == 1, fds
    for _ in range(10):
        c.send(b"GET /a.txt HTTP/1.1\r\nHost: t\r\n\r\n" * 50)
        for _ in range(50):
            st, _, body, _ = c.read_response()
            assert st == 200 and body == b"a" * 1000
    assert fds_to(s.proc.pid, docroot / "a.txt") == fds


def test_hit_serves_the_open_descriptor_without_opening_the_path(start_server, docroot,
                                                                  connect):
    """Within the window (a minute here) the path is not opened again: a file renamed away
    is still served, from the descriptor the cache holds."""
    (docroot / "a.txt").write_bytes(b"cached bytes")
    s = start_server(docroot, "open_file_cache_valid 60s;\n")
    assert get(s, connect, "/a.txt")[:3:2] == (200, b"cached bytes")
    os.rename(docroot / "a.txt", docroot / "b.txt")
    st, _, body = get(s, connect, "/a.txt")
    assert (st, body) == (200, b"cached bytes")


def test_cache_off_keeps_no_descriptor_after_the_response(start_server, docroot, connect):
    (docroot / "a.txt").write_bytes(b"a" * 1000)
    s = start_server(docroot, "open_file_cache off;\n")
    for _ in range(5):
        assert get(s, connect, "/a.txt")[0] == 200
    assert wait_until(lambda: not fds_to(s.proc.pid, docroot / "a.txt"), 5)


def test_range_multipart_conditional_and_head_requests_are_answered_from_a_cached_entry(
        start_server, docroot, connect):
    data = bytes(range(256)) * 4
    (docroot / "t.bin").write_bytes(data)
    s = start_server(docroot, "open_file_cache_valid 60s;\n")
    st, h, body = get(s, connect, "/t.bin")
    assert st == 200 and body == data
    etag, lm = h["etag"], h["last-modified"]
    assert len(fds_to(s.proc.pid, docroot / "t.bin")) == 1  # what follows are hits
    st, h2, body = get(s, connect, "/t.bin", [("Range", "bytes=10-19")])
    assert st == 206 and body == data[10:20] and h2["content-range"] == "bytes 10-19/1024"
    st, h2, body = get(s, connect, "/t.bin", [("Range", "bytes=0-1,-2")])
    assert st == 206 and h2["content-type"].startswith("multipart/byteranges")
    assert data[0:2] in body and data[-2:] in body
    st, _, body = get(s, connect, "/t.bin", [("Range", "bytes=0-3"), ("If-Range", etag)])
    assert st == 206 and body == data[:4]
    st, _, body = get(s, connect, "/t.bin", [("Range", "bytes=0-3"), ("If-Range", '"x"')])
    assert st == 200 and body == data
    assert get(s, connect, "/t.bin", [("Range", "bytes=2000-")])[0] == 416
    st, h2, _ = get(s, connect, "/t.bin", [("If-None-Match", etag)])
    assert st == 304 and h2["etag"] == etag
    assert get(s, connect, "/t.bin", [("If-Modified-Since", lm)])[0] == 304
    assert get(s, connect, "/t.bin", [("If-Match", '"other"')])[0] == 412
    st, h2, body = get(s, connect, "/t.bin", method="HEAD")
    assert st == 200 and body == b"" and h2["content-length"] == "1024"
    assert h2["etag"] == etag and h2["last-modified"] == lm
    assert h2["content-type"] == h["content-type"]
    assert len(fds_to(s.proc.pid, docroot / "t.bin")) == 1


def test_directory_index_is_served_from_the_cache(start_server, docroot, connect):
    (docroot / "d").mkdir()
    (docroot / "d" / "index.html").write_bytes(b"<p>d</p>")
    (docroot / "index.html").write_bytes(b"<p>root</p>")
    s = start_server(docroot, "open_file_cache_valid 60s;\n")
    for _ in range(3):
        st, h, body = get(s, connect, "/d/")
        assert (st, body) == (200, b"<p>d</p>")
        assert h["content-type"] == "text/html; charset=utf-8"
        assert get(s, connect, "/")[:3:2] == (200, b"<p>root</p>")
    assert len(fds_to(s.proc.pid, docroot / "d" / "index.html")) == 1
    assert get(s, connect, "/d")[0] == 301  # directories themselves are not cached


# ---------------------------------------------------------------- changes, after the window


def test_file_rewritten_in_place_is_served_fresh_after_the_validity_window(
        start_server, docroot, connect):
    """The default window (1 s)."""
    (docroot / "a.txt").write_bytes(b"version one\n")
    s = start_server(docroot)
    st, h1, body = get(s, connect, "/a.txt")
    assert (st, body) == (200, b"version one\n")
    with open(docroot / "a.txt", "r+b") as f:  # the same inode, the same length
        f.write(b"version two\n")
    time.sleep(1.3)
    st, h2, body = get(s, connect, "/a.txt")
    assert (st, body) == (200, b"version two\n")
    assert h2["etag"] != h1["etag"]


def test_file_grown_in_place_is_served_whole_after_the_window(start_server, docroot, connect):
    (docroot / "a.txt").write_bytes(b"short\n")
    s = start_server(docroot, WINDOW)
    assert get(s, connect, "/a.txt")[2] == b"short\n"
    with open(docroot / "a.txt", "ab") as f:
        f.write(b"and longer now\n")
    time.sleep(PAST_WINDOW_S)
    st, h, body = get(s, connect, "/a.txt")
    assert (st, body) == (200, b"short\nand longer now\n")
    assert h["content-length"] == str(len(body))


def test_gzip_variant_follows_a_change_after_the_window(start_server, docroot, connect):
    """mod_gzip keys its compressed variants by the stat the cached entry holds: once the
    entry is found stale and replaced, the new version is compressed."""
    import gzip
    text = b"the quick brown fox jumps over the lazy dog\n" * 40
    (docroot / "a.txt").write_bytes(text)
    s = start_server(docroot, WINDOW)
    enc = [("Accept-Encoding", "gzip")]
    st, h, body = get(s, connect, "/a.txt", enc)
    assert st == 200 and h["content-encoding"] == "gzip" and gzip.decompress(body) == text
    new = text.replace(b"fox", b"cat")  # the same length
    (docroot / "a.txt.tmp").write_bytes(new)
    os.rename(docroot / "a.txt.tmp", docroot / "a.txt")
    time.sleep(PAST_WINDOW_S)
    st, h2, body = get(s, connect, "/a.txt", enc)
    assert st == 200 and gzip.decompress(body) == new
    assert h2["etag"] != h["etag"]


def test_file_replaced_by_rename_is_served_fresh_after_the_validity_window(
        start_server, docroot, connect):
    (docroot / "a.txt").write_bytes(b"old")
    s = start_server(docroot, WINDOW)
    assert get(s, connect, "/a.txt")[2] == b"old"
    (docroot / "a.txt.tmp").write_bytes(b"new")  # the same length: another inode
    os.rename(docroot / "a.txt.tmp", docroot / "a.txt")
    time.sleep(PAST_WINDOW_S)
    st, _, body = get(s, connect, "/a.txt")
    assert (st, body) == (200, b"new")
    # the old file's descriptor is closed once nothing uses it: one left, the new file's
    assert wait_until(lambda: len(fds_to(s.proc.pid, docroot / "a.txt")) == 1, 5)


def test_deleted_file_is_404_after_the_validity_window(start_server, docroot, connect):
    (docroot / "a.txt").write_bytes(b"doomed")
    s = start_server(docroot, WINDOW)
    assert get(s, connect, "/a.txt")[0] == 200
    os.unlink(docroot / "a.txt")
    time.sleep(PAST_WINDOW_S)
    assert get(s, connect, "/a.txt")[0] == 404
    assert not fds_to(s.proc.pid, docroot / "a.txt")  # dropped, and closed


def test_file_made_a_directory_is_redirected_after_the_window(start_server, docroot,
                                                              connect):
    (docroot / "a").write_bytes(b"a file")
    s = start_server(docroot, WINDOW)
    assert get(s, connect, "/a")[0] == 200
    os.unlink(docroot / "a")
    (docroot / "a").mkdir()
    time.sleep(PAST_WINDOW_S)
    assert get(s, connect, "/a")[0] == 301


@pytest.mark.parametrize("absolute", [False, True], ids=["relative-link", "absolute-link"])
def test_symlink_swapped_to_outside_the_root_is_not_served_after_the_window(
        start_server, docroot, connect, tmp_path, absolute):
    (tmp_path / "secret.txt").write_bytes(b"SECRET outside the root")
    (docroot / "inside.txt").write_bytes(b"inside")
    inside = str(docroot / "inside.txt") if absolute else "inside.txt"
    outside = str(tmp_path / "secret.txt") if absolute else "../secret.txt"
    os.symlink(inside, docroot / "link")
    s = start_server(docroot, WINDOW)
    assert get(s, connect, "/link")[:3:2] == (200, b"inside")
    os.symlink(outside, docroot / "link.new")
    os.rename(docroot / "link.new", docroot / "link")  # atomically swapped
    time.sleep(PAST_WINDOW_S)
    for _ in range(3):
        st, _, body = get(s, connect, "/link")
        assert st == 403 and b"SECRET" not in body


def test_directory_symlink_swapped_to_outside_the_root_is_not_served_after_the_window(
        start_server, docroot, connect, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "index.html").write_bytes(b"SECRET index outside")
    (docroot / "real").mkdir()
    (docroot / "real" / "index.html").write_bytes(b"inside index")
    os.symlink("real", docroot / "d")
    s = start_server(docroot, WINDOW)
    assert get(s, connect, "/d/")[:3:2] == (200, b"inside index")
    os.symlink("../out", docroot / "d.new")
    os.rename(docroot / "d.new", docroot / "d")
    time.sleep(PAST_WINDOW_S)
    st, _, body = get(s, connect, "/d/")
    assert st in (403, 404) and b"SECRET" not in body


def test_index_file_added_before_the_cached_one_takes_over_after_the_window(
        start_server, docroot, connect):
    """index index.html index.htm: /d/ answered with index.htm is cached; once index.html
    appears, it wins, as it would without the cache."""
    (docroot / "d").mkdir()
    (docroot / "d" / "index.htm").write_bytes(b"htm")
    s = start_server(docroot, WINDOW + "index index.html index.htm;\n")
    assert get(s, connect, "/d/")[2] == b"htm"
    (docroot / "d" / "index.html").write_bytes(b"html")
    time.sleep(PAST_WINDOW_S)
    assert get(s, connect, "/d/")[2] == b"html"
    os.unlink(docroot / "d" / "index.html")
    time.sleep(PAST_WINDOW_S)
    assert get(s, connect, "/d/")[2] == b"htm"
    os.unlink(docroot / "d" / "index.htm")
    time.sleep(PAST_WINDOW_S)
    assert get(s, connect, "/d/")[0] == 403


def test_cache_off_shows_every_change_at_once(start_server, docroot, connect):
    (docroot / "a.txt").write_bytes(b"one")
    s = start_server(docroot, "open_file_cache off;\n")
    assert get(s, connect, "/a.txt")[2] == b"one"
    (docroot / "a.txt").write_bytes(b"two, longer")
    assert get(s, connect, "/a.txt")[2] == b"two, longer"
    (docroot / "a.txt.tmp").write_bytes(b"three")
    os.rename(docroot / "a.txt.tmp", docroot / "a.txt")
    assert get(s, connect, "/a.txt")[2] == b"three"
    os.unlink(docroot / "a.txt")
    assert get(s, connect, "/a.txt")[0] == 404


def test_unused_entry_is_closed_after_open_file_cache_inactive(start_server, docroot,
                                                               connect):
    """A deleted file no request asks for again does not keep its descriptor (and its
    disk space) beyond the inactivity time: other requests sweep it out."""
    (docroot / "gone.bin").write_bytes(b"x" * 4096)
    (docroot / "other.txt").write_bytes(b"other")
    s = start_server(docroot, "open_file_cache_valid 60s;\nopen_file_cache_inactive 1s;\n")
    assert get(s, connect, "/gone.bin")[0] == 200
    os.unlink(docroot / "gone.bin")
    assert fds_to(s.proc.pid, docroot / "gone.bin")

    def swept():
        assert get(s, connect, "/other.txt")[0] == 200
        return not fds_to(s.proc.pid, docroot / "gone.bin")
    assert wait_until(swept, 8)


# ---------------------------------------------------------------- many at once


def _files(docroot, n):
    rng = random.Random(7)
    files = {}
    for i in range(n):
        size = rng.choice([0, 1, 100, 1000, 5000, 70000, 300000])
        data = rng.randbytes(size)
        (docroot / f"f{i}.bin").write_bytes(data)
        files[f"/f{i}.bin"] = hashlib.sha256(data).hexdigest()
    return files


def test_concurrent_connections_fetching_many_files_get_correct_bodies(start_server, docroot):
    """16 keep-alive connections, each 60 requests for files picked at random among 40,
    with room for 8 entries: hits, misses and evictions of entries other responses still
    send, all at once. Every body is byte for byte its file."""
    files = _files(docroot, 40)
    s = start_server(docroot, "open_file_cache_max 8;\n")
    errors = []

    def client(seed):
        rng = random.Random(seed)
        try:
            so = socket.create_connection((s.host, s.port), timeout=30)
            c = Client(so)
            for _ in range(60):
                path = rng.choice(list(files))
                c.send(f"GET {path} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
                st, _, body, _ = c.read_response(timeout=30)
                if st != 200 or hashlib.sha256(body).hexdigest() != files[path]:
                    errors.append((path, st, len(body)))
            so.close()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[:5]
    # the cache holds at most its maximum of descriptors once the responses are done
    n = sum(len(fds_to(s.proc.pid, docroot / p.lstrip("/"))) for p in files)
    assert n <= 8


def test_concurrent_parked_response_keeps_its_entry_alive_when_evicted(start_server, docroot,
                                                                       connect):
    """A slow reader's response, larger than the send buffer holds (4 MiB at least), is
    parked (EAGAIN) on the cached descriptor; other requests meanwhile evict its entry
    (room for 1): the body still arrives whole."""
    big = os.urandom(past_buffers(at_least=4 << 20))
    (docroot / "big.bin").write_bytes(big)
    for i in range(4):
        (docroot / f"s{i}.txt").write_bytes(b"small %d" % i)
    s = start_server(docroot, "open_file_cache_max 1;\n")
    slow = connect(s, rcvbuf=16384)
    slow.send(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n")
    time.sleep(0.3)  # the server fills the socket and parks the rest
    for i in range(4):
        assert get(s, connect, f"/s{i}.txt")[2] == b"small %d" % i
    assert len(fds_to(s.proc.pid, docroot / "big.bin")) == 1  # evicted, still referenced
    st, _, body, _ = slow.read_response(timeout=30)
    assert st == 200 and body == big
    assert wait_until(lambda: not fds_to(s.proc.pid, docroot / "big.bin"), 5)


# ---------------------------------------------------------------- small files in memory


def test_small_file_from_memory_is_byte_exact_for_get_head_range_and_gzip(start_server,
                                                                          docroot, connect):
    """A file under open_file_cache_mem_max is answered from its entry's copy: the same
    bytes, headers and validators as from the file, for every kind of request."""
    text = b"".join(b"line %d of a small compressible page\n" % i for i in range(60))
    assert len(text) < 4096
    (docroot / "page.txt").write_bytes(text)
    s = start_server(docroot, "gzip on;\ngzip_types text/plain;\ngzip_min_length 0;\n")
    for _ in range(3):  # a miss, then hits
        st, h, body = get(s, connect, "/page.txt")
        assert st == 200 and body == text and h["content-length"] == str(len(text))
    st, h, body = get(s, connect, "/page.txt", method="HEAD")
    assert st == 200 and body == b"" and h["content-length"] == str(len(text))
    st, _, body = get(s, connect, "/page.txt", [("Range", "bytes=5-14")])
    assert st == 206 and body == text[5:15]
    st, h, body = get(s, connect, "/page.txt", [("Accept-Encoding", "gzip")])
    assert st == 200 and h.get("content-encoding") == "gzip"
    assert gzip.decompress(body) == text
    etag = get(s, connect, "/page.txt")[1]["etag"]
    assert get(s, connect, "/page.txt", [("If-None-Match", etag)])[0] == 304


def test_small_file_rewritten_in_place_is_served_fresh_after_the_window(start_server,
                                                                        docroot, connect):
    """The memory copy is of one version of the file: a rewrite of the same size is seen
    once the window has passed, like any change."""
    f = docroot / "v.txt"
    f.write_bytes(b"version 1")
    s = start_server(docroot, WINDOW)
    assert get(s, connect, "/v.txt")[2] == b"version 1"
    time.sleep(0.05)
    f.write_bytes(b"version 2")
    time.sleep(PAST_WINDOW_S)
    assert get(s, connect, "/v.txt")[2] == b"version 2"


def test_pipelined_small_files_to_a_reader_that_stops_arrive_whole(start_server, docroot,
                                                                   connect):
    """200 pipelined requests for a 3 KiB file to a client that reads nothing at first:
    the sends park (the memory bodies are copied onto the connection) and every response
    then arrives whole."""
    body3k = os.urandom(3000)
    (docroot / "s.bin").write_bytes(body3k)
    s = start_server(docroot)
    c = connect(s, rcvbuf=8192)
    c.send(b"GET /s.bin HTTP/1.1\r\nHost: t\r\n\r\n" * 200)
    time.sleep(0.5)
    for _ in range(200):
        st, _, body, _ = c.read_response(timeout=30)
        assert st == 200 and body == body3k


def rewrite_in_place(path, data):
    """Overwrite the file's bytes without truncating or replacing it: same inode, size."""
    fd = os.open(path, os.O_WRONLY)
    try:
        assert os.write(fd, data) == len(data)
    finally:
        os.close(fd)


def test_mem_max_zero_sends_small_files_from_the_descriptor(start_server, docroot, connect):
    """With the window at a minute, a small file rewritten in place shows whether its bytes
    were copied into the entry: by default (4k) the copy in memory is sent, with
    open_file_cache_mem_max 0 the bytes come from the open descriptor, so the new ones."""
    (docroot / "mem.txt").write_bytes(b"abc")
    (docroot / "fd.txt").write_bytes(b"abc")
    in_memory = start_server(docroot, "open_file_cache_valid 60s;\n")
    from_fd = start_server(docroot, "open_file_cache_valid 60s;\nopen_file_cache_mem_max 0;\n")
    assert get(in_memory, connect, "/mem.txt")[2] == b"abc"
    assert get(from_fd, connect, "/fd.txt")[2] == b"abc"
    rewrite_in_place(docroot / "mem.txt", b"xyz")
    rewrite_in_place(docroot / "fd.txt", b"xyz")
    for _ in range(3):
        assert get(in_memory, connect, "/mem.txt")[2] == b"abc"
        assert get(from_fd, connect, "/fd.txt")[2] == b"xyz"


def test_cache_holds_at_most_half_the_descriptor_limit(start_server, docroot, connect):
    """With 200 descriptors (prlimit), the default open_file_cache_max 10000 is lowered to
    100, said at start, and after 150 different files only 100 stay open: the rest of
    the descriptors are left for connections."""
    for i in range(150):
        (docroot / f"f{i}.txt").write_bytes(b"x" * 5000)  # past mem_max: kept open
    s = start_server(docroot, wrap=("prlimit", "--nofile=200:200", "--"))
    assert "open_file_cache_max 10000 lowered to 100, half the descriptor limit" in \
        s.error_log(), s.error_log()
    c = connect(s)
    for i in range(150):
        c.send(f"GET /f{i}.txt HTTP/1.1\r\nHost: t\r\n\r\n".encode())
        st, _, body, _ = c.read_response()
        assert (st, len(body)) == (200, 5000), i
    held = sum(len(fds_to(s.proc.pid, docroot / f"f{i}.txt")) for i in range(150))
    assert 50 <= held <= 100, held


# ---------------------------------------------------------------- configuration


def check_config(tmp_path, lines):
    www = tmp_path / "www"
    www.mkdir(exist_ok=True)
    path = tmp_path / "t.conf"
    path.write_text(f'listen 127.0.0.1:0;\nroot "{www}";\n{lines}')
    p = subprocess.run([BIN, "-t", "-c", str(path)], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=10)
    return p.returncode, p.stdout.decode("latin-1")


def test_config_accepts_every_open_file_cache_directive(tmp_path):
    code, out = check_config(tmp_path, "open_file_cache on;\nopen_file_cache_max 20000;\n"
                                       "open_file_cache_valid 60s;\n"
                                       "open_file_cache_inactive 2m;\n"
                                       "open_file_cache_mem_max 16k;\n")
    assert code == 0, out


@pytest.mark.parametrize("line", [
    "open_file_cache maybe;",
    "open_file_cache_max 0;",
    "open_file_cache_max 10k;",
    "open_file_cache_max 1000001;",
    "open_file_cache_valid soon;",
    "open_file_cache_inactive -1s;",
    "open_file_cache_valid 1s 2s;",
    "open_file_cache_mem_max 2m;",
    "open_file_cache_mem_max lots;",
])
def test_config_rejects_a_bad_open_file_cache_directive(tmp_path, line):
    code, out = check_config(tmp_path, line + "\n")
    assert code == 1, out
    assert "static" in out, out
