"""nginx's $request_body, against nginx: the body, where the block's handler has read it
(proxy_pass, fastcgi_pass) and it is no longer than the block's client_body_buffer_size
(nginx keeps such a body in memory, where the variable reads it, and writes a longer one
to a file, where it does not); empty where the body is not read. One configuration run by
nginx and by lfhttpd in front of one test upstream (upstream_app.py), or of one PHP-FPM
pool, the same requests sent to each and the answers (and log lines) compared."""
import socket
import subprocess
import time

from conftest import BIN, Client, scaled, wait_until
from fastcgi_harness import Fpm, fpm, lfhttpd, nginx, php_root  # noqa: F401
from proxy_harness import Proxy, Upstream
from test_fastcgi import header
from test_fastcgi import request as fcgi_request
from test_proxy import echoed, fields, request

CONF = """
log_format body '[$request_body]';
upstream app { server 127.0.0.1:{up0}; }
server {
    listen 127.0.0.1:{port0};
    location /p/ {
        proxy_pass http://app;
        add_header X-Body $request_body always;
    }
    location /log/ {
        proxy_pass http://app;
        access_log LOG body;
    }
    location /small/ {
        client_body_buffer_size 1k;
        proxy_pass http://app;
        add_header X-Body $request_body always;
    }
    location /up/ {
        proxy_pass http://app;
        proxy_set_header X-Body $request_body;
    }
    location /single/ {
        client_body_in_single_buffer on;
        client_body_in_file_only off;
        proxy_pass http://app;
        add_header X-Body $request_body always;
    }
    location /ep/ {
        proxy_pass http://app;
        proxy_intercept_errors on;
        error_page 404 /page;
    }
    location = /page {
        return 200 "[$request_body]";
    }
    location /r/ {
        add_header X-Body $request_body always;
        return 200 "[$request_body]";
    }
}
"""

BODY = b"0123456789" * 200  # 2000 bytes: more than 1k, less than the default 16k


def chunked(body, size=700):
    return b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + size]), body[i:i + size])
                    for i in range(0, len(body), size)) + b"0\r\n\r\n"


def answers(tmp_path, docroot, sends):
    """Each (path, body, chunked?) sent to nginx and to lfhttpd: {kind: [(status,
    headers, body)...]}, and {kind: the access log's lines}."""
    u = Upstream()
    out, logs = {}, {}
    try:
        for kind in ("nginx", "lfhttpd"):
            log = tmp_path / f"{kind}.log"
            p = Proxy(tmp_path / kind, CONF.replace("LOG", str(log)), u, docroot, kind=kind)
            try:
                out[kind] = []
                for path, body, is_chunked in sends:
                    if is_chunked:
                        status, headers, got, _ = request(
                            p, path, method="POST", body=chunked(body),
                            headers=[("Transfer-Encoding", "chunked")])
                    else:
                        status, headers, got, _ = request(p, path, method="POST", body=body)
                    out[kind].append((status, headers, got))
                logged = sum(path.startswith("/log/") for path, _, _ in sends)
                wait_until(lambda: log.exists() and
                           len(log.read_text().splitlines()) >= logged, scaled(5))
                logs[kind] = log.read_text().splitlines() if log.exists() else []
            finally:
                p.stop()
    finally:
        u.stop()
    return out, logs


def test_a_proxied_body_is_request_body_as_nginx(tmp_path, docroot):
    out, _ = answers(tmp_path, docroot, [("/p/x", BODY, False)])
    for kind in ("nginx", "lfhttpd"):
        status, headers, _ = out[kind][0]
        assert status == 200 and headers.get("x-body") == BODY.decode(), (kind, status)


def test_proxy_set_header_sends_request_body_upstream_as_nginx(tmp_path, docroot):
    """The proxy's request is made once the body is read: a field may carry it."""
    u = Upstream()
    try:
        seen = {}
        for kind in ("nginx", "lfhttpd"):
            p = Proxy(tmp_path / kind, CONF.replace("LOG", str(tmp_path / "unused.log")), u,
                      docroot, kind=kind)
            try:
                seen[kind] = fields(echoed(p, "/up/x", method="POST", body=b"k=v&w=1"), "X-Body")
            finally:
                p.stop()
    finally:
        u.stop()
    assert seen["lfhttpd"] == seen["nginx"] == ["k=v&w=1"]


def test_a_chunked_body_is_request_body_decoded_as_nginx(tmp_path, docroot):
    out, _ = answers(tmp_path, docroot, [("/p/x", BODY, True)])
    for kind in ("nginx", "lfhttpd"):
        status, headers, _ = out[kind][0]
        assert status == 200 and headers.get("x-body") == BODY.decode(), (kind, status)


def test_a_chunked_body_sent_in_pieces_is_request_body_as_nginx(tmp_path, docroot):
    """The head, then five chunks of 200 bytes a moment apart, then the last chunk (as
    nginx's ssl.t sends it): the body is gathered across reads, and is the variable."""
    u = Upstream()
    seen = {}
    try:
        for kind in ("nginx", "lfhttpd"):
            p = Proxy(tmp_path / kind, CONF.replace("LOG", str(tmp_path / "unused.log")), u,
                      docroot, kind=kind)
            c = Client(socket.create_connection((p.host, p.port), timeout=scaled(10)))
            try:
                c.send(b"POST /p/x HTTP/1.1\r\nHost: t\r\nConnection: close\r\n"
                       b"Transfer-Encoding: chunked\r\n\r\n")
                for _ in range(5):
                    time.sleep(0.05)
                    c.send(b"c8\r\n" + b"0123456789" * 20 + b"\r\n")
                c.send(b"0\r\n\r\n")
                status, headers, _, _ = c.read_response(timeout=scaled(10))
                seen[kind] = (status, headers.get("x-body"))
            finally:
                c.close()
                p.stop()
    finally:
        u.stop()
    assert seen["lfhttpd"] == seen["nginx"] == (200, "0123456789" * 100)


