"""fastcgi_pass against a real PHP-FPM (php-fpm8.2, a pool of its own on a unix socket),
with nginx's fastcgi.conf; where nginx is the reference, the same configuration runs on
nginx against the same pool and the answers are compared."""
import hashlib
import http.client
import json
import os
import socket
import struct
import threading
import time
import urllib.parse

import pytest

from conftest import Server, check_clean_exit, scaled, wait_until
from fastcgi_harness import Fpm, fpm, lfhttpd, nginx, php_root  # noqa: F401

PHP_LOCATION = """
    location ~ \\.php$ {{
        fastcgi_pass unix:{sock};
        include fastcgi.conf;
{extra}
    }}
"""

SNIPPET = r"""# regex to split $uri to $fastcgi_script_name and $fastcgi_path
fastcgi_split_path_info ^(.+?\.php)(/.*)$;

# Check that the PHP script exists before passing it
try_files $fastcgi_script_name =404;

# Bypass the fact that try_files resets $fastcgi_path_info
# see: http://trac.nginx.org/nginx/ticket/321
set $path_info $fastcgi_path_info;
fastcgi_param PATH_INFO $path_info;

fastcgi_index index.php;
include fastcgi.conf;
"""

SNIPPET_LOCATION = """
    location ~ \\.php($|/) {{
        include snippets/fastcgi-php.conf;
        fastcgi_pass unix:{sock};
    }}
"""


def request(server, method, path, body=None, headers=None, timeout=None):
    conn = http.client.HTTPConnection(server.host, server.port, timeout=timeout or scaled(20))
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, r.getheaders(), r.read()
    finally:
        conn.close()


def header(headers, name):
    return [v for k, v in headers if k.lower() == name.lower()]


def both(tmp_path, fpm, text):
    """lfhttpd and nginx on the same server text (with {sock}), the same pool and root."""
    root = php_root(tmp_path)
    snippets = []
    for d in ("lf", "ng"):
        os.makedirs(tmp_path / d / "snippets", exist_ok=True)
        with open(tmp_path / d / "snippets" / "fastcgi-php.conf", "w") as f:
            f.write(SNIPPET)
        snippets.append(d)
    text = text.format(sock=fpm.sock, extra="")
    return lfhttpd(tmp_path / "lf", root, text), nginx(tmp_path / "ng", root, text)


@pytest.fixture
def pair(tmp_path, fpm):
    servers = []

    def start(text):
        lf, ng = both(tmp_path, fpm, text)
        servers.extend([lf, ng])
        return lf, ng
    yield start
    for s in servers:
        check_clean_exit(s) if isinstance(s, Server) else s.stop()


@pytest.fixture
def php(tmp_path, fpm):
    """lfhttpd with a PHP location (extra lines inside it) on the test's pool."""
    servers = []

    def start(extra="", text=None):
        root = php_root(tmp_path / f"s{len(servers)}")
        body = (text or PHP_LOCATION).format(sock=fpm.sock, extra=extra)
        s = lfhttpd(tmp_path / f"lf{len(servers)}", root, body)
        servers.append(s)
        return s
    yield start
    for s in servers:
        check_clean_exit(s)


def env_of(server, method="GET", path="/env.php", body=None, headers=None):
    status, _, data = request(server, method, path, body, headers)
    assert status == 200, data
    return json.loads(data)


ENV_KEYS = ["SCRIPT_FILENAME", "SCRIPT_NAME", "PATH_INFO", "QUERY_STRING", "REQUEST_URI",
            "DOCUMENT_ROOT", "DOCUMENT_URI", "REQUEST_METHOD", "CONTENT_TYPE",
            "CONTENT_LENGTH", "HTTPS", "GATEWAY_INTERFACE", "SERVER_PROTOCOL", "REMOTE_ADDR",
            "REQUEST_SCHEME", "REDIRECT_STATUS", "PHP_SELF", "SERVER_NAME", "SERVER_ADDR",
            "SERVER_SOFTWARE", "REMOTE_USER", "body", "post", "files"]


