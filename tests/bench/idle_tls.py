#!/usr/bin/python3
"""idle_tls.py — hold N idle TLS keep-alive connections open to a server (https_idle).

    idle_tls.py HOST PORT COUNT PATH

idle_conns.py over TLS: opens COUNT connections in batches, completes a TLS handshake
on each (TLS 1.2 or 1.3, the certificate not checked: it is the benchmark's own,
self-signed), sends one GET for PATH (HTTP/1.1, keep-alive) and reads the whole
response, then leaves them idle, so what each server keeps per idle TLS connection is
what is measured (its TLS state after a request, not a handshake in progress). Then
prints "open N failed F" and waits for a line (or EOF) on stdin before closing
everything with RST (SO_LINGER 0, no close_notify).

Bounded: every batch has a deadline and the whole opening phase has one.
"""
import selectors
import socket
import ssl
import struct
import sys
import time

from idle_conns import raise_fd_limit, response_complete

BATCH = 250           # handshakes in flight at once: well under every listen backlog
BATCH_TIMEOUT = 20.0  # seconds for one batch to connect, shake hands and get responses
TOTAL_TIMEOUT = 240.0  # seconds for the whole opening phase


def client_context():
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx


class Conn:
    """One connection's progress: "connect", "handshake", "send", "read", then done."""

    def __init__(self, ctx, host, port):
        raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        raw.setblocking(False)
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.err = raw.connect_ex((host, port))
        self.sock = ctx.wrap_socket(raw, server_hostname="localhost",
                                    do_handshake_on_connect=False)
        self.state, self.buf = "connect", b""

    def step(self, request):
        """Advance as far as the socket allows. Returns the event to wait for next,
        or None when the response is complete. Raises OSError on failure."""
        try:
            if self.state == "connect":
                if self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                    raise OSError("connect failed")
                self.state = "handshake"
            if self.state == "handshake":
                self.sock.do_handshake()
                self.state = "send"
            if self.state == "send":
                self.sock.send(request)  # tiny: one record into an empty socket buffer
                self.state = "read"
            while True:  # records already decrypted may be waiting: read until none
                chunk = self.sock.recv(65536)
                if not chunk:
                    raise OSError("closed by server")
                self.buf += chunk
                if response_complete(self.buf):
                    return None
        except ssl.SSLWantReadError:
            return selectors.EVENT_READ
        except ssl.SSLWantWriteError:
            return selectors.EVENT_WRITE


def open_batch(ctx, host, port, n, request):
    """Connect n sockets over TLS, send the request on each, wait for every response.
    Returns (open sockets, number failed)."""
    sel = selectors.DefaultSelector()
    failed, done = 0, []
    for _ in range(n):
        c = Conn(ctx, host, port)
        if c.err not in (0, 115):  # 115 = EINPROGRESS
            c.sock.close()
            failed += 1
            continue
        sel.register(c.sock, selectors.EVENT_WRITE, c)
    deadline = time.monotonic() + BATCH_TIMEOUT
    while sel.get_map() and time.monotonic() < deadline:
        for key, _ in sel.select(timeout=0.5):
            c = key.data
            try:
                want = c.step(request)
            except (OSError, ssl.SSLError):
                sel.unregister(c.sock)
                c.sock.close()
                failed += 1
                continue
            if want is None:
                sel.unregister(c.sock)
                done.append(c.sock)
            elif want != key.events:
                sel.modify(c.sock, want, c)
    for key in list(sel.get_map().values()):  # out of time
        key.fileobj.close()
        failed += 1
    sel.close()
    return done, failed


def main():
    host, port, count, path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    raise_fd_limit(count)
    ctx = client_context()
    request = ("GET %s HTTP/1.1\r\nHost: %s:%d\r\n\r\n" % (path, host, port)).encode()
    conns, failed = [], 0
    deadline = time.monotonic() + TOTAL_TIMEOUT
    while len(conns) + failed < count and time.monotonic() < deadline:
        opened, nfail = open_batch(ctx, host, port,
                                   min(BATCH, count - len(conns) - failed), request)
        conns += opened
        failed += nfail
    print("open %d failed %d" % (len(conns), failed), flush=True)
    sys.stdin.readline()  # the driver has read the server's memory: let go
    for s in conns:
        s.close()


if __name__ == "__main__":
    main()
