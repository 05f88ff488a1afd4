"""limit_req and limit_conn, against nginx: the same configuration run by nginx and by
lfhttpd (proxy_harness), the same requests sent to both, nginx's answers checked against
what the test states, then lfhttpd's against nginx's.

Rates are chosen so that no answer depends on how fast the machine is: 1r/m drains one
request a minute, so a burst sent at once passes exactly 1 + burst; where a delay is the
subject, 2r/s leaves half a second before a second request would pass again. Requests of
a burst go on their own connections, all sent before any answer is read.

What nginx does, and so lfhttpd: a request beyond rate and burst is refused with
limit_req_status (503 by default), and not counted; within the burst it passes, delayed
unless nodelay (test_pace_nginx.py checks the delays);
keys are counted apart ($binary_remote_addr: per client address); an empty key is not
limited (nor is a `return`, which comes before, in the rewrite phase); a block with its own limit_req has only its own; dry run refuses nothing and says
so in $limit_req_status; limit_conn counts the requests being answered per key.
"""
import socket
import subprocess
import time

import pytest

from conftest import BIN, Client, scaled, wait_until
from proxy_harness import Proxy, Upstream

SITE = """
limit_req_zone $binary_remote_addr zone=one:1m rate=1r/m;
limit_req_zone $binary_remote_addr zone=other:1m rate=1r/m;
limit_req_zone $binary_remote_addr zone=half:1m rate=2r/s;
limit_req_zone $http_x_key zone=bykey:1m rate=1r/m;
limit_req_zone $binary_remote_addr zone=dry:1m rate=1r/m;
limit_req_zone $binary_remote_addr zone=page:1m rate=1r/m;
limit_req_zone $binary_remote_addr zone=wide:1m rate=1r/m;
limit_req_zone $remote_addr zone=narrow:1m rate=1r/m;
limit_conn_zone $binary_remote_addr zone=addr:1m;
limit_conn_zone $binary_remote_addr zone=dryaddr:1m;
server {
    listen 127.0.0.1:{port0};
    root ROOT;
    add_header X-Limit-Req "$limit_req_status" always;
    add_header X-Limit-Conn "$limit_conn_status" always;
    location /burst/ {
        limit_req zone=one burst=3 nodelay;
        try_files /ok.txt =404;
    }
    location /delay/ {
        limit_req zone=half burst=1;
        try_files /ok.txt =404;
    }
    location /status/ {
        limit_req zone=other;
        limit_req_status 429;
        try_files /ok.txt =404;
    }
    location /key/ {
        limit_req zone=bykey;
        try_files /ok.txt =404;
    }
    location /dry/ {
        limit_req zone=dry;
        limit_req_dry_run on;
        try_files /ok.txt =404;
    }
    location /page/ {
        limit_req zone=page;
        error_page 503 /page/sorry.txt;
    }
    location /two/ {
        limit_req zone=wide burst=5 nodelay;
        limit_req zone=narrow burst=1 nodelay;
        try_files /ok.txt =404;
    }
    location /wide/ {
        limit_req zone=wide burst=5 nodelay;
        try_files /ok.txt =404;
    }
    location /conn/ {
        limit_conn addr 2;
        proxy_pass http://127.0.0.1:{up0};
    }
    location /dryconn/ {
        limit_conn dryaddr 1;
        limit_conn_dry_run on;
        proxy_pass http://127.0.0.1:{up0};
    }
}
server {
    listen 127.0.0.1:{port1};
    root ROOT;
    limit_req zone=one;
    add_header X-Limit-Req "$limit_req_status" always;
    location /inherits/ {
        try_files /ok.txt =404;
    }
    location /status-only/ {
        limit_req_status 429;
        try_files /ok.txt =404;
    }
    location /own/ {
        limit_req zone=other burst=2 nodelay;
        try_files /ok.txt =404;
    }
}
"""


