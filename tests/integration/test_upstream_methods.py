"""nginx's `upstream` blocks, side by side with nginx on one configuration (run as written:
site_lines=False) in front of one test upstream on three ports: which server answers
under weights, backup and down, ip_hash, hash KEY and hash KEY consistent (the same key
goes to the same server under both: their choices are deterministic and computed alike),
random, max_conns, and keepalive_requests; and the server parameters open-source nginx
1.22 refuses.

Each test asks both proxies the same and asserts one expected answer of each (nginx
checks the expectation), or that the two answer alike where the answer is nginx's
computation.
"""
import http.client
import json
import subprocess
import threading

import pytest

from conftest import scaled, wait_until
from proxy_harness import UNDER_TEST, Proxy, Upstream

KEEP = "proxy_http_version 1.1; proxy_set_header Connection \"\";"

CONF = """
upstream weighted { server 127.0.0.1:{up0} weight=3; server 127.0.0.1:{up1}; }
upstream with_backup { server 127.0.0.1:{dead0}; server 127.0.0.1:{up2} backup; }
upstream with_down { server 127.0.0.1:{up0} down; server 127.0.0.1:{up1}; }
upstream by_ip {
    ip_hash;
    server 127.0.0.1:{up0};
    server 127.0.0.1:{up1};
    server 127.0.0.1:{up2};
}
upstream by_key {
    hash $arg_k;
    server 127.0.0.1:{up0};
    server 127.0.0.1:{up1} weight=2;
    server 127.0.0.1:{up2};
}
upstream by_ring {
    hash $arg_k consistent;
    server 127.0.0.1:{up0};
    server 127.0.0.1:{up1} weight=2;
    server 127.0.0.1:{up2};
}
upstream by_chance {
    random two least_conn;
    server 127.0.0.1:{up0};
    server 127.0.0.1:{up1};
}
upstream limited {
    server 127.0.0.1:{up0} max_conns=1;
    server 127.0.0.1:{up1};
}
upstream pair { server 127.0.0.1:{up0}; server 127.0.0.1:{up1}; }
upstream short_lived {
    server 127.0.0.1:{up2};
    keepalive 4;
    keepalive_requests 2;
    keepalive_timeout 30s;
    keepalive_time 1h;
}
server {
    listen 127.0.0.1:{port0};
    location /weighted/ { proxy_pass http://weighted; }
    location /with_backup/ { proxy_pass http://with_backup; }
    location /with_down/ { proxy_pass http://with_down; }
    location /by_ip/ { proxy_pass http://by_ip; }
    location /by_key/ { proxy_pass http://by_key; }
    location /by_ring/ { proxy_pass http://by_ring; }
    location /by_chance/ { proxy_pass http://by_chance; }
    location /limited/ { proxy_pass http://limited; }
    location /short_lived/ { proxy_pass http://short_lived; KEEP }
    location /next_on_404/ {
        proxy_pass http://pair;
        proxy_next_upstream error timeout http_404;
    }
}
""".replace("KEEP", KEEP)

KINDS = ("nginx", UNDER_TEST) if UNDER_TEST != "nginx" else ("nginx",)


@pytest.fixture(scope="module")
def proxies(tmp_path_factory):
    """({kind: Proxy}, the upstream) for nginx and the proxy under test, on CONF."""
    u = Upstream(count=3)
    started = {}
    try:
        root = tmp_path_factory.mktemp("root")
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


def get(p, target):
    """(status, body) of one GET on a new connection."""
    c = http.client.HTTPConnection(p.host, p.port, timeout=scaled(10))
    try:
        c.request("GET", target)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def echo(p, target):
    """The upstream's echo of one GET (its port, conn, seq...)."""
    status, body = get(p, target)
    assert status == 200, (status, body)
    return json.loads(body)


def port_index(proxies, port):
    return proxies[1].ports.index(port)


def each(proxies, ask):
    return {kind: ask(p) for kind, p in proxies[0].items()}


def same(seen, expected):
    for kind, got in seen.items():
        assert got == expected, f"{kind}: {got!r}, expected {expected!r}"


def alike(seen):
    """Every proxy answered as nginx did; returns nginx's answer."""
    theirs = seen["nginx"]
    for kind, got in seen.items():
        assert got == theirs, f"{kind}: {got!r}, nginx: {theirs!r}"
    return theirs


def counts(proxies, p, prefix, n):
    out = [0, 0, 0]
    for i in range(n):
        out[port_index(proxies, echo(p, f"{prefix}r{i}")["port"])] += 1
    return out


def test_weights_share_the_requests_in_their_proportion(proxies):
    same(each(proxies, lambda p: counts(proxies, p, "/weighted/", 40)), [30, 10, 0])


def test_a_backup_answers_when_the_only_primary_is_down(proxies):
    same(each(proxies, lambda p: counts(proxies, p, "/with_backup/", 4)), [0, 0, 4])


def test_a_server_marked_down_is_never_chosen(proxies):
    same(each(proxies, lambda p: counts(proxies, p, "/with_down/", 10)), [0, 10, 0])


def test_ip_hash_sends_one_client_to_the_server_nginx_chooses(proxies):
    seen = alike(each(proxies, lambda p: counts(proxies, p, "/by_ip/", 12)))
    assert sorted(seen) == [0, 0, 12]