def test_request_body_is_in_the_access_log_as_nginx(tmp_path, docroot):
    _, logs = answers(tmp_path, docroot, [("/log/x", b"a=1&b=2", False)])
    assert logs["lfhttpd"] == logs["nginx"] == ["[a=1&b=2]"]


def test_a_body_longer_than_client_body_buffer_size_is_no_request_body_as_nginx(
        tmp_path, docroot):
    """The block's 1k: 1000 bytes are the variable's, 3000 are not (nginx wrote them to a
    file); the header with an empty value is not sent."""
    short, long_ = BODY[:1000], BODY + BODY[:1000]
    out, _ = answers(tmp_path, docroot, [("/small/x", short, False),
                                         ("/small/x", long_, False)])
    for kind in ("nginx", "lfhttpd"):
        (s1, h1, _), (s2, h2, _) = out[kind]
        assert s1 == s2 == 200, kind
        assert h1.get("x-body") == short.decode(), kind
        assert "x-body" not in h2, kind


def test_client_body_in_single_buffer_and_in_file_only_off_are_accepted_as_nginx(
        tmp_path, docroot):
    """nginx's advice for $request_body, and its default: what they ask is what is done."""
    out, _ = answers(tmp_path, docroot, [("/single/x", b"q=1", False)])
    for kind in ("nginx", "lfhttpd"):
        status, headers, _ = out[kind][0]
        assert status == 200 and headers.get("x-body") == "q=1", (kind, status)


def test_client_body_in_file_only_on_is_refused_naming_its_line(tmp_path):
    """No body is ever written to a file here: nginx's `on` (and `clean`, which would
    empty $request_body) is an error at load, not a silent difference."""
    conf = tmp_path / "t.conf"
    conf.write_text("http {\n  server {\n    listen 127.0.0.1:0;\n"
                    "    client_body_in_file_only clean;\n  }\n}\n")
    r = subprocess.run([BIN, "-t", "-c", str(conf)], capture_output=True, text=True,
                       cwd=tmp_path, timeout=30)
    assert r.returncode != 0
    assert f"{conf}:4: client_body_in_file_only: only \"off\"" in r.stderr, r.stderr


def test_an_error_page_after_the_proxy_still_has_request_body_as_nginx(tmp_path, docroot):
    """The upstream's 404 is answered by the page's `return` (with the 404), which reads no
    body itself: the variable is the body the request read before the redirect."""
    out, _ = answers(tmp_path, docroot, [("/ep/x?status=404", b"e=1", False)])
    assert [(s, b) for s, _, b in out["lfhttpd"]] == [(s, b) for s, _, b in out["nginx"]] \
        == [(404, b"[e=1]")]


def test_a_location_that_does_not_read_the_body_has_no_request_body_as_nginx(
        tmp_path, docroot):
    out, _ = answers(tmp_path, docroot, [("/r/x", b"abc", False)])
    assert [(s, h.get("x-body"), b) for s, h, b in out["lfhttpd"]] == \
        [(s, h.get("x-body"), b) for s, h, b in out["nginx"]] == [(200, None, b"[]")]


PHP = """
    location ~ \\.php$ {{
        fastcgi_pass unix:{sock};
        include fastcgi.conf;
        add_header X-Body $request_body always;
    }}
"""


def test_a_fastcgi_body_is_request_body_as_nginx(tmp_path, fpm):  # noqa: F811
    root = php_root(tmp_path)
    seen = {}
    for kind, start in (("nginx", nginx), ("lfhttpd", lfhttpd)):
        s = start(tmp_path / kind, root, PHP.format(sock=fpm.sock))
        try:
            status, headers, _ = fcgi_request(s, "POST", "/env.php", body=b"x=1&y=2",
                                              headers={"Content-Type": "text/plain"})
            seen[kind] = (status, header(headers, "X-Body"))
        finally:
            s.stop()
    assert seen["lfhttpd"] == seen["nginx"] == (200, ["x=1&y=2"])


def test_a_cgi_scripts_body_is_request_body_in_the_log(start_server, docroot, tmp_path, connect):
    """nginx has no CGI: a script's body is $request_body as a proxied one is, in the log
    line written once the script's answer has streamed."""
    cgi = tmp_path / "cgi"
    cgi.mkdir()
    (cgi / "cat.sh").write_text("#!/bin/sh\nprintf 'Content-Type: text/plain\\n\\n'\n"
                                "exec cat\n")
    (cgi / "cat.sh").chmod(0o755)
    log = tmp_path / "body.log"
    srv = start_server(docroot, conf_extra=f'cgi /cgi-bin/ "{cgi}";\n'
                       "log_format body '[$request_body]';\n"
                       f'access_log "{log}" body;\n')
    c = connect(srv)
    c.send(b"POST /cgi-bin/cat.sh HTTP/1.1\r\nHost: t\r\nContent-Length: 7\r\n\r\na=1&b=2")
    status, _, body, _ = c.read_response()
    assert status == 200 and body == b"a=1&b=2"
    assert wait_until(lambda: log.exists() and log.read_text().strip(), scaled(5))
    assert log.read_text().splitlines() == ["[a=1&b=2]"]
