"""nginx's reverse-proxy semantics, side by side with nginx on one configuration run as
written (the harness adds no line: site_lines=False), in front of one test upstream
(upstream_app.py): the request line and the Connection and Upgrade fields the upstream
gets (proxy_http_version, proxy_set_header), when an upstream connection is kept, when an
upgrade becomes a tunnel (a WebSocket through the websockets client), `error_page` on the
proxy's own 502 and 504, and proxy_intercept_errors.

Each test asks both proxies the same and asserts the same expected answer of each: nginx
checks the expectation, lfhttpd is checked against it.
"""
import asyncio
import http.client
import json

import pytest

from conftest import scaled
from proxy_harness import UNDER_TEST, Proxy, Upstream

CONF = """
upstream app {
    server 127.0.0.1:{up0};
    keepalive 4;
}
upstream dead { server 127.0.0.1:{dead0}; }
server {
    listen 127.0.0.1:{port0};
    error_page 500 502 503 504 /50x.html;
    location = /50x.html { root ROOT; }
    location = /404.html { root ROOT; }
    location = /401.html { root ROOT; }
    location = /fallback { return 200 "fallback\\n"; }
    location /default/ { proxy_pass http://app; }
    location /keep/ {
        proxy_pass http://app;
        proxy_http_version 1.1;
        proxy_set_header Connection "";
    }
    location /ws/ {
        proxy_pass http://app;
        proxy_http_version 1.1;
        proxy_set_header Upgrade $http_upgrade;
        proxy_set_header Connection "upgrade";
    }
    location /ws-plain/ {
        proxy_pass http://app;
        proxy_http_version 1.1;
    }
    location /down/ { proxy_pass http://dead; }
    location /down-200/ {
        proxy_pass http://dead;
        error_page 502 =200 /50x.html;
    }
    location /down-own/ {
        proxy_pass http://dead;
        error_page 502 = /fallback;
    }
    location /down-plain/ {
        proxy_pass http://dead;
        error_page 404 /404.html;
    }
    location /slow/ {
        proxy_pass http://app;
        proxy_read_timeout 1s;
    }
    location /intercept/ {
        proxy_pass http://app;
        proxy_intercept_errors on;
        error_page 404 /404.html;
        error_page 401 /401.html;
        error_page 500 = /fallback;
    }
    location /passed/ {
        proxy_pass http://app;
        error_page 404 /404.html;
    }
}
"""

PAGE_50X = b"<h1>something went wrong</h1>\n"
PAGE_404 = b"<h1>not here</h1>\n"
PAGE_401 = b"<h1>who are you</h1>\n"
KINDS = ("nginx", UNDER_TEST) if UNDER_TEST != "nginx" else ("nginx",)


@pytest.fixture(scope="module")
def proxies(tmp_path_factory):
    """{kind: Proxy} for nginx and the proxy under test, and the upstream, on CONF."""
    u = Upstream()
    started = {}
    try:
        root = tmp_path_factory.mktemp("root")
        (root / "50x.html").write_bytes(PAGE_50X)
        (root / "404.html").write_bytes(PAGE_404)
        (root / "401.html").write_bytes(PAGE_401)
        for kind in KINDS:
            started[kind] = Proxy(tmp_path_factory.mktemp(kind), CONF, u, root, kind=kind,
                                  site_lines=False)
        yield started, u
    finally:
        try:
            for p in started.values():
                p.stop()
        finally:
            u.stop()


def get(p, target, headers=()):
    """(status, {lowercase name: [values]}, body) of one GET on a new connection."""
    c = http.client.HTTPConnection(p.host, p.port, timeout=scaled(10))
    try:
        c.putrequest("GET", target, skip_accept_encoding=True)
        for k, v in headers:
            c.putheader(k, v)
        c.endheaders()
        r = c.getresponse()
        fields = {}
        for k, v in r.getheaders():
            fields.setdefault(k.lower(), []).append(v)
        return r.status, fields, r.read()
    finally:
        c.close()


def each(proxies, ask):
    """{kind: ask(proxy)} for both proxies."""
    return {kind: ask(p) for kind, p in proxies[0].items()}


def upstream_saw(p, target, headers=()):
    """(request line's version, Connection fields, Upgrade fields) the upstream echoed."""
    status, _, body = get(p, target, headers)
    assert status == 200, body
    e = json.loads(body)
    named = lambda n: [v for k, v in e["headers"] if k.lower() == n]  # noqa: E731
    return e["version"], named("connection"), named("upgrade")


def same(seen, expected):
    for kind, got in seen.items():
        assert got == expected, f"{kind}: {got!r}, expected {expected!r}"


# ------------------------------------------------------ what the upstream gets, and reuse


def test_by_default_the_request_goes_as_http10_with_connection_close(proxies):
    same(each(proxies, lambda p: upstream_saw(p, "/default/x")), ("HTTP/1.0", ["close"], []))


def test_the_clients_connection_and_upgrade_never_go_by_default(proxies):
    ws = [("Connection", "Upgrade"), ("Upgrade", "websocket")]
    same(each(proxies, lambda p: upstream_saw(p, "/default/x", ws)), ("HTTP/1.0", ["close"], []))


def test_connection_upgrade_as_configured_goes_on_a_plain_request(proxies):
    """proxy_set_header Connection "upgrade" is sent as written, even without an upgrade;
    an empty $http_upgrade sends no Upgrade."""
    same(each(proxies, lambda p: upstream_saw(p, "/ws/x")), ("HTTP/1.1", ["upgrade"], []))


def test_upgrade_from_http_upgrade_goes_as_configured(proxies):
    ws = [("Connection", "Upgrade"), ("Upgrade", "websocket")]
    same(each(proxies, lambda p: upstream_saw(p, "/ws/x", ws)),
         ("HTTP/1.1", ["upgrade"], ["websocket"]))


