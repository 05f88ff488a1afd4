#!/usr/bin/python3
"""soak.py — lfhttpd under mixed load for a long time, its memory and descriptors watched.

  soak.py --bin BUILD/lfhttpd --out DIR --minutes N [--sanitize asan] [--loads KIND,...]

Starts an upstream (upstream.py: tests/integration/upstream_app.py counting what it
serves) and the server on loopback ports they pick (the server's read from its error
log), with tests/soak/soak.conf.in and a document root made in DIR, and runs every load
of LOADS at once for N minutes: wrk (tests/soak/load.lua) for the request kinds, proxied
ones and HTTPS ones included (on a TLS port of its own, with two self-signed
certificates made in DIR), the clients of clients.py for the slow and resetting ones, a
WebSocket through the proxy, new TLS connections (full and resumed handshakes) and
hostile TLS clients. Meanwhile a SIGHUP every 30 s (the configuration changed each time,
the proxy's settings and upstream sets, the certificate and ssl_session_timeout too) and
a log reopen every 60 s (the logs renamed, then SIGUSR1), and once a second the server's
resident memory (VmRSS of /proc/PID/status), open descriptors (/proc/PID/fd) and
connections to the upstream. Then SIGTERM, and the verdict (verdict.txt), the samples
(samples.csv) and their plot (soak.png, gnuplot) in DIR. Exit status 0 when it passes.

The verdict, each check stated with its figures:
  - no growth after warm-up: the first third of the run is warm-up; the last third's
    maximum resident memory may exceed the middle third's by at most RSS_MARGIN, its
    90th percentile of open descriptors the middle third's by at most FD_MARGIN (a
    percentile, not the maximum: descriptors jump for a second at a reload or a burst of
    CGI pipes; a leak moves them all), its maximum of upstream connections held the
    middle third's by at most UPSTREAM_CONN_MARGIN
  - every response's status is one its kind intends (per kind, as the access log and the
    clients count them); the only 5xx intended are cgi-empty's 502 and proxy-timeout's
    504
  - every kind was answered in the last third (nothing stalled), the HTTPS ones too
  - new TLS connections that offered their last session resumed it (TLS_RESUMED of
    them, per kind of handshake), and both certificates were served
  - the upstream saw its connections reused: per kind that may keep its connection, the
    share of its requests that found one open (UPSTREAM_REUSED)
  - every SIGHUP reloaded, every SIGUSR1 reopened the logs
  - no connection left once the loads ended (none closed by the shutdown)
  - no crash: the server ran to the end and exited 0 on SIGTERM (the upstream too); with
    --sanitize, no sanitizer report in its stderr
The server and the upstream are stopped by PID when the driver ends, whatever the reason.
"""
import argparse
import collections
import datetime
import glob
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import clients

HERE = os.path.dirname(os.path.abspath(__file__))

RELOAD_EVERY_S = 30
REOPEN_EVERY_S = 60
# Growth allowed from the middle third's maximum to the last third's.
RSS_MARGIN = (0.10, 2 * 1024)   # 10 % plus 2 MiB (in KiB), of the maxima
FD_MARGIN = (0.10, 8)           # 10 % plus 8 descriptors, of the 90th percentiles
# What each SIGHUP writes in place of the @NAMES@ of soak.conf.in, in turn: the proxy's
# settings and its upstream sets differ too, so that reloads rebuild them under load.
RELOAD_SETS = [
    {"@RELOAD@": "gzip_comp_level 6;\nkeepalive_requests 100;\nautoindex_hidden off;\n",
     "@KEEPALIVE@": "8",
     "@PROXY_RELOAD@": "proxy_read_timeout 1s; proxy_set_header X-Soak-Set a;",
     "@TLS_RELOAD@": "ssl_certificate @RUN@/tls/soak-ec.pem;\n"
                     "ssl_certificate_key @RUN@/tls/soak-ec.key;\nssl_session_timeout 5m;"},
    {"@RELOAD@": "gzip_comp_level 5;\nkeepalive_requests 50;\nautoindex_hidden on;\n",
     "@KEEPALIVE@": "4",
     "@PROXY_RELOAD@": "proxy_read_timeout 2s; proxy_set_header X-Soak-Set b;",
     "@TLS_RELOAD@": "ssl_certificate @RUN@/tls/soak-rsa.pem;\n"
                     "ssl_certificate_key @RUN@/tls/soak-rsa.key;\nssl_session_timeout 4m;"},
]
# The error-log lines that the intended failures write (warnings and errors; any other is
# a failure of the run).
INTENDED_LOG_ERRORS = [r"\[error\] cgi: /cgi-bin/empty\.sh: answered 502: no output$",
                       r"\[error\] proxy: slow: answered 504: no answer within "
                       r"proxy_read_timeout$"]
