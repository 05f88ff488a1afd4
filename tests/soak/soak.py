#!/usr/bin/python3
"""soak.py — lfhttpd under mixed load for a long time, its memory and descriptors watched.

  soak.py --bin BUILD/lfhttpd --out DIR --minutes N [--sanitize asan]

Starts the server on a loopback port it picks (read from its error log), with
tests/soak/soak.conf.in and a document root made in DIR, and runs every load of LOADS at
once for N minutes: wrk (tests/soak/load.lua) for the request kinds, the clients of
clients.py for the slow and resetting ones. Meanwhile a SIGHUP every 30 s (the
configuration changed each time) and a log reopen every 60 s (the logs renamed, then
SIGUSR1), and once a second the server's resident memory (VmRSS of /proc/PID/status) and
open descriptors (/proc/PID/fd). Then SIGTERM, and the verdict (verdict.txt), the samples
(samples.csv) and their plot (soak.png, gnuplot) in DIR. Exit status 0 when it passes.

The verdict, each check stated with its figures:
  - no growth after warm-up: the first third of the run is warm-up; the last third's
    maximum resident memory may exceed the middle third's by at most RSS_MARGIN, its
    90th percentile of open descriptors the middle third's by at most FD_MARGIN (a
    percentile, not the maximum: descriptors jump for a second at a reload or a burst of
    CGI pipes; a leak moves them all)
  - every response's status is one its kind intends (per kind, as the access log and the
    clients count them); the only 5xx intended is cgi-empty's 502
  - every kind was answered in the last third (nothing stalled)
  - every SIGHUP reloaded, every SIGUSR1 reopened the logs
  - no crash: the server ran to the end and exited 0 on SIGTERM; with --sanitize, no
    sanitizer report in its stderr
The server is stopped by PID when the driver ends, whatever the reason.
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
# What each SIGHUP writes in place of @RELOAD@, in turn.
RELOAD_SETS = [
    "gzip_comp_level 6;\nkeepalive_requests 100;\nautoindex_hidden off;\n",
    "gzip_comp_level 5;\nkeepalive_requests 50;\nautoindex_hidden on;\n",
]
SANITIZER_REPORT = re.compile(r"ERROR: (Address|Leak|Thread|Memory)Sanitizer|"
                              r"runtime error:|WARNING: ThreadSanitizer")


class Load:
    """One kind of load. `wrk` = (connections, delay_ms, accept_encoding, paths) runs wrk
    with load.lua; `client` = (function, threads) runs clients.py's function in threads.
    `expect` is the set of statuses the kind intends. A kind with `logged=False` never
    completes a request head, so the access log cannot name it (its lines count under
    "(no head)"); the client's own count stands for it."""

    def __init__(self, name, expect, wrk=None, client=None, logged=True):
        self.name, self.expect, self.wrk, self.client = name, set(expect), wrk, client
        self.logged = logged
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
    # Proxied requests and HTTPS join here once the server has them, each a kind of its
    # own with the statuses it intends, for instance:
    #   Load("proxy", {200}, wrk=(4, 20, "-", ["/upstream/small", "/upstream/big"])),
    #     with an upstream started beside the server (start_upstream, to be written)
    #   Load("https", {200}, wrk=(4, 20, "gzip", STATIC)), with wrk on the TLS port
]


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


class Server:
    def __init__(self, binary, run, sanitize):
        self.run, self.generation = run, 0
        with open(os.path.join(HERE, "soak.conf.in")) as f:
            self.template = (f.read().replace("@DOCROOT@", os.path.join(run, "www"))
                             .replace("@RUN@", run)
                             .replace("@CGI@", os.path.join(HERE, "cgi-bin")))
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
        with open(self.conf, "w") as f:
            f.write(self.template.replace("@RELOAD@",
                                          RELOAD_SETS[self.generation % len(RELOAD_SETS)]))

    def wait_for_port(self, timeout=30.0):
        deadline = time.time() + timeout
        while time.time() < deadline:
            m = re.search(r"listening on 127\.0\.0\.1:(\d+)", error_logs(self.run))
            if m:
                return int(m.group(1))
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
        """(VmRSS in KiB, open descriptors, threads), or None once the process is gone."""
        try:
            with open(f"/proc/{self.pid}/status") as f:
                status = f.read()
            fds = len(os.listdir(f"/proc/{self.pid}/fd"))
        except (FileNotFoundError, ProcessLookupError):
            return None
        if self.proc.poll() is not None:
            return None
        rss = int(re.search(r"VmRSS:\s+(\d+)", status).group(1))
        threads = int(re.search(r"Threads:\s+(\d+)", status).group(1))
        return rss, fds, threads

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


