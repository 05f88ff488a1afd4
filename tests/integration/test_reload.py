"""SIGHUP reloads the configuration without dropping a connection: new connections, and
the next request of open ones, use the new configuration; requests in flight finish with
the one they started with; a configuration that does not load, or that changes what only
a restart can (listen, threads, classes, logs), is refused with a message and the running
one stays."""
import os
import re
import shutil
import signal
import subprocess
import threading
import time

import pytest

from conftest import wait_until


def fetch(server, path):
    c = server.connect()
    try:
        c.send(f"GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".encode())
        return c.read_response()
    finally:
        c.close()


def reload(server, conf_text=None, expect="reloaded"):
    """Rewrite the configuration file (if given), send SIGHUP, and wait for the server to
    say it reloaded (or refused). Returns the new error-log lines."""
    if conf_text is not None:
        with open(server.conf_path, "w") as f:
            f.write(conf_text)
    before = len(server.error_log())
    server.proc.send_signal(signal.SIGHUP)
    pattern = "configuration reloaded" if expect == "reloaded" else "configuration not reloaded"
    assert wait_until(lambda: pattern in server.error_log()[before:]), server.error_log()[before:]
    return server.error_log()[before:]


def conf_for(server, root, extra=""):
    base = ("listen 127.0.0.1:0;\n"
            f'root "{root}";\n'
            "threads 4;\n"
            f'access_log "{server.access_path}";\n'
            "error_log stderr debug;\n"
            "shutdown_timeout 5s;\n")
    # A directive is set once: extra's own takes the place of the base's.
    ours = set(re.findall(r"(?m)^(\w+)\s", extra)) - {"listen"}
    return "".join(b for b in base.splitlines(True) if b.split()[0] not in ours) + extra


@pytest.fixture
def two_roots(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "index.html").write_text("site A\n")
    (b / "index.html").write_text("site B\n")
    return a, b


def test_reload_serves_the_new_root_to_new_connections(start_server, two_roots):
    a, b = two_roots
    s = start_server(a)
    assert fetch(s, "/")[2] == b"site A\n"
    log = reload(s, conf_for(s, b))
    assert "generation 2" in log
    assert fetch(s, "/")[2] == b"site B\n"


