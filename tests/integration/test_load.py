"""Load: many concurrent clients, with and without keep-alive, must all be answered 2xx.

ab (apache2-utils) and wrk drive the server; a Python test adds 200 concurrent keep-alive
connections that check every body byte. Any failed or non-2xx request is a server bug.
"""
import re
import shutil
import subprocess
import threading

import pytest

SMALL = b"<html><body>" + b"lfhttpd load test " * 6 + b"</body></html>\n"


@pytest.fixture
def site(start_server, docroot):
    (docroot / "small.html").write_bytes(SMALL)
    return start_server(docroot)


def run_tool(cmd, timeout=60):
    if shutil.which(cmd[0]) is None:
        pytest.fail("%s is not installed" % cmd[0])
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
    out = p.stdout.decode("latin-1")
    assert p.returncode == 0, out
    return out


def check_ab(out, n):
    assert re.search(r"^Complete requests:\s+%d$" % n, out, re.M), out
    assert re.search(r"^Failed requests:\s+0$", out, re.M), out
    assert "Non-2xx responses" not in out, out


def test_ab_keepalive_20000_requests_100_concurrent(site):
    """ab -k (HTTP/1.0 keep-alive, RFC 9112 C.2.2): 20000 requests, 100 at a time, 0 failed."""
    out = run_tool(["ab", "-q", "-n", "20000", "-c", "100", "-k", site.url + "/small.html"])
    check_ab(out, 20000)
    assert re.search(r"^Keep-Alive requests:\s+\d+$", out, re.M), out
    assert int(re.search(r"^Keep-Alive requests:\s+(\d+)$", out, re.M).group(1)) > 0


def test_ab_without_keepalive_20000_requests_100_concurrent(site):
    """ab without -k: one connection per request (HTTP/1.0 closes by default, RFC 9112 9.3)."""
    out = run_tool(["ab", "-q", "-n", "20000", "-c", "100", site.url + "/small.html"])
    check_ab(out, 20000)


def test_wrk_100_connections_no_errors(site):
    """wrk -t2 -c100 -d5s (HTTP/1.1 keep-alive): no socket errors, only 2xx."""
    out = run_tool(["wrk", "-t2", "-c100", "-d5s", site.url + "/small.html"], timeout=30)
    m = re.search(r"(\d+) requests in", out)
    assert m and int(m.group(1)) > 0, out
    assert "Socket errors" not in out, out
    assert "Non-2xx or 3xx responses" not in out, out


def test_200_concurrent_keepalive_clients_from_threads(site):
    """200 connections open at once (a barrier holds them until all are connected), each
    doing 5 keep-alive requests and checking the whole response."""
    n_clients, n_requests = 200, 5
    barrier = threading.Barrier(n_clients, timeout=30)
    errors = []
    ok = [0]
    lock = threading.Lock()

    def worker(i):
        c = None
        try:
            c = site.connect(timeout=15)
            barrier.wait()
            for j in range(n_requests):
                last = j == n_requests - 1
                c.send(b"GET /small.html?c=%d&r=%d HTTP/1.1\r\nHost: t\r\n%s\r\n"
                       % (i, j, b"Connection: close\r\n" if last else b""))
                st, h, body, head = c.read_response(timeout=15)
                assert st == 200, head
                assert body == SMALL
                with lock:
                    ok[0] += 1
            assert c.is_closed(5)
        except Exception as e:  # collected and reported below
            barrier.abort()
            errors.append("client %d: %r" % (i, e))
        finally:
            if c is not None:
                c.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n_clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors[:10]
    assert ok[0] == n_clients * n_requests
