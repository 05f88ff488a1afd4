"""proxy_request_buffering off: the upstream is connected to once the request's head is
read, and the body relayed as it arrives (a Content-Length one as it is, a chunked one
chunked again to an HTTP/1.1 upstream, read whole first for HTTP/1.0, as nginx), through a
fixed buffer. With `on` (the default) the body is read whole first, as before.

The upstream here is a small socket server of the test's own (Recorder) that notes every
byte of a request as it arrives, so that a test can wait, from the upstream's side, for
the first part of a body before the client sends the next: "the upstream saw part 1
while the client still held part 2" is proved by the order of events, not by a clock.
Every test runs under nginx too (PROXY_UNDER_TEST=nginx), where the two must agree.
"""
import json
import os
import socket
import ssl
import subprocess
import threading
import time

import pytest

from conftest import Client, past_buffers, scaled, wait_until
from proxy_harness import UNDER_NGINX, lfhttpd_only, proxy  # noqa: F401 fixtures


class Recorder:
    """An HTTP/1.1 upstream on 127.0.0.1 that records each connection's bytes as they come
    (.conns: a list of dicts: raw, closed). Answers, once a request's body has ended, 200
    with a JSON body {"head": request head, "body": the body decoded}; with early=N, 413
    as soon as N bytes of the body have come, without reading on. Stopped by close()."""

    def __init__(self, early=None, tls=None, stall=False):
        self.early = early
        self.stall = stall  # read no more once a request's head has come
        self.tls = tls  # an ssl.SSLContext: the upstream speaks TLS
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if stall:  # (a small receive buffer: what it does not read stays with the proxy)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(512)
        self.port = self.sock.getsockname()[1]
        self.conns = []
        self.lock = threading.Condition()
        self.stopping = False
        self.thread = threading.Thread(target=self.accept, daemon=True)
        self.thread.start()

    def accept(self):
        while not self.stopping:
            try:
                s, _ = self.sock.accept()
            except OSError:
                return
            rec = {"raw": b"", "closed": False, "sock": s}
            with self.lock:
                self.conns.append(rec)
            threading.Thread(target=self.serve, args=(s, rec), daemon=True).start()

    def serve(self, s, rec):
        answered = False
        try:
            if self.tls:
                s = rec["sock"] = self.tls.wrap_socket(s, server_side=True)
            while True:
                data = s.recv(65536)
                with self.lock:
                    rec["raw"] += data
                    if not data:
                        rec["closed"] = True
                    self.lock.notify_all()
                if not data:
                    return
                head, sep, body = rec["raw"].partition(b"\r\n\r\n")
                if not sep or answered:
                    continue
                while self.stall and not self.stopping:
                    time.sleep(0.05)
                done, decoded = body_state(head, body)
                if self.early is not None and len(body) >= self.early:
                    s.sendall(b"HTTP/1.1 413 Too Large\r\nContent-Length: 5\r\n"
                              b"Connection: close\r\n\r\nearly")
                    answered = True
                elif done:
                    out = json.dumps({"head": head.decode("latin-1"),
                                      "body": decoded.decode("latin-1")}).encode()
                    s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(out) + out)
                    answered = True
        except OSError:
            with self.lock:
                rec["closed"] = True
                self.lock.notify_all()
        finally:
            s.close()

    def body_seen(self, needle, i=-1):
        """Has connection i's raw stream (head and body) got needle yet?"""
        with self.lock:
            return bool(self.conns) and needle in self.conns[i]["raw"]

    def wait(self, predicate, timeout=10):
        with self.lock:
            return self.lock.wait_for(predicate, timeout=scaled(timeout))

    def cut(self):
        """Shut every connection down, as a server that fails."""
        with self.lock:
            for rec in self.conns:
                try:
                    rec["sock"].shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self):
        self.stopping = True
        self.sock.close()


def body_state(head, body):
    """(ended, decoded) of a request body as framed by head."""
    lines = head.decode("latin-1").lower().split("\r\n")
    fields = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
    if fields.get("transfer-encoding") == "chunked":
        out, rest = b"", body
        while True:
            line, sep, rest = rest.partition(b"\r\n")
            if not sep:
                return False, out
            size = int(line, 16)
            if size == 0:
                return rest.startswith(b"\r\n"), out
            if len(rest) < size + 2:
                return False, out
            out, rest = out + rest[:size], rest[size + 2:]
    length = int(fields.get("content-length", "0"))
    return len(body) >= length, body[:length]


