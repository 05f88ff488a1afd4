"""Health and draining: `handler /healthz health;` answers 200 while the server serves; with
`shutdown_delay T;` a SIGTERM first keeps everything served for T while the health handler
answers 503 and no connection is kept alive (so a load balancer or a Kubernetes readiness
probe sends new connections elsewhere), then the graceful shutdown runs. Without the
delay (the default) SIGTERM shuts down at once, as before."""
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time

import pytest

from conftest import past_buffers, scaled, sparse_file, wait_closed, wait_until

DRAINING = "shutdown_delay: draining for"


def conf(docroot, extra="", shutdown_timeout="5s"):
    return ("listen 127.0.0.1:0;\n"
            f'root "{docroot}";\n'
            "threads 2;\n"
            "access_log off;\n"
            "error_log stderr debug;\n"
            f"shutdown_timeout {shutdown_timeout};\n"
            "handler /healthz health;\n" + extra)


def get(server, path, close=True):
    """One request on a new connection: (status, headers, body)."""
    c = server.connect()
    try:
        conn = "Connection: close\r\n" if close else ""
        c.send(f"GET {path} HTTP/1.1\r\nHost: t\r\n{conn}\r\n".encode())
        return c.read_response()[:3]
    finally:
        c.close()


def sigterm_and_wait_for_draining(s):
    s.proc.send_signal(signal.SIGTERM)
    assert wait_until(lambda: DRAINING in s.error_log(), timeout=scaled(5)), s.error_log()


def test_health_answers_200_ok_while_serving(start_server, docroot):
    """200, "ok\\n" as text/plain, never cached (a cache must not answer a probe)."""
    s = start_server(docroot, conf=conf(docroot))
    status, headers, body = get(s, "/healthz")
    assert (status, body) == (200, b"ok\n")
    assert headers["content-type"].startswith("text/plain")
    assert headers["cache-control"] == "no-store"


def test_health_answers_503_during_the_delay_while_other_paths_answer_200(start_server,
                                                                         docroot):
    """In the delay after SIGTERM the server still accepts new connections and serves
    them; only the health handler says it is going away."""
    (docroot / "a.txt").write_text("a")
    s = start_server(docroot, conf=conf(docroot, "shutdown_delay 30s;\n"))
    sigterm_and_wait_for_draining(s)
    status, headers, body = get(s, "/healthz")
    assert (status, body) == (503, b"draining\n")
    assert headers["cache-control"] == "no-store"
    assert get(s, "/a.txt")[::2] == (200, b"a")
    assert s.proc.poll() is None


def test_responses_in_the_delay_close_keep_alive_connections(start_server, docroot,
                                                             connect):
    """A keep-alive client gets its answer with `Connection: close`, and the connection
    closes after it: its next request opens a new connection, which the load balancer
    sends to another copy."""
    (docroot / "a.txt").write_text("a")
    s = start_server(docroot, conf=conf(docroot, "shutdown_delay 30s;\n"))
    c = connect(s)
    c.send(b"GET /a.txt HTTP/1.1\r\nHost: t\r\n\r\n")
    status, headers, _, _ = c.read_response()
    assert status == 200 and headers.get("connection") != "close"
    sigterm_and_wait_for_draining(s)
    c.send(b"GET /a.txt HTTP/1.1\r\nHost: t\r\n\r\n")
    status, headers, _, _ = c.read_response()
    assert status == 200
    assert headers.get("connection") == "close"
    assert c.is_closed(timeout=scaled(2))


def test_server_exits_0_after_the_delay_and_the_graceful_shutdown(start_server, docroot):
    """The delay runs to its end, then the graceful shutdown; each phase is logged."""
    s = start_server(docroot, conf=conf(docroot, "shutdown_delay 1s;\n"))
    t0 = time.monotonic()
    sigterm_and_wait_for_draining(s)
    time.sleep(0.5)
    assert s.proc.poll() is None, "the server did not wait for the delay"
    s.proc.wait(timeout=scaled(10))
    assert time.monotonic() - t0 >= 1.0
    assert s.proc.returncode == 0, s.error_log()
    log = s.error_log()
    phases = ["SIGTERM: shutting down", DRAINING, "shutdown delay over", "[info] exit\n"]
    at = [log.find(p) for p in phases]
    assert -1 not in at and at == sorted(at), log


def test_second_sigterm_ends_the_delay_at_once(start_server, docroot):
    """An operator who does not want to wait: the second SIGTERM starts the graceful
    shutdown at once (an idle server then exits 0 at once)."""
    s = start_server(docroot, conf=conf(docroot, "shutdown_delay 60s;\n"))
    sigterm_and_wait_for_draining(s)
    t0 = time.monotonic()
    s.proc.send_signal(signal.SIGTERM)
    s.proc.wait(timeout=scaled(5))
    assert time.monotonic() - t0 < scaled(2)
    assert s.proc.returncode == 0, s.error_log()
    assert "SIGTERM: ending the shutdown delay early" in s.error_log()


