"""Connection management: persistence (RFC 9112 9.3, 9.6), pipelining (RFC 9112 9.3.2),
requests arriving in pieces, the server's deadlines (header_timeout, keepalive_timeout,
send_timeout) and the Leader/Followers promise that slow clients cost memory, never threads.
"""
import os
import select
import socket
import time

import pytest

from conftest import (latency_bound, median, past_buffers, scaled, sparse_file, wait_closed,
                      wait_until)

FILE_BODY = b"0123456789abcdef\n"
GOOD = b"GET /f.txt HTTP/1.1\r\nHost: t\r\n\r\n"
SHORT_DEADLINES = "header_timeout 1s;\nkeepalive_timeout 1s;\nsend_timeout 1s;\n"


@pytest.fixture
def site(start_server, docroot):
    (docroot / "f.txt").write_bytes(FILE_BODY)
    return start_server(docroot)


def assert_file(resp, body=FILE_BODY):
    st, headers, got, head = resp
    assert st == 200, head
    assert got == body
    assert int(headers["content-length"]) == len(body), head


def connection_tokens(headers):
    return {t.strip().lower() for t in headers.get("connection", "").split(",") if t.strip()}


def timed_get(server, connect):
    """Seconds for one GET of f.txt on a new connection."""
    t0 = time.monotonic()
    c = connect(server)
    c.send(GOOD)
    assert_file(c.read_response(timeout=scaled(5)))
    c.close()
    return time.monotonic() - t0


def n_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def no_more_data(client, wait=0.3):
    """True if nothing more (neither bytes nor EOF) arrives within `wait` seconds."""
    if client.buf:
        return False
    r, _, _ = select.select([client.sock], [], [], wait)
    return not r


# ---------------------------------------------------------------- persistence


def test_http_1_1_connection_persists_by_default(site, connect):
    """RFC 9112 9.3: HTTP/1.1 defaults to persistent connections."""
    c = connect(site)
    for _ in range(3):
        c.send(GOOD)
        resp = c.read_response()
        assert_file(resp)
        assert "close" not in connection_tokens(resp[1]), resp[3]
    assert not c.is_closed(0.3)


@pytest.mark.parametrize("value", [b"close", b"Close", b"foo, close", b"close, bar"])
def test_connection_close_is_honoured(site, connect, value):
    """RFC 9112 9.6: a server receiving the "close" option (case-insensitive, anywhere in the
    list) MUST close after the response and SHOULD send "close" in it."""
    c = connect(site)
    c.send(b"GET /f.txt HTTP/1.1\r\nHost: t\r\nConnection: " + value + b"\r\n\r\n")
    resp = c.read_response()
    assert_file(resp)
    assert "close" in connection_tokens(resp[1]), resp[3]
    assert c.is_closed()


def test_no_request_is_processed_after_connection_close(site, connect):
    """RFC 9112 9.6: the server MUST NOT process any further requests received on a
    connection after the request that contained "close"."""
    c = connect(site)
    c.send(b"GET /f.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n" + b"GET /other HTTP/1.1\r\nHost: t\r\n\r\n")
    assert_file(c.read_response())
    assert c.buf == b""
    assert c.is_closed()


def test_http_1_0_closes_by_default(site, connect):
    """RFC 9112 9.3: an HTTP/1.0 request without keep-alive is not persistent."""
    c = connect(site)
    c.send(b"GET /f.txt HTTP/1.0\r\n\r\n")
    resp = c.read_response()
    assert_file(resp)
    assert "keep-alive" not in connection_tokens(resp[1]), resp[3]
    assert c.is_closed()