@pytest.fixture
def both(tmp_path):
    """(nginx, lfhttpd) on SITE, each with fresh zones, with one upstream."""
    docroot = tmp_path / "www"
    docroot.mkdir()
    (docroot / "page").mkdir()
    (docroot / "page" / "sorry.txt").write_text("sorry\n")
    (docroot / "page" / "ok.txt").write_text("ok\n")
    (docroot / "ok.txt").write_text("ok\n")
    up = Upstream()
    started = []
    try:
        for kind in ("nginx", "lfhttpd"):
            started.append(Proxy(tmp_path / kind, SITE, up, docroot, kind=kind))
        yield tuple(started) + (up,)
    finally:
        for p in started:
            p.stop()
        up.stop()


def get(path, extra=""):
    return b"GET %s HTTP/1.1\r\nHost: t\r\n%s\r\n" % (path.encode(), extra.encode())


def connect(p, port_index=0, source="127.0.0.1"):
    s = socket.create_connection((p.host, p.ports[port_index]), timeout=scaled(10),
                                 source_address=(source, 0))
    return Client(s)


def burst(p, path, n, port_index=0, source="127.0.0.1", extra=""):
    """n requests for path, each on its own connection, all sent before any answer is
    read: their (status, X-Limit-Req) in the order sent."""
    clients = [connect(p, port_index, source) for _ in range(n)]
    try:
        for c in clients:
            c.send(get(path, extra))
        out = []
        for c in clients:
            status, headers, body, _ = c.read_response(timeout=scaled(10))
            out.append((status, headers.get("x-limit-req", ""), body))
        return out
    finally:
        for c in clients:
            c.close()


def statuses(answers):
    return sorted(a[0] for a in answers)


def test_burst_sent_at_once_passes_one_and_the_burst(both):
    theirs, ours = (burst(p, "/burst/x", 10) for p in both[:2])
    assert statuses(theirs) == [200] * 4 + [503] * 6, theirs
    assert statuses(ours) == statuses(theirs)


def test_limit_req_status_says_passed_then_rejected(both):
    for p in both[:2]:
        answers = burst(p, "/burst/x", 6)
        assert sorted(a[1] for a in answers) == ["PASSED"] * 4 + ["REJECTED"] * 2, (p.kind,
                                                                                   answers)


def test_request_within_burst_without_nodelay_is_marked_delayed(both):
    for p in both[:2]:
        answers = burst(p, "/delay/x", 3)
        assert sorted(a[1] for a in answers) == ["DELAYED", "PASSED", "REJECTED"], (p.kind,
                                                                                  answers)
        assert statuses(answers) == [200, 200, 503]


def test_limit_req_status_sets_the_refusal_status(both):
    theirs, ours = (burst(p, "/status/x", 3) for p in both[:2])
    assert statuses(theirs) == [200, 429, 429], theirs
    assert statuses(ours) == statuses(theirs)


def test_each_client_address_has_its_own_count(both):
    for p in both[:2]:
        first = burst(p, "/status/x", 2, source="127.0.0.1")
        second = burst(p, "/status/x", 2, source="127.0.0.2")
        assert statuses(first) == [200, 429], (p.kind, first)
        assert statuses(second) == [200, 429], (p.kind, second)


def test_requests_with_an_empty_key_are_not_limited(both):
    for p in both[:2]:
        answers = burst(p, "/key/x", 5)
        assert statuses(answers) == [200] * 5, (p.kind, answers)
        assert [a[1] for a in answers] == [""] * 5  # no limit applied: empty variable


def test_requests_with_the_same_header_key_share_a_count(both):
    for p in both[:2]:
        answers = burst(p, "/key/x", 3, extra="X-Key: k1\r\n")
        assert statuses(answers) == [200, 503, 503], (p.kind, answers)
        other = burst(p, "/key/x", 1, extra="X-Key: k2\r\n")
        assert statuses(other) == [200], (p.kind, other)