SANITIZER_REPORT = re.compile(r"ERROR: (Address|Leak|Thread|Memory)Sanitizer|"
                              r"runtime error:|WARNING: ThreadSanitizer")


class Load:
    """One kind of load. `wrk` = (connections, delay_ms, accept_encoding, paths) runs wrk
    with load.lua; `client` = (function, threads) runs clients.py's function in threads.
    `expect` is the set of statuses the kind intends. A kind with `logged=False` never
    completes a request head, so the access log cannot name it (its lines count under
    "(no head)"); the client's own count stands for it. `tls`: it goes to the HTTPS
    port."""

    def __init__(self, name, expect, wrk=None, client=None, logged=True, tls=False):
        self.name, self.expect, self.wrk, self.client = name, set(expect), wrk, client
        self.logged, self.tls = logged, tls
        self.seen = clients.Seen()          # statuses as the client saw them
        self.errors = ""                    # wrk's socket errors line, if any
        self.proc = None
        self.threads = []


# Requests that end before their head is complete (stalled, some resets): 408 when the
# server times them out, nothing when the client leaves first.
NO_HEAD_EXPECT = {400, 408}
STATIC = [f"/static/f{i:02d}.html" for i in range(20)] + ["/missing.html"]
TEXT = [f"/text/t{i:02d}.txt" for i in range(12)]
LOADS = [
    Load("static", {200, 404}, wrk=(6, 20, "-", STATIC)),
    Load("gzip", {200}, wrk=(4, 20, "gzip,br,zstd", TEXT)),
    Load("listing", {200}, wrk=(2, 50, "-", ["/listing/", "/listing/?format=json",
                                             "/listing/sub/"])),
    Load("cgi", {200}, wrk=(2, 100, "-", ["/cgi-bin/hello.sh?soak", "/cgi-bin/stream.sh"])),
    Load("cgi-empty", {502}, wrk=(1, 1000, "-", ["/cgi-bin/empty.sh"])),
    Load("slow-headers", {200}, client=(clients.slow_headers, 2)),
    Load("slow-body", {200}, client=(clients.slow_body, 1)),
    Load("slow-reader", {200}, client=(clients.slow_reader, 2)),
    Load("stalled", {408}, client=(clients.stalled, 1), logged=False),
    # Resets: a file cut short is logged 200 with the bytes sent; a request abandoned
    # before its answer (a silent CGI script, a body half sent) with status 0.
    Load("reset", {0, 200}, client=(clients.resetter, 2)),
    # Proxied to the upstream (upstream.py): /proxy/ to a set of two servers, /slow/ to a
    # set of one. Small answers (JSON echoes, compressed by the proxy as they stream), 1 MiB
    # ones (with a length, and chunked), bodies posted (4 KiB and 256 KiB, echoed back).
    Load("proxy-small", {200}, wrk=(4, 20, "gzip,br,zstd,identity",
                                    ["/proxy/small?a=1", "/proxy/api/item/7", "/proxy/"])),
    Load("proxy-large", {200}, wrk=(2, 100, "-", ["/proxy/_big?mb=1",
                                                  "/proxy/_big?mb=1&chunked=1"])),
    Load("proxy-post", {200}, wrk=(2, 50, "-", ["POST:4096:/proxy/post",
                                                "POST:262144:/proxy/post"])),
    # An answer in pieces that comes within proxy_read_timeout (1 s or 2 s, by reload)...
    Load("proxy-slow", {200}, wrk=(1, 100, "-",
                                   ["/slow/_slow?head=0.3&pieces=3&size=1000&gap=0.3"])),
    # ...and one whose head never does: the proxy's 504 is the intended 5xx here.
    Load("proxy-timeout", {504}, wrk=(1, 500, "-", ["/slow/_slow?head=4"])),
    Load("proxy-upgrade", {101}, client=(clients.proxy_upgrade, 1)),
    # Resets during a proxied answer's body are logged 200 with the bytes sent; one before
    # the upstream answered, or in the request's body, with status 0.
    Load("proxy-reset", {0, 200}, client=(clients.proxy_resetter, 1)),
    # HTTPS, on the TLS port: wrk's keep-alive connections on the files, compressed or
    # not (TLS 1.3, one handshake per connection)...
    Load("https", {200, 404}, wrk=(4, 20, "gzip,identity,br,zstd", STATIC + TEXT), tls=True),
    # ...a new connection per request, TLS 1.3 and 1.2, every other one resuming its last
    # session (by ticket, or by session ID from the server's cache)...
    Load("https-handshake", {200}, client=(clients.https_handshake, 2), tls=True),
    # ...resets in the ClientHello, before the client's Finished (both logged at info as
    # failed handshakes), during a file (200 with the bytes sent), in a head and in a body
    # (not in the access log, as on the plain port)...
    Load("https-reset", {0, 200}, client=(clients.https_resetter, 1), tls=True),
    # ...stalls in the handshake and right after it (closed after header_timeout, with no
    # answer and no log line), in a head (408) and in a response the client stops reading
    # (200 logged, the rest given up after send_timeout)...
    Load("https-stalled", {200, 408}, client=(clients.https_staller, 1), tls=True,
         logged=False),
    # ...and plain HTTP on the TLS port (nginx's 400).
    Load("https-plain", {400}, client=(clients.https_plain, 1), tls=True, logged=False),
]
# What the proxied kinds must find at the upstream: requests that found a kept connection
# (the rest opened one) at least this fraction of them. Only the kinds whose connections
# may be kept: an upgrade, a timeout or a reset ends its connection.
UPSTREAM_REUSED = {"proxy-small": 0.9, "proxy-large": 0.9, "proxy-post": 0.9,
                   "proxy-slow": 0.5}
