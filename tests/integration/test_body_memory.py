"""What request bodies may cost the server: memory held, and time.

`max_body_memory` bounds the bytes of every body being collected for a handler (echo,
request, CGI) at once, server-wide; a body that would go past it is answered 503 with
Retry-After before it is read. The count is exact: whatever way a collection ends
(answered, malformed, reset, timed out, across a reload), a body of exactly the bound fits
again afterwards, and one byte more does not.

A body must keep coming: `client_body_timeout` between two reads, and on average
`client_body_min_rate` bytes a second (each byte extends its deadline, as Apache's
RequestReadTimeout MinRate): a trickle is cut off (408 if it was not answered yet), an
honest slow body is served. The request head must arrive whole within `header_timeout`
of its first byte, however it trickles.
"""
import selectors
import signal
import socket
import struct
import threading
import time

import pytest

from conftest import BY_DESIGN, SANITIZED, scaled, wait_closed, wait_until

MIB = 1 << 20


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


class PeakRss:
    """Samples a process's VmRSS every few milliseconds while in a with block."""

    def __init__(self, pid):
        self.pid, self.peak, self._stop = pid, 0.0, threading.Event()

    def __enter__(self):
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_mb(self.pid))
            time.sleep(0.003)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def post_head(length, path="/echo", close=True):
    return (b"POST %s HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n%s\r\n"
            % (path.encode(), length, b"Connection: close\r\n" if close else b""))


def status_of(data):
    return int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.1 ") else None


def reset(sock):
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


# --- memory ---------------------------------------------------------------------------

FLOOD_BOUND_MB = 32
FLOOD_MARGIN_MB = 48  # thread stacks touched, echoes parked for a moment, allocator slack


@pytest.fixture
def flood_server(start_server, docroot):
    return start_server(docroot, conf_extra=f"handler /echo echo;\nmax_body_size 2m;\n"
                                            f"max_body_memory {FLOOD_BOUND_MB}m;\n"
                                            "access_log off;\n")


class FloodClient:
    """One of many connections, driven by a selector: sends its request (all but the last
    byte, then the last when told), keeps the first bytes of what comes back and counts
    the rest."""

    def __init__(self, addr, out):
        self.sock = socket.socket()
        self.sock.setblocking(False)
        self.sock.connect_ex(addr)
        self.out, self.sent, self.first, self.got, self.done = out, 0, b"", 0, False

    def pump(self, limit):
        while self.sent < limit:
            try:
                n = self.sock.send(self.out[self.sent:limit])
            except BlockingIOError:
                return
            except OSError:  # the server answered and closed: nothing more to send
                self.sent = len(self.out)
                return
            self.sent += n

    def read(self):
        try:
            data = self.sock.recv(1 << 20)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.done = True
            return
        if len(self.first) < 256:
            self.first += data[: 256 - len(self.first)]
        self.got += len(data)


def run_flood(clients, limit_of, deadline):
    sel = selectors.DefaultSelector()
    for c in clients:
        sel.register(c.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, c)
    while time.monotonic() < deadline:
        busy = False
        for key, ev in sel.select(timeout=0.2):
            c = key.data
            if ev & selectors.EVENT_READ:
                c.read()
            if ev & selectors.EVENT_WRITE:
                c.pump(limit_of(c))
            if c.done or c.sent >= limit_of(c):
                sel.modify(c.sock, selectors.EVENT_READ, c) if not c.done else sel.unregister(
                    c.sock)
        busy = any(not c.done and c.sent < limit_of(c) for c in clients)
        if not busy:
            break
    return sel


@pytest.mark.skipif(SANITIZED, reason="a sanitizer's allocator keeps freed memory in "
                    "quarantine, so resident memory says nothing of the bound " + BY_DESIGN)
