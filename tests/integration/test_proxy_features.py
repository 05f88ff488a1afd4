"""The reverse proxy with the rest of the server around it: the site's fields on the proxy's
own errors, the upstream's hop-by-hop answer fields left behind, gzip on the upstream's
bytes as they come (chunked or with a length), the status page's "down", a request variable
in an upstream field, a client that leaves while the answer is awaited, proxy_send_timeout,
a tunnel's idle limit (proxy_read_timeout), chunks the upstream breaks (the client's
connection cut, never a last chunk), every concurrency strategy, kept upstream connections
that the upstream closed while idle, and a reload that lets the old kept connections go.
The test upstream is upstream_app.py (its docstring lists its paths); the fixtures are
proxy_harness's.
"""
import gzip
import json
import socket
import threading
import time

import brotli
import pytest
import zstandard

from conftest import Client, scaled, wait_until
from proxy_harness import UNDER_NGINX, lfhttpd_only, proxy, upstream  # noqa: F401 fixtures
from test_proxy import echoed, group, one, read_until_closed, request

SITE = """
gzip on;
upstream app {
    server 127.0.0.1:{up0};
    keepalive 8;
}
server {
    listen 127.0.0.1:{port0};
    location / { proxy_pass http://app; }
    location /unreachable/ {
        proxy_pass http://127.0.0.1:{dead0};
        add_header X-Always yes always;
        add_header X-Only-Success yes;
    }
    location /uri/ {
        proxy_pass http://app;
        proxy_set_header X-Uri $uri;
    }
}
"""

GZIP = [("Accept-Encoding", "gzip")]


@pytest.fixture
def site(upstream, proxy):
    """(upstream, proxy) on SITE."""
    u = upstream()
    return u, proxy(SITE, u)


