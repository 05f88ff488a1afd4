"""clients.py — the soak's hand-written clients: the slow ones, the ones that reset (the
proxy's too), a WebSocket through the proxy, and the HTTPS ones (new connections with full
and resumed handshakes, and the hostile: resets, stalls, plain HTTP on the TLS port).

Each client is a function run(addr, stop, seen) that loops until the `stop` event is set,
counting the statuses it receives in `seen` (a Seen; "reset" and "closed" count what
ended without one). Each identifies itself by its User-Agent, soak-KIND, which is how the
access log tells the kinds apart. They pace themselves: a few requests a second each.
"""
import base64
import collections
import random
import socket
import ssl
import struct
import time

# A client waits this long for an answer it expects (the soak's timeouts are a few seconds;
# a sanitizer build is slower).
READ_TIMEOUT = 30.0


class Seen(collections.Counter):
    """What a kind's clients saw, and when they last saw a status (epoch seconds)."""
    last = 0.0

    def status(self, status):
        self[status if status is not None else "closed"] += 1
        if status is not None:
            self.last = time.time()


def connect(addr):
    return socket.create_connection(addr, timeout=READ_TIMEOUT)


def reset(sock):
    """Close with an RST instead of a FIN: SO_LINGER on, with a zero timeout."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def head(kind, method, path, extra=""):
    return (f"{method} {path} HTTP/1.1\r\nHost: soak\r\nUser-Agent: soak-{kind}\r\n"
            f"{extra}Connection: close\r\n\r\n").encode()


def read_status(sock):
    """The status of the response, reading only its first line; None if the connection
    ended first."""
    data = b""
    while b"\r\n" not in data:
        try:
            chunk = sock.recv(4096)
        except (ConnectionResetError, socket.timeout):
            return None
        if not chunk:
            return None
        data += chunk
    parts = data.split(b"\r\n", 1)[0].split()
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None


def drain(sock, pace=None):
    """Read to the end; with pace=(bytes, seconds), at most that much per interval."""
    while True:
        try:
            chunk = sock.recv(pace[0] if pace else 65536)
        except (ConnectionResetError, socket.timeout):
            return False
        if not chunk:
            return True
        if pace:
            time.sleep(pace[1])


def slow_headers(addr, stop, seen):
    """The request head in ten pieces, 0.15 s apart (well within header_timeout)."""
    while not stop.is_set():
        data = head("slow-headers", "GET", "/static/f03.html")
        with connect(addr) as sock:
            step = len(data) // 10 + 1
            for i in range(0, len(data), step):
                sock.sendall(data[i:i + step])
                time.sleep(0.15)
            seen.status(read_status(sock))
            drain(sock)


def slow_body(addr, stop, seen):
    """A 64 KiB body to the echo handler in sixteen pieces, 0.1 s apart."""
    body = bytes(random.getrandbits(8) for _ in range(65536))
    while not stop.is_set():
        with connect(addr) as sock:
            sock.sendall(head("slow-body", "POST", "/echo",
                              f"Content-Length: {len(body)}\r\n"))
            for i in range(0, len(body), 4096):
                sock.sendall(body[i:i + 4096])
                time.sleep(0.1)
            seen.status(read_status(sock))
            drain(sock)


def slow_reader(addr, stop, seen):
    """The 4 MiB file read 32 KiB every 0.05 s through a small receive buffer: the server
    waits on a full socket all along, but never for send_timeout."""
    while not stop.is_set():
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
        sock.settimeout(READ_TIMEOUT)
        sock.connect(addr)
        with sock:
            sock.sendall(head("slow-reader", "GET", "/big.bin"))
            seen.status(read_status(sock))
            drain(sock, pace=(32768, 0.05))


def stalled(addr, stop, seen):
    """Half a request head, then nothing: the server answers 408 after header_timeout
    (an intended 4xx)."""
    while not stop.is_set():
        with connect(addr) as sock:
            sock.sendall(b"GET /static/f01.html HTTP/1.1\r\nUser-Agent: soak-stalled\r\n")
            seen.status(read_status(sock))
            drain(sock)


# What the resetting client does, in turn: each ends with an RST from the client.
def reset_during_file(sock):
    sock.sendall(head("reset", "GET", "/big.bin"))
    sock.recv(65536)


def reset_during_head(sock):
    sock.sendall(b"GET /static/f02.html HTTP/1.1\r\nUser-Agent: soak-re")


def reset_during_cgi(sock):
    sock.sendall(head("reset", "GET", "/cgi-bin/slow.sh"))
    time.sleep(0.3)


def reset_during_cgi_stream(sock):
    sock.sendall(head("reset", "GET", "/cgi-bin/stream.sh"))
    sock.recv(4096)


def reset_during_body(sock):
    sock.sendall(head("reset", "POST", "/echo", "Content-Length: 100000\r\n"))
    sock.sendall(b"x" * 1000)
    time.sleep(0.05)


RESETS = [reset_during_file, reset_during_head, reset_during_cgi, reset_during_cgi_stream,
          reset_during_body]


def resetter(addr, stop, seen):
    """Connections reset by the client at every stage: in the head, in a body, during a
    file, during a CGI script's silence and its output."""
    i = 0
    while not stop.is_set():
        sock = connect(addr)
        try:
            RESETS[i % len(RESETS)](sock)
            seen["reset"] += 1
        except OSError:
            seen["closed"] += 1
        reset(sock)
        i += 1
        time.sleep(0.1)


