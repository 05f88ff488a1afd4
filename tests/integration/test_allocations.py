"""The common path allocates nothing: counted from outside with an LD_PRELOAD library
(tests/alloc_counter.c) that counts every malloc, calloc, realloc and aligned allocation
of the server process in a shared file the test reads at any moment. The library sits
beside the binary under test (BUILD/tests/alloc_counter.so); a missing one is built with
make, and when that fails the tests fail with the command: they never skip for it."""
import os
import struct
import subprocess

import pytest

from conftest import BIN, BY_DESIGN, ROOT, SANITIZED

LIB = os.path.join(os.path.dirname(BIN), "tests", "alloc_counter.so")
REQ = b"GET /index.html HTTP/1.1\r\nHost: t\r\n\r\n"


def allocations(path):
    with open(path, "rb") as f:
        return struct.unpack("<Q", f.read(8))[0]


def alloc_counter():
    """The counting library's path, built first when it is missing."""
    if not os.path.exists(LIB):
        build = os.path.dirname(BIN)
        cmd = ["make", "-C", ROOT, f"B={build}", LIB]
        try:
            r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, errors="replace", timeout=300)
            out = r.stdout
        except (OSError, subprocess.SubprocessError) as e:
            out = str(e)
        if not os.path.exists(LIB):
            pytest.fail(f"{LIB} is missing and could not be built; run: {' '.join(cmd)}\n"
                        + out[-2000:], pytrace=False)
    return LIB


