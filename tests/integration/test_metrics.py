"""`handler /metrics metrics;` answers the Prometheus text exposition format (0.0.4):
`promtool check metrics` accepts it after every kind of traffic, and its counters move by
exactly what the requests made: statuses, bytes, the service-time histogram, server
blocks, upstream servers, TLS handshakes, reloads."""
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess

import pytest

from conftest import BY_DESIGN, SANITIZED, Client, free_port, scaled, wait_until
from proxy_harness import Upstream
from test_allocations import alloc_counter, allocations
from tls_harness import self_signed

PROMTOOL = shutil.which("promtool")
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')

METRICS = "handler /metrics metrics;\n"
TEXT = b"the quick brown fox jumps over the lazy dog\n" * 200


def get(server, path, host="t", headers=(), port=None):
    """One request on a new connection: (status, headers, body)."""
    s = socket.create_connection((server.host, port or server.port), timeout=scaled(10))
    try:
        lines = [f"GET {path} HTTP/1.1", f"Host: {host}", "Connection: close", *headers]
        s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        data = b""
        while chunk := s.recv(1 << 16):
            data += chunk
    finally:
        s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    fields = dict(line.split(": ", 1) for line in head.decode("latin-1").split("\r\n")[1:])
    return int(head.split(b" ")[1]), {k.lower(): v for k, v in fields.items()}, body