def test_a_thousand_one_mib_bodies_keep_resident_memory_under_the_bound(flood_server):
    """1,000 connections each send all but the last byte of a 1 MiB body to /echo, then
    the last bytes: without a bound the server would hold 1,000 MiB at once."""
    pid, addr = flood_server.proc.pid, (flood_server.host, flood_server.port)
    body = bytes(range(256)) * (MIB // 256)
    request = post_head(len(body)) + body
    base = rss_mb(pid)
    deadline = time.monotonic() + scaled(25)
    with PeakRss(pid) as rss:
        clients = [FloodClient(addr, request) for _ in range(1000)]
        sel = run_flood(clients, lambda c: len(c.out) - 1, deadline)
        sel.close()
        sel = run_flood(clients, lambda c: len(c.out), deadline)
        while time.monotonic() < deadline and not all(c.done for c in clients):
            for key, _ in sel.select(timeout=0.2):
                key.data.read()
                if key.data.done:
                    sel.unregister(key.data.sock)
        sel.close()
    for c in clients:
        c.sock.close()
    statuses = [status_of(c.first) for c in clients]
    assert all(c.done for c in clients), "some responses never ended"
    assert set(statuses) <= {200, 503}, sorted(set(statuses), key=str)
    served = [c for c, s in zip(clients, statuses) if s == 200]
    assert len(served) >= FLOOD_BOUND_MB // 2, f"{len(served)} bodies echoed"
    assert all(c.got > len(body) for c in served)
    assert all(b"Retry-After: 1\r\n" in c.first for c, s in zip(clients, statuses)
               if s == 503)
    print(f"RSS {base:.1f} MB before, peak {rss.peak:.1f} MB; {len(served)} echoed, "
          f"{statuses.count(503)} refused")
    assert rss.peak < base + FLOOD_BOUND_MB + FLOOD_MARGIN_MB, (base, rss.peak)


BOUND = 4 * MIB


@pytest.fixture
def bounded(start_server, docroot):
    (docroot / "f.txt").write_bytes(b"file\n")
    return start_server(docroot, conf_extra="handler /echo echo;\nmax_body_size 8m;\n"
                                             "max_body_memory 4m;\n"
                                             "client_body_timeout 2s;\n")


def echo_of_size(server, total, timeout):
    """POST /echo with a body that makes head + body exactly `total` bytes; the status."""
    head_len = len(post_head(total))
    length = total - head_len
    assert len(post_head(length)) == head_len
    c = server.connect(timeout=timeout)
    try:
        c.send(post_head(length) + b"b" * length)
        st, _, body, head = c.read_response(timeout=timeout)
        return st
    except OSError:
        return None
    finally:
        c.close()


def test_a_body_of_exactly_the_bound_fits_and_one_byte_more_is_503(bounded):
    assert echo_of_size(bounded, BOUND, scaled(10)) == 200
    assert echo_of_size(bounded, BOUND + 1, scaled(10)) == 503


def test_a_second_body_past_the_bound_is_503_with_retry_after_before_it_is_sent(bounded,
                                                                               connect):
    first = connect(bounded)
    first.send(post_head(3 * MIB) + b"x" * 1000)  # holds 3 MiB until it ends
    time.sleep(0.2)
    second = connect(bounded)
    second.send(post_head(2 * MIB)[:-2] + b"Expect: 100-continue\r\n\r\n")
    st, headers, _, head = second.read_response(timeout=scaled(5))
    assert st == 503, head
    assert headers.get("retry-after") == "1", head
    first.send(b"x" * (3 * MIB - 1000))
    st, _, body, head = first.read_response(timeout=scaled(10))
    assert st == 200 and body.endswith(b"x" * (3 * MIB)), head


def test_held_body_memory_returns_to_zero_however_collections_end(bounded, connect):
    """Resets mid-body, a malformed chunked body, a chunked body past the bound, a body
    that times out, and a body collected across a reload: afterwards exactly the bound
    fits again."""
    for _ in range(3):  # reset halfway
        c = bounded.connect()
        c.send(post_head(MIB) + b"r" * (MIB // 2))
        time.sleep(0.05)
        reset(c.sock)
    chunked = b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
    bad = connect(bounded)  # malformed after its buffer grew
    bad.send(chunked + b"%x\r\n%s\r\n" % (300000, b"m" * 300000) + b"zz\r\n")
    st, _, _, head = bad.read_response(timeout=scaled(5))
    assert st == 400, head
    big = connect(bounded, timeout=scaled(10))  # chunked, grows past the bound
    try:
        big.send(chunked)
        for _ in range(5):
            big.send(b"%x\r\n%s\r\n" % (MIB, b"g" * MIB))
    except OSError:
        pass
    st, _, _, head = big.read_response(timeout=scaled(5))
    assert st == 503, head
    stalled = connect(bounded)  # times out (client_body_timeout 2s)
    stalled.send(post_head(MIB) + b"s" * 1000)
    reloaded = connect(bounded, timeout=scaled(10))
    reloaded.send(post_head(MIB) + b"h" * 1000)
    time.sleep(0.2)
    bounded.proc.send_signal(signal.SIGHUP)
    assert wait_until(lambda: "configuration reloaded" in bounded.error_log(), scaled(5))
    reloaded.send(b"h" * (MIB - 1000))
    st, _, body, head = reloaded.read_response(timeout=scaled(10))
    assert st == 200 and body.endswith(b"h" * MIB), head
    assert wait_closed(stalled, scaled(5)) is not None, "the stalled body was not cut off"
    assert wait_until(lambda: echo_of_size(bounded, BOUND, scaled(10)) == 200, scaled(10))
    assert echo_of_size(bounded, BOUND + 1, scaled(10)) == 503


# --- time -----------------------------------------------------------------------------

@pytest.fixture
def paced(start_server, docroot):
    (docroot / "f.txt").write_bytes(b"file\n")
    return start_server(docroot, conf_extra="handler /echo echo;\nheader_timeout 2s;\n"
                                             "client_body_timeout 2s;\n"
                                             "client_body_min_rate 500;\n")


def trickle(client, data, pause, limit):
    """Send data a byte at a time, `pause` seconds apart, for at most `limit` seconds;
    returns the seconds until the server closed or answered, or None."""
    start = time.monotonic()
    client.sock.settimeout(pause)
    for b in data:
        if time.monotonic() - start > limit:
            return None
        try:
            client.sock.send(bytes([b]))
            if client.sock.recv(65536, socket.MSG_PEEK):
                return time.monotonic() - start
        except socket.timeout:
            continue
        except OSError:
            return time.monotonic() - start
    return None


def test_a_collected_body_below_the_minimum_rate_is_cut_off_with_408(paced, connect):
    c = connect(paced)
    c.send(post_head(10000, close=False))
    # One byte every 0.5 s: never 2 s between reads, but far below 500 bytes a second.
    took = trickle(c, b"t" * 10000, 0.5, scaled(10))
    assert took is not None and took < scaled(6), took
    st, _, _, head = c.read_response(timeout=scaled(2))
    assert st == 408, head


def test_a_skipped_body_below_the_minimum_rate_is_closed(paced, connect):
    c = connect(paced)
    c.send(post_head(10000, path="/f.txt", close=False))
    st, _, _, head = c.read_response(timeout=scaled(2))
    assert st in (200, 405), head  # answered at once; the body is skipped afterwards
    took = trickle(c, b"t" * 10000, 0.5, scaled(10))
    assert took is not None and took < scaled(6), took


def test_an_honest_slow_body_above_the_minimum_rate_is_served(paced, connect):
    c = connect(paced)
    body = bytes(range(256)) * 32  # 8 KiB in 0.2 s steps of 512 bytes: 4.5 s at 2.5x
    c.send(post_head(len(body), close=False))
    for i in range(0, len(body), 512):
        time.sleep(0.2)
        c.send(body[i:i + 512])
    st, _, got, head = c.read_response(timeout=scaled(5))
    assert st == 200 and got.endswith(body), head


def test_a_head_trickling_a_byte_at_a_time_is_cut_off_at_header_timeout(paced, connect):
    c = connect(paced)
    head = b"GET /f.txt HTTP/1.1\r\nHost: t\r\nX-Pad: " + b"p" * 200 + b"\r\n\r\n"
    took = trickle(c, head, 0.3, scaled(10))  # a read every 0.3 s, whole only after 70 s
    assert took is not None and took < 2 + scaled(3), took
    st, _, _, resp = c.read_response(timeout=scaled(2))
    assert st == 408, resp


def test_a_head_sent_in_pieces_within_header_timeout_is_served(paced, connect):
    c = connect(paced)
    head = b"GET /f.txt HTTP/1.1\r\nHost: t\r\nX-Pad: " + b"p" * 20 + b"\r\n\r\n"
    for i in range(0, len(head), 10):
        c.send(head[i:i + 10])
        time.sleep(0.1)
    st, _, body, resp = c.read_response(timeout=scaled(2))
    assert (st, body) == (200, b"file\n"), resp
