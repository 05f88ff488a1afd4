"""An application or upstream that fails at once, request after request.

When an application's Unix socket is gone, connect() fails at once, so the answer (502)
is over before the request's source has waited for anything, and the connection goes on
to the client's next request from there. A client that keeps the connection busy
(pipelined requests, or a fast keep-alive loop) must get every answer from a server that
stays up: each answer must not nest the next one deeper into the thread's stack."""

import re
import socket

import pytest

from conftest import check_clean_exit

PIPELINED = 3000


def conf(docroot, locations):
    return ("threads 2;\nerror_log stderr info;\nshutdown_timeout 5s;\n"
            f"server {{\n    listen 127.0.0.1:0;\n    root {docroot};\n{locations}\n}}\n")


def pipelined_statuses(server, path, count):
    """Send `count` keep-alive GETs of `path` in one write; the statuses, in order."""
    s = socket.create_connection((server.host, server.port), timeout=30)
    try:
        req = (f"GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").encode()
        s.sendall(req * count)
        s.shutdown(socket.SHUT_WR)
        data = b""
        while True:
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            data += chunk
    finally:
        s.close()
    return [int(m) for m in re.findall(rb"HTTP/1\.1 (\d{3}) [^\r\n]*\r\n", data)]


@pytest.fixture
def gone(tmp_path):
    """The path of a Unix socket that nobody listens on."""
    return str(tmp_path / "gone.sock")


@pytest.mark.parametrize("pass_line", [
    "fastcgi_pass unix:{sock};",
    "uwsgi_pass unix:{sock};",
    "scgi_pass unix:{sock};",
    "proxy_pass http://unix:{sock}:;",
])
def test_thousands_of_pipelined_requests_to_a_socket_that_is_gone_each_get_502(
        start_server, docroot, gone, pass_line):
    server = start_server(docroot, conf=conf(docroot, (
        f"    location / {{ {pass_line.format(sock=gone)} }}")))
    statuses = pipelined_statuses(server, "/app", PIPELINED)
    assert statuses == [502] * PIPELINED
    assert server.proc.poll() is None  # still up
    check_clean_exit(server)


def test_the_server_still_answers_other_clients_after_such_a_burst(start_server, docroot,
                                                                  gone):
    (docroot / "here.txt").write_text("here\n")
    server = start_server(docroot, conf=conf(docroot, (
        f"    location /app {{ fastcgi_pass unix:{gone}; }}\n    location / {{ }}")))
    assert pipelined_statuses(server, "/app", PIPELINED) == [502] * PIPELINED
    assert pipelined_statuses(server, "/here.txt", 3) == [200] * 3
