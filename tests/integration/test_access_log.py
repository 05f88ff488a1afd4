"""nginx's access logging: `log_format NAME [escape=...] STRING...` at the top level, and
`access_log PATH [FORMAT [buffer=] [flush=] [if=]]` / `access_log off` in servers and
locations, inherited as nginx's. Each test starts a server on a configuration of its own,
sends raw requests, and reads the log files; one runs nginx on the same text and compares
the lines."""
import json
import re
import signal
import socket
import subprocess
import time

import pytest

from conftest import BIN, Nginx, scaled, wait_until
from proxy_harness import proxy, upstream  # noqa: F401 fixtures
from test_proxy import request


def conf(tmp_path, body, top=""):
    """A whole configuration: a loopback listener, the docroot, no top-level access log
    unless `top` says otherwise, and `body` inside one server block."""
    return (f"listen 127.0.0.1:0;\nroot \"{tmp_path}/www\";\nerror_log stderr info;\n"
            f"{top or 'access_log off;'}\n{body}")


def www(tmp_path):
    d = tmp_path / "www"
    d.mkdir(exist_ok=True)
    (d / "index.html").write_bytes(b"hello\n")
    (d / "x").mkdir(exist_ok=True)
    (d / "x" / "f.txt").write_bytes(b"0123456789")
    return d


def get(server, path, headers=b""):
    """One request on its own connection; the response's status."""
    c = server.connect()
    host = b"" if b"Host:" in headers else b"Host: t\r\n"
    c.send(b"GET " + path.encode() + b" HTTP/1.1\r\n" + host + headers +
           b"Connection: close\r\n\r\n")
    st, _, _, _ = c.read_response()
    c.close()
    return st


def lines(path, n=1):
    """The file's lines once it has n of them (lines are written when the response has
    gone, which the client may see first)."""
    def read():
        try:
            with open(path, "rb") as f:
                return f.read().decode("latin-1").splitlines()
        except FileNotFoundError:
            return []
    wait_until(lambda: len(read()) >= n, scaled(5))
    return read()


def test_log_format_variables_fill_the_line(tmp_path, start_server):
    d = www(tmp_path)
    log = tmp_path / "a.log"
    s = start_server(d, conf=conf(tmp_path, f"server {{ access_log {log} t; }}",
                                  top="access_log off;\nlog_format t '$request_method|$request|"
                                  "$status|$body_bytes_sent|$http_x_a|$remote_addr|$uri';"))
    get(s, "/x/f.txt?q=1", b"X-A: hi\r\n")
    assert lines(log) == ["GET|GET /x/f.txt?q=1 HTTP/1.1|200|10|hi|127.0.0.1|/x/f.txt"]


def test_status_is_the_answers_not_a_handlers_guess(tmp_path, start_server):
    d = www(tmp_path)
    log = tmp_path / "a.log"
    s = start_server(d, conf=conf(tmp_path, f"server {{ access_log {log} t; }}",
                                  top="access_log off;\nlog_format t '$status $bytes_sent';"))
    get(s, "/missing")
    status, sent = lines(log)[0].split()
    assert status == "404" and int(sent) > 150  # the head's bytes count in $bytes_sent


def test_time_variables_have_nginxs_forms(tmp_path, start_server):
    d = www(tmp_path)
    log = tmp_path / "a.log"
    s = start_server(d, conf=conf(tmp_path, f"server {{ access_log {log} t; }}",
                                  top="access_log off;\n"
                                  "log_format t '$msec|$time_local|$time_iso8601';"))
    get(s, "/")
    msec, local, iso = lines(log)[0].split("|")
    assert re.fullmatch(r"\d{10}\.\d{3}", msec)
    assert re.fullmatch(r"\d\d/[A-Z][a-z]{2}/\d{4}:\d\d:\d\d:\d\d [+-]\d{4}", local)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d", iso)


