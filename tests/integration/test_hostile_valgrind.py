"""The server under valgrind (memcheck): no invalid access, no use of uninitialised
memory, no leak, over a session that touches every part: static files, ranges (single and
multipart), conditionals, gzip (compressed once, then from the cache), the echo handler
with a chunked body, a CGI script with a body, directory listings, pipelining, errors
(400, 404, 405, 413), a 408 from the deadline sweep, a client reset in the middle of a
response, then SIGTERM and a graceful exit.

valgrind runs with --leak-check=full --errors-for-leak-kinds=definite,indirect
--error-exitcode=99: its exit status and its report both must be clean. Valgrind is slow
(the server runs ~20-50 times slower), so every wait here is generous. Skipped when
valgrind is absent (installed with apt-get when the tests run as root) and for sanitizer
builds (valgrind cannot run them). When valgrind cannot run the binary at all (Debian 12's
valgrind 3.19 gives up on the DWARF 5 debug information clang 14 writes), the test fails
with valgrind's own words, before any server starts.
"""
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import time

import pytest

from conftest import BIN, BY_DESIGN, SANITIZED

TEXT = ("lfhttpd under valgrind. " * 200).encode()


def _have_valgrind():
    if shutil.which("valgrind"):
        return True, ""
    if os.geteuid() != 0:
        return False, "valgrind missing; run: sudo apt-get install -y valgrind"
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, timeout=300)
    try:  # with the package lists as they are, else after an update
        if subprocess.run(["apt-get", "install", "-y", "-qq", "valgrind"], **quiet).returncode:
            subprocess.run(["apt-get", "update", "-qq"], **quiet)
            subprocess.run(["apt-get", "install", "-y", "-qq", "valgrind"], check=True, **quiet)
    except (subprocess.SubprocessError, OSError) as e:
        return False, f"valgrind missing and apt-get install failed: {e}"
    return bool(shutil.which("valgrind")), "valgrind not found after install"