@pytest.fixture
def recorder():
    made = []

    def make(**kw):
        r = Recorder(**kw)
        made.append(r)
        return r

    yield make
    for r in made:
        r.close()


def conf(rec, lines="proxy_request_buffering off;", server_lines=""):
    return f"""
server {{
    listen 127.0.0.1:{{port0}};
    {server_lines}
    location / {{
        proxy_pass http://127.0.0.1:{rec.port};
        {lines}
    }}
}}
"""


def connect(p):
    return Client(socket.create_connection((p.host, p.port), timeout=scaled(10)))


def head(method="POST", fields=()):
    return ("\r\n".join([f"{method} /up HTTP/1.1", "Host: t"] + list(fields))
            + "\r\n\r\n").encode()


def answer(c):
    status, headers, body, _ = c.read_response(timeout=scaled(10))
    return status, headers, body


def test_content_length_body_reaches_the_upstream_while_the_client_holds_the_rest(
        proxy, recorder):
    rec = recorder()
    p = proxy(conf(rec))
    c = connect(p)
    c.send(head(fields=["Content-Length: 10"]) + b"part1")
    assert rec.wait(lambda: rec.body_seen(b"part1")), "the upstream did not get part 1"
    c.send(b"part2")
    status, _, body = answer(c)
    assert status == 200
    got = json.loads(body)
    assert got["body"] == "part1part2"
    assert "content-length: 10" in got["head"].lower()


def test_chunked_body_is_chunked_again_to_an_http11_upstream_as_it_arrives(proxy, recorder):
    rec = recorder()
    p = proxy(conf(rec, "proxy_request_buffering off; proxy_http_version 1.1;"))
    c = connect(p)
    c.send(head(fields=["Transfer-Encoding: chunked"]) + b"5\r\npart1\r\n")
    assert rec.wait(lambda: rec.body_seen(b"part1")), "the upstream did not get part 1"
    c.send(b"5\r\npart2\r\n0\r\n\r\n")
    status, _, body = answer(c)
    assert status == 200
    got = json.loads(body)
    assert got["body"] == "part1part2"
    assert "transfer-encoding: chunked" in got["head"].lower()
    assert "content-length" not in got["head"].lower()


def test_chunked_body_to_an_http10_upstream_is_read_whole_first(proxy, recorder):
    rec = recorder()
    p = proxy(conf(rec, "proxy_request_buffering off; proxy_http_version 1.0;"))
    c = connect(p)
    c.send(head(fields=["Transfer-Encoding: chunked"]) + b"5\r\npart1\r\n")
    time.sleep(scaled(0.5))
    assert not rec.body_seen(b"part1")
    c.send(b"5\r\npart2\r\n0\r\n\r\n")
    status, _, body = answer(c)
    assert status == 200
    got = json.loads(body)
    assert got["body"] == "part1part2"
    assert "content-length: 10" in got["head"].lower()


def test_by_default_the_upstream_gets_nothing_before_the_body_ends(proxy, recorder):
    rec = recorder()
    p = proxy(conf(rec, ""))  # (proxy_request_buffering on)
    c = connect(p)
    c.send(head(fields=["Content-Length: 10"]) + b"part1")
    time.sleep(scaled(0.5))
    assert not rec.conns or not rec.body_seen(b"part1")
    c.send(b"part2")
    status, _, body = answer(c)
    assert status == 200 and json.loads(body)["body"] == "part1part2"


def test_content_length_over_client_max_body_size_is_413_before_connecting(proxy, recorder):
    rec = recorder()
    p = proxy(conf(rec, "proxy_request_buffering off; client_max_body_size 8;"))
    c = connect(p)
    c.send(head(fields=["Content-Length: 10"]) + b"part1")
    status, _, _ = answer(c)
    assert status == 413
    time.sleep(scaled(0.2))
    assert rec.conns == []


