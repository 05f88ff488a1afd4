#!/usr/bin/python3
"""bench_strategies.py — what Leader/Followers buys: lfhttpd under each concurrency
strategy, on the same workloads, as JAWS measured its strategies.

    bench_strategies.py --bin build/bench/lfhttpd --alloc-lib build/tests/alloc_counter.so
                        [--quick] [--rounds N] [--duration S] [--only WORKLOAD,...]

The same binary and document root run as:
    lf          Leader/Followers, LIFO promotion (the default)
    lf_condvar  Leader/Followers, promotion through one condition variable
    hsha        half-sync/half-async: one I/O thread, a queue, the worker threads
    tpc         thread-per-connection
each with 2 worker threads (one per core; half-sync/half-async adds its I/O thread,
thread-per-connection a thread per open connection), then the Leader/Followers grid:
    L/F GxT R   G groups (`groups G;`: each its own handle set and SO_REUSEPORT
                listener) of T threads each (threads = G*T), handles reactivated by R
                (`reactivation oneshot;`: EPOLLONESHOT re-armed with epoll_ctl after each
                event; `edge;`: registered edge-triggered once, reactivated in user space)
for 1x2, 2x1 and 2x2, each oneshot and edge, on the keep-alive workloads (GRID_WORKLOADS).
An lfhttpd that does not know `groups` or `reactivation` (`lfhttpd -t`, tried once)
runs without the grid, and the report says why. Every workload runs interleaved
across the variants (A B C D A B C D ...) for several rounds; the medians are reported:
requests/s, p99 latency, requests per server CPU-second, context switches per request
(the server's own getrusage figures from /status, every thread's, those that have
exited included) and heap allocations per request (counted by an LD_PRELOAD library,
tests/alloc_counter.c, loaded into every variant alike).

Writes build/bench/strategies.csv and build/bench/strategies.md. The machine has 2 cores
shared with wrk and is noisy: read ratios within one run, not absolute numbers.
"""
import argparse
import csv
import datetime
import json
import os
import re
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench  # noqa: E402  (the document root, /proc readers, wrk parsing)

OUT = bench.OUT
RUN = os.path.join(OUT, "run-strategies")
THREADS = bench.THREADS

VARIANTS = [
    ("lf", "Leader/Followers (LIFO)", "concurrency leader_followers;\npromotion lifo;\n"),
    ("lf_condvar", "Leader/Followers (condvar)",
     "concurrency leader_followers;\npromotion condvar;\n"),
    ("hsha", "half-sync/half-async", "concurrency half_sync_half_async;\n"),
    ("tpc", "thread-per-connection", "concurrency thread_per_connection;\n"),
]
BASE = "lf"

# The Leader/Followers grid: (groups, threads per group) x reactivation. On this 2-core
# machine 2x1 is one group per core; 2x2 has twice as many threads as cores.
GRID_SHAPES = ((1, 2), (2, 1), (2, 2))
REACTIVATIONS = ("oneshot", "edge")
GRID = [("lf_%dx%d_%s" % (g, t, r), "L/F %dx%d %s" % (g, t, r),
         "concurrency leader_followers;\npromotion lifo;\ngroups %d;\nreactivation %s;\n"
         % (g, r), g * t) for g, t in GRID_SHAPES for r in REACTIVATIONS]
GRID_WORKLOADS = ("small_ka", "c1000", "pipelined")

WORKLOADS = [
    bench.Workload("small_ka", "1 KiB file, keep-alive, 100 connections", "1 KiB c100"),
    bench.Workload("c1000", "1 KiB file, keep-alive, 1000 connections", "1 KiB c1000",
                   conns=1000),
    bench.Workload("close_wrk", "1 KiB file, Connection: close, 50 connections",
                   "close, wrk", conns=50, headers=["Connection: close"]),
    bench.Workload("hello", "dynamic handler /hello, 100 connections", "/hello",
                   path="/hello"),
    bench.Workload("pipelined", "1 KiB file, keep-alive, 100 connections, 16 requests "
                   "pipelined per connection", "pipelined x16 c100", script="pipeline.lua",
                   script_args=["16"]),
]
# QUICK=1: c1000 for the grid (the pipelined workload only in the full run).
QUICK_WORKLOADS = ("small_ka", "close_wrk", "c1000")

CONF = """listen 127.0.0.1:0;
root "{root}";
index index.html;
threads {threads};
max_connections 20000;
keepalive_timeout 60s;
keepalive_requests 1000000;
header_timeout 10s;
shutdown_timeout 2s;
access_log off;
error_log "{err}" info;
handler /hello hello;
handler /status status;
{variant}"""