UPSTREAM_CONN_MARGIN = (0.10, 8)   # of the maxima of upstream connections held
# Of https-handshake's connections that offered their last session, per kind of handshake,
# the share the server resumed. Below 1: a reload builds new TLS contexts, and a session ID
# of the old one's cache, or a session made with the other certificate, may not resume.
TLS_RESUMED = 0.8
# The certificates made at start: (name, openssl genpkey arguments); a reload swaps them.
TLS_KEYS = [("soak-ec", ["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"]),
            ("soak-rsa", ["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"])]


def make_docroot(root):
    """Small pages, compressible text (more than gzip_cache_size together), a 4 MiB file
    for slow readers and resets, and a directory of 300 entries to list."""
    rnd = random.Random(18)
    words = ["soak", "leader", "follower", "epoll", "gzip", "listing", "reload", "signal"]
    for d in ("static", "text", "listing/sub"):
        os.makedirs(os.path.join(root, d), exist_ok=True)
    for i in range(20):
        with open(os.path.join(root, "static", f"f{i:02d}.html"), "w") as f:
            f.write("<p>" + " ".join(rnd.choice(words) for _ in range(60 * (i + 1))) + "</p>\n")
    for i in range(12):
        with open(os.path.join(root, "text", f"t{i:02d}.txt"), "w") as f:
            f.write(" ".join(rnd.choice(words) for _ in range(8000)) + "\n")
    with open(os.path.join(root, "big.bin"), "wb") as f:
        f.write(rnd.randbytes(4 << 20))
    for i in range(300):
        with open(os.path.join(root, "listing", f"entry-{i:03d}.txt"), "w") as f:
            f.write("x" * i)
    open(os.path.join(root, "listing", ".hidden"), "w").close()
    for i in range(20):
        os.makedirs(os.path.join(root, "listing", "sub", f"d{i:02d}"), exist_ok=True)
    with open(os.path.join(root, "index.html"), "w") as f:
        f.write("<h1>soak</h1>\n")


def make_certificates(run):
    """Two self-signed certificates for localhost and 127.0.0.1 (an ECDSA and an RSA one,
    their organizations naming them), and tls/trust.pem, both, for the clients to verify
    with. Returns trust.pem's path."""
    d = os.path.join(run, "tls")
    os.makedirs(d)
    trust = os.path.join(d, "trust.pem")
    for name, key_args in TLS_KEYS:
        key, cert = os.path.join(d, name + ".key"), os.path.join(d, name + ".pem")
        for cmd in (["genpkey", *key_args, "-out", key],
                    ["req", "-x509", "-new", "-key", key, "-days", "7",
                     "-subj", f"/CN=localhost/O={name}",
                     "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-out", cert]):
            r = subprocess.run(["openssl", *cmd], capture_output=True, text=True, timeout=60)
            if r.returncode != 0:
                raise RuntimeError(f"openssl {' '.join(cmd)}: {r.stderr}")
        with open(cert) as src, open(trust, "a") as out:
            out.write(src.read())
    return trust


