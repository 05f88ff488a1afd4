"""Hostile clients, part 3: slow attacks with slowhttptest (Debian package `slowhttptest`).

Three attacks of 1,000 connections each against a server with short deadlines
(header_timeout, keepalive_timeout and send_timeout 2 s):
  -H  slow headers (Slowloris): header lines trickle in, one a second;
  -B  slow body (R-U-Dead-Yet): a POST whose 8 KiB body trickles in to /echo, which
      collects bodies;
  -X  slow read: a 1 MiB file read through a window of a few bytes, a few bytes a second.
Each attack must have happened: slowhttptest ends as planned (its time limit, or no
connection left) and its statistics (`-g`, one line a second) show a quarter of its
connections open at once at least, and the server's descriptor count shows it held a
tenth of them at once at least (it may close a slow reader's connection once the kernel
has the whole response, while the client still reads) and one descriptor each, no more.
During each, a normal client fetches a file on a new connection every 200 ms: every
fetch must succeed, quickly. Quickly is judged against the same fetch measured before the
attack, in the same test, so that a machine busy with other work does not fail it: the
median under attack at most 20 times the median before (never less than 0.1 s), none
over 5 s (both scaled for sanitizer builds). A slow client that held a thread would cost
a fetch seconds. The server's VmRSS is sampled from /proc (the figures are printed: run
with -s), and must stay bounded. After each attack the server's descriptor count comes
back to where it was and it serves normally.

What the server is expected to do with each: -H connections get a 408 and are closed
header_timeout after their first byte (slowhttptest then reports no connection left
before its time is up); -X connections are dropped once a response has not moved for
send_timeout; -B connections are held while each read brings bytes (header_timeout
applies between reads of a body, as nginx's client_body_timeout does), costing memory
only, and are closed when the client goes.

slowhttptest is installed with apt-get when missing and the tests run as root; otherwise
they are skipped, with the reason.
"""
import csv
import os
import re
import shutil
import socket
import subprocess
import threading
import time

import pytest

from conftest import SANITIZED, latency_bound, median, scaled

DEADLINES = "header_timeout 2s;\nkeepalive_timeout 2s;\nsend_timeout 2s;\nhandler /echo echo;\n"
SMALL = b"0123456789abcdef\n"
MEM_LIMIT_MB = 400 if SANITIZED else 64
CONNECTIONS = 1000
# What slowhttptest says at its end when the test ran its course ("Connection refused",
# say, means it did not).
PLANNED_ENDS = ("Hit test time limit", "No open connections left")


def _have_slowhttptest():
    if shutil.which("slowhttptest"):
        return True, ""
    if os.geteuid() != 0:
        return False, "slowhttptest missing; run: sudo apt-get install -y slowhttptest"
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, timeout=240)
    try:  # with the package lists as they are, else after an update
        if subprocess.run(["apt-get", "install", "-y", "-qq", "slowhttptest"], **quiet).returncode:
            subprocess.run(["apt-get", "update", "-qq"], **quiet)
            subprocess.run(["apt-get", "install", "-y", "-qq", "slowhttptest"], check=True, **quiet)
    except (subprocess.SubprocessError, OSError) as e:
        return False, f"slowhttptest missing and apt-get install failed: {e}"
    return bool(shutil.which("slowhttptest")), "slowhttptest not found after install"


@pytest.fixture(scope="module")
def slowhttptest():
    ok, why = _have_slowhttptest()
    if not ok:
        pytest.skip(why)
    return shutil.which("slowhttptest")


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def n_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