def log(msg=""):
    print(msg, flush=True)


class Instance:
    """lfhttpd running one strategy, with the allocation counter preloaded."""

    def __init__(self, key, title, lines, opts, threads=THREADS, grid=False):
        self.key, self.title, self.lines, self.opts = key, title, lines, opts
        self.threads = threads
        self.grid = grid  # a point of the L/F grid: runs only GRID_WORKLOADS
        self.dir = os.path.join(RUN, key)
        self.err = os.path.join(self.dir, "error.log")
        self.counter = os.path.join(self.dir, "allocs")
        self.proc = self.port = None

    def start(self):
        os.makedirs(self.dir, exist_ok=True)
        conf = os.path.join(self.dir, "lfhttpd.conf")
        with open(conf, "w") as f:
            f.write(CONF.format(root=bench.DOCROOT, threads=self.threads, err=self.err,
                                variant=self.lines))
        check = subprocess.run([self.opts.bin, "-t", "-c", conf], capture_output=True,
                               text=True)
        if check.returncode != 0:
            raise RuntimeError("%s: %s" % (self.key, bench.last_line(check.stdout +
                                                                     check.stderr)))
        open(self.err, "w").close()
        env = dict(os.environ)
        if self.opts.alloc_lib:
            env.update(LD_PRELOAD=self.opts.alloc_lib, LFHTTPD_ALLOC_COUNTER=self.counter)
        self.proc = subprocess.Popen([self.opts.bin, "-c", conf], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.STDOUT, cwd=self.dir, env=env,
                                     start_new_session=True)
        deadline = time.monotonic() + bench.START_TIMEOUT
        while time.monotonic() < deadline:
            m = re.search(r"listening on 127\.0\.0\.1:(\d+)", open(self.err).read())
            if m and bench.port_open(int(m.group(1))):
                self.port = int(m.group(1))
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("%s did not start:\n%s" % (self.key, open(self.err).read()[-2000:]))

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def pids(self):
        return [self.proc.pid]

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=bench.STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def context_switches(self):
        with urllib.request.urlopen(self.url + "/status?format=json", timeout=10) as r:
            cs = json.load(r)["context_switches"]
        return cs["voluntary"] + cs["involuntary"]

    def allocations(self):
        try:
            with open(self.counter, "rb") as f:
                return struct.unpack("<Q", f.read(8))[0]
        except (OSError, struct.error):
            return None


def measure(inst, wl, opts):
    """One run of wl against inst: wrk's figures plus CPU, context switches and
    allocations per request around it."""
    cmd = wl.command(inst.url, opts.duration, 0)
    cs0, al0, cpu0 = inst.context_switches(), inst.allocations(), bench.cpu_ticks(inst.pids())
    p = subprocess.run(cmd, capture_output=True, text=True, errors="replace",
                       timeout=opts.duration + 60)
    cpu1, al1 = bench.cpu_ticks(inst.pids()), inst.allocations()
    cs1 = inst.context_switches()
    r = bench.parse_wrk(p.stdout + p.stderr)
    if r is None:
        return {"failed": "wrk gave no summary: " + bench.last_line(p.stdout + p.stderr)}
    n = r["requests"]
    r["errors"] = r["socket_errors"] + r["non2xx"]
    r["cpu_s"] = (cpu1 - cpu0) / bench.CLK_TCK
    r["req_per_cpu_s"] = n / r["cpu_s"] if r["cpu_s"] > 0 else None
    # The two /status requests on either side are counted in, and are negligible.
    r["ctx_per_req"] = (cs1 - cs0) / n if n else None
    r["allocs_per_req"] = (al1 - al0) / n if n and al0 is not None and al1 is not None \
        else None
    return r


def fmt(v, kind):
    if v is None:
        return "-"
    if kind == "rps":
        return "{:,.0f}".format(v)
    if kind == "ms":
        return "%.2f ms" % v
    if kind == "ratio":
        return "%.2fx" % v
    if kind == "per":
        return "%.3f" % v if v < 10 else "%.1f" % v
    return str(v)


