"""The server under valgrind (memcheck) serving HTTPS: no invalid access, no use of
uninitialised memory, no leak, and OpenSSL's own allocations freed at shutdown.

The session: full handshakes in TLS 1.3 and 1.2, resumed ones (by ticket in both, and by
session ID from the session cache with a client that offers no ticket), keep-alive
requests, a 1 MiB file (its body goes through the per-thread buffer and TLS records), a
plain HTTP request on the TLS port (400), a ClientHello cut short and garbage in a
handshake record (closed), a reload with a new certificate (new connections get it, the
old generation's TLS state is freed), a TLS keep-alive connection left open, then
SIGTERM and a graceful exit.

valgrind runs as in test_hostile_valgrind.py (--leak-check=full,
--errors-for-leak-kinds=definite,indirect, --error-exitcode=99): its exit status and its
report must be clean, and no block still reachable at exit may have been allocated by
libssl or libcrypto (OpenSSL frees its global state at exit; a server that left an SSL
object, a context or a session behind would show it there). Skipped for sanitizer builds
(valgrind cannot run them), by design; when valgrind is missing it is installed with
apt-get as there.
"""
import hashlib
import os
import re
import signal
import socket
import ssl
import subprocess

import pytest

from conftest import BY_DESIGN, SANITIZED, wait_until
from test_hostile_valgrind import _have_valgrind, _valgrind_cannot_run_the_binary

BIG = os.urandom(1 << 20)
SMALL = b"0123456789abcdef\n"
# Valgrind runs the server 20-50 times slower: every wait here is generous.
SLOW = 60.0


def make_cert(d, name):
    crt, key = d / f"{name}.pem", d / f"{name}.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec",
                    "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "30",
                    "-subj", f"/CN=localhost/O={name}",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(crt)],
                   check=True, capture_output=True)
    return crt, key


def conf(docroot, tmp_path, crt, key):
    return ("listen 127.0.0.1:0 ssl;\n"
            f'ssl_certificate "{crt}";\n'
            f'ssl_certificate_key "{key}";\n'
            f'root "{docroot}";\n'
            "threads 2;\n"
            f'access_log "{tmp_path}/access.log";\n'
            "error_log stderr info;\n"
            "header_timeout 10s;\n"
            "shutdown_timeout 5s;\n")


def context(cafile, version=None, tickets=True):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(cafile=str(cafile))
    if version:
        ctx.minimum_version = ctx.maximum_version = version
    if not tickets:
        ctx.options |= ssl.OP_NO_TICKET
    return ctx


def fetch(server, ctx, paths, session=None):
    """GET each path on one TLS connection (keep-alive, the last one closes): returns
    (the bodies, the TLS socket's session, whether it was resumed, the server's
    certificate in DER)."""
    raw = socket.create_connection((server.host, server.port), timeout=SLOW)
    with ctx.wrap_socket(raw, server_hostname="localhost", session=session) as s:
        f = s.makefile("rb")
        bodies = []
        for i, path in enumerate(paths):
            last = i == len(paths) - 1
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: localhost\r\n"
                      f"{'Connection: close' if last else ''}\r\n\r\n".encode())
            status = f.readline()
            assert status.startswith(b"HTTP/1.1 200 "), status
            length = None
            while True:
                line = f.readline()
                if line in (b"\r\n", b""):
                    break
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            bodies.append(f.read(length))
        return bodies, s.session, s.session_reused, s.getpeercert(binary_form=True)


def closed_soon(server, data):
    """Send raw bytes on a new connection (then FIN) and read until the server closes."""
    so = socket.create_connection((server.host, server.port), timeout=SLOW)
    try:
        so.sendall(data)
        so.shutdown(socket.SHUT_WR)
        got = b""
        while True:
            try:
                b = so.recv(65536)
            except ConnectionResetError:
                break
            if not b:
                break
            got += b
        return got
    finally:
        so.close()


def openssl_blocks(report):
    """The loss records valgrind printed (all kinds) whose stacks go through libssl or
    libcrypto."""
    records = re.split(r"==\d+== \n", report)
    return [r for r in records if "are still reachable" in r or "lost in loss record" in r
            if "libssl" in r or "libcrypto" in r]