class Watch(threading.Thread):
    """During an attack: a normal GET on a new connection every 200 ms (status, seconds),
    and the server's VmRSS and descriptor count."""

    def __init__(self, server):
        super().__init__(daemon=True)
        self.server, self.pid = server, server.proc.pid
        self.probes, self.peak_rss, self.peak_fds = [], 0.0, 0
        self.halt = threading.Event()

    def probe(self):
        t0 = time.monotonic()
        try:
            s = socket.create_connection((self.server.host, self.server.port),
                                         timeout=scaled(5))
            s.sendall(b"GET /f.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            data = b""
            while True:
                b = s.recv(65536)
                if not b:
                    break
                data += b
            s.close()
            ok = data.startswith(b"HTTP/1.1 200") and data.endswith(SMALL)
        except OSError as e:
            ok = repr(e)
        return ok, time.monotonic() - t0

    def run(self):
        while not self.halt.is_set():
            self.peak_rss = max(self.peak_rss, rss_mb(self.pid))
            self.peak_fds = max(self.peak_fds, n_fds(self.pid))
            self.probes.append(self.probe())
            time.sleep(0.2)

    def stop(self):
        self.halt.set()
        self.join(10)


def plain(text):
    return re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", text)


def idle_latencies(server, n=20):
    """Seconds for each of n normal GETs, one after the other, with nothing else going on."""
    w = Watch(server)
    probes = [w.probe() for _ in range(n)]
    assert all(ok is True for ok, _ in probes), probes
    return [t for _, t in probes]


class Attack:
    """One slowhttptest run: what it said, how it ended, and the most connections its
    statistics show open at once."""

    def __init__(self, result, stats_csv, took):
        self.out = plain(result.stdout + result.stderr)
        self.returncode, self.took = result.returncode, took
        m = re.findall(r"Exit status:\s*([^\n]*)", self.out)
        self.end = m[-1].strip() if m else ""
        with open(stats_csv, newline="") as f:
            self.stats = list(csv.DictReader(f))
        self.peak_connected = max((int(r["Connected"]) for r in self.stats), default=0)
        self.closed = max((int(r["Closed"]) for r in self.stats), default=0)


def attack(slowhttptest, server, args, tmp_path, seconds=8):
    """Run slowhttptest with args for `seconds` while watching; returns (watch, attack,
    base VmRSS, base descriptors, idle latencies)."""
    pid = server.proc.pid
    idle = idle_latencies(server)
    base_rss, base_fds = rss_mb(pid), n_fds(pid)
    w = Watch(server)
    w.start()
    t0 = time.monotonic()
    stats = tmp_path / "slowhttptest"
    result = subprocess.run([slowhttptest, "-c", str(CONNECTIONS), "-r", "500",
                             "-l", str(seconds), "-p", "2", "-g", "-o", str(stats)] + args,
                            capture_output=True, text=True, timeout=seconds + 60)
    took = time.monotonic() - t0
    w.stop()
    return w, Attack(result, f"{stats}.csv", took), base_rss, base_fds, idle


def check_attack(a, w, base_fds):
    """The attack ran its course with many connections open at once, and the server held
    them, one descriptor each. Checked before the probes: without an attack, their figures
    prove nothing."""
    print(f"\nslowhttptest: exit {a.returncode}, \"{a.end}\", {a.peak_connected} connected at "
          f"most, {a.closed} closed ({a.took:.1f} s); server descriptors {base_fds} -> peak "
          f"{w.peak_fds}")
    assert a.returncode == 0, a.out[-2000:]
    assert a.end in PLANNED_ENDS, a.out[-2000:]
    assert a.peak_connected >= CONNECTIONS // 4, a.stats
    held = w.peak_fds - base_fds
    assert held >= CONNECTIONS // 10, (held, "descriptors held at most, of", a.peak_connected)
    assert held <= CONNECTIONS + 64, (held, "descriptors for", CONNECTIONS, "connections")


def check_watch(w, base_rss, idle, label):
    lat = [t for _, t in w.probes]
    bad = [(ok, t) for ok, t in w.probes if ok is not True]
    print(f"{label}: {len(w.probes)} probe GETs, slowest {max(lat) * 1000:.0f} ms, "
          f"median {median(lat) * 1000:.1f} ms (before the attack {median(idle) * 1000:.1f} "
          f"ms); VmRSS {base_rss:.1f} -> peak {w.peak_rss:.1f} MB; descriptors peak "
          f"{w.peak_fds}")
    assert len(w.probes) >= 10
    assert not bad, f"probe failures during the attack: {bad[:5]}"
    assert median(lat) <= latency_bound(idle), \
        f"median GET {median(lat):.3f} s during the attack, {median(idle):.4f} s before"
    assert max(lat) < scaled(5), f"a normal GET took {max(lat):.2f} s during the attack"
    assert w.peak_rss - base_rss < MEM_LIMIT_MB


def check_recovered(server, base_fds, idle):
    pid = server.proc.pid
    deadline = time.monotonic() + scaled(12)
    while n_fds(pid) > base_fds and time.monotonic() < deadline:
        time.sleep(0.1)
    assert n_fds(pid) <= base_fds, f"{n_fds(pid)} descriptors, {base_fds} before the attack"
    after = idle_latencies(server, 10)
    assert median(after) <= latency_bound(idle) and max(after) < scaled(5), (idle, after)


@pytest.fixture
def slow_site(start_server, docroot):
    (docroot / "f.txt").write_bytes(SMALL)
    (docroot / "big.bin").write_bytes(os.urandom(1 << 20))
    s = start_server(docroot, DEADLINES)
    # Served once before the attacks: the open-file cache then holds a descriptor of each
    # file, part of the baseline the descriptor count must come back to.
    w = Watch(s)
    assert w.probe()[0] is True
    c = socket.create_connection((s.host, s.port), timeout=5)
    c.sendall(b"HEAD /big.bin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    while c.recv(65536):
        pass
    c.close()
    return s


def test_slowloris_headers(slowhttptest, slow_site, tmp_path):
    s = slow_site
    w, a, base_rss, base_fds, idle = attack(
        slowhttptest, s, ["-H", "-i", "1", "-x", "24", "-u", f"{s.url}/f.txt"], tmp_path)
    check_attack(a, w, base_fds)
    check_watch(w, base_rss, idle, "slowhttptest -H (slow headers), 1000 connections")
    # every slow head was cut at header_timeout: slowhttptest saw its connections closed
    # (and usually ran out of them before its time was up)
    assert a.end == "No open connections left" or a.closed > 0, a.out[-2000:]
    check_recovered(s, base_fds, idle)


def test_slow_body_senders(slowhttptest, slow_site, tmp_path):
    s = slow_site
    w, a, base_rss, base_fds, idle = attack(
        slowhttptest, s, ["-B", "-i", "1", "-s", "8192", "-x", "24", "-u", f"{s.url}/echo"],
        tmp_path)
    check_attack(a, w, base_fds)
    check_watch(w, base_rss, idle, "slowhttptest -B (slow body to /echo), 1000 connections")
    check_recovered(s, base_fds, idle)


def test_slow_readers(slowhttptest, slow_site, tmp_path):
    s = slow_site
    w, a, base_rss, base_fds, idle = attack(
        slowhttptest, s, ["-X", "-w", "1", "-y", "32", "-n", "1", "-z", "32", "-k", "3",
                          "-u", f"{s.url}/big.bin"], tmp_path)
    check_attack(a, w, base_fds)
    check_watch(w, base_rss, idle, "slowhttptest -X (slow read of 1 MiB), 1000 connections")
    check_recovered(s, base_fds, idle)