def test_chunked_body_past_client_max_body_size_midway_is_413_and_the_upstream_let_go(
        proxy, recorder):
    rec = recorder()
    p = proxy(conf(rec, "proxy_request_buffering off; proxy_http_version 1.1; "
                        "client_max_body_size 8;"))
    c = connect(p)
    c.send(head(fields=["Transfer-Encoding: chunked"]) + b"5\r\npart1\r\n")
    assert rec.wait(lambda: rec.body_seen(b"part1"))
    c.send(b"5\r\npart2\r\n")
    status, headers, _ = answer(c)
    assert status == 413
    assert headers.get("connection") == "close"
    assert rec.wait(lambda: rec.conns[-1]["closed"]), "the upstream connection stayed open"
    assert not rec.body_seen(b"part2")


def test_a_client_leaving_mid_body_closes_the_upstream_connection(proxy, recorder):
    rec = recorder()
    p = proxy(conf(rec))
    fds = lambda: len(os.listdir(f"/proc/{p.pid}/fd"))  # noqa: E731
    before = fds()
    c = connect(p)
    c.send(head(fields=["Content-Length: 100"]) + b"part1")
    assert rec.wait(lambda: rec.body_seen(b"part1"))
    c.close()
    assert rec.wait(lambda: rec.conns[-1]["closed"]), "the upstream connection stayed open"
    assert wait_until(lambda: fds() == before, scaled(10)), "a descriptor was left open"


def test_an_upstream_answering_before_the_body_ends_is_relayed_and_the_connection_closes(
        proxy, recorder):
    rec = recorder(early=5)
    p = proxy(conf(rec))
    c = connect(p)
    c.send(head(fields=["Content-Length: 100"]) + b"part1")
    status, headers, body = answer(c)
    assert (status, body) == (413, b"early")
    if not UNDER_NGINX:  # (nginx says keep-alive here, and closes all the same)
        assert headers.get("connection") == "close"
    c.sock.settimeout(scaled(10))
    try:  # the rest of the body is not taken for a request: the connection ends
        c.sock.sendall(b"x" * 95 + head("GET"))
        rest = c.sock.recv(4096)
    except (ConnectionResetError, BrokenPipeError):
        rest = b""
    assert rest == b""


def test_expect_100_continue_is_answered_before_the_body_and_not_sent_upstream(
        proxy, recorder):
    rec = recorder()
    p = proxy(conf(rec))
    c = connect(p)
    c.send(head(fields=["Content-Length: 5", "Expect: 100-continue"]))
    c.sock.settimeout(scaled(10))
    got = b""
    while b"\r\n\r\n" not in got:
        got += c.sock.recv(4096)
    assert got.startswith(b"HTTP/1.1 100 Continue\r\n")
    c.send(b"part1")
    status, _, body = answer(c)
    assert status == 200
    got = json.loads(body)
    assert got["body"] == "part1"
    assert "expect" not in got["head"].lower()


def test_a_server_that_refuses_the_connection_is_passed_for_the_next(proxy, recorder):
    rec = recorder()
    text = f"""
upstream two {{
    server 127.0.0.1:{{dead0}};
    server 127.0.0.1:{rec.port};
}}
server {{
    listen 127.0.0.1:{{port0}};
    location / {{
        proxy_pass http://two;
        proxy_request_buffering off;
    }}
}}
"""
    p = proxy(text)
    for _ in range(2):  # (round robin: one of the two starts at the dead one)
        c = connect(p)
        c.send(head(fields=["Content-Length: 5"]) + b"part1")
        status, _, body = answer(c)
        assert status == 200 and json.loads(body)["body"] == "part1"
        c.close()


def test_a_body_that_began_to_go_is_not_sent_to_the_next_server(proxy, recorder):
    first, second = recorder(), recorder()
    text = f"""
upstream two {{
    server 127.0.0.1:{first.port} max_fails=0;
    server 127.0.0.1:{second.port} max_fails=0;
}}
server {{
    listen 127.0.0.1:{{port0}};
    location / {{
        proxy_pass http://two;
        proxy_request_buffering off;
        proxy_next_upstream error timeout non_idempotent;
    }}
}}
"""
    p = proxy(text)
    c = connect(p)
    c.send(head(fields=["Content-Length: 10"]) + b"part1")
    recs = (first, second)
    assert wait_until(lambda: any(r.body_seen(b"part1") for r in recs), scaled(10))
    got = next(r for r in recs if r.body_seen(b"part1"))
    other = second if got is first else first
    got.cut()  # the server fails in the middle of the body
    c.send(b"part2")
    status, _, _ = answer(c)
    assert status == 502
    assert other.conns == []


