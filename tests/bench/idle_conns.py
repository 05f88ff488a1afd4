#!/usr/bin/python3
"""idle_conns.py — hold N idle keep-alive connections open to a server (memory workload).

    idle_conns.py HOST PORT COUNT PATH

Opens COUNT connections in batches, sends one GET for PATH on each (HTTP/1.1,
keep-alive) and reads the whole response, then leaves them idle. One request each
because some servers (lfhttpd with TCP_DEFER_ACCEPT) do not accept a connection before
its first bytes arrive: a connection that never sent anything costs them nothing yet.
Then prints "open N failed F" and waits for a line (or EOF) on stdin before closing
everything with RST (SO_LINGER 0), so thousands of ports are not left in TIME_WAIT.

Bounded: every batch has a deadline and the whole opening phase has one.
"""
import resource
import selectors
import socket
import struct
import sys
import time

BATCH = 500          # connections in flight at once: well under every listen backlog
BATCH_TIMEOUT = 10.0  # seconds for one batch to connect and get its responses
TOTAL_TIMEOUT = 90.0  # seconds for the whole opening phase


def raise_fd_limit(need):
    """Each connection is a descriptor: raise RLIMIT_NOFILE (root may raise the hard one)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = need + 64
    if soft >= want:
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(want, soft), max(want, hard)))
    except (ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def response_complete(buf):
    """True once buf holds a whole response head and Content-Length bytes of body."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return False
    length = 0
    for line in buf[:end].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip() or 0)
    return len(buf) >= end + 4 + length


def open_batch(host, port, n, request):
    """Connect n sockets, send the request on each, wait for every response.
    Returns (open sockets, number failed)."""
    sel = selectors.DefaultSelector()
    pending = {}
    failed = 0
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        err = s.connect_ex((host, port))
        if err not in (0, 115):  # 115 = EINPROGRESS
            s.close()
            failed += 1
            continue
        pending[s] = b""
        sel.register(s, selectors.EVENT_WRITE, "connect")
    done = []
    deadline = time.monotonic() + BATCH_TIMEOUT
    while pending and time.monotonic() < deadline:
        for key, _ in sel.select(timeout=0.5):
            s = key.fileobj
            try:
                if key.data == "connect":
                    if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                        raise OSError("connect failed")
                    s.send(request)  # tiny: fits in an empty socket buffer
                    sel.modify(s, selectors.EVENT_READ, "read")
                    continue
                chunk = s.recv(65536)
                if not chunk:
                    raise OSError("closed by server")
                pending[s] += chunk
                if response_complete(pending[s]):
                    sel.unregister(s)
                    del pending[s]
                    done.append(s)
            except OSError:
                sel.unregister(s)
                del pending[s]
                s.close()
                failed += 1
    for s in pending:  # out of time
        s.close()
        failed += 1
    sel.close()
    return done, failed


def main():
    host, port, count, path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    raise_fd_limit(count)
    request = ("GET %s HTTP/1.1\r\nHost: %s:%d\r\n\r\n" % (path, host, port)).encode()
    conns, failed = [], 0
    deadline = time.monotonic() + TOTAL_TIMEOUT
    while len(conns) + failed < count and time.monotonic() < deadline:
        opened, nfail = open_batch(host, port, min(BATCH, count - len(conns) - failed), request)
        conns += opened
        failed += nfail
    print("open %d failed %d" % (len(conns), failed), flush=True)
    sys.stdin.readline()  # the driver has read the server's memory: let go
    for s in conns:
        s.close()


if __name__ == "__main__":
    main()
