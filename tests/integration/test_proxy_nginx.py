"""The reverse proxy against nginx, the oracle.

One `upstream` / `proxy_pass` configuration (CONF) is run by nginx and by the proxy under
test (lfhttpd; with PROXY_UNDER_TEST=nginx a second nginx, which checks this machinery)
in front of one test upstream (upstream_app.py). Each row of REQUESTS is one request and
its own test, sent to each proxy in turn; compared are:

- what the upstream received: the request line and the header fields as a sorted list of
  (lowercase name, value), where the proxy's own port is written PORT (X-Forwarded-Host)
  and Connection is left out (nginx is told to send none; lfhttpd may say keep-alive);
- what the client got: the status, the framing (Content-Length or chunked), the header
  fields that carry meaning (Location, Refresh, Content-Type, Vary, Cache-Control, ETag,
  Set-Cookie, every X- field) and the body (an upstream echo is compared through what the
  upstream received, so its body is just "echo").

A row's `differs` names where lfhttpd answers otherwise on purpose, and why: a function
from nginx's observation to lfhttpd's. It is not applied when nginx is compared with
itself.
"""
import socket

import pytest

from conftest import scaled
from proxy_harness import UNDER_TEST, Proxy, Upstream

# gzip off: the two differ on purpose in what they compress by default (nginx: text/html
# only, no Vary; lfhttpd: JSON too, with Vary); proxied compression has its own tests.
CONF = """
gzip off;
upstream app {
    server 127.0.0.1:{up0};
    keepalive 8;
}
server {
    listen 127.0.0.1:{port0};
    location / { proxy_pass http://app; }
    location /api/ { proxy_pass http://app/v1/; }
    location /direct/ { proxy_pass http://127.0.0.1:{up0}/; }
    location /client-host/ {
        proxy_pass http://app;
        proxy_set_header Host $host;
    }
    location /hidden/ {
        proxy_pass http://app;
        proxy_hide_header X-Powered-By;
    }
}
"""

CLIENT_FIELDS = ("location", "refresh", "content-type", "vary", "cache-control", "etag",
                 "set-cookie", "content-length", "transfer-encoding")


def without_upstream_field(*names):
    """lfhttpd removes these request fields nginx forwards."""
    def change(seen):
        seen = dict(seen)
        seen["upstream"] = dict(seen["upstream"])
        seen["upstream"]["headers"] = [h for h in seen["upstream"]["headers"]
                                       if h[0] not in names]
        return seen
    return change


def without_client_field(*names):
    """lfhttpd does not relay these response fields nginx relays."""
    def change(seen):
        seen = dict(seen)
        seen["client"] = {k: v for k, v in seen["client"].items() if k not in names}
        return seen
    return change


def row(name, target, method="GET", headers=(), body=None, version="1.1", host="proxy.test",
        differs=None):
    return pytest.param(dict(target=target, method=method, headers=list(headers), body=body,
                             version=version, host=host, differs=differs), id=name)


CHUNKED = [("Transfer-Encoding", "chunked")]


def upstream_field(name, value):
    """lfhttpd sends this request field with this value where nginx sends another."""
    def change(seen):
        seen = dict(seen)
        seen["upstream"] = dict(seen["upstream"])
        seen["upstream"]["headers"] = sorted([n, value if n == name else v]
                                             for n, v in seen["upstream"]["headers"])
        return seen
    return change

CONNECTION_NAMED = ("the fields a Connection names are hop-by-hop (RFC 9110 7.6.1)",
                    without_upstream_field("x-hop"))

