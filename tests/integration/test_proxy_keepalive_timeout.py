"""A kept upstream connection idle past its block's keepalive_timeout is closed by the
proxy, as nginx's upstream keepalive timer closes it, even when no request comes to reuse
it: the upstream (upstream_app, which never closes an idle connection itself) sees the
proxy close it. Runs on nginx too (PROXY_UNDER_TEST=nginx)."""
from conftest import scaled, wait_until
from proxy_harness import proxy, upstream  # noqa: F401 fixtures
from test_proxy import echoed, group

KEPT = group(["127.0.0.1:{up0}"], "    keepalive 4;\n    keepalive_timeout 1s;\n",
             "        proxy_http_version 1.1;\n        proxy_set_header Connection \"\";\n")


def test_idle_kept_upstream_connection_is_closed_after_keepalive_timeout(upstream, proxy):
    u = upstream()
    p = proxy(KEPT, u)
    assert echoed(p, "/a")["seq"] == 1
    # Kept: open on the upstream's side, then closed by the proxy about a second later.
    assert [c["open"] for c in u.conns()] == [True]
    assert wait_until(lambda: [c["closed_by"] for c in u.conns()] == ["peer"], scaled(10)), \
        u.conns()
