#!/usr/bin/python3
"""copies.py — how throughput grows from one copy of lfhttpd to two on one port.

    copies.py [--bin build/lfhttpd] [--rounds 3] [--duration 5] [--connections 100]

Three set-ups serve the same 1 KiB file on loopback:
    1 copy       one process, `threads 1`
    2 copies     two processes, `threads 1` each, `listen 127.0.0.1:PORT reuseport;`
                 (the kernel spreads new connections over the two)
    1 x 2        one process, `threads 2` (two thread groups), for comparison
wrk (one thread, keep-alive, --connections connections) runs against each for --duration
seconds, the set-ups interleaved for --rounds rounds (round i starts with set-up i mod 3),
and the medians are printed: requests/s and requests per CPU-second of the server
processes (utime+stime from /proc/PID/stat, summed over the copies, around each run).

The machine this was written on has 2 cores and wrk takes about one of them, so two
copies cannot double the throughput here; requests per CPU-second says what a copy
costs. Every process is stopped by PID at the end, on failure and on Ctrl-C as well.

Standard library only.
"""
import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TICKS = os.sysconf("SC_CLK_TCK")


def conf(docroot, port, threads, reuseport):
    return (f"listen 127.0.0.1:{port}{' reuseport' if reuseport else ''};\n"
            f'root "{docroot}";\nthreads {threads};\naccess_log off;\n'
            "error_log stderr info;\nshutdown_timeout 2s;\n")


class Copy:
    """One lfhttpd process; its port is read from its log."""

    def __init__(self, binary, workdir, name, docroot, port, threads, reuseport):
        self.conf = os.path.join(workdir, name + ".conf")
        self.log = os.path.join(workdir, name + ".log")
        with open(self.conf, "w") as f:
            f.write(conf(docroot, port, threads, reuseport))
        with open(self.log, "w") as err:
            self.proc = subprocess.Popen([binary, "-c", self.conf], stdout=err, stderr=err)
        self.port = self._wait_port()

    def _wait_port(self):
        deadline = time.time() + 10
        while time.time() < deadline:
            with open(self.log) as f:
                m = re.search(r"listening on [0-9.]+:(\d+)", f.read())
            if m:
                return int(m.group(1))
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        with open(self.log) as f:
            raise RuntimeError(f"lfhttpd did not start:\n{f.read()}")

    def cpu_seconds(self):
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def wrk(port, connections, duration):
    out = subprocess.run(["wrk", "-t1", f"-c{connections}", f"-d{duration}s",
                          f"http://127.0.0.1:{port}/1k.bin"],
                         capture_output=True, text=True, check=True).stdout
    requests = int(re.search(r"(\d+) requests in", out).group(1))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)|Socket errors: .*", out)
    if errors:
        raise RuntimeError(f"wrk saw errors:\n{out}")
    return requests


def measure(copies, connections, duration):
    """One run: (requests/s, requests per server CPU-second)."""
    cpu0 = sum(c.cpu_seconds() for c in copies)
    t0 = time.monotonic()
    requests = wrk(copies[0].port, connections, duration)
    elapsed = time.monotonic() - t0
    cpu = sum(c.cpu_seconds() for c in copies) - cpu0
    return requests / elapsed, requests / cpu if cpu > 0 else float("nan")


def start_setups(binary, workdir, docroot, started):
    """The three set-ups; every process started is appended to started at once."""
    def copy(name, port, threads, reuseport):
        started.append(Copy(binary, workdir, name, docroot, port, threads, reuseport))
        return started[-1]

    one = copy("one", 0, 1, False)
    first = copy("copy-a", 0, 1, True)
    second = copy("copy-b", first.port, 1, True)
    two_threads = copy("threads2", 0, 2, False)
    return {"1 copy": [one], "2 copies": [first, second], "1 x 2 threads": [two_threads]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "lfhttpd"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--connections", type=int, default=100)
    args = ap.parse_args()

    workdir = tempfile.mkdtemp(prefix="lfhttpd-copies-")
    docroot = os.path.join(workdir, "www")
    os.mkdir(docroot)
    with open(os.path.join(docroot, "1k.bin"), "wb") as f:
        f.write(b"x" * 1024)
    started = []
    try:
        setups = start_setups(args.bin, workdir, docroot, started)
        names = list(setups)
        runs = {n: [] for n in names}
        for r in range(args.rounds):
            for i in range(len(names)):
                name = names[(r + i) % len(names)]
                runs[name].append(measure(setups[name], args.connections, args.duration))
                rps, per_cpu = runs[name][-1]
                print(f"round {r + 1} {name:14} {rps:9.0f} req/s {per_cpu:9.0f} req/CPU-s",
                      file=sys.stderr)
        base = statistics.median(x[0] for x in runs[names[0]])
        print(f"wrk -t1 -c{args.connections} -d{args.duration}s keep-alive, 1 KiB, "
              f"{args.rounds} rounds interleaved, medians ({os.cpu_count()} CPUs):")
        print("| set-up | requests/s | vs 1 copy | requests per CPU-second |")
        print("|---|---:|---:|---:|")
        for name in names:
            rps = statistics.median(x[0] for x in runs[name])
            per_cpu = statistics.median(x[1] for x in runs[name])
            print(f"| {name} | {rps:.0f} | {rps / base:.2f} | {per_cpu:.0f} |")
    finally:
        for c in started:
            c.stop()


if __name__ == "__main__":
    main()