def start_loads(port, duration_s, stop):
    addr = ("127.0.0.1", port)
    for load in LOADS:
        if load.wrk:
            conns, delay_ms, codings, paths = load.wrk
            load.proc = subprocess.Popen(
                ["wrk", "-t1", f"-c{conns}", f"-d{int(duration_s)}s", "--timeout", "20s",
                 "-s", os.path.join(HERE, "load.lua"), f"http://127.0.0.1:{port}",
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


def access_counts(run, t_last_third):
    """Per kind, the statuses the access logs hold, and how many lines each kind has from
    t_last_third on (epoch seconds)."""
    counts = collections.defaultdict(collections.Counter)
    late = collections.Counter()
    for path in glob.glob(os.path.join(run, "access.log*")):
        with open(path, errors="replace") as f:
            for line in f:
                e = json.loads(line)
                ua = e["user_agent"]
                kind = ua[len("soak-"):] if ua.startswith("soak-") else "(no head)"
                counts[kind][e["status"]] += 1
                if datetime.datetime.fromisoformat(e["time"]).timestamp() >= t_last_third:
                    late[kind] += 1
    return counts, late


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


def verdict(args, samples, events, exit_status, t_last_third):
    checks = []   # (ok, text)
    checks.append(growth_check(samples, "resident memory, KiB", 1, RSS_MARGIN, 100))
    checks.append(growth_check(samples, "open descriptors", 2, FD_MARGIN, 90))

    counts, late = access_counts(args.out, t_last_third)
    for load in LOADS:
        logged = counts.get(load.name, collections.Counter())
        bad = {s: n for s, n in logged.items() if s not in load.expect}
        bad_seen = {s: n for s, n in load.seen.items()
                    if isinstance(s, int) and s not in load.expect}
        text = (f"{load.name}: logged {dict(sorted(logged.items()))}, client saw "
                f"{dict(sorted(load.seen.items(), key=str))}"
                + (f", wrk socket errors: {load.errors}" if load.errors else "")
                + f"; intended {sorted(load.expect)}")
        answered = sum(logged.values()) if load.logged else sum(
            n for s, n in load.seen.items() if isinstance(s, int))
        checks.append((not bad and not bad_seen and answered > 0, text))
        if load.logged:
            checks.append((late[load.name] > 0,
                           f"{load.name}: {late[load.name]} answers in the last third"))
        else:
            checks.append((load.seen.last >= t_last_third,
                           f"{load.name}: answered in the last third (client's count)"))
    extra = counts.get("(no head)", collections.Counter())
    checks.append((all(s in NO_HEAD_EXPECT for s in extra),
                   f"(no head): logged {dict(sorted(extra.items()))}; "
                   f"intended {sorted(NO_HEAD_EXPECT)}"))

    logs = error_logs(args.out)
    hups = sum(1 for e in events if e[1] == "reload")
    reloaded = len(re.findall(r"configuration reloaded \(generation \d+\)", logs))
    checks.append((reloaded == hups, f"reloads: {hups} SIGHUP, {reloaded} reloaded"))
    reopens = sum(1 for e in events if e[1] == "reopen")
    reopened = len(re.findall(r"SIGUSR1: log files reopened", logs))
    checks.append((reopened == reopens, f"log reopens: {reopens} SIGUSR1, {reopened} reopened"))

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


def run(args):
    if os.path.isdir(args.out):
        shutil.rmtree(args.out)
    os.makedirs(args.out)
    make_docroot(os.path.join(args.out, "www"))
    duration_s = args.minutes * 60
    server = Server(args.bin, args.out, args.sanitize)
    stop = threading.Event()
    samples, events = [], []
    exit_status = None
    try:
        print(f"soak: lfhttpd pid {server.pid} on 127.0.0.1:{server.port}, "
              f"{args.minutes:g} min{', ' + args.sanitize if args.sanitize else ''}; "
              f"results in {args.out}", flush=True)
        start_loads(server.port, duration_s, stop)
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
                      f"{s[2]} threads", flush=True)
        finish_loads(stop)
        s = server.sample()
        if s is not None:
            samples.append((tick + 1,) + s)
    finally:
        stop.set()
        kill_loads()
        exit_status = server.stop()
    with open(os.path.join(args.out, "samples.csv"), "w") as f:
        f.write("seconds,rss_kib,fds,threads\n")
        f.writelines(",".join(map(str, s)) + "\n" for s in samples)
    with open(os.path.join(args.out, "events.csv"), "w") as f:
        f.write("seconds,event\n")
        f.writelines(f"{t},{what}\n" for t, what in events)
    plot(args.out, args.sanitize, args.minutes)
    checks = verdict(args, samples, events, exit_status,
                     wall0 + duration_s * 2 / 3)
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
    args = p.parse_args()
    args.bin, args.out = os.path.abspath(args.bin), os.path.abspath(args.out)
    if args.minutes < 1.5:
        p.error("--minutes: at least 1.5 (three thirds of at least 30 s)")
    # SIGTERM to the driver (a CI timeout, kill) unwinds like Ctrl-C, so the server is
    # still stopped by the finally in run().
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(2))
    sys.exit(run(args))


if __name__ == "__main__":
    main()
