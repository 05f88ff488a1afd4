"""Signals an operator sends: SIGUSR1 reopens the log files (logrotate), SIGHUP must not
stop the server, and children (CGI scripts) are reaped."""
import os
import signal
import time

from conftest import wait_until


def fetch(server, path):
    c = server.connect()
    try:
        c.send(f"GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".encode())
        return c.read_response()[0]
    finally:
        c.close()


def test_sigusr1_reopens_access_log_after_rename(start_server, docroot):
    """logrotate renames the file, then signals: lines before go to the old file, lines
    after to a new file of the original name."""
    (docroot / "a.txt").write_text("a")
    s = start_server(docroot)
    assert fetch(s, "/a.txt?before") == 200
    assert wait_until(lambda: "before" in s.access_log())
    os.rename(s.access_path, s.access_path + ".1")
    s.proc.send_signal(signal.SIGUSR1)
    assert wait_until(lambda: "log files reopened" in s.error_log())
    assert fetch(s, "/a.txt?after") == 200
    assert wait_until(lambda: "after" in s.access_log())
    old = open(s.access_path + ".1").read()
    assert "before" in old and "after" not in old
    assert "before" not in s.access_log()


def test_sighup_does_not_stop_the_server(start_server, docroot):
    (docroot / "a.txt").write_text("a")
    s = start_server(docroot)
    s.proc.send_signal(signal.SIGHUP)
    time.sleep(0.2)
    assert s.proc.poll() is None
    assert fetch(s, "/a.txt") == 200


def test_access_log_json_lines_are_valid_json_even_for_hostile_bytes(start_server, docroot):
    """access_log_format json: one JSON object a line; quotes, backslashes and non-ASCII
    bytes (obs-text) in the request line and User-Agent cannot break the line or the JSON
    (control bytes never get this far: the parser refuses them)."""
    import json
    (docroot / "a.txt").write_text("a")
    s = start_server(docroot, "access_log_format json;\n")
    c = s.connect()
    c.send(b'GET /a.txt?q="x"\\ HTTP/1.1\r\nHost: t\r\nUser-Agent: ev"il\xff\\\r\n'
           b"Referer: http://r.example/\r\nConnection: close\r\n\r\n")
    assert c.read_response()[0] == 200
    assert wait_until(lambda: s.access_log().count("\n") >= 1)
    lines = s.access_log().splitlines()
    assert len(lines) == 1
    rec = json.loads(lines[0])
    assert rec["request"] == 'GET /a.txt?q="x"\\ HTTP/1.1'
    assert rec["status"] == 200 and rec["bytes"] == 1
    assert rec["remote"] == "127.0.0.1"
    assert rec["user_agent"] == 'ev"il\xff\\'
    assert rec["referer"] == "http://r.example/"
