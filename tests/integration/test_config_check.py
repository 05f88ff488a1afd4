"""`lfhttpd -t` and the configuration as a newcomer meets them: a directive set twice is
an error naming both lines; -t checks every file a start opens; a start that fails says
why on the terminal; errors name the line and the directory meant; the 503 of a full
server is a proper answer; and what the server answers 502 to is in the error log.
"""
import re
import signal
import socket
import subprocess

import pytest

from conftest import BIN, wait_until

GET = b"GET / HTTP/1.1\r\nHost: t\r\n\r\n"


def check(tmp_path, text, cwd=None):
    """Run `lfhttpd -t` on a file of `text` (after a listen and a root of its own)."""
    conf = tmp_path / "t.conf"
    conf.write_text(f'listen 127.0.0.1:0;\nroot "{tmp_path}";\n' + text)
    return subprocess.run([BIN, "-t", "-c", str(conf)], capture_output=True, text=True,
                          cwd=cwd or tmp_path, timeout=30), str(conf)


def check_raw(tmp_path, text, args=()):
    """Run `lfhttpd -t` on a file of exactly `text`, from tmp_path."""
    conf = tmp_path / "t.conf"
    conf.write_text(text)
    return subprocess.run([BIN, "-t", "-c", str(conf), *args], capture_output=True, text=True,
                          cwd=tmp_path, timeout=30), str(conf)


# ---------------------------------------------------------------- a directive set twice


