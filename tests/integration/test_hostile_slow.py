"""Hostile clients, part 3: slow attacks with slowhttptest (Debian package `slowhttptest`).

Three attacks of 1,000 connections each against a server with short deadlines
(header_timeout, keepalive_timeout and send_timeout 2 s):
  -H  slow headers (Slowloris): header lines trickle in, one a second;
  -B  slow body (R-U-Dead-Yet): a POST whose 8 KiB body trickles in to /echo, which
      collects bodies;
  -X  slow read: a 1 MiB file read through a window of a few bytes, a few bytes a second.
During each, a normal client fetches a file on a new connection every 200 ms: every
fetch must succeed, quickly. The server's VmRSS is sampled from /proc (the figures are
printed: run with -s), and must stay bounded. After each attack the server's descriptor
count comes back to where it was and it serves normally.

What the server is expected to do with each: -H connections get a 408 and are closed
header_timeout after their first byte (slowhttptest then reports no connection left
before its time is up); -X connections are dropped once a response has not moved for
send_timeout; -B connections are held while each read brings bytes (header_timeout
applies between reads of a body, as nginx's client_body_timeout does), costing memory
only, and are closed when the client goes.

slowhttptest is installed with apt-get when missing and the tests run as root; otherwise
they are skipped, with the reason.
"""
import os
import re
import shutil
import socket
import subprocess
import threading
import time

import pytest

from conftest import SANITIZED

DEADLINES = "header_timeout 2s;\nkeepalive_timeout 2s;\nsend_timeout 2s;\nhandler /echo echo;\n"
SMALL = b"0123456789abcdef\n"
PROBE_LIMIT_S = 2.0 if SANITIZED else 1.0
MEM_LIMIT_MB = 400 if SANITIZED else 64


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
            s = socket.create_connection((self.server.host, self.server.port), timeout=5)
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


def attack(slowhttptest, server, args, seconds=8):
    """Run slowhttptest with args for `seconds` while watching; returns (watch, output,
    base VmRSS, base descriptors, wall seconds)."""
    pid = server.proc.pid
    base_rss, base_fds = rss_mb(pid), n_fds(pid)
    w = Watch(server)
    w.start()
    t0 = time.monotonic()
    out = subprocess.run([slowhttptest, "-c", "1000", "-r", "500", "-l", str(seconds), "-p", "2"]
                         + args, capture_output=True, text=True, timeout=seconds + 60)
    took = time.monotonic() - t0
    w.stop()
    return w, plain(out.stdout + out.stderr), base_rss, base_fds, took


def check_watch(w, base_rss, label):
    lat = [t for _, t in w.probes]
    bad = [(ok, t) for ok, t in w.probes if ok is not True]
    print(f"\n{label}: {len(w.probes)} probe GETs, slowest {max(lat) * 1000:.0f} ms, "
          f"median {sorted(lat)[len(lat) // 2] * 1000:.0f} ms; VmRSS {base_rss:.1f} -> "
          f"peak {w.peak_rss:.1f} MB; descriptors peak {w.peak_fds}")
    assert len(w.probes) >= 10
    assert not bad, f"probe failures during the attack: {bad[:5]}"
    assert max(lat) < PROBE_LIMIT_S, f"a normal GET took {max(lat):.2f} s during the attack"
    assert w.peak_rss - base_rss < MEM_LIMIT_MB


def check_recovered(server, base_fds, timeout=12.0):
    pid = server.proc.pid
    deadline = time.monotonic() + timeout
    while n_fds(pid) > base_fds and time.monotonic() < deadline:
        time.sleep(0.1)
    assert n_fds(pid) <= base_fds, f"{n_fds(pid)} descriptors, {base_fds} before the attack"
    w = Watch(server)
    for _ in range(10):
        ok, t = w.probe()
        assert ok is True and t < PROBE_LIMIT_S


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


def test_slowloris_headers(slowhttptest, slow_site):
    s = slow_site
    w, out, base_rss, base_fds, took = attack(
        slowhttptest, s, ["-H", "-i", "1", "-x", "24", "-u", f"{s.url}/f.txt"])
    check_watch(w, base_rss, "slowhttptest -H (slow headers), 1000 connections")
    print("slowhttptest:", " ".join(out.split("Exit status:")[-1].split())[:80], f"({took:.1f} s)")
    # every slow head was cut at header_timeout: slowhttptest saw its connections closed
    # (and usually ran out of them before its time was up)
    closed = [int(n) for n in re.findall(r"closed:\s+(\d+)", out)]
    assert "No open connections left" in out or (closed and closed[-1] > 0), out[-2000:]
    check_recovered(s, base_fds)


def test_slow_body_senders(slowhttptest, slow_site):
    s = slow_site
    w, out, base_rss, base_fds, took = attack(
        slowhttptest, s, ["-B", "-i", "1", "-s", "8192", "-x", "24", "-u", f"{s.url}/echo"])
    check_watch(w, base_rss, "slowhttptest -B (slow body to /echo), 1000 connections")
    print("slowhttptest:", " ".join(out.split("Exit status:")[-1].split())[:80], f"({took:.1f} s)")
    check_recovered(s, base_fds)


def test_slow_readers(slowhttptest, slow_site):
    s = slow_site
    w, out, base_rss, base_fds, took = attack(
        slowhttptest, s, ["-X", "-w", "1", "-y", "32", "-n", "1", "-z", "32", "-k", "3",
                          "-u", f"{s.url}/big.bin"])
    check_watch(w, base_rss, "slowhttptest -X (slow read of 1 MiB), 1000 connections")
    print("slowhttptest:", " ".join(out.split("Exit status:")[-1].split())[:80], f"({took:.1f} s)")
    check_recovered(s, base_fds)