@pytest.mark.parametrize("method,path,body,headers", [
    ("GET", "/env.php", None, {}),
    ("GET", "/env.php?a=1&b=%20x", None, {"X-Custom-Field": "v1", "Accept": "*/*"}),
    ("POST", "/env.php?q", "a=1&b=two", {"Content-Type": "application/x-www-form-urlencoded"}),
    ("PUT", "/env.php", b"\x00raw\xffbytes", {"Content-Type": "application/octet-stream"}),
    ("GET", "/env.php/extra/path?z=9", None, {}),
])
def test_server_values_match_nginx(pair, method, path, body, headers):
    lf, ng = pair(SNIPPET_LOCATION)
    a = env_of(lf, method, path, body, headers)
    b = env_of(ng, method, path, body, headers)
    for k in ENV_KEYS:
        assert a[k] == b[k], k
    assert a["SERVER_PORT"] == str(lf.port) and b["SERVER_PORT"] == str(ng.port)
    assert a["HTTPS"] is None
    http_a = {k: v for k, v in a.items() if k.startswith("HTTP_") and k != "HTTP_HOST"}
    http_b = {k: v for k, v in b.items() if k.startswith("HTTP_") and k != "HTTP_HOST"}
    assert http_a == http_b
    assert a["HTTP_HOST"] == f"{lf.host}:{lf.port}"


def test_repeated_and_underscored_fields_reach_php_as_nginx_passes_them(pair):
    lf, ng = pair(PHP_LOCATION)
    seen = []
    for s in (lf, ng):
        conn = http.client.HTTPConnection(s.host, s.port, timeout=scaled(20))
        conn.putrequest("GET", "/env.php")
        for k, v in [("X-Dup", "a"), ("X-Dup", "b"), ("Cookie", "a=1"), ("Cookie", "b=2"),
                     ("X_Under", "u"), ("X-Forwarded-For", "1.1.1.1"),
                     ("X-Forwarded-For", "2.2.2.2")]:
            conn.putheader(k, v)
        conn.endheaders()
        e = json.loads(conn.getresponse().read())
        conn.close()
        seen.append({k: v for k, v in e.items() if k.startswith("HTTP_") and k != "HTTP_HOST"})
    assert seen[0] == seen[1]
    assert seen[0]["HTTP_X_DUP"] == "b" and "HTTP_X_UNDER" not in seen[0]


def test_a_chunked_body_has_its_length_as_nginx_gives_it(pair):
    lf, ng = pair(PHP_LOCATION)
    for s in (lf, ng):
        conn = http.client.HTTPConnection(s.host, s.port, timeout=scaled(20))
        conn.request("POST", "/env.php", body=iter([b"a=1&", b"b=2"]), encode_chunked=True,
                     headers={"Content-Type": "application/x-www-form-urlencoded"})
        e = json.loads(conn.getresponse().read())
        conn.close()
        assert (e["CONTENT_LENGTH"], e["post"]) == ("7", {"a": "1", "b": "2"})


def test_head_is_answered_with_the_head_alone_as_nginx(pair):
    lf, ng = pair(PHP_LOCATION)
    a, b = request(lf, "HEAD", "/env.php"), request(ng, "HEAD", "/env.php")
    assert a[0] == 200 == b[0]
    assert a[2] == b"" == b[2]
    for name in ("Transfer-Encoding", "Content-Length", "Content-Type"):
        assert header(a[1], name) == header(b[1], name), name


def test_fastcgi_pass_in_an_if_answers_only_when_it_holds_as_nginx(pair):
    lf, ng = pair("""
    location ~ \\.php$ {{
        include fastcgi.conf;
        if ($arg_run) {{
            fastcgi_pass unix:{sock};
        }}
    }}
""")
    for s in (lf, ng):
        assert json.loads(request(s, "GET", "/env.php?run=1")[2])["QUERY_STRING"] == "run=1"
        assert request(s, "GET", "/env.php")[2].startswith(b"<?php")


def test_path_info_through_the_debian_snippet(pair):
    lf, ng = pair(SNIPPET_LOCATION)
    a = env_of(lf, path="/env.php/a/b%20c")
    b = env_of(ng, path="/env.php/a/b%20c")
    assert a["PATH_INFO"] == "/a/b c" == b["PATH_INFO"]
    assert a["SCRIPT_NAME"] == "/env.php" == b["SCRIPT_NAME"]
    assert a["SCRIPT_FILENAME"].endswith("/www/env.php")


