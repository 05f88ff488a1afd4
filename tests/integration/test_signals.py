"""Signals an operator sends and the logs they act on: SIGUSR1 reopens the log files
(logrotate), SIGHUP reloads the configuration, a second SIGTERM ends a graceful shutdown
at once, SIGQUIT shuts down as nginx's; `error_log FILE` and `access_log stderr` write where
they say."""
import os
import signal
import socket
import time

from conftest import past_buffers, scaled, sparse_file, wait_until


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


def test_sighup_reloads_the_configuration(start_server, docroot, tmp_path):
    """SIGHUP does not stop the server: it reads the file again, says so with the new
    generation's number, and serves what the new file says."""
    (docroot / "a.txt").write_text("a")
    other = tmp_path / "other"
    other.mkdir()
    (other / "a.txt").write_text("b")
    s = start_server(docroot)
    with open(s.conf_path) as f:
        text = f.read()
    with open(s.conf_path, "w") as f:
        f.write(text.replace(str(docroot), str(other)))
    s.proc.send_signal(signal.SIGHUP)
    assert wait_until(lambda: "configuration reloaded (generation 2)" in s.error_log()), \
        s.error_log()
    assert s.proc.poll() is None
    c = s.connect()
    c.send(b"GET /a.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    assert c.read_response()[:3:2] == (200, b"b")
    c.close()


def test_second_sigterm_ends_a_graceful_shutdown_at_once(start_server, docroot):
    """A graceful shutdown waits (here up to a minute) for a download in flight to a
    client that stopped reading; a second SIGTERM closes it at once and exits 0."""
    sparse_file(docroot / "big.bin", past_buffers(at_least=256 << 20))  # never all sent
    s = start_server(docroot, conf=(
        "listen 127.0.0.1:0;\n"
        f'root "{docroot}";\n'
        "threads 2;\n"
        "access_log off;\n"
        "error_log stderr debug;\n"
        "send_timeout 60s;\n"
        "shutdown_timeout 60s;\n"))
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((s.host, s.port))
    try:
        sock.sendall(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n")
        assert sock.recv(100).startswith(b"HTTP/1.1 200 ")  # the download is under way
        s.proc.send_signal(signal.SIGTERM)
        assert wait_until(lambda: "SIGTERM: shutting down" in s.error_log())
        time.sleep(0.5)
        assert s.proc.poll() is None, "the first SIGTERM did not wait for the download"
        t0 = time.monotonic()
        s.proc.send_signal(signal.SIGTERM)
        s.proc.wait(timeout=scaled(5))
        assert time.monotonic() - t0 < scaled(2)
        assert s.proc.returncode == 0, s.error_log()
        assert "second signal: closing 1 connections now" in s.error_log(), s.error_log()
    finally:
        sock.close()


def test_sigquit_shuts_down_gracefully_as_nginx_quit_does(start_server, docroot):
    """nginx's graceful shutdown signal (what `nginx -s quit` and nginx's own test suite
    send): the server stops as on SIGINT, exit 0, without dying of the signal."""
    (docroot / "f.txt").write_text("f")
    s = start_server(docroot)
    assert fetch(s, "/f.txt") == 200
    s.proc.send_signal(signal.SIGQUIT)
    s.proc.wait(timeout=scaled(10))
    assert s.proc.returncode == 0, s.error_log()
    assert "SIGQUIT: shutting down" in s.error_log()


def test_error_log_file_is_written_and_reopened_on_sigusr1(launch, docroot, tmp_path):
    """`error_log FILE`: messages go to the file, not to stderr; after logrotate renames
    it, SIGUSR1 makes a new file of the original name, and later messages go there."""
    log = tmp_path / "logs" / "error.log"
    log.parent.mkdir()
    conf = tmp_path / "file-log.conf"
    conf.write_text("listen 127.0.0.1:0;\n"
                    f'root "{docroot}";\n'
                    "threads 2;\n"
                    "access_log off;\n"
                    f'error_log "{log}" info;\n'
                    "shutdown_timeout 5s;\n")
    s = launch(["-c", str(conf)], cwd=tmp_path, log_path=log)
    assert "listening on 127.0.0.1:" in log.read_text()
    assert s.stderr() == ""
    os.rename(log, str(log) + ".1")
    s.proc.send_signal(signal.SIGUSR1)
    assert wait_until(lambda: log.exists() and "log files reopened" in log.read_text()), \
        open(str(log) + ".1").read()
    s.proc.send_signal(signal.SIGHUP)  # any later message: here a reload's
    assert wait_until(lambda: "configuration reloaded (generation 2)" in log.read_text())
    old = open(str(log) + ".1").read()
    assert "listening on" in old and "reloaded" not in old
    assert "listening on" not in log.read_text()
    assert s.stderr() == ""


def test_access_log_stderr_writes_combined_lines_to_stderr(launch, docroot, tmp_path):
    """`access_log stderr`: the request's line arrives on stderr (the error log is in a
    file here, so stderr holds access lines only), nothing on stdout."""
    (docroot / "a.txt").write_text("a")
    log = tmp_path / "error.log"
    conf = tmp_path / "stderr-access.conf"
    conf.write_text("listen 127.0.0.1:0;\n"
                    f'root "{docroot}";\n'
                    "threads 2;\n"
                    "access_log stderr;\n"
                    f'error_log "{log}" info;\n'
                    "shutdown_timeout 5s;\n")
    s = launch(["-c", str(conf)], cwd=tmp_path, log_path=log)
    assert fetch(s, "/a.txt?to-stderr") == 200
    assert wait_until(lambda: "to-stderr" in s.stderr()), s.stderr()
    lines = s.stderr().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("127.0.0.1 - - [")
    assert '"GET /a.txt?to-stderr HTTP/1.1" 200 1 ' in lines[0], lines[0]
    assert s.stdout() == ""
    assert "to-stderr" not in log.read_text()


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