def test_connection_empty_with_http11_sends_no_connection_field(proxies):
    same(each(proxies, lambda p: upstream_saw(p, "/keep/x")), ("HTTP/1.1", [], []))


def reuse(p, prefix):
    """Did a second request, on a new client connection after the first, go on the first's
    upstream connection, as its next request?"""
    one, two = (json.loads(get(p, prefix + t)[2]) for t in ("first", "second"))
    return two["conn"] == one["conn"] and two["seq"] == one["seq"] + 1


def test_connection_empty_with_http11_keeps_the_upstream_connection(proxies):
    same(each(proxies, lambda p: reuse(p, "/keep/")), True)


def test_keepalive_alone_keeps_nothing_while_connection_close_goes(proxies):
    """`keepalive` in the upstream block, but the default `Connection: close`: a
    connection per request, as nginx."""
    same(each(proxies, lambda p: reuse(p, "/default/")), False)


# ------------------------------------------------------------------------------ upgrades


def websocket_echo(p, prefix):
    """What a WebSocket client gets through prefix/_upgrade: the echo of "hello", or the
    status of the refusal."""
    websockets = pytest.importorskip("websockets")

    async def talk():
        try:
            async with websockets.connect(f"ws://{p.host}:{p.port}{prefix}_upgrade",
                                          open_timeout=scaled(10)) as ws:
                await ws.send("hello")
                return await asyncio.wait_for(ws.recv(), scaled(10))
        except websockets.exceptions.InvalidStatusCode as e:
            return e.status_code

    return asyncio.run(talk())


def test_a_websocket_is_tunnelled_where_upgrade_and_connection_are_forwarded(proxies):
    same(each(proxies, lambda p: websocket_echo(p, "/ws/")), "hello")


def test_a_websocket_gets_the_upstreams_refusal_where_they_are_not_forwarded(proxies):
    """The upstream never sees the Upgrade, so it answers as a WebSocket server does
    to a plain request: 426, which the client gets."""
    same(each(proxies, lambda p: websocket_echo(p, "/ws-plain/")), 426)


def test_an_upstream_head_with_bare_lf_line_ends_is_relayed(proxies):
    def ask(p):
        status, fields, body = get(p, "/default/_lf")
        return status, fields.get("x-lf"), body
    same(each(proxies, ask), (200, ["yes"], b"lf"))


# ------------------------------------------------------------------- error_page on a 502/504


def answer(p, target, headers=()):
    status, fields, body = get(p, target, headers)
    return status, body


def test_an_upstream_down_gets_the_servers_error_page_with_502(proxies):
    same(each(proxies, lambda p: answer(p, "/down/x")), (502, PAGE_50X))


def test_an_upstream_down_gets_the_page_with_the_status_an_equals_code_gives(proxies):
    same(each(proxies, lambda p: answer(p, "/down-200/x")), (200, PAGE_50X))


def test_an_upstream_down_gets_the_pages_own_answer_with_a_bare_equals(proxies):
    same(each(proxies, lambda p: answer(p, "/down-own/x")), (200, b"fallback\n"))


def test_a_location_with_error_pages_of_its_own_but_not_502_gets_the_plain_502(proxies):
    seen = each(proxies, lambda p: answer(p, "/down-plain/x"))
    for kind, (status, body) in seen.items():
        assert status == 502 and PAGE_50X not in body and PAGE_404 not in body, kind


def test_an_upstream_timeout_gets_the_error_page_with_504(proxies):
    same(each(proxies, lambda p: answer(p, "/slow/_slow?head=3")), (504, PAGE_50X))


# ------------------------------------------------------------------- proxy_intercept_errors


def test_intercepted_upstream_404_gets_the_error_page(proxies):
    same(each(proxies, lambda p: answer(p, "/intercept/x?status=404")), (404, PAGE_404))


def test_intercepted_upstream_500_gets_the_pages_own_answer_with_a_bare_equals(proxies):
    same(each(proxies, lambda p: answer(p, "/intercept/x?status=500")), (200, b"fallback\n"))


def test_an_upstream_error_without_an_error_page_passes_as_it_is(proxies):
    seen = each(proxies, lambda p: answer(p, "/intercept/x?status=403"))
    for kind, (status, body) in seen.items():
        assert status == 403 and json.loads(body)["target"] == "/intercept/x?status=403", kind


def test_without_intercept_errors_the_upstreams_404_passes_as_it_is(proxies):
    seen = each(proxies, lambda p: answer(p, "/passed/x?status=404"))
    for kind, (status, body) in seen.items():
        assert status == 404 and json.loads(body)["target"] == "/passed/x?status=404", kind


def test_intercepted_401_keeps_the_upstreams_challenge(proxies):
    def ask(p):
        status, fields, body = get(p, "/intercept/x?status=401"
                                      "&h=WWW-Authenticate:Basic%20realm%3D%22up%22")
        return status, fields.get("www-authenticate"), body
    same(each(proxies, ask), (401, ['Basic realm="up"'], PAGE_401))


def test_intercepted_401_keeps_every_challenge_of_the_upstreams(proxies):
    """As nginx since 1.23.0 (its ticket #485); nginx 1.22 keeps the first alone."""
    def ask(p):
        status, fields, body = get(p, "/intercept/x?status=401&h=WWW-Authenticate:foo"
                                      "&h=WWW-Authenticate:bar")
        return status, fields.get("www-authenticate"), body
    seen = each(proxies, ask)
    assert seen.pop("nginx") in ((401, ["foo"], PAGE_401), (401, ["foo", "bar"], PAGE_401))
    same(seen, (401, ["foo", "bar"], PAGE_401))