def test_missing_script_through_the_snippet_is_404_before_php(pair):
    lf, ng = pair(SNIPPET_LOCATION)
    assert request(lf, "GET", "/nothing.php/x")[0] == 404 == request(ng, "GET", "/nothing.php/x")[0]


def test_post_body_reaches_php_stdin(php):
    s = php()
    body = "x=" + "y" * 200000
    e = env_of(s, "POST", "/env.php", body, {"Content-Type": "application/x-www-form-urlencoded"})
    assert e["CONTENT_LENGTH"] == str(len(body))
    assert e["post"] == {"x": "y" * 200000}


def test_multipart_upload_reaches_php(php):
    s = php()
    data = os.urandom(300000)
    boundary = "----b0undary"
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"f\"; filename=\"a.bin\"\r\n"
            "Content-Type: application/octet-stream\r\n\r\n").encode() + data + \
        f"\r\n--{boundary}\r\nContent-Disposition: form-data; name=\"t\"\r\n\r\nhello\r\n" \
        f"--{boundary}--\r\n".encode()
    e = env_of(s, "POST", "/env.php", body,
               {"Content-Type": f"multipart/form-data; boundary={boundary}"})
    assert e["post"] == {"t": "hello"}
    assert e["files"]["f"] == {"name": "a.bin", "size": len(data),
                               "md5": hashlib.md5(data).hexdigest()}


def test_status_header_sets_the_status_and_every_cookie_passes(php):
    status, headers, body = request(php(), "GET", "/headers.php")
    assert status == 404
    assert body == b"missing\n"
    assert header(headers, "Set-Cookie") == ["a=1", "b=2"]
    assert header(headers, "X-Custom") == ["one"]
    assert header(headers, "Status") == []


def test_x_accel_fields_are_hidden_unless_passed(php):
    _, headers, _ = request(php(), "GET", "/headers.php")
    assert header(headers, "X-Accel-Expires") == []
    _, headers, _ = request(php("fastcgi_pass_header X-Accel-Expires;"), "GET", "/headers.php")
    assert header(headers, "X-Accel-Expires") == ["10"]


ACCEL = PHP_LOCATION + """
    location /protected/ {{ internal; }}
    location @named {{ return 200 "named $uri\\n"; }}
    location /echo/ {{ internal; return 200 "$uri args=$args\\n"; }}
"""


def accel_answer(server, path, method="GET", headers=None):
    status, head, body = request(server, method, path, b"x=1" if method == "POST" else None,
                                 headers)
    kept = {k: header(head, k) for k in ("Content-Type", "Content-Disposition",
                                         "Set-Cookie", "X-Custom", "X-Accel-Redirect",
                                         "Content-Range")}
    return status, kept, body


def test_x_accel_redirect_answers_with_the_internal_file_as_nginx(pair):
    lf, ng = pair(ACCEL)
    a = accel_answer(lf, "/accel.php")
    assert a == accel_answer(ng, "/accel.php")
    status, kept, body = a
    assert (status, body) == (200, b"protected file\n")
    assert kept["Content-Type"] == ["application/x-test"]
    assert kept["Content-Disposition"] == ['attachment; filename="f.txt"']
    assert kept["Set-Cookie"] == ["a=1", "b=2"]
    assert kept["X-Custom"] == [] and kept["X-Accel-Redirect"] == []


def test_internal_location_is_404_to_the_client_as_nginx(pair):
    lf, ng = pair(ACCEL)
    assert accel_answer(lf, "/protected/file.txt")[0] == 404
    assert accel_answer(ng, "/protected/file.txt")[0] == 404


def test_x_accel_redirect_of_a_post_is_a_get_of_the_file_as_nginx(pair):
    lf, ng = pair(ACCEL)
    a = accel_answer(lf, "/accel.php", "POST",
                     {"Content-Type": "application/x-www-form-urlencoded"})
    assert a == accel_answer(ng, "/accel.php", "POST",
                             {"Content-Type": "application/x-www-form-urlencoded"})
    assert a[0] == 200 and a[2] == b"protected file\n"


