"""nginx's $upstream_* variables, against nginx: one configuration run by nginx and by
lfhttpd in front of one test upstream (upstream_app.py), the same requests sent to each,
and the access-log lines (and an add_header value) compared where they are deterministic
(addresses, statuses, lengths, a field of the answer); the times, which are not, must have
nginx's form ("0.004", "-" for a phase not reached)."""
import re

from conftest import scaled, wait_until
from proxy_harness import Proxy, Upstream  # noqa: F401
from test_proxy import request

FIELDS = ("addr", "status", "response_length", "x_a", "cache", "response_time",
          "connect_time", "header_time", "bytes_received", "bytes_sent")

CONF = """
log_format up '$upstream_addr|$upstream_status|$upstream_response_length|'
              '$upstream_http_x_a|$upstream_cache_status|$upstream_response_time|'
              '$upstream_connect_time|$upstream_header_time|$upstream_bytes_received|'
              '$upstream_bytes_sent';
upstream app { server 127.0.0.1:{up0}; }
upstream two { server 127.0.0.1:{dead0}; server 127.0.0.1:{up0}; }
server {
    listen 127.0.0.1:{port0};
    access_log LOG up;
    location / { proxy_pass http://app; }
    location /retry/ { proxy_pass http://two; }
    location /hdr/ {
        proxy_pass http://app;
        add_header X-Up "$upstream_addr $upstream_status $upstream_http_x_a";
        add_header X-Up-Time "$upstream_response_time $upstream_header_time";
    }
    location /static/ { root ROOT; }
}
"""

TIME = re.compile(r"^(\d+\.\d{3}|-)(, (\d+\.\d{3}|-))*$")


def both(tmp_path, docroot):
    """The same configuration run by nginx and by lfhttpd, before one upstream: (upstream,
    {kind: (proxy, its log file)})."""
    u = Upstream()
    (docroot / "static").mkdir()
    (docroot / "static" / "f.txt").write_bytes(b"0123456789")
    runs = {}
    for kind in ("nginx", "lfhttpd"):
        log = tmp_path / f"{kind}.log"
        runs[kind] = (Proxy(tmp_path / kind, CONF.replace("LOG", str(log)), u, docroot,
                            kind=kind), log)
    return u, runs


def stop(u, runs):
    for p, _ in runs.values():
        p.stop()
    u.stop()


def lines_of(p, log, n):
    """The log's lines as fields, the port of the proxy's own dead server written DEAD."""
    def read():
        return log.read_text().splitlines() if log.exists() else []
    wait_until(lambda: len(read()) >= n, scaled(5))
    return [dict(zip(FIELDS, line.replace(f":{p.dead[0]}", ":DEAD").split("|")))
            for line in read()]


def run(tmp_path, docroot, paths):
    """Each path asked of nginx and of lfhttpd in turn: {kind: [line's fields...]}, and
    {kind: [(status, headers)...]}."""
    u, runs = both(tmp_path, docroot)
    try:
        seen, answers = {}, {}
        for kind, (p, log) in runs.items():
            answers[kind] = []
            for path in paths:
                status, headers, _, _ = request(p, path)
                answers[kind].append((status, headers))
            seen[kind] = lines_of(p, log, len(paths))
        return u, seen, answers
    finally:
        stop(u, runs)


def test_one_try_logs_nginxs_addr_status_length_and_field(tmp_path, docroot):
    u, seen, _ = run(tmp_path, docroot, ["/_slow?head=0&size=10&h=X-A:one"])
    for kind in ("nginx", "lfhttpd"):
        line = seen[kind][0]
        assert line["addr"] == f"127.0.0.1:{u.ports[0]}", (kind, line)
    keys = ("addr", "status", "response_length", "x_a", "cache")
    assert [{k: line[k] for k in keys} for line in seen["lfhttpd"]] == \
        [{k: line[k] for k in keys} for line in seen["nginx"]]
    assert seen["lfhttpd"][0]["status"] == "200" and seen["lfhttpd"][0]["x_a"] == "one"


def test_upstream_status_is_the_upstreams_not_the_clients(tmp_path, docroot):
    _, seen, _ = run(tmp_path, docroot, ["/x?status=404", "/y?status=503"])
    assert [line["status"] for line in seen["lfhttpd"]] == \
        [line["status"] for line in seen["nginx"]] == ["404", "503"]


def test_a_retried_request_lists_every_try_joined_with_commas(tmp_path, docroot):
    """The first server refuses the connection: 502 for it, then the second's 200, and
    its connect and header times "-", as nginx."""
    u, seen, _ = run(tmp_path, docroot, ["/retry/_slow?head=0&size=10"])
    ours, theirs = seen["lfhttpd"][0], seen["nginx"][0]
    for k in ("addr", "status", "response_length", "cache"):
        assert ours[k] == theirs[k], (k, ours, theirs)
    assert ours["status"] == "502, 200" and ours["response_length"] == "0, 10"
    assert ours["connect_time"].startswith("-, ") and ours["header_time"].startswith("-, ")
    assert ours["bytes_received"].startswith("0, ") and ours["bytes_sent"].startswith("0, ")


def test_times_have_nginxs_form(tmp_path, docroot):
    _, seen, _ = run(tmp_path, docroot, ["/_slow?head=0.05&size=10",
                                         "/retry/_slow?head=0&size=10"])
    for kind in ("nginx", "lfhttpd"):
        for line in seen[kind]:
            for k in ("response_time", "connect_time", "header_time"):
                assert TIME.match(line[k]), (kind, k, line)
    # the head waited 50 ms: the header time says so
    assert float(seen["lfhttpd"][0]["header_time"]) >= 0.05


def test_counts_are_numbers_and_received_holds_the_body(tmp_path, docroot):
    _, seen, _ = run(tmp_path, docroot, ["/_slow?head=0&size=10"])
    for kind in ("nginx", "lfhttpd"):
        line = seen[kind][0]
        assert int(line["bytes_received"]) > int(line["response_length"]) == 10, (kind, line)
        assert int(line["bytes_sent"]) > 50, (kind, line)


def test_a_request_not_proxied_logs_dashes(tmp_path, docroot):
    _, seen, _ = run(tmp_path, docroot, ["/static/f.txt"])
    assert seen["lfhttpd"] == seen["nginx"]
    assert set(seen["lfhttpd"][0].values()) == {"-"}


def test_add_header_sees_the_upstream_as_nginx(tmp_path, docroot):
    """At the head, the try has a status and a head but no end: the response time is "-"
    for both."""
    u, _, answers = run(tmp_path, docroot, ["/hdr/_slow?head=0&size=10&h=X-A:two"])
    for kind, a in answers.items():
        up = a[0][1]
        assert up["x-up"] == f"127.0.0.1:{u.ports[0]} 200 two", (kind, up)
        rt, ht = up["x-up-time"].split()
        assert rt == "-" and TIME.match(ht), (kind, up)
