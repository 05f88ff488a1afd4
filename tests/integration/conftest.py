"""Fixtures that start the real lfhttpd binary on a loopback port it picks itself.

The server is started with `listen 127.0.0.1:0`; it logs the port it bound
("listening on 127.0.0.1:PORT") and the fixture reads it from the error log.
Every server started here is stopped by PID when the test ends, pass or fail.

Environment:
  LFHTTPD_BIN       the binary under test (default: build/lfhttpd)
  LFHTTPD_SANITIZE  `asan` or `tsan` when the binary is built with sanitizers: time limits
                    are scaled by SLOWDOWN, and a few tests skip by design
  LFHTTPD_STRICT_SKIPS  when set (CI sets it), a test that skips for any reason but one
                    marked by design (BY_DESIGN in its reason) fails instead: a missing
                    tool or engine must not turn a test into a silent pass
"""
import os
import re
import shutil
import signal
import socket
import subprocess
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("LFHTTPD_BIN", os.path.join(ROOT, "build", "lfhttpd"))
SANITIZED = bool(os.environ.get("LFHTTPD_SANITIZE"))
# How much slower the sanitizer builds run; every wall-clock limit is multiplied by it.
SLOWDOWN = {"asan": 3.0, "tsan": 6.0}.get(os.environ.get("LFHTTPD_SANITIZE", ""), 1.0)
# Put in a skip reason that is part of the design (a sanitizer build cannot run under
# valgrind), so that LFHTTPD_STRICT_SKIPS lets it pass.
BY_DESIGN = "[by design]"


def scaled(seconds):
    """A wall-clock limit for this build: seconds times SLOWDOWN."""
    return seconds * SLOWDOWN


def _net_sysctl_max(*names, unknown=64 << 20):
    """The largest figure in the named files of /proc/sys/net (tcp_wmem's three figures,
    wmem_max's one); `unknown` (more than any kernel's default) where none can be read."""
    figures = []
    for name in names:
        try:
            with open("/proc/sys/net/" + name) as f:
                figures += [int(x) for x in f.read().split()]
        except (OSError, ValueError):
            return unknown
    return max(figures)


# The most bytes one TCP socket's kernel buffer can hold on this machine, whatever its
# sysctls: autotuning grows a send buffer up to tcp_wmem's maximum and a receive buffer up
# to tcp_rmem's; SO_SNDBUF and SO_RCVBUF ask for up to twice wmem_max and rmem_max.
SEND_BUFFER_MAX = max(_net_sysctl_max("ipv4/tcp_wmem"), 2 * _net_sysctl_max("core/wmem_max"))
RECEIVE_BUFFER_MAX = max(_net_sysctl_max("ipv4/tcp_rmem"),
                         2 * _net_sysctl_max("core/rmem_max"))


def past_buffers(sends=1, receives=0, at_least=0):
    """A byte count that cannot fit in `sends` send buffers and `receives` receive buffers
    of this machine's sockets (the ones a test does not clamp with a small SO_RCVBUF), with
    8 MiB to spare, and never below at_least: a response or body that size to a peer that
    does not read makes its sender wait, however large the machine lets the buffers grow."""
    return max(at_least, sends * SEND_BUFFER_MAX + receives * RECEIVE_BUFFER_MAX + (8 << 20))


def sparse_file(path, size):
    """A file of `size` zero bytes that costs no disk."""
    with open(path, "wb") as f:
        f.truncate(size)