def test_valgrind_reports_no_errors_and_no_leaks_serving_https(start_server, docroot,
                                                               tmp_path):
    if SANITIZED:
        pytest.skip("a sanitizer build cannot run under valgrind " + BY_DESIGN)
    ok, why = _have_valgrind()
    if not ok:
        pytest.skip(why)
    why = _valgrind_cannot_run_the_binary()
    if why:
        pytest.fail(why, pytrace=False)
    (docroot / "f.txt").write_bytes(SMALL)
    (docroot / "big.bin").write_bytes(BIG)
    first = make_cert(tmp_path, "first")
    second = make_cert(tmp_path, "second")
    vlog = tmp_path / "valgrind.log"
    s = start_server(
        docroot, conf=conf(docroot, tmp_path, *first),
        wrap=("valgrind", "--leak-check=full", "--errors-for-leak-kinds=definite,indirect",
              "--show-leak-kinds=all", "--error-exitcode=99", "--trace-children=no",
              "--num-callers=30", f"--log-file={vlog}"))

    # full handshakes, then resumed ones: tickets in 1.3 and 1.2, session IDs in 1.2
    for version in (ssl.TLSVersion.TLSv1_3, ssl.TLSVersion.TLSv1_2):
        ctx = context(first[0], version)
        bodies, sess, reused, _ = fetch(s, ctx, ["/f.txt", "/f.txt", "/big.bin"])
        assert not reused and bodies[:2] == [SMALL, SMALL]
        assert hashlib.sha256(bodies[2]).digest() == hashlib.sha256(BIG).digest()
        bodies, _, reused, _ = fetch(s, ctx, ["/f.txt"], session=sess)
        assert reused, f"{version}: not resumed by ticket"
    ctx = context(first[0], ssl.TLSVersion.TLSv1_2, tickets=False)
    _, sess, reused, _ = fetch(s, ctx, ["/f.txt"])
    assert not reused
    _, _, reused, _ = fetch(s, ctx, ["/f.txt"], session=sess)
    assert reused, "not resumed by session ID"

    # a plain request on the TLS port, a ClientHello cut short, garbage in a record
    assert closed_soon(s, b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").startswith(b"HTTP/1.1 400")
    raw = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = context(first[0]).wrap_bio(*raw, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        obj.do_handshake()
    hello = raw[1].read()
    closed_soon(s, hello[:len(hello) // 2])
    closed_soon(s, b"\x16\x03\x01\x00\x40" + bytes(range(64)))

    # a reload with a new certificate: new connections get it
    _, _, _, der_before = fetch(s, context(first[0]), ["/f.txt"])
    with open(s.conf_path, "w") as f:
        f.write(conf(docroot, tmp_path, *second))
    before = len(s.error_log())
    s.proc.send_signal(signal.SIGHUP)
    assert wait_until(lambda: "configuration reloaded" in s.error_log()[before:], SLOW), \
        s.error_log()[before:]
    _, _, _, der_after = fetch(s, context(second[0]), ["/f.txt", "/big.bin"])
    assert der_after != der_before

    # a TLS keep-alive connection left open at shutdown
    idle = context(second[0]).wrap_socket(
        socket.create_connection((s.host, s.port), timeout=SLOW), server_hostname="localhost")
    idle.sendall(b"GET /f.txt HTTP/1.1\r\nHost: localhost\r\n\r\n")
    assert idle.recv(65536).startswith(b"HTTP/1.1 200 ")

    s.proc.send_signal(signal.SIGTERM)
    try:
        code = s.proc.wait(timeout=90)
    except subprocess.TimeoutExpired:
        s.proc.kill()
        pytest.fail("lfhttpd under valgrind did not exit within 90 s of SIGTERM")
    finally:
        idle.close()
    report = vlog.read_text()
    summary = re.findall(r"ERROR SUMMARY: (\d+) errors", report)
    lost = re.findall(r"(definitely|indirectly) lost: ([\d,]+) bytes", report)
    reachable = re.findall(r"still reachable: ([\d,]+) bytes", report)
    print("\nvalgrind:", summary[-1:] if summary else "?", lost, "still reachable", reachable)
    assert code != 99, "valgrind found errors:\n" + report[-8000:]
    assert code == 0, f"exit {code}\n" + report[-4000:]
    assert summary and summary[-1] == "0", report[-8000:]
    for kind, n in lost:
        assert n == "0", f"{kind} lost {n} bytes:\n" + report[-8000:]
    left = openssl_blocks(report)
    assert not left, "OpenSSL's allocations left at exit:\n" + "\n".join(left)[-8000:]
