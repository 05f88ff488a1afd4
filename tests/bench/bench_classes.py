#!/usr/bin/python3
"""make bench-classes: do service classes keep interactive latency under bulk overload?

Two configurations with the same total number of threads (2) serve the same files:
  classes  an `interactive` class (1 thread, priority high, /api/) and the default
           class (1 thread, normal priority), which serves everything else: the bulk
           downloads under /downloads/;
  single   one Leader/Followers group of 2 threads.
For each, a light client times sequential keep-alive GETs of a 1 KiB file under /api/
(about 50 a second), first with the server idle, then while wrk saturates /downloads/
with 10 MiB files on many connections. The configurations alternate (A B A B ...) for
several rounds and the medians of each round's p50 and p99 are reported, with the ratio
loaded/idle, and the bulk load's throughput (wrk's MiB/s and requests/s): what the
interactive class's latency costs the bulk traffic. This machine has 2 cores shared with
wrk and is noisy: read ratios, not absolute numbers.

Usage: bench_classes.py BINARY OUTDIR [--quick]
"""
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time

# The default class always has a group of its own (threads 0 means one per CPU, not
# none), so it is the bulk class here: 1 + 1 threads against 2.
CONFIGS = {
    "classes": """
threads 1;
class interactive { threads 1; priority high; match path /api/; }
""",
    "single": "threads 2;\n",
}


def make_docroot(root):
    os.makedirs(os.path.join(root, "api"), exist_ok=True)
    os.makedirs(os.path.join(root, "downloads"), exist_ok=True)
    with open(os.path.join(root, "api", "small.txt"), "wb") as f:
        f.write(b"x" * 1024)
    big = os.path.join(root, "downloads", "big.bin")
    if not os.path.exists(big) or os.path.getsize(big) != 10 << 20:
        with open(big, "wb") as f:
            f.write(os.urandom(10 << 20))


def start(binary, outdir, name, root):
    conf = os.path.join(outdir, f"classes-{name}.conf")
    err = os.path.join(outdir, f"classes-{name}.err")
    with open(conf, "w") as f:
        f.write(f'listen 127.0.0.1:0;\nroot "{root}";\naccess_log off;\n'
                f"error_log stderr info;\nmax_connections 20000;\n" + CONFIGS[name])
    errf = open(err, "w")
    proc = subprocess.Popen([binary, "-c", conf], stdout=subprocess.DEVNULL, stderr=errf)
    deadline = time.time() + 10
    while time.time() < deadline:
        m = re.search(r"listening on 127\.0\.0\.1:(\d+)", open(err).read())
        if m:
            return proc, int(m.group(1))
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"{name}: server did not start:\n" + open(err).read())


