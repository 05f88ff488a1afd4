"""A proxied answer as the rest of the site treats it: the location's add_header and
expires, gzip as it streams, the request id in the access log, the status page's upstream
figures, header values built from the request's variables, and retries on an answer's
status. The test upstream is upstream_app.py (its docstring lists its paths); the fixtures
are proxy_harness's, so the tests that nginx passes too run against it with
PROXY_UNDER_TEST=nginx.
"""
import gzip
import json
import os
import re

from conftest import scaled, wait_until
from proxy_harness import lfhttpd_only, proxy, upstream  # noqa: F401 fixtures
from test_proxy import echoed, one, request

SITE = """
gzip on;
upstream app {
    server 127.0.0.1:{up0};
    keepalive 8;
}
server {
    listen 127.0.0.1:{port0};
    location / { proxy_pass http://app; }
    location /headers/ {
        proxy_pass http://app;
        add_header X-Frame-Options DENY;
        add_header X-Always yes always;
        expires 1h;
    }
    location /id/ {
        proxy_pass http://app;
        proxy_set_header X-Request-Id $request_id;
        add_header X-Request-Id $request_id;
    }
    location /uri/ {
        proxy_pass http://app;
        proxy_set_header X-Uri $uri;
    }
}
"""


def site(upstream, proxy, extra=""):
    u = upstream()
    return u, proxy(extra + SITE, u)