def test_request_body_is_what_came_with_the_head_when_the_request_goes(proxy, recorder):
    rec = recorder()
    p = proxy(conf(rec, 'proxy_request_buffering off; '
                        'proxy_set_header X-Body "[$request_body]";'))
    c = connect(p)
    c.send(head(fields=["Content-Length: 10"]) + b"part1")
    assert rec.wait(lambda: rec.body_seen(b"part1"))
    c.send(b"part2")
    status, _, body = answer(c)
    assert status == 200
    got = json.loads(body)
    assert "x-body: [part1]" in got["head"].lower()
    assert got["body"] == "part1part2"


def test_a_body_that_came_whole_with_the_head_is_request_body_and_no_more(proxy, recorder):
    """(and the request pipelined after it is a request of its own)"""
    rec = recorder()
    p = proxy(conf(rec, 'proxy_request_buffering off; '
                        'proxy_set_header X-Body "[$request_body]";'))
    c = connect(p)
    c.send(head(fields=["Content-Length: 5"]) + b"part1" + head("GET"))
    for _ in range(2):
        status, _, body = answer(c)
        assert status == 200
    first = rec.conns[0]["raw"].decode("latin-1").lower()
    assert "x-body: [part1]\r\n" in first


@pytest.mark.skipif(os.environ.get("LFHTTPD_SANITIZE") == "tsan",
                    reason="ThreadSanitizer's shadow memory grows with every byte a thread "
                    "touches, so resident memory says nothing of the bound [by design]")
def test_two_hundred_slow_uploaders_hold_bounded_memory(proxy, recorder):
    """Each has sent 256 KiB of a 1 MiB body and holds the rest: the upstreams have it all,
    and the proxy holds a fixed buffer a connection, not what passed through it (read
    whole first, the same bodies would hold 50 MiB)."""
    rec = recorder()
    p = proxy(conf(rec))
    part = 256 << 10
    rss_before = p.rss_kib()
    clients = []
    for _ in range(200):
        c = connect(p)
        c.send(head(fields=[f"Content-Length: {1 << 20}"]) + b"a" * part)
        clients.append(c)
    assert wait_until(lambda: len(rec.conns) == 200 and
                      all(len(r["raw"]) >= part for r in list(rec.conns)), scaled(60))
    grown_kib = p.rss_kib() - rss_before
    for c in clients[:20]:  # and the bodies go on when the clients do
        c.send(b"b" * ((1 << 20) - part))
    for c in clients[:20]:
        status, _, body = answer(c)
        assert status == 200 and len(json.loads(body)["body"]) == 1 << 20
    for c in clients:
        c.close()
    print(f"RSS grown by {grown_kib} KiB for 200 uploaders")
    if not UNDER_NGINX:
        assert grown_kib < 24 * 1024, grown_kib


def test_an_https_upstream_gets_the_body_as_it_arrives(proxy, recorder, tmp_path):
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-days", "1", "-subj", "/CN=up",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(cert), str(key))
    rec = recorder(tls=ctx)
    p = proxy(conf(rec, "proxy_request_buffering off;").replace("http://", "https://"))
    c = connect(p)
    c.send(head(fields=["Content-Length: 10"]) + b"part1")
    assert rec.wait(lambda: rec.body_seen(b"part1")), "the upstream did not get part 1"
    c.send(b"part2")
    status, _, body = answer(c)
    assert status == 200
    assert json.loads(body)["body"] == "part1part2"