def ws_frame(opcode, payload):
    """A client's WebSocket frame: FIN, the opcode, a masked payload (under 126 bytes)."""
    mask = random.randbytes(4)
    return (bytes([0x80 | opcode, 0x80 | len(payload)]) + mask
            + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))


def read_exactly(sock, n, data=b""):
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed in a frame")
        data += chunk
    return data


def read_ws_frame(sock, data=b""):
    """(opcode, payload) of a server's frame (unmasked, under 126 bytes); data holds what
    was read past the 101's head."""
    data = read_exactly(sock, 2, data)
    length = data[1] & 0x7F
    data = read_exactly(sock, 2 + length, data)
    return data[0] & 0x0F, data[2:2 + length]


def proxy_upgrade(addr, stop, seen):
    """A WebSocket through the proxy: the upgrade (101), three messages echoed by the
    upstream, the closing handshake, then the connection closed. A message that comes back
    different counts as "bad-echo"."""
    while not stop.is_set():
        with connect(addr) as sock:
            key = base64.b64encode(random.randbytes(16)).decode()
            sock.sendall(f"GET /proxy/ws/_upgrade HTTP/1.1\r\nHost: soak\r\n"
                         f"User-Agent: soak-proxy-upgrade\r\nConnection: Upgrade\r\n"
                         f"Upgrade: websocket\r\nSec-WebSocket-Key: {key}\r\n"
                         f"Sec-WebSocket-Version: 13\r\n\r\n".encode())
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                data += chunk
            head, _, rest = data.partition(b"\r\n\r\n")
            parts = head.split(b"\r\n", 1)[0].split()
            status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None
            seen.status(status)
            if status != 101:
                drain(sock)
                continue
            for i in range(3):
                message = f"soak message {i} {random.random()}".encode()
                sock.sendall(ws_frame(0x1, message))
                opcode, payload = read_ws_frame(sock, rest)
                rest = b""
                if (opcode, payload) != (0x1, message):
                    seen["bad-echo"] += 1
            sock.sendall(ws_frame(0x8, struct.pack("!H", 1000)))
            opcode, _ = read_ws_frame(sock)
            seen["closed-cleanly" if opcode == 0x8 else "bad-close"] += 1
        time.sleep(0.1)


# What the proxy's resetting client does, in turn: each ends with an RST from the client.
def reset_during_proxied_body(sock):
    """A 4 MiB answer the upstream streams, left after its first 64 KiB."""
    sock.sendall(head("proxy-reset", "GET", "/proxy/_big?mb=4"))
    read_exactly(sock, 65536)


def reset_during_proxied_wait(sock):
    """An answer whose head the upstream sends after 3 s, left after 0.5 s (the location's
    proxy_read_timeout is 10 s: the server must notice the client has gone)."""
    sock.sendall(head("proxy-reset", "GET", "/wait/_slow?head=3"))
    time.sleep(0.5)


def reset_during_proxied_post(sock):
    """A body for the upstream, left half sent."""
    sock.sendall(head("proxy-reset", "POST", "/proxy/post", "Content-Length: 100000\r\n"))
    sock.sendall(b"x" * 50000)
    time.sleep(0.05)


