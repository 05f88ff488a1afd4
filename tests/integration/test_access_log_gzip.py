"""`access_log PATH FORMAT gzip[=LEVEL] ...`, as nginx's: the buffered lines (a buffer of
64k unless buffer= says) are compressed, and each write of a buffer appends one whole gzip
member to the file, so that `zcat FILE` reads every line written so far, whenever it is
read. The file is read with zcat itself, and against nginx on the same configuration."""
import signal
import socket
import subprocess
import time
import zlib

import pytest

from conftest import BIN, Nginx, scaled, wait_until
from test_access_log import conf, get, www


def zcat(path):
    """The file's lines as zcat reads them; zcat must read it whole, without complaint."""
    r = subprocess.run(["zcat", str(path)], capture_output=True, timeout=30)
    assert r.returncode == 0 and r.stderr == b"", r.stderr
    return r.stdout.decode("latin-1").splitlines()


def members(path):
    """How many gzip members the file holds (each must be whole)."""
    data, n = path.read_bytes(), 0
    while data:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        d.decompress(data)
        assert d.eof, "a member cut short"
        data, n = d.unused_data, n + 1
    return n


def gzipped(tmp_path, start_server, options, threads=1):
    """A server whose one log, a.log, writes `$uri` with `options`."""
    d = www(tmp_path)
    a = tmp_path / "a.log"
    s = start_server(d, conf=conf(
        tmp_path, f"server {{ access_log {a} t {options}; }}",
        top=f"access_log off;\nthreads {threads};\nlog_format t '$uri';"))
    return s, a


def size(path):
    return path.stat().st_size if path.exists() else 0


def check(tmp_path, body):
    path = tmp_path / "t.conf"
    path.write_text(conf(tmp_path, body))
    return path, subprocess.run([BIN, "-t", "-c", str(path)], capture_output=True,
                                text=True, timeout=30)


FORMAT = "log_format t '$request_method $uri $args $status $body_bytes_sent \"$http_x_a\"';\n"


def test_gzip_logs_read_by_zcat_give_nginxs_lines(tmp_path, start_server):
    """The same configuration (gzip at level 1 with flush=, gzip=9 in a buffer small enough
    to be written several times) run by nginx and by lfhttpd, the same requests: once both
    servers have stopped, zcat reads the same lines from both servers' files."""
    d = www(tmp_path)
    body = ("    location / { access_log LOG/g1.log t gzip flush=1m;\n"
            "                 access_log LOG/g9.log t gzip=9 buffer=200; }\n")
    nginx_dir, ours_dir = tmp_path / "nginx_logs", tmp_path / "ours_logs"
    nginx_dir.mkdir()
    ours_dir.mkdir()
    theirs = Nginx(tmp_path / "nginx", d, FORMAT + "server {\n    listen 127.0.0.1:{port0};\n"
                   f"    root {d};\n" + body.replace("LOG", str(nginx_dir)) + "}\n", http=True)
    try:
        ours = start_server(d, conf=conf(tmp_path, "server {\n" +
                                         body.replace("LOG", str(ours_dir)) + "}\n",
                                         top="access_log off;\nthreads 1;\n" + FORMAT))
        requests = [f"GET /x/f.txt?n={i} HTTP/1.1\r\nHost: t\r\nX-A: a \"{i}\"\xe9\r\n"
                    .encode("latin-1") for i in range(30)]
        requests += [b"HEAD /index.html HTTP/1.1\r\nHost: t\r\n",
                     b"GET /missing?q=1 HTTP/1.1\r\nHost: t\r\n"]
        for port, host in ((theirs.port, theirs.host), (ours.port, ours.host)):
            for r in requests:
                with socket.create_connection((host, port), timeout=5) as c:
                    c.sendall(r + b"Connection: close\r\n\r\n")
                    while c.recv(65536):
                        pass
    finally:
        theirs.stop()
    assert ours.stop() == 0
    for name in ("g1.log", "g9.log"):
        want, got = zcat(nginx_dir / name), zcat(ours_dir / name)
        assert len(want) == len(requests)
        for w, g in zip(want, got):
            if "/missing" in w:  # the bodies of error pages differ: the size aside
                w, g = w.rsplit(" ", 2)[0], g.rsplit(" ", 2)[0]
            assert g == w
        assert len(got) == len(want)
    assert members(ours_dir / "g9.log") > 1