REQUESTS = [
    # --- request line and URI mapping
    row("root", "/"),
    row("path_and_query", "/a/b?x=1&y=2"),
    row("percent_encoded_path_and_query", "/a%20b/%7Euser?q=%2F%20"),
    row("encoded_slash", "/a%2Fb/c"),
    row("dot_segments_without_uri_part_pass_as_sent", "/a/./b/../c"),
    row("uri_part_replaces_the_prefix", "/api/users"),
    row("uri_part_keeps_the_query", "/api/users?id=1&sort=-name"),
    row("uri_part_of_the_prefix_alone", "/api/"),
    row("uri_part_with_percent_encoding", "/api/a%20b?c=%2F"),
    row("uri_part_after_dot_segments", "/api/x/../y"),
    row("address_with_a_slash_uri_part", "/direct/x/y?z=1"),
    # --- methods and bodies
    row("post_with_a_body", "/form", "POST", [("Content-Type", "text/plain")], b"a=1&b=2"),
    row("put_with_a_binary_body", "/item/1", "PUT", [], bytes(range(256)) * 4),
    row("chunked_body_arrives_with_a_length", "/upload", "POST", CHUNKED,
        b"3\r\nabc\r\n4;x=y\r\ndefg\r\n0\r\n\r\n"),
    row("delete", "/item/1", "DELETE"),
    row("options", "/item/1", "OPTIONS"),
    row("patch_with_a_body", "/item/1", "PATCH", [], b"{}"),
    row("head", "/x", "HEAD"),
    # --- request header fields
    row("end_to_end_fields_pass", "/h", headers=[("Accept", "*/*"), ("Cookie", "a=1"),
                                                 ("X-Custom", "v"), ("User-Agent", "t/1")]),
    row("standard_hop_by_hop_fields_are_dropped", "/h",
        headers=[("Connection", "keep-alive"), ("Keep-Alive", "timeout=9"), ("TE", "trailers"),
                 ("Upgrade", "h2c")]),
    row("fields_named_by_connection", "/h", headers=[("Connection", "X-Hop"), ("X-Hop", "1")],
        differs=CONNECTION_NAMED),
    row("proxy_authorization", "/h", headers=[("Proxy-Authorization", "Basic eDp5")],
        differs=("Proxy-* fields are for the proxy, not the upstream",
                 without_upstream_field("proxy-authorization"))),
    row("x_forwarded_for_is_appended", "/h", headers=[("X-Forwarded-For", "198.51.100.7")]),
    # --- Host
    row("host_with_a_port", "/h", host="example.org:8080"),
    row("host_in_capitals", "/h", host="EXAMPLE.org"),
    row("no_host_in_http_1_0", "/h", version="1.0", host=None),
    row("absolute_form_target", "http://other.test/abs?q=1", host="proxy.test",
        differs=("an absolute-form target's authority is the request's host (RFC 9112 "
                 "3.2.2), which X-Forwarded-Host names; nginx's $http_host is the Host field",
                 upstream_field("x-forwarded-host", "other.test"))),
    row("client_host_set_by_proxy_set_header", "/client-host/h", host="Example.ORG:81"),
    # --- response fields and redirects
    row("location_under_the_uri_part_is_rewritten",
        "/api/r?status=302&h=Location:http://app/v1/next"),
    row("location_of_the_group_is_rewritten", "/r?status=301&h=Location:http://app/there"),
    row("location_of_another_host_is_kept",
        "/api/r?status=302&h=Location:http://example.com/v1/x"),
    row("refresh_is_rewritten", "/api/r?h=Refresh:3;%20url%3Dhttp://app/v1/next"),
    row("status_204", "/x?status=204"),
    row("status_304_with_etag", "/x?status=304&h=ETag:%22v1%22"),
    row("x_powered_by_hidden", "/hidden/x?h=X-Powered-By:PHP&h=X-Kept:1"),
    row("upstream_server_and_date_replaced", "/x?h=Server:app-server/1.0"),
    row("cache_fields_pass", "/x?h=Vary:Accept-Encoding&h=Cache-Control:no-transform"),
    row("two_set_cookies", "/x?h=Set-Cookie:a%3D1&h=Set-Cookie:b%3D2"),
    # --- response framing
    row("content_length_body", "/x/_big?mb=0.25"),
    row("chunked_body_with_trailers", "/x/_chunked"),
    row("close_delimited_body_to_http_1_1", "/x/_noclen?size=5000"),
    row("close_delimited_body_to_http_1_0", "/x/_noclen?size=5000", version="1.0"),
    row("head_of_a_large_body", "/x/_big?mb=1", "HEAD"),
]