def test_connection_numbers_connections_in_the_log(tmp_path, start_server):
    """$connection: the connection's serial number, one for all its requests."""
    d = www(tmp_path)
    log = tmp_path / "a.log"
    s = start_server(d, conf=conf(tmp_path, f"server {{ access_log {log} t; }}",
                                  top="access_log off;\n"
                                      "log_format t '$connection $connection_requests';"))
    for n in (2, 1):
        c = s.connect()
        for _ in range(n):
            c.send(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
            c.read_response()
        c.close()
        lines(log, 2 if n == 2 else 3)
    assert lines(log, 3) == ["1 1", "1 2", "2 1"]


def test_connection_requests_counts_the_requests_of_a_connection(tmp_path, start_server):
    d = www(tmp_path)
    log = tmp_path / "a.log"
    s = start_server(d, conf=conf(tmp_path, f"server {{ access_log {log} t; }}",
                                  top="access_log off;\nlog_format t '$connection_requests';"))
    c = s.connect()
    for _ in range(3):
        c.send(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
        c.read_response()
    c.close()
    assert lines(log, 3) == ["1", "2", "3"]


def test_request_length_leaves_out_a_body_not_read(tmp_path, start_server):
    """A file does not read the body (nginx answers 405 and skips it): the head alone, as
    nginx counts (test_request_length_nginx.py compares it with nginx's)."""
    d = www(tmp_path)
    log = tmp_path / "a.log"
    s = start_server(d, conf=conf(tmp_path, f"server {{ access_log {log} t; }}",
                                  top="access_log off;\nlog_format t '$request_length';"))
    head = (b"POST /x/f.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n"
            b"Connection: close\r\n\r\n")
    c = s.connect()
    c.send(head + b"hello")
    c.read_response()
    c.close()
    assert lines(log) == [str(len(head))]


def test_request_time_is_seconds_with_milliseconds(tmp_path, start_server):
    """nginx's form: seconds, a dot, three digits."""
    d = www(tmp_path)
    log = tmp_path / "a.log"
    s = start_server(d, conf=conf(tmp_path, f"server {{ access_log {log} t; }}",
                                  top="access_log off;\nlog_format t '$request_time';"))
    get(s, "/")
    t = lines(log)[0]
    assert re.fullmatch(r"\d+\.\d{3}", t) and float(t) < scaled(5)


def test_default_escape_writes_quote_backslash_and_high_bytes_as_hex(tmp_path, start_server):
    d = www(tmp_path)
    log = tmp_path / "a.log"
    s = start_server(d, conf=conf(tmp_path, f"server {{ access_log {log} t; }}",
                                  top="access_log off;\nlog_format t '\"$http_x_a\"';"))
    get(s, "/", b'X-A: a"b\\c\xc3\xa9\td\r\n')
    assert lines(log) == ['"a\\x22b\\x5Cc\\xC3\\xA9\\x09d"']


def test_empty_variable_is_a_dash(tmp_path, start_server):
    d = www(tmp_path)
    log = tmp_path / "a.log"
    s = start_server(d, conf=conf(tmp_path, f"server {{ access_log {log} t; }}",
                                  top="access_log off;\nlog_format t '[$http_x_none]';"))
    get(s, "/")
    assert lines(log) == ["[-]"]


def test_json_escape_writes_a_json_string(tmp_path, start_server):
    d = www(tmp_path)
    log = tmp_path / "a.log"
    s = start_server(d, conf=conf(
        tmp_path, f"server {{ access_log {log} j; }}",
        top="access_log off;\n"
            "log_format j escape=json '{\"a\":\"$http_x_a\",\"none\":\"$http_x_none\"}';"))
    get(s, "/", b'X-A: a"b\\c\td\xc3\xa9\r\n')
    line = lines(log)[0].encode("latin-1")
    assert line == b'{"a":"a\\"b\\\\c\\td\xc3\xa9","none":""}'
    assert json.loads(line) == {"a": 'a"b\\c\td\u00e9', "none": ""}


def test_json_escape_writes_other_control_bytes_as_u00xx(tmp_path, start_server):
    """Bytes below 32 without a short escape (ESC, FS...) are \\u00XX, as nginx's."""
    d = www(tmp_path)
    log = tmp_path / "a.log"
    s = start_server(d, conf=conf(tmp_path, f"server {{ access_log {log} j; }}",
                                  top="access_log off;\nlog_format j escape=json '$uri';"))
    get(s, "/%1B%1C%1F%0E")
    assert lines(log) == ["/\\u001B\\u001C\\u001F\\u000E"]


def test_escape_none_writes_an_empty_variable_as_nothing(tmp_path, start_server):
    """nginx writes "-" for a value that is not there with escape=default only."""
    d = www(tmp_path)
    log = tmp_path / "a.log"
    s = start_server(d, conf=conf(tmp_path, f"server {{ access_log {log} n; }}",
                                  top="access_log off;\nlog_format n escape=none "
                                      "'[$http_x_none]';"))
    get(s, "/")
    assert lines(log) == ["[]"]


def test_escape_none_writes_the_bytes_as_sent(tmp_path, start_server):
    d = www(tmp_path)
    log = tmp_path / "a.log"
    s = start_server(d, conf=conf(tmp_path, f"server {{ access_log {log} n; }}",
                                  top="access_log off;\nlog_format n escape=none '$http_x_a';"))
    get(s, "/", b'X-A: a"b\\c\r\n')
    assert lines(log) == ['a"b\\c']


def test_several_access_logs_in_a_location_each_get_the_line(tmp_path, start_server):
    d = www(tmp_path)
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    s = start_server(d, conf=conf(
        tmp_path, f"server {{ location /x/ {{ access_log {a} t; access_log {b} u; }} }}",
        top="access_log off;\nlog_format t 'one $uri';\nlog_format u 'two $uri';"))
    get(s, "/x/f.txt")
    assert lines(a) == ["one /x/f.txt"] and lines(b) == ["two /x/f.txt"]


def test_location_without_access_log_inherits_the_servers(tmp_path, start_server):
    d = www(tmp_path)
    a = tmp_path / "a.log"
    s = start_server(d, conf=conf(
        tmp_path, f"server {{ access_log {a} t; location /x/ {{ }} }}",
        top="access_log off;\nlog_format t '$uri';"))
    get(s, "/x/f.txt")
    assert lines(a) == ["/x/f.txt"]


def test_location_access_log_replaces_the_servers(tmp_path, start_server):
    d = www(tmp_path)
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    s = start_server(d, conf=conf(
        tmp_path, f"server {{ access_log {a} t; location /x/ {{ access_log {b} t; }} }}",
        top="access_log off;\nlog_format t '$uri';"))
    get(s, "/x/f.txt")
    get(s, "/")
    assert lines(b) == ["/x/f.txt"]
    # the location's request is not in the server's log; "/" is $uri "/index.html" after
    # the index's internal redirect, as nginx's
    assert lines(a) == ["/index.html"]


def test_access_log_off_in_a_location_writes_nothing(tmp_path, start_server):
    """Neither the server's log nor the top-level one gets the location's requests."""
    d = www(tmp_path)
    top, a = tmp_path / "top.log", tmp_path / "a.log"
    s = start_server(d, conf=conf(
        tmp_path, f"server {{ access_log {a} t; location /x/ {{ access_log off; }} }}\n"
        f"server {{ server_name two; location /x/ {{ access_log off; }} }}\n",
        top=f"access_log {top};\nlog_format t '$uri';"))
    get(s, "/x/f.txt")
    get(s, "/x/f.txt", b"Host: two\r\n")
    get(s, "/", b"Host: two\r\n")
    assert wait_until(lambda: top.exists() and "GET / " in top.read_text(), scaled(5))
    assert "/x/f.txt" not in top.read_text()
    assert not a.exists() or a.read_text() == ""  # written before the top-level flush


def test_server_access_log_replaces_the_top_level_log(tmp_path, start_server):
    d = www(tmp_path)
    top, a = tmp_path / "top.log", tmp_path / "a.log"
    s = start_server(d, conf=conf(
        tmp_path,
        f"server {{ server_name one; access_log {a} t; }}\nserver {{ server_name two; }}\n",
        top=f"access_log {top};\nlog_format t '$host $uri';"))
    get(s, "/")  # Host: t, so the first server, the default one
    c = s.connect()
    c.send(b"GET /x/f.txt HTTP/1.1\r\nHost: two\r\nConnection: close\r\n\r\n")
    c.read_response()
    c.close()
    assert lines(a) == ["t /index.html"]  # $uri after the index's internal redirect
    # the top-level log is flushed about once a second
    assert wait_until(lambda: top.exists() and "GET /x/f.txt" in top.read_text(), scaled(5))
    assert "GET / HTTP" not in top.read_text()


def test_if_condition_writes_only_when_not_empty_and_not_zero(tmp_path, start_server):
    d = www(tmp_path)
    a = tmp_path / "a.log"
    s = start_server(d, conf=conf(
        tmp_path, f"server {{ access_log {a} t if=$arg_log; }}",
        top="access_log off;\nlog_format t '$args';"))
    for q in ("log=0", "log=", "other=1", "log=yes", "log=1"):
        get(s, "/?" + q)
    assert lines(a, 2) == ["log=yes", "log=1"]


def buffered(tmp_path, start_server, options, threads=1):
    """A server whose one log, a.log, writes `$uri` with `options` (buffer=, flush=), on
    `threads` threads (one: one buffer, so what is in the file is foreseeable)."""
    d = www(tmp_path)
    a = tmp_path / "a.log"
    s = start_server(d, conf=conf(
        tmp_path, f"server {{ access_log {a} t {options}; }}",
        top=f"access_log off;\nthreads {threads};\nlog_format t '$uri';"))
    return s, a


def text_of(path):
    return path.read_text() if path.exists() else ""


def test_line_without_buffer_is_in_the_file_at_once(tmp_path, start_server):
    s, a = buffered(tmp_path, start_server, "")
    get(s, "/")
    assert wait_until(lambda: text_of(a) == "/index.html\n", 0.5)


def test_buffered_line_waits_for_flush_time(tmp_path, start_server):
    """buffer= keeps the line; flush=1s writes it about a second after it came, though
    the server has nothing else to do (nginx's timer; here the tick)."""
    s, a = buffered(tmp_path, start_server, "buffer=32k flush=1s")
    get(s, "/")
    sent = time.monotonic()
    time.sleep(0.6)
    assert text_of(a) == ""
    assert wait_until(lambda: text_of(a) == "/index.html\n", scaled(3))
    assert time.monotonic() - sent >= 0.9


def test_buffered_lines_go_when_the_next_would_overflow(tmp_path, start_server):
    """Lines of 4 bytes ("/xN\n") in a buffer of 10: the third does not fit, so the first
    two are written then, and the third waits."""
    s, a = buffered(tmp_path, start_server, "buffer=10")
    for i in range(1, 4):
        get(s, f"/x{i}")
    assert wait_until(lambda: text_of(a) == "/x1\n/x2\n", scaled(2))
    time.sleep(0.5)
    assert text_of(a) == "/x1\n/x2\n"


def test_buffered_lines_are_written_at_shutdown(tmp_path, start_server):
    s, a = buffered(tmp_path, start_server, "buffer=64k", threads=4)
    for i in range(20):
        get(s, f"/n{i}")
    time.sleep(0.3)
    assert text_of(a) == ""
    assert s.stop() == 0
    assert sorted(text_of(a).splitlines()) == sorted(f"/n{i}" for i in range(20))


def test_buffered_lines_are_written_at_reload(tmp_path, start_server):
    """SIGHUP lets the old generation go once its requests are done: its lines are
    written then, not kept (nor lost) until the buffer fills or the server stops."""
    s, a = buffered(tmp_path, start_server, "buffer=64k", threads=4)
    for i in range(20):
        get(s, f"/n{i}")
    time.sleep(0.3)
    assert text_of(a) == ""
    before = len(s.error_log())
    s.proc.send_signal(signal.SIGHUP)
    assert wait_until(lambda: "configuration reloaded" in s.error_log()[before:])
    assert wait_until(lambda: len(text_of(a).splitlines()) == 20, scaled(3))
    assert sorted(text_of(a).splitlines()) == sorted(f"/n{i}" for i in range(20))


def test_buffered_line_of_a_replaced_configuration_meets_flush_time(tmp_path, start_server):
    """After SIGHUP, an idle keep-alive connection still holds the old configuration (its
    next request takes the new one): the old configuration's buffered line is written
    within flush= all the same."""
    s, a = buffered(tmp_path, start_server, "buffer=32k flush=1s")
    c = s.connect()
    c.send(b"GET /old HTTP/1.1\r\nHost: t\r\n\r\n")
    assert c.read_response()[0] == 404
    before = len(s.error_log())
    s.proc.send_signal(signal.SIGHUP)
    assert wait_until(lambda: "configuration reloaded" in s.error_log()[before:])
    assert wait_until(lambda: text_of(a) == "/old\n", scaled(3))
    c.close()


def test_flush_without_buffer_and_conflicting_buffers_are_refused(tmp_path):
    """As nginx's -t: flush= needs buffer=, and two access_log of one file with different
    buffers are an error, with the file and line."""
    www(tmp_path)
    for body, words in (
            (f"server {{ access_log {tmp_path}/a.log combined flush=1s; }}",
             "no buffer is defined for access_log"),
            (f"server {{ access_log {tmp_path}/a.log combined buffer=4k;\n"
             f"location / {{ access_log {tmp_path}/a.log combined buffer=8k; }} }}",
             "already defined with conflicting parameters")):
        path = tmp_path / "t.conf"
        path.write_text(conf(tmp_path, body))
        r = subprocess.run([BIN, "-t", "-c", str(path)], capture_output=True, text=True,
                           timeout=30)
        assert r.returncode == 1 and words in r.stderr and f"{path}:" in r.stderr, r.stderr


def test_combined_format_is_the_top_level_logs_line(tmp_path, start_server):
    """A server's `access_log PATH` (combined) writes what the top-level log writes for the
    same request, the time aside."""
    d = www(tmp_path)
    top, a = tmp_path / "top.log", tmp_path / "a.log"
    s = start_server(d, conf=conf(
        tmp_path,
        f"server {{ server_name one; access_log {a}; }}\nserver {{ server_name two; }}\n",
        top=f"access_log {top};"))
    ua = b"User-Agent: t/1 \"q\"\r\nReferer: http://r/\r\n"
    for host in (b"one", b"two"):
        c = s.connect()
        c.send(b"GET /x/f.txt?a=1 HTTP/1.1\r\nHost: " + host + b"\r\n" + ua +
               b"Connection: close\r\n\r\n")
        c.read_response()
        c.close()
    ours = lines(a)[0]
    wait_until(lambda: top.exists() and top.read_text().count("\n") >= 1, scaled(5))
    theirs = top.read_text().splitlines()[0]
    no_time = re.compile(r"\[[^]]+\]")
    assert no_time.sub("[]", ours) == no_time.sub("[]", theirs)
    assert ours.endswith('"GET /x/f.txt?a=1 HTTP/1.1" 200 10 "http://r/" "t/1 \\x22q\\x22"')


FORMAT = ("log_format t '$remote_addr - $remote_user \"$request\" $status $body_bytes_sent "
          "\"$http_referer\" \"$http_user_agent\" $request_method $uri $args "
          "\"$http_x_a\" $host';\n"
          "log_format j escape=json '{\"r\":\"$request\",\"a\":\"$http_x_a\","
          "\"s\":$status}';\n")


def test_same_log_format_gives_nginxs_line(tmp_path, start_server):
    """The same log_format and access_log, read by nginx and by lfhttpd: the same lines for
    the same requests."""
    d = www(tmp_path)
    body = (f"    location / {{ access_log LOG/t.log t; access_log LOG/j.log j; }}\n")
    nginx_dir, ours_dir = tmp_path / "nginx_logs", tmp_path / "ours_logs"
    nginx_dir.mkdir()
    ours_dir.mkdir()
    theirs = Nginx(tmp_path / "nginx", d, FORMAT + "server {\n    listen 127.0.0.1:{port0};\n"
                   f"    root {d};\n" + body.replace("LOG", str(nginx_dir)) + "}\n", http=True)
    try:
        ours = start_server(d, conf=conf(tmp_path, "server {\n" +
                                         body.replace("LOG", str(ours_dir)) + "}\n",
                                         top="access_log off;\n" + FORMAT))
        requests = [b"GET /x/f.txt?a=%41 HTTP/1.1\r\nHost: Ex.Org\r\nReferer: http://r/\r\n"
                    b"User-Agent: u \"v\"\r\nX-A: tab\there\xc3\xa9 \\ \"q\"\r\n",
                    b"GET /missing HTTP/1.1\r\nHost: t\r\n",
                    b"HEAD /x/f.txt HTTP/1.1\r\nHost: t\r\n"]
        for port, host in ((theirs.port, theirs.host), (ours.port, ours.host)):
            for r in requests:
                with socket.create_connection((host, port), timeout=5) as c:
                    c.sendall(r + b"Connection: close\r\n\r\n")
                    while c.recv(65536):
                        pass
        for name in ("t.log", "j.log"):
            want = lines(nginx_dir / name, len(requests))
            got = lines(ours_dir / name, len(requests))
            assert len(want) == len(requests)
            for w, g in zip(want, got):
                if "/missing" in w:  # the bodies of error pages differ: the size aside
                    w, g = re.sub(r" 404 \d+ ", " 404 N ", w), re.sub(r" 404 \d+ ", " 404 N ", g)
                assert g == w
    finally:
        theirs.stop()


def test_top_level_access_log_with_a_format_is_nginxs(tmp_path, start_server):
    """`access_log PATH FORMAT` at the top level (nginx's http), twice: each log gets each
    request of a server without its own."""
    d = www(tmp_path)
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    s = start_server(d, conf=conf(tmp_path, "server { location /x/ { } }\n",
                                  top=f"log_format t 'T $uri';\naccess_log {a} t;\n"
                                  f"access_log {b};"))
    get(s, "/x/f.txt")
    assert lines(a) == ["T /x/f.txt"]
    assert lines(b)[0].endswith('"GET /x/f.txt HTTP/1.1" 200 10 "-" "-"')


def test_plain_top_level_access_log_is_the_servers_own_log(tmp_path, start_server):
    """One `access_log PATH combined` at the top level is the server's own buffered log,
    which access_log_format still shapes (JSON lines here)."""
    d = www(tmp_path)
    a = tmp_path / "a.log"
    s = start_server(d, conf=conf(tmp_path, "",
                                  top=f"access_log {a} combined;\naccess_log_format json;"))
    get(s, "/")
    assert wait_until(lambda: a.exists() and a.read_text().endswith("\n"), scaled(5))
    line = json.loads(a.read_text().splitlines()[0])
    assert line["request"] == "GET / HTTP/1.1" and line["status"] == 200


def test_access_log_off_with_another_in_the_same_block_is_refused(tmp_path):
    www(tmp_path)
    for text in (conf(tmp_path, "", top=f"access_log off;\naccess_log {tmp_path}/a.log;"),
                 conf(tmp_path, f"server {{ access_log off; access_log {tmp_path}/a.log; }}")):
        path = tmp_path / "t.conf"
        path.write_text(text)
        r = subprocess.run([BIN, "-t", "-c", str(path)], capture_output=True, text=True,
                           timeout=30)
        assert r.returncode == 1, r.stderr
        assert "access_log off with another access_log" in r.stderr


def test_proxied_answer_is_logged_with_the_upstreams_status(tmp_path, upstream, proxy):
    """A streamed answer is logged when it ends, by its location's access_log (nginx too:
    PROXY_UNDER_TEST=nginx)."""
    u = upstream()
    log = tmp_path / "p.log"
    p = proxy("log_format t '$request $status';\n"
              "upstream app { server 127.0.0.1:{up0}; }\n"
              "server {\n    listen 127.0.0.1:{port0};\n"
              f"    location / {{ proxy_pass http://app; access_log {log} t; }}\n}}\n", u)
    status, _, _, _ = request(p, "/x?status=503")
    assert status == 503
    assert lines(log) == ["GET /x?status=503 HTTP/1.1 503"]


def test_if_reading_a_map_of_status_sees_the_answers_status(tmp_path, start_server):
    """nginx's documented way of logging only errors: `map $status $loggable { ~^[23] 0;
    default 1; }` and `access_log ... if=$loggable`. The map, read at log time, sees the
    answer's status, as nginx's does: the 200 and the 301 are not logged, the 404 is."""
    d = www(tmp_path)
    top = ("map $status $loggable { ~^[23] 0; default 1; }\n"
           "log_format t '$uri $status';\n")
    body = ("    access_log LOG t if=$loggable;\n"
            "    location = /moved { return 301 /; }\n")
    nginx_log, ours_log = tmp_path / "nginx.log", tmp_path / "ours.log"
    theirs = Nginx(tmp_path / "nginx", d, top + "server {\n    listen 127.0.0.1:{port0};\n"
                   f"    root {d};\n" + body.replace("LOG", str(nginx_log)) + "}\n", http=True)
    try:
        ours = start_server(d, conf=conf(tmp_path, "server {\n" +
                                         body.replace("LOG", str(ours_log)) + "}\n",
                                         top="access_log off;\n" + top))
        for port, host in ((theirs.port, theirs.host), (ours.port, ours.host)):
            for path in (b"/", b"/moved", b"/missing", b"/x/f.txt"):
                with socket.create_connection((host, port), timeout=5) as c:
                    c.sendall(b"GET " + path + b" HTTP/1.1\r\nHost: t\r\n"
                              b"Connection: close\r\n\r\n")
                    while c.recv(65536):
                        pass
        assert lines(nginx_log) == ["/missing 404"]
        assert lines(ours_log) == ["/missing 404"]
    finally:
        theirs.stop()


def test_a_top_level_log_path_with_variables_writes_each_request_to_its_own_file(
        tmp_path, start_server):
    d = www(tmp_path)
    s = start_server(d, conf=conf(tmp_path, "", top=f"access_log {tmp_path}/top_$arg_name;"))
    get(s, "/index.html?name=a")
    get(s, "/x/f.txt?name=b")
    a, b = lines(tmp_path / "top_a"), lines(tmp_path / "top_b")
    assert len(a) == 1 and '"GET /index.html?name=a HTTP/1.1" 200' in a[0], a
    assert len(b) == 1 and '"GET /x/f.txt?name=b HTTP/1.1" 200' in b[0], b


def test_a_log_path_with_variables_writes_each_request_to_its_own_file(tmp_path,
                                                                        start_server):
    d = www(tmp_path)
    s = start_server(d, conf=conf(
        tmp_path, f"server {{ location / {{ access_log {tmp_path}/log_$arg_name t; }} }}\n",
        top="access_log off;\nlog_format t '$uri?$args';"))
    get(s, "/index.html?name=a")
    get(s, "/index.html?name=b")
    get(s, "/x/f.txt?name=a")
    assert lines(tmp_path / "log_a", 2) == ["/index.html?name=a", "/x/f.txt?name=a"]
    assert lines(tmp_path / "log_b") == ["/index.html?name=b"]


def test_a_log_path_value_that_climbs_with_dotdot_writes_nothing(tmp_path, start_server):
    d = www(tmp_path)
    (tmp_path / "logs").mkdir()
    s = start_server(d, conf=conf(
        tmp_path, f"server {{ location / {{ access_log {tmp_path}/logs/$arg_name t; }} }}\n",
        top="access_log off;\nlog_format t '$uri';"))
    assert get(s, "/index.html?name=../escaped") == 200
    assert get(s, "/index.html?name=kept") == 200
    assert lines(tmp_path / "logs" / "kept") == ["/index.html"]
    assert not (tmp_path / "escaped").exists()


def test_a_buffered_log_with_variables_in_its_path_is_refused_as_nginx(tmp_path):
    conf_path = tmp_path / "t.conf"
    conf_path.write_text("listen 127.0.0.1:0;\nroot /tmp;\n"
                         "server { location / { access_log /tmp/x_$host.log combined "
                         "buffer=16k; } }\n")
    r = subprocess.run([BIN, "-t", "-c", str(conf_path)], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 1 and f"{conf_path}:3:" in r.stderr and \
        "cannot have variables" in r.stderr, r.stderr