def test_x_accel_redirect_keeps_the_clients_range_as_nginx(pair):
    lf, ng = pair(ACCEL)
    a = accel_answer(lf, "/accel.php", headers={"Range": "bytes=0-8"})
    assert a == accel_answer(ng, "/accel.php", headers={"Range": "bytes=0-8"})
    assert (a[0], a[2], a[1]["Content-Range"]) == (206, b"protected", ["bytes 0-8/15"])


def test_x_accel_redirect_of_a_head_is_a_head_of_the_file_as_nginx(pair):
    lf, ng = pair(ACCEL)
    answers = []
    for server in (lf, ng):
        status, headers, body = request(server, "HEAD", "/accel.php")
        answers.append((status, header(headers, "Content-Length"), body))
    assert answers[0] == answers[1] == (200, ["15"], b"")


def test_x_accel_redirect_to_another_application_is_500_and_said(php):
    # nginx would run the second script; here a redirect whose answer is streamed by
    # another source is not followed (docs/known-limits.md)
    s = php(text=ACCEL)
    status, _, _ = request(s, "GET", "/accel.php?to=/env.php")
    assert status == 500
    assert wait_until(lambda: 'X-Accel-Redirect to "/env.php", a streamed answer: not '
                              'followed' in s.error_log(), scaled(5)), s.error_log()


@pytest.mark.parametrize("to,answer", [("/echo/x?y=1", b"/echo/x args=y=1\n"),
                                       ("/echo/x", b"/echo/x args=\n")])
def test_x_accel_redirect_takes_its_own_arguments_or_none_as_nginx(pair, to, answer):
    lf, ng = pair(ACCEL)
    path = "/accel.php?to=" + urllib.parse.quote(to)
    a, b = accel_answer(lf, path), accel_answer(ng, path)
    assert (a[0], a[2]) == (b[0], b[2]) == (200, answer)


@pytest.mark.parametrize("to,status", [("/protected/missing.txt", 404),
                                       ("/protected/../env.php", 404), ("@named", 200)])
def test_x_accel_redirect_targets_answer_as_nginx(pair, to, status):
    lf, ng = pair(ACCEL)
    path = "/accel.php?to=" + urllib.parse.quote(to)
    a, b = accel_answer(lf, path), accel_answer(ng, path)
    assert a[0] == b[0] == status
    if status == 200:
        assert a[2] == b[2] == b"named /accel.php\n"


def test_fastcgi_hide_header_drops_the_field(php):
    _, headers, _ = request(php("fastcgi_hide_header X-Custom;"), "GET", "/headers.php")
    assert header(headers, "X-Custom") == []


def test_location_is_passed_on_with_302_as_nginx(pair):
    lf, ng = pair(PHP_LOCATION)
    a = request(lf, "GET", "/redirect.php")
    b = request(ng, "GET", "/redirect.php")
    assert a[0] == 302 == b[0]
    assert header(a[1], "Location") == header(b[1], "Location")


def test_fatal_error_is_the_500_php_answers(pair):
    lf, ng = pair(PHP_LOCATION)
    assert request(lf, "GET", "/fatal.php")[0] == 500 == request(ng, "GET", "/fatal.php")[0]


def test_stderr_goes_to_the_error_log_escaped(php):
    s = php()
    assert request(s, "GET", "/stderr.php")[2] == b"ok\n"
    assert wait_until(lambda: "FastCGI sent in stderr" in s.error_log(), scaled(5))
    assert 'PHP message: a line for the log\\x09with a tab' in s.error_log()


def test_large_output_is_intact(php):
    s = php()
    status, headers, body = request(s, "GET", "/big.php?mib=6")
    assert status == 200
    expect = b"".join((b"%08d" % i + b"0123456789abcdef" * 65536)[:1048576] for i in range(6))
    assert len(body) == len(expect)
    assert hashlib.sha256(body).digest() == hashlib.sha256(expect).digest()


def test_application_down_is_502(tmp_path, php, fpm):
    s = php()
    fpm.stop()
    status, _, _ = request(s, "GET", "/env.php")
    assert status == 502