# ------------------------------------------------------------------- the two proxies


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """(upstream, nginx, the proxy under test or the reason it did not start)."""
    u = Upstream()
    theirs = ours = None
    try:  # every process started here is stopped, whatever fails
        root = tmp_path_factory.mktemp("root")
        theirs = Proxy(tmp_path_factory.mktemp("nginx"), CONF, u, root, kind="nginx")
        try:
            ours = Proxy(tmp_path_factory.mktemp(UNDER_TEST), CONF, u, root, kind=UNDER_TEST)
        except RuntimeError as e:
            ours = e
        yield u, theirs, ours
    finally:
        try:
            if theirs is not None:
                theirs.stop()
        finally:
            try:
                if ours is not None and not isinstance(ours, Exception):
                    ours.stop()
            finally:
                u.stop()


def exchange(port, r):
    """Send the row's request on a new connection, read until the proxy closes:
    (status, [(lowercase name, value)], body or None when not framed as announced)."""
    head = [f"{r['method']} {r['target']} HTTP/{r['version']}"]
    if r["host"] is not None:
        head.append(f"Host: {r['host']}")
    head += [f"{k}: {v}" for k, v in r["headers"]]
    if r["body"] is not None and ("Transfer-Encoding", "chunked") not in r["headers"]:
        head.append(f"Content-Length: {len(r['body'])}")
    head.append("Connection: close")
    with socket.create_connection(("127.0.0.1", port), timeout=scaled(10)) as s:
        s.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + (r["body"] or b""))
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    raw_head, _, body = data.partition(b"\r\n\r\n")
    lines = raw_head.decode("latin-1").split("\r\n")
    headers = [(k.strip().lower(), v.strip())
               for k, _, v in (line.partition(":") for line in lines[1:])]
    if ("transfer-encoding", "chunked") in headers and r["method"] != "HEAD":
        body = dechunk(body)
    return int(lines[0].split(" ")[1]), headers, body


def dechunk(data):
    out = b""
    while True:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            return out
        out, data = out + data[:size], data[size + 2:]


def observe(u, proxy, r):
    """What the row compares for one proxy, its own port written PORT."""
    u.clear()
    status, headers, body = exchange(proxy.port, r)
    port = f":{proxy.port}"
    client = {"status": status}
    for name, value in headers:
        if name in CLIENT_FIELDS or name.startswith("x-"):
            client.setdefault(name, []).append(value.replace(port, ":PORT"))
    client["body"] = "echo" if body.startswith(b'{"method"') else body
    if client["body"] == "echo":  # its length follows what the upstream received
        client.pop("content-length", None)
    received = u.requests()
    upstream = [{"line": f"{q['method']} {q['target']} {q['version']}",
                 "headers": sorted([n.lower(), v.replace(port, ":PORT")]
                                   for n, v in q["headers"] if n.lower() != "connection"),
                 "body": q["body"]} for q in received]
    return {"client": client, "upstream": upstream[0] if len(upstream) == 1 else upstream}


@pytest.mark.parametrize("r", REQUESTS)
def test_proxies_as_nginx_does(setup, r):
    u, theirs, ours = setup
    if isinstance(ours, Exception):
        pytest.fail(f"{UNDER_TEST} did not start on the configuration: {ours}")
    wanted = observe(u, theirs, r)
    if r["differs"] and ours.kind != "nginx":
        wanted = r["differs"][1](wanted)
    assert observe(u, ours, r) == wanted


def test_the_oracle_forwards_what_the_rows_assume(setup):
    """A check of the machinery: nginx reaches the upstream and the echo is recognized."""
    u, theirs, _ = setup
    seen = observe(u, theirs, dict(target="/api/a?b=1", method="GET", headers=[], body=None,
                                   version="1.1", host="proxy.test", differs=None))
    assert seen["client"]["status"] == 200 and seen["client"]["body"] == "echo"
    assert seen["upstream"]["line"] == "GET /v1/a?b=1 HTTP/1.1"
    assert ["host", "app"] in seen["upstream"]["headers"]
    assert ["x-forwarded-host", "proxy.test"] in seen["upstream"]["headers"]