def median(values):
    return sorted(values)[len(values) // 2]


def latency_bound(idle):
    """The slowest median latency allowed under load or attack, from the latencies measured
    idle in the same test on the same machine: 20 times their median, but never below
    0.1 s (scaled), which a loaded machine can add to a request that costs the server a
    fraction of a millisecond."""
    return max(20 * median(idle), scaled(0.1))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under LFHTTPD_STRICT_SKIPS a skip that is not by design is reported as a failure."""
    outcome = yield
    rep = outcome.get_result()
    if not os.environ.get("LFHTTPD_STRICT_SKIPS") or not rep.skipped:
        return
    reason = str(rep.longrepr[2]) if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
    if BY_DESIGN not in reason:
        rep.outcome = "failed"
        rep.longrepr = f"skipped under LFHTTPD_STRICT_SKIPS: {reason}"


def environment_fact(fact):
    """The words a by-design skip that depends on the machine (not on the build or the
    engine under test) puts in its reason, naming the fact: the summary counts them."""
    return f"[environment: {fact}]"


def _skip_reason(rep):
    reason = str(rep.longrepr[2]) if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
    return reason.removeprefix("Skipped: ")


def pytest_terminal_summary(terminalreporter):
    """One line before pytest's own last one (which stays last, as CI reads it): how many
    tests ran and how many were skipped by design, with their reasons counted, so that a
    skip that strict mode lets through is still seen."""
    stats = terminalreporter.stats
    ran = sum(len(stats.get(k, [])) for k in ("passed", "failed", "xfailed", "xpassed"))
    reasons = {}
    for rep in stats.get("skipped", []):
        reason = _skip_reason(rep)
        if BY_DESIGN in reason:
            key = " ".join(reason.replace(BY_DESIGN, "").split())
            reasons[key] = reasons.get(key, 0) + 1
    total = sum(reasons.values())
    env = sum(n for r, n in reasons.items() if "[environment:" in r)
    listed = "; ".join(f"{r}: {n}" for r, n in sorted(reasons.items(), key=lambda x: -x[1]))
    terminalreporter.write_line(
        f"by-design skips: {total} (tests run: {ran}; skipped for this machine's environment: "
        f"{env})" + (f": {listed}" if listed else ""))


class Server:
    """One running lfhttpd process.

    By default its configuration is the fixture's (a loopback port it picks itself,
    `docroot`, 4 threads, an access log file, debug error log) plus `conf_extra`;
    `conf` replaces all of that with the test's own text. The first listener the server
    reports ("listening on ADDR:PORT") gives host and port, taken once the server says
    what it serves (all its listeners open). stdout goes to a file that
    stdout() reads, stderr (the error log) to one that error_log() reads."""

    def __init__(self, tmp_path, docroot, conf_extra="", args=(), env=None, wrap=(),
                 conf=None):
        self.docroot = str(docroot) if docroot is not None else None
        self.dir = str(tmp_path)
        os.makedirs(self.dir, exist_ok=True)
        self.err_path = os.path.join(self.dir, "error.log")
        self.out_path = os.path.join(self.dir, "stdout.log")
        self.access_path = os.path.join(self.dir, "access.log")
        self.conf_path = os.path.join(self.dir, "lfhttpd.conf")
        if conf is None:
            base = [
                "listen 127.0.0.1:0;\n",
                f'root "{self.docroot}";\n',
                "threads 4;\n",
                f'access_log "{self.access_path}";\n',
                "error_log stderr debug;\n",
                "shutdown_timeout 5s;\n",
            ]
            # A directive is set once: conf_extra's own takes the place of the fixture's.
            ours = set(re.findall(r"(?m)^(\w+)\s", conf_extra)) - {"listen"}
            conf = "".join(b for b in base if b.split()[0] not in ours) + conf_extra
        with open(self.conf_path, "w") as f:
            f.write(conf)
        self.err = open(self.err_path, "w+")
        self.out = open(self.out_path, "w+")
        full_env = dict(os.environ)
        if env:
            full_env.update(env)
        self.proc = subprocess.Popen(
            list(wrap) + [BIN, "-c", self.conf_path] + list(args),
            stdout=self.out,
            stderr=self.err,
            env=full_env,
            cwd=self.dir,
        )
        try:
            self.host, self.port = self._wait_for_port()
        except BaseException:
            self.proc.kill()  # never left running when the start is not recognized
            self.proc.wait()
            raise

    def _wait_for_port(self, timeout=15.0):
        deadline = time.time() + timeout
        while time.time() < deadline:
            log = self.error_log()
            m = re.search(r"listening on (\[[0-9a-fA-F:.]+\]|[0-9.]+):(\d+)", log)
            # Every listener (a Unix socket's file too) is open once the server says what
            # it serves; the first port alone comes before the others are.
            if m and re.search(r"lfhttpd \S+ serving ", log):
                return m.group(1).strip("[]"), int(m.group(2))
            if self.proc.poll() is not None:
                raise RuntimeError("lfhttpd exited at start:\n" + self.error_log())
            time.sleep(0.02)
        raise RuntimeError("lfhttpd did not report a port:\n" + self.error_log())

    @property
    def url(self):
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def error_log(self):
        with open(self.err_path, errors="backslashreplace") as f:
            return f.read()

    def stdout(self):
        with open(self.out_path, errors="backslashreplace") as f:
            return f.read()

    def access_log(self):
        try:
            with open(self.access_path) as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def connect(self, timeout=5.0):
        """A raw Client connected to the server."""
        return Client(socket.create_connection((self.host, self.port), timeout=timeout))

    def stop(self, sig=signal.SIGTERM, timeout=10.0):
        """Stop the server; returns its exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.err.close()
        self.out.close()
        return self.proc.returncode