def run(client, n, batch=100):
    for _ in range(n // batch):
        client.send(REQ * batch)
        for _ in range(batch):
            st, _, body, _ = client.read_response()
            assert st == 200 and len(body) == 1024


@pytest.fixture
def counted(start_server, docroot, tmp_path):
    if SANITIZED:
        pytest.skip("the sanitizers replace malloc, so there is nothing to count " + BY_DESIGN)
    lib = alloc_counter()
    (docroot / "index.html").write_bytes(b"x" * 1024)
    counter = tmp_path / "allocs"
    s = start_server(docroot, "access_log off;\nkeepalive_requests 0;\n",
                     env={"LD_PRELOAD": lib, "LFHTTPD_ALLOC_COUNTER": str(counter)})
    return s, counter


def test_keepalive_static_requests_do_not_allocate(counted, connect):
    """10,000 keep-alive requests for a static file after a warm-up of 500: the count of
    allocations must not grow with the requests. The warm-up pays for what is allocated
    once (a thread's log buffer, the first connection's struct, a carry-over buffer for a
    pipelined tail); a small constant slack stays for timers and the like."""
    s, counter = counted
    c = connect(s, timeout=10)
    run(c, 500)
    before = allocations(counter)
    run(c, 10_000)
    after = allocations(counter)
    assert after - before < 50, f"{after - before} allocations over 10,000 requests"


def test_requests_over_several_connections_do_not_allocate_per_request(counted, connect):
    """The same over 4 connections in turn: connection structs come from a free list, so
    even new connections cost no allocation once the pool is warm."""
    s, counter = counted
    clients = [connect(s, timeout=10) for _ in range(4)]
    for c in clients:
        run(c, 200)
    before = allocations(counter)
    for c in clients:
        run(c, 2500)
    after = allocations(counter)
    assert after - before < 50, f"{after - before} allocations over 10,000 requests"


def test_regex_locations_do_not_allocate_per_request(start_server, docroot, tmp_path, connect):
    """Requests whose path goes through three regex locations, each path too long for the
    threads' memo of recent answers (112 bytes), so that every request runs the regexes:
    matching them allocates nothing (the C library's regexec allocated on every call)."""
    if SANITIZED:
        pytest.skip("the sanitizers replace malloc, so there is nothing to count " + BY_DESIGN)
    lib = alloc_counter()
    name = "p" * 120 + ".html"
    (docroot / name).write_bytes(b"x" * 1024)
    counter = tmp_path / "allocs"
    s = start_server(docroot, "access_log off;\nkeepalive_requests 0;\n"
                     "server {\n"
                     "  location ~* \\.(png|jpe?g|gif|svg|woff2?)$ { expires 30d; }\n"
                     "  location ~ ^/users/[0-9]+$ { return 204; }\n"
                     "  location ~ /\\.(git|ht) { return 403; }\n"
                     "  location / { }\n"
                     "}\n",
                     env={"LD_PRELOAD": lib, "LFHTTPD_ALLOC_COUNTER": str(counter)})
    req = f"GET /{name} HTTP/1.1\r\nHost: t\r\n\r\n".encode()
    c = connect(s, timeout=10)

    def run_long(n, batch=100):
        for _ in range(n // batch):
            c.send(req * batch)
            for _ in range(batch):
                st, _, body, _ = c.read_response()
                assert st == 200 and len(body) == 1024

    run_long(500)
    before = allocations(counter)
    run_long(5000)
    after = allocations(counter)
    assert after - before < 50, f"{after - before} allocations over 5,000 requests"


def test_regex_location_captures_do_not_allocate_per_request(start_server, docroot, tmp_path,
                                                             connect):
    """A regex location that matches, whose numbered and named captures feed try_files and
    add_header, on a path too long for the memo: the captures are slices of the path and
    the match block is the thread's, so a request allocates nothing."""
    if SANITIZED:
        pytest.skip("the sanitizers replace malloc, so there is nothing to count " + BY_DESIGN)
    lib = alloc_counter()
    name = "q" * 120
    (docroot / f"{name}.html").write_bytes(b"x" * 1024)
    counter = tmp_path / "allocs"
    s = start_server(docroot, "access_log off;\nkeepalive_requests 0;\n"
                     "server {\n"
                     "  location ~ ^/(?<stem>q+)\\.htm$ {\n"
                     "    add_header X-Stem $stem;\n"
                     "    try_files /$1.html =404;\n"
                     "  }\n"
                     "  location / { }\n"
                     "}\n",
                     env={"LD_PRELOAD": lib, "LFHTTPD_ALLOC_COUNTER": str(counter)})
    req = f"GET /{name}.htm HTTP/1.1\r\nHost: t\r\n\r\n".encode()
    c = connect(s, timeout=10)

    def run_captured(n, batch=100):
        for _ in range(n // batch):
            c.send(req * batch)
            for _ in range(batch):
                st, h, body, _ = c.read_response()
                assert st == 200 and len(body) == 1024 and h.get("x-stem") == name

    run_captured(500)
    before = allocations(counter)
    run_captured(5000)
    after = allocations(counter)
    assert after - before < 50, f"{after - before} allocations over 5,000 requests"


def test_rewrites_do_not_allocate_per_request(start_server, docroot, tmp_path, connect):
    """A server's rewrite and a location's `set`, `if` (one reading a `map` with a regex
    key) and `rewrite ... last` with captures and arguments: values are expanded on the
    stack or in the request's own bytes, the new path written in the request's buffer, the
    groups of an `if` kept there, so a request allocates nothing."""
    if SANITIZED:
        pytest.skip("the sanitizers replace malloc, so there is nothing to count " + BY_DESIGN)
    lib = alloc_counter()
    (docroot / "files").mkdir()
    (docroot / "files" / "page.html").write_bytes(b"x" * 1024)
    counter = tmp_path / "allocs"
    s = start_server(docroot, "access_log off;\nkeepalive_requests 0;\n"
                     "map $arg_a $digit { default other; ~^(\\d)$ d$1; }\n"
                     "server {\n"
                     "  rewrite ^/old/(.*)$ /new/$1;\n"
                     "  location /new/ {\n"
                     "    set $tag \"$arg_a-$host\";\n"
                     "    if ($tag != 1-t) { return 403; }\n"
                     "    if ($digit != d1) { return 403; }\n"
                     "    if ($http_host !~ ^t$) { return 403; }\n"
                     "    if ($arg_a ~ ^(\\d)$) {\n"
                     "      rewrite ^/new/(?<leaf>\\w+)$ /files/$leaf.html?from=new last;\n"
                     "    }\n"
                     "    return 404;\n"
                     "  }\n"
                     "  location / { }\n"
                     "}\n",
                     env={"LD_PRELOAD": lib, "LFHTTPD_ALLOC_COUNTER": str(counter)})
    req = b"GET /old/page?a=1 HTTP/1.1\r\nHost: t\r\n\r\n"
    c = connect(s, timeout=10)

    def run_rewritten(n, batch=100):
        for _ in range(n // batch):
            c.send(req * batch)
            for _ in range(batch):
                st, _, body, _ = c.read_response()
                assert st == 200 and len(body) == 1024

    run_rewritten(500)
    before = allocations(counter)
    run_rewritten(5000)
    after = allocations(counter)
    assert after - before < 50, f"{after - before} allocations over 5,000 requests"


def test_bench_rewrite_row_does_not_allocate_per_request(start_server, docroot, tmp_path,
                                                         connect):
    """The configuration of the bench's rewrite_ka row as it is (tests/bench/rewrite.conf.in:
    two maps with regex keys, one read by an `if`, one by the access log's if=, `set`, two
    `if`s that do not match, a rewrite ... last, try_files), asked /r/index.html with a
    User-Agent: the maps' answers are remembered per thread (allocated once, in the
    warm-up), the rest on the stack, so a request allocates nothing."""
    if SANITIZED:
        pytest.skip("the sanitizers replace malloc, so there is nothing to count " + BY_DESIGN)
    lib = alloc_counter()
    (docroot / "index.html").write_bytes(b"x" * 1024)
    counter = tmp_path / "allocs"
    with open(os.path.join(ROOT, "tests", "bench", "rewrite.conf.in")) as f:
        sites = "".join(ln for ln in f if not ln.startswith("#"))
    sites = (sites.replace("@LISTEN_DEFAULT@", "").replace("@DOCROOT@", str(docroot))
             .replace("@RUNDIR@", str(tmp_path)))
    s = start_server(docroot, "access_log off;\nkeepalive_requests 0;\n" + sites,
                     env={"LD_PRELOAD": lib, "LFHTTPD_ALLOC_COUNTER": str(counter)})
    req = b"GET /r/index.html HTTP/1.1\r\nHost: t\r\nUser-Agent: ApacheBench/2.3\r\n\r\n"
    c = connect(s, timeout=10)

    def run_row(n, batch=100):
        for _ in range(n // batch):
            c.send(req * batch)
            for _ in range(batch):
                st, _, body, _ = c.read_response()
                assert st == 200 and len(body) == 1024

    run_row(500)
    before = allocations(counter)
    run_row(5000)
    after = allocations(counter)
    assert after - before < 50, f"{after - before} allocations over 5,000 requests"


def test_custom_access_log_in_a_location_does_not_allocate_per_request(start_server, docroot,
                                                                       tmp_path, connect):
    """A log_format with variables (the answer's among them) and two access_logs in the
    location, one with if=: each line is built on the stack and written at once."""
    if SANITIZED:
        pytest.skip("the sanitizers replace malloc, so there is nothing to count " + BY_DESIGN)
    lib = alloc_counter()
    (docroot / "index.html").write_bytes(b"x" * 1024)
    counter = tmp_path / "allocs"
    log = tmp_path / "custom.log"
    s = start_server(docroot, "access_log off;\nkeepalive_requests 0;\n"
                     "log_format t '$remote_addr [$time_local] \"$request\" $status "
                     "$body_bytes_sent $request_id \"$http_user_agent\"';\n"
                     "log_format j escape=json '{\"uri\":\"$uri\",\"s\":$status}';\n"
                     "server {\n"
                     f"  location / {{ access_log {log} t; access_log {log} j if=$status; }}\n"
                     "}\n",
                     env={"LD_PRELOAD": lib, "LFHTTPD_ALLOC_COUNTER": str(counter)})
    c = connect(s, timeout=10)
    run(c, 500)
    before = allocations(counter)
    run(c, 5000)
    after = allocations(counter)
    assert after - before < 50, f"{after - before} allocations over 5,000 requests"
    assert log.read_text().count("\n") >= 2 * 5500 - 200  # the lines were written


def test_variable_roots_and_if_settings_do_not_allocate_per_request(start_server, docroot,
                                                                     tmp_path, connect):
    """`root` with $host, an `if (-f $request_filename)` whose block adds a header, and an
    alias built from a regex location's captures: the file is written in the request's
    file room in the frame, the tests' names on the stack, so a request allocates
    nothing."""
    if SANITIZED:
        pytest.skip("the sanitizers replace malloc, so there is nothing to count " + BY_DESIGN)
    lib = alloc_counter()
    (docroot / "t" / "files").mkdir(parents=True)
    (docroot / "t" / "files" / "page.html").write_bytes(b"x" * 1024)
    (docroot / "home" / "ann").mkdir(parents=True)
    (docroot / "home" / "ann" / "page.html").write_bytes(b"x" * 1024)
    counter = tmp_path / "allocs"
    s = start_server(docroot, "access_log off;\nkeepalive_requests 0;\n"
                     "server {\n"
                     f"  root {docroot}/$host;\n"
                     "  location /files/ {\n"
                     "    if (-f $request_filename) { add_header X-Found $document_root; }\n"
                     "  }\n"
                     "  location ~ ^/u/(\\w+)/(.*)$ {\n"
                     f"    alias {docroot}/home/$1/$2;\n"
                     "  }\n"
                     "}\n",
                     env={"LD_PRELOAD": lib, "LFHTTPD_ALLOC_COUNTER": str(counter)})
    reqs = [b"GET /files/page.html HTTP/1.1\r\nHost: t\r\n\r\n",
            b"GET /u/ann/page.html HTTP/1.1\r\nHost: t\r\n\r\n"]
    c = connect(s, timeout=10)

    def run_rooted(n, batch=100):
        for _ in range(n // batch):
            c.send(b"".join(reqs) * (batch // 2))
            for i in range(batch):
                st, h, body, _ = c.read_response()
                assert st == 200 and len(body) == 1024
                assert i % 2 or h.get("x-found") == f"{docroot}/t"

    run_rooted(500)
    before = allocations(counter)
    run_rooted(5000)
    after = allocations(counter)
    assert after - before < 50, f"{after - before} allocations over 5,000 requests"


def test_gzip_access_log_does_not_allocate_per_request_nor_per_flush(start_server, docroot,
                                                                      tmp_path, connect):
    """access_log with gzip and a small buffer, written a few hundred times over the run:
    each thread's buffer keeps its compressor and output space, reset for every member."""
    if SANITIZED:
        pytest.skip("the sanitizers replace malloc, so there is nothing to count " + BY_DESIGN)
    lib = alloc_counter()
    (docroot / "index.html").write_bytes(b"x" * 1024)
    counter = tmp_path / "allocs"
    log = tmp_path / "gz.log"
    s = start_server(docroot, "access_log off;\nkeepalive_requests 0;\n"
                     "log_format t '$remote_addr [$time_local] \"$request\" $status';\n"
                     f"server {{\n  location / {{ access_log {log} t gzip buffer=4k; }}\n}}\n",
                     env={"LD_PRELOAD": lib, "LFHTTPD_ALLOC_COUNTER": str(counter)})
    c = connect(s, timeout=10)
    run(c, 500)
    before = allocations(counter)
    run(c, 5000)
    after = allocations(counter)
    assert after - before < 50, f"{after - before} allocations over 5,000 requests"
    assert log.stat().st_size > 0  # members were written