def keyed(proxies, p, prefix):
    return [port_index(proxies, echo(p, f"{prefix}x?k=key{i}")["port"]) for i in range(40)]


def test_hash_sends_each_key_to_the_server_nginx_chooses(proxies):
    seen = alike(each(proxies, lambda p: keyed(proxies, p, "/by_key/")))
    assert set(seen) == {0, 1, 2}


def test_consistent_hash_sends_each_key_to_the_server_nginx_chooses(proxies):
    seen = alike(each(proxies, lambda p: keyed(proxies, p, "/by_ring/")))
    assert set(seen) == {0, 1, 2}


def test_random_two_least_conn_uses_both_servers(proxies):
    seen = each(proxies, lambda p: counts(proxies, p, "/by_chance/", 40))
    for kind, got in seen.items():
        assert got[0] > 0 and got[1] > 0 and got[2] == 0, (kind, got)


def test_max_conns_sends_a_second_request_in_flight_elsewhere(proxies):
    """While one slow request holds the server of max_conns=1, the next ones go to the
    other server."""
    def ask(p):
        target = f"/limited/{p.kind}/_slow?head=1"
        slow = threading.Thread(target=get, args=(p, target))
        ports = []
        slow.start()
        try:
            assert wait_until(lambda: any(r["target"] == target
                                          for r in proxies[1].requests()), scaled(5))
            ports = [port_index(proxies, echo(p, f"/limited/r{i}")["port"]) for i in range(4)]
        finally:
            slow.join()
        return ports
    same(each(proxies, ask), [1, 1, 1, 1])


def test_keepalive_requests_closes_an_upstream_connection_after_that_many(proxies):
    same(each(proxies, lambda p: [echo(p, f"/short_lived/r{i}")["seq"] for i in range(5)]),
         [1, 2, 1, 2, 1])


def test_next_upstream_http_404_tries_the_other_server(proxies):
    """Both servers answer 404: each is tried once, and the last 404 is the answer."""
    def ask(p):
        target = f"/next_on_404/{p.kind}?status=404"
        status, _ = get(p, target)
        tried = sorted(port_index(proxies, r["port"]) for r in proxies[1].requests()
                       if r["target"] == target)
        return status, tried
    same(each(proxies, ask), (404, [0, 1]))


def test_a_404_tried_again_elsewhere_does_not_take_a_server_out(proxies):
    """nginx counts http_403 and http_404 as no failure: after both servers answered 404,
    both still take requests (max_fails=1 would have taken them out for 10s)."""
    def ask(p):
        get(p, f"/next_on_404/{p.kind}-first?status=404")
        return sorted({port_index(proxies, echo(p, f"/next_on_404/r{i}")["port"])
                       for i in range(4)})
    same(each(proxies, ask), [0, 1])


def test_random_two_sends_the_next_request_to_the_server_not_busy(proxies):
    def ask(p):
        target = f"/by_chance/{p.kind}/_slow?head=1"
        slow = threading.Thread(target=get, args=(p, target))
        slow.start()
        try:
            assert wait_until(lambda: any(r["target"] == target
                                          for r in proxies[1].requests()), scaled(5))
            ports = {port_index(proxies, echo(p, f"/by_chance/r{i}")["port"])
                     for i in range(4)}
        finally:
            slow.join()
        busy = {port_index(proxies, r["port"]) for r in proxies[1].requests()
                if r["target"] == target}
        return len(busy), busy & ports
    same(each(proxies, ask), (1, set()))


# ------------------------------------------------------------------------ parameters


@pytest.mark.parametrize("parameter", ["resolve", "service=http", "slow_start=10s", "route=a",
                                       "drain"])
def test_parameters_open_source_nginx_refuses_are_refused(tmp_path, parameter):
    """nginx 1.22 says `invalid parameter`; so does the check here, naming the line."""
    from conftest import BIN
    conf = tmp_path / "t.conf"
    conf.write_text("upstream u {\n    server 127.0.0.1:1 %s;\n    server 127.0.0.1:2;\n}\n"
                    "server { listen 127.0.0.1:1; location / { proxy_pass http://u; } }\n"
                    % parameter)
    r = subprocess.run([BIN, "-t", "-c", str(conf)], capture_output=True, text=True)
    assert r.returncode != 0
    assert f"t.conf:2: proxy: server: invalid parameter \"{parameter}\"" in r.stderr


@pytest.mark.parametrize("method", ["ip_hash", "hash $uri", "hash $uri consistent", "random"])
def test_a_backup_server_with_a_hashing_method_is_refused(tmp_path, method):
    from conftest import BIN
    conf = tmp_path / "t.conf"
    conf.write_text("upstream u {\n    %s;\n    server 127.0.0.1:1;\n"
                    "    server 127.0.0.1:2 backup;\n}\n"
                    "server { listen 127.0.0.1:1; location / { proxy_pass http://u; } }\n"
                    % method)
    r = subprocess.run([BIN, "-t", "-c", str(conf)], capture_output=True, text=True)
    assert r.returncode != 0
    assert "t.conf:4: proxy: server: balancing method does not support parameter \"backup\"" \
        in r.stderr