PROXY_RESETS = [reset_during_proxied_body, reset_during_proxied_wait,
                reset_during_proxied_post]


def proxy_resetter(addr, stop, seen):
    """Proxied requests reset by the client: during the answer's body, while the upstream
    has not answered yet, and in the middle of the request's body."""
    i = 0
    while not stop.is_set():
        sock = connect(addr)
        try:
            PROXY_RESETS[i % len(PROXY_RESETS)](sock)
            seen["reset"] += 1
        except OSError:
            seen["closed"] += 1
        reset(sock)
        i += 1
        time.sleep(0.1)


# ------------------------------------------------------------------------------ HTTPS
# The TLS clients verify the server's certificate: soak.py sets TLS_CAFILE to a file that
# holds both of its self-signed certificates (a reload swaps one for the other), whose
# names are "localhost" and 127.0.0.1.
TLS_CAFILE = None


def tls_context(version=None, tickets=True):
    """A client context trusting TLS_CAFILE; `version` pins the protocol, and
    tickets=False asks for resumption by session ID (no ticket extension)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(TLS_CAFILE)
    if version:
        ctx.minimum_version = ctx.maximum_version = version
    if not tickets:
        ctx.options |= ssl.OP_NO_TICKET
    return ctx


def tls_connect(addr, ctx, session=None):
    raw = connect(addr)
    try:
        return ctx.wrap_socket(raw, server_hostname="localhost", session=session)
    except BaseException:
        raw.close()
        raise


# The handshakes https-handshake cycles through: TLS 1.3 resumed by ticket, TLS 1.2 by
# ticket, TLS 1.2 by session ID (the server's session cache).
HANDSHAKES = [("tls1.3", ssl.TLSVersion.TLSv1_3, True),
              ("tls1.2-ticket", ssl.TLSVersion.TLSv1_2, True),
              ("tls1.2-id", ssl.TLSVersion.TLSv1_2, False)]


def https_handshake(addr, stop, seen):
    """A new connection for each request: handshake, one GET, close. Each kind of
    handshake in turn, and every other time it offers the session its last connection got
    ("resumed", or "not-resumed" when the server made a full handshake instead). Which
    certificate came counts as "cert:NAME" (reloads swap it)."""
    contexts = [tls_context(version, tickets) for _, version, tickets in HANDSHAKES]
    sessions = [None] * len(HANDSHAKES)
    i = 0
    while not stop.is_set():
        v = i % len(HANDSHAKES)
        offer = sessions[v] if (i // len(HANDSHAKES)) % 2 else None
        with tls_connect(addr, contexts[v], offer) as sock:
            sock.sendall(head("https-handshake", "GET", f"/static/f{i % 20:02d}.html"))
            seen.status(read_status(sock))
            drain(sock)
            # Read to the end first: TLS 1.3's tickets come after the handshake.
            sessions[v] = sock.session
            if offer is not None:
                seen[f"{HANDSHAKES[v][0]}:" + ("resumed" if sock.session_reused
                                                else "not-resumed")] += 1
            cert = dict(x[0] for x in sock.getpeercert()["subject"])
            seen[f"cert:{cert.get('organizationName', '?')}"] += 1
        i += 1
        time.sleep(0.05)


def client_hello():
    """The first flight of a TLS client (a whole ClientHello record), made in memory."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = tls_context().wrap_bio(incoming, outgoing, server_hostname="localhost")
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


