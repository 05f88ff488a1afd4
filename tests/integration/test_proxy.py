"""The reverse proxy (`upstream`, `proxy_pass`) through the real binary, in front of the
test upstream (upstream_app.py: its docstring lists the paths that make it echo, stall,
cut, lie or upgrade). One behaviour per test: what the upstream receives, what the client
gets back, framing, connection reuse, failures and retries, upgrades, streaming with
bounded memory, many slow requests on two threads, smuggling vectors and a reload.

Every test runs against nginx too with PROXY_UNDER_TEST=nginx (see proxy_harness); the
tests of behaviours where the specification parts from nginx on purpose skip there.
"""
import asyncio
import json
import math
import re
import selectors
import socket
import threading
import time
import urllib.parse

import pytest

from conftest import Client, past_buffers, scaled, wait_until
from proxy_harness import UNDER_NGINX, lfhttpd_only, proxy, upstream  # noqa: F401 fixtures

# One upstream group, kept alive, reached with and without a URI part; static files beside.
BASIC = """
upstream app {
    server 127.0.0.1:{up0};
    keepalive 8;
}
server {
    listen 127.0.0.1:{port0};
    location / { proxy_pass http://app; }
    location /api/ { proxy_pass http://app/v1/; }
    location /hidden/ {
        proxy_pass http://app;
        proxy_hide_header X-Powered-By;
    }
    location /own-server/ {
        proxy_pass http://app;
        proxy_pass_header Server;
    }
    location /client-host/ {
        proxy_pass http://app;
        proxy_set_header Host $host;
    }
    location /no-agent/ {
        proxy_pass http://app;
        proxy_set_header User-Agent "";
    }
    location /request-id/ {
        proxy_pass http://app;
        proxy_set_header X-Request-Id $request_id;
    }
    location /fixed-ip/ {
        proxy_pass http://app;
        proxy_set_header X-Real-IP 192.0.2.1;
    }
    location /impatient/ {
        proxy_pass http://app;
        proxy_read_timeout 1s;
    }
    location /static/ { root ROOT; }
}
"""

# The same without `keepalive`: a connection per request.
NO_KEEPALIVE = BASIC.replace("    keepalive 8;\n", "")


def group(servers, extra="", location=""):
    """A configuration whose group `app` has these server lines (and `extra`), proxied at
    / (with `location`'s directives)."""
    lines = "".join(f"    server {s};\n" for s in servers)
    return (f"upstream app {{\n{lines}{extra}}}\nserver {{\n    listen 127.0.0.1:{{port0}};\n"
            f"    location / {{\n        proxy_pass http://app;\n{location}    }}\n}}\n")


@pytest.fixture
def blackhole():
    """blackhole() -> a loopback port where a connection is never established: its listen
    queue is full and nobody accepts, so the SYN goes unanswered (a connect timeout)."""
    held = []

    def make():
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        held.append(listener)
        port = listener.getsockname()[1]
        for _ in range(3):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            held.append(s)
        time.sleep(0.1)
        return port

    yield make
    for s in held:
        s.close()


@pytest.fixture
def app(upstream, proxy):
    """(upstream, proxy) on BASIC."""
    u = upstream()
    return u, proxy(BASIC, u)


def request(p, target, method="GET", headers=(), body=None, version="1.1", host="proxy.test",
            client=None, close=True):
    """One request; (status, {lowercase name: value}, body, raw head). On a new connection
    (closed after) unless client is given."""
    lines = [f"{method} {target} HTTP/{version}"]
    if host is not None:
        lines.append(f"Host: {host}")
    lines += [f"{k}: {v}" for k, v in headers]
    if body is not None and not any(k.lower() == "transfer-encoding" for k, _ in headers):
        lines.append(f"Content-Length: {len(body)}")
    if close and client is None:
        lines.append("Connection: close")
    c = client or Client(socket.create_connection((p.host, p.port), timeout=scaled(10)))
    try:
        c.send(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b""))
        return c.read_response(head_only=method == "HEAD", timeout=scaled(10))
    finally:
        if client is None:
            c.close()


def echoed(p, target, **kw):
    """What the upstream received, as its JSON echo (the request must be answered 200)."""
    status, _, body, _ = request(p, target, **kw)
    assert status == 200, body
    return json.loads(body)


def fields(echo, name):
    return [v for n, v in echo["headers"] if n.lower() == name.lower()]


def one(echo, name):
    values = fields(echo, name)
    assert len(values) == 1, echo["headers"]
    return values[0]


def read_until_closed(sock, limit):
    """All bytes until the peer closes (or limit seconds); (bytes, closed?)."""
    sock.settimeout(limit)
    data = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return data, True
            data += chunk
    except ConnectionResetError:
        return data, True
    except socket.timeout:
        return data, False


# ------------------------------------------------------------ what the upstream receives


def test_without_uri_part_the_target_arrives_as_sent_over_http11(app):
    u, p = app
    e = echoed(p, "/a%20b/c%2Fd;p?x=1&y=%2F&z")
    assert (e["method"], e["target"], e["version"]) == ("GET", "/a%20b/c%2Fd;p?x=1&y=%2F&z",
                                                       "HTTP/1.1")


