"""uwsgi_pass and scgi_pass against a real uWSGI running a small WSGI application
(tests/integration/wsgi/app.py) on a unix socket, with nginx's uwsgi_params and
scgi_params; where nginx is the reference, the same configuration runs on nginx against
the same application and the answers (status, fields, body, the parameters the
application saw) are compared. Answers no application server would write (a malformed
head, one that never ends, a field with a CR inside) come from a raw socket peer."""
import hashlib
import http.client
import json
import os
import socket
import subprocess
import threading

import pytest

from conftest import BIN, check_clean_exit, scaled
from uwsgi_harness import Uwsgi, lfhttpd, nginx

PROTOCOLS = ["uwsgi", "scgi"]

LOCATION = """
    location / {{
        {p}_pass unix:{sock};
        include {p}_params;
{extra}
    }}
"""


def request(server, method, path, body=None, headers=None):
    conn = http.client.HTTPConnection(server.host, server.port, timeout=scaled(20))
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, r.reason, r.getheaders(), r.read()
    finally:
        conn.close()


def fields(headers, *names):
    return {n: [v for k, v in headers if k.lower() == n.lower()] for n in names}


@pytest.fixture(params=PROTOCOLS)
def app(request, tmp_path):
    """uWSGI speaking the parametrized protocol; its name is app.protocol."""
    u = Uwsgi(tmp_path / "uwsgi", request.param)
    u.protocol = request.param
    yield u
    u.stop()


@pytest.fixture
def start_app(tmp_path):
    """Starts uWSGI on a protocol; each one is stopped at the end, even on failure."""
    started = []

    def start(protocol):
        u = Uwsgi(tmp_path / f"uwsgi{len(started)}", protocol)
        started.append(u)
        return u
    yield start
    for u in started:
        u.stop()


@pytest.fixture
def pair(tmp_path, app):
    """lfhttpd and nginx on the same location (extra lines inside it), the same app."""
    servers = []

    def start(extra=""):
        root = tmp_path / "www"
        os.makedirs(root, exist_ok=True)
        text = LOCATION.format(p=app.protocol, sock=app.sock, extra=extra)
        lf = lfhttpd(tmp_path / "lf", root, text)
        servers.append(lf)
        ng = nginx(tmp_path / "ng", root, text)
        servers.append(ng)
        return lf, ng
    yield start
    for s in servers:
        check_clean_exit(s) if hasattr(s, "error_log") else s.stop()


# Parameters that differ between two servers on two ports by nature.
OWN = {"SERVER_PORT", "REMOTE_PORT"}


@pytest.mark.parametrize("method,path,body,headers", [
    ("GET", "/env", None, {}),
    ("GET", "/env?a=1&b=%20x", None, {"X-Custom-Field": "v1", "Accept": "*/*"}),
    ("POST", "/env", b"k=v&x=y", {"Content-Type": "application/x-www-form-urlencoded"}),
    ("PUT", "/env/deeper/path?q", b"x" * 5000, {"Content-Type": "text/plain"}),
    ("GET", "/env", None, {"Cookie": "a=1; b=2", "Accept-Language": "fr"}),
], ids=["get", "query-and-fields", "post-form", "put-5000-deeper-path", "cookie"])
def test_parameters_the_application_sees_are_nginx_s(pair, method, path, body, headers):
    lf, ng = pair()
    envs = []
    for s in (lf, ng):
        status, _, _, data = request(s, method, path, body, headers)
        assert status == 200, data
        envs.append({k: v for k, v in json.loads(data).items() if k not in OWN})
    assert envs[0] == envs[1]


def test_scgi_content_length_is_sent_even_without_a_body(tmp_path, start_app):
    u = start_app("scgi")
    root = tmp_path / "www"
    os.makedirs(root)
    s = lfhttpd(tmp_path / "lf", root, LOCATION.format(p="scgi", sock=u.sock, extra=""))
    try:
        status, _, _, data = request(s, "GET", "/env")
        env = json.loads(data)
        assert status == 200 and env["CONTENT_LENGTH"] == "0" and env["SCGI"] == "1"
    finally:
        check_clean_exit(s)


