"""proxy_buffering on: the upstream's answer is read as fast as the upstream sends it, into
memory (proxy_buffers) and past it a temporary file without a name (proxy_temp_path,
proxy_max_temp_file_size), so that a slow client never holds the upstream; the upstream
connection goes back to the pool once the answer is read, while the client is still
served. `X-Accel-Buffering` from the upstream turns it on or off for its answer.

What the upstream did is seen from its side (upstream_app.py's log: a request is
"answered" once its whole answer was written); the temporary files from the proxy's open
descriptors (/proc/PID/fd: a file without a name shows as "DIR/#N (deleted)") and its
directory, which must stay empty.
"""
import os
import socket
import time

import pytest

from conftest import past_buffers, scaled, wait_until
from proxy_harness import UNDER_NGINX, Proxy, Upstream, proxy, upstream  # noqa: F401 fixtures
from test_proxy import request

MIB = 1 << 20
# More than the kernel can hold between the upstream and a client that does not read:
# the upstream's send buffer, the proxy's receive buffer from it, its send buffer to the
# client. A streaming proxy stops the upstream long before the end of such an answer.
BIG_MB = -(-past_buffers(sends=2, receives=1) // MIB)


def conf(temp, lines, keepalive=True):
    return f"""
upstream app {{
    server 127.0.0.1:{{up0}};
    {"keepalive 8;" if keepalive else ""}
}}
server {{
    listen 127.0.0.1:{{port0}};
    location / {{
        proxy_pass http://app;
        proxy_temp_path {temp};
        {lines}
    }}
}}
"""


def temp_fds(pid, temp):
    """The proxy's open descriptors on files in the directory temp."""
    found = []
    fd_dir = f"/proc/{pid}/fd"
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            continue
        if target.startswith(str(temp) + "/"):
            found.append(target)
    return found


def slow_client(p, target):
    """A client that sent its request and read a little of the answer, then reads no more
    (a small receive buffer): (socket, bytes read so far)."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.settimeout(scaled(20))
    s.connect((p.host, p.port))
    s.sendall(f"GET {target} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
    return s, s.recv(4096)


def read_answer(s, got, timeout=60):
    """The rest of a Content-Length answer whose first bytes are `got`: (head, body)."""
    s.settimeout(scaled(timeout))
    while b"\r\n\r\n" not in got:
        got += s.recv(65536)
    head, _, body = got.partition(b"\r\n\r\n")
    length = int([line.split(b":")[1] for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:")][0])
    parts = [body]
    have = len(body)
    while have < length:
        chunk = s.recv(1 << 20)
        assert chunk, f"closed after {have} of {length} bytes"
        parts.append(chunk)
        have += len(chunk)
    return head, b"".join(parts)


def generated(n):
    """upstream_app's _big body: byte i is i % 251."""
    block = bytes(i % 251 for i in range(251 * 4096))
    return (block * (n // len(block) + 1))[:n]


def answered(u, target):
    return any(r["target"] == target and r.get("answered") for r in u.requests())


pytestmark = pytest.mark.skipif(UNDER_NGINX, reason="[by design] lfhttpd's descriptors "
                                "and its own files; nginx is compared in its own test")


def test_a_slow_client_does_not_hold_the_upstream_once_it_has_sent_the_answer(
        upstream, proxy, tmp_path):
    u = upstream()
    p = proxy(conf(tmp_path, "proxy_buffering on;"), u)
    target = f"/_big?mb={BIG_MB}"
    s, got = slow_client(p, target)
    try:
        # The upstream wrote its whole answer while the client has read almost nothing.
        assert wait_until(lambda: answered(u, target), scaled(30))
        assert len(got) <= 4096
        head, body = read_answer(s, got)
    finally:
        s.close()
    assert head.startswith(b"HTTP/1.1 200")
    assert body == generated(BIG_MB * MIB)


def test_the_upstream_connection_is_kept_for_the_next_request_before_the_client_is_served(
        upstream, proxy, tmp_path):
    u = upstream()
    p = proxy(conf(tmp_path, "proxy_buffering on;"), u, threads=1)
    target = f"/_big?mb={BIG_MB}"
    s, got = slow_client(p, target)
    try:
        assert wait_until(lambda: answered(u, target), scaled(30))
        # The first client has not read its answer; a second request goes on the same
        # upstream connection, back in the pool.
        status, _, _, _ = request(p, "/second")
        assert status == 200
        first, second = u.requests()
        assert (second["conn"], second["seq"]) == (first["conn"], 2)
        _, body = read_answer(s, got)
        assert len(body) == BIG_MB * MIB
    finally:
        s.close()


def test_the_answer_past_the_memory_buffers_is_in_a_temporary_file_gone_afterwards(
        upstream, proxy, tmp_path):
    u = upstream()
    temp = tmp_path / "temp"
    temp.mkdir()
    p = proxy(conf(temp, "proxy_buffering on;\n        proxy_buffers 4 4k;"), u)
    target = f"/_big?mb={BIG_MB}"
    s, got = slow_client(p, target)
    try:
        assert wait_until(lambda: answered(u, target), scaled(30))
        files = temp_fds(p.pid, temp)
        assert len(files) == 1 and files[0].endswith("(deleted)"), files
        assert os.listdir(temp) == []  # never a name in the directory
        _, body = read_answer(s, got)
        assert body == generated(BIG_MB * MIB)
    finally:
        s.close()
    assert wait_until(lambda: temp_fds(p.pid, temp) == [], scaled(5))
    assert os.listdir(temp) == []


def test_proxy_max_temp_file_size_0_keeps_to_the_memory_buffers(upstream, proxy, tmp_path):
    u = upstream()
    temp = tmp_path / "temp"
    temp.mkdir()
    p = proxy(conf(temp, "proxy_buffering on;\n        proxy_max_temp_file_size 0;"), u)
    target = f"/_big?mb={BIG_MB}"
    s, got = slow_client(p, target)
    try:
        # No file: once the memory is full the upstream waits for the client, as without
        # buffering.
        time.sleep(scaled(3))
        assert not answered(u, target)
        assert temp_fds(p.pid, temp) == []
        _, body = read_answer(s, got)
        assert body == generated(BIG_MB * MIB)
    finally:
        s.close()
    assert wait_until(lambda: answered(u, target), scaled(10))


def test_x_accel_buffering_no_from_the_upstream_streams_its_answer(upstream, proxy, tmp_path):
    u = upstream()
    temp = tmp_path / "temp"
    temp.mkdir()
    p = proxy(conf(temp, "proxy_buffering on;"), u)
    target = f"/_big?mb={BIG_MB}&h=X-Accel-Buffering:no"
    s, got = slow_client(p, target)
    try:
        time.sleep(scaled(3))
        assert not answered(u, target)
        assert temp_fds(p.pid, temp) == []
        head, body = read_answer(s, got)
        assert body == generated(BIG_MB * MIB)
    finally:
        s.close()
    assert b"x-accel-buffering" not in head.lower()  # nginx's own field: not passed


def test_x_accel_buffering_yes_from_the_upstream_buffers_with_proxy_buffering_off(
        upstream, proxy, tmp_path):
    u = upstream()
    p = proxy(conf(tmp_path, "proxy_buffering off;"), u)
    target = f"/_big?mb={BIG_MB}&h=X-Accel-Buffering:yes"
    s, got = slow_client(p, target)
    try:
        assert wait_until(lambda: answered(u, target), scaled(30))
        _, body = read_answer(s, got)
        assert body == generated(BIG_MB * MIB)
    finally:
        s.close()



def test_a_slow_client_gets_what_was_read_while_the_upstream_pauses(upstream, proxy,
                                                                   tmp_path):
    u = upstream()
    p = proxy(conf(tmp_path, "proxy_buffering on;"), u)
    size = BIG_MB * MIB
    gap = 20
    s, got = slow_client(p, f"/_slow?pieces=2&size={size}&gap={gap}")
    try:
        # The upstream has written its first piece (the proxy took it), and sleeps.
        assert wait_until(lambda: sum(c["bytes_out"] for c in u.conns()) > size, scaled(30))
        began = time.time()
        s.settimeout(scaled(10))
        while b"\r\n\r\n" not in got:
            got += s.recv(65536)
        have = len(got.partition(b"\r\n\r\n")[2])
        while have < size:  # the whole first piece, while the upstream says nothing more
            have += len(s.recv(1 << 20))
        assert time.time() - began < gap / 2
    finally:
        s.close()



@pytest.mark.parametrize("extra", ["concurrency thread_per_connection;",
                                   "concurrency half_sync_half_async;",
                                   "reactivation oneshot;"])
def test_buffering_works_under_every_strategy_and_reactivation(upstream, proxy, tmp_path,
                                                               extra):
    u = upstream()
    p = proxy(extra + "\n" + conf(tmp_path, "proxy_buffering on;"), u)
    size = BIG_MB * MIB
    target = f"/_slow?pieces=2&size={size // 2}&gap=1"
    s, got = slow_client(p, target)
    try:
        assert wait_until(lambda: answered(u, target), scaled(30))
        _, body = read_answer(s, got)
        assert body == b"s" * (size // 2 * 2)
    finally:
        s.close()
    assert request(p, "/after")[0] == 200


def in_flight(p):
    import json
    _, _, body, _ = request(p, "/status?format=json")
    return json.loads(body)["upstreams"][0]["active"]


def test_a_client_that_leaves_mid_answer_leaves_no_file_and_frees_its_upstream(
        upstream, proxy, tmp_path):
    u = upstream()
    temp = tmp_path / "temp"
    temp.mkdir()
    text = conf(temp, "proxy_buffering on;", keepalive=False).replace(
        "    location / {", "    location /status { handler status; }\n    location / {")
    p = proxy(text, u)
    # The upstream sends half its answer, then waits: the client leaves meanwhile.
    size = 4 * MIB
    target = f"/_slow?pieces=2&size={size}&gap=30"
    s, got = slow_client(p, target)
    assert wait_until(lambda: len(temp_fds(p.pid, temp)) == 1, scaled(20))
    assert in_flight(p) == 1
    s.close()
    assert wait_until(lambda: temp_fds(p.pid, temp) == [], scaled(5))
    assert wait_until(lambda: in_flight(p) == 0, scaled(5))
    assert os.listdir(temp) == []


def test_proxy_buffering_is_off_by_default_in_lfhttpds_own_files(upstream, proxy, tmp_path):
    u = upstream()
    p = proxy(conf(tmp_path, ""), u)
    target = f"/_big?mb={BIG_MB}"
    s, got = slow_client(p, target)
    try:
        time.sleep(scaled(3))
        assert not answered(u, target)
        _, body = read_answer(s, got)
        assert len(body) == BIG_MB * MIB
    finally:
        s.close()


def test_proxy_buffering_is_on_by_default_in_a_file_with_http_block(upstream, start_server,
                                                                   tmp_path):
    u = upstream()
    root = tmp_path / "root"
    root.mkdir()
    from conftest import free_port
    port = free_port()
    text = (f"error_log stderr debug;\nevents {{ }}\nhttp {{\n  access_log off;\n"
            f"  upstream app {{ server 127.0.0.1:{u.ports[0]}; keepalive 8; }}\n"
            f"  server {{\n    listen 127.0.0.1:{port};\n    root {root};\n"
            f"    location / {{ proxy_pass http://app; proxy_http_version 1.1;\n"
            f"      proxy_set_header Connection \"\"; proxy_temp_path {tmp_path}; }}\n"
            f"  }}\n}}\n")
    srv = start_server(str(root), conf=text)
    target = f"/_big?mb={BIG_MB}"
    s, got = slow_client(srv, target)
    try:
        assert wait_until(lambda: answered(u, target), scaled(30))
        _, body = read_answer(s, got)
        assert len(body) == BIG_MB * MIB
    finally:
        s.close()


def raw_answer(host, port, target, method="GET"):
    """One request on a new connection (Connection: close), read slowly: a small receive
    buffer, and nothing read for a second, so that the proxy keeps the answer meanwhile.
    The bytes until the server closes."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.settimeout(scaled(30))
    s.connect((host, port))
    try:
        s.sendall(f"{method} {target} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
                  .encode())
        time.sleep(1)
        data = []
        while True:
            chunk = s.recv(1 << 20)
            if not chunk:
                return b"".join(data)
            data.append(chunk)
    finally:
        s.close()


def dechunk(body):
    out, pos = [], 0
    while True:
        line_end = body.index(b"\r\n", pos)
        size = int(body[pos:line_end].split(b";")[0], 16)
        if size == 0:
            return b"".join(out), body[line_end + 2:]
        out.append(body[line_end + 2:line_end + 2 + size])
        pos = line_end + 2 + size + 2


def comparable(raw):
    """An answer as the two must agree on it: the status line, the fields but Date, Server
    and Connection (and Trailer, a hop-by-hop field nginx 1.22 relays and lfhttpd does not,
    by design: docs/guide/migrating-from-nginx.md), the framing, and the body (decoded if
    chunked; its trailer part)."""
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    fields = sorted(tuple(line.lower().split(b":", 1)) for line in lines[1:]
                    if line.split(b":", 1)[0].lower() not in (b"date", b"server",
                                                              b"connection", b"trailer"))
    chunked = (b"transfer-encoding", b" chunked") in fields
    if chunked and body:
        body = dechunk(body)
    return lines[0], fields, body


@pytest.mark.parametrize("target,method", [
    (f"/_big?mb=8", "GET"),
    (f"/_big?mb=8&chunked=1", "GET"),
    ("/_chunked", "GET"),
    ("/_noclen?size=3000000", "GET"),
    ("/_big?mb=1", "HEAD"),
    (f"/_big?mb=8&h=X-Accel-Buffering:no", "GET"),
    ("/_slow?pieces=3&size=100000&gap=0.2", "GET"),
])
def test_the_answer_is_nginxs_byte_for_byte(upstream, tmp_path, docroot, nginx_proxy_both,
                                            target, method):
    seen = [comparable(raw_answer(p.host, p.port, target, method))
            for p in nginx_proxy_both()]
    assert seen[0] == seen[1]


DIFF_CONF = """
gzip off;
upstream app {
    server 127.0.0.1:{up0};
}
server {
    listen 127.0.0.1:{port0};
    location / {
        proxy_pass http://app;
        proxy_buffering on;
        proxy_buffers 4 8k;
        proxy_temp_path TEMP;
    }
}
"""


@pytest.fixture
def nginx_proxy_both(upstream, tmp_path, docroot):
    """The same configuration run by nginx and by lfhttpd, in front of one upstream."""
    started = []

    def start():
        u = upstream()
        for kind in ("nginx", "lfhttpd"):
            temp = tmp_path / f"temp-{kind}"
            temp.mkdir()
            started.append(Proxy(tmp_path / kind, DIFF_CONF.replace("TEMP", str(temp)), u,
                                 docroot, kind=kind, site_lines=False))
        return started

    yield start
    for p in started:
        p.stop()


def test_a_compressed_answer_goes_through_the_buffers_whole_and_in_order(upstream, proxy,
                                                                         tmp_path):
    import gzip
    u = upstream()
    size = 8 * MIB  # random: it does not compress, and fills every buffer on the way
    # (a GET, which gzip compresses; its body comes back in the echo)
    sent = os.urandom(size)
    p = proxy(f"max_body_size {2 * size};\n" +
              conf(tmp_path, "proxy_buffering on;\n        proxy_buffers 4 8k;\n"
                   "        gzip on;\n        gzip_types text/plain;"), u)
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.settimeout(scaled(60))
    s.connect((p.host, p.port))
    try:
        s.sendall(f"GET /_raw?type=text/plain HTTP/1.1\r\nHost: t\r\nAccept-Encoding: gzip\r\n"
                  f"Content-Length: {size}\r\nConnection: close\r\n\r\n".encode() + sent)
        assert wait_until(lambda: answered(u, "/_raw?type=text/plain"), scaled(30))
        data = []
        while True:
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            data.append(chunk)
    finally:
        s.close()
    head, _, body = b"".join(data).partition(b"\r\n\r\n")
    assert b"content-encoding: gzip" in head.lower()
    assert b"transfer-encoding: chunked" in head.lower()
    plain = gzip.decompress(dechunk(body)[0])
    assert plain.endswith(b"\r\n\r\n" + sent)


def _check(tmp_path, temp):
    import subprocess
    from conftest import BIN
    conf = tmp_path / "t.conf"
    conf.write_text("listen 127.0.0.1:0;\nserver {\n  location / {\n"
                    f"    proxy_pass http://127.0.0.1:9; proxy_temp_path {temp} 1 2;\n"
                    "  }\n}\n")
    return subprocess.run([BIN, "-t", "-c", str(conf)], capture_output=True, text=True,
                          timeout=30), conf


def test_a_missing_proxy_temp_path_is_made_as_nginx_makes_it(tmp_path):
    temp = tmp_path / "proxy_temp"
    r, _ = _check(tmp_path, temp)
    assert r.returncode == 0, r.stderr
    assert temp.is_dir() and (temp.stat().st_mode & 0o777) == 0o700


def test_a_proxy_temp_path_whose_parent_is_missing_names_its_line(tmp_path):
    r, conf = _check(tmp_path, tmp_path / "no" / "proxy_temp")
    assert r.returncode == 1 and f"{conf}:4:" in r.stderr and "cannot make" in r.stderr, \
        r.stderr


def test_missing_temp_path_is_made_as_nginx_makes_it(tmp_path):
    """nginx makes a proxy_temp_path that is not there yet (its parent must be): so does
    lfhttpd, at -t as at start, rather than refusing the configuration."""
    import subprocess
    from conftest import BIN
    temp = tmp_path / "proxy_temp"
    path = tmp_path / "t.conf"
    path.write_text(f"listen 127.0.0.1:0;\nroot {tmp_path};\naccess_log off;\n"
                    f"proxy_temp_path {temp};\n")
    r = subprocess.run([BIN, "-t", "-c", str(path)], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0, r.stderr
    assert temp.is_dir()


@pytest.mark.skipif(os.geteuid() != 0, reason="[by design] only root can become `user`")
def test_a_proxy_temp_path_started_by_root_is_written_in_as_user(upstream, proxy, tmp_path):
    """Started by root with `user nobody`, the server gives its proxy_temp_path to nobody
    (as nginx gives its temporary paths to its workers' user), so that an answer past the
    memory buffers still goes to a temporary file once the server runs as nobody."""
    import pwd
    import shutil
    import tempfile
    outer = tempfile.mkdtemp(prefix="lfhttpd-temp-")  # nobody can reach it, not write it
    try:
        os.chmod(outer, 0o755)
        temp = os.path.join(outer, "proxy_temp")
        u = upstream()
        p = proxy("user nobody nogroup;\n" + conf(temp, "proxy_buffering on;"), u)
        assert os.stat(temp).st_uid == pwd.getpwnam("nobody").pw_uid
        target = f"/_big?mb={BIG_MB}"
        s, got = slow_client(p, target)
        try:
            assert wait_until(lambda: answered(u, target), scaled(30))
            head, body = read_answer(s, got)
        finally:
            s.close()
        assert head.startswith(b"HTTP/1.1 200")
        assert body == generated(BIG_MB * MIB)
    finally:
        shutil.rmtree(outer, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="[by design] only root can become `user`")
def test_a_proxy_temp_path_all_may_write_in_is_never_given_to_user(tmp_path):
    """A directory like /tmp (world-writable, sticky) stays root's: it is usable by the
    user as it is, and giving it away would hand that user everyone's files."""
    import subprocess
    import tempfile
    from conftest import BIN
    shared = tempfile.mkdtemp(prefix="lfhttpd-shared-")
    try:
        os.chmod(shared, 0o1777)
        path = tmp_path / "t.conf"
        path.write_text("user nobody nogroup;\nlisten 127.0.0.1:0;\nserver {\n  location / {\n"
                        f"    proxy_pass http://127.0.0.1:9; proxy_temp_path {shared};\n"
                        "  }\n}\n")
        r = subprocess.run([BIN, "-t", "-c", str(path)], capture_output=True, text=True,
                           timeout=30)
        assert r.returncode == 0, r.stderr
        assert os.stat(shared).st_uid == 0
    finally:
        os.rmdir(shared)


@pytest.mark.skipif(os.geteuid() != 0, reason="[by design] only root can become `user`")
@pytest.mark.parametrize("kind", ["fastcgi", "uwsgi", "scgi"])
def test_an_application_temp_path_started_by_root_is_given_to_user(tmp_path, kind):
    """As proxy_temp_path: fastcgi_, uwsgi_ and scgi_temp_path are written in once the
    server runs as `user`."""
    import pwd
    import shutil
    import subprocess
    import tempfile
    from conftest import BIN
    outer = tempfile.mkdtemp(prefix="lfhttpd-temp-")
    try:
        os.chmod(outer, 0o755)
        temp = os.path.join(outer, f"{kind}_temp")
        path = tmp_path / "t.conf"
        path.write_text("user nobody nogroup;\nlisten 127.0.0.1:0;\nserver {\n  location / {\n"
                        f"    {kind}_temp_path {temp};\n  }}\n}}\n")
        r = subprocess.run([BIN, "-t", "-c", str(path)], capture_output=True, text=True,
                           timeout=30)
        assert r.returncode == 0, r.stderr
        assert os.stat(temp).st_uid == pwd.getpwnam("nobody").pw_uid
    finally:
        shutil.rmtree(outer, ignore_errors=True)