def test_http_1_0_keep_alive_is_kept_open(site, connect):
    """RFC 9112 9.3 and C.2.2 (HTTP/1.0 keep-alive): the response says Connection:
    keep-alive and the connection serves the next request."""
    c = connect(site)
    for _ in range(3):
        c.send(b"GET /f.txt HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        resp = c.read_response()
        assert_file(resp)
        assert "keep-alive" in connection_tokens(resp[1]), resp[3]
    assert not c.is_closed(0.3)


def test_error_response_keeps_connection_open(site, connect):
    """A 404 is a complete, well-framed response: the persistent connection goes on."""
    c = connect(site)
    c.send(b"GET /missing HTTP/1.1\r\nHost: t\r\n\r\n")
    assert c.read_response()[0] == 404
    c.send(GOOD)
    assert_file(c.read_response())


def test_keepalive_requests_limit_closes_after_nth_response(start_server, docroot, connect):
    """`keepalive_requests 3;`: the third response says Connection: close (RFC 9112 9.6) and
    the server closes."""
    (docroot / "f.txt").write_bytes(FILE_BODY)
    s = start_server(docroot, "keepalive_requests 3;\n")
    c = connect(s)
    for i in range(3):
        c.send(GOOD)
        resp = c.read_response()
        assert_file(resp)
        if i < 2:
            assert "close" not in connection_tokens(resp[1]), resp[3]
    assert "close" in connection_tokens(resp[1]), resp[3]
    assert c.is_closed()


def test_keepalive_requests_limit_with_pipelining(start_server, docroot, connect):
    """Five pipelined requests with `keepalive_requests 3;`: exactly three are answered."""
    (docroot / "f.txt").write_bytes(FILE_BODY)
    s = start_server(docroot, "keepalive_requests 3;\n")
    c = connect(s)
    c.send(GOOD * 5)
    for _ in range(3):
        assert_file(c.read_response())
    assert c.buf == b""
    assert c.is_closed()


def test_max_connections_refuses_with_503(start_server, docroot, connect):
    """`max_connections 5;`: a sixth concurrent connection gets 503 (RFC 9110 15.6.4); once
    one closes, new connections are served again."""
    (docroot / "f.txt").write_bytes(FILE_BODY)
    s = start_server(docroot, "max_connections 5;\n")
    held = [connect(s) for _ in range(5)]
    for c in held:
        c.send(GOOD)
        assert_file(c.read_response())
    extra = connect(s)
    try:
        extra.send(GOOD)
    except OSError:
        pass
    assert extra.read_response(timeout=3)[0] == 503
    held[0].close()
    deadline = time.monotonic() + 3
    while True:
        c = connect(s)
        try:
            c.send(GOOD)
            st = c.read_response(timeout=3)[0]
        except OSError:
            st = None
        if st == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert st == 200


# ---------------------------------------------------------------- pipelining and pieces


def test_fifty_pipelined_requests_answered_in_order(start_server, docroot, connect):
    """RFC 9112 9.3.2: a server MAY process pipelined requests in parallel but MUST send the
    responses in the same order the requests were received. GET, HEAD and 404 mixed."""
    for i in range(5):
        (docroot / ("p%d.txt" % i)).write_bytes(b"file %d " % i * (i + 1))
    s = start_server(docroot)
    reqs, expect = [], []
    for n in range(50):
        i = n % 5
        kind = n % 3
        if kind == 0:
            reqs.append(b"GET /p%d.txt HTTP/1.1\r\nHost: t\r\n\r\n" % i)
            expect.append(("GET", 200, b"file %d " % i * (i + 1)))
        elif kind == 1:
            reqs.append(b"HEAD /p%d.txt HTTP/1.1\r\nHost: t\r\n\r\n" % i)
            expect.append(("HEAD", 200, len(b"file %d " % i * (i + 1))))
        else:
            reqs.append(b"GET /missing-%d HTTP/1.1\r\nHost: t\r\n\r\n" % n)
            expect.append(("GET", 404, None))
    c = connect(s)
    c.send(b"".join(reqs))
    for n, (method, status, body) in enumerate(expect):
        st, h, got, head = c.read_response(head_only=(method == "HEAD"))
        assert st == status, (n, head)
        if method == "HEAD":
            assert int(h["content-length"]) == body, (n, head)
        elif status == 200:
            assert got == body, n
    assert c.buf == b""


def test_pipelined_requests_with_large_responses(start_server, docroot, connect):
    """Twenty pipelined GETs of a 256 KB file: the server keeps the order while each
    response has to wait for the client to drain the socket (RFC 9112 9.3.2)."""
    big = bytes(range(256)) * 1024
    (docroot / "big.bin").write_bytes(big)
    s = start_server(docroot)
    c = connect(s)
    c.send(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n" * 20)
    for _ in range(20):
        assert_file(c.read_response(), big)


def test_pipeline_larger_than_read_buffer(site, connect):
    """1000 pipelined requests (~73 KB, several times the 16k per-thread read buffer) in one
    write: every one is answered, in order (RFC 9112 9.3.2)."""
    reqs = b"".join(b"GET /f.txt?n=%05d HTTP/1.1\r\nHost: t\r\nUser-Agent: pipeline-test-%05d\r\n\r\n"
                    % (i, i) for i in range(1000))
    assert len(reqs) > 4 * 16384
    c = connect(site)
    c.send(reqs)
    for _ in range(1000):
        assert_file(c.read_response())
    assert no_more_data(c)


def test_pipelined_large_heads_straddle_buffer(site, connect):
    """Three pipelined requests with 7 KB heads each (each under max_header_size, together
    over the 16k buffer): the heads that straddle a buffer refill are parsed correctly."""
    reqs = [b"GET /f.txt HTTP/1.1\r\nHost: t\r\nX-Pad: " + bytes([65 + i]) * (7000 + 333 * i)
            + b"\r\n\r\n" for i in range(3)]
    c = connect(site)
    c.send(b"".join(reqs) + GOOD)
    for _ in range(4):
        assert_file(c.read_response())


def test_request_sent_one_byte_at_a_time(site, connect):
    """A request head (and its body) delivered one byte per TCP segment is parsed exactly as
    if it arrived at once (RFC 9112 2.1: a message is a byte stream, not a packet)."""
    c = connect(site)
    raw = b"GET /f.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello"
    for b in raw:
        c.send(bytes([b]))
        time.sleep(0.003)
    assert_file(c.read_response())


@pytest.mark.parametrize(
    "raw",
    [
        b"\r\nGET /f.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello",
        b"GET /f.txt HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"3;x=y\r\nhel\r\n2\r\nlo\r\n0\r\nT: v\r\n\r\n",
    ],
    ids=["content-length", "chunked"],
)
def test_request_split_at_every_boundary(site, connect, raw):
    """The same request sent in two writes, split at every byte position (inside CRLF pairs,
    the end of the head, chunk sizes, chunk data, trailers), is answered each time; all on
    one persistent connection, so an off-by-one in resuming a parse would desynchronise it."""
    c = connect(site)
    for i in range(1, len(raw)):
        c.send(raw[:i])
        time.sleep(0.004)
        c.send(raw[i:])
        assert_file(c.read_response())
    assert no_more_data(c)


def test_second_pipelined_request_arriving_late_is_answered(site, connect):
    """One complete request and the first half of the next in one write; the rest later."""
    c = connect(site)
    c.send(GOOD + GOOD[:10])
    assert_file(c.read_response())
    time.sleep(0.1)
    c.send(GOOD[10:])
    assert_file(c.read_response())


# ---------------------------------------------------------------- deadlines


@pytest.fixture
def short(start_server, docroot):
    (docroot / "f.txt").write_bytes(FILE_BODY)
    return start_server(docroot, SHORT_DEADLINES)


def test_stalled_request_head_gets_408_and_close(short, connect):
    """RFC 9110 15.5.9: 408 when the server did not receive a complete request in the time
    it was prepared to wait (header_timeout 1s, counted from the first byte); then close."""
    c = connect(short)
    c.send(b"GET /f.txt HTTP/1.1\r\nHost: t\r\n")
    t0 = time.monotonic()
    resp = c.read_response(timeout=scaled(5))
    elapsed = time.monotonic() - t0
    assert resp[0] == 408, resp[3]
    assert 0.9 <= elapsed <= 1 + scaled(2.5), elapsed
    assert c.is_closed()


def test_trickling_request_head_is_cut_at_header_timeout(short, connect):
    """A client sending one byte every 0.3 s (each byte "progress") never completes its head:
    header_timeout bounds the whole head, so it is cut ~1 s after its first byte (Slowloris)."""
    c = connect(short)
    raw = b"GET /f.txt HTTP/1.1\r\nHost: t\r\nX-Slow: " + b"a" * 100
    t0 = time.monotonic()
    cut = None
    for b in raw:
        try:
            c.send(bytes([b]))
        except OSError:
            cut = time.monotonic() - t0
            break
        r, _, _ = select.select([c.sock], [], [], 0.3)
        if r:
            if wait_closed(c, 1.0) is not None:
                cut = time.monotonic() - t0
                break
        if time.monotonic() - t0 > 6:
            break
    assert cut is not None, "a trickling client was held for more than 6 s"
    assert cut <= 1 + scaled(2.5), cut


def test_partial_head_within_header_timeout_is_served(start_server, docroot, connect):
    """A head sent in four pieces, a quarter of header_timeout apart, completes within
    header_timeout: served (a busy machine has the last quarter as its margin)."""
    (docroot / "f.txt").write_bytes(FILE_BODY)
    timeout = scaled(2)
    s = start_server(docroot, "header_timeout %dms;\n" % (timeout * 1000))
    c = connect(s)
    pieces = [b"GET /f.txt HT", b"TP/1.1\r\nHo", b"st: t\r\n", b"\r\n"]
    for p in pieces[:-1]:
        c.send(p)
        time.sleep(timeout / 4)
    c.send(pieces[-1])
    assert_file(c.read_response(timeout=scaled(5)))


def test_idle_keepalive_connection_closed_after_keepalive_timeout(short, connect):
    """keepalive_timeout 1s: an idle persistent connection is closed (RFC 9112 9.5 allows a
    server to close idle connections at any time) about 1 s after the last response."""
    c = connect(short)
    c.send(GOOD)
    assert_file(c.read_response())
    elapsed = wait_closed(c, scaled(5))
    assert elapsed is not None, "idle keep-alive connection not closed within %.0f s" % scaled(5)
    assert 0.9 <= elapsed <= scaled(3.5), elapsed


def test_keepalive_timer_restarts_after_each_request(start_server, docroot, connect):
    """Requests every half keepalive_timeout keep a connection alive for twice the
    timeout: the timer restarts with each response (half of it is the margin a busy machine
    may take between a response and the next request)."""
    (docroot / "f.txt").write_bytes(FILE_BODY)
    timeout = scaled(2)
    s = start_server(docroot, "keepalive_timeout %dms;\n" % (timeout * 1000))
    c = connect(s)
    t0 = time.monotonic()
    for _ in range(4):
        c.send(GOOD)
        assert_file(c.read_response())
        time.sleep(timeout / 2)
    c.send(GOOD)
    assert_file(c.read_response())
    assert time.monotonic() - t0 >= 2 * timeout


def test_silent_connection_is_closed(short, connect):
    """A connection that never sends a byte is not held forever: closed within the
    configured deadlines (1 s) plus slack."""
    c = connect(short)
    elapsed = wait_closed(c, scaled(5))
    assert elapsed is not None, "silent connection not closed within %.0f s" % scaled(5)
    assert 0.9 <= elapsed <= scaled(3.5), elapsed


def test_unread_large_response_dropped_after_send_timeout(start_server, docroot, connect):
    """send_timeout 1s: a client that requests a file larger than the server's send buffer
    can grow (32 MiB at least) and never reads is disconnected (it gets far less than the
    file), and the server keeps serving others."""
    size = past_buffers(at_least=32 << 20)
    sparse_file(docroot / "big.bin", size)
    (docroot / "f.txt").write_bytes(FILE_BODY)
    s = start_server(docroot, SHORT_DEADLINES)
    c = connect(s, rcvbuf=16384)
    c.send(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n")
    time.sleep(scaled(3.0))  # the sweep has dropped it by then, sanitizers too
    got = 0
    ended = False
    c.sock.settimeout(2)
    try:
        while True:
            b = c.sock.recv(1 << 20)
            if not b:
                ended = True
                break
            got += len(b)
    except ConnectionResetError:
        ended = True
    except socket.timeout:
        pass
    assert ended, "connection still open after send_timeout (got %d bytes)" % got
    assert got < size, "the whole file was delivered to a client that stopped reading"
    d = connect(s)
    d.send(GOOD)
    assert_file(d.read_response())


# ---------------------------------------------------------------- slow clients cost no threads


def _stall_head(s, connect, docroot):
    c = connect(s)
    c.send(b"GET /f.txt HTTP/1.1\r\nHost: t\r\nX-Half: ")
    return c


def _stall_body(s, connect, docroot):
    c = connect(s)
    c.send(b"GET /f.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 1000\r\n\r\nonly-a-little")
    return c


def _stall_chunked_body(s, connect, docroot):
    c = connect(s)
    c.send(b"GET /f.txt HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n100\r\nabc")
    return c


def _stall_silent(s, connect, docroot):
    return connect(s)


def _stall_not_reading(s, connect, docroot):
    c = connect(s, rcvbuf=16384)
    c.send(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n")
    return c


STALLS = {
    "half-head": _stall_head,
    "half-body": _stall_body,
    "half-chunked-body": _stall_chunked_body,
    "silent": _stall_silent,
    "not-reading-response": _stall_not_reading,
}


@pytest.mark.parametrize("stall", STALLS.values(), ids=STALLS.keys())
def test_stalled_clients_do_not_block_others(start_server, docroot, connect, stall):
    """50 stalled clients with 2 threads (-n 2): each stall is parked in the event loop, so a
    normal client is still served promptly, again and again (the Leader/Followers design:
    slow clients cost memory, never threads). Promptly: the median GET behind the stalls is
    within latency_bound() of the median GET measured before them, and none waits for a
    stall's deadline (20 s)."""
    (docroot / "f.txt").write_bytes(FILE_BODY)
    sparse_file(docroot / "big.bin", past_buffers(at_least=8 << 20))  # never all sent
    s = start_server(docroot, "header_timeout 20s;\nkeepalive_timeout 20s;\nsend_timeout 20s;\n",
                     args=("-n", "2"))
    fds_before = n_fds(s.proc.pid)
    idle = [timed_get(s, connect) for _ in range(10)]
    n = 50 if stall is not _stall_not_reading else 20
    stalled = [stall(s, connect, docroot) for _ in range(n)]
    # Each stall is in the server before the measure (silent ones stay in the kernel:
    # TCP_DEFER_ACCEPT hands over a connection only once it has sent something).
    held = 0 if stall is _stall_silent else n
    assert wait_until(lambda: n_fds(s.proc.pid) >= fds_before + held, scaled(5)), \
        "the stalled connections were not all accepted"
    loaded = [timed_get(s, connect) for _ in range(10)]
    print(f"\nGET median idle {median(idle) * 1000:.1f} ms, behind {n} stalls "
          f"{median(loaded) * 1000:.1f} ms (slowest {max(loaded) * 1000:.1f} ms)")
    assert median(loaded) <= latency_bound(idle), (idle, loaded)
    assert max(loaded) < scaled(5), loaded
    # Still nobody gave up on the stalled ones too early: they are all open.
    for st in stalled[:5]:
        assert not st.is_closed(0.01)
    for st in stalled:
        st.close()
