"""Waiting for a time, against nginx: limit_req's delay and limit_rate's pacing. The same
configuration run by nginx and by lfhttpd (proxy_harness), the same requests sent to both.

Only lower bounds of time are asserted (a loaded machine makes everything slower, never
faster), and lfhttpd's times are compared with nginx's within a generous factor: what is
checked is that the wait happens, not how punctual the machine is.

- limit_req zone=z burst=5 at 2r/s: six requests sent at once all pass; nginx answers the
  first at once and delays the others by excess / rate, so the last comes after ~2.5 s.
- limit_rate 100k on a 300 KiB file: ~100 KiB a second, so three seconds; limit_rate_after
  200k sends the first 200 KiB at once; `set $limit_rate` does as the directive.
- A client that closes while its request is delayed costs the server nothing: it goes on
  answering (and the ASan build finds no leak).
"""
import hashlib
import os
import socket
import time

import pytest

from conftest import Client, scaled
from proxy_harness import Proxy
from tls_harness import Pki, tls_client, tls_conf

SITE = """
limit_req_zone $binary_remote_addr zone=half:1m rate=2r/s;
limit_req_zone $binary_remote_addr zone=partly:1m rate=2r/s;
limit_req_zone $binary_remote_addr zone=timed:1m rate=2r/s;
server {
    listen 127.0.0.1:{port0};
    root ROOT;
    add_header X-Limit-Req "$limit_req_status" always;
    location /delay/ {
        limit_req zone=half burst=5;
        try_files /ok.txt =404;
    }
    location /partly/ {
        limit_req zone=partly burst=5 delay=3;
        try_files /ok.txt =404;
    }
    location /timed/ {
        limit_req zone=timed burst=1;
        add_header X-Time $request_time;
        try_files /ok.txt =404;
    }
    location /rate/ {
        limit_rate 100k;
        alias ROOT/;
    }
    location /after/ {
        limit_rate 100k;
        limit_rate_after 200k;
        alias ROOT/;
    }
    location /var/ {
        set $limit_rate 100k;
        alias ROOT/;
    }
    location /ifrate/ {
        alias ROOT/;
        if ($arg_slow) {
            limit_rate 100k;
        }
    }
    location /free/ {
        alias ROOT/;
    }
}
"""

BIG = 300 * 1024


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    """(nginx, lfhttpd) on SITE."""
    tmp_path = tmp_path_factory.mktemp("pace")
    docroot = tmp_path / "www"
    docroot.mkdir()
    (docroot / "ok.txt").write_text("ok\n")
    (docroot / "big.bin").write_bytes(os.urandom(BIG))
    started = []
    try:
        for kind in ("nginx", "lfhttpd"):
            started.append(Proxy(tmp_path / kind, SITE, None, docroot, kind=kind))
        yield tuple(started) + (docroot,)
    finally:
        for p in started:
            p.stop()


def connect(p, source):
    s = socket.create_connection((p.host, p.ports[0]), timeout=scaled(10),
                                 source_address=(source, 0))
    return Client(s)


def get(path):
    return b"GET %s HTTP/1.1\r\nHost: t\r\n\r\n" % path.encode()


def burst_times(p, path, n, source):
    """n requests on their own connections, sent at once: (status, X-Limit-Req, seconds
    from the sending to the answer) of each, in the order sent."""
    clients = [connect(p, source) for _ in range(n)]
    try:
        t0 = time.monotonic()
        for c in clients:
            c.send(get(path))
        out = []
        for c in clients:
            status, headers, _, _ = c.read_response(timeout=scaled(20))
            out.append((status, headers.get("x-limit-req", ""), time.monotonic() - t0))
        return out
    finally:
        for c in clients:
            c.close()


def fetch_timed(p, path):
    c = connect(p, "127.0.0.1")
    try:
        t0 = time.monotonic()
        c.send(get(path))
        status, _, body, _ = c.read_response(timeout=scaled(30))
        return status, body, time.monotonic() - t0
    finally:
        c.close()


def test_requests_within_the_burst_wait_their_turn_at_the_rate(both):
    # Each server gets its own client address, so that the two zones start empty.
    theirs = burst_times(both[0], "/delay/x", 6, "127.0.0.2")
    ours = burst_times(both[1], "/delay/x", 6, "127.0.0.3")
    for answers in (theirs, ours):
        assert [a[0] for a in answers] == [200] * 6, answers
        assert sorted(a[1] for a in answers) == ["DELAYED"] * 5 + ["PASSED"], answers
        # The fifth excess request waits 5 / 2r/s = 2.5 s: at least 2 s, whatever the load.
        assert max(a[2] for a in answers) >= 2.0, answers
    assert max(a[2] for a in ours) <= 2 * max(a[2] for a in theirs) + 1, (theirs, ours)


def test_delay_n_answers_that_many_excess_requests_at_once(both):
    theirs = burst_times(both[0], "/partly/x", 6, "127.0.0.4")
    ours = burst_times(both[1], "/partly/x", 6, "127.0.0.5")
    for answers in (theirs, ours):
        assert [a[0] for a in answers] == [200] * 6, answers
        # 1 + delay=3 pass at once; the 5th and 6th wait (4 - 3) / 2 and (5 - 3) / 2 s.
        assert sorted(a[1] for a in answers) == ["DELAYED"] * 2 + ["PASSED"] * 4, answers
        assert max(a[2] for a in answers) >= 0.8, answers
    assert max(a[2] for a in ours) <= 2 * max(a[2] for a in theirs) + 1, (theirs, ours)


