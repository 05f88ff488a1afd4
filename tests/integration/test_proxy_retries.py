"""`proxy_next_upstream`: which failures send a request to the next server of its group.
Each test has two servers (two ports of one upstream_app.py, which answers a path the same
on both), so a request that went to the next server is seen as one request on each port,
and one that did not as a single request. The answer relayed after a retry is the second
server's. Every test runs against nginx too (PROXY_UNDER_TEST=nginx) unless marked.
"""
import pytest

from proxy_harness import lfhttpd_only, proxy, upstream  # noqa: F401 fixtures
from test_proxy import group, request

SERVERS = ["127.0.0.1:{up0}", "127.0.0.1:{up1}"]


def two_servers(upstream, proxy, next_upstream=None):
    """(upstream, proxy) on a group of two servers, proxied at / with `proxy_next_upstream
    next_upstream;` (nginx's default, error timeout, when None)."""
    u = upstream(2)
    line = f"        proxy_next_upstream {next_upstream};\n" if next_upstream else ""
    return u, proxy(group(SERVERS, location=line), u)


def ports_asked(u):
    return sorted(r["port"] for r in u.requests())


# ------------------------------------------------------------ an answer that is an error


def test_an_upstreams_502_is_relayed_without_retry_by_default(upstream, proxy):
    u, p = two_servers(upstream, proxy)
    assert request(p, "/x?status=502")[0] == 502
    assert len(u.requests()) == 1


def test_get_answered_502_goes_to_the_next_server_with_http_502(upstream, proxy):
    u, p = two_servers(upstream, proxy, "error timeout http_502")
    assert request(p, "/x?status=502")[0] == 502
    assert ports_asked(u) == sorted(u.ports)


def test_get_answered_504_goes_to_the_next_server_with_http_504(upstream, proxy):
    u, p = two_servers(upstream, proxy, "error timeout http_504")
    assert request(p, "/x?status=504")[0] == 504
    assert ports_asked(u) == sorted(u.ports)


def test_http_502_does_not_retry_a_504(upstream, proxy):
    u, p = two_servers(upstream, proxy, "error timeout http_502")
    assert request(p, "/x?status=504")[0] == 504
    assert len(u.requests()) == 1


def test_post_answered_502_is_not_sent_to_the_next_server_with_http_502(upstream, proxy):
    u, p = two_servers(upstream, proxy, "error timeout http_502")
    assert request(p, "/x?status=502", method="POST", body=b"once")[0] == 502
    assert len(u.requests()) == 1


def test_post_answered_502_goes_to_the_next_server_with_non_idempotent(upstream, proxy):
    u, p = two_servers(upstream, proxy, "error timeout http_502 non_idempotent")
    assert request(p, "/x?status=502", method="POST", body=b"twice")[0] == 502
    assert ports_asked(u) == sorted(u.ports)
    assert [r["body"] for r in u.requests()] == ["twice", "twice"]


# ------------------------------------------------------------ a head that cannot be relayed

INVALID = [
    pytest.param("/x/_bighead?kb=20", id="head_too_large"),
    pytest.param("/x/_garbage", id="not_a_status_line",
                 marks=lfhttpd_only("nginx relays a status line it cannot read as an "
                                    "HTTP/0.9 body")),
]


@pytest.mark.parametrize("target", INVALID)
def test_an_invalid_head_is_502_without_retry_by_default(upstream, proxy, target):
    u, p = two_servers(upstream, proxy)
    assert request(p, target)[0] == 502
    assert len(u.requests()) == 1


@pytest.mark.parametrize("target", INVALID)
def test_an_invalid_head_goes_to_the_next_server_with_invalid_header(upstream, proxy,
                                                                    target):
    u, p = two_servers(upstream, proxy, "error timeout invalid_header")
    assert request(p, target)[0] == 502
    assert ports_asked(u) == sorted(u.ports)


# ------------------------------------------------------------ a request that was sent


def test_post_whose_upstream_closed_without_answer_goes_on_with_non_idempotent(upstream,
                                                                               proxy):
    """The POST's body went out to the first server, which closed without a byte: with
    non_idempotent it is sent again to the second (whose close ends it in a 502)."""
    u, p = two_servers(upstream, proxy, "error timeout non_idempotent")
    assert request(p, "/x/_close?at=start", method="POST", body=b"again")[0] == 502
    assert ports_asked(u) == sorted(u.ports)
    assert [r["body"] for r in u.requests()] == ["again", "again"]