# What the resetting HTTPS client does, in turn. Each returns the socket it ends with (a
# TLS one wraps, and takes over, the TCP socket it was given), which is then reset.
def reset_tls_in_hello(sock):
    """Half a ClientHello."""
    hello = client_hello()
    sock.sendall(hello[:len(hello) // 2])
    time.sleep(0.05)
    return sock


def reset_tls_after_hello(sock):
    """A ClientHello, and the server's first flight read (its certificate, for TLS 1.3
    encrypted), then gone before the client's Finished."""
    sock.sendall(client_hello())
    sock.recv(16384)
    return sock


def reset_tls_during_file(sock):
    """The 4 MiB file over TLS, left after its first 64 KiB."""
    tls = tls_context().wrap_socket(sock, server_hostname="localhost")
    tls.sendall(head("https-reset", "GET", "/big.bin"))
    read_exactly(tls, 65536)
    return tls


def reset_tls_in_head(sock):
    tls = tls_context().wrap_socket(sock, server_hostname="localhost")
    tls.sendall(b"GET /static/f02.html HTTP/1.1\r\nUser-Agent: soak-https-re")
    time.sleep(0.05)
    return tls


def reset_tls_during_body(sock):
    tls = tls_context().wrap_socket(sock, server_hostname="localhost")
    tls.sendall(head("https-reset", "POST", "/echo", "Content-Length: 100000\r\n"))
    tls.sendall(b"x" * 1000)
    time.sleep(0.05)
    return tls


TLS_RESETS = [reset_tls_in_hello, reset_tls_after_hello, reset_tls_during_file,
              reset_tls_in_head, reset_tls_during_body]


def https_resetter(addr, stop, seen):
    """TLS connections reset by the client in the middle of the handshake (in the
    ClientHello, before the client's Finished), during a file, in a head and in a body.
    No close_notify: the RST goes on the TCP socket under the TLS layer (SO_LINGER set
    before the wrapping, so whichever socket closes the descriptor resets it)."""
    i = 0
    while not stop.is_set():
        sock = connect(addr)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        try:
            sock = TLS_RESETS[i % len(TLS_RESETS)](sock)
            seen["reset"] += 1
        except OSError:
            seen["closed"] += 1
        sock.close()
        i += 1
        time.sleep(0.1)


def stall_tls_in_hello(addr, seen):
    """Half a ClientHello, then nothing: the server ends the connection after
    header_timeout (which covers the handshake), with no answer to give."""
    with connect(addr) as sock:
        hello = client_hello()
        sock.sendall(hello[:len(hello) // 2])
        seen["closed-in-handshake" if drain(sock) else "reset-in-handshake"] += 1


def stall_tls_after_handshake(addr, seen):
    """A handshake and then not a byte: the server closes after header_timeout, with no
    answer (there is no request to answer)."""
    with tls_connect(addr, tls_context()) as sock:
        status = read_status(sock)
        seen[f"after-handshake:{status}" if status else "closed-after-handshake"] += 1
        drain(sock)


def stall_tls_in_head(addr, seen):
    """A handshake and half a request head: 408 after header_timeout, over TLS."""
    with tls_connect(addr, tls_context()) as sock:
        sock.sendall(b"GET /static/f01.html HTTP/1.1\r\nUser-Agent: soak-https-stalled\r\n")
        seen.status(read_status(sock))
        drain(sock)


def stall_tls_reader(addr, seen):
    """The 4 MiB file over TLS, 64 KiB of it read, then nothing more read: the server
    gives the response up after send_timeout (the socket full all along) and resets."""
    raw = socket.socket()
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
    raw.settimeout(READ_TIMEOUT)
    raw.connect(addr)
    with tls_context().wrap_socket(raw, server_hostname="localhost") as sock:
        sock.sendall(head("https-stalled", "GET", "/big.bin"))
        seen.status(read_status(sock))
        time.sleep(STALL_S)
        seen["given-up" if not drain_until_end(sock) else "finished"] += 1


def drain_until_end(sock):
    """True if the response could still be read to its end after the stall (the server
    did not give it up), False if the connection ended short."""
    got = 0
    while True:
        try:
            chunk = sock.recv(65536)
        except (OSError, ssl.SSLError):
            return False
        if not chunk:
            return got >= 4 << 20
        got += len(chunk)


# Longer than the soak's send_timeout (10 s).
STALL_S = 15.0
TLS_STALLS = [stall_tls_in_hello, stall_tls_after_handshake, stall_tls_in_head,
              stall_tls_reader]


def https_staller(addr, stop, seen):
    """TLS clients that stop: in the handshake, between the handshake and the request, in
    the request's head, and in the middle of a response."""
    i = 0
    while not stop.is_set():
        TLS_STALLS[i % len(TLS_STALLS)](addr, seen)
        i += 1


def https_plain(addr, stop, seen):
    """Plain HTTP on the TLS port: nginx's 400 ("The plain HTTP request was sent to HTTPS
    port"), in plain text."""
    while not stop.is_set():
        with connect(addr) as sock:
            sock.sendall(head("https-plain", "GET", "/static/f01.html"))
            seen.status(read_status(sock))
            drain(sock)
        time.sleep(0.2)