def test_slow_script_past_read_timeout_is_504(php):
    s = php("fastcgi_read_timeout 1s;")
    t0 = time.monotonic()
    status, _, _ = request(s, "GET", "/slow.php?s=3")
    assert status == 504
    assert time.monotonic() - t0 < scaled(2.8)


def test_a_block_with_its_own_params_replaces_the_outer_ones(tmp_path, fpm):
    root = php_root(tmp_path)
    s = lfhttpd(tmp_path / "lf", root, """
    include fastcgi.conf;
    location ~ \\.php$ {
        fastcgi_pass unix:%s;
        fastcgi_param SCRIPT_FILENAME $document_root$fastcgi_script_name;
        fastcgi_param REQUEST_METHOD $request_method;
        fastcgi_param QUERY_STRING only-this;
    }
""" % fpm.sock)
    try:
        e = env_of(s, path="/env.php?a=1")
        assert e["QUERY_STRING"] == "only-this"
        assert e["REQUEST_URI"] is None  # fastcgi.conf's lines are not this block's
    finally:
        check_clean_exit(s)


def test_if_not_empty_leaves_an_empty_param_out(php):
    e = env_of(php("fastcgi_param HTTPS $https if_not_empty;\n"
                   "fastcgi_param PATH_INFO $fastcgi_path_info if_not_empty;"))
    assert e["HTTPS"] is None and e["PATH_INFO"] is None


def test_fastcgi_index_is_appended_to_a_directory(tmp_path, fpm):
    root = php_root(tmp_path)
    os.makedirs(os.path.join(root, "dir"))
    with open(os.path.join(root, "dir", "index.php"), "w") as f:
        f.write('<?php echo $_SERVER["SCRIPT_NAME"], " ", $_SERVER["SCRIPT_FILENAME"];')
    s = lfhttpd(tmp_path / "lf", root, """
    location /dir/ {
        fastcgi_pass unix:%s;
        fastcgi_index index.php;
        include fastcgi.conf;
    }
""" % fpm.sock)
    try:
        _, _, body = request(s, "GET", "/dir/")
        assert body == f"/dir/index.php {root}/dir/index.php".encode()
    finally:
        check_clean_exit(s)


def test_an_upstream_block_fails_over_to_its_live_server(tmp_path, fpm):
    root = php_root(tmp_path)
    s = lfhttpd(tmp_path / "lf", root, """
    location ~ \\.php$ {
        fastcgi_pass php_pool;
        include fastcgi.conf;
    }
""", top="upstream php_pool { server unix:%s/gone.sock; server unix:%s; }\n"
        % (tmp_path, fpm.sock))
    try:
        for _ in range(3):  # the dead one fails over to the live one (fastcgi_next_upstream)
            assert env_of(s)["SCRIPT_NAME"] == "/env.php"
    finally:
        check_clean_exit(s)


def test_fastcgi_pass_to_a_tcp_address(tmp_path):
    from conftest import free_port
    port = free_port()
    app = Fpm(tmp_path / "fpm-tcp", listen=f"127.0.0.1:{port}")
    root = php_root(tmp_path)
    s = None
    try:
        s = lfhttpd(tmp_path / "lf", root, """
    location ~ \\.php$ {
        fastcgi_pass 127.0.0.1:%d;
        include fastcgi.conf;
    }
""" % port)
        assert env_of(s, path="/env.php?t=1")["QUERY_STRING"] == "t=1"
    finally:
        if s:
            check_clean_exit(s)
        app.stop()