def _valgrind_cannot_run_the_binary():
    """None when valgrind runs `lfhttpd -V` as the binary alone would; else why not, in
    valgrind's words."""
    r = subprocess.run(["valgrind", "-q", "--error-exitcode=99", BIN, "-V"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       errors="replace", timeout=120)
    if r.returncode == 0 and r.stdout.startswith("lfhttpd "):
        return None
    why = f"valgrind cannot run {BIN} (`valgrind {BIN} -V` exited {r.returncode}):\n"
    if "dwarf" in r.stdout.lower() or "debuginfo" in r.stdout:
        why += ("it cannot read the binary's debug information (DWARF 5, as clang writes "
                "by default, is too new for valgrind 3.19): build with gcc, or add "
                "-gdwarf-4 to CFLAGS (the Makefile's defaults do both)\n")
    return why + r.stdout[-3000:]


def roundtrip(server, raw, timeout=20.0, n=1, head_only=False):
    """Send raw bytes on a new connection; read n responses (Client framing)."""
    c = server.connect(timeout=timeout)
    try:
        c.send(raw)
        return [c.read_response(timeout=timeout, head_only=head_only) for _ in range(n)]
    finally:
        c.close()


def test_valgrind_reports_no_errors_and_no_leaks(start_server, docroot, tmp_path):
    if SANITIZED:
        pytest.skip("a sanitizer build cannot run under valgrind " + BY_DESIGN)
    ok, why = _have_valgrind()
    if not ok:
        pytest.skip(why)
    why = _valgrind_cannot_run_the_binary()
    if why:
        pytest.fail(why, pytrace=False)
    (docroot / "f.txt").write_bytes(b"0123456789abcdef\n")
    (docroot / "page.html").write_bytes(b"<!DOCTYPE html><title>t</title>" + TEXT)
    (docroot / "app.js").write_bytes(TEXT)
    (docroot / "big.bin").write_bytes(os.urandom(3 << 20))
    (docroot / "dir").mkdir()
    (docroot / "dir" / "a.txt").write_bytes(b"a\n")
    cgi = tmp_path / "cgi"
    cgi.mkdir()
    script = cgi / "env.sh"
    script.write_text("#!/bin/sh\nprintf 'Content-Type: text/plain\\nX-Script: yes\\n\\n'\n"
                      "printf 'method=%s len=%s\\n' \"$REQUEST_METHOD\" \"$CONTENT_LENGTH\"\n"
                      "cat\n")
    script.chmod(0o755)
    vlog = tmp_path / "valgrind.log"
    s = start_server(
        docroot,
        "handler /echo echo;\nhandler /status status;\nautoindex on;\ngzip on;\n"
        f'cgi /cgi-bin/ "{cgi}";\nheader_timeout 3s;\nmax_body_size 64k;\nthreads 2;\n',
        wrap=("valgrind", "--leak-check=full", "--errors-for-leak-kinds=definite,indirect",
              "--show-leak-kinds=definite,indirect", "--error-exitcode=99",
              "--trace-children=no", "--num-callers=30", f"--log-file={vlog}"))

    # static, conditionals, ranges
    st, h, body, _ = roundtrip(s, b"GET /f.txt HTTP/1.1\r\nHost: t\r\n\r\n")[0]
    assert st == 200 and body == b"0123456789abcdef\n"
    etag = h["etag"]
    assert roundtrip(s, b"GET /f.txt HTTP/1.1\r\nHost: t\r\nIf-None-Match: " + etag.encode()
                     + b"\r\n\r\n")[0][0] == 304
    st, h, body, _ = roundtrip(s, b"GET /big.bin HTTP/1.1\r\nHost: t\r\nRange: bytes=10-19\r\n\r\n")[0]
    assert st == 206 and len(body) == 10
    st, h, body, _ = roundtrip(s, b"GET /big.bin HTTP/1.1\r\nHost: t\r\n"
                               b"Range: bytes=0-9,100-199,-5\r\n\r\n")[0]
    assert st == 206 and "multipart/byteranges" in h["content-type"]
    assert roundtrip(s, b"GET /f.txt HTTP/1.1\r\nHost: t\r\nRange: bytes=999-\r\n\r\n")[0][0] == 416
    # gzip: compressed, then from the cache; HEAD
    for _ in range(2):
        st, h, body, _ = roundtrip(s, b"GET /page.html HTTP/1.1\r\nHost: t\r\n"
                                   b"Accept-Encoding: gzip\r\n\r\n")[0]
        assert st == 200 and h.get("content-encoding") == "gzip"
    st, h, _, _ = roundtrip(s, b"HEAD /app.js HTTP/1.1\r\nHost: t\r\nAccept-Encoding: gzip\r\n\r\n",
                            head_only=True)[0]
    assert st == 200
    # echo with a chunked body, in one piece and across reads
    st, _, body, _ = roundtrip(s, b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n"
                               b"\r\n5;x=y\r\nhello\r\n6\r\n world\r\n0\r\nX-T: 1\r\n\r\n")[0]
    assert st == 200 and body == b"hello world"
    c = s.connect(timeout=20)
    c.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n")
    time.sleep(0.3)
    c.send(b"4000\r\n" + b"x" * 0x4000 + b"\r\n")
    time.sleep(0.3)
    c.send(b"0\r\n\r\n")
    st, _, body, _ = c.read_response(timeout=20)
    assert st == 200 and body == b"x" * 0x4000
    c.close()
    # CGI with a body
    st, h, body, _ = roundtrip(s, b"POST /cgi-bin/env.sh HTTP/1.1\r\nHost: t\r\n"
                               b"Content-Length: 5\r\n\r\nabcde")[0]
    assert st == 200 and b"method=POST len=5" in body and body.endswith(b"abcde")
    # listings, status
    assert roundtrip(s, b"GET /dir/ HTTP/1.1\r\nHost: t\r\n\r\n")[0][0] == 200
    assert roundtrip(s, b"GET /dir/?format=json HTTP/1.1\r\nHost: t\r\n\r\n")[0][0] == 200
    assert roundtrip(s, b"GET /status?format=json HTTP/1.1\r\nHost: t\r\n\r\n")[0][0] == 200
    # pipelining, with errors among the requests
    pipe = (b"GET /f.txt HTTP/1.1\r\nHost: t\r\n\r\n"
            b"GET /missing HTTP/1.1\r\nHost: t\r\n\r\n"
            b"DELETE /f.txt HTTP/1.1\r\nHost: t\r\n\r\n"
            b"GET /dir HTTP/1.1\r\nHost: t\r\n\r\n"
            b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc"
            b"GET /f.txt HTTP/1.1\r\nHost: t\r\n\r\n")
    statuses = [r[0] for r in roundtrip(s, pipe, n=6)]
    assert statuses == [200, 404, 405, 301, 200, 200], statuses
    # errors that close: malformed, too large
    assert roundtrip(s, b"GET /f.txt HTTP/1.1\r\nHost: t\r\nX-A : b\r\n\r\n")[0][0] == 400
    assert roundtrip(s, b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 999999\r\n\r\n")[0][0] == 413
    assert roundtrip(s, b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: t\r\n\r\n")[0][0] == 414
    # a 408: half a head, then nothing
    c = s.connect(timeout=30)
    c.send(b"GET /f.txt HTTP/1.1\r\nHo")
    st, _, _, _ = c.read_response(timeout=30)
    assert st == 408
    c.close()
    # a client that resets in the middle of a large response
    so = socket.create_connection((s.host, s.port), timeout=20)
    so.sendall(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n")
    got = 0
    while got < 100000:
        b = so.recv(65536)
        assert b
        got += len(b)
    so.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    so.close()
    # a keep-alive connection left open at shutdown
    idle = s.connect(timeout=20)
    idle.send(b"GET /f.txt HTTP/1.1\r\nHost: t\r\n\r\n")
    assert idle.read_response(timeout=20)[0] == 200

    s.proc.send_signal(signal.SIGTERM)
    try:
        code = s.proc.wait(timeout=90)
    except subprocess.TimeoutExpired:
        s.proc.kill()
        pytest.fail("lfhttpd under valgrind did not exit within 90 s of SIGTERM")
    idle.close()
    report = vlog.read_text()
    summary = re.findall(r"ERROR SUMMARY: (\d+) errors", report)
    lost = re.findall(r"(definitely|indirectly) lost: ([\d,]+) bytes", report)
    print("\nvalgrind:", summary[-1:] if summary else "?", lost)
    assert code != 99, "valgrind found errors:\n" + report[-8000:]
    assert code == 0, f"exit {code}\n" + report[-4000:]
    assert summary and summary[-1] == "0", report[-8000:]
    for kind, n in lost:
        assert n == "0", f"{kind} lost {n} bytes:\n" + report[-8000:]