@pytest.mark.parametrize("size", [0, 1, 70000, 1 << 20])
def test_post_body_comes_back_as_sent(pair, size):
    lf, ng = pair()
    body = bytes((i * 13 + 5) % 256 for i in range(size))
    for s in (lf, ng):
        status, _, headers, data = request(s, "POST", "/echo", body,
                                           {"Content-Type": "application/octet-stream"})
        assert status == 200
        assert hashlib.sha256(data).hexdigest() == hashlib.sha256(body).hexdigest()


@pytest.mark.parametrize("query", [
    "s=201%20Created&h=X-A:one&h=X-B:two&b=made",
    "s=404%20Gone%20Away&h=Content-Type:text/plain&b=no",
    "s=302%20Found&h=Location:/elsewhere",
    "s=418%20I%27m%20a%20teapot&h=X-A:tea",
    "s=204%20No%20Content",
    "s=200%20OK&h=X-Accel-Expires:60&h=X-Accel-Buffering:no&b=x",
    "s=201%20Made&h=Status:404%20No&h=X-A:1&b=x",
])
def test_status_and_fields_the_application_sets_are_relayed_as_nginx_s(pair, query):
    lf, ng = pair()
    answers = []
    for s in (lf, ng):
        status, reason, headers, data = request(s, "GET", "/status?" + query)
        # (nginx's uwsgi module relays an application's Status field besides using it;
        # lfhttpd never relays one, whatever the protocol)
        assert s is ng or fields(headers, "Status") == {"Status": []}
        answers.append((status, reason, fields(headers, "X-A", "X-B", "Location",
                                               "Content-Type", "X-Accel-Expires",
                                               "X-Accel-Buffering"), data))
    assert answers[0] == answers[1]


@pytest.mark.parametrize("length", ["0", "1"])
def test_large_answer_is_whole(pair, length):
    lf, ng = pair()
    n = 3 * 1024 * 1024 + 17
    digests = []
    for s in (lf, ng):
        status, _, _, data = request(s, "GET", f"/large?n={n}&length={length}")
        assert status == 200 and len(data) == n
        digests.append(hashlib.sha256(data).hexdigest())
    assert digests[0] == digests[1]


def test_head_request_gets_no_body(pair):
    lf, ng = pair()
    for s in (lf, ng):
        status, _, _, data = request(s, "HEAD", "/status?s=200%20OK&b=hidden")
        assert status == 200 and data == b""


def test_hide_header_drops_the_field_and_pass_header_passes_an_accel_one(pair, app):
    lf, ng = pair(f"        {app.protocol}_hide_header X-A;\n"
                  f"        {app.protocol}_pass_header X-Accel-Buffering;\n")
    for s in (lf, ng):
        _, _, headers, _ = request(s, "GET", "/status?h=X-A:1&h=X-B:2&h=X-Accel-Buffering:no")
        assert fields(headers, "X-A", "X-B", "X-Accel-Buffering") == {
            "X-A": [], "X-B": ["2"], "X-Accel-Buffering": ["no"]}


def test_param_lines_replace_the_params_file_s_and_if_not_empty_skips_empty(pair, app):
    lf, ng = pair(f"        {app.protocol}_param MINE mine;\n"
                  f"        {app.protocol}_param REQUEST_URI $request_uri;\n"
                  f"        {app.protocol}_param EMPTY $arg_none if_not_empty;\n")
    envs = []
    for s in (lf, ng):
        _, _, _, data = request(s, "GET", "/env")
        envs.append({k: v for k, v in json.loads(data).items() if k not in OWN})
    assert envs[0] == envs[1]
    assert envs[0]["MINE"] == "mine" and "EMPTY" not in envs[0]


def test_intercept_errors_answers_with_the_error_page(pair, app, tmp_path):
    root = tmp_path / "www"
    os.makedirs(root, exist_ok=True)
    (root / "oops.html").write_text("our page\n")
    lf, ng = pair(f"        {app.protocol}_intercept_errors on;\n"
                  "        error_page 404 /oops.html;\n"
                  "    }\n    location = /oops.html {\n")
    for s in (lf, ng):
        status, _, _, data = request(s, "GET", "/status?s=404%20No&b=theirs")
        assert (status, data) == (404, b"our page\n")


