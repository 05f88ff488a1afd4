"""Operating the server: configuration checking (-t), command-line overrides, the access log
(Combined Log Format, no log injection) and graceful shutdown on SIGTERM / SIGINT.
"""
import os
import re
import signal
import socket
import subprocess
import time
from datetime import datetime, timezone

import pytest

from conftest import BIN, ROOT, past_buffers, scaled, sparse_file, wait_until

FILE_BODY = b"hello"
GOOD = b"GET /f.txt HTTP/1.1\r\nHost: t\r\n\r\n"


# ---------------------------------------------------------------- helpers


@pytest.fixture
def site(start_server, docroot):
    (docroot / "f.txt").write_bytes(FILE_BODY)
    return start_server(docroot)


# An address no host has (TEST-NET-1, RFC 5737): a server that binds it fails to start.
UNBINDABLE = "192.0.2.1:9"


def whole_conf(docroot, listen="127.0.0.1:0", extra=""):
    """A configuration of the test's own, for settings the fixture's text already has (a
    directive may be given once)."""
    return f'listen {listen};\nroot "{docroot}";\nthreads 2;\naccess_log off;\n' + extra


def bound_ports(server):
    """The loopback ports the server reports bound, read once its start is complete (the
    line that says what it serves comes after every listener's)."""
    assert wait_until(lambda: re.search(r"lfhttpd \S+ serving ", server.error_log()),
                      scaled(10)), server.error_log()
    return [int(p) for p in re.findall(r"listening on 127\.0\.0\.1:(\d+)", server.error_log())]


def fetch(server, path="/f.txt", extra=b""):
    c = server.connect()
    try:
        c.send(b"GET " + path.encode() + b" HTTP/1.1\r\nHost: t\r\nConnection: close\r\n" + extra + b"\r\n")
        return c.read_response()
    finally:
        c.close()


def check_config(tmp_path, text, name="test.conf"):
    path = tmp_path / name
    path.write_text(text)
    p = subprocess.run([BIN, "-t", "-c", str(path)], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=10, cwd=str(tmp_path))
    return p.returncode, p.stdout.decode("latin-1"), str(path)


# ---------------------------------------------------------------- configuration check (-t)


def valid_conf(tmp_path):
    www = tmp_path / "www"
    www.mkdir(exist_ok=True)
    return (
        "# a comment line\n"
        "listen 127.0.0.1:0;   # trailing comment\n"
        f'root "{www}";\n'
        "threads 2;\n"
        "index index.html index.htm;\n"
        "max_connections 100;\n"
        "max_header_size 8k;\n"
        "max_headers 64;\n"
        "max_body_size 1m;\n"
        "header_timeout 500ms;\n"
        "keepalive_timeout 1m;\n"
        "send_timeout 30;\n"
        "keepalive_requests 0;\n"
        "shutdown_timeout 1h;\n"
        f'access_log "{tmp_path}/a b#c.log";\n'
        "error_log stderr warn;\n"
        "server_tokens off;\n"
    )


def test_config_check_valid_file_exits_0(tmp_path):
    """`lfhttpd -t -c FILE` on a valid file (every directive, comments, quoted values with a
    space and `#`, every size and duration suffix) exits 0."""
    code, out, _ = check_config(tmp_path, valid_conf(tmp_path))
    assert code == 0, out


def test_config_check_shipped_config_is_valid():
    """The default conf/lfhttpd.conf passes -t (from the repository root, as `make run`)."""
    p = subprocess.run([BIN, "-t", "-c", "conf/lfhttpd.conf"], cwd=ROOT, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=10)
    assert p.returncode == 0, p.stdout.decode("latin-1")


BAD_LINE3 = {
    "unknown-directive": "frobnicate on;",
    "bad-number": "threads abc;",
    "negative-number": "threads -1;",
    "bad-size-suffix": "max_body_size 10q;",
    "bad-duration": "header_timeout soon;",
    "bad-flag": "server_tokens maybe;",
    "port-out-of-range": "listen 127.0.0.1:99999;",
    "bad-log-level": "error_log stderr loud;",
    "too-many-arguments": "threads 1 2;",
    "missing-argument": "root;",
    "stray-closing-brace": "}",
}