def scrape_text(server, path="/metrics"):
    status, fields, body = get(server, path)
    assert status == 200, body
    assert fields["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    return body.decode()


def parse(text):
    """{(name, ((label, value), ...)): value} of every sample."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, line
        labels = tuple(sorted(LABEL.findall(m.group(2) or "")))
        out[(m.group(1), labels)] = float(m.group(3))
    return out


def scrape(server, path="/metrics"):
    return parse(scrape_text(server, path))


def value(samples, name, /, **labels):
    return samples[(name, tuple(sorted(labels.items())))]


def settles_at(lfhttpd, want, name, /, **labels):
    """Does the sample reach want? Figures are counted once a response is sent, and a
    connection goes idle after it: the client may see the response first."""
    got = []

    def reached():
        got[:] = [value(scrape(lfhttpd), name, **labels)]
        return got[0] == want

    return wait_until(reached) or got[0]


def ask(c, path, host="t", headers=()):
    """A request on the keep-alive connection c: (status, headers, body). A request is
    counted just after its response is sent, before the connection reads the next one: a
    scrape on the same connection sees every request before it counted."""
    lines = [f"GET {path} HTTP/1.1", f"Host: {host}", *headers]
    c.send(("\r\n".join(lines) + "\r\n\r\n").encode())
    return c.read_response(timeout=scaled(10))[:3]


def scrape_on(c, host="t"):
    status, fields, body = ask(c, "/metrics", host)
    assert status == 200, body
    return body.decode()


def client_to(port):
    return Client(socket.create_connection(("127.0.0.1", port), timeout=scaled(10)))


def reload(server, conf_text, expect):
    with open(server.conf_path, "w") as f:
        f.write(conf_text)
    before = len(server.error_log())
    server.proc.send_signal(signal.SIGHUP)
    assert wait_until(lambda: expect in server.error_log()[before:]), server.error_log()


@pytest.fixture
def site(docroot):
    with open(os.path.join(docroot, "text.txt"), "wb") as f:
        f.write(TEXT)
    return docroot


@pytest.fixture
def upstream():
    u = Upstream(count=1)
    yield u
    u.stop()


@pytest.mark.skipif(PROMTOOL is None, reason="promtool (Debian's prometheus) is not installed")
def test_promtool_accepts_the_scrape_after_mixed_traffic(start_server, site, tmp_path,
                                                         upstream):
    cgi = tmp_path / "cgi"
    cgi.mkdir()
    script = cgi / "hello.sh"
    script.write_text('#!/bin/sh\nprintf "Content-Type: text/plain\\r\\n\\r\\nhello\\n"\n')
    script.chmod(0o755)
    pair = self_signed(tmp_path, "example.org")
    plain, tls_port = free_port(), free_port()
    conf = (f'root "{site}";\nthreads 4;\nerror_log stderr debug;\nshutdown_timeout 5s;\n'
            f"ssl_certificate {pair.cert};\nssl_certificate_key {pair.key};\n{METRICS}"
            f'cgi /cgi-bin/ "{cgi}";\n'
            f"upstream app {{ server 127.0.0.1:{upstream.ports[0]}; }}\n"
            f"server {{\n  listen 127.0.0.1:{plain};\n  listen 127.0.0.1:{tls_port} ssl;\n"
            "  location /api/ { proxy_pass http://app; }\n}\n")
    s = start_server(site, conf=conf)
    assert get(s, "/text.txt")[0] == 200
    assert get(s, "/missing")[0] == 404
    assert get(s, "/text.txt", headers=["Accept-Encoding: gzip"])[1]["content-encoding"] == "gzip"
    assert b"hello\n" in get(s, "/cgi-bin/hello.sh")[2]  # chunked
    assert get(s, "/api/x")[0] == 200
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with ctx.wrap_socket(socket.create_connection(("127.0.0.1", tls_port)),
                         server_hostname="example.org") as t:
        t.sendall(b"GET /text.txt HTTP/1.1\r\nHost: example.org\r\nConnection: close\r\n\r\n")
        assert t.recv(12) == b"HTTP/1.1 200"
    reload(s, conf, "configuration reloaded")
    text = scrape_text(s)
    r = subprocess.run([PROMTOOL, "check", "metrics"], input=text.encode(),
                       capture_output=True, timeout=scaled(30))
    assert r.returncode == 0, r.stdout.decode() + r.stderr.decode()
    assert "lfhttpd_build_info{" in text


def conf_of(server, extra):
    """The fixture's configuration with extra: what a reload keeps."""
    return ("listen 127.0.0.1:0;\n" f'root "{server.docroot}";\n' "threads 4;\n"
            f'access_log "{server.access_path}";\n'
            "error_log stderr debug;\nshutdown_timeout 5s;\n" + extra)


def test_counters_move_by_the_requests_statuses_and_bytes(start_server, site, connect):
    s = start_server(site, METRICS)
    c = connect(s)
    first = scrape_on(c)
    before = parse(first)
    not_found = [ask(c, "/missing")[2] for _ in range(2)]
    for _ in range(3):
        assert ask(c, "/text.txt")[0] == 200
    after = parse(scrape_on(c))

    def moved(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    # the first scrape is a request too, counted once it was answered
    assert moved("lfhttpd_requests_total", **{"class": "default"}) == 6
    assert moved("lfhttpd_responses_total", **{"class": "default", "code": "2xx"}) == 4
    assert moved("lfhttpd_responses_total", **{"class": "default", "code": "4xx"}) == 2
    assert moved("lfhttpd_responses_total", **{"class": "default", "code": "5xx"}) == 0
    assert moved("lfhttpd_sent_bytes_total", **{"class": "default"}) == (
        3 * len(TEXT) + sum(map(len, not_found)) + len(first.encode()))


def test_histogram_buckets_are_cumulative_and_count_every_request(start_server, site,
                                                                   connect):
    s = start_server(site, METRICS)
    c = connect(s)
    for path in ["/text.txt", "/missing", "/"] * 4:
        ask(c, path)
    samples = parse(scrape_on(c))
    buckets = sorted((float(dict(labels)["le"]), v) for (name, labels), v in samples.items()
                     if name == "lfhttpd_request_duration_seconds_bucket")
    counts = [v for _, v in buckets]
    assert buckets[-1][0] == float("inf")
    assert buckets[0][0] == pytest.approx(0.000512) and buckets[-2][0] == pytest.approx(8.388608)
    assert counts == sorted(counts), "buckets are cumulative"
    assert counts[-2] == counts[-1], "every request here is served within 8.4 s"
    count = value(samples, "lfhttpd_request_duration_seconds_count", **{"class": "default"})
    assert counts[-1] == count == 12
    assert value(samples, "lfhttpd_requests_total", **{"class": "default"}) == count
    assert 0 < value(samples, "lfhttpd_request_duration_seconds_sum", **{"class": "default"})


def test_upstream_figures_count_proxied_requests_per_server(start_server, site, upstream,
                                                            connect):
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
    dead_port = dead.getsockname()[1]
    live = f"127.0.0.1:{upstream.ports[0]}"
    try:
        s = start_server(site, METRICS + "upstream app {\n"
                         f"  server 127.0.0.1:{dead_port};\n  server {live};\n}}\n"
                         "server {\n  listen 127.0.0.1:0;\n"
                         "  location /api/ { proxy_pass http://app; }\n}\n")
        c = connect(s)
        for _ in range(4):
            assert ask(c, "/api/x")[0] == 200
        m = parse(scrape_on(c))
    finally:
        dead.close()
    gone = {"upstream": "app", "server": f"127.0.0.1:{dead_port}"}
    up = {"upstream": "app", "server": live}
    assert value(m, "lfhttpd_upstream_requests_total", **up) == 4
    assert value(m, "lfhttpd_upstream_failures_total", **up) == 0
    assert value(m, "lfhttpd_upstream_response_seconds_count", **up) == 4
    assert value(m, "lfhttpd_upstream_response_seconds_sum", **up) > 0
    assert value(m, "lfhttpd_upstream_up", **up) == 1
    assert value(m, "lfhttpd_upstream_failures_total", **gone) == 1
    assert value(m, "lfhttpd_upstream_up", **gone) == 0


def test_reloads_are_counted_ok_and_refused(start_server, site):
    s = start_server(site, METRICS)
    conf = conf_of(s, METRICS)
    reload(s, conf, "configuration reloaded")
    reload(s, conf + "no_such_directive on;\n", "configuration not reloaded")
    m = scrape(s)
    assert value(m, "lfhttpd_config_reloads_total", result="ok") == 1
    assert value(m, "lfhttpd_config_reloads_total", result="refused") == 1
    assert value(m, "lfhttpd_config_generation") == 2


def counted_across_a_reload(start_server, site, upstream):
    """Server a.test gets 3 requests for a file and 1 proxied, then a scrape (from another
    server block); SIGHUP reloads the same file; a.test gets 2 for the file and 1 proxied,
    then a scrape: the two scrapes."""
    port = free_port()
    s = start_server(site, METRICS + f"upstream app {{ server 127.0.0.1:{upstream.ports[0]}; }}\n"
                     + "".join(f"server {{\n  listen 127.0.0.1:{port};\n  server_name {name};\n"
                               "  location /api/ { proxy_pass http://app; }\n}\n"
                               for name in ["scrape.test", "a.test"]))

    def visit(files):
        c = client_to(port)
        try:
            for _ in range(files):
                assert ask(c, "/text.txt", host="a.test")[0] == 200
            assert ask(c, "/api/x", host="a.test")[0] == 200
            return parse(scrape_on(c, host="scrape.test"))
        finally:
            c.close()

    before = visit(3)
    with open(s.conf_path) as f:
        reload(s, f.read(), "configuration reloaded")
    return before, visit(2)


def generation_figures(m, upstream):
    """The *(gen)* figures of a.test's visits: its requests, the open-file cache's look-ups
    (miss, hit), the upstream server's requests."""
    up = {"upstream": "app", "server": f"127.0.0.1:{upstream.ports[0]}"}
    lookups = "lfhttpd_open_file_cache_lookups_total"
    return (value(m, "lfhttpd_server_requests_total", server="a.test", index="2"),
            (value(m, lookups, result="miss"), value(m, lookups, result="hit")),
            value(m, "lfhttpd_upstream_requests_total", **up))


def test_generation_counters_start_again_at_zero_after_a_reload(start_server, site,
                                                                 upstream):
    before, after = counted_across_a_reload(start_server, site, upstream)
    assert generation_figures(before, upstream) == (4, (1, 2), 1)
    assert generation_figures(after, upstream) == (3, (1, 1), 1)


def test_other_counters_carry_on_across_a_reload(start_server, site, upstream):
    """The class's requests and bytes count from the start: what came after the reload
    adds to what came before."""
    before, after = counted_across_a_reload(start_server, site, upstream)
    cls = {"class": "default"}
    assert value(after, "lfhttpd_requests_total", **cls) >= \
        value(before, "lfhttpd_requests_total", **cls) + 3
    assert value(after, "lfhttpd_sent_bytes_total", **cls) >= \
        value(before, "lfhttpd_sent_bytes_total", **cls) + 2 * len(TEXT)


def test_tls_handshakes_and_failures_are_counted(start_server, site, tmp_path):
    pair = self_signed(tmp_path, "example.org")
    tls_port = free_port()
    s = start_server(site, METRICS + f"listen 127.0.0.1:{tls_port} ssl;\n"
                     f"ssl_certificate {pair.cert};\nssl_certificate_key {pair.key};\n")
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    for _ in range(2):
        with ctx.wrap_socket(socket.create_connection(("127.0.0.1", tls_port)),
                             server_hostname="example.org") as t:
            t.sendall(b"GET / HTTP/1.1\r\nHost: example.org\r\nConnection: close\r\n\r\n")
            t.recv(100)
    # a handshake record that is no ClientHello: the server refuses it
    with socket.create_connection(("127.0.0.1", tls_port)) as raw:
        raw.sendall(b"\x16\x03\x01\x00\x05garbage")
        raw.settimeout(scaled(5))
        try:
            while raw.recv(100):
                pass
        except OSError:
            pass
    assert wait_until(lambda: value(scrape(s), "lfhttpd_tls_handshake_failures_total") == 1)
    assert value(scrape(s), "lfhttpd_tls_handshakes_total") == 2


def test_a_resumed_tls_session_is_counted(start_server, site, tmp_path):
    pair = self_signed(tmp_path, "example.org")
    tls_port = free_port()
    s = start_server(site, METRICS + f"listen 127.0.0.1:{tls_port} ssl;\n"
                     f"ssl_certificate {pair.cert};\nssl_certificate_key {pair.key};\n")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2  # the session is known once the handshake ends
    session, reused = None, []
    for _ in range(2):
        with ctx.wrap_socket(socket.create_connection(("127.0.0.1", tls_port)),
                             server_hostname="example.org", session=session) as t:
            t.sendall(b"GET / HTTP/1.1\r\nHost: example.org\r\nConnection: close\r\n\r\n")
            t.recv(100)
            session = t.session
            reused.append(t.session_reused)
    assert reused == [False, True]
    m = scrape(s)
    assert value(m, "lfhttpd_tls_handshakes_total") == 2
    assert value(m, "lfhttpd_tls_resumptions_total") == 1


def test_an_idle_keepalive_connection_shows_in_its_state(start_server, site, connect):
    s = start_server(site, METRICS)
    c = connect(s)
    c.send(b"GET /text.txt HTTP/1.1\r\nHost: t\r\n\r\n")
    assert c.read_response()[0] == 200
    assert settles_at(s, 1, "lfhttpd_connections", **{"class": "default", "state": "idle"}) is True
    assert value(scrape(s), "lfhttpd_connections", **{"class": "default", "state": "send"}) == 0


def test_requests_are_counted_by_server_block(start_server, site):
    port = free_port()
    start_server(site, METRICS + "".join(
        f"server {{\n  listen 127.0.0.1:{port};\n  server_name {name};\n}}\n"
        for name in ["scrape.test", "a.test", "b.test"]))
    c = client_to(port)
    try:
        for host in ["a.test", "a.test", "b.test"]:
            assert ask(c, "/text.txt", host=host)[0] == 200
        m = parse(scrape_on(c, host="scrape.test"))
    finally:
        c.close()
    assert value(m, "lfhttpd_server_requests_total", server="a.test", index="2") == 2
    assert value(m, "lfhttpd_server_requests_total", server="b.test", index="3") == 1


def test_responses_are_counted_by_server_block_and_status_class(start_server, site):
    port = free_port()
    start_server(site, METRICS + "".join(
        f"server {{\n  listen 127.0.0.1:{port};\n  server_name {name};\n}}\n"
        for name in ["scrape.test", "a.test"]))
    c = client_to(port)
    try:
        for path in ["/text.txt", "/missing", "/text.txt"]:
            ask(c, path, host="a.test")
        m = parse(scrape_on(c, host="scrape.test"))
    finally:
        c.close()
    a = {"server": "a.test", "index": "2"}
    assert [value(m, "lfhttpd_server_responses_total", code=f"{k}xx", **a)
            for k in range(1, 6)] == [0, 2, 0, 1, 0]
    assert value(m, "lfhttpd_server_requests_total", **a) == 3


def test_gzip_cache_hits_and_misses_are_counted(start_server, site, connect):
    s = start_server(site, METRICS + "brotli off;\nzstd off;\n")
    c = connect(s)
    for _ in range(3):
        assert ask(c, "/text.txt", headers=["Accept-Encoding: gzip"])[0] == 200
    m = parse(scrape_on(c))
    assert value(m, "lfhttpd_gzip_cache_lookups_total", result="miss") == 1
    assert value(m, "lfhttpd_gzip_cache_lookups_total", result="hit") == 2
    assert value(m, "lfhttpd_gzip_cache_entries") == 1
    assert value(m, "lfhttpd_gzip_cache_bytes") > 0


def test_open_file_cache_hits_and_misses_are_counted(start_server, site, connect):
    s = start_server(site, METRICS)
    c = connect(s)
    before = parse(scrape_on(c))
    for _ in range(3):
        assert ask(c, "/text.txt")[0] == 200
    assert ask(c, "/missing")[0] == 404
    after = parse(scrape_on(c))

    def moved(result):
        name = "lfhttpd_open_file_cache_lookups_total"
        return value(after, name, result=result) - value(before, name, result=result)

    assert (moved("miss"), moved("hit")) == (2, 2)
    assert value(after, "lfhttpd_open_file_cache_inserts_total") == 1
    assert value(after, "lfhttpd_open_file_cache_entries") == 1
    assert value(after, "lfhttpd_open_file_cache_memory_bytes") == 0  # over mem_max


def test_open_file_cache_counts_the_bytes_of_small_files_held_in_memory(start_server, site,
                                                                          connect):
    with open(os.path.join(site, "small.txt"), "wb") as f:
        f.write(b"s" * 1000)
    s = start_server(site, METRICS)
    c = connect(s)
    for path in ["/small.txt", "/text.txt"]:
        assert ask(c, path)[0] == 200
    m = parse(scrape_on(c))
    assert value(m, "lfhttpd_open_file_cache_entries") == 2
    assert value(m, "lfhttpd_open_file_cache_memory_bytes") == 1000


def test_open_file_cache_hits_of_evicted_entries_stay_counted(start_server, site, connect):
    with open(os.path.join(site, "other.txt"), "wb") as f:
        f.write(b"other\n")
    s = start_server(site, METRICS + "open_file_cache_max 1;\n")
    c = connect(s)
    for path in ["/text.txt", "/text.txt", "/text.txt", "/other.txt"]:  # evicts text.txt
        assert ask(c, path)[0] == 200
    m = parse(scrape_on(c))
    assert value(m, "lfhttpd_open_file_cache_lookups_total", result="hit") == 2
    assert value(m, "lfhttpd_open_file_cache_drops_total", reason="evicted") == 1


def test_received_bytes_count_request_heads_and_bodies(start_server, site, connect):
    s = start_server(site, METRICS + "handler /echo echo;\n")
    c = connect(s)
    before = parse(scrape_on(c))
    requests = [b"GET /text.txt HTTP/1.1\r\nHost: t\r\n\r\n",
                b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello",
                b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
                b"3\r\nabc\r\n0\r\n\r\n"]
    for req in requests:
        c.send(req)
        assert c.read_response(timeout=scaled(10))[0] == 200
    scrape_request = b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n"
    after = parse(scrape_on(c))  # its own request is read before it is answered
    name, cls = "lfhttpd_received_bytes_total", {"class": "default"}
    assert value(after, name, **cls) - value(before, name, **cls) == (
        sum(map(len, requests)) + len(scrape_request))


def test_counting_for_metrics_allocates_nothing_per_request(start_server, site, tmp_path,
                                                           connect):
    """With a metrics mount and a server block (each request counted for its block, on
    counters of its thread's own): 5,000 keep-alive requests after a warm-up allocate
    nothing that grows with them."""
    if SANITIZED:
        pytest.skip("the sanitizers replace malloc, so there is nothing to count " + BY_DESIGN)
    counter = tmp_path / "allocs"
    s = start_server(site, METRICS + "access_log off;\nkeepalive_requests 0;\n"
                     "server {\n  location / { }\n}\n",
                     env={"LD_PRELOAD": alloc_counter(), "LFHTTPD_ALLOC_COUNTER": str(counter)})
    c = connect(s, timeout=10)
    req = b"GET /text.txt HTTP/1.1\r\nHost: t\r\n\r\n"

    def run(n, batch=100):
        for _ in range(n // batch):
            c.send(req * batch)
            for _ in range(batch):
                assert c.read_response()[0] == 200

    run(500)
    before = allocations(counter)
    run(5000)
    after = allocations(counter)
    assert after - before < 50, f"{after - before} allocations over 5,000 requests"
    m = parse(scrape_on(c))
    assert value(m, "lfhttpd_server_requests_total", server="#1", index="1") == 5500