def grid_refused(opts):
    """Why this lfhttpd cannot run the L/F grid (None if it can): `lfhttpd -t` on a
    configuration with each of the grid's directives, tried once."""
    os.makedirs(RUN, exist_ok=True)
    conf = os.path.join(RUN, "grid-probe.conf")
    for directive in ("groups 2;\n", "reactivation edge;\n"):
        with open(conf, "w") as f:
            f.write(CONF.format(root=bench.DOCROOT, threads=THREADS,
                                err=os.path.join(RUN, "grid-probe.log"), variant=directive))
        p = subprocess.run([opts.bin, "-t", "-c", conf], capture_output=True, text=True)
        if p.returncode != 0:
            return "`lfhttpd -t` rejects `%s`: %s" % (directive.strip(), bench.last_line(
                p.stdout + p.stderr).replace(conf, os.path.basename(conf)))
    return None


def make_instances(opts):
    """The strategies, then the grid's points if this lfhttpd has the directives.
    Returns (instances, why the grid is skipped or None)."""
    insts = [Instance(k, t, lines, opts) for k, t, lines in VARIANTS
             if not opts.variants or k in opts.variants]
    grid = [g for g in GRID if not opts.variants or g[0] in opts.variants]
    why = grid_refused(opts) if grid else None
    if why:
        log("skipping the Leader/Followers grid (%s): %s" % (
            ", ".join(t for _, t, _, _ in grid), why))
    else:
        insts += [Instance(k, t, lines, opts, threads=n, grid=True)
                  for k, t, lines, n in grid]
    return insts, why


def run(opts):
    bench.make_docroot()
    shutil.rmtree(RUN, ignore_errors=True)
    os.makedirs(RUN)
    # --only names the workloads, QUICK=1 or not; QUICK=1 alone runs QUICK_WORKLOADS.
    workloads = [w for w in WORKLOADS if (w.key in opts.only if opts.only else
                                          not opts.quick or w.key in QUICK_WORKLOADS)]
    insts, grid_skipped = make_instances(opts)
    results = {}  # (workload, variant) -> [rounds]
    t0 = time.monotonic()
    log("== concurrency strategies: the same lfhttpd, %d worker threads (the L/F grid: "
        "groups x threads per group), %d rounds of %d s, interleaved, the order rotated "
        "each round" % (THREADS, opts.rounds, opts.duration))
    log("Machine: 2 cores shared with wrk, noisy: compare within this run.")
    try:
        for inst in insts:
            inst.start()
            log("started %-11s on %s, pid %d" % (inst.key, inst.url, inst.proc.pid))
        for wl in workloads:
            log("\n-- %s: %s" % (wl.key, wl.title))
            runs = [i for i in insts if not i.grid or wl.key in GRID_WORKLOADS]
            for inst in runs if not opts.quick else ():  # warm-up: pools, page cache
                bench.run_load(inst, wl, argparse.Namespace(
                    duration=1, warmup=1, ab_requests=0), record=False)
            for rnd in range(opts.rounds):
                # Round i starts with variant i mod n: no variant always goes first.
                first = rnd % len(runs)
                for inst in runs[first:] + runs[:first]:
                    if not inst.alive():
                        r = {"failed": "%s is down" % inst.key}
                    else:
                        r = measure(inst, wl, opts)
                    results.setdefault((wl.key, inst.key), []).append(r)
                    log("[%4.0fs] round %d/%d %-16s %s" % (
                        time.monotonic() - t0, rnd + 1, opts.rounds, inst.key,
                        r.get("failed") or "%s req/s, p99 %s, %s req/CPU-s, %s ctx-sw/req, "
                        "%s allocs/req%s" % (
                            fmt(r["rps"], "rps"), fmt(r["p99"], "ms"),
                            fmt(r["req_per_cpu_s"], "rps"), fmt(r["ctx_per_req"], "per"),
                            fmt(r["allocs_per_req"], "per"),
                            ", %d errors" % r["errors"] if r["errors"] else "")))
    finally:
        for inst in insts:
            inst.stop()
    report(opts, workloads, insts, results, time.monotonic() - t0, grid_skipped)
    return 0


KEYS = ("rps", "p99", "req_per_cpu_s", "ctx_per_req", "allocs_per_req", "errors")


def summarize(results):
    out = {}
    for key, rows in results.items():
        ok = [r for r in rows if "failed" not in r]
        out[key] = {k: bench.median(ok, k) for k in KEYS}
        out[key]["errors"] = sum(r.get("errors", 0) for r in ok)
        out[key]["failed"] = len(rows) - len(ok)
    return out