@pytest.mark.parametrize("line", BAD_LINE3.values(), ids=BAD_LINE3.keys())
def test_config_check_error_names_file_and_line(tmp_path, line):
    """An invalid line 3 → exit 1 and a message `FILE:3:`."""
    www = tmp_path / "www"
    www.mkdir()
    text = f'listen 127.0.0.1:0;\nroot "{www}";\n{line}\nthreads 2;\n'
    code, out, path = check_config(tmp_path, text)
    assert code == 1, out
    assert f"{path}:3:" in out, out


@pytest.mark.parametrize(
    "text,lines",
    [
        ("listen 127.0.0.1:0;\nroot /tmp;\nthreads 4\nmax_headers 64;\n", (3, 4)),
        ("listen 127.0.0.1:0;\nroot /tmp;\nthreads 4\n", (3, 4)),
        ("listen 127.0.0.1:0;\nroot /tmp;\nblock {\nthreads 4;\n", (3, 4, 5)),
        ('listen 127.0.0.1:0;\nroot "/tmp;\nthreads 4;\n', (2, 3, 4)),
    ],
    ids=["missing-semicolon", "missing-semicolon-at-eof", "unclosed-brace", "unterminated-quote"],
)
def test_config_check_syntax_error_names_file_and_line(tmp_path, text, lines):
    """Syntax errors (missing `;`, unbalanced braces, unterminated quote) → exit 1 and a
    message `FILE:LINE:` with the line of the error (or of the end where it is detected)."""
    code, out, path = check_config(tmp_path, text)
    assert code == 1, out
    m = re.search(re.escape(path) + r":(\d+):", out)
    assert m, out
    assert int(m.group(1)) in lines, out


def test_missing_config_file_is_an_error(tmp_path):
    """-c naming a file that does not exist: exit status non-zero, with a message."""
    p = subprocess.run([BIN, "-t", "-c", str(tmp_path / "nope.conf")], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=10)
    assert p.returncode != 0
    assert p.stdout.strip(), "no message"


@pytest.mark.parametrize("flag", ["-h", "-V"])
def test_help_and_version_exit_0(flag):
    """-h (usage) and -V (version) print something naming lfhttpd and exit 0."""
    p = subprocess.run([BIN, flag], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=10)
    assert p.returncode == 0, p.stdout
    assert b"lfhttpd" in p.stdout, p.stdout