def free_port():
    """A loopback port nobody holds now (the kernel's pick for a socket then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Upstream:
    """upstream.py on three loopback ports (two for /proxy/'s set, one for /slow/'s),
    counting what it serves into upstream.json in the run's directory."""

    def __init__(self, run):
        self.stats_path = os.path.join(run, "upstream.json")
        self.stderr = open(os.path.join(run, "upstream-stderr.log"), "w")
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "upstream.py"), "--ports", "3",
             "--stats", self.stats_path],
            stdout=subprocess.PIPE, stderr=self.stderr, text=True)
        self.pid = self.proc.pid
        try:
            self.ports = self.wait_for_ports()
        except BaseException:
            self.stop()
            raise

    def wait_for_ports(self, timeout=30.0):
        """Its "ports P1 P2 P3 control C" line, read with a deadline (a thread reads)."""
        line = []
        reader = threading.Thread(target=lambda: line.append(self.proc.stdout.readline()),
                                  daemon=True)
        reader.start()
        reader.join(timeout)
        m = re.match(r"ports (\d+) (\d+) (\d+) control \d+", line[0] if line else "")
        if not m:
            raise RuntimeError("the upstream did not report its ports: "
                               + read(self.stderr.name))
        return [int(p) for p in m.groups()]

    def stats(self):
        try:
            with open(self.stats_path) as f:
                return json.load(f)
        except (FileNotFoundError, ValueError):
            return None

    def stop(self, timeout=10.0):
        """SIGTERM (it writes its counts one last time), SIGKILL if it lingers."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.stderr.close()
        return self.proc.returncode


class Server:
    def __init__(self, binary, run, sanitize, upstream_ports, tls_port):
        self.run, self.generation = run, 0
        self.upstream_ports = set(upstream_ports)
        self.tls_port = tls_port
        with open(os.path.join(HERE, "soak.conf.in")) as f:
            self.template = (f.read().replace("@DOCROOT@", os.path.join(run, "www"))
                             .replace("@TLS_PORT@", str(tls_port))
                             .replace("@CGI@", os.path.join(HERE, "cgi-bin")))
        for i, port in enumerate(upstream_ports):
            self.template = self.template.replace(f"@UPSTREAM{i + 1}@", str(port))
        self.conf = os.path.join(run, "lfhttpd.conf")
        self.write_conf()
        env = dict(os.environ)
        if sanitize == "asan":
            # A small quarantine: the default (256 MiB) would look like growth for minutes.
            env["ASAN_OPTIONS"] = ("detect_leaks=1:abort_on_error=0:quarantine_size_mb=16:"
                                   "thread_local_quarantine_size_kb=256")
            env["UBSAN_OPTIONS"] = "print_stacktrace=1"
        self.stderr = open(os.path.join(run, "stderr.log"), "w")
        self.proc = subprocess.Popen([binary, "-c", self.conf], stdout=subprocess.DEVNULL,
                                     stderr=self.stderr, cwd=run, env=env)
        self.pid = self.proc.pid
        try:
            self.port = self.wait_for_port()
        except BaseException:
            self.proc.kill()   # never left running when its start is not recognized
            self.proc.wait()
            raise

    def write_conf(self):
        text = self.template
        for name, value in RELOAD_SETS[self.generation % len(RELOAD_SETS)].items():
            text = text.replace(name, value)
        text = text.replace("@RUN@", self.run)
        with open(self.conf, "w") as f:
            f.write(text)

    def wait_for_port(self, timeout=30.0):
        """The plain port, once both it and the TLS port are reported bound."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            ports = {int(p) for p in re.findall(r"listening on 127\.0\.0\.1:(\d+)",
                                                error_logs(self.run))}
            if self.tls_port in ports and len(ports) == 2:
                return (ports - {self.tls_port}).pop()
            if self.proc.poll() is not None:
                raise RuntimeError("lfhttpd exited at start:\n" + error_logs(self.run)
                                   + read(self.stderr.name))
            time.sleep(0.05)
        raise RuntimeError("lfhttpd did not report a port")

    def reload(self):
        self.generation += 1
        self.write_conf()
        self.proc.send_signal(signal.SIGHUP)

    def reopen(self, n):
        for name in ("error.log", "access.log"):
            os.rename(os.path.join(self.run, name), os.path.join(self.run, f"{name}.{n}"))
        self.proc.send_signal(signal.SIGUSR1)

    def sample(self):
        """(VmRSS in KiB, open descriptors, threads, upstream connections), or None once
        the process is gone."""
        try:
            with open(f"/proc/{self.pid}/status") as f:
                status = f.read()
            fds = os.listdir(f"/proc/{self.pid}/fd")
            upstream = self.upstream_sockets(fds)
        except (FileNotFoundError, ProcessLookupError):
            return None
        if self.proc.poll() is not None:
            return None
        rss = int(re.search(r"VmRSS:\s+(\d+)", status).group(1))
        threads = int(re.search(r"Threads:\s+(\d+)", status).group(1))
        return rss, len(fds), threads, upstream

    def upstream_sockets(self, fds):
        """How many of the server's descriptors are TCP connections to the upstream: the
        inodes of /proc/PID/net/tcp's entries whose remote port is an upstream's, found
        among the descriptors' links (a connection in TIME_WAIT has no descriptor)."""
        inodes = set()
        with open(f"/proc/{self.pid}/net/tcp") as f:
            next(f)
            for line in f:
                fields = line.split()
                if int(fields[2].rsplit(":", 1)[1], 16) in self.upstream_ports:
                    inodes.add(f"socket:[{fields[9]}]")
        n = 0
        for fd in fds:
            try:
                n += os.readlink(f"/proc/{self.pid}/fd/{fd}") in inodes
            except FileNotFoundError:   # closed meanwhile
                pass
        return n

    def stop(self, timeout=30.0):
        """SIGTERM, then SIGKILL if it does not exit in time; returns the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.stderr.close()
        return self.proc.returncode


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def error_logs(run):
    """Every error log of the run, oldest first (error.log.1, .2, ..., error.log)."""
    rotated = sorted(glob.glob(os.path.join(run, "error.log.*")),
                     key=lambda p: int(p.rsplit(".", 1)[1]))
    return "".join(read(p) for p in rotated + [os.path.join(run, "error.log")])


def start_loads(port, tls_port, duration_s, stop):
    for load in LOADS:
        addr = ("127.0.0.1", tls_port if load.tls else port)
        url = f"{'https' if load.tls else 'http'}://127.0.0.1:{addr[1]}"
        if load.wrk:
            conns, delay_ms, codings, paths = load.wrk
            load.proc = subprocess.Popen(
                ["wrk", "-t1", f"-c{conns}", f"-d{int(duration_s)}s", "--timeout", "20s",
                 "-s", os.path.join(HERE, "load.lua"), url,
                 "--", load.name, str(delay_ms), codings] + paths,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        else:
            fn, n = load.client
            for _ in range(n):
                t = threading.Thread(target=client_loop, args=(fn, addr, stop, load),
                                     daemon=True)
                t.start()
                load.threads.append(t)


def client_loop(fn, addr, stop, load):
    """Runs a client until stop, starting it again after an error it did not expect (a
    refused connection, a timeout), which is counted as such."""
    while not stop.is_set():
        try:
            fn(addr, stop, load.seen)
        except OSError as e:
            load.seen[f"error:{type(e).__name__}"] += 1
            time.sleep(0.2)


def finish_loads(stop):
    stop.set()
    for load in LOADS:
        if load.proc:
            out, _ = load.proc.communicate(timeout=60)
            m = re.search(r"soak-status (.*)", out)
            for part in (m.group(1).split() if m else []):
                status, n = part.split("=")
                load.seen[int(status)] += int(n)
            m = re.search(r"Socket errors: (.*)", out)
            load.errors = m.group(1) if m else ""
        for t in load.threads:
            t.join(timeout=60)


def kill_loads():
    for load in LOADS:
        if load.proc and load.proc.poll() is None:
            load.proc.kill()
            load.proc.wait()


def access_counts(run, t_last_third, t_end):
    """Per kind, the statuses the access logs hold, and how many lines each kind has from
    t_last_third on (epoch seconds). A wrk load's request abandoned when wrk stops at
    t_end (its connections closed with an answer still coming: a slow one, a CGI script)
    is logged with status 0 at that moment; such lines, within a few seconds of t_end,
    count under "abandoned" instead of their kind."""
    counts = collections.defaultdict(collections.Counter)
    late = collections.Counter()
    abandoned = collections.Counter()
    wrk_kinds = {load.name for load in LOADS if load.wrk}
    for path in glob.glob(os.path.join(run, "access.log*")):
        with open(path, errors="replace") as f:
            for line in f:
                e = json.loads(line)
                ua = e["user_agent"]
                kind = ua[len("soak-"):] if ua.startswith("soak-") else "(no head)"
                t = datetime.datetime.fromisoformat(e["time"]).timestamp()
                if e["status"] == 0 and kind in wrk_kinds and t_end - 2 <= t <= t_end + 3:
                    abandoned[kind] += 1
                    continue
                counts[kind][e["status"]] += 1
                if t >= t_last_third:
                    late[kind] += 1
    return counts, late, abandoned


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p / 100))]


def growth_check(samples, label, index, margin, p):
    """The last third's p-th percentile (100: maximum) of column `index` against the
    middle third's, plus margin (a fraction and an amount)."""
    n = len(samples)
    thirds = [[s[index] for s in samples[a * n // 3:(a + 1) * n // 3]] for a in range(3)]
    if not all(thirds):
        return False, f"{label}: too few samples ({n})"
    warm, middle, last = (percentile(t, p) for t in thirds)
    limit = middle * (1 + margin[0]) + margin[1]
    what = "max" if p == 100 else f"p{p}"
    return last <= limit, (f"{label}: {what} of the last third {last}, of the middle third "
                           f"{middle} (limit {limit:.0f}; warm-up third {warm})")


def upstream_checks(stats, exit_status):
    """What the upstream counted: its connections reused by the kinds that may reuse them,
    and its own clean exit."""
    if not stats:
        return [(False, "upstream: no counts (upstream.json missing)")]
    kinds = stats["kinds"]
    requests = sum(k["requests"] for k in kinds.values())
    conns = stats["connections"]
    running = {load.name for load in LOADS}
    proxied = any(name.startswith("proxy") for name in running)
    checks = [((requests > 0 and conns > 0) or not proxied,
               f"upstream: {requests} requests on {conns} connections "
               f"({requests / max(conns, 1):.1f} a connection); per kind, requests/opened a "
               f"connection: " + ", ".join(f"{name} {k['requests']}/{k['first']}"
                                          for name, k in sorted(kinds.items())))]
    for name, least in sorted(UPSTREAM_REUSED.items()):
        if name not in running:
            continue
        k = kinds.get(name, {"requests": 0, "first": 0})
        reused = (k["requests"] - k["first"]) / k["requests"] if k["requests"] else 0.0
        checks.append((reused >= least,
                       f"{name}: {reused:.1%} of {k['requests']} upstream requests on a kept "
                       f"connection (at least {least:.0%})"))
    checks.append((exit_status == 0, f"upstream exit status on SIGTERM: {exit_status}"))
    return checks


def tls_checks():
    """What https-handshake's clients saw: per kind of handshake, the share of offered
    sessions resumed, and that both certificates were served (the reloads swap them)."""
    load = next((load for load in LOADS if load.name == "https-handshake"), None)
    if load is None:
        return []
    checks = []
    for name, _, _ in clients.HANDSHAKES:
        resumed, not_resumed = load.seen[f"{name}:resumed"], load.seen[f"{name}:not-resumed"]
        share = resumed / max(resumed + not_resumed, 1)
        checks.append((share >= TLS_RESUMED,
                       f"https-handshake {name}: {resumed} of {resumed + not_resumed} offered "
                       f"sessions resumed, {share:.1%} (at least {TLS_RESUMED:.0%})"))
    served = {name: load.seen[f"cert:{name}"] for name, _ in TLS_KEYS}
    checks.append((all(served.values()),
                   "https-handshake certificates served: "
                   + ", ".join(f"{name} {n}" for name, n in served.items())))
    return checks


def verdict(args, samples, events, exit_status, t_last_third, t_end, upstream):
    checks = []   # (ok, text)
    checks.append(growth_check(samples, "resident memory, KiB", 1, RSS_MARGIN, 100))
    checks.append(growth_check(samples, "open descriptors", 2, FD_MARGIN, 90))
    # Upstream connections the server holds (in use or kept idle): a leak of them moves
    # every sample, so the maxima are compared.
    checks.append(growth_check(samples, "upstream connections held", 4,
                               UPSTREAM_CONN_MARGIN, 100))
    checks.extend(upstream_checks(*upstream))

    counts, late, abandoned = access_counts(args.out, t_last_third, t_end)
    for load in LOADS:
        logged = counts.get(load.name, collections.Counter())
        bad = {s: n for s, n in logged.items() if s not in load.expect}
        bad_seen = {s: n for s, n in load.seen.items()
                    if isinstance(s, int) and s not in load.expect}
        text = (f"{load.name}: logged {dict(sorted(logged.items()))}, client saw "
                f"{dict(sorted(load.seen.items(), key=str))}"
                + (f", wrk socket errors: {load.errors}" if load.errors else "")
                + (f", {abandoned[load.name]} abandoned as wrk stopped"
                   if abandoned[load.name] else "")
                + f"; intended {sorted(load.expect)}")
        answered = sum(logged.values()) if load.logged else sum(
            n for s, n in load.seen.items() if isinstance(s, int))
        # wrk's socket errors: a read error is an answer cut short or a connection closed
        # with no answer, which no kind intends.
        errors = sum(int(n) for n in re.findall(r"\d+", load.errors))
        checks.append((not bad and not bad_seen and answered > 0 and not errors, text))
        if load.logged:
            checks.append((late[load.name] > 0,
                           f"{load.name}: {late[load.name]} answers in the last third"))
        else:
            checks.append((load.seen.last >= t_last_third,
                           f"{load.name}: answered in the last third (client's count)"))
    checks.extend(tls_checks())
    extra = counts.get("(no head)", collections.Counter())
    checks.append((all(s in NO_HEAD_EXPECT for s in extra),
                   f"(no head): logged {dict(sorted(extra.items()))}; "
                   f"intended {sorted(NO_HEAD_EXPECT)}"))

    logs = error_logs(args.out)
    unintended = [line for line in logs.splitlines()
                  if re.search(r"\[(warn|error|crit|alert|emerg)\]", line)
                  and not any(re.search(p, line) for p in INTENDED_LOG_ERRORS)]
    checks.append((not unintended, f"error-log lines not intended: {len(unintended)}"
                   + "".join(f"\n       {line}" for line in unintended[:10])))
    hups = sum(1 for e in events if e[1] == "reload")
    reloaded = len(re.findall(r"configuration reloaded \(generation \d+\)", logs))
    checks.append((reloaded == hups, f"reloads: {hups} SIGHUP, {reloaded} reloaded"))
    reopens = sum(1 for e in events if e[1] == "reopen")
    reopened = len(re.findall(r"SIGUSR1: log files reopened", logs))
    checks.append((reopened == reopens, f"log reopens: {reopens} SIGUSR1, {reopened} reopened"))

    # Once the loads have stopped no client is left: a connection the server still has at
    # SIGTERM is a request that never ended (its timeouts and the client's close missed).
    left = re.findall(r"shutdown: closing (\d+) connections still open", logs)
    checks.append((not left, f"connections still open at SIGTERM, after the loads ended: "
                             f"{left[0] if left else 0}"))
    checks.append((exit_status == 0, f"exit status on SIGTERM: {exit_status}"))
    alive = samples and samples[-1][0] >= args.minutes * 60 - 2
    checks.append((bool(alive), f"server alive throughout ({len(samples)} samples)"))
    report = SANITIZER_REPORT.search(read(os.path.join(args.out, "stderr.log")))
    checks.append((not report, "sanitizer reports: " + ("yes, see stderr.log" if report
                                                         else "none")))
    return checks


def plot(out, sanitize, minutes):
    title = f"lfhttpd soak, {minutes:g} min" + (f" ({sanitize})" if sanitize else "")
    subprocess.run(["gnuplot", "-e", f"dir='{out}'; label='{title}'",
                    os.path.join(HERE, "soak.gp")], check=True)


def start_server(args, upstream_ports, attempts=3):
    """The server, on a TLS port picked free; picked again if it was taken meanwhile."""
    for attempt in range(attempts):
        try:
            return Server(args.bin, args.out, args.sanitize, upstream_ports, free_port())
        except RuntimeError as e:
            if "in use" not in str(e) or attempt == attempts - 1:
                raise


def run(args):
    if os.path.isdir(args.out):
        shutil.rmtree(args.out)
    os.makedirs(args.out)
    make_docroot(os.path.join(args.out, "www"))
    clients.TLS_CAFILE = make_certificates(args.out)
    duration_s = args.minutes * 60
    upstream = Upstream(args.out)
    try:
        server = start_server(args, upstream.ports)
    except BaseException:
        upstream.stop()
        raise
    stop = threading.Event()
    samples, events = [], []
    exit_status = None
    try:
        print(f"soak: upstream pid {upstream.pid} on ports "
              f"{', '.join(map(str, upstream.ports))}", flush=True)
        print(f"soak: lfhttpd pid {server.pid} on 127.0.0.1:{server.port} and "
              f"127.0.0.1:{server.tls_port} (TLS), "
              f"{args.minutes:g} min{', ' + args.sanitize if args.sanitize else ''}; "
              f"results in {args.out}", flush=True)
        start_loads(server.port, server.tls_port, duration_s, stop)
        t0 = time.monotonic()
        wall0 = time.time()
        tick, reopens = 0, 0
        while tick < duration_s:
            tick += 1
            time.sleep(max(0.0, t0 + tick - time.monotonic()))
            s = server.sample()
            if s is None:
                print(f"soak: the server is gone at {tick} s", flush=True)
                break
            samples.append((tick,) + s)
            if tick % RELOAD_EVERY_S == 0:
                server.reload()
                events.append((tick, "reload"))
            if tick % REOPEN_EVERY_S == 0:
                reopens += 1
                server.reopen(reopens)
                events.append((tick, "reopen"))
            if tick % 60 == 0:
                print(f"soak: {tick // 60} min: rss {s[0] // 1024} MiB, {s[1]} fds, "
                      f"{s[2]} threads, {s[3]} upstream connections", flush=True)
        finish_loads(stop)
        # What the clients left (a proxied answer awaited, a CGI script) ends within the
        # longest proxy_read_timeout and a sweep; then no connection should remain.
        time.sleep(3)
        s = server.sample()
        if s is not None:
            samples.append((tick + 1,) + s)
    finally:
        stop.set()
        kill_loads()
        try:
            exit_status = server.stop()
        finally:
            upstream_status = upstream.stop()
    with open(os.path.join(args.out, "samples.csv"), "w") as f:
        f.write("seconds,rss_kib,fds,threads,upstream_conns\n")
        f.writelines(",".join(map(str, s)) + "\n" for s in samples)
    with open(os.path.join(args.out, "events.csv"), "w") as f:
        f.write("seconds,event\n")
        f.writelines(f"{t},{what}\n" for t, what in events)
    plot(args.out, args.sanitize, args.minutes)
    checks = verdict(args, samples, events, exit_status,
                     wall0 + duration_s * 2 / 3, wall0 + duration_s,
                     (upstream.stats(), upstream_status))
    passed = all(ok for ok, _ in checks)
    lines = [("ok   " if ok else "FAIL ") + text for ok, text in checks]
    lines.append(f"verdict: {'PASS' if passed else 'FAIL'}"
                 f" ({args.minutes:g} min{', ' + args.sanitize if args.sanitize else ''};"
                 f" plot {os.path.join(args.out, 'soak.png')})")
    with open(os.path.join(args.out, "verdict.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if passed else 1


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bin", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--minutes", type=float, default=30)
    p.add_argument("--sanitize", choices=["asan"], default=None)
    p.add_argument("--loads", default=None,
                   help="only these kinds, comma-separated (to reproduce what one run found)")
    args = p.parse_args()
    if args.loads:
        unknown = set(args.loads.split(",")) - {load.name for load in LOADS}
        if unknown:
            p.error(f"--loads: no kind named {', '.join(sorted(unknown))}")
        LOADS[:] = [load for load in LOADS if load.name in args.loads.split(",")]
    args.bin, args.out = os.path.abspath(args.bin), os.path.abspath(args.out)
    if args.minutes < 1.5:
        p.error("--minutes: at least 1.5 (three thirds of at least 30 s)")
    # SIGTERM to the driver (a CI timeout, kill) unwinds like Ctrl-C, so the server is
    # still stopped by the finally in run().
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(2))
    sys.exit(run(args))


if __name__ == "__main__":
    main()
