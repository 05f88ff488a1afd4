"""How a proxied request lives in the event model: the sweep wakes it when the client has
left or a timeout has passed, it works under every concurrency strategy and reactivation,
and a kept upstream connection the upstream closed meanwhile is never used. The test
upstream is upstream_app.py; the fixtures are proxy_harness's (lfhttpd only: the
strategies and the sweep are lfhttpd's).
"""
import json
import socket
import time

import pytest

from conftest import past_buffers, scaled, wait_until
from proxy_harness import UNDER_NGINX, proxy, upstream  # noqa: F401 fixtures
from test_proxy import request

pytestmark = pytest.mark.skipif(UNDER_NGINX, reason="[by design] lfhttpd's event model")

KEPT = """
upstream app {
    server 127.0.0.1:{up0};
    keepalive 8;
}
server {
    listen 127.0.0.1:{port0};
    location / { proxy_pass http://app; }
}
"""


def in_flight(p):
    """The requests in flight to the upstream's server, from the status page."""
    _, _, body, _ = request(p, "/status?format=json")
    return json.loads(body)["upstreams"][0]["active"]


def test_a_client_that_leaves_while_the_upstream_is_slow_frees_the_upstream_connection(
        upstream, proxy):
    u = upstream()
    p = proxy(KEPT.replace("location / {", "location /status { handler status; }\n"
                                           "    location / {"), u)
    c = socket.create_connection((p.host, p.port), timeout=scaled(10))
    c.sendall(b"GET /_slow?head=30 HTTP/1.1\r\nHost: t\r\n\r\n")
    assert wait_until(lambda: u.requests(), scaled(5))
    assert in_flight(p) == 1
    c.close()
    # The sweep (every 250 ms) finds the client's side closed and wakes the request, which
    # lets the upstream connection go: long before the answer would have come. (The
    # upstream, asleep until it answers, cannot tell yet.)
    assert wait_until(lambda: in_flight(p) == 0, scaled(3))


def test_proxy_send_timeout_ends_a_request_whose_body_the_upstream_never_reads(upstream,
                                                                                proxy):
    # The upstream never reads the body (unread=1) and its receive buffer is held small;
    # the body is larger than the proxy's send buffer can grow on this machine: the
    # proxy's writes stall, and proxy_send_timeout (1 s) ends the request long before the
    # upstream would answer (after 30 s).
    u = upstream(rcvbuf=65536)
    size = past_buffers()
    p = proxy(f"max_body_size {size};\n" +
              KEPT.replace("proxy_pass http://app;",
                           "proxy_pass http://app; proxy_send_timeout 1s;"), u)
    status, _, _, _ = request(p, "/_slow?head=30&unread=1", method="POST", body=b"x" * size,
                              headers=[("Content-Type", "application/octet-stream")])
    assert status == 504
    # the path taken: the upstream had the request, and far less than its body
    assert [r["target"] for r in u.requests()] == ["/_slow?head=30&unread=1"]
    assert sum(c["bytes_in"] for c in u.conns()) < size // 2


@pytest.mark.parametrize("extra", ["concurrency thread_per_connection;",
                                   "concurrency half_sync_half_async;",
                                   "reactivation oneshot;"])
