#!/usr/bin/python3
"""make bench-classes: do service classes keep interactive latency under bulk overload?

Two configurations with the same total number of threads (2) serve the same files:
  classes  an `interactive` class (1 thread, priority high, /api/) and a `bulk` class
           (1 thread, priority low, /downloads/), plus a minimal default class;
  single   one Leader/Followers group of 2 threads.
For each, a light client times sequential keep-alive GETs of a 1 KiB file under /api/
(about 50 a second), first with the server idle, then while wrk saturates /downloads/
with 10 MiB files on many connections. The configurations alternate (A B A B ...) for
several rounds and the medians of each round's p50 and p99 are reported, with the ratio
loaded/idle. This machine has 2 cores shared with wrk and is noisy: read ratios, not
absolute numbers.

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

CONFIGS = {
    "classes": """
threads 1;
class interactive { threads 1; priority high; match path /api/; }
class bulk { threads 1; priority low; match path /downloads/; }
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
        m = re.search(r"Transfer/sec:\s+([\d.]+)(\w+)", out)
        bulk = f"{m.group(1)} {m.group(2)}/s" if m else "?"
    finally:
        stop(proc)
    return {"idle_p50": pct(idle, 50), "idle_p99": pct(idle, 99),
            "load_p50": pct(loaded, 50), "load_p99": pct(loaded, 99), "bulk": bulk}


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
                  f"p99 {res['load_p99']:.2f} ms | bulk {res['bulk']}", flush=True)
    lines = ["| configuration | idle p50 | idle p99 | bulk-loaded p50 | bulk-loaded p99 | "
             "p99 loaded/idle |", "| --- | --- | --- | --- | --- | --- |"]
    med = {}
    for name, rs in results.items():
        m = {k: statistics.median(x[k] for x in rs) for k in
             ("idle_p50", "idle_p99", "load_p50", "load_p99")}
        med[name] = m
        lines.append(f"| {name} | {m['idle_p50']:.2f} ms | {m['idle_p99']:.2f} ms | "
                     f"{m['load_p50']:.2f} ms | {m['load_p99']:.2f} ms | "
                     f"{m['load_p99'] / m['idle_p99']:.1f}x |")
    ratio = med["single"]["load_p99"] / med["classes"]["load_p99"]
    lines.append("")
    lines.append(f"Interactive p99 under bulk load: single group / classes = {ratio:.1f}x")
    table = "\n".join(lines)
    print("\n" + table)
    with open(os.path.join(outdir, "classes.md"), "w") as f:
        f.write(table + "\n")


if __name__ == "__main__":
    main()
