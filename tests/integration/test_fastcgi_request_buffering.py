"""fastcgi_request_buffering off (uwsgi_request_buffering, scgi_request_buffering alike):
the application is connected to once the request's head is read, its parameters sent, and
the body relayed as it arrives (FCGI_STDIN records; as it is after a uwsgi packet or an SCGI
netstring, which say CONTENT_LENGTH), through a fixed buffer. With `on` (the default) the
body is read whole first.

The applications are real: PHP-FPM 8.2 and uWSGI. What the application got, and when, is
seen through a side channel: the script writes a file once its first read of the body has
returned, while the client still holds the rest of it back; "the application read the
body while the client was still sending" is proved by the order of events, not by a clock.
The differential tests run nginx beside lfhttpd on the same configuration and the same
PHP-FPM pool, and compare what the script saw and what the client got."""
import hashlib
import json
import os
import socket
import threading
import time

import pytest

from conftest import (Client, check_clean_exit, nginx_beside_lfhttpd, scaled,
                      wait_until)
from fastcgi_harness import ROOT, Fpm, lfhttpd
from uwsgi_harness import Uwsgi
from uwsgi_harness import lfhttpd as wire_lfhttpd

MIB = 1 << 20

# Reads php://input a piece at a time (a PUT's: PHP reads a POST with a Content-Type whole
# before the script runs); once the first piece came, writes its length to the file named
# by ?mark=; answers the body's length and MD5, and CONTENT_LENGTH as the script saw it.
STREAM_PHP = r"""<?php
$in = fopen('php://input', 'rb');
$md5 = hash_init('md5');
$n = 0;
$first = true;
while (($piece = fread($in, 65536)) !== false && $piece !== '') {
    if ($first && isset($_GET['mark']))
        file_put_contents($_GET['mark'], strval(strlen($piece)));
    $first = false;
    hash_update($md5, $piece);
    $n += strlen($piece);
}
header('Content-Type: application/json');
echo json_encode(['n' => $n, 'md5' => hash_final($md5),
                  'cl' => $_SERVER['CONTENT_LENGTH'] ?? null]);
"""

# Answers at once, without reading the body (fastcgi_finish_request ends the request: the
# answer and END_REQUEST go, and PHP-FPM closes the connection).
EARLY_PHP = r"""<?php
http_response_code(202);
header('Content-Type: text/plain');
echo "early\n";
fastcgi_finish_request();
"""

# Sends warnings before it reads the body (PHP-FPM sends them as FCGI_STDERR records, more
# than its 8 KiB output buffer holds, so they go at once), then reads as stream.php.
WARN_PHP = "<?php for ($i = 0; $i < 20; $i++) error_log(str_repeat('w', 1000));\n" + \
    STREAM_PHP.replace("<?php", "", 1)


def php_files(root):
    os.makedirs(root, exist_ok=True)
    for name, text in (("stream.php", STREAM_PHP), ("early.php", EARLY_PHP),
                       ("hello.php", "<?php echo 'hello';\n"),
                       ("late.php", "<?php sleep(3); echo 'late';\n"),
                       ("warn.php", WARN_PHP)):
        with open(os.path.join(root, name), "w") as f:
            f.write(text)
    return root


def location(sock, buffering, extra=""):
    """The PHP location; buffering None: no fastcgi_request_buffering line in it."""
    line = f"fastcgi_request_buffering {buffering};" if buffering else ""
    return f"""
    client_max_body_size 64m;
    location ~ \\.php$ {{
        fastcgi_pass unix:{sock};
        {line}
        include {ROOT}/conf/fastcgi.conf;
        {extra}
    }}
"""


@pytest.fixture
def php(tmp_path):
    """start(buffering, children=2, extra="", top=""): lfhttpd on a PHP-FPM pool of its own
    (extra: lines in the PHP location; top: before the server block); every server and pool
    stopped by PID at the end."""
    started = []
    root = php_files(str(tmp_path / "www"))

    def start(buffering, children=2, extra="", top=""):
        fpm = Fpm(tmp_path / f"fpm{len(started)}", children=children)
        started.append(fpm)
        s = lfhttpd(tmp_path / f"lf{len(started)}", root, location(fpm.sock, buffering, extra),
                    top=top)
        started.append(s)
        s.fpm = fpm
        return s
    yield start
    try:
        for s in started:
            if not isinstance(s, Fpm):
                check_clean_exit(s)
    finally:
        for s in started:
            if isinstance(s, Fpm):
                s.stop()


