"""TLS on the connection's own events: what OpenSSL holds between events.

OpenSSL reads ahead: one read can bring a record and what follows it. The handle set is
edge-triggered, so records OpenSSL already holds are never announced by the kernel and
must be read before the connection waits; the start of a record whose rest has not come
yet, on the other hand, is announced by the rest, and must not keep a thread busy. The
client here is Python's ssl module over memory buffers, so that the test chooses how the
encrypted bytes are cut into TCP sends.
"""
import os
import socket
import ssl
import subprocess
import time

import pytest

from conftest import scaled


STRATEGIES = {
    "leader_followers": "",
    "leader_followers_oneshot": "reactivation oneshot;\n",
    "half_sync_half_async": "concurrency half_sync_half_async;\n",
    "thread_per_connection": "concurrency thread_per_connection;\n",
}


@pytest.fixture(params=["leader_followers"])
def strategy(request):
    return request.param


@pytest.fixture
def tls_server(start_server, docroot, tmp_path, strategy):
    key, crt = str(tmp_path / "k.pem"), str(tmp_path / "c.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-days", "2", "-subj", "/CN=localhost",
                    "-keyout", key, "-out", crt], check=True, capture_output=True)
    conf = (f"listen 127.0.0.1:0 ssl;\nroot \"{docroot}\";\nthreads 2;\n"
            f"ssl_certificate {crt};\nssl_certificate_key {key};\n"
            f"error_log stderr info;\naccess_log off;\n" + STRATEGIES[strategy])
    return start_server(docroot, conf=conf)


class MemoryClient:
    """A TLS client whose encrypted bytes the test sends itself."""

    def __init__(self, server):
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        self.inc, self.out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = ctx.wrap_bio(self.inc, self.out, server_hostname="localhost")
        self.sock = socket.create_connection((server.host, server.port), timeout=scaled(5))
        while True:
            try:
                self.tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                self.flush()
                self.inc.write(self.sock.recv(65536))
        self.flush()
        self.got = b""

    def flush(self):
        data = self.out.read()
        if data:
            self.sock.sendall(data)

    def record(self, plain):
        """The encrypted bytes of plain (one record, up to 16 KiB), not yet sent."""
        self.tls.write(plain)
        return self.out.read()

    def read_until(self, count, marker=b"HTTP/1.1 200", timeout=5.0):
        """Read until marker has been seen count times; returns how many were."""
        deadline = time.time() + scaled(timeout)
        while self.got.count(marker) < count and time.time() < deadline:
            self.sock.settimeout(max(0.05, deadline - time.time()))
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                break
            if not data:
                break
            self.inc.write(data)
            try:
                while True:
                    chunk = self.tls.read(65536)
                    if not chunk:
                        break
                    self.got += chunk
            except ssl.SSLWantReadError:
                pass
        return self.got.count(marker)


def cpu_ticks(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


GET = b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n"


def test_a_record_arriving_in_pieces_is_waited_for_without_spinning(tls_server, docroot):
    (docroot / "index.html").write_text("hello")
    c = MemoryClient(tls_server)
    rec = c.record(GET)
    c.sock.sendall(rec[:10])
    time.sleep(0.2)
    before = cpu_ticks(tls_server.proc.pid)
    time.sleep(2)
    spent = cpu_ticks(tls_server.proc.pid) - before
    c.sock.sendall(rec[10:])
    assert c.read_until(1) == 1
    assert spent < 30, f"{spent / 100:.2f} s of CPU while half a record was awaited"


@pytest.mark.parametrize("strategy", list(STRATEGIES), indirect=True)
def test_records_that_arrive_together_are_all_answered(tls_server, docroot):
    (docroot / "index.html").write_text("hello")
    c = MemoryClient(tls_server)
    # Three records in one send: OpenSSL reads them ahead at once, and no socket event
    # announces the second and third (neither a new edge nor a one-shot re-arm).
    c.sock.sendall(c.record(GET) + c.record(GET) + c.record(GET))
    assert c.read_until(3, timeout=3) == 3


@pytest.mark.parametrize("strategy", list(STRATEGIES), indirect=True)
def test_a_request_split_across_records_is_answered(tls_server, docroot):
    (docroot / "index.html").write_text("hello")
    c = MemoryClient(tls_server)
    c.sock.sendall(c.record(GET[:7]) + c.record(GET[7:20]) + c.record(GET[20:]))
    assert c.read_until(1) == 1
