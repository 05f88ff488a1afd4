"""fastcgi_buffering on (uwsgi_buffering, scgi_buffering alike): the application's answer is
read as fast as it sends it, into memory (fastcgi_buffers) and past it a temporary file
without a name (fastcgi_temp_path, fastcgi_max_temp_file_size), so that a slow client
never holds a worker of the application; the application's connection goes back to the
pool once the answer is read, while the client is still served. `X-Accel-Buffering` from
the application turns it on or off for its answer.

What the application did is seen through a pool of one worker (PHP-FPM's pm.max_children
= 1, uWSGI's one worker): a second request is answered only once the first answer has
left the worker. The temporary files are seen from lfhttpd's open descriptors."""
import os
import signal
import socket
import time

import pytest

from conftest import check_clean_exit, past_buffers, scaled, wait_until
from fastcgi_harness import Fpm, lfhttpd, nginx, php_root
from test_fastcgi import request
from test_proxy_buffering import dechunk, slow_client, temp_fds

MIB = 1 << 20
# More than the kernel holds between the application and a client that does not read.
BIG_MIB = -(-past_buffers(sends=2, receives=1) // MIB)


def php_big(mib):
    """tests/integration/php/big.php's answer of `mib` MiB."""
    block = b"0123456789abcdef" * 65536
    return b"".join((b"%08d" % i + block)[:MIB] for i in range(mib))


def read_answer(c, got, timeout=60):
    """The rest of an answer (Content-Length or chunked) whose first bytes are `got`:
    (head, body)."""
    c.settimeout(scaled(timeout))
    while b"\r\n\r\n" not in got:
        got += c.recv(65536)
    head, _, body = got.partition(b"\r\n\r\n")
    fields = {line.split(b":")[0].strip().lower(): line.split(b":", 1)[1].strip()
              for line in head.split(b"\r\n")[1:]}
    parts, have, tail = [body], len(body), body[-5:]
    chunked = fields.get(b"transfer-encoding") == b"chunked"
    length = int(fields.get(b"content-length", b"-1"))
    while (have < length) if not chunked else tail != b"0\r\n\r\n":
        chunk = c.recv(1 << 20)
        assert chunk, f"closed after {have} bytes"
        parts.append(chunk)
        have += len(chunk)
        tail = (tail + chunk)[-5:]
    body = b"".join(parts)
    return head, dechunk(body)[0] if chunked else body


def php_location(sock, temp, lines, pass_to=None, read_timeout="30s"):
    return f"""
    location ~ \\.php$ {{
        fastcgi_pass {pass_to or "unix:" + sock};
        fastcgi_temp_path {temp};
        fastcgi_read_timeout {read_timeout};
        include fastcgi.conf;
        {lines}
    }}
"""


@pytest.fixture
def one_worker(tmp_path):
    """A PHP-FPM pool of one child, a document root with hello.php, and a start function
    for lfhttpd on `lines` inside the PHP location: (server, temp directory)."""
    fpm = Fpm(tmp_path / "fpm", children=1)
    root = php_root(tmp_path)
    with open(os.path.join(root, "hello.php"), "w") as f:
        f.write("<?php echo 'hello';\n")
    temp = tmp_path / "temp"
    temp.mkdir()
    servers = []

    def start(lines, top="", read_timeout="30s"):
        s = lfhttpd(tmp_path / f"lf{len(servers)}", root,
                    php_location(fpm.sock, temp, lines, "php" if top else None, read_timeout),
                    top=top.format(sock=fpm.sock))
        servers.append(s)
        return s, temp
    yield start
    try:
        for s in servers:
            check_clean_exit(s)
    finally:
        fpm.stop()


def answered_meanwhile(s, timeout):
    """Is a second request answered within timeout (while the first client waits)?"""
    try:
        return request(s, "GET", "/hello.php", timeout=timeout)[::2] == (200, b"hello")
    except (socket.timeout, TimeoutError):
        return False


def test_a_slow_client_does_not_hold_the_php_fpm_child(one_worker):
    s, _ = one_worker("fastcgi_buffering on;")
    c, got = slow_client(s, f"/big.php?mib={BIG_MIB}")
    try:
        # The one child wrote its whole answer while the client has read almost nothing.
        assert answered_meanwhile(s, scaled(20))
        assert len(got) <= 4096
        head, body = read_answer(c, got)
    finally:
        c.close()
    assert head.startswith(b"HTTP/1.1 200")
    assert body == php_big(BIG_MIB)


def test_with_fastcgi_buffering_off_a_slow_client_holds_the_child(one_worker):
    s, _ = one_worker("fastcgi_buffering off;")
    c, got = slow_client(s, f"/big.php?mib={BIG_MIB}")
    try:
        assert not answered_meanwhile(s, scaled(3))
    finally:
        c.close()


def test_x_accel_buffering_no_from_the_application_streams_its_answer(one_worker):
    s, temp = one_worker("fastcgi_buffering on;")
    c, got = slow_client(s, f"/big.php?mib={BIG_MIB}&accel=no")
    try:
        assert not answered_meanwhile(s, scaled(3))
        assert temp_fds(s.proc.pid, temp) == []
        head, body = read_answer(c, got)
    finally:
        c.close()
    assert body == php_big(BIG_MIB)
    assert b"x-accel-buffering" not in head.lower()  # nginx's own field: not passed


def test_x_accel_buffering_yes_from_the_application_buffers_with_fastcgi_buffering_off(
        one_worker):
    s, _ = one_worker("fastcgi_buffering off;")
    c, got = slow_client(s, f"/big.php?mib={BIG_MIB}&accel=yes")
    try:
        assert answered_meanwhile(s, scaled(20))
        _, body = read_answer(c, got)
    finally:
        c.close()
    assert body == php_big(BIG_MIB)


def test_the_answer_past_the_memory_buffers_is_in_a_temporary_file_gone_afterwards(
        one_worker):
    s, temp = one_worker("fastcgi_buffering on;\n        fastcgi_buffers 4 4k;")
    c, got = slow_client(s, f"/big.php?mib={BIG_MIB}")
    try:
        assert answered_meanwhile(s, scaled(20))
        files = temp_fds(s.proc.pid, temp)
        assert len(files) == 1 and files[0].endswith("(deleted)"), files
        assert os.listdir(temp) == []  # never a name in the directory
        _, body = read_answer(c, got)
        assert body == php_big(BIG_MIB)
    finally:
        c.close()
    assert wait_until(lambda: temp_fds(s.proc.pid, temp) == [], scaled(5))
    assert os.listdir(temp) == []


def test_a_client_that_leaves_mid_answer_leaves_no_temporary_file(one_worker):
    s, temp = one_worker("fastcgi_buffering on;")
    c, got = slow_client(s, f"/big.php?mib={BIG_MIB}")
    try:
        assert answered_meanwhile(s, scaled(20))
        assert len(temp_fds(s.proc.pid, temp)) == 1
    finally:
        c.close()
    assert wait_until(lambda: temp_fds(s.proc.pid, temp) == [], scaled(5))
    assert os.listdir(temp) == []


def children(pid):
    """The processes whose parent is pid."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry))
        except (OSError, ValueError, IndexError):
            pass
    return found


@pytest.mark.parametrize("end", ["the_application_dies", "the_read_timeout_passes"])
def test_an_answer_cut_midway_leaves_no_temporary_file(one_worker, tmp_path, end):
    s, temp = one_worker("fastcgi_buffering on;", read_timeout="2s")
    with open(tmp_path / "www" / "pause.php", "w") as f:
        f.write(f"<?php echo str_repeat('x', {BIG_MIB} << 20); flush(); sleep(30);"
                " echo 'never';\n")
    c, got = slow_client(s, "/pause.php")
    try:
        assert wait_until(lambda: len(temp_fds(s.proc.pid, temp)) == 1, scaled(20))
        if end == "the_application_dies":
            fpm_master = int(open(tmp_path / "fpm" / "fpm.pid").read())
            for child in children(fpm_master):
                os.kill(child, signal.SIGKILL)
        # The answer is cut: its file goes at once, and the client's connection closes.
        assert wait_until(lambda: temp_fds(s.proc.pid, temp) == [], scaled(10))
        assert os.listdir(temp) == []
        c.settimeout(scaled(30))
        while c.recv(1 << 20):
            pass
    finally:
        c.close()


def test_an_answer_served_across_a_reload_leaves_no_temporary_file(one_worker):
    from test_reload import reload
    s, temp = one_worker("fastcgi_buffering on;")
    c, got = slow_client(s, f"/big.php?mib={BIG_MIB}")
    try:
        assert answered_meanwhile(s, scaled(20))
        reload(s)  # the answer goes on with the generation it began in
        assert len(temp_fds(s.proc.pid, temp)) == 1
        _, body = read_answer(c, got)
    finally:
        c.close()
    assert body == php_big(BIG_MIB)
    assert wait_until(lambda: temp_fds(s.proc.pid, temp) == [], scaled(5))
    assert os.listdir(temp) == []


def test_fastcgi_max_temp_file_size_0_keeps_to_the_memory_buffers(one_worker):
    s, temp = one_worker("fastcgi_buffering on;\n        fastcgi_max_temp_file_size 0;")
    c, got = slow_client(s, f"/big.php?mib={BIG_MIB}")
    try:
        # No file: once the memory is full the child waits for the client, as streaming.
        assert not answered_meanwhile(s, scaled(3))
        assert temp_fds(s.proc.pid, temp) == []
        _, body = read_answer(c, got)
    finally:
        c.close()
    assert body == php_big(BIG_MIB)


def sockets(pid):
    """How many sockets lfhttpd has open."""
    fd_dir = f"/proc/{pid}/fd"
    n = 0
    for fd in os.listdir(fd_dir):
        try:
            n += os.readlink(os.path.join(fd_dir, fd)).startswith("socket:")
        except OSError:
            pass
    return n


def read_whole_into_file(pid, temp):
    """Wait until lfhttpd's one temporary file in temp stops growing: the answer is read."""
    sizes = []

    def stable():
        fds = [fd for fd in os.listdir(f"/proc/{pid}/fd")
               if os.readlink(f"/proc/{pid}/fd/{fd}").startswith(str(temp) + "/")]
        sizes.append(os.stat(f"/proc/{pid}/fd/{fds[0]}").st_size if fds else -1)
        return len(sizes) > 10 and sizes[-1] > 0 and len(set(sizes[-10:])) == 1
    return wait_until(stable, scaled(20))


def test_the_kept_connection_goes_back_to_the_pool_before_the_client_is_served(one_worker):
    s, temp = one_worker("fastcgi_buffering on;\n        fastcgi_keep_conn on;",
                         top="upstream php {{ server unix:{sock}; keepalive 2; }}\n")
    before = sockets(s.proc.pid)
    c, got = slow_client(s, f"/big.php?mib={BIG_MIB}")
    try:
        assert read_whole_into_file(s.proc.pid, temp)
        # The client's connection, and the application's kept (idle) while the client waits.
        assert sockets(s.proc.pid) == before + 2
        # PHP-FPM binds its one child to a kept connection: a request is answered only on
        # that one.
        assert answered_meanwhile(s, scaled(20))
        assert answered_meanwhile(s, scaled(20))
        _, body = read_answer(c, got)
    finally:
        c.close()
    assert body == php_big(BIG_MIB)


def test_fastcgi_buffering_is_on_by_default_in_a_file_with_http_block(tmp_path):
    fpm = Fpm(tmp_path / "fpm", children=1)
    root = php_root(tmp_path)
    with open(os.path.join(root, "hello.php"), "w") as f:
        f.write("<?php echo 'hello';\n")
    from conftest import Server
    from fastcgi_harness import with_conf_files
    with_conf_files(tmp_path / "lf")
    conf = ("error_log stderr debug;\nshutdown_timeout 5s;\nhttp {\n"
            f"  server {{\n    listen 127.0.0.1:0;\n    root {root};\n"
            + php_location(fpm.sock, tmp_path, "") + "  }\n}\n")
    s = None
    try:
        s = Server(tmp_path / "lf", None, conf=conf)
        c, got = slow_client(s, f"/big.php?mib={BIG_MIB}")
        try:
            assert answered_meanwhile(s, scaled(20))
        finally:
            c.close()
    finally:
        if s:
            check_clean_exit(s)
        fpm.stop()


def test_a_buffered_answer_is_nginxs_byte_for_byte(tmp_path):
    """The same configuration on nginx and lfhttpd, each with a pool of one child: both
    answer a second request while a slow client holds the first answer, and both answers
    are the same bytes."""
    fpm = Fpm(tmp_path / "fpm", children=1)
    fpm2 = Fpm(tmp_path / "fpm2", children=1)
    root = php_root(tmp_path)
    with open(os.path.join(root, "hello.php"), "w") as f:
        f.write("<?php echo 'hello';\n")
    temp = tmp_path / "temp"
    temp.mkdir()
    lf = ng = None
    try:
        lf = lfhttpd(tmp_path / "lf", root, php_location(fpm.sock, temp,
                                                         "fastcgi_buffering on;"))
        ng = nginx(tmp_path / "ng", root, php_location(fpm2.sock, temp, ""))
        for s in (lf, ng):
            c, got = slow_client(s, f"/big.php?mib={BIG_MIB}")
            try:
                assert answered_meanwhile(s, scaled(20)), s
                head, body = read_answer(c, got)
            finally:
                c.close()
            assert head.startswith(b"HTTP/1.1 200")
            assert body == php_big(BIG_MIB)
    finally:
        if lf:
            check_clean_exit(lf)
        if ng:
            ng.stop()
        fpm.stop()
        fpm2.stop()


@pytest.mark.parametrize("protocol", ["uwsgi", "scgi"])
def test_a_slow_client_does_not_hold_the_one_uwsgi_or_scgi_worker(tmp_path, protocol):
    from uwsgi_harness import Uwsgi
    from uwsgi_harness import lfhttpd as wire_lfhttpd
    app = Uwsgi(tmp_path / "app", protocol)
    temp = tmp_path / "temp"
    temp.mkdir()
    n = BIG_MIB * MIB
    s = None
    try:
        s = wire_lfhttpd(tmp_path / "lf", str(tmp_path), f"""
    location / {{
        {protocol}_pass unix:{app.sock};
        include {protocol}_params;
        {protocol}_buffering on;
        {protocol}_temp_path {temp};
        {protocol}_read_timeout 30s;
    }}""")
        c, got = slow_client(s, f"/large?n={n}&length=1")
        try:
            status, _, body = request(s, "GET", "/echo", timeout=scaled(20))
            assert status == 200
            _, big = read_answer(c, got)
        finally:
            c.close()
        piece = bytes((i * 7 + 3) % 251 for i in range(1000))
        assert big == (piece * (n // 1000 + 1))[:n]
    finally:
        if s:
            check_clean_exit(s)
        app.stop()