def test_unknown_option_is_an_error():
    """An unknown option is refused (non-zero exit), the server does not start."""
    p = subprocess.run([BIN, "-Z"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=10)
    assert p.returncode != 0


# ---------------------------------------------------------------- command-line overrides


def test_root_option_replaces_configured_root(start_server, docroot, tmp_path):
    """-r DIR replaces `root`."""
    (docroot / "f.txt").write_bytes(b"from conf root")
    other = tmp_path / "other"
    other.mkdir()
    (other / "f.txt").write_bytes(b"from -r root")
    s = start_server(docroot, args=("-r", str(other)))
    st, _, body, head = fetch(s)
    assert st == 200, head
    assert body == b"from -r root"


def test_listen_option_replaces_configured_listen(start_server, docroot):
    """-l ADDR:PORT replaces every `listen`: the configured address, one the server could
    not bind, is not tried, and the one given is the only one bound (port 0: the kernel
    picks a free port, the server logs it)."""
    (docroot / "f.txt").write_bytes(FILE_BODY)
    s = start_server(docroot, conf=whole_conf(docroot, listen=UNBINDABLE),
                     args=("-l", "127.0.0.1:0"))
    assert bound_ports(s) == [s.port], s.error_log()
    assert len(re.findall(r"listening on ", s.error_log())) == 1, s.error_log()
    assert fetch(s)[2] == FILE_BODY


def test_listen_option_is_repeatable(start_server, docroot):
    """-l twice: both addresses are served."""
    (docroot / "f.txt").write_bytes(FILE_BODY)
    s = start_server(docroot, conf=whole_conf(docroot, listen=UNBINDABLE),
                     args=("-l", "127.0.0.1:0", "-l", "127.0.0.1:0"))
    ports = bound_ports(s)
    assert len(set(ports)) == 2, s.error_log()
    for port in ports:
        s.port = port
        assert fetch(s)[2] == FILE_BODY


def test_ipv6_listen(start_server, docroot):
    """`listen [::1]:0;` serves over IPv6."""
    try:
        socket.socket(socket.AF_INET6).bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback")
    (docroot / "f.txt").write_bytes(FILE_BODY)
    s = start_server(docroot, conf=f'listen [::1]:0;\nroot "{docroot}";\nthreads 2;\n'
                     'access_log off;\n')
    st, _, body, head = fetch(s)
    assert st == 200 and body == FILE_BODY, head


@pytest.mark.parametrize("tokens,expect", [("on", r"^lfhttpd/\S+$"), ("off", r"^lfhttpd$")])
def test_server_tokens(start_server, docroot, tokens, expect):
    """server_tokens on → `Server: lfhttpd/VERSION`; off → `Server: lfhttpd`
    (RFC 9110 10.2.4)."""
    (docroot / "f.txt").write_bytes(FILE_BODY)
    s = start_server(docroot, f"server_tokens {tokens};\n")
    _, h, _, head = fetch(s)
    assert re.match(expect, h.get("server", "")), head


# ---------------------------------------------------------------- access log

CLF = re.compile(
    r'^(?P<host>\S+) (?P<ident>\S+) (?P<user>\S+) \[(?P<time>\d{2}/[A-Z][a-z]{2}/\d{4}:\d{2}:\d{2}:\d{2} [+-]\d{4})\] '
    r'"(?P<request>(?:[^"\\]|\\.)*)" (?P<status>\d{3}) (?P<bytes>\d+|-) '
    r'"(?P<referer>(?:[^"\\]|\\.)*)" "(?P<ua>(?:[^"\\]|\\.)*)"$'
)


def log_lines(server):
    return [l for l in server.access_log().split("\n") if l]


def wait_lines(server, n, timeout=3.0):
    return wait_until(lambda: len(log_lines(server)) >= n and log_lines(server), timeout) or log_lines(server)


def unescape(s):
    """Undo \\" \\\\ and \\xHH escapes (the usual access-log escaping)."""
    return re.sub(r'\\x([0-9a-fA-F]{2})|\\(.)',
                  lambda m: chr(int(m.group(1), 16)) if m.group(1) else m.group(2), s)


def test_access_log_line_is_combined_log_format(site, connect):
    """One line per request: `host - - [dd/Mon/yyyy:HH:MM:SS zone] "request line" status bytes
    "referer" "user-agent"`, with the time of the request."""
    c = connect(site)
    c.send(b"GET /f.txt?x=1 HTTP/1.1\r\nHost: t\r\nReferer: http://ref.example/p\r\n"
           b"User-Agent: test-agent/1.0\r\n\r\n")
    assert c.read_response()[0] == 200
    lines = wait_lines(site, 1)
    assert len(lines) == 1, lines
    m = CLF.match(lines[0])
    assert m, lines[0]
    assert m["host"] == "127.0.0.1"
    assert (m["ident"], m["user"]) == ("-", "-")
    assert m["request"] == "GET /f.txt?x=1 HTTP/1.1"
    assert m["status"] == "200"
    assert m["bytes"] == "5"
    assert m["referer"] == "http://ref.example/p"
    assert m["ua"] == "test-agent/1.0"
    t = datetime.strptime(m["time"], "%d/%b/%Y:%H:%M:%S %z")
    assert abs(t.timestamp() - datetime.now(timezone.utc).timestamp()) < 60


def test_access_log_missing_referer_and_user_agent_are_dashes(site, connect):
    """Absent Referer / User-Agent are logged as "-"."""
    c = connect(site)
    c.send(GOOD)
    c.read_response()
    lines = wait_lines(site, 1)
    m = CLF.match(lines[0])
    assert m, lines
    assert (m["referer"], m["ua"]) == ("-", "-")


def test_access_log_records_error_status(site, connect):
    """A 404 and a 405 are logged with their status."""
    c = connect(site)
    c.send(b"GET /missing HTTP/1.1\r\nHost: t\r\n\r\nDELETE /f.txt HTTP/1.1\r\nHost: t\r\n\r\n")
    c.read_response()
    c.read_response()
    lines = wait_lines(site, 2)
    statuses = [CLF.match(l)["status"] for l in lines if CLF.match(l)]
    assert statuses == ["404", "405"], lines


def test_access_log_one_line_per_pipelined_request_in_order(site, connect):
    """20 pipelined requests → 20 lines, in request order."""
    c = connect(site)
    c.send(b"".join(b"GET /f.txt?n=%d HTTP/1.1\r\nHost: t\r\n\r\n" % i for i in range(20)))
    for _ in range(20):
        c.read_response()
    lines = wait_lines(site, 20)
    assert [CLF.match(l)["request"] for l in lines] == [
        "GET /f.txt?n=%d HTTP/1.1" % i for i in range(20)], lines


def test_access_log_is_flushed_while_running(site, connect):
    """Lines are written at least once a second: visible within 2.5 s, no shutdown needed."""
    c = connect(site)
    c.send(GOOD)
    c.read_response()
    assert wait_until(lambda: log_lines(site), 2.5), "no access log line after 2.5 s"
    assert site.proc.poll() is None


def test_access_log_is_flushed_at_shutdown(site, connect):
    """Lines buffered when SIGTERM arrives are written before the process exits."""
    c = connect(site)
    c.send(b"GET /f.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\nUser-Agent: at-shutdown\r\n\r\n")
    c.read_response()
    site.proc.send_signal(signal.SIGTERM)
    assert site.proc.wait(10) == 0
    assert any('"at-shutdown"' in l for l in log_lines(site)), site.access_log()


def test_access_log_escapes_quotes_in_user_agent(site, connect):
    """A User-Agent with quotes (valid VCHARs, RFC 9110 5.5) shaped like the end of a log
    line cannot forge fields: the line still parses and the UA unescapes to what was sent."""
    ua = 'evil" 200 5 "http://forged" "forged-agent'
    c = connect(site)
    c.send(b"GET /f.txt HTTP/1.1\r\nHost: t\r\nUser-Agent: " + ua.encode() + b"\r\n\r\n")
    assert c.read_response()[0] == 200
    lines = wait_lines(site, 1)
    assert len(lines) == 1, lines
    m = CLF.match(lines[0])
    assert m, lines[0]
    assert m["status"] == "200" and m["referer"] == "-"
    assert unescape(m["ua"]) == ua


def test_access_log_cannot_be_injected_through_request_line(site, connect):
    """Quotes and control bytes in request lines and fields (which the server rejects or
    serves) never produce extra or malformed log lines: every line parses as CLF, there is
    at most one line per request, and the file has no raw control bytes."""
    nasty = [
        b'GET /f.txt?a="b" HTTP/1.1\r\nHost: t\r\n\r\n',
        b'GET /x"y HTTP/1.1\r\nHost: t\r\n\r\n',
        b"GET /f.txt?\x1b[31mred HTTP/1.1\r\nHost: t\r\n\r\n",
        b"GET /f.txt HTTP/1.1\r\nHost: t\r\nUser-Agent: a\x1b]0;title\x07b\r\n\r\n",
        b"GET /f.txt HTTP/1.1\r\nHost: t\r\nUser-Agent: bell\x07\x08\r\n\r\n",
        b"GET /f.txt HTTP/1.1\r\nHost: t\r\nUser-Agent: a\\\"b\r\n\r\n",
        b"GET /f.txt HTTP/1.1\r\nHost: t\r\nReferer: x\" 1 2 \"y\r\n\r\n",
        b"G\"ET /f.txt HTTP/1.1\r\nHost: t\r\n\r\n",
    ]
    for raw in nasty:
        c = connect(site)
        c.send(raw)
        c.recv_all(timeout=0.5)
        c.close()
    site.proc.send_signal(signal.SIGTERM)
    site.proc.wait(10)
    data = b""
    if os.path.exists(site.access_path):
        with open(site.access_path, "rb") as f:
            data = f.read()
    assert not re.search(rb"[\x00-\x09\x0b-\x1f\x7f]", data), data
    lines = [l for l in data.decode("latin-1").split("\n") if l]
    assert len(lines) <= len(nasty), lines
    for l in lines:
        assert CLF.match(l), l


def test_access_log_off_writes_nothing(start_server, docroot, tmp_path):
    """`access_log off;` (and no other access_log): nothing on stdout (the default
    destination), no file created (say, one named "off" in the working directory)."""
    (docroot / "f.txt").write_bytes(FILE_BODY)
    s = start_server(docroot, conf=f'listen 127.0.0.1:0;\nroot "{docroot}";\n'
                     'threads 2;\naccess_log off;\n')
    before = set(os.listdir(s.dir))
    for _ in range(3):
        assert fetch(s)[0] == 200
    s.proc.send_signal(signal.SIGTERM)
    assert s.proc.wait(10) == 0
    assert s.stdout() == ""
    assert set(os.listdir(s.dir)) == before


def test_access_log_stdout(start_server, docroot):
    """`access_log stdout;` writes the CLF lines on standard output."""
    (docroot / "f.txt").write_bytes(FILE_BODY)
    s = start_server(docroot, conf=f'listen 127.0.0.1:0;\nroot "{docroot}";\n'
                     'threads 2;\naccess_log stdout;\n')
    assert fetch(s)[0] == 200
    s.proc.send_signal(signal.SIGTERM)
    assert s.proc.wait(10) == 0
    lines = [l for l in s.stdout().split("\n") if l]
    assert len(lines) == 1 and CLF.match(lines[0]), lines


# ---------------------------------------------------------------- graceful shutdown

SIGNALS = [signal.SIGTERM, signal.SIGINT]
SIG_IDS = ["SIGTERM", "SIGINT"]


@pytest.mark.parametrize("sig", SIGNALS, ids=SIG_IDS)
def test_idle_server_exits_0_without_waiting_for_shutdown_timeout(start_server, docroot, sig):
    """With nothing in flight the server exits 0 at once: well before its shutdown_timeout
    (60 s here), which is only for responses in flight."""
    (docroot / "f.txt").write_bytes(FILE_BODY)
    s = start_server(docroot, conf=whole_conf(docroot, extra="shutdown_timeout 60s;\n"))
    assert fetch(s)[0] == 200
    t0 = time.monotonic()
    s.proc.send_signal(sig)
    code = s.proc.wait(scaled(30))
    assert code == 0, s.error_log()
    assert time.monotonic() - t0 < scaled(5)


@pytest.mark.parametrize("sig", SIGNALS, ids=SIG_IDS)
def test_signal_lets_slow_download_complete(start_server, docroot, connect, sig):
    """A response larger than the server's send buffer can hold (16 MiB at least), being
    read slowly when the signal arrives, is completed byte for byte, then the process exits
    0 within shutdown_timeout (5 s in the fixture)."""
    size = past_buffers(at_least=16 << 20)
    sparse_file(docroot / "big.bin", size)
    s = start_server(docroot)
    c = connect(s, rcvbuf=65536)
    c.send(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n")
    c.sock.settimeout(5)
    got = b""
    while b"\r\n\r\n" not in got:
        got += c.sock.recv(65536)
    head, _, body = got.partition(b"\r\n\r\n")
    assert b" 200 " in head.split(b"\r\n")[0], head
    n = len(body)
    t0 = time.monotonic()
    signalled = None
    while True:
        if signalled is None and time.monotonic() - t0 > 0.3:
            s.proc.send_signal(sig)
            signalled = time.monotonic()
        slow = time.monotonic() - t0 < 1.5
        b = c.sock.recv(32768 if slow else 1 << 20)
        if not b:
            break
        n += len(b)
        if n >= size:
            break
        if slow:
            time.sleep(0.01)
    assert n == size, "download cut at %d of %d bytes" % (n, size)
    assert s.proc.poll() is None or s.proc.returncode == 0
    code = s.proc.wait(scaled(6))
    assert code == 0, s.error_log()
    assert time.monotonic() - signalled < scaled(6)


@pytest.mark.parametrize("sig", SIGNALS, ids=SIG_IDS)
def test_signal_closes_idle_keepalive_connections(start_server, docroot, connect, sig):
    """Idle keep-alive connections are closed at shutdown and the server exits 0 promptly:
    without waiting for their keepalive_timeout or for shutdown_timeout (60 s each here)."""
    (docroot / "f.txt").write_bytes(FILE_BODY)
    s = start_server(docroot, conf=whole_conf(
        docroot, extra="keepalive_timeout 60s;\nshutdown_timeout 60s;\n"))
    idle = [connect(s) for _ in range(5)]
    for c in idle:
        c.send(GOOD)
        assert c.read_response()[0] == 200
    t0 = time.monotonic()
    s.proc.send_signal(sig)
    for c in idle:
        assert c.is_closed(scaled(5))
    assert s.proc.wait(scaled(30)) == 0
    assert time.monotonic() - t0 < scaled(5)


def test_new_connection_after_sigterm_is_refused(start_server, docroot, connect):
    """After SIGTERM the listener is closed: while a download keeps the process alive, a new
    connection is refused; the download (larger than the send buffer holds) still
    completes."""
    size = past_buffers(at_least=16 << 20)
    sparse_file(docroot / "big.bin", size)
    (docroot / "f.txt").write_bytes(FILE_BODY)
    s = start_server(docroot)
    c = connect(s, rcvbuf=65536)
    c.send(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n")
    c.sock.settimeout(5)
    first = c.sock.recv(65536)
    assert first.startswith(b"HTTP/1.1 200"), first[:100]
    s.proc.send_signal(signal.SIGTERM)

    def refused():
        try:
            socket.create_connection((s.host, s.port), timeout=2).close()
        except (ConnectionRefusedError, ConnectionResetError):
            return True  # (reset: it reached the queue of the listener as it closed)
        return False

    assert wait_until(refused, scaled(5)), "still accepting connections after SIGTERM"
    assert s.proc.poll() is None, "exited with a response still in flight"
    n = len(first.partition(b"\r\n\r\n")[2])
    while n < size:
        b = c.sock.recv(1 << 20)
        if not b:
            break
        n += len(b)
    assert n == size
    assert s.proc.wait(scaled(6)) == 0


def test_shutdown_timeout_closes_stuck_connections(start_server, docroot, connect):
    """shutdown_timeout 2s: a client that never reads its response cannot hold the process
    (send_timeout is 60 s): the response is given its 2 s, no less, then the connection is
    closed and the process exits 0, as docs/guide/operations.md promises of a graceful shutdown."""
    sparse_file(docroot / "big.bin", past_buffers(at_least=16 << 20))  # never all sent
    s = start_server(docroot, conf=whole_conf(
        docroot, extra="shutdown_timeout 2s;\nsend_timeout 60s;\n"))
    c = connect(s, rcvbuf=16384)
    c.send(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n")
    c.sock.settimeout(scaled(5))
    assert c.sock.recv(4096).startswith(b"HTTP/1.1 200")  # in flight now, then never read
    t0 = time.monotonic()
    s.proc.send_signal(signal.SIGTERM)
    code = s.proc.wait(scaled(30))
    elapsed = time.monotonic() - t0
    assert code == 0, s.error_log()
    assert 1.8 <= elapsed <= 2 + scaled(3), elapsed
    assert "shutdown: closing 1 connections still open" in s.error_log()
