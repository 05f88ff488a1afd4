"""fastcgi_catch_stderr STRING, as nginx's: while the answer's head has not come, a FastCGI
STDERR record holding one of the strings makes the answer invalid (502, or the next server
under `fastcgi_next_upstream invalid_header`); once the head came, stderr is only logged.

Each case runs the same configuration on lfhttpd and on nginx against real PHP-FPM pools,
whose scripts write to stderr with error_log() (log_errors on and no error_log file: PHP-FPM
sends it as FCGI_STDERR, in order with the output)."""
import os
import socket

import pytest

from conftest import Nginx, check_clean_exit, scaled, wait_until
from fastcgi_harness import Fpm, lfhttpd, php_root, with_conf_files
from test_fastcgi import request

SCRIPTS = {
    # the message before any output: it comes before the head
    "before.php": "<?php error_log('db: CONNECT FAILED'); echo 'page';\n",
    # the head and some of the body went first (out of PHP's output buffer), then the
    # message
    "after.php": "<?php while (ob_get_level()) ob_end_flush(); echo 'page'; flush();\n"
                 "error_log('db: CONNECT FAILED'); echo '!';\n",
    # a message ending in a dot
    # the message sent at once (flush(): PHP-FPM holds its records until then), while the
    # client's body may still be coming (PHP reads a PUT's body only when asked, or at the
    # end)
    "early.php": "<?php error_log('db: CONNECT FAILED'); flush(); echo 'page';\n",
    "dot.php": "<?php error_log('db: FAILED.'); echo 'page';\n",
    "other.php": "<?php error_log('a notice'); echo 'page';\n",
    # the message only on the pool whose ROLE is bad
    "role.php": "<?php if (getenv('ROLE') === 'bad') error_log('db: CONNECT FAILED');\n"
                "echo getenv('ROLE');\n",
}


def docroot(tmp_path):
    root = php_root(tmp_path)
    for name, text in SCRIPTS.items():
        with open(os.path.join(root, name), "w") as f:
            f.write(text)
    return root


@pytest.fixture
def pair(tmp_path):
    """start(server_text, upstream=None, pools=1): lfhttpd and nginx on the same server
    text (`{up}` names the upstream of the pools, ROLE=bad on the first of two), one root."""
    made = []

    def start(text, pools=1, upstream_extra=""):
        root = docroot(tmp_path)
        fpms = []
        for i in range(pools):
            role = "bad" if i == 0 and pools > 1 else "good"
            fpms.append(Fpm(tmp_path / f"fpm{i}", extra=f"env[ROLE] = {role}\n"))
            made.append(fpms[-1])
        up = "upstream php { %s %s }\n" % (
            " ".join(f"server unix:{p.sock};" for p in fpms), upstream_extra)
        lf = lfhttpd(tmp_path / "lf", root, text, top=up)
        made.append(lf)
        with_conf_files(tmp_path / "ng")
        ng = Nginx(tmp_path / "ng", root, up + "server {\n    listen 127.0.0.1:{port0};\n"
                   f"    root {root};\n{text}\n}}\n", http=True)
        made.append(ng)
        return lf, ng

    yield start
    for m in reversed(made):
        if isinstance(m, Fpm):
            m.stop()
        elif hasattr(m, "error_log"):
            check_clean_exit(m)
        else:
            m.stop()


def answers(servers, path):
    return [request(s, "GET", path)[::2] for s in servers]


def location(lines):
    return ("    location ~ \\.php$ { fastcgi_pass php; include fastcgi.conf; %s }\n" % lines)


def test_a_caught_string_in_stderr_before_the_head_is_502_as_nginx(pair):
    servers = pair(location("fastcgi_catch_stderr 'CONNECT FAILED';"))
    lf, ng = answers(servers, "/before.php")
    assert lf[0] == ng[0] == 502
    # the record is logged as ever
    assert wait_until(lambda: "CONNECT FAILED" in servers[0].error_log(), scaled(5))


def test_stderr_without_a_caught_string_is_only_logged_as_nginx(pair):
    servers = pair(location("fastcgi_catch_stderr 'CONNECT FAILED';"))
    assert answers(servers, "/other.php") == [(200, b"page")] * 2


def test_stderr_after_the_head_is_only_logged_as_nginx(pair):
    servers = pair(location("fastcgi_catch_stderr 'CONNECT FAILED';"))
    assert answers(servers, "/after.php") == [(200, b"page!")] * 2
    assert wait_until(lambda: "CONNECT FAILED" in servers[0].error_log(), scaled(5))


def test_trailing_dots_of_the_record_are_not_searched_as_nginx(pair):
    servers = pair(location("fastcgi_catch_stderr 'FAILED.';"))
    assert answers(servers, "/dot.php") == [(200, b"page")] * 2


def test_the_string_is_searched_case_sensitively_as_nginx(pair):
    servers = pair(location("fastcgi_catch_stderr 'connect failed';"))
    assert answers(servers, "/before.php") == [(200, b"page")] * 2


def test_any_of_several_strings_is_caught_as_nginx(pair):
    servers = pair(location("fastcgi_catch_stderr nothing; fastcgi_catch_stderr 'FAILED';"))
    assert [a[0] for a in answers(servers, "/before.php")] == [502, 502]


def test_a_location_inherits_the_servers_strings_as_nginx(pair):
    servers = pair("    fastcgi_catch_stderr 'CONNECT FAILED';\n" + location(""))
    assert [a[0] for a in answers(servers, "/before.php")] == [502, 502]


def test_a_locations_own_strings_replace_the_servers_as_nginx(pair):
    servers = pair("    fastcgi_catch_stderr 'CONNECT FAILED';\n" +
                   location("fastcgi_catch_stderr 'elsewhere';"))
    assert answers(servers, "/before.php") == [(200, b"page")] * 2


def test_a_caught_answer_goes_to_the_next_server_with_invalid_header_as_nginx(pair):
    servers = pair(location("fastcgi_catch_stderr 'CONNECT FAILED'; "
                            "fastcgi_next_upstream error timeout invalid_header;"), pools=2)
    for _ in range(4):  # whichever server each request tries first
        assert answers(servers, "/role.php") == [(200, b"good")] * 2


def test_a_caught_answer_is_not_retried_without_invalid_header_as_nginx(pair):
    # round-robin: one of the first two requests tries the bad server first
    servers = pair(location("fastcgi_catch_stderr 'CONNECT FAILED';"), pools=2)
    statuses = [[], []]
    for _ in range(4):
        for i, (status, _) in enumerate(answers(servers, "/role.php")):
            statuses[i].append(status)
    assert 502 in statuses[0] and 502 in statuses[1]


def test_a_caught_string_while_the_body_streams_is_502_as_nginx(pair):
    # fastcgi_request_buffering off: the application writes to stderr before the client
    # sent the rest of its body
    servers = pair(location("fastcgi_catch_stderr 'CONNECT FAILED'; "
                            "fastcgi_request_buffering off;"))
    for s in servers:
        with socket.create_connection((s.host, s.port), timeout=scaled(10)) as c:
            c.sendall(b"PUT /early.php HTTP/1.1\r\nHost: x\r\n"
                      b"Content-Type: application/octet-stream\r\n"
                      b"Content-Length: 10\r\n\r\nhalf.")
            head = b""
            while b"\r\n" not in head:
                try:
                    piece = c.recv(4096)
                except TimeoutError:
                    break
                if not piece:
                    break
                head += piece
        assert head.startswith(b"HTTP/1.1 502 "), type(s).__name__