def stop(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def timed_gets(port, seconds, rate=50):
    """Sequential keep-alive GETs of /api/small.txt at about `rate` a second; the
    latency of each in milliseconds."""
    req = b"GET /api/small.txt HTTP/1.1\r\nHost: bench\r\n\r\n"
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    lat = []
    end = time.time() + seconds
    while time.time() < end:
        t0 = time.perf_counter()
        s.sendall(req)
        buf = b""
        while b"\r\n\r\n" not in buf:
            buf += s.recv(65536)
        head, _, body = buf.partition(b"\r\n\r\n")
        n = int(re.search(rb"Content-Length: (\d+)", head).group(1))
        while len(body) < n:
            body += s.recv(65536)
        lat.append((time.perf_counter() - t0) * 1000)
        time.sleep(max(0.0, 1.0 / rate - (time.perf_counter() - t0)))
    s.close()
    return lat


def pct(values, p):
    v = sorted(values)
    return v[min(len(v) - 1, int(len(v) * p / 100))]


def one_round(binary, outdir, name, root, seconds):
    proc, port = start(binary, outdir, name, root)
    try:
        idle = timed_gets(port, seconds)
        wrk = subprocess.Popen(
            ["wrk", "-t1", "-c200", f"-d{seconds + 2}s",
             f"http://127.0.0.1:{port}/downloads/big.bin"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        time.sleep(1)  # let the bulk load build up
        loaded = timed_gets(port, seconds)
        out, _ = wrk.communicate(timeout=seconds + 30)
    finally:
        stop(proc)
    return {"idle_p50": pct(idle, 50), "idle_p99": pct(idle, 99),
            "load_p50": pct(loaded, 50), "load_p99": pct(loaded, 99),
            "bulk_mib_s": wrk_rate(out, r"Transfer/sec:\s+([\d.]+)([KMG]?B)"),
            "bulk_rps": wrk_rate(out, r"Requests/sec:\s+([\d.]+)()")}


UNIT = {"": 1.0, "B": 1 / 2 ** 20, "KB": 1 / 2 ** 10, "MB": 1.0, "GB": 2 ** 10}


def wrk_rate(out, pattern):
    """A rate from wrk's summary (Transfer/sec in MiB/s), or None when wrk gave none."""
    m = re.search(pattern, out)
    return float(m.group(1)) * UNIT[m.group(2)] if m else None


def fmt_rate(v):
    return "?" if v is None else f"{v:,.0f}" if v >= 100 else f"{v:.1f}"


def median_or_none(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def main():
    binary, outdir = sys.argv[1], sys.argv[2]
    quick = "--quick" in sys.argv
    rounds, seconds = (2, 3) if quick else (3, 8)
    if not shutil.which("wrk"):
        sys.exit("bench-classes: wrk is missing: apt-get install -y wrk")
    os.makedirs(outdir, exist_ok=True)
    root = os.path.join(outdir, "classes-www")
    make_docroot(root)
    print(f"bench-classes: {rounds} rounds of {seconds} s per configuration, interleaved; "
          f"{os.cpu_count()} cores shared with wrk and the timing client: a noisy machine, "
          "read the ratios.")
    results = {k: [] for k in CONFIGS}
    for r in range(rounds):
        for name in CONFIGS:
            res = one_round(binary, outdir, name, root, seconds)
            results[name].append(res)
            print(f"  round {r + 1} {name:8s} idle p50 {res['idle_p50']:.2f} ms "
                  f"p99 {res['idle_p99']:.2f} ms | under bulk p50 {res['load_p50']:.2f} ms "
                  f"p99 {res['load_p99']:.2f} ms | bulk {fmt_rate(res['bulk_mib_s'])} MiB/s, "
                  f"{fmt_rate(res['bulk_rps'])} req/s", flush=True)
    lines = ["| configuration | idle p50 | idle p99 | bulk-loaded p50 | bulk-loaded p99 | "
             "p99 loaded/idle | bulk MiB/s | bulk req/s |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    med = {}
    for name, rs in results.items():
        m = {k: statistics.median(x[k] for x in rs) for k in
             ("idle_p50", "idle_p99", "load_p50", "load_p99")}
        m.update({k: median_or_none(x[k] for x in rs) for k in ("bulk_mib_s", "bulk_rps")})
        med[name] = m
        lines.append(f"| {name} | {m['idle_p50']:.2f} ms | {m['idle_p99']:.2f} ms | "
                     f"{m['load_p50']:.2f} ms | {m['load_p99']:.2f} ms | "
                     f"{m['load_p99'] / m['idle_p99']:.1f}x | {fmt_rate(m['bulk_mib_s'])} | "
                     f"{fmt_rate(m['bulk_rps'])} |")
    ratio = med["single"]["load_p99"] / med["classes"]["load_p99"]
    lines.append("")
    lines.append(f"Interactive p99 under bulk load: single group / classes = {ratio:.1f}x")
    bulk_c, bulk_s = med["classes"]["bulk_mib_s"], med["single"]["bulk_mib_s"]
    if bulk_c is not None and bulk_s:
        lines.append(f"Bulk throughput: classes / single group = {bulk_c / bulk_s:.2f}x "
                     "(the cost of the latency gain)")
    table = "\n".join(lines)
    print("\n" + table)
    with open(os.path.join(outdir, "classes.md"), "w") as f:
        f.write(table + "\n")


if __name__ == "__main__":
    main()