def test_reload_reaches_the_next_request_of_an_open_keepalive_connection(start_server,
                                                                         two_roots):
    a, b = two_roots
    s = start_server(a)
    c = s.connect()
    c.send(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
    assert c.read_response()[2] == b"site A\n"
    reload(s, conf_for(s, b))
    c.send(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
    status, _, body, _ = c.read_response()
    assert (status, body) == (200, b"site B\n")
    c.close()


def test_reload_adds_a_handler_mount(start_server, two_roots):
    a, _ = two_roots
    s = start_server(a)
    assert fetch(s, "/hello")[0] == 404
    reload(s, conf_for(s, a, "handler /hello hello;\n"))
    assert fetch(s, "/hello")[0] == 200


def test_reload_changes_a_limit(start_server, two_roots):
    """max_header_size shrinks: a request head that was fine is now 431."""
    a, _ = two_roots
    s = start_server(a)
    big = "x" * 3000

    def status():
        c = s.connect()
        c.send(f"GET / HTTP/1.1\r\nHost: t\r\nX-Big: {big}\r\nConnection: close\r\n\r\n"
               .encode())
        try:
            return c.read_response()[0]
        finally:
            c.close()

    assert status() == 200
    reload(s, conf_for(s, a, "max_header_size 2k;\n"))
    assert status() == 431


def test_reload_shows_the_generation_on_the_status_page(start_server, two_roots):
    import json
    a, _ = two_roots
    s = start_server(a, "handler /status status;\n")
    assert json.loads(fetch(s, "/status?format=json")[2])["generation"] == 1
    reload(s, conf_for(s, a, "handler /status status;\n"))
    reload(s)
    assert json.loads(fetch(s, "/status?format=json")[2])["generation"] == 3


def test_reload_with_an_invalid_file_is_refused_with_its_line_and_the_old_one_stays(
        start_server, two_roots):
    a, b = two_roots
    s = start_server(a)
    log = reload(s, conf_for(s, b, "gzip maybe;\n"), expect="refused")
    assert re.search(r"lfhttpd\.conf:7: .*gzip", log), log
    assert "still serving generation 1" in log
    assert fetch(s, "/")[2] == b"site A\n"
    assert s.proc.poll() is None


def test_reload_with_a_missing_root_is_refused(start_server, two_roots, tmp_path):
    a, _ = two_roots
    s = start_server(a)
    log = reload(s, conf_for(s, tmp_path / "nowhere"), expect="refused")
    assert "nowhere" in log
    assert fetch(s, "/")[2] == b"site A\n"


@pytest.mark.parametrize("line, change, name", [
    ("threads 4;", "threads 3;", "threads"),
    (None, "concurrency half_sync_half_async;", "concurrency"),
    (None, "promotion condvar;", "promotion"),
    (None, "listen 127.0.0.1:0;", "listen"),
    (None, "max_connections 77;", "max_connections"),
    ("error_log stderr debug;", "error_log stderr info;", "error_log"),
    ("error_log stderr debug;", 'error_log "{dir}/other-error.log" debug;', "error_log"),
    ('access_log "{access}";', 'access_log "{dir}/other-access.log";', "access_log"),
    (None, "access_log_format json;", "access_log_format"),
    (None, "server_tokens off;", "server_tokens"),
    (None, "class bulk { match path /big/; }", "class"),
])
def test_reload_refuses_a_change_that_needs_a_restart(start_server, two_roots, line, change,
                                                      name):
    """The new file changes the line (or adds one); every other line is as at start. The
    refusal names the directive, the running generation stays, and so does its
    behaviour: the old root is served, with the Server header it had."""
    a, b = two_roots
    s = start_server(a)

    def fill(t):
        return t.replace("{dir}", s.dir).replace("{access}", s.access_path)

    text = conf_for(s, b)
    if line is None:
        text += change + "\n"
    else:
        assert fill(line) in text
        text = text.replace(fill(line), fill(change))
    log = reload(s, text, expect="refused")
    assert f"changing `{name}`" in log and "needs a restart" in log, log
    assert "still serving generation 1" in log, log
    status, headers, body, _ = fetch(s, "/")
    assert (status, body) == (200, b"site A\n")
    assert headers["server"].startswith("lfhttpd/"), headers
    assert not os.path.exists(os.path.join(s.dir, "other-access.log"))
    assert not os.path.exists(os.path.join(s.dir, "other-error.log"))


def test_reload_applies_the_command_line_flags_again(start_server, two_roots):
    """-r and -n given at start override the file at each reload too: the file's root (A)
    and `threads 4` never take effect, so the reload is accepted (not refused as a change
    of `threads`) and B is still served by 3 threads."""
    import json
    a, b = two_roots
    s = start_server(a, "handler /status status;\n", args=("-r", str(b), "-n", "3"))

    def threads():
        groups = json.loads(fetch(s, "/status?format=json")[2])["groups"]
        return next(g["threads"] for g in groups if g["name"] == "default")

    assert fetch(s, "/")[2] == b"site B\n" and threads() == 3
    log = reload(s, conf_for(s, a, "handler /status status;\nhandler /hello hello;\n"))
    assert "generation 2" in log
    assert fetch(s, "/hello")[0] == 200  # the new file is in effect...
    assert fetch(s, "/")[2] == b"site B\n"  # ...under the flags given at start
    assert threads() == 3


def test_reload_can_change_the_rules_of_an_existing_class(start_server, two_roots):
    """The set of classes is fixed at start; which paths go to each is not."""
    import json
    a, _ = two_roots
    (a / "big").mkdir()
    (a / "big" / "f.txt").write_text("f")
    (a / "other").mkdir()
    (a / "other" / "f.txt").write_text("f")
    base = "handler /status status;\nclass bulk { threads 1; match path %s; }\n"
    s = start_server(a, base % "/big/")

    def bulk_requests():
        groups = json.loads(fetch(s, "/status?format=json")[2])["groups"]
        return next(g["requests"] for g in groups if g["name"] == "bulk")

    fetch(s, "/other/f.txt")
    assert bulk_requests() == 0
    reload(s, conf_for(s, a, base % "/other/"))
    fetch(s, "/other/f.txt")
    assert wait_until(lambda: bulk_requests() == 1)


def test_reload_changes_the_answer_of_a_regex_location_for_a_path_already_seen(
        start_server, two_roots):
    """The one thread remembers which location its recent paths matched. A hundred reloads
    swap the order of two regex locations, so that the path's location moves from the
    first place to the second and back, and new configurations come to be built where
    older ones were freed: each answer is the new configuration's, never one remembered
    of an older configuration."""
    a, _ = two_roots
    p = '    location ~ ^/p/[a-z]+$ { return 200 "p"; }\n'
    txt = '    location ~ \\.txt$ { return 200 "txt"; }\n'

    def text(n):
        regexes = p + txt if n % 2 else txt + p
        return conf_for(s, a, "threads 1;\nserver {\n    listen 127.0.0.1:0;\n"
                              + regexes + "}\n")

    s = start_server(a, "threads 1;\n")
    for n in range(1, 101):
        reload(s, text(n))
        for _ in range(2):  # the second from what the thread remembers
            assert fetch(s, "/p/abc")[::2] == (200, b"p")
            assert fetch(s, "/t.txt")[::2] == (200, b"txt")


def test_reload_lets_a_request_in_flight_finish_with_its_configuration(start_server,
                                                                       two_roots):
    """A CGI script is still answering when the reload removes its mount: the response
    completes, and the old generation is let go only afterwards."""
    a, _ = two_roots
    cgi = a / "cgi-bin"
    cgi.mkdir()
    script = cgi / "slow.sh"
    script.write_text("#!/bin/sh\nprintf 'Content-Type: text/plain\\r\\n\\r\\n'\n"
                      "echo first\nsleep 1\necho second\n")
    script.chmod(0o755)
    s = start_server(a, f'cgi /cgi-bin/ "{cgi}";\n')
    c = s.connect()
    c.send(b"GET /cgi-bin/slow.sh HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    time.sleep(0.3)
    reload(s, conf_for(s, a))  # no cgi any more
    raw = c.recv_all(timeout=10)
    assert raw.startswith(b"HTTP/1.1 200 "), raw
    assert b"first\n" in raw and b"second\n" in raw, raw
    c.close()
    assert fetch(s, "/")[0] == 200


def test_repeated_reloads_release_each_old_generation(start_server, two_roots):
    """Each generation holds the document root open: after many reloads, with no
    connection left on an old one, the open descriptors are back where they were."""
    a, b = two_roots
    s = start_server(a)
    fd_dir = f"/proc/{s.proc.pid}/fd"
    fetch(s, "/")
    before = len(os.listdir(fd_dir))
    for i in range(20):
        reload(s, conf_for(s, b if i % 2 else a))
        assert fetch(s, "/")[0] == 200
    assert wait_until(lambda: len(os.listdir(fd_dir)) <= before, timeout=5), \
        (before, os.listdir(fd_dir))


@pytest.mark.skipif(not shutil.which("wrk"), reason="wrk is not installed")
def test_reload_under_wrk_load_loses_no_request(start_server, two_roots):
    """wrk keeps 50 connections busy while SIGHUP arrives five times: no socket error, no
    non-2xx answer, and the last configuration is in effect afterwards."""
    a, b = two_roots
    (a / "index.html").write_text("site A\n")
    s = start_server(a)
    out = {}

    def run():
        out["wrk"] = subprocess.run(
            ["wrk", "-t2", "-c50", "-d4s", s.url + "/index.html"],
            capture_output=True, text=True, timeout=60).stdout

    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.8)
    for i in range(5):
        reload(s, conf_for(s, b if i % 2 == 0 else a))
        time.sleep(0.4)
    t.join()
    report = out["wrk"]
    assert "Socket errors" not in report, report
    assert "Non-2xx" not in report, report
    requests = int(re.search(r"(\d+) requests in", report).group(1))
    assert requests > 1000, report
    assert fetch(s, "/")[2] == b"site B\n"  # the fifth reload (i = 4) chose B