def connect(s):
    return Client(socket.create_connection((s.host, s.port), timeout=scaled(20)))


def put_head(path, fields):
    return ("\r\n".join([f"PUT {path} HTTP/1.1", "Host: t"] + list(fields)) +
            "\r\n\r\n").encode()


def answer(c, timeout=20):
    status, headers, body, _ = c.read_response(timeout=scaled(timeout))
    return status, headers, body


def body_of(size):
    """size bytes that are not all alike (a shifted piece would show)."""
    block = bytes(range(256)) * 4096  # 1 MiB
    return (block * (size // len(block) + 1))[:size]


def chunked(data, piece=65536):
    out = b"".join(b"%x\r\n" % len(data[i:i + piece]) + data[i:i + piece] + b"\r\n"
                   for i in range(0, len(data), piece))
    return out + b"0\r\n\r\n"


# --- as it arrives, or whole first --------------------------------------------------------

def test_with_off_the_script_reads_the_body_while_the_client_still_sends(php, tmp_path):
    s = php("off")
    mark = tmp_path / "mark"
    first, rest = body_of(256 << 10), body_of(MIB)[256 << 10:]
    c = connect(s)
    c.send(put_head(f"/stream.php?mark={mark}", [f"Content-Length: {MIB}"]) + first)
    # the client holds the rest until the script has read the first part
    assert wait_until(lambda: mark.exists(), scaled(15)), "the script got nothing yet"
    c.send(rest)
    status, _, body = answer(c)
    assert status == 200
    assert json.loads(body) == {"n": MIB, "md5": hashlib.md5(first + rest).hexdigest(),
                                "cl": str(MIB)}


def test_with_on_the_script_gets_the_body_only_once_it_is_whole(php, tmp_path):
    s = php("on")
    mark = tmp_path / "mark"
    c = connect(s)
    c.send(put_head(f"/stream.php?mark={mark}", [f"Content-Length: {MIB}"]) +
           body_of(256 << 10))
    time.sleep(scaled(1.5))
    assert not mark.exists()
    c.send(body_of(MIB)[256 << 10:])
    status, _, body = answer(c)
    assert status == 200 and json.loads(body)["n"] == MIB
    assert mark.exists()


def test_off_from_the_top_level_holds_in_a_location_that_says_nothing(php, tmp_path):
    s = php(None, top="fastcgi_request_buffering off;\n")
    mark = tmp_path / "mark"
    c = connect(s)
    c.send(put_head(f"/stream.php?mark={mark}", [f"Content-Length: {MIB}"]) +
           body_of(256 << 10))
    assert wait_until(lambda: mark.exists(), scaled(15)), "the script got nothing yet"
    c.send(body_of(MIB)[256 << 10:])
    assert answer(c)[0] == 200


def test_a_20_mib_upload_arrives_byte_identical(php):
    s = php("off")
    data = body_of(20 * MIB)
    c = connect(s)
    c.send(put_head("/stream.php", [f"Content-Length: {len(data)}"]))
    c.send(data)
    status, _, body = answer(c, timeout=60)
    assert status == 200
    assert json.loads(body) == {"n": len(data), "md5": hashlib.md5(data).hexdigest(),
                                "cl": str(len(data))}


def test_a_chunked_body_goes_as_it_arrives_with_content_length_empty(php):
    """nginx streams a chunked body to FastCGI too, and $content_length is empty while it
    reads: PHP-FPM, which reads as much as CONTENT_LENGTH says, sees no body."""
    s = php("off")
    data = body_of(MIB)
    c = connect(s)
    c.send(put_head("/stream.php", ["Transfer-Encoding: chunked"]) + chunked(data[:4096])[:-5])
    time.sleep(0.2)  # (the rest in another read: not whole with the head)
    c.send(chunked(data[4096:])[:-5])
    c.send(b"0\r\n\r\n")
    status, _, body = answer(c)
    assert status == 200
    assert json.loads(body) == {"n": 0, "md5": hashlib.md5(b"").hexdigest(), "cl": ""}


def test_a_chunked_body_whole_with_the_head_is_read_first_and_its_length_passed(php):
    s = php("off")
    data = body_of(3000)
    c = connect(s)
    c.send(put_head("/stream.php", ["Transfer-Encoding: chunked"]) + chunked(data, 1000))
    status, _, body = answer(c)
    assert status == 200
    assert json.loads(body) == {"n": 3000, "md5": hashlib.md5(data).hexdigest(),
                                "cl": "3000"}


def test_warnings_the_script_sends_meanwhile_are_logged_and_the_body_goes_on(php, tmp_path):
    s = php("off", extra="fastcgi_read_timeout 10s;")
    mark = tmp_path / "mark"
    data = body_of(MIB)
    c = connect(s)
    c.send(put_head(f"/warn.php?mark={mark}", [f"Content-Length: {MIB}"]) + data[:256 << 10])
    assert wait_until(lambda: mark.exists(), scaled(15))
    c.send(data[256 << 10:])
    status, _, body = answer(c)
    assert status == 200
    assert json.loads(body)["md5"] == hashlib.md5(data).hexdigest()
    assert "FastCGI sent in stderr" in s.error_log()


def test_expect_100_continue_is_answered_at_once(php):
    s = php("off")
    c = connect(s)
    c.send(put_head("/stream.php", ["Content-Length: 5", "Expect: 100-continue"]))
    c.sock.settimeout(scaled(5))
    assert c.sock.recv(64).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
    c.send(b"hello")
    status, _, body = answer(c)
    assert status == 200 and json.loads(body)["n"] == 5


# --- limits, early answers, clients that leave ----------------------------------------------

def test_content_length_over_client_max_body_size_is_413_before_the_script_runs(php, tmp_path):
    s = php("off", extra="client_max_body_size 1k;")
    mark = tmp_path / "mark"
    c = connect(s)
    c.send(put_head(f"/stream.php?mark={mark}", ["Content-Length: 5000"]) + b"x" * 100)
    status, _, _ = answer(c)
    assert status == 413
    assert not mark.exists()


def test_a_chunked_body_past_client_max_body_size_midway_is_413_and_the_connection_closes(
        php):
    s = php("off", extra="client_max_body_size 100k;")
    c = connect(s)
    c.send(put_head("/late.php", ["Transfer-Encoding: chunked"]) +
           chunked(body_of(4096))[:-5])
    time.sleep(0.2)
    c.send(chunked(body_of(200 << 10))[:-5])
    status, _, _ = answer(c)
    assert status == 413
    assert c.is_closed(timeout=scaled(5))


def test_an_early_answer_is_relayed_and_the_client_connection_closes_after_it(php):
    s = php("off")
    c = connect(s)
    c.send(put_head("/early.php", [f"Content-Length: {MIB}"]) + body_of(64 << 10))
    status, _, body = answer(c)
    assert (status, body) == (202, b"early\n")
    assert c.is_closed(timeout=scaled(5))


def fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_a_client_leaving_mid_body_frees_the_php_worker_and_leaks_no_socket(php, tmp_path):
    s = php("off", children=1)
    hello = connect(s)  # (the server's own descriptors settle with a first request)
    hello.send(b"GET /hello.php HTTP/1.1\r\nHost: t\r\n\r\n")
    assert answer(hello)[2] == b"hello"
    hello.close()
    assert wait_until(lambda: fds(s.proc.pid) == fds(s.proc.pid), 1)
    before = fds(s.proc.pid)
    mark = tmp_path / "mark"
    c = connect(s)
    c.send(put_head(f"/stream.php?mark={mark}", [f"Content-Length: {MIB}"]) +
           body_of(128 << 10))
    assert wait_until(lambda: mark.exists(), scaled(15))
    c.close()  # the one worker is inside the body: it must see its end
    n = connect(s)
    n.send(b"GET /hello.php HTTP/1.1\r\nHost: t\r\n\r\n")
    status, _, body = answer(n, timeout=15)
    n.close()
    assert (status, body) == (200, b"hello")
    assert wait_until(lambda: fds(s.proc.pid) <= before, scaled(5)), (fds(s.proc.pid), before)


def test_a_client_that_stalls_mid_body_is_answered_408_and_the_worker_let_go(php, tmp_path):
    """(nginx closes such a connection without an answer; lfhttpd answers 408 as it does
    for every body it waits for past client_body_timeout.)"""
    s = php("off", children=1, extra="client_body_timeout 1s;")
    mark = tmp_path / "mark"
    c = connect(s)
    c.send(put_head(f"/stream.php?mark={mark}", [f"Content-Length: {MIB}"]) +
           body_of(128 << 10))
    assert wait_until(lambda: mark.exists(), scaled(15))
    status, _, _ = answer(c)
    assert status == 408
    assert c.is_closed(timeout=scaled(5))
    n = connect(s)
    n.send(b"GET /hello.php HTTP/1.1\r\nHost: t\r\n\r\n")
    assert answer(n, timeout=15)[::2] == (200, b"hello")
    n.close()


def test_a_body_that_began_to_go_is_not_sent_to_the_next_server(tmp_path):
    """The first server takes the parameters and some of the body, then closes: the body
    cannot be read again, so the request is 502 rather than tried on the next server (a PUT,
    which fastcgi_next_upstream would otherwise send again)."""
    taker = socket.socket(socket.AF_UNIX)
    path = str(tmp_path / "taker.sock")
    taker.bind(path)
    taker.listen(8)
    got = []

    def take():
        conn, _ = taker.accept()
        with conn:
            data = b""
            while len(data) < 100 << 10:
                piece = conn.recv(65536)
                if not piece:
                    break
                data += piece
            got.append(data)
    thread = threading.Thread(target=take, daemon=True)
    thread.start()
    fpm = Fpm(tmp_path / "fpm")
    root = php_files(str(tmp_path / "www"))
    s = None
    try:
        s = lfhttpd(tmp_path / "lf", root,
                    location("x", "off").replace("unix:x", "php"),
                    top=f"upstream php {{ server unix:{path}; server unix:{fpm.sock}; }}\n")
        c = connect(s)
        c.send(put_head("/stream.php", [f"Content-Length: {MIB}"]) + body_of(256 << 10))
        thread.join(scaled(10))
        assert got and len(got[0]) >= 100 << 10  # the parameters and a part of the body
        status, _, _ = answer(c)
        assert status == 502
    finally:
        if s:
            check_clean_exit(s)
        fpm.stop()
        taker.close()


def test_a_server_that_refuses_the_connection_is_passed_for_the_next_with_the_whole_body(
        tmp_path):
    fpm = Fpm(tmp_path / "fpm")
    root = php_files(str(tmp_path / "www"))
    s = None
    try:
        s = lfhttpd(tmp_path / "lf", root, location("x", "off").replace("unix:x", "php"),
                    top=f"upstream php {{ server unix:{tmp_path}/nobody.sock; "
                    f"server unix:{fpm.sock}; }}\n")
        data = body_of(MIB)
        c = connect(s)
        c.send(put_head("/stream.php", [f"Content-Length: {MIB}"]) + data[:4096])
        time.sleep(0.2)
        c.send(data[4096:])
        status, _, body = answer(c)
        assert status == 200
        assert json.loads(body)["md5"] == hashlib.md5(data).hexdigest()
    finally:
        if s:
            check_clean_exit(s)
        fpm.stop()


def test_request_length_counts_a_streamed_body(php, tmp_path):
    log = tmp_path / "rl.log"
    s = php("off", top="log_format rl '$request_length';\n",
            extra=f"access_log {log} rl;")
    head = put_head("/stream.php", [f"Content-Length: {MIB}"])
    c = connect(s)
    c.send(head + body_of(64 << 10))
    time.sleep(0.2)
    c.send(body_of(MIB)[64 << 10:])
    assert answer(c)[0] == 200
    c.close()
    assert wait_until(lambda: log.exists() and log.read_text().strip(), scaled(5))
    assert log.read_text().split() == [str(len(head) + MIB)]


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


@pytest.mark.skipif(os.environ.get("LFHTTPD_SANITIZE") == "tsan",
                    reason="ThreadSanitizer's shadow memory grows with every byte a thread "
                    "touches, so resident memory says nothing of the bound [by design]")
def test_a_hundred_slow_uploaders_hold_bounded_memory(php):
    """Each has sent 512 KiB of a 1 MiB body and holds the rest: the server holds a fixed
    buffer a connection, not what passed through it (read whole first, the same bodies
    would hold 50 MiB). The application takes what it can; the rest waits in the kernel."""
    s = php("off", children=4)
    warm = connect(s)
    warm.send(b"GET /hello.php HTTP/1.1\r\nHost: t\r\n\r\n")
    assert answer(warm)[2] == b"hello"
    warm.close()
    before = rss_kib(s.proc.pid)
    part = body_of(512 << 10)
    clients = []
    try:
        for _ in range(100):
            c = connect(s)
            c.send(put_head("/stream.php", [f"Content-Length: {MIB}"]) + part)
            clients.append(c)
        time.sleep(scaled(2))  # (what the server would read, it has read)
        grown = rss_kib(s.proc.pid) - before
    finally:
        for c in clients:
            c.close()
    print(f"RSS grown by {grown} KiB for 100 uploaders")
    assert grown < 16 * 1024, grown
    # and the pool is free again once they have gone
    n = connect(s)
    n.send(b"GET /hello.php HTTP/1.1\r\nHost: t\r\n\r\n")
    assert answer(n, timeout=30)[2] == b"hello"
    n.close()


# --- beside nginx -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def shared_fpm(tmp_path_factory):
    f = Fpm(tmp_path_factory.mktemp("fpm"), children=4)
    yield f
    f.stop()


@pytest.fixture(scope="module")
def beside(tmp_path_factory, shared_fpm):
    """(nginx's port, lfhttpd's port) on the same site and PHP-FPM pool."""
    root = php_files(str(tmp_path_factory.mktemp("www")))
    site = f"""
    server {{
        listen 127.0.0.1:{{port0}};
        root {root};
        client_max_body_size 1m;
        location ~ \\.php$ {{
            fastcgi_pass unix:{shared_fpm.sock};
            fastcgi_request_buffering off;
            include {ROOT}/conf/fastcgi.conf;
        }}
        location = /late.php {{
            client_max_body_size 100k;
            fastcgi_pass unix:{shared_fpm.sock};
            fastcgi_request_buffering off;
            include {ROOT}/conf/fastcgi.conf;
        }}
    }}
"""
    for theirs, ours in nginx_beside_lfhttpd(tmp_path_factory, site):
        yield theirs[0], ours[0]


def exchange(port, path, fields, parts):
    """Send a PUT's head and then parts (a pause between two), and read the answer:
    (status, body)."""
    c = Client(socket.create_connection(("127.0.0.1", port), timeout=scaled(20)))
    try:
        c.send(put_head(path, fields) + parts[0])
        for p in parts[1:]:
            time.sleep(0.2)
            try:
                c.send(p)
            except OSError:  # (answered and closed meanwhile)
                break
        status, _, body = answer(c)
        return status, body
    finally:
        c.close()


@pytest.mark.parametrize("case", ["content_length", "chunked", "over_max_body_size",
                                  "chunked_over_max_body_size", "early_answer"])
def test_the_script_and_the_client_see_what_nginx_gives(beside, case):
    data = body_of(300 << 10)
    path, fields, parts = {
        "content_length": ("/stream.php", [f"Content-Length: {len(data)}"],
                           [data[:4096], data[4096:]]),
        "chunked": ("/stream.php", ["Transfer-Encoding: chunked"],
                    [chunked(data[:4096])[:-5], chunked(data[4096:])]),
        "over_max_body_size": ("/stream.php", [f"Content-Length: {2 * MIB}"], [data[:4096]]),
        "chunked_over_max_body_size": ("/late.php", ["Transfer-Encoding: chunked"],
                                       [chunked(data[:4096])[:-5],
                                        chunked(body_of(200 << 10))]),
        "early_answer": ("/early.php", [f"Content-Length: {MIB}"], [data[:65536]]),
    }[case]
    theirs, ours = (exchange(port, path, fields, parts) for port in beside)
    assert ours[0] == theirs[0]
    if ours[0] == 200:
        assert json.loads(ours[1]) == json.loads(theirs[1])
    elif ours[0] != 413:  # (the error pages are each server's own)
        assert ours[1] == theirs[1]


# --- uwsgi and SCGI -----------------------------------------------------------------------

@pytest.fixture(params=["uwsgi", "scgi"])
def wire(request, tmp_path):
    u = Uwsgi(tmp_path / "uwsgi", request.param)
    u.protocol = request.param
    started = []

    def start(buffering):
        text = f"""
    location / {{
        {u.protocol}_pass unix:{u.sock};
        {u.protocol}_request_buffering {buffering};
        client_max_body_size 64m;
        include {u.protocol}_params;
    }}
"""
        s = wire_lfhttpd(tmp_path / f"lf{len(started)}", tmp_path, text)
        started.append(s)
        return s
    yield start
    try:
        for s in started:
            check_clean_exit(s)
    finally:
        u.stop()


def test_wire_with_off_the_application_reads_the_body_while_the_client_still_sends(
        wire, tmp_path):
    s = wire("off")
    mark = tmp_path / "mark"
    first, rest = body_of(256 << 10), body_of(MIB)[256 << 10:]
    c = connect(s)
    c.send(put_head(f"/stream?mark={mark}", [f"Content-Length: {MIB}"]) + first)
    assert wait_until(lambda: mark.exists(), scaled(15)), "the application got nothing yet"
    c.send(rest)
    status, _, body = answer(c)
    assert status == 200
    assert json.loads(body) == {"n": MIB, "md5": hashlib.md5(first + rest).hexdigest(),
                                "cl": str(MIB)}


def test_wire_with_on_the_application_gets_the_body_only_once_it_is_whole(wire, tmp_path):
    s = wire("on")
    mark = tmp_path / "mark"
    c = connect(s)
    c.send(put_head(f"/stream?mark={mark}", [f"Content-Length: {MIB}"]) + body_of(256 << 10))
    time.sleep(scaled(1.5))
    assert not mark.exists()
    c.send(body_of(MIB)[256 << 10:])
    status, _, body = answer(c)
    assert status == 200 and json.loads(body)["n"] == MIB


def test_wire_a_20_mib_upload_arrives_byte_identical(wire):
    s = wire("off")
    data = body_of(20 * MIB)
    c = connect(s)
    c.send(put_head("/stream", [f"Content-Length: {len(data)}"]))
    c.send(data)
    status, _, body = answer(c, timeout=60)
    assert status == 200
    assert json.loads(body) == {"n": len(data), "md5": hashlib.md5(data).hexdigest(),
                                "cl": str(len(data))}


def test_wire_a_chunked_body_is_read_whole_first_and_its_length_passed(wire, tmp_path):
    s = wire("off")
    mark = tmp_path / "mark"
    data = body_of(MIB)
    c = connect(s)
    c.send(put_head(f"/stream?mark={mark}", ["Transfer-Encoding: chunked"]) +
           chunked(data[:256 << 10])[:-5])
    time.sleep(scaled(1.5))
    assert not mark.exists()
    c.send(chunked(data[256 << 10:]))
    status, _, body = answer(c)
    assert status == 200
    assert json.loads(body) == {"n": MIB, "md5": hashlib.md5(data).hexdigest(),
                                "cl": str(MIB)}


@pytest.fixture(scope="module")
def uwsgi_beside(tmp_path_factory):
    """(nginx's port, lfhttpd's port) on the same uwsgi_pass, request buffering off. (Not
    SCGI: nginx 1.22 sends an SCGI application the CONTENT_LENGTH of what it had read with
    the head, fixed in later versions; lfhttpd sends the request's.)"""
    u = Uwsgi(tmp_path_factory.mktemp("uwsgi"), "uwsgi")
    try:
        site = f"""
    server {{
        listen 127.0.0.1:{{port0}};
        client_max_body_size 64m;
        location / {{
            uwsgi_pass unix:{u.sock};
            uwsgi_request_buffering off;
            include {ROOT}/conf/uwsgi_params;
        }}
    }}
"""
        for theirs, ours in nginx_beside_lfhttpd(tmp_path_factory, site):
            yield theirs[0], ours[0]
    finally:
        u.stop()


@pytest.mark.parametrize("framing", ["content_length", "chunked"])
def test_uwsgi_application_sees_what_nginx_gives(uwsgi_beside, framing):
    data = body_of(300 << 10)
    fields, parts = {
        "content_length": ([f"Content-Length: {len(data)}"], [data[:4096], data[4096:]]),
        "chunked": (["Transfer-Encoding: chunked"],
                    [chunked(data[:4096])[:-5], chunked(data[4096:])]),
    }[framing]
    theirs, ours = (exchange(port, "/stream", fields, parts) for port in uwsgi_beside)
    assert ours[0] == theirs[0] == 200
    assert json.loads(ours[1]) == json.loads(theirs[1])