def test_dry_run_refuses_nothing_and_says_rejected_dry_run(both):
    for p in both[:2]:
        answers = burst(p, "/dry/x", 4)
        assert statuses(answers) == [200] * 4, (p.kind, answers)
        assert sorted(a[1] for a in answers) == ["PASSED"] + ["REJECTED_DRY_RUN"] * 3


def test_dry_run_refusal_is_logged_as_dry_run(both):
    for p in both[:2]:
        burst(p, "/dry/x", 2)
        assert wait_until(lambda: "limiting requests, dry run" in p.log(), scaled(5)), p.kind


def test_refusal_is_logged_with_its_zone(both):
    for p in both[:2]:
        burst(p, "/status/x", 2)
        assert wait_until(lambda: 'by zone "other"' in p.log(), scaled(5)), p.kind


def test_error_page_answers_a_refused_request_without_limiting_it_again(both):
    # The page is in the refusing location: its request is not counted again.
    theirs, ours = (burst(p, "/page/ok.txt", 2) for p in both[:2])
    assert sorted((a[0], a[2]) for a in theirs) == [(200, b"ok\n"), (503, b"sorry\n")], theirs
    assert sorted((a[0], a[2]) for a in ours) == sorted((a[0], a[2]) for a in theirs)


def test_several_limit_req_in_a_block_all_apply(both):
    theirs, ours = (burst(p, "/two/x", 5) for p in both[:2])
    assert statuses(theirs) == [200, 200, 503, 503, 503], theirs
    assert statuses(ours) == statuses(theirs)


def test_request_refused_by_one_limit_counts_in_none(both):
    # /two/ passes 2 (narrow's burst), refuses 3: wide counted the 2 only, so /wide/
    # (the same zone, burst 5) has 4 left of its 6.
    for p in both[:2]:
        burst(p, "/two/x", 5)
        answers = burst(p, "/wide/x", 6)
        assert statuses(answers) == [200] * 4 + [503] * 2, (p.kind, answers)


def test_location_without_limit_req_inherits_the_servers(both):
    theirs, ours = (burst(p, "/inherits/x", 3, port_index=1) for p in both[:2])
    assert statuses(theirs) == [200, 503, 503], theirs
    assert statuses(ours) == statuses(theirs)


def test_location_with_only_limit_req_status_keeps_the_servers_limit_req(both):
    theirs, ours = (burst(p, "/status-only/x", 2, port_index=1) for p in both[:2])
    assert statuses(theirs) == [200, 429], theirs
    assert statuses(ours) == statuses(theirs)


def test_location_with_its_own_limit_req_replaces_the_servers(both):
    theirs, ours = (burst(p, "/own/x", 5, port_index=1) for p in both[:2])
    assert statuses(theirs) == [200] * 3 + [503] * 2, theirs
    assert statuses(ours) == statuses(theirs)


def slow_requests(p, up, path, n):
    """n requests for a slow upstream answer, sent and seen by the upstream (or refused):
    their clients, whose answers are still to be read."""
    clients = []
    for _ in range(n):
        c = connect(p)
        c.send(get(path))
        clients.append(c)
    return clients


def test_limit_conn_refuses_a_request_beyond_those_in_progress(both):
    for p in both[:2]:
        up = both[2]
        up.clear()
        held = slow_requests(p, up, "/conn/_slow?head=2", 2)
        try:
            assert wait_until(lambda: len(up.requests()) == 2, scaled(5)), p.kind
            c = connect(p)
            c.send(get("/conn/x"))
            status, headers, _, _ = c.read_response(timeout=scaled(10))
            c.close()
            assert (status, headers.get("x-limit-conn")) == (503, "REJECTED"), p.kind
            for h in held:
                status, headers, _, _ = h.read_response(timeout=scaled(10))
                assert (status, headers.get("x-limit-conn")) == (200, "PASSED"), p.kind
        finally:
            for h in held:
                h.close()


