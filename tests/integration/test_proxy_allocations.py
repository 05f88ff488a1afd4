"""A proxied keep-alive request allocates nothing once warm: the counting library of
test_allocations.py (tests/alloc_counter.c, LD_PRELOAD) in the proxy only, in front of a
second lfhttpd as the upstream (not counted: it is another process, started without the
library). The proxy keeps its upstream connections in a pool (`keepalive 32`), so after
the warm-up neither side's connection, nor the request's or response's buffers, is new."""
import pytest

from conftest import BY_DESIGN, SANITIZED
from test_allocations import alloc_counter, allocations

REQ = b"GET /index.html HTTP/1.1\r\nHost: t\r\n\r\n"
BIG_REQ = b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n"
BIG = 100 * 1024


@pytest.fixture
def proxied(start_server, tmp_path):
    """(proxy, counter file): an upstream lfhttpd serving index.html (1 KiB) and big.bin
    (100 KiB), and a counted lfhttpd proxying every request to it. The proxy's own root is
    empty, so a 200 with the right body can only have come from the upstream."""
    return start_proxied(start_server, tmp_path)


def start_proxied(start_server, tmp_path, top="", location=""):
    """proxied's, with `top` at the proxy's top level and `location` in its location."""
    if SANITIZED:
        pytest.skip("the sanitizers replace malloc, so there is nothing to count " + BY_DESIGN)
    lib = alloc_counter()
    up_root = tmp_path / "upstream-www"
    up_root.mkdir()
    (up_root / "index.html").write_bytes(b"u" * 1024)
    (up_root / "big.bin").write_bytes(bytes(range(256)) * (BIG // 256))
    upstream = start_server(up_root, "access_log off;\nkeepalive_requests 0;\n"
                                     "open_file_cache_mem_max 128k;\n")
    own_root = tmp_path / "proxy-www"
    own_root.mkdir()
    counter = tmp_path / "allocs"
    proxy = start_server(own_root, "access_log off;\nkeepalive_requests 0;\n" + top +
                                   f"upstream up {{\n  server 127.0.0.1:{upstream.port};\n"
                                   "  keepalive 32;\n}\n"
                                   "server {\n  location / { proxy_pass http://up; "
                                   "proxy_http_version 1.1; proxy_set_header Connection \"\"; "
                                   + location + " }\n}\n",
                         env={"LD_PRELOAD": lib, "LFHTTPD_ALLOC_COUNTER": str(counter)})
    return proxy, counter


def run(client, n, req=REQ, size=1024, batch=100):
    for _ in range(n // batch):
        client.send(req * batch)
        for _ in range(batch):
            st, _, body, _ = client.read_response()
            assert st == 200 and len(body) == size


def test_proxied_keepalive_requests_do_not_allocate(proxied, connect):
    """10,000 proxied keep-alive requests after a warm-up of 500: the count must not grow
    with the requests (a small constant slack for timers and the like, as for static
    files)."""
    proxy, counter = proxied
    c = connect(proxy, timeout=10)
    run(c, 500)
    before = allocations(counter)
    run(c, 10_000)
    after = allocations(counter)
    assert after - before < 50, f"{after - before} allocations over 10,000 proxied requests"


def test_proxied_requests_over_several_connections_do_not_allocate_per_request(proxied,
                                                                               connect):
    """The same over 4 client connections in turn: client connections come from the free
    list and upstream connections from the pool, so neither costs an allocation once warm."""
    proxy, counter = proxied
    clients = [connect(proxy, timeout=10) for _ in range(4)]
    for c in clients:
        run(c, 200)
    before = allocations(counter)
    for c in clients:
        run(c, 2500)
    after = allocations(counter)
    assert after - before < 50, f"{after - before} allocations over 10,000 proxied requests"


def test_streamed_proxied_responses_do_not_allocate_per_request(proxied, connect):
    """2,000 proxied 100 KiB responses: streamed through the proxy's fixed buffers, a
    larger body costs no allocation either."""
    proxy, counter = proxied
    c = connect(proxy, timeout=10)
    run(c, 100, BIG_REQ, BIG, batch=10)
    before = allocations(counter)
    run(c, 2000, BIG_REQ, BIG, batch=10)
    after = allocations(counter)
    assert after - before < 50, f"{after - before} allocations over 2,000 proxied responses"


def test_upstream_variables_in_the_log_and_a_header_do_not_allocate(start_server, tmp_path,
                                                                    connect):
    """Every $upstream_* variable in a buffered access log and in add_header: the tries'
    record is the proxy state's, the values are written on the stack."""
    proxy, counter = start_proxied(
        start_server, tmp_path,
        top="log_format up '$upstream_addr $upstream_status $upstream_response_time "
            "$upstream_connect_time $upstream_header_time $upstream_response_length "
            "$upstream_bytes_received $upstream_bytes_sent $upstream_http_content_type "
            "$upstream_cache_status';\n",
        location=f"access_log {tmp_path}/up.log up buffer=64k flush=1s; "
                 "add_header X-Up \"$upstream_addr $upstream_status\";")
    c = connect(proxy, timeout=10)
    run(c, 500)
    before = allocations(counter)
    run(c, 10_000)
    after = allocations(counter)
    assert after - before < 50, f"{after - before} allocations over 10,000 proxied requests"


def test_buffered_proxied_responses_do_not_allocate_per_request(start_server, tmp_path,
                                                                connect):
    """The same with proxy_buffering on: the answers that wait for the client in the
    proxy's buffers, and the states that keep an upstream connection once an answer is
    read whole, take their memory from the spares let go of before."""
    proxy, counter = start_proxied(start_server, tmp_path,
                                   location=f"proxy_buffering on; proxy_temp_path {tmp_path};")
    c = connect(proxy, timeout=10)
    run(c, 100, BIG_REQ, BIG, batch=10)
    before = allocations(counter)
    run(c, 2000, BIG_REQ, BIG, batch=10)
    after = allocations(counter)
    assert after - before < 50, f"{after - before} allocations over 2,000 proxied responses"