def test_application_gone_is_502(tmp_path, app):
    sock = app.sock
    app.stop()
    os.unlink(sock)
    root = tmp_path / "www"
    os.makedirs(root)
    s = lfhttpd(tmp_path / "lf", root, LOCATION.format(p=app.protocol, sock=sock, extra=""))
    try:
        status, _, _, _ = request(s, "GET", "/env")
        assert status == 502
    finally:
        check_clean_exit(s)


@pytest.mark.parametrize("pfx", ["uwsgi://", ""])
def test_uwsgi_pass_takes_the_uwsgi_scheme(tmp_path, start_app, pfx):
    u = start_app("uwsgi")
    root = tmp_path / "www"
    os.makedirs(root)
    text = LOCATION.format(p="uwsgi", sock=u.sock, extra="").replace("unix:", pfx + "unix:")
    s = lfhttpd(tmp_path / "lf", root, text)
    try:
        assert request(s, "GET", "/env")[0] == 200
    finally:
        check_clean_exit(s)


def test_uwsgi_modifiers_go_in_the_packet_s_header(tmp_path, raw_peer):
    """A raw peer reads the packet: modifier1, the size (little-endian), modifier2."""
    peer = raw_peer(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nok")
    root = tmp_path / "www"
    os.makedirs(root)
    s = lfhttpd(tmp_path / "lf", root, LOCATION.format(
        p="uwsgi", sock=peer.path,
        extra="        uwsgi_modifier1 5;\n        uwsgi_modifier2 9;\n"))
    try:
        assert request(s, "POST", "/x", b"BODY")[3] == b"ok"
        got = peer.received[0]
        size = got[1] | got[2] << 8
        assert (got[0], got[3]) == (5, 9) and len(got) == 4 + size + 4
        assert got.endswith(b"BODY")
    finally:
        check_clean_exit(s)


# --- answers no application server writes: a raw peer on the socket ---------------------

class RawPeer:
    """A unix socket that reads a request (until a pause) and writes `answer`, then closes
    (or, with hold=True, keeps the connection open); what it read is in .received."""

    def __init__(self, tmp_path, answer, hold=False):
        self.path = os.path.join(str(tmp_path), "raw.sock")
        self.answer, self.hold, self.received = answer, hold, []
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(self.path)
        self.sock.listen(8)
        self.held = []
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            c.settimeout(0.3)
            data = b""
            try:
                while True:
                    chunk = c.recv(65536)
                    if not chunk:
                        break
                    data += chunk
            except socket.timeout:
                pass
            self.received.append(data)
            c.sendall(self.answer)
            if self.hold:
                self.held.append(c)
            else:
                c.close()

    def stop(self):
        self.sock.close()
        for c in self.held:
            c.close()


@pytest.fixture
def raw_peer(tmp_path):
    """Starts a RawPeer; stopped at the end, even on failure."""
    peers = []

    def start(answer, hold=False):
        peers.append(RawPeer(tmp_path, answer, hold))
        return peers[-1]
    yield start
    for p in peers:
        p.stop()


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("answer", [
    b"HTTP/1.1 200 OK\r\nX-A: a\rSet-Cookie: evil=1\r\n\r\nbody",   # CR inside a field
    b"Status: 200 OK\r\nX-A: a\rSet-Cookie: evil=1\r\n\r\nbody",     # the same, CGI's
    b"HTTP/1.1 2x0 OK\r\nContent-Type: text/plain\r\n\r\nbody",      # a bad status line
    b"no colon here\r\n\r\nbody",                                    # not a field
    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n",              # ends before its end
    b"",                                                             # nothing at all
], ids=["cr-in-field", "cr-in-cgi-field", "bad-status-line", "no-colon", "cut-head", "empty"])
def test_malformed_answer_head_is_502(tmp_path, raw_peer, protocol, answer):
    peer = raw_peer(answer)
    root = tmp_path / "www"
    os.makedirs(root)
    s = lfhttpd(tmp_path / "lf", root, LOCATION.format(p=protocol, sock=peer.path, extra=""))
    try:
        status, _, headers, _ = request(s, "GET", "/x")
        assert status == 502
        assert fields(headers, "Set-Cookie") == {"Set-Cookie": []}
    finally:
        check_clean_exit(s)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_head_that_never_ends_is_502(tmp_path, raw_peer, protocol):
    peer = raw_peer(b"HTTP/1.1 200 OK\r\n" + b"X-Long: " + b"a" * 20000, hold=True)
    root = tmp_path / "www"
    os.makedirs(root)
    s = lfhttpd(tmp_path / "lf", root, LOCATION.format(p=protocol, sock=peer.path, extra=""))
    try:
        assert request(s, "GET", "/x")[0] == 502
    finally:
        check_clean_exit(s)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_no_head_within_read_timeout_is_504(tmp_path, raw_peer, protocol):
    peer = raw_peer(b"HTTP/1.1 200 OK\r\n", hold=True)
    root = tmp_path / "www"
    os.makedirs(root)
    s = lfhttpd(tmp_path / "lf", root, LOCATION.format(
        p=protocol, sock=peer.path, extra=f"        {protocol}_read_timeout 1s;\n"))
    try:
        assert request(s, "GET", "/x")[0] == 504
    finally:
        check_clean_exit(s)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_answer_with_content_length_ends_without_waiting_for_the_close(tmp_path, raw_peer, protocol):
    peer = raw_peer(b"Status: 200 OK\r\nContent-Length: 3\r\n\r\nabc", hold=True)
    root = tmp_path / "www"
    os.makedirs(root)
    s = lfhttpd(tmp_path / "lf", root, LOCATION.format(
        p=protocol, sock=peer.path, extra=f"        {protocol}_read_timeout 30s;\n"))
    try:
        # the next request on the client's connection is answered at once: the first
        # ended with its third byte, not with the application's close 30 s later
        conn = http.client.HTTPConnection(s.host, s.port, timeout=scaled(5))
        for _ in range(2):
            conn.request("GET", "/x")
            r = conn.getresponse()
            assert (r.status, r.read()) == (200, b"abc")
        conn.close()
    finally:
        check_clean_exit(s)


@pytest.mark.parametrize("directive,error", [
    ("uwsgi_pass http://127.0.0.1:1;", "not a URL"),
    ("uwsgi_pass $no_such_thing;", 'unknown "no_such_thing" variable'),
    ("uwsgi_modifier1 256;", "uwsgi_modifier1"),
    ("scgi_param A b c;", "if_not_empty"),
    ("scgi_pass uwsgi://127.0.0.1:1;", "not a URL"),
])
def test_bad_directive_is_named_with_its_line(tmp_path, directive, error):
    conf = tmp_path / "lfhttpd.conf"
    conf.write_text(f"server {{\n  listen 127.0.0.1:0;\n  location / {{\n    {directive}\n"
                    "  }\n}\n")
    r = subprocess.run([BIN, "-t", "-c", str(conf)], capture_output=True, text=True,
                       timeout=scaled(10))
    assert r.returncode != 0
    assert f"{conf}:4" in r.stderr and error in r.stderr, r.stderr


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_upstream_block_s_dead_server_is_passed_over_for_the_next(tmp_path, start_app,
                                                                 protocol):
    u = start_app(protocol)
    root = tmp_path / "www"
    os.makedirs(root)
    dead = os.path.join(str(tmp_path), "dead.sock")
    top = f"upstream app {{\n    server unix:{dead};\n    server unix:{u.sock};\n}}\n"
    text = LOCATION.format(p=protocol, sock="", extra="").replace("unix:;", "app;")
    s = lfhttpd(tmp_path / "lf", root, text, top=top)
    try:
        for _ in range(3):
            assert request(s, "GET", "/env")[0] == 200
    finally:
        check_clean_exit(s)