def test_request_time_of_a_delayed_request_counts_the_delay(both):
    for p, source in zip(both[:2], ("127.0.0.7", "127.0.0.8")):
        clients = [connect(p, source) for _ in range(2)]
        try:
            for c in clients:
                c.send(get("/timed/x"))
            # whichever request a thread takes first passes; the other waits
            times = sorted(float(c.read_response(timeout=scaled(10))[1]["x-time"])
                           for c in clients)
        finally:
            for c in clients:
                c.close()
        # The second waits 1 / 2r/s = 0.5 s, which its $request_time includes.
        assert times[0] < 0.4 and times[1] >= 0.4, (p.kind, times)


def check_paced(both, path, at_least):
    docroot = both[2]
    want = hashlib.sha256((docroot / "big.bin").read_bytes()).hexdigest()
    times = []
    for p in both[:2]:
        status, body, took = fetch_timed(p, path)
        assert status == 200, p.kind
        assert hashlib.sha256(body).hexdigest() == want, p.kind
        assert took >= at_least, (p.kind, took)
        times.append(took)
    assert times[1] <= 2 * times[0] + 1, times


def test_limit_rate_paces_a_file(both):
    # 300 KiB at 100 KiB/s: the budget of the first three seconds, so nearly 3 s.
    check_paced(both, "/rate/big.bin", 1.8)


def test_limit_rate_after_sends_its_bytes_at_full_speed_first(both):
    # 200 KiB at once, the last 100 KiB in the next second: about 1 s, not 3.
    docroot = both[2]
    times = []
    for p in both[:2]:
        status, body, took = fetch_timed(p, "/after/big.bin")
        assert status == 200 and body == (docroot / "big.bin").read_bytes(), p.kind
        assert 0.8 <= took, (p.kind, took)
        times.append(took)
    assert times[1] <= 2 * times[0] + 1, times
    assert times[1] < 2.5, times  # not paced from the first byte


def test_set_limit_rate_paces_as_the_directive(both):
    check_paced(both, "/var/big.bin", 1.8)


def test_limit_rate_in_an_if_paces_only_the_requests_it_matches(both):
    check_paced(both, "/ifrate/big.bin?slow=1", 1.8)
    for p in both[:2]:
        status, body, took = fetch_timed(p, "/ifrate/big.bin")
        assert status == 200 and len(body) == BIG
        assert took < 1.5, (p.kind, took)


def test_a_response_without_limit_rate_is_not_paced(both):
    for p in both[:2]:
        status, body, took = fetch_timed(p, "/free/big.bin")
        assert status == 200 and len(body) == BIG
        assert took < 1.5, (p.kind, took)


def open_fds(pid):
    """The process's open sockets (its listeners and connections; files it opens and
    caches meanwhile are not what the test counts)."""
    n = 0
    for f in os.listdir("/proc/%d/fd" % pid):
        try:
            n += os.readlink("/proc/%d/fd/%s" % (pid, f)).startswith("socket:")
        except OSError:
            pass
    return n


def accept_queue(port):
    """Connections the kernel holds for the listeners on port, not yet accepted (a LISTEN
    row's rx_queue in /proc/net/tcp)."""
    n = 0
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].split(":")[1], 16) == port:
                n += int(fields[4].split(":")[1], 16)
    return n


def test_a_client_that_closes_while_delayed_is_let_go_when_it_wakes(both):
    ours = both[1]
    # Fill the burst so that the next requests are delayed, then leave before the answer.
    first = connect(ours, "127.0.0.6")
    first.send(get("/delay/x"))
    assert first.read_response(timeout=scaled(10))[0] == 200
    first.close()
    time.sleep(0.2)
    before = open_fds(ours.pid)
    for _ in range(3):
        c = connect(ours, "127.0.0.6")
        c.send(get("/delay/x"))
        c.close()
    # Counted from when the server has taken all three: until then the kernel holds them
    # (a request and its close arrive together), and none is the server's yet.
    deadline = time.monotonic() + scaled(10)
    while accept_queue(ours.ports[0]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert accept_queue(ours.ports[0]) == 0
    # Delayed 0.5, 1 and 1.5 s: each wakes, finds its client gone and closes.
    deadline = time.monotonic() + scaled(10)
    while open_fds(ours.pid) > before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert open_fds(ours.pid) <= before
    status, body, _ = fetch_timed(ours, "/free/ok.txt")
    assert status == 200 and body == b"ok\n"


def test_limit_rate_paces_a_file_over_tls(start_server, tmp_path):
    # nginx's own answer is the test above: this is lfhttpd's TLS path (records whole).
    docroot = tmp_path / "tlsroot"
    docroot.mkdir()
    data = os.urandom(BIG)
    (docroot / "big.bin").write_bytes(data)
    pki = Pki(tmp_path / "pki")
    s = start_server(docroot, conf=tls_conf(docroot, pki.issue("example.org"),
                                            extra="limit_rate 100k;\n"))
    c = tls_client(s.port, sni="example.org")
    try:
        t0 = time.monotonic()
        c.send(b"GET /big.bin HTTP/1.1\r\nHost: example.org\r\n\r\n")
        status, _, body, _ = c.read_response(timeout=scaled(30))
        took = time.monotonic() - t0
    finally:
        c.close()
    assert status == 200 and body == data
    assert took >= 1.8, took  # 100 KiB a second, a 16 KiB record at most ahead of it
