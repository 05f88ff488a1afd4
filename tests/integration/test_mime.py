"""Content types (mod_mime), through the real binary: the extension table, the charset on
text types, libmagic for files whose extension says nothing, its per-file cache (keyed by
device and inode, valid while mtime and size match), and the directives mime_types,
mime_magic and default_type.
"""
import os
import struct
import subprocess
import threading
import zlib

import pytest

from conftest import BIN, BY_DESIGN, SANITIZED
from test_allocations import alloc_counter

TEXT = b"Just some plain text.\nA second line of it.\n"


def png_bytes(width=2, height=2):
    """A small valid PNG (RGB, 8 bits)."""

    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data +
                struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    rows = b"".join(b"\x00" + b"\x80\x40\x20" * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" +
            chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


PNG = png_bytes()


def get(connect, server, path, method="GET", extra=b""):
    """(status, headers, body) of one request on a new connection."""
    c = connect(server)
    c.send(f"{method} {path} HTTP/1.1\r\nHost: t\r\n".encode() + extra + b"\r\n")
    status, headers, body, _ = c.read_response(head_only=method == "HEAD")
    return status, headers, body


def sniffs(server, path):
    """How often libmagic looked at the file (the debug line mod_mime logs each time)."""
    st = os.stat(path)
    return server.error_log().count(f"mime: sniffed inode {st.st_ino} on device {st.st_dev}:")


def ctype(connect, server, path):
    status, headers, _ = get(connect, server, path)
    assert status == 200, (path, status)
    return headers.get("content-type")


# ---------------------------------------------------------------- extensions


def test_extensions_give_their_types(start_server, docroot, connect):
    expected = {
        "index.html": "text/html; charset=utf-8",
        "style.css": "text/css; charset=utf-8",
        "app.js": "text/javascript; charset=utf-8",
        "mod.mjs": "text/javascript; charset=utf-8",
        "notes.txt": "text/plain; charset=utf-8",
        "data.json": "application/json",
        "logo.svg": "image/svg+xml",
        "module.wasm": "application/wasm",
        "font.woff2": "font/woff2",
        "photo.jpg": "image/jpeg",
        "archive.tar.gz": "application/gzip",
        "UPPER.PNG": "image/png",
    }
    for name in expected:
        (docroot / name).write_bytes(b"x")
    server = start_server(docroot)
    for name, t in expected.items():
        assert ctype(connect, server, "/" + name) == t, name


def test_text_types_carry_utf8_charset_and_others_do_not(start_server, docroot, connect):
    for name in ("a.html", "a.css", "a.txt", "a.js", "a.csv", "a.png", "a.json", "a.xml"):
        (docroot / name).write_bytes(b"x")
    server = start_server(docroot)
    for name in ("a.html", "a.css", "a.txt", "a.js", "a.csv"):
        assert ctype(connect, server, "/" + name).endswith("; charset=utf-8"), name
    for name in ("a.png", "a.json", "a.xml"):
        assert "charset" not in ctype(connect, server, "/" + name), name


def test_index_file_gets_its_type(start_server, docroot, connect):
    (docroot / "index.html").write_bytes(b"<!doctype html><p>hi")
    server = start_server(docroot)
    assert ctype(connect, server, "/") == "text/html; charset=utf-8"


def test_extension_wins_over_content(start_server, docroot, connect):
    (docroot / "really-png.txt").write_bytes(PNG)
    server = start_server(docroot)
    assert ctype(connect, server, "/really-png.txt") == "text/plain; charset=utf-8"


# ---------------------------------------------------------------- libmagic


def test_extensionless_png_is_image_png(start_server, docroot, connect):
    (docroot / "picture").write_bytes(PNG)
    server = start_server(docroot)
    status, headers, body = get(connect, server, "/picture")
    assert (status, headers["content-type"], body) == (200, "image/png", PNG)


def test_extensionless_text_is_text_plain_utf8(start_server, docroot, connect):
    (docroot / "README").write_bytes(TEXT)
    server = start_server(docroot)
    assert ctype(connect, server, "/README") == "text/plain; charset=utf-8"


def test_unknown_extension_with_png_content_is_sniffed(start_server, docroot, connect):
    (docroot / "image.qqqunknown").write_bytes(PNG)
    server = start_server(docroot)
    assert ctype(connect, server, "/image.qqqunknown") == "image/png"


def test_head_has_the_sniffed_type(start_server, docroot, connect):
    (docroot / "picture").write_bytes(PNG)
    server = start_server(docroot)
    status, headers, _ = get(connect, server, "/picture", method="HEAD")
    assert (status, headers["content-type"]) == (200, "image/png")


def test_range_answers_carry_the_sniffed_type(start_server, docroot, connect):
    (docroot / "picture").write_bytes(PNG)
    server = start_server(docroot)
    status, headers, body = get(connect, server, "/picture", extra=b"Range: bytes=0-3\r\n")
    assert (status, headers["content-type"], body) == (206, "image/png", PNG[:4])
    status, headers, body = get(connect, server, "/picture",
                                extra=b"Range: bytes=0-3,8-11\r\n")
    assert status == 206
    assert headers["content-type"].startswith("multipart/byteranges; boundary=")
    assert body.count(b"\r\nContent-Type: image/png\r\n") == 2, body


def test_empty_extensionless_file_is_default_type(start_server, docroot, connect):
    (docroot / "empty").write_bytes(b"")
    server = start_server(docroot)
    assert ctype(connect, server, "/empty") == "application/octet-stream"


def test_many_clients_ask_for_a_new_extensionless_file_at_once(start_server, docroot,
                                                                 connect):
    (docroot / "picture").write_bytes(PNG)
    (docroot / "README").write_bytes(TEXT)
    server = start_server(docroot)
    n = 16
    clients = [connect(server, timeout=20.0) for _ in range(n)]
    barrier = threading.Barrier(n)
    results = [None] * n

    def ask(i):
        path = "/picture" if i % 4 else "/README"
        barrier.wait()
        got = []
        for _ in range(5):
            clients[i].send(f"GET {path} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
            status, headers, _, _ = clients[i].read_response(timeout=20.0)
            got.append((status, headers.get("content-type")))
        results[i] = got

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for i, got in enumerate(results):
        want = "image/png" if i % 4 else "text/plain; charset=utf-8"
        assert got == [(200, want)] * 5, (i, got)
    # libmagic ran once per file, however many threads asked for it at the same moment.
    assert sniffs(server, docroot / "picture") == 1, server.error_log()
    assert sniffs(server, docroot / "README") == 1, server.error_log()


# ---------------------------------------------------------------- the cache


def rewrite_keeping_mtime(path, data):
    """Overwrite the file in place (same inode) and give it back its mtime."""
    st = os.stat(path)
    with open(path, "r+b") as f:
        f.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


# The two tests below change a file between requests: the open-file cache checks the file
# again on every request (open_file_cache_valid 0), so that each request reaches mod_mime
# with the file as it is now.
RECHECK = "open_file_cache_valid 0;\n"


def test_type_is_cached_while_mtime_and_size_match(start_server, docroot, connect):
    path = docroot / "data"
    path.write_bytes(PNG)
    server = start_server(docroot, RECHECK)
    assert ctype(connect, server, "/data") == "image/png"
    # The same inode, size and mtime: the cache answers (libmagic would say text now).
    rewrite_keeping_mtime(path, b"a" * len(PNG))
    assert ctype(connect, server, "/data") == "image/png"
    assert ctype(connect, server, "/data") == "image/png"
    assert sniffs(server, path) == 1
    # A new mtime (nanoseconds are enough): sniffed again.
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    assert ctype(connect, server, "/data") == "text/plain; charset=utf-8"
    assert ctype(connect, server, "/data") == "text/plain; charset=utf-8"
    assert sniffs(server, path) == 2


def test_type_changes_when_the_file_is_replaced(start_server, docroot, connect):
    path = docroot / "data"
    path.write_bytes(PNG)
    server = start_server(docroot, RECHECK)
    assert ctype(connect, server, "/data") == "image/png"
    # Rewritten in place with other content (another size).
    path.write_bytes(TEXT)
    assert ctype(connect, server, "/data") == "text/plain; charset=utf-8"
    # Replaced by rename (another inode), as deploy tools do.
    tmp = docroot / ".data.new"
    tmp.write_bytes(PNG)
    os.rename(tmp, path)
    assert ctype(connect, server, "/data") == "image/png"


@pytest.mark.skipif(SANITIZED, reason="the sanitizers replace malloc, so there is nothing "
                    "to count " + BY_DESIGN)
def test_cached_types_cost_no_allocation(start_server, docroot, connect, tmp_path):
    lib = alloc_counter()  # built when missing; never a skip
    (docroot / "picture").write_bytes(PNG)
    (docroot / "a.html").write_bytes(b"<p>x")
    counter = tmp_path / "allocs"
    server = start_server(docroot, env={"LD_PRELOAD": lib,
                                        "LFHTTPD_ALLOC_COUNTER": str(counter)})
    c = connect(server)

    def run(n):
        for i in range(n):
            path = "/picture" if i % 2 else "/a.html"
            c.send(f"GET {path} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
            status, headers, _, _ = c.read_response()
            assert (status, headers["content-type"]) == (
                200, "image/png" if i % 2 else "text/html; charset=utf-8")

    def allocations():
        with open(counter, "rb") as f:
            return struct.unpack("<Q", f.read(8))[0]

    run(100)  # the first sniff, and every thread's first request, may allocate
    before = allocations()
    run(200)
    # The server's own once-a-second work (log flushing, timers) may allocate now and
    # then; an allocation per request, or per content-type lookup, would add 200.
    assert allocations() - before < 20


# ---------------------------------------------------------------- directives


def test_mime_magic_off_serves_default_type(start_server, docroot, connect):
    (docroot / "picture").write_bytes(PNG)
    server = start_server(docroot, conf_extra="mime_magic off;\n")
    assert ctype(connect, server, "/picture") == "application/octet-stream"
    (docroot / "picture.png").write_bytes(PNG)  # the extension table still answers
    assert ctype(connect, server, "/picture.png") == "image/png"


def test_default_type_for_names_and_content_nobody_knows(start_server, docroot, connect):
    # Bytes libmagic calls application/octet-stream: "I do not know".
    (docroot / "blob.qqqunknown").write_bytes(bytes(range(255, -1, -1)) * 4)
    (docroot / "picture").write_bytes(PNG)
    server = start_server(docroot, conf_extra="default_type application/x-lfhttpd-test;\n")
    assert ctype(connect, server, "/blob.qqqunknown") == "application/x-lfhttpd-test"
    assert ctype(connect, server, "/picture") == "image/png"


def test_default_text_type_gets_the_charset(start_server, docroot, connect):
    (docroot / "picture").write_bytes(PNG)
    server = start_server(docroot, conf_extra="mime_magic off;\ndefault_type text/plain;\n")
    assert ctype(connect, server, "/picture") == "text/plain; charset=utf-8"


def test_mime_types_file_of_ones_own(start_server, docroot, connect, tmp_path):
    types = tmp_path / "my.types"
    types.write_text("# mine\napplication/x-lfhttpd-one\tone ONE2\n"
                     "application/x-wrong js\n")
    for name in ("a.one", "a.one2", "a.js", "a.png"):
        (docroot / name).write_bytes(b"x")
    server = start_server(docroot, conf_extra=f'mime_types "{types}";\n')
    assert ctype(connect, server, "/a.one") == "application/x-lfhttpd-one"
    assert ctype(connect, server, "/a.one2") == "application/x-lfhttpd-one"
    assert ctype(connect, server, "/a.js") == "text/javascript; charset=utf-8"  # strict
    assert ctype(connect, server, "/a.png") == "image/png"  # built-in


def check_config_error(tmp_path, extra, message):
    conf = tmp_path / "bad.conf"
    conf.write_text(f"listen 127.0.0.1:0;\nroot {tmp_path};\n{extra}")
    p = subprocess.run([BIN, "-t", "-c", str(conf)], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=30)
    out = p.stdout.decode()
    assert p.returncode == 1, out
    assert f"{conf}:{message}" in out, out


def test_directive_errors_name_their_line(tmp_path):
    check_config_error(tmp_path, "mime_types /nonexistent/mime.types;\n",
                       '3: mime: mime_types "/nonexistent/mime.types": No such file')
    check_config_error(tmp_path, "\nmime_magic sometimes;\n",
                       '4: mime: mime_magic: expected "on" or "off", not "sometimes"')
    check_config_error(tmp_path, "default_type notatype;\n",
                       '3: mime: default_type: "notatype" is not a media type')
    check_config_error(tmp_path, "mime_magic on;\nmime_magic off;\n",
                       f'4: "mime_magic" directive is duplicate (first at {tmp_path / "bad.conf"}:3)')


def test_directives_pass_config_test(tmp_path):
    conf = tmp_path / "good.conf"
    conf.write_text(f"listen 127.0.0.1:0;\nroot {tmp_path};\nmime_types off;\n"
                    "mime_magic off;\ndefault_type text/plain;\n")
    p = subprocess.run([BIN, "-t", "-c", str(conf)], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=30)
    assert p.returncode == 0, p.stdout.decode()


def test_concurrent_sniffing_of_many_files_shares_the_libmagic_handle_pool(start_server,
                                                                            docroot):
    """8 clients at once ask for 80 new extensionless files (PNG and text): libmagic runs
    on several threads together, each with a handle of the pool taken for the sniff and
    given back. Every answer has the right type, each file is sniffed once, and the pool
    never holds more handles than the 4 threads that could sniff at the same time."""
    import re
    for i in range(80):
        (docroot / f"file{i}").write_bytes(PNG if i % 2 else TEXT + str(i).encode())
    server = start_server(docroot)
    errors = []

    def worker(k):
        try:
            c = server.connect(timeout=30)
            for i in list(range(k, 80)) + list(range(k)):
                c.send(f"GET /file{i} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
                status, headers, _, raw = c.read_response(timeout=30)
                want = "image/png" if i % 2 else "text/plain; charset=utf-8"
                assert (status, headers.get("content-type")) == (200, want), (i, raw)
            c.close()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k * 10,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for i in range(80):
        assert sniffs(server, docroot / f"file{i}") == 1, i
    opened = re.findall(r"mime: libmagic handle (\d+) opened", server.error_log())
    assert 1 <= len(opened) <= 4, opened


# ---------------------------------------------------------------- nginx's http { } defaults

def _nginx_and_ours(tmp_path, start_server, http_text):
    """The same `http { }` text run by nginx and by lfhttpd: (nginx's port, lfhttpd)."""
    from conftest import Nginx, free_port, with_ports
    theirs = Nginx(tmp_path / "nginx", None, http_text, http=True)
    port = free_port()
    ours = start_server(None, conf="error_log stderr info;\naccess_log off;\nhttp {\n" +
                        with_ports(http_text, [port]) + "}\n")
    return theirs, ours


@pytest.mark.parametrize("default_type, want", [("", "text/plain"),
                                                ("default_type application/octet-stream;",
                                                 "application/octet-stream")])
def test_a_file_with_an_http_block_types_unknown_files_by_default_type_as_nginx(
        tmp_path, start_server, connect, default_type, want):
    """With nginx's `http { }`, a file whose extension says nothing gets default_type
    (nginx's text/plain unless the file sets it), not what its content looks like: a PNG
    named `blob` and a text named `README` are typed alike by nginx and by lfhttpd."""
    root = tmp_path / "www"
    root.mkdir()
    (root / "blob").write_bytes(PNG)
    (root / "README").write_bytes(TEXT)
    text = (f"    {default_type}\n    server {{\n        listen 127.0.0.1:{{port0}};\n"
            f"        root {root};\n    }}\n")
    theirs, ours = _nginx_and_ours(tmp_path, start_server, text)
    try:
        for path in ("/blob", "/README"):
            c = connect(ours)
            c.send(f"GET {path} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
            st, headers, _, _ = c.read_response()
            import urllib.request
            with urllib.request.urlopen(f"http://127.0.0.1:{theirs.port}{path}") as r:
                nginx_type = r.headers.get("Content-Type")
            assert nginx_type.split(";")[0] == want
            assert st == 200 and headers.get("content-type").split(";")[0] == want, path
    finally:
        theirs.stop()