def test_signal_after_the_delay_closes_what_is_left_at_once(start_server, docroot):
    """Once the delay is over the graceful shutdown is today's: it waits (here up to a
    minute) for a download to a client that stopped reading, and the next SIGTERM closes it
    at once."""
    sparse_file(docroot / "big.bin", past_buffers(at_least=256 << 20))  # never all sent
    s = start_server(docroot, conf=conf(docroot, "shutdown_delay 1s;\nsend_timeout 60s;\n",
                                        shutdown_timeout="60s"))
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((s.host, s.port))
    try:
        sock.sendall(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n")
        assert sock.recv(100).startswith(b"HTTP/1.1 200 ")  # the download is under way
        sigterm_and_wait_for_draining(s)
        assert wait_until(lambda: "shutdown delay over" in s.error_log(), timeout=scaled(5))
        time.sleep(0.5)
        assert s.proc.poll() is None, "the shutdown did not wait for the download"
        t0 = time.monotonic()
        s.proc.send_signal(signal.SIGTERM)
        s.proc.wait(timeout=scaled(5))
        assert time.monotonic() - t0 < scaled(2)
        assert s.proc.returncode == 0, s.error_log()
        assert "second signal: closing 1 connections now" in s.error_log(), s.error_log()
    finally:
        sock.close()


def test_third_sigterm_in_the_delay_closes_what_is_left_at_once(start_server, docroot):
    """The second SIGTERM ends the delay and the graceful shutdown waits (here up to a
    minute) for a download to a client that stopped reading; the third closes it at once,
    as the second does without a delay."""
    with open(docroot / "big.bin", "wb") as f:
        f.truncate(256 << 20)  # sparse: costs no disk
    s = start_server(docroot, conf=conf(docroot, "shutdown_delay 60s;\nsend_timeout 60s;\n",
                                        shutdown_timeout="60s"))
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((s.host, s.port))
    try:
        sock.sendall(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n")
        assert sock.recv(100).startswith(b"HTTP/1.1 200 ")  # the download is under way
        sigterm_and_wait_for_draining(s)
        s.proc.send_signal(signal.SIGTERM)
        assert wait_until(lambda: "ending the shutdown delay early" in s.error_log(),
                          timeout=scaled(5)), s.error_log()
        time.sleep(0.5)
        assert s.proc.poll() is None, "the shutdown did not wait for the download"
        s.proc.send_signal(signal.SIGTERM)
        s.proc.wait(timeout=scaled(5))
        assert s.proc.returncode == 0, s.error_log()
        assert "second signal: closing 1 connections now" in s.error_log(), s.error_log()
    finally:
        sock.close()


def test_sigusr1_in_the_delay_reopens_the_logs(start_server, docroot, tmp_path):
    """logrotate may run while a copy drains: lines before the signal stay in the renamed
    file, lines after go to a new file of the original name."""
    (docroot / "a.txt").write_text("a")
    log = tmp_path / "access.log"
    s = start_server(docroot, conf=conf(docroot, "shutdown_delay 30s;\n").replace(
        "access_log off;", f'access_log "{log}";'))
    assert get(s, "/a.txt?before")[0] == 200
    assert wait_until(lambda: log.exists() and "before" in log.read_text())
    sigterm_and_wait_for_draining(s)
    os.rename(log, str(log) + ".1")
    s.proc.send_signal(signal.SIGUSR1)
    assert wait_until(lambda: "log files reopened" in s.error_log(), timeout=scaled(5)), \
        s.error_log()
    assert get(s, "/a.txt?after")[0] == 200
    assert wait_until(lambda: log.exists() and "after" in log.read_text())
    assert "after" not in open(str(log) + ".1").read()


def test_idle_keepalive_connection_is_closed_when_the_delay_ends(start_server, docroot,
                                                                connect):
    """A keep-alive connection that sends nothing in the delay stays open through it (the
    server still serves), then the graceful shutdown closes it, without waiting for its
    keepalive_timeout or the shutdown_timeout."""
    (docroot / "a.txt").write_text("a")
    s = start_server(docroot, conf=conf(docroot, "shutdown_delay 1s;\nkeepalive_timeout 60s;\n",
                                        shutdown_timeout="60s"))
    c = connect(s)
    c.send(b"GET /a.txt HTTP/1.1\r\nHost: t\r\n\r\n")
    assert c.read_response()[0] == 200
    sigterm_and_wait_for_draining(s)
    assert wait_closed(c, scaled(10)) is not None, "the idle connection was kept open"
    assert "shutdown delay over" in s.error_log(), "closed before the delay was over"
    s.proc.wait(timeout=scaled(10))
    assert s.proc.returncode == 0, s.error_log()


def test_sigint_shuts_down_without_the_delay(start_server, docroot):
    """SIGINT comes from a terminal (Ctrl-C): nobody there waits for a load balancer."""
    s = start_server(docroot, conf=conf(docroot, "shutdown_delay 60s;\n"))
    t0 = time.monotonic()
    s.proc.send_signal(signal.SIGINT)
    s.proc.wait(timeout=scaled(5))
    assert time.monotonic() - t0 < scaled(2)
    assert s.proc.returncode == 0, s.error_log()
    assert DRAINING not in s.error_log()


def test_sighup_in_the_delay_reloads_and_the_server_keeps_draining(start_server, docroot,
                                                                   tmp_path):
    """The server still serves in the delay, so a reload still works; the health handler
    goes on answering 503."""
    (docroot / "a.txt").write_text("a")
    other = tmp_path / "other"
    other.mkdir()
    (other / "a.txt").write_text("b")
    s = start_server(docroot, conf=conf(docroot, "shutdown_delay 30s;\n"))
    sigterm_and_wait_for_draining(s)
    with open(s.conf_path, "w") as f:
        f.write(conf(other, "shutdown_delay 30s;\n"))
    s.proc.send_signal(signal.SIGHUP)
    assert wait_until(lambda: "configuration reloaded (generation 2)" in s.error_log()), \
        s.error_log()
    assert get(s, "/a.txt")[::2] == (200, b"b")
    assert get(s, "/healthz")[0] == 503


def test_without_shutdown_delay_sigterm_stops_at_once(start_server, docroot):
    """The default (shutdown_delay 0): no draining phase, the graceful shutdown starts at
    once, as before the directive existed."""
    s = start_server(docroot, conf=conf(docroot))
    assert get(s, "/healthz")[0] == 200
    t0 = time.monotonic()
    s.proc.send_signal(signal.SIGTERM)
    s.proc.wait(timeout=scaled(5))
    assert time.monotonic() - t0 < scaled(1)
    assert s.proc.returncode == 0, s.error_log()
    assert DRAINING not in s.error_log()


# --- the rolling update, as a load balancer sees it -----------------------------------------

def health_status(s):
    """The health handler's status, or None when the server does not answer at all."""
    try:
        return get(s, "/healthz")[0]
    except OSError:
        return None


@pytest.mark.skipif(not shutil.which("wrk"), reason="wrk is not installed")
@pytest.mark.parametrize("keep_alive", [True, False], ids=["keep-alive", "connection-close"])
def test_load_from_wrk_loses_no_request_until_the_health_check_fails(start_server, docroot,
                                                                     keep_alive):
    """wrk keeps 50 connections busy; the server gets SIGTERM with `shutdown_delay 2s` (3
    times that under the sanitizers, which slow the server down, not the probe); a thread
    polls /healthz as a load balancer would, and wrk is stopped one second after the check
    fails (a load balancer's probe period, well inside the delay). Until then wrk must see
    no socket error and no answer other than 2xx."""
    (docroot / "index.html").write_text("x" * 100)
    s = start_server(docroot, conf=conf(docroot, f"shutdown_delay {int(scaled(2))}s;\n"))
    cmd = ["wrk", "-t2", "-c50", "-d60s", s.url + "/index.html"]
    if not keep_alive:
        cmd[1:1] = ["-H", "Connection: close"]
    wrk = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen = {}

    def poll():
        while wrk.poll() is None:
            status = health_status(s)
            if status != 200:
                seen["status"] = status
                time.sleep(1.0)
                wrk.send_signal(signal.SIGINT)  # wrk prints its report and exits
                return
            time.sleep(0.05)

    poller = threading.Thread(target=poll)
    try:
        poller.start()
        time.sleep(1.0)  # wrk is under way
        assert wrk.poll() is None
        s.proc.send_signal(signal.SIGTERM)
        report = wrk.communicate(timeout=scaled(30))[0]
    finally:
        if wrk.poll() is None:
            wrk.kill()
            wrk.wait()
        poller.join()
    requests = int(re.search(r"(\d+) requests in", report).group(1))
    assert requests > 100, report
    assert "Socket errors" not in report, report
    assert "Non-2xx" not in report, report
    assert seen.get("status") == 503, (seen, s.error_log())  # it failed by saying so
    assert s.proc.wait(timeout=scaled(10)) == 0, s.error_log()