def test_the_proxy_works_under_every_strategy_and_reactivation(upstream, proxy, extra):
    u = upstream()
    p = proxy(extra + "\n" + KEPT, u)
    from conftest import Client
    c = Client(socket.create_connection((p.host, p.port), timeout=scaled(10)))
    try:
        for target in ("/a", "/_chunked", "/b"):  # one connection, kept alive both sides
            c.send(f"GET {target} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
            status, _, body, _ = c.read_response(timeout=scaled(10))
            assert status == 200, (target, body)
    finally:
        c.close()
    seen = [r["conn"] for r in u.requests()]
    assert len(seen) == 3 and len(set(seen)) == 1  # one upstream connection, reused
    # and a raw upgrade, which is a tunnel both ways
    s = socket.create_connection((p.host, p.port), timeout=scaled(10))
    s.sendall(b"GET /_upgrade HTTP/1.1\r\nHost: t\r\nConnection: upgrade\r\n"
              b"Upgrade: echo\r\n\r\n")
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(4096)
    assert head.startswith(b"HTTP/1.1 101")
    s.sendall(b"ping")
    got = head.split(b"\r\n\r\n", 1)[1]
    deadline = time.time() + scaled(5)
    while b"ping" not in got and time.time() < deadline:
        got += s.recv(4096)
    assert b"ping" in got
    s.close()


def test_a_kept_connection_the_upstream_closed_while_idle_is_not_used(upstream, proxy):
    u = upstream()
    p = proxy(KEPT, u)
    assert request(p, "/first")[0] == 200
    first = u.requests()[0]["conn"]
    # The upstream closes its idle connection (as a server's keep-alive timeout does)
    # before the next request comes.
    assert wait_until(lambda: u.control("/__close_idle") is not None and not
                      [c for c in u.conns() if c["id"] == first][0]["open"], scaled(5))
    status, _, body, _ = request(p, "/second", method="POST", body=b"once")
    assert status == 200, body
    second = [r for r in u.requests() if r["target"] == "/second"]
    assert len(second) == 1 and second[0]["conn"] != first
    assert json.loads(body)["body"] == "once"


def burst(p, n, path):
    """n connections, each with a proxied GET sent at once, before any is read: the server
    accepts several in one listener event. Returns the statuses (None: no answer within
    the time limit)."""
    # Connected first, written after: the listener (TCP_DEFER_ACCEPT) hears of each once its
    # request has come, so that they queue up together.
    socks = [socket.create_connection((p.host, p.port), timeout=scaled(10)) for _ in range(n)]
    for i, s in enumerate(socks):
        s.sendall(f"GET {path}&i={i} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".encode())
    statuses = []
    for s in socks:
        s.settimeout(scaled(3))
        data = b""
        try:
            while chunk := s.recv(65536):
                data += chunk
        except socket.timeout:
            data = None
        s.close()
        statuses.append(int(data.split(b" ")[1]) if data else None)
    return statuses


def test_proxied_requests_of_connections_accepted_together_are_all_answered(upstream, proxy):
    """New connections accepted in one listener event start their requests one after the
    other in that event; each proxied one that takes a kept upstream connection re-arms
    it, and none may be left unarmed (a request that then waits for ever). Answers in many
    pieces on 4 threads leave events waiting on kept connections, which is what makes a
    re-arm run the callback again. Before the fix this failed in about one run in six;
    tests/unit/test_lf_group.c has the deterministic test of the rule underneath."""
    u = upstream()
    p = proxy(KEPT.replace("keepalive 8", "keepalive 32"), u, threads=4)
    for _ in range(100):
        assert burst(p, 16, "/_slow?head=0&pieces=60&size=1500&gap=0") == [200] * 16


def read_syscalls(pid):
    """The read(2)-family calls the process has made so far (/proc/PID/io's syscr)."""
    with open(f"/proc/{pid}/io") as f:
        return int(next(line for line in f if line.startswith("syscr:")).split()[1])


@pytest.mark.parametrize("extra", ["", "concurrency thread_per_connection;",
                                   "concurrency half_sync_half_async;",
                                   "reactivation oneshot;"])
def test_a_request_sent_while_the_previous_one_is_proxied_is_answered_after_it(
        upstream, proxy, extra):
    # The first request was read whole and the socket left empty; the second comes while the
    # first waits on the upstream, so it is not read until the first's answer has gone:
    # what the socket raised meanwhile must not be lost.
    u = upstream()
    p = proxy(extra + "\n" + KEPT, u)
    from conftest import Client
    c = Client(socket.create_connection((p.host, p.port), timeout=scaled(10)))
    try:
        # A first answer: the connection is in the handle set from then on (a registration
        # would report what the socket holds, as a new edge does).
        c.send(b"GET /first HTTP/1.1\r\nHost: t\r\n\r\n")
        assert c.read_response(timeout=scaled(10))[0] == 200
        c.send(b"GET /_slow?head=0.5 HTTP/1.1\r\nHost: t\r\n\r\n")
        assert wait_until(lambda: len(u.requests()) == 2, scaled(5))
        c.send(b"GET /second HTTP/1.1\r\nHost: t\r\n\r\n")
        assert c.read_response(timeout=scaled(10))[0] == 200
        status, _, body, _ = c.read_response(timeout=scaled(10))
        assert status == 200 and json.loads(body)["target"] == "/second"
    finally:
        c.close()


def test_a_proxied_answer_gone_whole_costs_no_read_that_finds_nothing(upstream, proxy):
    # Its request was read with room to spare, so the client's socket held nothing more;
    # anything the client sends after raises an event of its own. nginx reads then too.
    u = upstream()
    p = proxy(KEPT, u)
    from conftest import Client
    c = Client(socket.create_connection((p.host, p.port), timeout=scaled(10)))
    try:
        c.send(b"GET /warm HTTP/1.1\r\nHost: t\r\n\r\n")
        assert c.read_response(timeout=scaled(10))[0] == 200
        n = 200
        before = read_syscalls(p.pid)
        for i in range(n):
            c.send(f"GET /r{i} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
            assert c.read_response(timeout=scaled(10))[0] == 200
        reads = read_syscalls(p.pid) - before
    finally:
        c.close()
    # One read a request (its head), not a second that says EAGAIN after each answer;
    # the margin is for the server's own timers and the upstream's reads (recv, uncounted).
    assert reads < n * 1.25, reads


def in_flight_together(p, n, path):
    """n clients, each with a proxied request sent at once (the upstream holds each head a
    moment, so that all are at the upstream together); every answer must be 200."""
    socks = [socket.create_connection((p.host, p.port), timeout=scaled(10)) for _ in range(n)]
    for s in socks:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".encode())
    for s in socks:
        data = b""
        while chunk := s.recv(65536):
            data += chunk
        s.close()
        assert data.startswith(b"HTTP/1.1 200"), data[:200]


def test_an_upstream_keeps_keepalive_times_the_groups_whichever_group_was_busier(upstream,
                                                                                  proxy):
    # keepalive 8 with two thread groups: 16 idle connections in all, as two nginx worker
    # processes keep 8 each, but wherever the kernel spread the clients. nginx's busier
    # worker would close what passes its 8 and connect again in the next round; here
    # every round after the first reuses the 16 the first one left.
    u = upstream()
    p = proxy("groups 2;\n" + KEPT
              .replace("proxy_pass http://app;",
                       'proxy_pass http://app; proxy_http_version 1.1; '
                       'proxy_set_header Connection "";'), u)
    for _ in range(4):  # new clients each round: the kernel spreads them anew
        in_flight_together(p, 16, "/_slow?head=0.3")
        assert wait_until(lambda: sum(1 for r in u.requests() if r.get("answered")) ==
                          len(u.requests()), scaled(5))
    assert len(u.requests()) == 64
    # the first round's 16 connections carried all 64 requests
    assert len(u.conns()) == 16, [(c["id"], c["closed_by"]) for c in u.conns()]