def test_uri_part_replaces_the_location_prefix_and_keeps_the_query(app):
    u, p = app
    e = echoed(p, "/api/users/7?full=1&q=a+b")
    assert e["target"] == "/v1/users/7?full=1&q=a+b"


def test_an_http10_request_goes_to_the_upstream_as_http11(app):
    u, p = app
    e = echoed(p, "/old-client", version="1.0")
    assert e["version"] == "HTTP/1.1"


def test_host_is_the_upstream_groups_name_by_default(app):
    u, p = app
    assert one(echoed(p, "/x", host="www.example.org"), "host") == "app"


def test_host_of_proxy_pass_to_an_address_is_host_and_port(upstream, proxy):
    u = upstream()
    p = proxy("server {\n    listen 127.0.0.1:{port0};\n"
              "    location / { proxy_pass http://127.0.0.1:{up0}; }\n}\n", u)
    assert one(echoed(p, "/x"), "host") == f"127.0.0.1:{u.ports[0]}"


def test_proxy_set_header_host_passes_the_clients_host(app):
    u, p = app
    assert one(echoed(p, "/client-host/x", host="www.example.org"), "host") == \
        "www.example.org"


def test_x_forwarded_for_appends_the_client_address(app):
    u, p = app
    e = echoed(p, "/x", headers=[("X-Forwarded-For", "203.0.113.9")])
    assert one(e, "x-forwarded-for") == "203.0.113.9, 127.0.0.1"


def test_x_forwarded_for_is_the_client_address_when_the_client_sent_none(app):
    u, p = app
    assert one(echoed(p, "/x"), "x-forwarded-for") == "127.0.0.1"


def test_x_real_ip_proto_and_forwarded_host_describe_the_client_request(app):
    u, p = app
    e = echoed(p, "/x", host="www.example.org:8080")
    assert (one(e, "x-real-ip"), one(e, "x-forwarded-proto"), one(e, "x-forwarded-host")) \
        == ("127.0.0.1", "http", "www.example.org:8080")


def test_proxy_set_header_to_empty_removes_the_header(app):
    u, p = app
    e = echoed(p, "/no-agent/x", headers=[("User-Agent", "tester/1.0")])
    assert fields(e, "user-agent") == []


def test_proxy_set_header_replaces_the_default_of_the_same_name(app):
    u, p = app
    assert fields(echoed(p, "/fixed-ip/x"), "x-real-ip") == ["192.0.2.1"]


def test_request_id_is_32_hex_digits_new_for_each_request(app):
    u, p = app
    ids = [one(echoed(p, "/request-id/x"), "x-request-id") for _ in range(2)]
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids) and ids[0] != ids[1]


def test_end_to_end_request_headers_pass_in_order_with_their_values(app):
    u, p = app
    sent = [("Accept", "text/html"), ("X-B", "2"), ("Cookie", "a=1; b=2"), ("X-A", "1"),
            ("User-Agent", "tester/1.0")]
    e = echoed(p, "/x", headers=sent)
    names = {n.lower() for n, _ in sent}
    assert [tuple(h) for h in e["headers"] if h[0].lower() in names] == sent


def test_standard_hop_by_hop_request_headers_are_removed(app):
    u, p = app
    e = echoed(p, "/x", headers=[("Connection", "keep-alive"), ("Keep-Alive", "timeout=99"),
                                 ("TE", "trailers"), ("Upgrade", "h2c")], close=False)
    assert fields(e, "keep-alive") == [] and fields(e, "te") == []
    assert fields(e, "upgrade") == [] and fields(e, "connection") in ([], ["keep-alive"])


@lfhttpd_only("nginx forwards the fields a client's Connection names")
def test_fields_named_by_the_clients_connection_are_removed(app):
    u, p = app
    e = echoed(p, "/x", headers=[("Connection", "close, X-Hop"), ("X-Hop", "1")], close=False)
    assert fields(e, "x-hop") == []


@lfhttpd_only("nginx forwards Trailer and Proxy-* request fields")
def test_trailer_and_proxy_request_headers_are_removed(app):
    u, p = app
    e = echoed(p, "/x", headers=[("Trailer", "X-T"), ("Proxy-Authorization", "Basic eDp5"),
                                 ("Proxy-Connection", "keep-alive")])
    assert [n for n, _ in e["headers"] if n.lower().startswith("proxy-")
            or n.lower() == "trailer"] == []


def test_request_body_arrives_whole_with_its_content_length(app):
    u, p = app
    body = bytes(range(256)) * 300
    e = echoed(p, "/upload", method="POST", body=body)
    assert one(e, "content-length") == str(len(body))
    assert e["body"].encode("latin-1") == body


def test_chunked_request_body_arrives_dechunked_with_one_content_length(app):
    u, p = app
    chunked = b"5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\nX-Trailer: t\r\n\r\n"
    e = echoed(p, "/upload", method="POST", body=chunked,
               headers=[("Transfer-Encoding", "chunked")])
    assert fields(e, "transfer-encoding") == [] and fields(e, "x-trailer") == []
    assert (one(e, "content-length"), e["body"]) == ("12", "hello, world")