class Launched(Server):
    """A server started with the test's own command line (argv after the binary) in the
    test's own working directory. Its error log is read from `log_path` when the
    configuration sends it to a file, else from stderr; stop() and connect() are
    Server's."""

    def __init__(self, dirpath, argv, cwd, log_path=None, wrap=()):
        self.docroot = None
        self.dir = str(dirpath)
        os.makedirs(self.dir, exist_ok=True)
        self.err_path = os.path.join(self.dir, "stderr.log")
        self.out_path = os.path.join(self.dir, "stdout.log")
        self.access_path = os.path.join(self.dir, "access.log")
        self.conf_path = None
        self.log_path = str(log_path) if log_path else self.err_path
        self.err = open(self.err_path, "w+")
        self.out = open(self.out_path, "w+")
        self.proc = subprocess.Popen(list(wrap) + [BIN] + list(argv), stdout=self.out,
                                     stderr=self.err, cwd=str(cwd))
        try:
            self.host, self.port = self._wait_for_port()
        except BaseException:
            self.proc.kill()
            self.proc.wait()
            raise

    def error_log(self):
        try:
            with open(self.log_path, errors="backslashreplace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def stderr(self):
        with open(self.err_path, errors="backslashreplace") as f:
            return f.read()


@pytest.fixture
def launch(tmp_path):
    """launch(argv, cwd, log_path=None, wrap=()) -> Launched; each is stopped by PID at the
    end of the test and must exit 0."""
    servers = []

    def start(argv, cwd, log_path=None, wrap=()):
        s = Launched(tmp_path / f"launched{len(servers)}", argv, cwd, log_path, wrap)
        servers.append(s)
        return s

    yield start
    for s in servers:
        check_clean_exit(s)


def wait_until(predicate, timeout=10.0):
    """Poll predicate every 50 ms until it returns something true (returned), or timeout
    seconds pass (then its last value is returned)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = predicate()
        if v:
            return v
        time.sleep(0.05)
    return predicate()


def wait_closed(client, limit):
    """Seconds until the server closed the connection (EOF or reset), reading and dropping
    whatever arrives first; None if it stayed open for `limit` seconds."""
    start = time.monotonic()
    client.buf = b""
    while True:
        left = limit - (time.monotonic() - start)
        if left <= 0:
            return None
        client.sock.settimeout(left)
        try:
            if client.sock.recv(65536) == b"":
                return time.monotonic() - start
        except socket.timeout:
            return None
        except ConnectionResetError:
            return time.monotonic() - start


def check_clean_exit(server):
    """Stop the server with SIGTERM and check that it exited 0 (a graceful shutdown), and
    (in sanitizer builds) that the sanitizers reported nothing, leaks at exit included."""
    code = server.stop()
    assert code == 0, f"lfhttpd exited with {code} on SIGTERM:\n{server.error_log()}"
    if SANITIZED:
        log = server.error_log()
        for marker in ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                       "WARNING: ThreadSanitizer"):
            assert marker not in log, log


@pytest.fixture
def docroot(tmp_path):
    """An empty document root; tests add the files they need."""
    d = tmp_path / "www"
    d.mkdir()
    return d


@pytest.fixture
def start_server(tmp_path):
    """start_server(docroot, conf_extra="", args=(), env=None, wrap=(), conf=None) -> Server.
    Every server started is stopped (by PID) when the test ends, pass or fail."""
    servers = []

    def start(docroot, conf_extra="", args=(), env=None, wrap=(), conf=None):
        s = Server(tmp_path / f"server{len(servers)}", docroot, conf_extra, args, env, wrap,
                   conf)
        servers.append(s)
        return s

    yield start
    for s in servers:
        check_clean_exit(s)


@pytest.fixture
def server(start_server, docroot):
    """A server on an empty docroot with the default settings."""
    return start_server(docroot)


@pytest.fixture
def connect(start_server):
    """connect(server, timeout=10.0, rcvbuf=None) -> Client with TCP_NODELAY; a small rcvbuf
    makes a client that reads slowly. Every client is closed when the test ends, before the
    servers are stopped (the fixture depends on start_server for that order), so a graceful
    shutdown never waits for a test's idle client."""
    clients = []

    def _connect(server, timeout=10.0, rcvbuf=None):
        sock = socket.socket(socket.AF_INET6 if ":" in server.host else socket.AF_INET,
                             socket.SOCK_STREAM)
        if rcvbuf is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.settimeout(timeout)
        sock.connect((server.host, server.port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        c = Client(sock)
        clients.append(c)
        return c

    yield _connect
    for c in clients:
        c.close()


class Client:
    """A raw HTTP/1.1 client on one TCP connection, for tests that need byte-level control.
    Bytes received past one response are kept for the next read_response()."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""

    def send(self, data):
        self.sock.sendall(data)

    def close(self):
        self.sock.close()

    def recv_all(self, timeout=5.0):
        """Read until the peer closes (or timeout). Returns the bytes, buffered ones first."""
        self.sock.settimeout(timeout)
        chunks = [self.buf]
        self.buf = b""
        try:
            while True:
                b = self.sock.recv(65536)
                if not b:
                    break
                chunks.append(b)
        except (socket.timeout, ConnectionResetError):
            pass
        return b"".join(chunks)

    def is_closed(self, timeout=2.0):
        """True if the server closed the connection (EOF or reset) within timeout."""
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False

    def read_response(self, head_only=False, timeout=5.0):
        """Read one response framed by Content-Length or chunked (none for 1xx/204/304, or
        when head_only, as for HEAD). Returns (status, headers with lowercase names, body,
        raw head). For chunked responses the body is returned decoded."""
        self.sock.settimeout(timeout)
        while b"\r\n\r\n" not in self.buf:
            b = self.sock.recv(65536)
            if not b:
                raise ConnectionError("closed before response head: %r" % self.buf)
            self.buf += b
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers.setdefault(k.strip().lower(), v.strip())
        if head_only or status in (204, 304) or status < 200:
            return status, headers, b"", head.decode("latin-1")
        if headers.get("transfer-encoding", "").lower() == "chunked":
            body = b""
            while True:
                line = self._read_line()
                size = int(line.split(b";")[0], 16)
                if size == 0:
                    while self._read_line() != b"":
                        pass
                    break
                body += self._read_exact(size)
                assert self._read_exact(2) == b"\r\n"
            return status, headers, body, head.decode("latin-1")
        n = int(headers.get("content-length", "0"))
        return status, headers, self._read_exact(n), head.decode("latin-1")

    def _fill(self):
        b = self.sock.recv(65536)
        if not b:
            raise ConnectionError("closed in body")
        self.buf += b

    def _read_exact(self, n):
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def _read_line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, _, self.buf = self.buf.partition(b"\r\n")
        return line


# --- nginx as an oracle: differential tests run it on the same configuration --------------

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx")
                                  else None)


def free_port(host="127.0.0.1"):
    """A TCP port nothing listens on right now (bound to port 0, then closed): a server
    started on it may still lose it to another process, so callers retry."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


NGINX_BESIDE_TOP = "threads 2;\nerror_log stderr info;\nshutdown_timeout 5s;\n"


def nginx_beside_lfhttpd(tmp_path_factory, site):
    """For a module-scoped fixture of a differential test: nginx and lfhttpd each running
    `site` (server blocks inside http { }, listening on {port0}, {port1}...), yielding
    (nginx's ports, lfhttpd's ports); both stopped when the module's tests are done, and
    lfhttpd checked to exit cleanly."""
    count = max(port_placeholders(site), 1)
    theirs = Nginx(tmp_path_factory.mktemp("nginx"), None, site, http=True)
    ours = None
    try:
        for attempt in range(3):  # a port picked may be taken before lfhttpd binds it
            ports = [free_port() for _ in range(count)]
            try:
                ours = Server(tmp_path_factory.mktemp("lfhttpd"), None,
                              conf=NGINX_BESIDE_TOP + "http {\n" + with_ports(site, ports) +
                              "}\n")
                break
            except RuntimeError as e:
                if "in use" not in str(e) or attempt == 2:
                    raise
        yield theirs.ports, ports
    finally:
        theirs.stop()
        if ours:
            check_clean_exit(ours)


def with_ports(text, ports):
    """text with each {portN} placeholder replaced by ports[N]."""
    for i, port in enumerate(ports):
        text = text.replace("{port%d}" % i, str(port))
    return text


def port_placeholders(text):
    """How many ports a text names: {port0}, {port1}... (one more than the highest N)."""
    return max((int(n) + 1 for n in re.findall(r"\{port(\d+)\}", text)), default=0)


class Nginx:
    """nginx on 127.0.0.1 and ports picked free, in the foreground (its PID is the one
    started); stopped by PID. By default `text` goes inside http { server { } } with the
    listen line and `root docroot` written here; with http=True, `text` goes directly
    inside http { } and writes its own server blocks, listening on {port0}, {port1}...
    (replaced by free ports: `ports` lists them, `port` is the first)."""

    def __init__(self, dirpath, docroot, text, http=False):
        self.dir = str(dirpath)
        os.makedirs(self.dir, exist_ok=True)
        self.host = "127.0.0.1"
        for attempt in range(3):  # a port picked may be taken before nginx binds it
            self.ports = [free_port(self.host)
                          for _ in range(port_placeholders(text) if http else 1)]
            self.port = self.ports[0] if self.ports else None
            conf = os.path.join(self.dir, "nginx.conf")
            with open(conf, "w") as f:
                f.write(self.config(with_ports(text, self.ports)) if http
                        else self.config(self.server(docroot, text)))
            self.proc = subprocess.Popen([NGINX, "-p", self.dir + "/", "-c", conf],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                         start_new_session=True)
            # A port taken meanwhile (by another test's process, which then answers on it)
            # leaves nginx retrying its bind() and logging so: that start is not nginx's.
            if wait_until(lambda: self.proc.poll() is not None or self.answers(), scaled(10)) \
                    and self.proc.poll() is None and "bind() to" not in self.log():
                return
            self.stop()
        raise RuntimeError("nginx did not start: " + self.log())

    def server(self, docroot, text):
        return (f"    server {{\n        listen {self.host}:{self.port};\n"
                f"        root {docroot};\n{text}    }}\n")

    def config(self, http_text):
        d = self.dir
        temp = "".join(f"    {k}_temp_path {d}/{k};\n"
                       for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        return (f"daemon off;\nmaster_process off;\npid {d}/nginx.pid;\n"
                f"error_log {d}/error.log info;\n"
                + ("user root;\n" if os.geteuid() == 0 else "") +
                "events { worker_connections 64; }\n"
                f"http {{\n    access_log off;\n{temp}{http_text}}}\n")

    def answers(self):
        try:
            for port in self.ports:
                socket.create_connection((self.host, port), timeout=1).close()
            return True
        except OSError:
            return False

    def log(self):
        try:
            with open(os.path.join(self.dir, "error.log"), errors="backslashreplace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=scaled(10))
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def nginx(tmp_path):
    """nginx(docroot, text, http=False) -> a running Nginx (see the class for http=True);
    each one is stopped when the test ends."""
    if not NGINX:
        pytest.fail("nginx is not installed (make check-deps installs nginx-light)")
    started = []

    def start(docroot, text, http=False):
        n = Nginx(tmp_path / f"nginx{len(started)}", docroot, text, http)
        started.append(n)
        return n

    yield start
    for n in started:
        n.stop()