def text_body(n):
    """n bytes of compressible text."""
    line = b"the quick brown fox jumps over the lazy dog 0123456789\n"
    return (line * (n // len(line) + 1))[:n]


# ------------------------------------------------------------------------ the site's fields


def test_add_header_and_expires_apply_to_a_proxied_answer(upstream, proxy):
    u, p = site(upstream, proxy)
    status, h, _, _ = request(p, "/headers/x")
    assert status == 200
    assert h["x-frame-options"] == "DENY" and h["x-always"] == "yes"
    assert h["cache-control"] == "max-age=3600"


def test_add_header_always_applies_to_a_proxied_error(upstream, proxy):
    u, p = site(upstream, proxy)
    status, h, _, _ = request(p, "/headers/x?status=500")
    assert status == 500
    assert h.get("x-always") == "yes" and "x-frame-options" not in h


def test_request_id_is_the_same_in_the_upstream_request_and_the_answer(upstream, proxy):
    u, p = site(upstream, proxy)
    status, h, body, _ = request(p, "/id/x")
    assert status == 200
    sent = one(json.loads(body), "X-Request-Id")
    assert re.fullmatch(r"[0-9a-f]{32}", sent) and h["x-request-id"] == sent


@lfhttpd_only("access_log_request_id is lfhttpd's")
def test_access_log_line_ends_with_the_request_id_the_upstream_got(upstream, proxy):
    u, p = site(upstream, proxy, "access_log_request_id on;\n")
    e = echoed(p, "/id/logged")
    sent = one(e, "X-Request-Id")
    log = os.path.join(p.dir, "access.log")
    assert wait_until(lambda: os.path.exists(log) and "/id/logged" in open(log).read(),
                      scaled(5))
    line = [ln for ln in open(log).read().splitlines() if "/id/logged" in ln][0]
    assert line.endswith(f'"{sent}"')


@lfhttpd_only("nginx copies a decoded CR LF of $uri into the field as it is")
def test_a_decoded_crlf_in_uri_cannot_add_a_field_to_the_upstream_request(upstream, proxy):
    u, p = site(upstream, proxy)
    status, _, body, _ = request(p, "/uri/a%0d%0aInjected:%20yes")
    assert status == 200
    e = json.loads(body)
    assert not [v for n, v in e["headers"] if n.lower() == "injected"]
    assert "\r" not in one(e, "X-Uri") and "\n" not in one(e, "X-Uri")


# ------------------------------------------------------------------------------------- gzip


@lfhttpd_only("nginx compresses text/html only by default; lfhttpd JSON and text too")
def test_a_proxied_text_answer_is_compressed_as_it_streams(upstream, proxy):
    u, p = site(upstream, proxy)
    status, h, body, _ = request(p, "/_big?mb=1&type=text/plain",
                                 headers=[("Accept-Encoding", "gzip")])
    assert status == 200 and h["content-encoding"] == "gzip"
    assert h.get("transfer-encoding") == "chunked" and "content-length" not in h
    plain = gzip.decompress(body)
    assert len(plain) == 1 << 20 and plain[:251] == bytes(range(251))
    assert len(body) < len(plain)


@lfhttpd_only("nginx's gzip_vary is off by default")
def test_compressing_a_proxied_answer_keeps_its_vary_and_weakens_its_etag(upstream, proxy):
    u, p = site(upstream, proxy)
    _, h, body, _ = request(p, '/x?h=Vary:Cookie'
                               '&h=ETag:"v1"', headers=[("Accept-Encoding", "gzip")])
    assert h["content-encoding"] == "gzip"
    assert h["vary"] == "Cookie, Accept-Encoding"
    assert h["etag"] == 'W/"v1"'
    assert json.loads(gzip.decompress(body))["target"].startswith("/x")


def test_a_proxied_answer_is_not_compressed_for_a_client_that_does_not_take_gzip(upstream,
                                                                                  proxy):
    u, p = site(upstream, proxy)
    status, h, body, _ = request(p, "/x?type=text/plain")
    assert status == 200 and "content-encoding" not in h
    assert json.loads(body)["target"].startswith("/x")


def test_an_answer_the_upstream_encoded_is_not_compressed_again(upstream, proxy):
    u, p = site(upstream, proxy)
    _, h, _, _ = request(p, "/x?type=text/plain&h=Content-Encoding:br",
                         headers=[("Accept-Encoding", "gzip")])
    assert h["content-encoding"] == "br"


def test_cache_control_no_transform_keeps_a_proxied_answer_as_it_is(upstream, proxy):
    u, p = site(upstream, proxy)
    _, h, body, _ = request(p, "/x?type=text/plain&h=Cache-Control:no-transform",
                            headers=[("Accept-Encoding", "gzip")])
    assert "content-encoding" not in h and json.loads(body)["target"].startswith("/x")


def test_a_proxied_answer_of_a_type_that_does_not_compress_is_left_alone(upstream, proxy):
    u, p = site(upstream, proxy)
    _, h, _, _ = request(p, "/x?type=image/png", headers=[("Accept-Encoding",
                                                                      "gzip")])
    assert "content-encoding" not in h


@lfhttpd_only("nginx compresses text/html only by default")
def test_head_of_a_compressible_proxied_answer_says_what_get_would(upstream, proxy):
    u, p = site(upstream, proxy)
    _, get_h, _, _ = request(p, "/x?type=text/plain",
                             headers=[("Accept-Encoding", "gzip")])
    status, head_h, body, _ = request(p, "/x?type=text/plain", method="HEAD",
                                      headers=[("Accept-Encoding", "gzip")])
    assert status == 200 and body == b""
    assert head_h["content-encoding"] == get_h["content-encoding"] == "gzip"
    assert "content-length" not in head_h


# ------------------------------------------------------------------ figures and retries


@lfhttpd_only("the status page is lfhttpd's")
def test_status_page_shows_each_upstream_servers_requests_failures_and_state(upstream, proxy):
    u = upstream(2)
    text = """
upstream app {
    server 127.0.0.1:{up0};
    server 127.0.0.1:{dead0} max_fails=1 fail_timeout=60s;
    server 127.0.0.1:{up1} backup;
}
server {
    listen 127.0.0.1:{port0};
    location / { proxy_pass http://app; }
    location /status { handler status; }
}
"""
    p = proxy(text, u)
    codes = [request(p, f"/n{i}")[0] for i in range(4)]
    assert codes == [200] * 4
    _, _, body, _ = request(p, "/status?format=json")
    servers = {s["server"].rsplit(":", 1)[1]: s for s in json.loads(body)["upstreams"]}
    up0, up1 = (str(x) for x in u.ports)
    dead = [k for k in servers if k not in (up0, up1)][0]
    assert servers[up0]["state"] == "up" and servers[up0]["requests"] == 4
    assert servers[dead]["state"] == "out" and servers[dead]["failures"] == 1
    assert servers[up1]["state"] == "backup" and servers[up1]["requests"] == 0


def test_get_answered_503_goes_to_the_next_server_with_http_503(upstream, proxy):
    u = upstream(2)
    text = """
upstream app { server 127.0.0.1:{up0}; server 127.0.0.1:{up1}; }
server {
    listen 127.0.0.1:{port0};
    location / { proxy_pass http://app; proxy_next_upstream error timeout http_503; }
}
"""
    p = proxy(text, u)
    u.clear()
    status, _, _, _ = request(p, "/x?status=503")
    # Both servers answer 503 to this path: each was tried, the second's answer relayed.
    assert status == 503
    assert sorted(r["port"] for r in u.requests()) == sorted(u.ports)


def test_post_answered_503_is_not_sent_to_the_next_server(upstream, proxy):
    u = upstream(2)
    text = """
upstream app { server 127.0.0.1:{up0}; server 127.0.0.1:{up1}; }
server {
    listen 127.0.0.1:{port0};
    location / { proxy_pass http://app; proxy_next_upstream error timeout http_503; }
}
"""
    p = proxy(text, u)
    u.clear()
    status, _, _, _ = request(p, "/x?status=503", method="POST", body=b"once")
    assert status == 503 and len(u.requests()) == 1


@lfhttpd_only("the harness gives nginx's locations proxy_set_header lines of their own, "
              "which stop a location inheriting the top level's (nginx's rule and ours)")
def test_proxy_directives_at_the_top_level_reach_every_location(upstream, proxy):
    u = upstream()
    text = """
proxy_set_header X-Site top;
proxy_read_timeout 5s;
upstream app { server 127.0.0.1:{up0}; }
server {
    listen 127.0.0.1:{port0};
    location / { proxy_pass http://app; }
}
"""
    p = proxy(text, u)
    assert one(echoed(p, "/x"), "X-Site") == "top"


# --------------------------------------------------------------------------------- the target
# An absolute-form target may have an empty path, which is "/" (RFC 9112 section 3.2.2, RFC
# 9110 section 4.2.3): the upstream gets the origin-form, the path "/" and the query.

URI_PART = """
upstream app { server 127.0.0.1:{up0}; }
server {
    listen 127.0.0.1:{port0};
    location / { proxy_pass http://app/v1/; }
}
"""


def test_absolute_form_target_without_a_path_reaches_the_upstream_as_slash(upstream, proxy):
    u, p = site(upstream, proxy)
    e = echoed(p, "http://proxy.test")
    assert (e["method"], e["target"], e["version"]) == ("GET", "/", "HTTP/1.1")


def test_absolute_form_target_with_only_a_query_reaches_the_upstream_as_slash_and_query(
        upstream, proxy):
    u, p = site(upstream, proxy)
    assert echoed(p, "http://proxy.test?x=1")["target"] == "/?x=1"


def test_absolute_form_target_without_a_path_goes_under_the_uri_part(upstream, proxy):
    u = upstream()
    p = proxy(URI_PART, u)
    assert echoed(p, "http://proxy.test")["target"] == "/v1/"
    assert echoed(p, "http://proxy.test?x=1")["target"] == "/v1/?x=1"