def test_repeated_root_is_refused_with_both_lines(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    r, conf = check_raw(tmp_path, "listen 127.0.0.1:0;\nroot a;\nthreads 2;\nroot b;\n")
    assert r.returncode == 1, r.stdout
    assert f'{conf}:4: "root" directive is duplicate (first at {conf}:2)' in r.stderr, r.stderr


def test_repeated_threads_is_refused_with_both_lines(tmp_path):
    r, conf = check(tmp_path, "threads 2;\nthreads 3;\n")
    assert r.returncode == 1, r.stdout
    assert f'{conf}:4: "threads" directive is duplicate (first at {conf}:3)' in r.stderr, r.stderr


def test_a_repeated_directive_stops_a_start_too(tmp_path):
    conf = tmp_path / "t.conf"
    conf.write_text(f'listen 127.0.0.1:0;\nroot "{tmp_path}";\nthreads 2;\nthreads 3;\n')
    r = subprocess.run([BIN, "-c", str(conf)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1
    assert '"threads" directive is duplicate' in r.stderr, r.stderr


@pytest.mark.parametrize("name, first, second", [
    ("gzip", "on", "off"),
    ("gzip_comp_level", "1", "9"),
    ("gzip_types", "application/wasm", "application/pdf"),
    ("mime_magic", "on", "off"),
    ("default_type", "text/plain", "text/html"),
    ("autoindex", "on", "off"),
    ("open_file_cache", "on", "off"),
    ("open_file_cache_mem_max", "1k", "2k"),
    ("cgi_timeout", "5s", "6s"),
    ("error_log", "stderr", "stderr"),
    ("index", "a.html", "b.html"),
])
def test_repeated_module_or_core_directive_is_refused_with_both_lines(tmp_path, name, first,
                                                                       second):
    r, conf = check(tmp_path, f"{name} {first};\n\n{name} {second};\n")
    assert r.returncode == 1, r.stdout
    assert f'{conf}:5: "{name}" directive is duplicate (first at {conf}:3)' in r.stderr, r.stderr


def test_repeated_directive_in_a_class_is_refused_with_both_lines(tmp_path):
    r, conf = check(tmp_path, "class api {\n  match path /api/;\n  threads 1;\n"
                              "  priority low;\n  threads 2;\n}\n")
    assert r.returncode == 1, r.stdout
    assert (f'{conf}:7: class api: "threads" directive is duplicate (first at {conf}:5)'
            in r.stderr), r.stderr


def test_listen_handler_cgi_class_and_match_may_repeat(tmp_path):
    (tmp_path / "cgi1").mkdir()
    (tmp_path / "cgi2").mkdir()
    r, _ = check(tmp_path, "listen 127.0.0.1:0;\nhandler /a hello;\nhandler /b echo;\n"
                           'cgi /x/ "cgi1";\ncgi /y/ "cgi2";\n'
                           "class a { match path /p/; match path /q/; }\n"
                           "class b { match host b; }\n")
    assert r.returncode == 0, r.stderr


# ---------------------------------------------------------------- promotion


def test_promotion_with_half_sync_half_async_is_refused_with_both_lines(tmp_path):
    r, conf = check(tmp_path, "promotion condvar;\nconcurrency half_sync_half_async;\n")
    assert r.returncode == 1, r.stdout
    assert f"{conf}:3: promotion: " in r.stderr, r.stderr
    assert f"half_sync_half_async ({conf}:4)" in r.stderr, r.stderr


def test_promotion_with_thread_per_connection_is_refused(tmp_path):
    r, conf = check(tmp_path, "concurrency thread_per_connection;\npromotion lifo;\n")
    assert r.returncode == 1, r.stdout
    assert f"{conf}:4: promotion: " in r.stderr, r.stderr


# ---------------------------------------------------------------- files -t must open


def test_check_fails_for_an_access_log_that_cannot_be_opened(tmp_path):
    r, conf = check(tmp_path, f'access_log "{tmp_path}/missing/access.log";\n')
    assert r.returncode == 1, r.stdout
    assert f'{conf}:3: access_log "{tmp_path}/missing/access.log": No such file' in r.stderr, \
        r.stderr


def test_check_fails_for_an_error_log_that_cannot_be_opened(tmp_path):
    r, conf = check(tmp_path, f'\nerror_log "{tmp_path}" warn;\n')  # a directory
    assert r.returncode == 1, r.stdout
    assert f'{conf}:4: error_log "{tmp_path}": Is a directory' in r.stderr, r.stderr


def test_check_passes_for_logs_it_could_create_without_creating_them(tmp_path):
    r, _ = check(tmp_path, f'access_log "{tmp_path}/a.log";\nerror_log "{tmp_path}/e.log";\n')
    assert r.returncode == 0, r.stderr
    assert not (tmp_path / "a.log").exists() and not (tmp_path / "e.log").exists()


# ---------------------------------------------------------------- a start that fails


def test_failed_start_is_said_on_stderr_when_the_error_log_is_a_file(tmp_path):
    """Port in use, error_log to a file: the reason is in the file and on the terminal."""
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        conf = tmp_path / "t.conf"
        conf.write_text(f'listen 127.0.0.1:{port};\nroot "{tmp_path}";\n'
                        f'error_log "{tmp_path}/error.log";\naccess_log off;\n')
        r = subprocess.run([BIN, "-c", str(conf)], capture_output=True, text=True,
                           timeout=30)
    finally:
        taken.close()
    assert r.returncode == 1
    assert f"listen on 127.0.0.1:{port}: Address already in use" in r.stderr, r.stderr
    assert "Address already in use" in (tmp_path / "error.log").read_text()


# ---------------------------------------------------------------- the root


def test_missing_relative_root_is_reported_with_its_line_and_absolute_path(tmp_path):
    r, conf = check_raw(tmp_path, "listen 127.0.0.1:0;\n\nroot site/www;\n")
    assert r.returncode == 1, r.stdout
    assert (f'{conf}:3: root "site/www" ({tmp_path}/site/www): No such file or directory'
            in r.stderr), r.stderr


def test_missing_default_root_is_reported_as_the_default_with_its_absolute_path(tmp_path):
    r, _ = check_raw(tmp_path, "listen 127.0.0.1:0;\n")
    assert r.returncode == 1, r.stdout
    assert f'root "www" (the default) ({tmp_path}/www): No such file' in r.stderr, r.stderr


def test_root_that_is_a_file_is_reported_with_its_line(tmp_path):
    (tmp_path / "f").write_text("x")
    r, conf = check_raw(tmp_path, "listen 127.0.0.1:0;\nroot f;\n")
    assert r.returncode == 1, r.stdout
    assert f'{conf}:2: root "f" ({tmp_path}/f): not a directory' in r.stderr, r.stderr


# ---------------------------------------------------------------- reload


def test_refused_reload_of_access_log_format_names_it(start_server, docroot):
    s = start_server(docroot)
    with open(s.conf_path) as f:
        conf = f.read()
    with open(s.conf_path, "w") as f:
        f.write(conf + "access_log_format json;\n")
    s.proc.send_signal(signal.SIGHUP)
    assert wait_until(lambda: "configuration not reloaded" in s.error_log()), s.error_log()
    assert "changing `access_log_format` needs a restart" in s.error_log(), s.error_log()


# ---------------------------------------------------------------- CGI 502 in the error log


def cgi_502(start_server, docroot, tmp_path, body):
    """Serve a script of `body` under /cgi-bin/ and return (status, error log)."""
    cgi = tmp_path / "cgi"
    cgi.mkdir()
    p = cgi / "bad.sh"
    p.write_text("#!/bin/sh\n" + body)
    p.chmod(0o755)
    s = start_server(docroot, f'cgi /cgi-bin/ "{cgi}";\n')
    c = s.connect()
    c.send(b"GET /cgi-bin/bad.sh HTTP/1.1\r\nHost: t\r\n\r\n")
    status = c.read_response()[0]
    c.close()
    wait_until(lambda: "answered 502" in s.error_log(), timeout=5)
    return status, s.error_log()


def test_cgi_invalid_head_is_logged_as_an_error_with_the_script(start_server, docroot,
                                                               tmp_path):
    status, log = cgi_502(start_server, docroot, tmp_path, "printf 'no colon here\\n\\n'\n")
    assert status == 502
    assert "[error] cgi: /cgi-bin/bad.sh: answered 502: its head is not valid" in log, log


def test_cgi_without_output_is_logged_as_an_error_with_the_script(start_server, docroot,
                                                                 tmp_path):
    status, log = cgi_502(start_server, docroot, tmp_path, "exit 0\n")
    assert status == 502
    assert "[error] cgi: /cgi-bin/bad.sh: answered 502: no output" in log, log


# ---------------------------------------------------------------- the 503 of a full server


def full_server(start_server, docroot, extra=""):
    """A server with max_connections 1, and a client holding that connection."""
    (docroot / "index.html").write_text("hi\n")
    s = start_server(docroot, "max_connections 1;\n" + extra)
    holder = s.connect()
    holder.send(GET)
    assert holder.read_response()[0] == 200
    return s, holder


def test_max_connections_503_has_date_and_the_configured_server_header(start_server,
                                                                      docroot):
    s, holder = full_server(start_server, docroot, "server_tokens off;\n")
    c = s.connect()
    c.send(GET)
    status, headers, body, _ = c.read_response()
    assert status == 503
    assert "date" in headers and headers["date"].endswith(" GMT"), headers
    assert headers.get("server") == "lfhttpd", headers
    assert headers.get("retry-after") == "1" and headers.get("connection") == "close"
    assert b"503" in body
    c.close()
    holder.close()


def test_max_connections_503_ends_with_a_close_not_a_reset(start_server, docroot):
    """The request the server did not serve is read before the close: the client gets the
    503 and then an orderly end of stream, not ECONNRESET."""
    s, holder = full_server(start_server, docroot)
    for _ in range(5):
        c = s.connect()
        c.send(b"GET / HTTP/1.1\r\nHost: t\r\nX-Pad: " + b"x" * 2000 + b"\r\n\r\n")
        c.sock.settimeout(5)
        got = b""
        while True:
            try:
                chunk = c.sock.recv(65536)
            except ConnectionResetError:
                pytest.fail(f"reset after {got[:40]!r}")
            if not chunk:
                break
            got += chunk
        assert got.startswith(b"HTTP/1.1 503 "), got
        c.close()
    holder.close()


def test_class_max_connections_503_is_the_same_answer(start_server, docroot):
    """A class full at accept (its own listener) answers as the server-wide limit does."""
    (docroot / "index.html").write_text("hi\n")
    s = start_server(docroot, "server_tokens off;\n"
                              "class small { listen 127.0.0.1:0; max_connections 1; }\n")
    ports = re.findall(r"listening on 127\.0\.0\.1:(\d+) \(class small\)", s.error_log())
    assert ports, s.error_log()
    holder = socket.create_connection(("127.0.0.1", int(ports[0])), timeout=5)
    holder.sendall(GET)
    assert holder.recv(65536).startswith(b"HTTP/1.1 200 ")
    c = socket.create_connection(("127.0.0.1", int(ports[0])), timeout=5)
    c.sendall(GET)
    got = b""
    while b"\r\n\r\n" not in got:
        chunk = c.recv(65536)
        assert chunk, got
        got += chunk
    head = got.split(b"\r\n\r\n")[0].decode()
    assert head.startswith("HTTP/1.1 503 "), head
    assert "\r\nDate: " in head and "\r\nServer: lfhttpd\r\n" in head, head
    c.close()
    holder.close()


# ---------------------------------------------------------------- nginx's per-block settings

PER_BLOCK = ["types { text/x-foo foo; }"]


@pytest.mark.parametrize("block", ["server", "location"])
@pytest.mark.parametrize("statement", PER_BLOCK)
def test_nginx_per_block_setting_in_a_site_passes_with_a_notice_that_the_top_levels_holds(
        tmp_path, block, statement):
    inner = f"{statement};" if "{" not in statement else statement
    body = inner if block == "server" else f"location / {{\n{inner}\n}}"
    r, conf = check(tmp_path, f"server {{\n{body}\n}}\n")
    line = 4 if block == "server" else 5
    name = statement.split()[0]
    assert r.returncode == 0, r.stderr
    assert (f"notice: {conf}:{line}: {name}: accepted, not used: " in r.stderr and
            "the top level's value holds" in r.stderr), r.stderr


BLOCK_LIMITS = ["client_max_body_size 10m", "client_max_body_size 0", "keepalive_timeout 65",
                "keepalive_timeout 65 60", "keepalive_timeout 0", "keepalive_requests 2",
                "send_timeout 10s", "client_body_timeout 5s"]


@pytest.mark.parametrize("block", ["server", "location"])
@pytest.mark.parametrize("statement", BLOCK_LIMITS)
def test_nginx_connection_setting_in_a_site_passes_without_a_notice(tmp_path, block,
                                                                   statement):
    body = f"{statement};" if block == "server" else f"location / {{\n{statement};\n}}"
    r, conf = check(tmp_path, f"server {{\n{body}\n}}\n")
    assert r.returncode == 0, r.stderr
    assert "notice" not in r.stderr, r.stderr


def test_client_header_timeout_in_a_server_passes_with_a_notice_that_the_top_levels_holds(
        tmp_path):
    r, conf = check(tmp_path, "client_header_timeout 5s;\n"
                              "server {\nclient_header_timeout 2s;\n}\n")
    assert r.returncode == 0, r.stderr
    assert (f"notice: {conf}:5: client_header_timeout: accepted, not used: " in r.stderr and
            "the top level's `header_timeout` holds" in r.stderr), r.stderr


@pytest.mark.parametrize("statement, says", [
    ("client_max_body_size 10q", 'client_max_body_size: invalid size "10q"'),
    ("send_timeout soon", 'send_timeout: invalid duration "soon"'),
    ("client_body_timeout 0", 'client_body_timeout: invalid duration "0"'),
    ("keepalive_requests many", 'keepalive_requests: invalid number "many"'),
    ("keepalive_timeout 65 later", 'keepalive_timeout: invalid duration "later"'),
])
def test_invalid_connection_setting_in_a_location_is_refused_with_its_line(tmp_path,
                                                                          statement, says):
    r, conf = check(tmp_path, f"server {{\nlocation / {{\n{statement};\n}}\n}}\n")
    assert r.returncode == 1, r.stderr
    assert f"{conf}:5: {says}" in r.stderr, r.stderr


GZIP_PER_BLOCK = ["gzip on", "gzip_types text/css", "gzip_min_length 100", "gzip_comp_level 5",
                  "gzip_static always", "gzip_vary on", "gzip_proxied expired no-cache auth",
                  'gzip_disable "msie6" "^curl"', "gzip_http_version 1.1", "brotli off",
                  "zstd_comp_level 3"]


@pytest.mark.parametrize("statement", GZIP_PER_BLOCK)
@pytest.mark.parametrize("block", ["top", "server", "location"])
def test_nginx_gzip_setting_in_any_block_passes_without_a_notice(tmp_path, statement, block):
    text = {"top": f"{statement};\n", "server": f"server {{\n{statement};\n}}\n",
            "location": f"server {{\nlocation / {{\n{statement};\n}}\n}}\n"}[block]
    r, conf = check(tmp_path, text)
    assert r.returncode == 0, r.stderr
    assert "accepted, not used" not in r.stderr, r.stderr


@pytest.mark.parametrize("block", ["top", "server", "location"])
def test_gzip_buffers_passes_with_a_notice_that_it_has_no_meaning(tmp_path, block):
    statement = "gzip_buffers 16 8k"
    text = {"top": f"{statement};\n", "server": f"server {{\n{statement};\n}}\n",
            "location": f"server {{\nlocation / {{\n{statement};\n}}\n}}\n"}[block]
    r, conf = check(tmp_path, text)
    line = {"top": 3, "server": 4, "location": 5}[block]
    assert r.returncode == 0, r.stderr
    assert f"notice: {conf}:{line}: gzip_buffers: accepted, not used: " in r.stderr, r.stderr


@pytest.mark.parametrize("statement,message", [
    ("gzip_proxied sometimes", 'invalid value "sometimes"'),
    ("gzip_static maybe", 'gzip_static: expected "off", "on" or "always", not "maybe"'),
    ("gzip_http_version 2.0", 'gzip_http_version: expected "1.0" or "1.1", not "2.0"'),
    ('gzip_disable "(unclosed"', "missing closing parenthesis"),
])
def test_bad_gzip_setting_in_a_location_is_an_error_naming_the_line(tmp_path, statement,
                                                                     message):
    r, conf = check(tmp_path, f"server {{\nlocation / {{\n{statement};\n}}\n}}\n")
    assert r.returncode != 0, r.stderr
    assert f"{conf}:5:" in r.stderr and message in r.stderr, r.stderr