def test_pipelined_client_requests_are_answered_in_order(app):
    u, p = app
    c = Client(socket.create_connection((p.host, p.port), timeout=scaled(10)))
    c.send(b"GET /first HTTP/1.1\r\nHost: t\r\n\r\n"
           b"POST /second HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc"
           b"GET /third HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    targets = [json.loads(c.read_response(timeout=scaled(10))[2])["target"] for _ in range(3)]
    c.close()
    assert targets == ["/first", "/second", "/third"]


def test_expect_100_continue_is_answered_and_the_body_forwarded(app):
    u, p = app
    with socket.create_connection((p.host, p.port), timeout=scaled(10)) as s:
        s.sendall(b"POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n"
                  b"Expect: 100-continue\r\nConnection: close\r\n\r\n")
        assert s.recv(65536).startswith(b"HTTP/1.1 100")
        s.sendall(b"hello")
        raw, _ = read_until_closed(s, scaled(10))
    assert raw.startswith(b"HTTP/1.1 200") and json.loads(raw.partition(b"\r\n\r\n")[2])[
        "body"] == "hello"


# ------------------------------------------------------------ what the client gets back


def test_upstream_status_headers_and_body_reach_the_client(app):
    u, p = app
    status, h, body, _ = request(p, "/x/_raw?status=201&h=X-Custom:yes&h=ETag:\"v1\"")
    assert (status, h.get("x-custom"), h.get("etag")) == (201, "yes", '"v1"')
    assert body.startswith(b"GET /x/_raw?") and len(body) == int(h["content-length"])


def test_upstream_server_and_date_are_replaced_by_the_proxys(app):
    u, p = app
    _, h, _, head = request(p, "/x?h=Server:upstream-app"
                               "&h=Date:Mon,%2001%20Jan%201990%2000:00:00%20GMT")
    assert "upstream-app" not in head and "1990" not in head
    assert "date" in h


def test_proxy_pass_header_server_keeps_the_upstreams(app):
    u, p = app
    _, h, _, _ = request(p, "/own-server/x?h=Server:upstream-app")
    assert h.get("server") == "upstream-app"


def test_proxy_hide_header_drops_x_powered_by(app):
    u, p = app
    _, h, _, _ = request(p, "/hidden/x?h=X-Powered-By:PHP&h=X-Other:kept")
    assert "x-powered-by" not in h and h.get("x-other") == "kept"


@lfhttpd_only("nginx relays an upstream's Keep-Alive and Upgrade")
def test_keep_alive_and_upgrade_from_the_upstream_are_not_relayed(app):
    u, p = app
    _, h, _, head = request(p, "/x?h=Keep-Alive:timeout%3D77&h=Upgrade:h2c")
    assert "timeout=77" not in head and "h2c" not in head


@lfhttpd_only("nginx relays the fields an upstream's Connection names")
def test_fields_named_by_the_upstreams_connection_are_not_relayed(app):
    u, p = app
    _, h, _, _ = request(p, "/x?h=Connection:X-Hop&h=X-Hop:1")
    assert "x-hop" not in h


def test_vary_and_cache_control_pass_through(app):
    u, p = app
    _, h, _, _ = request(p, "/x?h=Vary:Accept-Encoding"
                            "&h=Cache-Control:no-transform,%20max-age%3D5")
    assert (h.get("vary"), h.get("cache-control")) == ("Accept-Encoding",
                                                       "no-transform, max-age=5")


def test_location_is_rewritten_as_proxy_redirect_default(app):
    u, p = app
    status, h, _, _ = request(p, "/api/old?status=301&h=Location:http://app/v1/new%3Fa%3D1")
    loc = urllib.parse.urlsplit(h["location"])
    assert status == 301 and (loc.path, loc.query) == ("/api/new", "a=1")
    assert loc.netloc in ("", f"proxy.test:{p.port}", "proxy.test")


def test_refresh_is_rewritten_as_proxy_redirect_default(app):
    u, p = app
    _, h, _, _ = request(p, "/api/old?h=Refresh:5;%20url%3Dhttp://app/v1/new")
    assert h["refresh"] == "5; url=/api/new"


def test_location_of_another_host_is_left_alone(app):
    u, p = app
    _, h, _, _ = request(p, "/api/old?status=302&h=Location:http://example.com/v1/x")
    assert h["location"] == "http://example.com/v1/x"


# ------------------------------------------------------------ body framing to the client


def test_content_length_body_is_relayed_with_its_length(app):
    u, p = app
    status, h, body, _ = request(p, "/x/_big?mb=0.5")
    assert (status, h.get("content-length"), len(body)) == (200, str(512 * 1024), 512 * 1024)
    assert "transfer-encoding" not in h


def test_chunked_upstream_body_reaches_an_http11_client_chunked_without_trailers(app):
    u, p = app
    c = Client(socket.create_connection((p.host, p.port), timeout=scaled(10)))
    c.send(b"GET /x/_chunked HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    raw, _ = read_until_closed(c.sock, scaled(10))
    c.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in head.lower()
    assert b"done" not in raw and b"hello" in body and body.endswith(b"0\r\n\r\n")


def test_close_delimited_body_reaches_an_http11_client_chunked(app):
    u, p = app
    status, h, body, _ = request(p, "/x/_noclen?size=3000")
    assert (status, h.get("transfer-encoding"), body) == (200, "chunked", b"n" * 3000)


def test_close_delimited_body_reaches_an_http10_client_until_close(app):
    u, p = app
    with socket.create_connection((p.host, p.port), timeout=scaled(10)) as s:
        s.sendall(b"GET /x/_noclen?size=3000 HTTP/1.0\r\nHost: t\r\n\r\n")
        raw, closed = read_until_closed(s, scaled(10))
    head, _, body = raw.partition(b"\r\n\r\n")
    assert closed and body == b"n" * 3000 and b"chunked" not in head.lower()


@lfhttpd_only("nginx 1.22 takes an upstream's 100 for the final response")
def test_interim_100_and_103_are_not_relayed(app):
    u, p = app
    with socket.create_connection((p.host, p.port), timeout=scaled(10)) as s:
        s.sendall(b"GET /x/_info?codes=100,103 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        raw, _ = read_until_closed(s, scaled(10))
    assert raw.startswith(b"HTTP/1.1 200 ") and raw.count(b"HTTP/1.1 ") == 1


def test_head_gets_the_upstreams_head_without_a_body(app):
    u, p = app
    c = Client(socket.create_connection((p.host, p.port), timeout=scaled(10)))
    status, h, _, _ = request(p, "/x/_big?mb=1", method="HEAD", client=c)
    assert status == 200 and h.get("content-length") == str(1 << 20)
    status, _, _, _ = request(p, "/x", client=c)  # nothing of a body was left on the line
    c.close()
    assert status == 200 and u.requests()[0]["method"] == "HEAD"


# ------------------------------------------------------------ upstream connections


def test_keepalive_reuses_one_upstream_connection_for_two_requests(app):
    u, p = app
    first, second = echoed(p, "/one"), echoed(p, "/two")
    assert (first["conn"], first["seq"]) == (second["conn"], 1)
    assert second["seq"] == 2


@pytest.mark.parametrize("mb", [1, 8])
def test_keepalive_reuses_the_upstream_connection_after_an_answer_read_in_many_pieces(app, mb):
    """Input that came while the answer was being read is no reason to close the connection
    once it is idle: only bytes still waiting on it are."""
    u, p = app
    for _ in range(3):
        status, _, body, _ = request(p, f"/x/_big?mb={mb}")
        assert status == 200 and len(body) == mb << 20
    assert request(p, "/x/a")[0] == 200
    assert len({r["conn"] for r in u.requests()}) == 1, u.conns()


def test_without_keepalive_each_request_opens_a_new_upstream_connection(upstream, proxy):
    u = upstream()
    p = proxy(NO_KEEPALIVE, u)
    first, second = echoed(p, "/one"), echoed(p, "/two")
    assert first["conn"] != second["conn"] and second["seq"] == 1
    assert wait_until(lambda: not any(c["open"] for c in u.conns()), scaled(5))


def test_a_response_cut_short_by_the_upstream_is_not_reused(app):
    u, p = app
    echoed(p, "/warm")
    request_cut = socket.create_connection((p.host, p.port), timeout=scaled(10))
    request_cut.sendall(b"GET /x/_close?at=body HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    read_until_closed(request_cut, scaled(10))
    request_cut.close()
    after = echoed(p, "/after")
    assert after["target"] == "/after"
    cut = [r for r in u.requests() if "_close" in r["target"]][0]
    assert after["conn"] != cut["conn"]


def test_bytes_past_an_upstream_response_are_never_taken_for_the_next_response(app):
    u, p = app
    status, _, body, _ = request(p, "/x/_extra")
    assert (status, body) == (200, b"first")
    status, _, body, _ = request(p, "/next")
    assert status == 200 and body != b"smuggled" and json.loads(body)["target"] == "/next"


def late_bytes_sent(u):
    """Wait until the upstream wrote the late bytes of its one `_late` answer; that request."""
    late = [r for r in u.requests() if "_late" in r["target"]][0]
    assert wait_until(lambda: [c for c in u.conns() if c["id"] == late["conn"]
                               and c.get("late_sent")], scaled(10)), u.conns()
    return late


@pytest.mark.parametrize("method,query", [("HEAD", ""), ("GET", "status=204"),
                                          ("GET", "status=304")])
def test_a_kept_upstream_connection_with_bytes_waiting_is_never_reused(app, method, query):
    u, p = app
    status, _, _, _ = request(p, f"/x/_late?{query}", method=method)
    assert status in (200, 204, 304)
    late = late_bytes_sent(u)
    for target in ("/b", "/c"):
        status, _, body, _ = request(p, target)
        assert status == 200 and b"PWND" not in body, body
        assert json.loads(body)["target"] == target
    assert all(r["conn"] != late["conn"] for r in u.requests() if r["target"] in ("/b", "/c"))


@lfhttpd_only("the event models are lfhttpd's")
@pytest.mark.parametrize("model", ["reactivation oneshot;", "concurrency half_sync_half_async;",
                                   "concurrency thread_per_connection;"])
def test_a_kept_upstream_connection_with_bytes_waiting_is_never_reused_by_any_event_model(
        upstream, proxy, model):
    """Where idle connections are not watched (one-shot handles), the check before reuse
    alone finds the bytes."""
    u = upstream()
    p = proxy(model + "\n" + BASIC, u)
    assert request(p, "/x/_late", method="HEAD")[0] == 200
    late = late_bytes_sent(u)
    status, _, body, _ = request(p, "/b")
    assert status == 200 and json.loads(body)["target"] == "/b", body
    assert [r["conn"] for r in u.requests() if r["target"] == "/b"] != [late["conn"]]


def test_an_idle_kept_upstream_connection_the_upstream_writes_on_is_closed_at_once(app):
    u, p = app
    assert request(p, "/x/_late", method="HEAD")[0] == 200
    late = late_bytes_sent(u)

    def closed_by_the_proxy():
        conn = [c for c in u.conns() if c["id"] == late["conn"]][0]
        return not conn["open"] and conn["closed_by"] == "peer"
    assert wait_until(closed_by_the_proxy, scaled(5)), u.conns()


def close_wait_sockets_to(port):
    """Loopback TCP sockets in CLOSE_WAIT (the peer closed, this side did not) to port."""
    n = 0
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            if int(fields[2].split(":")[1], 16) == port and fields[3] == "08":
                n += 1
    return n


def test_an_idle_kept_upstream_connection_the_upstream_closes_is_closed_at_once(app):
    u, p = app
    assert request(p, "/x/a")[0] == 200
    u.control("/__close_idle")
    assert wait_until(lambda: [c for c in u.conns() if not c["open"]], scaled(5))
    assert wait_until(lambda: close_wait_sockets_to(u.ports[0]) == 0, scaled(5))


# What a proxied response to a client that reads nothing can hold, on this machine, before
# the upstream must wait: the upstream's send buffer, the proxy's receive buffer from it, the
# proxy's send buffer to the client (whose own receive buffer the tests hold small), with
# room for the proxy's and the upstream's few KiB of their own.
STALLED = past_buffers(sends=2, receives=1)
# A response longer than that, by far, in MiB for the upstream's _big.
PAST_STALLED_MB = max(256, 2 * STALLED >> 20)


def test_client_gone_mid_response_closes_the_upstream_connection(app):
    u, p = app
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: the window
    s.settimeout(scaled(10))
    s.connect((p.host, p.port))
    s.sendall(b"GET /x/_big?mb=%d HTTP/1.1\r\nHost: t\r\n\r\n" % PAST_STALLED_MB)
    assert s.recv(4096).startswith(b"HTTP/1.1 200")
    s.close()

    def upstream_closed():
        conns = [c for c in u.conns() if c["id"] == u.requests()[0]["conn"]]
        return conns and not conns[0]["open"] and conns[0]
    conn = wait_until(upstream_closed, scaled(10))
    assert conn, u.conns()
    assert conn["bytes_out"] < STALLED


# ------------------------------------------------------------ failures


def test_connection_refused_is_502(upstream, proxy):
    p = proxy(group(["127.0.0.1:{dead0}"]))
    assert request(p, "/x")[0] == 502


@pytest.mark.parametrize("path", [
    pytest.param("_close?at=start", id="closed_before_a_byte"),
    pytest.param("_close?at=head", id="closed_mid_status_line"),
    pytest.param("_bighead?kb=20", id="head_over_16k"),
])
def test_malformed_or_missing_upstream_head_is_502(app, path):
    u, p = app
    status, _, body, _ = request(p, "/x/" + path)
    assert status == 502 and b"hello" not in body


@lfhttpd_only("nginx relays a status line it cannot read as an HTTP/0.9 body")
def test_garbage_status_line_from_the_upstream_is_502(app):
    u, p = app
    status, _, body, _ = request(p, "/x/_garbage")
    assert status == 502 and b"hello" not in body


@lfhttpd_only("nginx 1.22 relays a response with two different Content-Lengths")
def test_two_content_lengths_from_the_upstream_is_502(app):
    u, p = app
    status, _, body, _ = request(p, "/x/_twocl")
    assert status == 502 and b"hello" not in body


@lfhttpd_only("nginx 1.22 relays a chunked upstream body that also has a Content-Length")
def test_content_length_with_chunked_from_the_upstream_is_502(app):
    u, p = app
    assert request(p, "/x/_clte")[0] == 502


def test_upstream_cut_mid_body_cuts_the_client_connection(app):
    u, p = app
    with socket.create_connection((p.host, p.port), timeout=scaled(10)) as s:
        s.sendall(b"GET /x/_close?at=body HTTP/1.1\r\nHost: t\r\n\r\n")
        raw, closed = read_until_closed(s, scaled(10))
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and closed
    assert b"content-length: 1000" in head.lower() and len(body) < 1000


def test_upstream_killed_mid_response_cuts_the_client_connection(app):
    u, p = app
    with socket.create_connection((p.host, p.port), timeout=scaled(10)) as s:
        s.sendall(b"GET /x/_slow?pieces=20&gap=0.2&size=100 HTTP/1.1\r\nHost: t\r\n\r\n")
        got = s.recv(65536)
        assert got.startswith(b"HTTP/1.1 200")
        u.proc.kill()
        rest, closed = read_until_closed(s, scaled(5))
    assert closed and len((got + rest).partition(b"\r\n\r\n")[2]) < 2000


def test_read_timeout_is_504(app):
    u, p = app
    start = time.monotonic()
    status = request(p, "/impatient/_slow?head=10")[0]
    assert status == 504 and time.monotonic() - start < scaled(5)


def test_get_is_retried_on_the_next_server_after_connection_refused(upstream, proxy):
    u = upstream()
    p = proxy(group(["127.0.0.1:{dead0}", "127.0.0.1:{up0}"]), u)
    statuses = [request(p, f"/n{i}")[0] for i in range(4)]
    assert statuses == [200] * 4 and len(u.requests()) == 4


def test_post_is_not_retried_once_its_body_went_out(upstream, proxy):
    u = upstream(2)
    p = proxy(group(["127.0.0.1:{up0}", "127.0.0.1:{up1}"]), u)
    assert request(p, "/x/_close?at=start", method="POST", body=b"pay once")[0] == 502
    assert len(u.requests()) == 1


def test_unix_socket_server_is_reached(upstream, proxy, tmp_path):
    sock = tmp_path / "app.sock"
    u = upstream(unix=sock)
    assert wait_until(sock.exists, scaled(5))
    p = proxy(group([f"unix:{sock}"]), u)
    e = echoed(p, "/over-unix")
    assert (e["port"], e["target"]) == ("unix", "/over-unix")


def test_weights_share_requests_in_proportion(upstream, proxy):
    u = upstream(2)
    a, b = u.ports
    p = proxy(group(["127.0.0.1:{up0} weight=2", "127.0.0.1:{up1}"]), u)
    assert [request(p, f"/n{i}")[0] for i in range(6)] == [200] * 6
    ports = [r["port"] for r in u.requests()]
    assert (ports.count(a), ports.count(b)) == (4, 2)


def test_least_conn_sends_a_request_to_the_server_with_fewer_active_requests(upstream,
                                                                              proxy):
    u = upstream(2)
    p = proxy(group(["127.0.0.1:{up0}", "127.0.0.1:{up1}"], "    least_conn;\n"), u)
    busy = socket.create_connection((p.host, p.port), timeout=scaled(10))
    # (busy for longer than the three requests take, in any build)
    busy.sendall(f"GET /busy/_slow?head={int(scaled(3))} HTTP/1.1\r\nHost: t\r\n"
                 "Connection: close\r\n\r\n".encode())
    assert wait_until(lambda: u.requests(), scaled(5))
    busy_port = u.requests()[0]["port"]
    assert [request(p, f"/n{i}")[0] for i in range(3)] == [200] * 3
    assert [r["port"] for r in u.requests()[1:]] == [p2 for p2 in u.ports if p2 != busy_port] * 3
    busy.close()


def test_max_fails_takes_a_server_out_and_fail_timeout_brings_it_back(upstream, proxy):
    u = upstream(2)
    a, b = u.ports
    fail_s = math.ceil(scaled(3))  # whole seconds: nginx counts them on its cached clock
    p = proxy(group([f"127.0.0.1:{{up0}} max_fails=1 fail_timeout={fail_s}s",
                     "127.0.0.1:{up1}"]), u)
    u.down(a)
    before = time.monotonic()
    assert [request(p, f"/n{i}")[0] for i in range(2)] == [200, 200]  # one refused by a
    u.up(a)
    # One request at a time until one reaches a again: (when it ended, which port).
    seen = []
    while not seen or seen[-1][1] != a:
        assert time.monotonic() - before < fail_s + scaled(10), f"a never came back: {seen}"
        port = echoed(p, f"/out{len(seen)}")["port"]
        seen.append((time.monotonic(), port))
        time.sleep(0.05)
    # a failed after `before`: every request that ended within fail_timeout of it went to
    # b (the first one at least, on any machine), and a came back after that.
    out = [port for ended, port in seen if ended - before < fail_s]
    assert out and set(out) == {b}, (fail_s, seen)
    assert seen[-1][0] - before >= fail_s, (fail_s, seen)


def test_backup_serves_only_when_the_primaries_are_down(upstream, proxy):
    u = upstream(2)
    primary, backup = u.ports
    p = proxy(group(["127.0.0.1:{up0}", "127.0.0.1:{up1} backup"]), u)
    assert [request(p, f"/n{i}")[0] for i in range(3)] == [200] * 3
    assert {r["port"] for r in u.requests()} == {primary}
    u.down(primary)
    u.clear()
    assert [request(p, f"/b{i}")[0] for i in range(3)] == [200] * 3
    assert {r["port"] for r in u.requests()} == {backup}


def test_connect_timeout_is_504(proxy, blackhole):
    p = proxy(group([f"127.0.0.1:{blackhole()}"], location="        proxy_connect_timeout 1s;\n"))
    start = time.monotonic()
    assert request(p, "/x")[0] == 504
    assert 0.9 < time.monotonic() - start < scaled(3)


def test_get_is_retried_on_the_next_server_after_a_connect_timeout(upstream, proxy,
                                                                    blackhole):
    u = upstream()
    p = proxy(group([f"127.0.0.1:{blackhole()}", "127.0.0.1:{up0}"],
                    location="        proxy_connect_timeout 1s;\n"), u)
    assert [request(p, f"/n{i}")[0] for i in range(2)] == [200, 200]
    assert len(u.requests()) == 2


def test_all_servers_down_is_502_at_once(proxy, blackhole):
    connect_s = int(scaled(2))  # what trying a server costs here: its connect timeout
    p = proxy(group([f"127.0.0.1:{blackhole()} max_fails=1 fail_timeout=60s",
                     f"127.0.0.1:{blackhole()} max_fails=1 fail_timeout=60s"],
                    location=f"        proxy_connect_timeout {connect_s}s;\n"))
    assert request(p, "/first")[0] in (502, 504)  # both servers time out and are taken out
    for i in range(5):  # each without trying either: sooner than a connect timeout
        start = time.monotonic()
        assert request(p, f"/n{i}")[0] == 502
        assert time.monotonic() - start < connect_s, i


# ------------------------------------------------------------ upgrades


def test_websocket_upgrade_becomes_a_two_way_tunnel(app):
    websockets = pytest.importorskip("websockets")
    u, p = app

    async def talk():
        async with websockets.connect(f"ws://{p.host}:{p.port}/ws/_upgrade",
                                      open_timeout=scaled(10)) as ws:
            replies = []
            for message in ["hello", b"\x00\x01binary", "x" * 70000]:
                await ws.send(message)
                replies.append(await asyncio.wait_for(ws.recv(), scaled(10)))
            return replies
    assert asyncio.run(talk()) == ["hello", b"\x00\x01binary", "x" * 70000]
    forwarded = u.requests()[0]
    assert one(forwarded, "upgrade").lower() == "websocket"
    assert "upgrade" in one(forwarded, "connection").lower()


def test_any_upgrade_answered_101_becomes_a_raw_tunnel_until_a_side_closes(app):
    u, p = app
    with socket.create_connection((p.host, p.port), timeout=scaled(10)) as s:
        s.sendall(b"GET /x/_upgrade HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\n"
                  b"Upgrade: echo/1\r\n\r\n")
        head = b""
        while b"\r\n\r\n" not in head:
            byte = s.recv(1)
            assert byte, f"closed before the head's end: {head!r}"
            head += byte
        assert head.startswith(b"HTTP/1.1 101") and b"echo/1" in head
        for data in [b"ping", b"\x00\xff" * 1000]:
            s.sendall(data)
            got = b""
            while len(got) < len(data):
                piece = s.recv(65536)
                assert piece, f"closed after {got!r}"
                got += piece
            assert got == data
        s.shutdown(socket.SHUT_WR)
        assert read_until_closed(s, scaled(5)) == (b"", True)


# ------------------------------------------------------------ streaming and memory


def test_200_mb_response_streams_through_with_bounded_memory(app):
    u, p = app
    before = p.rss_kib()
    total, buf = 200 << 20, bytearray(1 << 20)
    with socket.create_connection((p.host, p.port), timeout=scaled(20)) as s:
        s.sendall(b"GET /x/_big?mb=200 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        head = b""
        while b"\r\n\r\n" not in head:
            head += s.recv(1)
        got = 0
        while True:
            n = s.recv_into(buf)
            if not n:
                break
            assert buf[0] == got % 251, f"byte {got} is wrong"
            got += n
    assert head.startswith(b"HTTP/1.1 200") and got == total
    assert p.peak_rss_kib() - before < 48 * 1024, "the body was held in memory"


def test_a_client_that_stops_reading_stops_the_proxy_reading_the_upstream(app):
    u, p = app
    before = p.rss_kib()
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
    s.settimeout(scaled(10))
    s.connect((p.host, p.port))
    s.sendall(b"GET /x/_big?mb=%d HTTP/1.1\r\nHost: t\r\n\r\n" % PAST_STALLED_MB)
    assert s.recv(1024).startswith(b"HTTP/1.1 200")
    time.sleep(scaled(2))
    def sent():
        conn = u.requests()[0]["conn"]
        return [c for c in u.conns() if c["id"] == conn][0]["bytes_out"]
    first = sent()
    time.sleep(0.5)
    assert sent() == first, "the upstream is still being read"
    assert first < STALLED, f"{first} bytes read from the upstream for a stalled client"
    assert p.peak_rss_kib() - before < 48 * 1024
    s.close()


def test_thousand_slow_proxied_requests_on_two_threads_leave_a_static_request_fast(
        upstream, proxy, docroot):
    (docroot / "static").mkdir()
    (docroot / "static" / "f.txt").write_text("static\n")
    u = upstream()
    p = proxy(BASIC, u, threads=2)
    sel = selectors.DefaultSelector()
    socks = []
    for i in range(1000):
        s = socket.create_connection((p.host, p.port), timeout=scaled(10))
        s.sendall(f"GET /slow{i}/_slow?head=3 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
                  .encode())
        s.setblocking(False)
        answer = []
        sel.register(s, selectors.EVENT_READ, answer)
        socks.append((s, answer))
    try:
        assert wait_until(lambda: len(u.requests()) >= 1000, scaled(10)), len(u.requests())
        for _ in range(3):
            status, _, body, _ = request(p, "/static/f.txt")
            assert (status, body) == (200, b"static\n")
        # answered before any of the thousand, which the upstream answers 3 s after it has
        # them all: never behind them, on any machine
        assert not sel.select(timeout=0), "a static request waited for the proxied ones"
        done, deadline = 0, time.monotonic() + scaled(20)
        while done < 1000 and time.monotonic() < deadline:
            for key, _ in sel.select(timeout=1):
                chunk = key.fileobj.recv(65536)
                key.data.append(chunk)
                if not chunk:
                    sel.unregister(key.fileobj)
                    done += 1
        assert done == 1000, f"{1000 - done} requests unanswered"
        bad = [a for _, a in socks if not b"".join(a).startswith(b"HTTP/1.1 200")]
        assert not bad, bad[0]
    finally:
        for s, _ in socks:
            s.close()


# ------------------------------------------------------------ smuggling


SMUGGLED = b"GET /smuggled HTTP/1.1\r\nHost: t\r\n\r\n"
VECTORS = {
    "cl_te": b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" % (
        5 + len(SMUGGLED)) + SMUGGLED,
    "te_cl": b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n" % len(SMUGGLED)
             + SMUGGLED + b"\r\n0\r\n\r\n",
    "te_te_duplicate": b"Transfer-Encoding: chunked\r\nTransfer-Encoding: x\r\n"
                       b"Content-Length: 4\r\n\r\n0\r\n\r\n" + SMUGGLED,
    "te_space_before_colon": b"Transfer-Encoding : chunked\r\nContent-Length: 4\r\n\r\n"
                             b"0\r\n\r\n" + SMUGGLED,
    "te_xchunked": b"Transfer-Encoding: xchunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n"
                   + SMUGGLED,
    "te_tab": b"Transfer-Encoding:\tchunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n" + SMUGGLED,
    "te_obs_fold": b"X: y\r\n Transfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n"
                   b"0\r\n\r\n" + SMUGGLED,
    "te_chunked_not_last": b"Transfer-Encoding: chunked, identity\r\nContent-Length: 4\r\n"
                           b"\r\n0\r\n\r\n" + SMUGGLED,
    "te_bare_lf": b"X: y\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n"
                  + SMUGGLED,
    "two_content_lengths": b"Content-Length: 4\r\nContent-Length: %d\r\n\r\n0\r\n\r\n" % (
        4 + len(SMUGGLED)) + SMUGGLED,
    "content_length_list": b"Content-Length: 4, 40\r\n\r\n0\r\n\r\n" + SMUGGLED,
}


@pytest.mark.parametrize("name", list(VECTORS))
def test_smuggling_vector_is_refused_or_reaches_the_upstream_as_one_clean_request(app, name):
    u, p = app
    with socket.create_connection((p.host, p.port), timeout=scaled(10)) as s:
        s.sendall(b"POST /vector HTTP/1.1\r\nHost: t\r\n" + VECTORS[name])
        raw, _ = read_until_closed(s, scaled(1.5))
    answered = raw.count(b"HTTP/1.1 200")
    refusals = (b"HTTP/1.1 400", b"HTTP/1.1 501") if UNDER_NGINX else (b"HTTP/1.1 400",)
    assert raw.startswith(refusals + (b"HTTP/1.1 200",)), raw[:200]
    received = u.log()
    assert len(received["requests"]) == answered, "the upstream got a request no client saw"
    for r in received["requests"]:
        assert re.fullmatch(r"[A-Z]+", r["method"]) and r["target"].startswith("/"), r["raw"]
        assert not any(re.search(r"[\r\n]", n + v) for n, v in r["headers"]), r["raw"]
        names = [n.strip().lower() for n, _ in r["headers"]]
        assert "transfer-encoding" not in names and names.count("content-length") <= 1
        cl = [v for n, v in r["headers"] if n.strip().lower() == "content-length"]
        assert len(r["body"]) == int(cl[0] if cl else 0)
        assert "smuggled" not in r["target"] or r["body"] == ""
    for c in received["conns"]:
        mine = "".join(r["raw"] for r in received["requests"] if r["conn"] == c["id"])
        assert c["raw_in"] == mine, "bytes reached the upstream outside any request"


# ------------------------------------------------------------ reload


def test_reload_that_changes_the_upstream_under_load_loses_no_request(upstream, proxy):
    u = upstream(2)
    a, b = u.ports
    text = group(["127.0.0.1:{up0}"], "    keepalive 8;\n")
    p = proxy(text, u, reloads=True)
    results, stop = [], threading.Event()

    def load(k):
        i = 0
        while not stop.is_set():
            try:
                results.append(request(p, f"/load{k}-{i}")[0])
            except OSError as e:
                results.append(repr(e))
            i += 1
    threads = [threading.Thread(target=load, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    try:
        time.sleep(0.7)
        p.reload(group(["127.0.0.1:{up1}"], "    keepalive 8;\n"))
        u.clear()
        time.sleep(0.7)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert len(results) > 20 and set(results) == {200}, [r for r in results if r != 200][:5]
    assert {r["port"] for r in u.requests()[-10:]} == {b}