def generated(n):
    """The first n bytes of upstream_app's _big body: byte i is i % 251."""
    block = bytes(range(251))
    return (block * (n // 251 + 1))[:n]


def upstream_conn(u, conn_id):
    found = [c for c in u.conns() if c["id"] == conn_id]
    return found[0] if found else None


# ---------------------------------------------------------------------- the site's fields


def test_add_header_always_applies_to_the_proxys_own_502(site):
    u, p = site
    status, h, _, _ = request(p, "/unreachable/x")
    assert status == 502
    assert h.get("x-always") == "yes" and "x-only-success" not in h


@lfhttpd_only("nginx copies a decoded CR LF of $uri into the field as it is")
def test_a_decoded_crlf_in_uri_reaches_the_upstream_percent_encoded_in_one_field(site):
    u, p = site
    assert request(p, "/uri/a%0d%0aInjected:%20yes")[0] == 200
    raw = u.requests()[-1]["raw"]
    lines = raw.partition("\r\n\r\n")[0].split("\r\n")
    uri_lines = [ln for ln in lines if ln.lower().startswith("x-uri:")]
    assert len(uri_lines) == 1 and "%0D%0A" in uri_lines[0], lines
    assert not [ln for ln in lines if ln.lower().startswith("injected")]


# ------------------------------------------------------------ the answer's hop-by-hop fields


def field_values(head, name):
    """The values of every field `name` in a raw head, in order (repeated fields kept)."""
    out = []
    for line in head.split("\r\n")[1:]:
        k, _, v = line.partition(":")
        if k.strip().lower() == name:
            out.append(v.strip())
    return out


@pytest.mark.parametrize("field", [
    pytest.param("Trailer:X-Checksum", id="trailer", marks=lfhttpd_only("nginx relays Trailer")),
    pytest.param("Keep-Alive:timeout%3D77", id="keep_alive"),
    pytest.param("Proxy-Connection:keep-alive", id="proxy_connection",
                 marks=lfhttpd_only("nginx relays Proxy-Connection")),
    pytest.param("Upgrade:h2c", id="upgrade_on_a_200",
                 marks=lfhttpd_only("nginx relays Upgrade")),
    pytest.param("TE:trailers", id="te", marks=lfhttpd_only("nginx relays TE")),
])
def test_a_hop_by_hop_field_of_the_upstreams_answer_is_not_relayed(site, field):
    u, p = site
    name = field.partition(":")[0].lower()
    status, _, _, head = request(p, f"/x?h={field}")
    assert status == 200 and field_values(head, name) == [], head


def test_the_upstreams_connection_field_is_not_relayed(site):
    u, p = site
    status, _, _, head = request(p, "/x?h=Connection:X-Hop")
    assert status == 200 and field_values(head, "connection") == ["close"], head


def test_the_upstreams_transfer_encoding_is_replaced_by_the_proxys_own_framing(site):
    u, p = site
    status, _, body, head = request(p, "/_chunked")
    assert (status, body) == (200, b"hello, world")
    assert field_values(head, "transfer-encoding") == ["chunked"], head


def test_a_chunked_answer_to_an_http10_client_carries_no_transfer_encoding(site):
    u, p = site
    with socket.create_connection((p.host, p.port), timeout=scaled(10)) as s:
        s.sendall(b"GET /_chunked HTTP/1.0\r\nHost: t\r\n\r\n")
        raw, closed = read_until_closed(s, scaled(10))
    head, _, body = raw.partition(b"\r\n\r\n")
    assert closed and body == b"hello, world", raw
    assert field_values(head.decode("latin-1"), "transfer-encoding") == [], head


@lfhttpd_only("nginx relays Trailer")
def test_the_upstreams_trailer_field_is_not_relayed_with_a_chunked_answer(site):
    u, p = site
    status, _, _, head = request(p, "/_chunked")
    assert status == 200 and field_values(head, "trailer") == [], head


# ------------------------------------------------------------------------------------- gzip


@lfhttpd_only("nginx compresses text/html only by default")
def test_a_chunked_proxied_text_answer_is_compressed_to_the_upstreams_bytes(site):
    u, p = site
    status, h, body, _ = request(p, "/_big?mb=1&chunked=1&type=text/plain", headers=GZIP)
    assert status == 200 and h["content-encoding"] == "gzip"
    assert gzip.decompress(body) == generated(1 << 20)


@lfhttpd_only("nginx compresses text/html only by default")
def test_a_small_chunked_proxied_text_answer_is_compressed_to_the_upstreams_bytes(site):
    u, p = site
    status, h, body, _ = request(p, "/_chunked?h=Content-Type:text/plain", headers=GZIP)
    assert status == 200 and h["content-encoding"] == "gzip"
    assert gzip.decompress(body) == b"hello, world"


@lfhttpd_only("nginx compresses text/html only by default")
def test_a_small_proxied_text_answer_with_a_length_is_compressed_to_the_upstreams_bytes(site):
    u, p = site
    status, h, body, _ = request(p, "/_slow?size=300&h=Content-Type:text/plain", headers=GZIP)
    assert status == 200 and h["content-encoding"] == "gzip" and "content-length" not in h
    assert gzip.decompress(body) == b"s" * 300


DECODE = {
    "br": brotli.decompress,
    # (a streamed frame does not say its size: decoded as a stream)
    "zstd": lambda b: zstandard.ZstdDecompressor().decompressobj().decompress(b),
}


@lfhttpd_only("nginx compresses with gzip only")
@pytest.mark.parametrize("coding", ["br", "zstd"])
@pytest.mark.parametrize("path, want", [
    ("/_big?mb=1&chunked=1&type=text/plain", generated(1 << 20)),
    ("/_slow?size=300&h=Content-Type:text/plain", b"s" * 300),
], ids=["chunked", "with-a-length"])
def test_a_proxied_text_answer_is_compressed_in_the_accepted_coding(site, coding, path, want):
    u, p = site
    status, h, body, _ = request(p, path, headers=[("Accept-Encoding", coding)])
    assert status == 200 and h["content-encoding"] == coding and "content-length" not in h
    assert DECODE[coding](body) == want


@lfhttpd_only("nginx's gzip_vary is off by default")
def test_compressing_a_proxied_answer_without_vary_adds_vary_accept_encoding(site):
    u, p = site
    _, h, _, _ = request(p, "/x?type=text/plain", headers=GZIP)
    assert h["content-encoding"] == "gzip" and h["vary"] == "Accept-Encoding"


def test_a_proxied_500_is_not_compressed(site):
    u, p = site
    status, h, body, _ = request(p, "/x?status=500&type=text/plain", headers=GZIP)
    assert status == 500 and "content-encoding" not in h
    assert json.loads(body)["target"].startswith("/x")


# ------------------------------------------------------------------------------ status page


@lfhttpd_only("the status page is lfhttpd's")
def test_status_page_shows_a_server_marked_down_as_down_and_it_gets_no_request(upstream,
                                                                              proxy):
    u = upstream(2)
    text = """
upstream app {
    server 127.0.0.1:{up0};
    server 127.0.0.1:{up1} down;
}
server {
    listen 127.0.0.1:{port0};
    location / { proxy_pass http://app; }
    location /status { handler status; }
}
"""
    p = proxy(text, u)
    assert [request(p, f"/n{i}")[0] for i in range(4)] == [200] * 4
    _, _, body, _ = request(p, "/status?format=json")
    servers = {s["server"].rsplit(":", 1)[1]: s for s in json.loads(body)["upstreams"]}
    up0, up1 = (str(x) for x in u.ports)
    assert servers[up1]["state"] == "down" and servers[up1]["requests"] == 0
    assert servers[up0]["state"] == "up" and servers[up0]["requests"] == 4
    assert {r["port"] for r in u.requests()} == {u.ports[0]}


# ------------------------------------------------------------------------- leaving, timeouts


def test_a_client_that_leaves_while_the_answer_is_awaited_closes_the_upstream_connection(
        site):
    u, p = site
    s = socket.create_connection((p.host, p.port), timeout=scaled(10))
    s.sendall(b"GET /x/_slow?head=30&watch=1 HTTP/1.1\r\nHost: t\r\n\r\n")
    assert wait_until(lambda: u.requests(), scaled(5))
    conn_id = u.requests()[0]["conn"]
    s.close()
    left = time.monotonic()
    # The sweep runs every 250 ms: the upstream connection goes long before the answer.
    assert wait_until(lambda: not upstream_conn(u, conn_id)["open"], scaled(2)), u.conns()
    assert time.monotonic() - left < scaled(2)
    assert upstream_conn(u, conn_id)["closed_by"] == "peer"


@pytest.fixture
def deaf_port():
    """A loopback port whose connections are established (by the kernel) and never read."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    yield listener.getsockname()[1]
    listener.close()


@lfhttpd_only("nginx's name for max_body_size is client_max_body_size")
def test_an_upstream_that_never_reads_a_large_body_is_504_after_proxy_send_timeout(proxy,
                                                                                  deaf_port):
    text = f"""
max_body_size 64m;
server {{
    listen 127.0.0.1:{{port0}};
    location / {{
        proxy_pass http://127.0.0.1:{deaf_port};
        proxy_send_timeout 1s;
        proxy_read_timeout 60s;
    }}
}}
"""
    p = proxy(text)
    started = time.monotonic()
    status, _, _, _ = request(p, "/upload", method="POST", body=b"b" * (32 << 20))
    assert status == 504
    assert time.monotonic() - started < scaled(15)


# A tunnel's idle limit, in whole seconds as both servers write it.
TUNNEL_IDLE_S = max(1, round(scaled(1)))
TUNNEL = f"""
server {{
    listen 127.0.0.1:{{port0}};
    location / {{
        proxy_pass http://127.0.0.1:{{up0}};
        proxy_read_timeout {TUNNEL_IDLE_S}s;
    }}
}}
"""


def open_tunnel(p):
    """A raw tunnel through the proxy to upstream_app's echo, its 101 head read."""
    s = socket.create_connection((p.host, p.port), timeout=scaled(10))
    s.sendall(b"GET /_upgrade HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\n"
              b"Upgrade: echo/1\r\n\r\n")
    head = b""
    while b"\r\n\r\n" not in head:
        byte = s.recv(1)
        assert byte, f"closed before the head's end: {head!r}"
        head += byte
    assert head.startswith(b"HTTP/1.1 101"), head
    return s


def echo_through(s, data):
    s.sendall(data)
    got = b""
    while len(got) < len(data):
        piece = s.recv(65536)
        assert piece, f"the tunnel closed after {got!r}"
        got += piece
    assert got == data


def test_a_tunnel_without_a_byte_for_proxy_read_timeout_is_closed_both_ways(upstream, proxy):
    u = upstream()
    p = proxy(TUNNEL, u)
    with open_tunnel(p) as s:
        echo_through(s, b"ping")
        quiet_from = time.monotonic()
        data, closed = read_until_closed(s, TUNNEL_IDLE_S + scaled(5))
        quiet_for = time.monotonic() - quiet_from
    assert (data, closed) == (b"", True)
    assert quiet_for > TUNNEL_IDLE_S - 0.1  # not before the limit
    assert wait_until(lambda: not any(c["open"] for c in u.conns()), scaled(5)), u.conns()


@lfhttpd_only("the status page is lfhttpd's")
def test_a_tunnel_closed_for_idleness_is_no_longer_in_flight_or_open(upstream, proxy):
    """Its end is the request's, not only an end of input for the client (which keeps its
    socket open here): neither the count of open connections nor the upstream server's
    count of requests in flight still holds it."""
    u = upstream()
    p = proxy(TUNNEL.replace("    location / {", "    location /status { handler status; }\n"
                                                  "    location / {"), u)

    def status():
        return json.loads(request(p, "/status?format=json")[2])
    with open_tunnel(p) as s:
        echo_through(s, b"ping")
        assert read_until_closed(s, TUNNEL_IDLE_S + scaled(5)) == (b"", True)
        assert wait_until(lambda: status()["connections"] == 1, scaled(2)), status()
        assert status()["upstreams"][0]["active"] == 0


def test_bytes_through_a_tunnel_keep_it_open_past_proxy_read_timeout(upstream, proxy):
    """A byte every 0.4 of the limit, for one and a half times the limit: each one moved
    restarts the limit, so none of them finds the tunnel closed."""
    u = upstream()
    p = proxy(TUNNEL, u)
    with open_tunnel(p) as s:
        start = time.monotonic()
        while time.monotonic() - start < 1.5 * TUNNEL_IDLE_S:
            echo_through(s, b"tick")
            time.sleep(0.4 * TUNNEL_IDLE_S)
        echo_through(s, b"still open")


# ------------------------------------------------------------------------- broken chunks

BAD_CHUNKS = [
    pytest.param("size", id="size_not_hex"),
    pytest.param("crlf", id="data_without_crlf"),
    pytest.param("ext", id="size_line_too_long",
                 marks=lfhttpd_only("nginx reads a chunk extension of any length")),
]


@pytest.mark.parametrize("kind", BAD_CHUNKS)
def test_malformed_chunks_after_the_head_cut_the_client_connection_without_a_last_chunk(
        site, kind):
    """The client has the head and the sound first chunk; the broken one ends the answer
    there: no byte more (no last chunk), the client's connection closed although it asked
    to keep it, and the upstream's closed too."""
    u, p = site
    with socket.create_connection((p.host, p.port), timeout=scaled(10)) as s:
        s.sendall(f"GET /_badchunk?kind={kind}&wait=1 HTTP/1.1\r\nHost: t\r\n\r\n".encode())
        got = b""
        while not got.endswith(b"\r\n\r\n5\r\nhello\r\n"):
            piece = s.recv(65536)
            assert piece, f"closed after {got!r}"
            got += piece
        u.control("/__release")
        rest, closed = read_until_closed(s, scaled(5))
    assert got.startswith(b"HTTP/1.1 200 ") and b"transfer-encoding: chunked" in got.lower()
    assert (rest, closed) == (b"", True)
    assert wait_until(lambda: not any(c["open"] for c in u.conns()), scaled(5)), u.conns()


@pytest.mark.parametrize("kind", BAD_CHUNKS)
def test_malformed_chunks_that_come_with_the_head_never_make_a_complete_answer(site, kind):
    u, p = site
    with socket.create_connection((p.host, p.port), timeout=scaled(10)) as s:
        s.sendall(f"GET /_badchunk?kind={kind} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
        raw, closed = read_until_closed(s, scaled(5))
    assert closed and not raw.endswith(b"0\r\n\r\n") and b"world" not in raw, raw
    assert wait_until(lambda: not any(c["open"] for c in u.conns()), scaled(5)), u.conns()


# ------------------------------------------------------------------- concurrency strategies

STRATEGIES = [
    pytest.param("concurrency thread_per_connection;\n", id="thread_per_connection"),
    pytest.param("concurrency half_sync_half_async;\n", id="half_sync_half_async"),
    pytest.param("concurrency leader_followers;\nreactivation oneshot;\n",
                 id="reactivation_oneshot"),
]

KEPT = group(["127.0.0.1:{up0}"], "    keepalive 8;\n")


@lfhttpd_only("concurrency strategies are lfhttpd's")
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_get_is_proxied_under_each_strategy(upstream, proxy, strategy):
    u = upstream()
    p = proxy(strategy + KEPT, u)
    e = echoed(p, "/get?x=1")
    assert e["target"] == "/get?x=1" and e["method"] == "GET"


@lfhttpd_only("concurrency strategies are lfhttpd's")
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_chunked_answer_is_relayed_under_each_strategy(upstream, proxy, strategy):
    u = upstream()
    p = proxy(strategy + KEPT, u)
    status, h, body, _ = request(p, "/_big?mb=2&chunked=1")
    assert status == 200 and h.get("transfer-encoding") == "chunked"
    assert body == generated(2 << 20)


@lfhttpd_only("concurrency strategies are lfhttpd's")
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_keep_alive_reuses_both_connections_under_each_strategy(upstream, proxy, strategy):
    u = upstream()
    p = proxy(strategy + KEPT, u)
    c = Client(socket.create_connection((p.host, p.port), timeout=scaled(10)))
    try:
        answers = [json.loads(request(p, f"/ka{i}", client=c)[2]) for i in range(3)]
    finally:
        c.close()
    assert [a["target"] for a in answers] == ["/ka0", "/ka1", "/ka2"]
    assert len({a["conn"] for a in answers}) == 1 and [a["seq"] for a in answers] == [1, 2, 3]


@lfhttpd_only("concurrency strategies are lfhttpd's")
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_raw_upgrade_becomes_a_tunnel_under_each_strategy(upstream, proxy, strategy):
    u = upstream()
    p = proxy(strategy + KEPT, u)
    with socket.create_connection((p.host, p.port), timeout=scaled(10)) as s:
        s.sendall(b"GET /x/_upgrade HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\n"
                  b"Upgrade: echo/1\r\n\r\n")
        head = b""
        while b"\r\n\r\n" not in head:
            byte = s.recv(1)
            assert byte, f"closed after {head!r}"
            head += byte
        assert head.startswith(b"HTTP/1.1 101")
        for data in [b"ping", b"\x01\xfe" * 40000]:
            s.sendall(data)
            got = b""
            while len(got) < len(data):
                got += s.recv(65536)
            assert got == data
        s.shutdown(socket.SHUT_WR)
        assert read_until_closed(s, scaled(5)) == (b"", True)


# ------------------------------------------------------------ kept connections closed idle


def kept_connection_the_upstream_closed(u, p, how):
    """A kept upstream connection that the upstream then closes while it waits for a next
    request: on /__close_idle (`how` "at_once", as a server that stops does) or after
    100 ms without one (`how` "idle", a keep-alive timeout). Returns its id once the
    upstream's log shows it closed, by the upstream: whatever the next request meets, the
    connection it was kept on is gone before it."""
    first = echoed(p, "/warm?idle=100" if how == "idle" else "/warm")

    def closed():
        if how == "at_once":
            u.control("/__close_idle")  # again until the upstream waits on it
        return not upstream_conn(u, first["conn"])["open"]
    assert wait_until(closed, scaled(5)), upstream_conn(u, first["conn"])
    assert upstream_conn(u, first["conn"])["closed_by"] == "us"
    return first["conn"]


def reached_once_on_a_new_connection(u, target, closed):
    """The one request the upstream received for `target`, the first on a connection
    opened after the closed one."""
    got = [r for r in u.requests() if r["target"] == target]
    assert len(got) == 1, got
    assert got[0]["conn"] > closed and got[0]["seq"] == 1, (closed, got)
    return got[0]


@pytest.mark.parametrize("how", ["at_once", "idle"])
def test_a_get_after_the_upstream_closed_a_kept_connection_goes_on_a_new_one(site, how):
    u, p = site
    closed = kept_connection_the_upstream_closed(u, p, how)
    status, _, body, _ = request(p, "/after")
    assert status == 200, body
    reached_once_on_a_new_connection(u, "/after", closed)


@pytest.mark.parametrize("how", ["at_once", "idle"])
def test_a_post_after_the_upstream_closed_a_kept_connection_goes_on_a_new_one(site, how):
    u, p = site
    closed = kept_connection_the_upstream_closed(u, p, how)
    status, _, body, _ = request(p, "/after", method="POST", body=b"sent once")
    assert status == 200, body
    assert reached_once_on_a_new_connection(u, "/after", closed)["body"] == "sent once"


# ------------------------------------------------------------------------------------ reload


def kept_connections(u, p, n):
    """n kept upstream connections, made by n requests at once; their ids."""
    threads = [threading.Thread(target=request, args=(p, f"/_slow?head=0.5&i={i}"))
               for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids = {r["conn"] for r in u.requests()}
    assert len(ids) == n and all(upstream_conn(u, i)["open"] for i in ids)
    return ids


def test_requests_after_a_reload_are_answered_on_new_upstream_connections(upstream, proxy):
    u = upstream()
    p = proxy(KEPT, u, reloads=True)
    old = kept_connections(u, p, 2)
    p.reload(KEPT.replace("location / {", "location / {\n        add_header X-Gen 2;"))
    answers = [request(p, f"/after{i}") for i in range(3)]
    assert [(a[0], a[1].get("x-gen")) for a in answers] == [(200, "2")] * 3
    assert not {json.loads(a[2])["conn"] for a in answers} & old


def test_a_reload_closes_the_old_configurations_kept_upstream_connections(upstream, proxy):
    u = upstream()
    p = proxy(KEPT, u, reloads=True)
    old = kept_connections(u, p, 2)
    p.reload(KEPT)

    def closed_by_proxy():
        return all(not upstream_conn(u, i)["open"] for i in old)
    assert wait_until(closed_by_proxy, scaled(5)), u.conns()
    assert {upstream_conn(u, i)["closed_by"] for i in old} == {"peer"}


CAPTURES = r"""
upstream app {
    server 127.0.0.1:{up0};
    keepalive 8;
}
server {
    listen 127.0.0.1:{port0};
    server_name ~^(?<sub>[a-z]+)\.cap\.test$;
    location ~ ^/cap/(?<word>[a-z]+)/ {
        proxy_pass http://app;
        add_header X-Cap "$1-$word" always;
        add_header X-Sub "$sub" always;
    }
}
"""


def test_a_proxied_answer_keeps_its_own_regex_captures_while_others_are_served(upstream,
                                                                                 proxy):
    """add_header's captures (the location's and the server name's) are read when the
    upstream's head arrives, in a later event: the request's own, never those of a request
    the same thread served meanwhile."""
    u = upstream()
    p = proxy(CAPTURES, u, threads=1)
    out = {}

    def slow():
        out["slow"] = request(p, "/cap/first/_slow?head=0.5", host="one.cap.test")
    t = threading.Thread(target=slow)
    t.start()
    assert wait_until(lambda: any("_slow" in r["target"] for r in u.requests()), scaled(5))
    for _ in range(20):
        status, headers, _, _ = request(p, "/cap/second/x", host="two.cap.test")
        assert (status, headers.get("x-cap"), headers.get("x-sub")) == \
            (200, "second-second", "two")
    t.join(scaled(10))
    status, headers, _, _ = out["slow"]
    assert (status, headers.get("x-cap"), headers.get("x-sub")) == (200, "first-first", "one")


ACCEL_SITE = """
upstream app {
    server 127.0.0.1:{up0};
    keepalive 8;
}
server {
    listen 127.0.0.1:{port0};
    location / { proxy_pass http://app; }
    location /protected/ { internal; root ROOT; }
}
"""


@pytest.fixture
def accel_site(upstream, proxy, docroot):
    """(upstream, proxy) on ACCEL_SITE, docroot's protected/file.txt its internal file."""
    (docroot / "protected").mkdir()
    (docroot / "protected" / "file.txt").write_bytes(b"protected file\n")
    u = upstream()
    return u, proxy(ACCEL_SITE, u)


def test_an_upstreams_x_accel_redirect_answers_with_the_internal_file(accel_site):
    u, p = accel_site
    status, head, body, _ = request(
        p, "/app?h=X-Accel-Redirect:/protected/file.txt&h=Content-Type:application/x-test"
           "&h=Set-Cookie:a=1&h=X-Custom:dropped")
    assert (status, body) == (200, b"protected file\n")
    assert head["content-type"] == "application/x-test"  # the last of the two, as nginx
    assert head["set-cookie"] == "a=1"
    assert "x-accel-redirect" not in head and "x-custom" not in head
    assert echoed(p, "/after")["target"] == "/after"  # the proxy goes on as before


def test_an_upstreams_x_accel_redirect_of_a_post_is_a_get_of_the_file(accel_site):
    u, p = accel_site
    status, _, body, _ = request(p, "/app?h=X-Accel-Redirect:/protected/file.txt",
                                 method="POST", body=b"x=1")
    assert (status, body) == (200, b"protected file\n")


def test_an_upstreams_x_accel_redirect_to_a_missing_file_is_404(accel_site):
    u, p = accel_site
    status, _, _, _ = request(p, "/app?h=X-Accel-Redirect:/protected/missing.txt")
    assert status == 404