def test_each_write_appends_one_member_and_zcat_reads_them_all(tmp_path, start_server):
    """Lines of 4 bytes in a buffer of 10: every third line writes the two before it, one
    gzip member each time; zcat reads the file whole after each, and all of it at the
    end."""
    s, a = gzipped(tmp_path, start_server, "gzip buffer=10")
    for i in range(1, 10):
        get(s, f"/x{i}")
        if i % 2 == 1 and i > 1:
            assert wait_until(lambda: size(a) and members(a) == i // 2, scaled(3))
            assert zcat(a) == [f"/x{k}" for k in range(1, i)]
    assert s.stop() == 0
    assert members(a) == 5
    assert zcat(a) == [f"/x{k}" for k in range(1, 10)]


def test_flush_time_writes_a_member_zcat_reads(tmp_path, start_server):
    """gzip with flush=1s: the line, compressed, is in the file a second later, readable
    while the server goes on; the next flush appends a second member."""
    s, a = gzipped(tmp_path, start_server, "gzip flush=1s")
    get(s, "/one")
    time.sleep(0.5)
    assert size(a) == 0
    assert wait_until(lambda: size(a) > 0, scaled(3))
    assert zcat(a) == ["/one"]
    get(s, "/two")
    assert wait_until(lambda: members(a) == 2, scaled(3))
    assert zcat(a) == ["/one", "/two"]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGQUIT])
def test_gzip_alone_buffers_64k_until_shutdown(tmp_path, start_server, sig):
    """gzip without buffer= is a buffer of 64k (nginx's): twenty short lines stay in it
    until the server stops (SIGTERM, or nginx's graceful SIGQUIT), and are then one
    member, every line in it."""
    s, a = gzipped(tmp_path, start_server, "gzip")
    for i in range(20):
        get(s, f"/n{i}")
    time.sleep(0.3)
    assert size(a) == 0
    assert s.stop(sig) == 0
    assert members(a) == 1
    assert zcat(a) == [f"/n{i}" for i in range(20)]


def test_gzip_lines_of_several_threads_are_written_whole_at_reload(tmp_path, start_server):
    """SIGHUP lets the old generation go: each thread's buffer is written as a member of
    its own, all whole, so zcat reads every line."""
    s, a = gzipped(tmp_path, start_server, "gzip=6", threads=4)
    for i in range(40):
        get(s, f"/n{i}")
    time.sleep(0.3)
    assert size(a) == 0
    before = len(s.error_log())
    s.proc.send_signal(signal.SIGHUP)
    assert wait_until(lambda: "configuration reloaded" in s.error_log()[before:])
    assert wait_until(lambda: size(a) and len(zcat(a)) == 40, scaled(3))
    assert sorted(zcat(a)) == sorted(f"/n{i}" for i in range(40))


def test_line_longer_than_the_buffer_is_a_member_of_its_own(tmp_path, start_server):
    """A line that does not fit the buffer goes at once after what the buffer held, as its
    own member."""
    s, a = gzipped(tmp_path, start_server, "gzip buffer=16")
    get(s, "/a")
    get(s, "/" + "b" * 100)
    assert wait_until(lambda: size(a) and members(a) == 2, scaled(3))
    assert zcat(a) == ["/a", "/" + "b" * 100]


def test_gzip_level_9_is_taken(tmp_path):
    www(tmp_path)
    _, r = check(tmp_path, f"server {{ access_log {tmp_path}/a.log combined gzip=9 "
                           "buffer=8k flush=5s if=$arg_x; }")
    assert r.returncode == 0, r.stderr


def test_gzip_level_outside_1_to_9_is_refused_with_file_and_line(tmp_path):
    www(tmp_path)
    for level in ("10", "0", "", "x", "-1"):
        path, r = check(tmp_path, f"server {{\n access_log {tmp_path}/a.log combined "
                                  f"gzip={level}; }}")
        assert r.returncode == 1, r.stderr
        assert f"{path}:6: " in r.stderr and "access_log: " in r.stderr, r.stderr
        assert f'invalid compression level "{level}"' in r.stderr, r.stderr


def test_one_file_with_two_gzip_levels_is_refused(tmp_path):
    """As nginx: the same file's buffers must agree, the compression level too."""
    www(tmp_path)
    path, r = check(tmp_path, f"server {{ access_log {tmp_path}/a.log combined gzip;\n"
                              f"location / {{ access_log {tmp_path}/a.log combined gzip=2; }} }}")
    assert r.returncode == 1
    assert "already defined with conflicting parameters" in r.stderr and f"{path}:" in r.stderr