def test_a_client_that_stalls_mid_body_is_timed_out_and_the_upstream_let_go(proxy, recorder):
    rec = recorder()
    p = proxy(conf(rec, "proxy_request_buffering off; client_body_timeout 1s;"))
    c = connect(p)
    c.send(head(fields=["Content-Length: 100"]) + b"part1")
    assert rec.wait(lambda: rec.body_seen(b"part1"))
    c.sock.settimeout(scaled(10))
    got = b""
    try:
        while True:
            data = c.sock.recv(4096)
            if not data:
                break
            got += data
    except ConnectionResetError:
        pass
    if UNDER_NGINX:  # nginx closes without a word
        assert got == b""
    else:  # lfhttpd says 408, as for a body it reads whole (and a head) that stalls
        assert got.startswith(b"HTTP/1.1 408 ")
    assert rec.wait(lambda: rec.conns[-1]["closed"]), "the upstream connection stayed open"


def test_a_client_over_tls_streams_its_body(proxy, recorder, tmp_path):
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-days", "1", "-subj", "/CN=t",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    rec = recorder()
    p = proxy(conf(rec).replace("listen 127.0.0.1:{port0};",
                                f"listen 127.0.0.1:{{port0}} ssl; ssl_certificate {cert}; "
                                f"ssl_certificate_key {key};"))
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    s = ctx.wrap_socket(socket.create_connection((p.host, p.port), timeout=scaled(10)))
    c = Client(s)
    c.send(head(fields=["Content-Length: 10"]) + b"part1")
    assert rec.wait(lambda: rec.body_seen(b"part1")), "the upstream did not get part 1"
    c.send(b"part2")
    status, _, body = answer(c)
    assert status == 200
    assert json.loads(body)["body"] == "part1part2"


@lfhttpd_only("the event models are lfhttpd's")
@pytest.mark.parametrize("model", ["reactivation oneshot;", "concurrency half_sync_half_async;",
                                   "concurrency thread_per_connection;"])
def test_every_event_model_streams_the_body_and_sees_an_early_answer(proxy, recorder, model):
    rec = recorder()
    p = proxy(model + "\n" + conf(rec))
    c = connect(p)
    c.send(head(fields=["Content-Length: 10"]) + b"part1")
    assert rec.wait(lambda: rec.body_seen(b"part1")), "the upstream did not get part 1"
    c.send(b"part2")
    status, _, body = answer(c)
    assert status == 200 and json.loads(body)["body"] == "part1part2"
    early = recorder(early=5)
    p = proxy(model + "\n" + conf(early))
    c = connect(p)
    c.send(head(fields=["Content-Length: 100"]) + b"part1")
    assert answer(c)[:1] == (413,)


def test_an_upstream_that_takes_no_more_stops_the_client_being_read_then_times_out(
        proxy, recorder):
    rec = recorder(stall=True)
    # (the timeout well past the time the kernel's buffers take to fill: once it passes,
    # the rest of the body is drained, as any after an answer that closes)
    p = proxy(conf(rec, f"proxy_request_buffering off; proxy_send_timeout {scaled(8):.0f}s; "
                        "client_max_body_size 0;"))
    # the proxy's two sockets' buffers, with the client's and the upstream's (small)
    bound = past_buffers(sends=1, receives=1)
    c = connect(p)
    c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 65536)
    c.send(head(fields=[f"Content-Length: {4 * bound}"]))
    c.sock.setblocking(False)
    sent, piece, last = 0, b"x" * 65536, time.monotonic()
    while time.monotonic() - last < 0.5:  # until half a second passes without a byte taken
        try:
            sent += c.sock.send(piece)
            last = time.monotonic()
        except BlockingIOError:
            time.sleep(0.01)
        assert sent < bound, "the client was read on while the upstream took nothing"
    c.sock.setblocking(True)
    status = c.read_response(timeout=scaled(20))[0]
    assert status == 504


def test_request_length_counts_a_streamed_body(proxy, recorder, tmp_path):
    rec = recorder()
    log = tmp_path / "length.log"
    p = proxy('log_format length "$request_length";\n' +
              conf(rec, server_lines=f"access_log {log} length;"))
    c = connect(p)
    h = head(fields=["Content-Length: 10"])
    c.send(h + b"part1")
    assert rec.wait(lambda: rec.body_seen(b"part1"))
    c.send(b"part2")
    assert answer(c)[0] == 200
    assert wait_until(lambda: log.exists() and log.read_text().strip(), scaled(10))
    assert log.read_text().split() == [str(len(h) + 10)]