def test_an_application_whose_backlog_is_full_is_502_at_once(tmp_path):
    path = str(tmp_path / "full.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(0)  # never accepted: one connection fills it
    fillers = []
    for _ in range(4):
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.setblocking(False)
        try:
            c.connect(path)
        except BlockingIOError:
            c.close()
            break
        fillers.append(c)
    root = php_root(tmp_path)
    s = lfhttpd(tmp_path / "lf", root, """
    location / {
        fastcgi_pass unix:%s;
        fastcgi_connect_timeout 10s;
        include fastcgi.conf;
    }
""" % path)
    try:
        t0 = time.monotonic()
        assert request(s, "GET", "/x.php")[0] == 502
        assert time.monotonic() - t0 < scaled(3)
    finally:
        check_clean_exit(s)
        for c in fillers:
            c.close()
        listener.close()


def test_an_application_that_does_not_read_the_body_is_504_after_send_timeout(tmp_path):
    path = str(tmp_path / "deaf.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(8)
    held = []
    threading.Thread(target=lambda: held.append(listener.accept()[0]), daemon=True).start()
    root = php_root(tmp_path)
    s = lfhttpd(tmp_path / "lf", root, """
    client_max_body_size 32m;
    location / {
        fastcgi_pass unix:%s;
        fastcgi_send_timeout 1s;
        include fastcgi.conf;
    }
""" % path)
    try:
        t0 = time.monotonic()
        assert request(s, "POST", "/x.php", b"z" * (16 << 20))[0] == 504
        assert time.monotonic() - t0 < scaled(8)
    finally:
        check_clean_exit(s)
        for c in held:
            c.close()
        listener.close()


def test_status_page_lists_a_block_fastcgi_pass_uses_once_with_its_requests(tmp_path, fpm):
    root = php_root(tmp_path)
    s = lfhttpd(tmp_path / "lf", root, """
    location ~ \\.php$ {
        fastcgi_pass fpm;
        include fastcgi.conf;
    }
    location /status { handler status; }
""", top="upstream fpm { server unix:%s; }\nupstream unused { server 127.0.0.1:9; }\n"
        % fpm.sock)
    try:
        for _ in range(3):
            env_of(s)
        ups = json.loads(request(s, "GET", "/status?format=json")[2])["upstreams"]
        mine = [u for u in ups if u["server"].endswith(fpm.sock)]
        assert len(mine) == 1 and mine[0]["requests"] == 3  # (listed once: no proxy copy)
        assert len([u for u in ups if u["server"] == "127.0.0.1:9"]) == 1
    finally:
        check_clean_exit(s)


def test_split_path_info_needs_two_captures(tmp_path):
    from conftest import BIN
    import subprocess
    conf = tmp_path / "bad.conf"
    conf.write_text("server {\n listen 127.0.0.1:0;\n location / {\n"
                    "  fastcgi_split_path_info ^(.+\\.php)$;\n  fastcgi_pass unix:/x.sock;\n }\n}\n")
    r = subprocess.run([BIN, "-t", "-c", str(conf)], capture_output=True, text=True)
    assert r.returncode != 0
    assert f"{conf}:4" in r.stderr and "fastcgi_split_path_info" in r.stderr


# --- a hostile application: records lfhttpd must refuse ---------------------------------------

def record(rtype, content, rid=1, version=1):
    return struct.pack(">BBHHBx", version, rtype, rid, len(content), 0) + content


END = record(3, struct.pack(">IB3x", 0, 0))


class RawApp:
    """A FastCGI application on a unix socket that answers every request with `answer`
    (bytes); then it closes the connection, or with keep=True waits for the next request
    on it. conns counts the connections it accepted, received their requests' bytes."""

    def __init__(self, path, answer, keep=False, drop_second=False):
        self.path, self.answer, self.keep = path, answer, keep
        self.drop_second = drop_second  # close a connection's second request unanswered
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(8)
        self.received = []
        self.conns = 0
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.conns += 1
            c.settimeout(5)
            data = b""
            served = 0
            while True:
                while record(5, b"") not in data:  # the empty STDIN ends a request
                    try:
                        part = c.recv(65536)
                    except OSError:
                        part = b""
                    if not part:
                        break
                    data += part
                if record(5, b"") not in data:
                    break
                end = data.index(record(5, b"")) + 8
                self.received.append(data[:end])
                data = data[end:]
                served += 1
                if served == 2 and self.drop_second:
                    break
                c.sendall(self.answer)
                if not self.keep:
                    break
            c.close()

    def stop(self):
        self.sock.close()


@pytest.fixture
def raw(tmp_path):
    apps = []

    def start(answer, keep=False, location="", drop_second=False):
        app = RawApp(str(tmp_path / f"raw{len(apps)}.sock"), answer, keep, drop_second)
        apps.append(app)
        root = php_root(tmp_path / f"r{len(apps)}")
        s = lfhttpd(tmp_path / f"lfr{len(apps)}", root, f"""
    location / {{
        fastcgi_pass app;
        include fastcgi.conf;
{location}
    }}
""", top=f"upstream app {{ server unix:{app.path}; keepalive 4; }}\n")
        apps.append(s)
        s.app = app
        return s
    yield start
    for a in apps:
        check_clean_exit(a) if isinstance(a, Server) else a.stop()


def test_records_split_across_reads_are_put_together(raw):
    out = b"Content-Type: text/plain\r\n\r\n" + b"x" * 70000
    recs = record(6, out[:30]) + record(6, out[30:65000]) + record(6, out[65000:]) + \
        record(6, b"") + END
    s = raw(recs)
    status, _, body = request(s, "GET", "/a")
    assert (status, body) == (200, b"x" * 70000)


def test_a_record_of_another_version_is_502(raw):
    s = raw(record(6, b"Content-Type: text/plain\r\n\r\nhi", version=2) + END)
    assert request(s, "GET", "/a")[0] == 502


def test_a_bad_record_read_with_the_head_cuts_the_answer_after_its_head(raw):
    """The head was whole and the bad record came in the same read: the head goes and the
    answer is cut (nginx's too), not a connection closed with nothing said."""
    s = raw(record(6, b"Content-Type: text/plain\r\n\r\nhi") + record(6, b"x", version=2) +
            END)
    c = s.connect(timeout=10)
    c.send(b"GET /a HTTP/1.1\r\nHost: t\r\n\r\n")
    got = c.recv_all()
    assert got.startswith(b"HTTP/1.1 200 ")
    assert got.endswith(b"\r\n\r\n2\r\nhi\r\n")  # no last chunk: cut
    assert "the response was cut" in s.error_log()


def test_a_record_of_another_request_is_502(raw):
    s = raw(record(6, b"Content-Type: text/plain\r\n\r\nhi", rid=7) + END)
    assert request(s, "GET", "/a")[0] == 502


def test_a_header_with_a_cr_inside_is_never_relayed(raw):
    s = raw(record(6, b"Content-Type: text/plain\r\nX-Evil: a\rSet-Cookie: b\r\n\r\nhi") + END)
    status, headers, _ = request(s, "GET", "/a")
    assert status == 502
    assert header(headers, "X-Evil") == [] and header(headers, "Set-Cookie") == []


def test_a_connection_closed_before_end_request_cuts_the_answer(raw):
    s = raw(record(6, b"Content-Type: text/plain\r\n\r\npartial"))
    with pytest.raises(http.client.IncompleteRead):
        request(s, "GET", "/a")


def records_of(data):
    out = []
    while data:
        version, rtype, rid, clen, plen = struct.unpack(">BBHHBx", data[:8])
        out.append((rtype, rid, data[8:8 + clen]))
        data = data[8 + clen + plen:]
    return out


def test_the_request_goes_as_begin_params_and_stdin_records(raw):
    s = raw(record(6, b"Content-Type: text/plain\r\n\r\nok") + END)
    assert request(s, "POST", "/a?q=1", b"hello", {"Content-Type": "text/plain"})[2] == b"ok"
    recs = records_of(s.app.received[0])
    assert recs[0] == (1, 1, b"\x00\x01\x00\x00\x00\x00\x00\x00")  # responder, no keep
    types = [r[0] for r in recs]
    params_end = types.index(4) + types[types.index(4):].index(5) - 1
    assert recs[params_end] == (4, 1, b"")
    assert [r for r in recs if r[0] == 5] == [(5, 1, b"hello"), (5, 1, b"")]
    params = b"".join(r[2] for r in recs if r[0] == 4)
    assert b"\x0c\x03QUERY_STRINGq=1" in params
    assert b"\x0e\x04REQUEST_METHODPOST" in params


def test_keep_conn_keeps_the_connection_for_the_next_requests(raw):
    s = raw(record(6, b"Content-Type: text/plain\r\n\r\nok") + END, keep=True,
            location="fastcgi_keep_conn on;")
    for _ in range(4):
        assert request(s, "GET", "/a")[2] == b"ok"
    assert s.app.conns == 1
    assert records_of(s.app.received[0])[0][2][2] == 1  # FCGI_KEEP_CONN asked


def test_without_keep_conn_each_request_has_a_connection(raw):
    s = raw(record(6, b"Content-Type: text/plain\r\n\r\nok") + END, keep=True)
    for _ in range(3):
        assert request(s, "GET", "/a")[2] == b"ok"
    assert s.app.conns == 3
    assert records_of(s.app.received[0])[0][2][2] == 0


def test_a_kept_connection_the_application_closed_is_not_a_failure(raw):
    s = raw(record(6, b"Content-Type: text/plain\r\n\r\nok") + END, keep=False,
            location="fastcgi_keep_conn on;")
    for _ in range(3):  # each kept connection is closed behind lfhttpd's back
        assert request(s, "POST", "/a", b"body")[:1] == (200,)
    assert s.app.conns == 3


def test_a_kept_connection_closed_under_a_request_sends_it_again_on_a_new_one(raw):
    s = raw(record(6, b"Content-Type: text/plain\r\n\r\nok") + END, keep=True,
            drop_second=True, location="fastcgi_keep_conn on;")
    assert request(s, "GET", "/a")[2] == b"ok"
    assert request(s, "GET", "/b")[:1] == (200,)
    assert s.app.conns == 2


def test_keep_conn_with_php_fpm(tmp_path, fpm):
    root = php_root(tmp_path)
    s = lfhttpd(tmp_path / "lf", root, """
    location ~ \\.php$ {
        fastcgi_pass fpm;
        fastcgi_keep_conn on;
        include fastcgi.conf;
    }
""", top="upstream fpm { server unix:%s; keepalive 2; }\n" % fpm.sock)
    try:
        for i in range(6):
            e = env_of(s, "POST", "/env.php?i=%d" % i, "v=%d" % i,
                       {"Content-Type": "application/x-www-form-urlencoded"})
            assert (e["QUERY_STRING"], e["post"]) == ("i=%d" % i, {"v": str(i)})
        assert request(s, "GET", "/big.php?mib=2")[2][:8] == b"00000000"
        assert env_of(s)["SCRIPT_NAME"] == "/env.php"
    finally:
        check_clean_exit(s)


def test_error_page_answers_the_applications_absence_as_nginx(tmp_path, pair, fpm):
    """error_page 502 applies to FastCGI's own 502 (the application is down), as nginx's
    and as the proxy's."""
    lf, ng = pair("""
    error_page 502 /50x.html;
    location = /50x.html {{ return 200 "sorry\\n"; }}
    location ~ \\.php$ {{
        include fastcgi.conf;
        fastcgi_pass unix:{sock};
    }}
""")
    fpm.stop()
    got = [request(s, "GET", "/env.php")[::2] for s in (lf, ng)]
    assert got[1] == (502, b"sorry\n")
    assert got[0] == got[1]


INTERCEPT = """
    error_page 404 /404.html;
    location = /404.html {{ return 200 "our page\\n"; }}
    location ~ \\.php$ {{
        include fastcgi.conf;
        fastcgi_pass unix:{sock};
    }}
    location /i/ {{
        include fastcgi_params;
        fastcgi_param SCRIPT_FILENAME $document_root/notfound.php;
        fastcgi_pass unix:{sock};
        fastcgi_intercept_errors on;
    }}
"""


def test_intercept_errors_answers_the_applications_404_with_the_error_page_as_nginx(pair):
    lf, ng = pair(INTERCEPT)
    got = [request(s, "GET", "/i/x")[::2] for s in (lf, ng)]
    assert got[1] == (404, b"our page\n")
    assert got[0] == got[1]


def test_without_intercept_errors_the_applications_404_passes_as_nginx(pair):
    lf, ng = pair(INTERCEPT)
    got = [request(s, "GET", "/notfound.php")[::2] for s in (lf, ng)]
    assert got[1] == (404, b"missing\n")
    assert got[0] == got[1]