def test_limit_conn_lets_go_when_the_answer_ends(both):
    for p in both[:2]:
        up = both[2]
        held = slow_requests(p, up, "/conn/_slow?head=0.3", 2)
        for h in held:
            assert h.read_response(timeout=scaled(10))[0] == 200
            h.close()
        answers = [connect(p) for _ in range(2)]
        for c in answers:
            c.send(get("/conn/x"))
        assert [c.read_response(timeout=scaled(10))[0] for c in answers] == [200, 200], p.kind
        for c in answers:
            c.close()


def test_limit_conn_dry_run_refuses_nothing(both):
    for p in both[:2]:
        up = both[2]
        up.clear()
        held = slow_requests(p, up, "/dryconn/_slow?head=1", 1)
        try:
            assert wait_until(lambda: len(up.requests()) == 1, scaled(5)), p.kind
            c = connect(p)
            c.send(get("/dryconn/x"))
            status, headers, _, _ = c.read_response(timeout=scaled(10))
            c.close()
            assert (status, headers.get("x-limit-conn")) == (200, "REJECTED_DRY_RUN"), p.kind
        finally:
            for h in held:
                h.close()


# --- lfhttpd's own: configuration errors and the access log ------------------------------


def check(tmp_path, text):
    conf = tmp_path / "lfhttpd.conf"
    conf.write_text(f'listen 127.0.0.1:0;\nroot "{tmp_path}";\n' + text)
    r = subprocess.run([BIN, "-t", "-c", str(conf)], capture_output=True, text=True,
                       timeout=scaled(20))
    return r.returncode, r.stdout + r.stderr


def test_limit_req_with_an_unknown_zone_is_an_error_naming_its_line(tmp_path):
    rc, out = check(tmp_path, "server {\n    limit_req zone=nowhere;\n}\n")
    assert rc != 0
    assert 'lfhttpd.conf:4: limit: limit_req: unknown limit_req_zone "nowhere"' in out, out


def test_limit_req_zone_without_rate_is_an_error_naming_its_line(tmp_path):
    rc, out = check(tmp_path, "limit_req_zone $binary_remote_addr zone=z:1m;\n")
    assert rc != 0
    assert "lfhttpd.conf:3:" in out and "no rate=" in out, out


def test_limit_req_status_is_written_to_the_access_log(start_server, docroot, tmp_path):
    (docroot / "index.html").write_text("hello\n")
    log = tmp_path / "limits.log"
    s = start_server(docroot, conf_extra=(
        "limit_req_zone $binary_remote_addr zone=one:1m rate=1r/m;\n"
        "log_format lim '$status $limit_req_status';\n"
        f'access_log "{log}" lim;\n'
        "limit_req zone=one;\n"))
    for _ in range(2):
        with socket.create_connection((s.host, s.port), timeout=scaled(10)) as sock:
            c = Client(sock)
            c.send(b"GET /index.html HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            c.read_response(timeout=scaled(10))
    assert wait_until(lambda: log.exists() and log.read_text().count("\n") == 2, scaled(5))
    assert log.read_text().splitlines() == ["200 PASSED", "503 REJECTED"]


def test_reload_starts_the_zones_afresh(tmp_path):
    # lfhttpd's own: nginx keeps a zone whose definition a reload leaves unchanged.
    docroot = tmp_path / "www"
    docroot.mkdir()
    (docroot / "ok.txt").write_text("ok\n")
    text = SITE.split("server {")[0] + ("server {\n    listen 127.0.0.1:{port0};\n    root ROOT;\n"
                                        "    limit_req zone=one;\n}\n")
    p = Proxy(tmp_path / "lfhttpd", text, None, docroot, kind="lfhttpd")
    try:
        assert statuses(burst(p, "/ok.txt", 2)) == [200, 503]
        p.reload(text)
        assert statuses(burst(p, "/ok.txt", 2)) == [200, 503]
    finally:
        p.stop()