def report(opts, workloads, insts, results, elapsed, grid_skipped):
    summary = summarize(results)
    head = ["workload", "strategy", "req/s", "x L/F", "p99", "req/CPU-s", "x L/F",
            "ctx-sw/req", "allocs/req", "errors"]
    rows = []
    for wl in workloads:
        base = summary.get((wl.key, BASE), {})
        for inst in insts:
            key, title = inst.key, inst.title
            s = summary.get((wl.key, key))
            if not s:
                continue
            rows.append([wl.label, title, fmt(s["rps"], "rps"),
                         fmt(bench.ratio(s["rps"], base.get("rps")), "ratio"),
                         fmt(s["p99"], "ms"), fmt(s["req_per_cpu_s"], "rps"),
                         fmt(bench.ratio(s["req_per_cpu_s"], base.get("req_per_cpu_s")),
                             "ratio"),
                         fmt(s["ctx_per_req"], "per"), fmt(s["allocs_per_req"], "per"),
                         str(s["errors"]) + (" (%d runs failed)" % s["failed"]
                                             if s["failed"] else "")])
    log("\n== Concurrency strategies: medians over %d rounds; x L/F = ratio to Leader/"
        "Followers (LIFO) in this run" % opts.rounds)
    log(bench.text_table(head, rows))
    grid_note = ("The Leader/Followers grid (groups x threads per group, reactivation) "
                 "was not run: %s." % grid_skipped) if grid_skipped else \
        ("L/F GxT R: G groups of T threads (threads = G*T), each group with its own handle "
         "set and SO_REUSEPORT listener; R = reactivation (oneshot: EPOLLONESHOT re-armed "
         "with epoll_ctl; edge: edge-triggered once, reactivated in user space); on %s "
         "only." % ", ".join(GRID_WORKLOADS))
    log(grid_note)
    csv_path = os.path.join(OUT, "strategies.csv")
    with open(csv_path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["workload", "strategy", "round"] + list(KEYS))
        for (wk, vk), rs in sorted(results.items()):
            for i, r in enumerate(rs):
                w.writerow([wk, vk, i + 1] + [r.get(k, r.get("failed", "")) for k in KEYS])
        for (wk, vk), s in sorted(summary.items()):
            w.writerow([wk, vk, "median"] + [s[k] for k in KEYS])
    md_path = os.path.join(OUT, "strategies.md")
    machine = bench.machine_info()
    with open(md_path, "w") as f:
        f.write("Concurrency strategies, %s, %d cores (%s), Linux %s: `make bench` "
                "(tests/bench/bench_strategies.py), %d rounds of %d s, interleaved; "
                "medians.\n\n" % (datetime.date.today().isoformat(), machine["nproc"],
                                 machine["cpu"], machine["kernel"], opts.rounds,
                                 opts.duration))
        f.write(bench.md_table(head, rows))
        f.write("\n\n%s\n" % grid_note)
    log("\nWrote %s (%.0f s)" % (", ".join(os.path.relpath(p, bench.ROOT)
                                            for p in (csv_path, md_path)), elapsed))


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bin", default=os.path.join(OUT, "lfhttpd"))
    p.add_argument("--alloc-lib", default=os.path.join(bench.ROOT, "build", "tests",
                                                       "alloc_counter.so"))
    p.add_argument("--quick", action="store_true",
                   help="one round of 2 s, two workloads, no warm-up (QUICK=1)")
    p.add_argument("--rounds", type=int)
    p.add_argument("--duration", type=int)
    p.add_argument("--only", help=",".join(w.key for w in WORKLOADS))
    p.add_argument("--variants", help=",".join([k for k, _, _ in VARIANTS] +
                                               [k for k, _, _, _ in GRID]))
    o = p.parse_args(argv)
    o.bin = os.path.abspath(o.bin)
    o.alloc_lib = os.path.abspath(o.alloc_lib) if os.path.exists(o.alloc_lib) else None
    o.rounds = o.rounds or (1 if o.quick else 3)
    o.duration = o.duration or (2 if o.quick else 5)
    o.only = set(o.only.split(",")) if o.only else None
    o.variants = set(o.variants.split(",")) if o.variants else None
    return o


def main(argv):
    opts = parse_args(argv)
    if not opts.alloc_lib:
        log("bench_strategies: the allocation counter is not built; allocations not counted")

    def on_signal(signum, _frame):
        raise KeyboardInterrupt("signal %d" % signum)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    bench.FD_LIMIT = bench.raise_fd_limit()
    try:
        return run(opts)
    except KeyboardInterrupt:
        log("\nbench_strategies: interrupted; servers stopped")
        return 130


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
