"""What nginx site files published in public repositories write, run by nginx and lfhttpd.

A measurement of such files (Django and Node behind proxies, certbot's output, SPAs, Docker
and Kubernetes nginx.conf files) found directives and forms lfhttpd refused; each test
here is one of them, accepted with nginx's meaning, or with a notice at `-t` where it has
none here. Where a behaviour can be seen, nginx runs the same text and answers alike.
"""
import http.client
import json
import os
import socket
import ssl
import subprocess

from conftest import BIN, Nginx, Server, free_port, scaled, with_ports
from proxy_harness import Upstream


def lfhttpd_check(tmp_path, text):
    """`lfhttpd -t` on a file of exactly `text`."""
    conf = tmp_path / "t.conf"
    conf.write_text(text)
    return subprocess.run([BIN, "-t", "-c", str(conf)], capture_output=True, text=True,
                          timeout=30), str(conf)


def lfhttpd(tmp_path, text):
    """lfhttpd on `text` (nginx's http { } content), its {port0} a port of its own."""
    return Server(tmp_path / "lfhttpd", None, conf=with_ports(text, [free_port()]))


def get(port, path, host="site.test", tls=False, alpn=None):
    if tls:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        if alpn:
            ctx.set_alpn_protocols(alpn)
        c = http.client.HTTPSConnection("127.0.0.1", port, timeout=scaled(10), context=ctx)
    else:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=scaled(10))
    c.request("GET", path, headers={"Host": host})
    r = c.getresponse()
    body = r.read()
    alpn_chosen = c.sock.selected_alpn_protocol() if tls else None
    c.close()
    return r.status, body, alpn_chosen


def upstream_saw(body):
    """(target, Host) of what the test upstream echoed."""
    j = json.loads(body)
    return j["target"], dict((k.lower(), v) for k, v in j["headers"])["host"]


def self_signed(tmp_path):
    crt, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=site.test", "-keyout", str(key), "-out", str(crt)],
                   check=True, capture_output=True)
    return crt, key


# ---------------------------------------------------------------- proxy_pass to a socket

UNIX = """
server {
    listen 127.0.0.1:{port0};
    location / { proxy_pass http://unix:SOCK; }
    location /u/ { proxy_pass http://unix:SOCK:/v/; }
}
"""


def test_proxy_pass_to_a_unix_socket_sends_the_target_as_nginx(tmp_path):
    sock = tmp_path / "app.sock"
    up = Upstream(unix=sock)
    text = UNIX.replace("SOCK", str(sock))
    try:
        n = Nginx(tmp_path / "nginx", None, text, http=True)
        try:
            want = [upstream_saw(get(n.port, p)[1]) for p in ("/a?q=1", "/u/x")]
        finally:
            n.stop()
        s = lfhttpd(tmp_path, text)
        try:
            got = [upstream_saw(get(s.port, p)[1]) for p in ("/a?q=1", "/u/x")]
        finally:
            s.stop()
    finally:
        up.stop()
    assert [t for t, _ in want] == ["/a?q=1", "/v/x"]
    assert [t for t, _ in got] == [t for t, _ in want]


def test_proxy_pass_to_a_unix_socket_says_host_localhost_as_nginx(tmp_path):
    sock = tmp_path / "app.sock"
    up = Upstream(unix=sock)
    text = UNIX.replace("SOCK", str(sock))
    try:
        n = Nginx(tmp_path / "nginx", None, text, http=True)
        try:
            want = upstream_saw(get(n.port, "/a")[1])[1]
        finally:
            n.stop()
        s = lfhttpd(tmp_path, text)
        try:
            got = upstream_saw(get(s.port, "/a")[1])[1]
        finally:
            s.stop()
    finally:
        up.stop()
    assert want == "localhost"
    assert got == want


# ---------------------------------------------------------------- certbot's ssl_dhparam


def test_ssl_dhparam_lets_a_dhe_cipher_be_chosen_as_nginx(tmp_path):
    crt, key = self_signed(tmp_path)
    dh = tmp_path / "dh.pem"
    subprocess.run(["openssl", "genpkey", "-genparam", "-algorithm", "DH", "-pkeyopt",
                    "group:ffdhe2048", "-out", str(dh)], check=True, capture_output=True)
    text = f"""
server {{
    listen 127.0.0.1:{{port0}} ssl;
    ssl_certificate {crt};
    ssl_certificate_key {key};
    ssl_protocols TLSv1.2;
    ssl_ciphers DHE-RSA-AES128-GCM-SHA256;
    ssl_dhparam {dh};
    location / {{ return 200 "dhe\\n"; }}
}}
"""

    def cipher(port):
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
        ctx.set_ciphers("DHE-RSA-AES128-GCM-SHA256")
        with socket.create_connection(("127.0.0.1", port), timeout=scaled(10)) as raw:
            with ctx.wrap_socket(raw, server_hostname="site.test") as t:
                return t.cipher()[0]

    n = Nginx(tmp_path / "nginx", None, text, http=True)
    try:
        want = cipher(n.port)
    finally:
        n.stop()
    s = lfhttpd(tmp_path, text)
    try:
        got = cipher(s.port)
    finally:
        s.stop()
    assert want == "DHE-RSA-AES128-GCM-SHA256"
    assert got == want


# ---------------------------------------------------------------- listen parameters


def test_listen_http2_is_accepted_with_a_notice(tmp_path):
    r, conf = lfhttpd_check(tmp_path, "server {\n    listen 127.0.0.1:0 http2;\n}\n")
    assert r.returncode == 0, r.stderr
    assert f"{conf}:2: listen: http2: accepted, not used" in r.stderr


def test_listen_http2_over_tls_answers_in_http11_chosen_by_alpn(tmp_path):
    crt, key = self_signed(tmp_path)
    s = lfhttpd(tmp_path, f"""
server {{
    listen 127.0.0.1:{{port0}} ssl http2;
    ssl_certificate {crt};
    ssl_certificate_key {key};
    location / {{ return 200 "ok\\n"; }}
}}
""")
    try:
        status, body, alpn = get(s.port, "/", tls=True, alpn=["h2", "http/1.1"])
    finally:
        s.stop()
    assert (status, body, alpn) == (200, b"ok\n", "http/1.1")


def test_listen_default_is_the_default_server_as_nginx(tmp_path):
    text = """
server { listen 127.0.0.1:{port0}; server_name first.test; return 200 "first\\n"; }
server { listen 127.0.0.1:{port0} default; server_name second.test; return 200 "second\\n"; }
"""
    n = Nginx(tmp_path / "nginx", None, text, http=True)
    try:
        want = get(n.port, "/", host="unknown.test")[1]
    finally:
        n.stop()
    s = lfhttpd(tmp_path, text)
    try:
        got = get(s.port, "/", host="unknown.test")[1]
    finally:
        s.stop()
    assert want == b"second\n"
    assert got == want


# ---------------------------------------------------------------- upstream parameters


def test_upstream_fail_timeout_0_is_accepted_and_proxies(tmp_path):
    up = Upstream(count=1)
    try:
        s = lfhttpd(tmp_path, f"""
upstream app {{ server 127.0.0.1:{up.ports[0]} fail_timeout=0; }}
server {{ listen 127.0.0.1:{{port0}}; location / {{ proxy_pass http://app; }} }}
""")
        try:
            status, body, _ = get(s.port, "/x")
        finally:
            s.stop()
    finally:
        up.stop()
    assert status == 200 and upstream_saw(body)[0] == "/x"


# ---------------------------------------------------------------- accepted for nginx's files


def test_proxy_cache_bypass_without_a_cache_is_accepted_with_a_notice(tmp_path):
    r, conf = lfhttpd_check(tmp_path, """server {
    listen 127.0.0.1:0;
    location / { proxy_pass http://127.0.0.1:9; proxy_cache_bypass $http_upgrade; }
}
""")
    assert r.returncode == 0, r.stderr
    assert f"{conf}:3: proxy_cache_bypass: accepted, not used" in r.stderr


def test_autoindex_localtime_is_accepted_with_a_notice(tmp_path):
    r, conf = lfhttpd_check(tmp_path, "server {\n    listen 127.0.0.1:0;\n"
                                      "    autoindex_localtime on;\n}\n")
    assert r.returncode == 0, r.stderr
    assert f"{conf}:3: autoindex_localtime: accepted, not used" in r.stderr


def test_charset_utf8_is_accepted_as_what_text_types_carry(tmp_path):
    r, _ = lfhttpd_check(tmp_path, "server {\n    listen 127.0.0.1:0;\n    charset utf-8;\n}\n")
    assert r.returncode == 0, r.stderr
    assert "charset" not in r.stderr


def test_charset_other_than_utf8_is_refused_naming_the_line(tmp_path):
    r, conf = lfhttpd_check(tmp_path, "server {\n    listen 127.0.0.1:0;\n    charset koi8-r;\n}\n")
    assert r.returncode == 1
    assert f"{conf}:3: mime: charset" in r.stderr and "only utf-8" in r.stderr


def test_proxy_store_on_is_refused_naming_the_line(tmp_path):
    r, conf = lfhttpd_check(tmp_path, """server {
    listen 127.0.0.1:0;
    location / { proxy_pass http://127.0.0.1:9; proxy_store on; }
}
""")
    assert r.returncode == 1
    assert f"{conf}:3: proxy: proxy_store" in r.stderr or f"{conf}:3: proxy_store" in r.stderr


def test_proxy_pass_request_headers_on_is_accepted(tmp_path):
    r, _ = lfhttpd_check(tmp_path, """server {
    listen 127.0.0.1:0;
    location / { proxy_pass http://127.0.0.1:9; proxy_pass_request_headers on; }
}
""")
    assert r.returncode == 0, r.stderr


# ---------------------------------------------------------------- try_files


def test_try_files_uri_slash_index_html_finds_the_root_index_as_nginx(tmp_path):
    """Rails' `try_files $uri/index.html $uri @app;`: for "/" the candidate is
    "//index.html", which nginx's file system finds."""
    root = tmp_path / "www"
    root.mkdir()
    (root / "index.html").write_text("root index\n")
    text = f"""
server {{
    listen 127.0.0.1:{{port0}};
    root {root};
    try_files $uri/index.html =404;
}}
"""
    n = Nginx(tmp_path / "nginx", None, text, http=True)
    try:
        want = get(n.port, "/")[:2]
    finally:
        n.stop()
    s = lfhttpd(tmp_path, text)
    try:
        got = get(s.port, "/")[:2]
    finally:
        s.stop()
    assert want == (200, b"root index\n")
    assert got == want


# ---------------------------------------------------------------- server_tokens per block


def server_versions(port, paths):
    """For each path, whether the Server field names a version ("name/1.2")."""
    out = []
    for p in paths:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=scaled(10))
        c.request("GET", p, headers={"Host": "site.test"})
        r = c.getresponse()
        r.read()
        out.append("/" in (r.getheader("Server") or ""))
        c.close()
    return out


SERVER_TOKENS = """
server {
    listen 127.0.0.1:{port0};
    server_tokens off;
    location / { return 200 "quiet\\n"; }
    location /loud/ { server_tokens on; return 200 "loud\\n"; }
    location /missing/ { return 404; }
    location /added/ { add_header X-A 1; return 200 "added\n"; }
}
"""


def test_server_tokens_off_in_a_server_hides_the_version_as_nginx(tmp_path):
    paths = ["/", "/missing/x"]
    n = Nginx(tmp_path / "nginx", None, SERVER_TOKENS, http=True)
    try:
        want = server_versions(n.port, paths)
    finally:
        n.stop()
    s = lfhttpd(tmp_path, SERVER_TOKENS)
    try:
        got = server_versions(s.port, paths)
    finally:
        s.stop()
    assert want == [False, False]
    assert got == want


def test_server_tokens_on_in_a_location_shows_the_version_as_nginx(tmp_path):
    n = Nginx(tmp_path / "nginx", None, SERVER_TOKENS, http=True)
    try:
        want = server_versions(n.port, ["/loud/"])
    finally:
        n.stop()
    s = lfhttpd(tmp_path, SERVER_TOKENS)
    try:
        got = server_versions(s.port, ["/loud/"])
    finally:
        s.stop()
    assert want == [True]
    assert got == want


def test_server_tokens_off_holds_in_a_location_with_headers_of_its_own_as_nginx(tmp_path):
    n = Nginx(tmp_path / "nginx", None, SERVER_TOKENS, http=True)
    try:
        want = server_versions(n.port, ["/added/"])
    finally:
        n.stop()
    s = lfhttpd(tmp_path, SERVER_TOKENS)
    try:
        got = server_versions(s.port, ["/added/"])
    finally:
        s.stop()
    assert want == [False]
    assert got == want


ALIAS_TRY = """
server {
    listen 127.0.0.1:{port0};
    root ROOT;
    location /util/ { alias ROOT/util/; try_files $uri /util/spa.js; }
}
"""


def alias_try_answers(tmp_path, paths):
    root = tmp_path / "www"
    (root / "util").mkdir(parents=True)
    (root / "util" / "style.css").write_text("util style\n")
    (root / "util" / "spa.js").write_text("util spa\n")
    text = ALIAS_TRY.replace("ROOT", str(root))
    n = Nginx(tmp_path / "nginx", None, text, http=True)
    try:
        want = [get(n.port, p)[:2] for p in paths]
    finally:
        n.stop()
    s = lfhttpd(tmp_path, text)
    try:
        got = [get(s.port, p)[:2] for p in paths]
    finally:
        s.stop()
    return want, got


def test_try_files_uri_under_alias_serves_the_aliased_file_as_nginx(tmp_path):
    want, got = alias_try_answers(tmp_path, ["/util/style.css"])
    assert want == [(200, b"util style\n")]
    assert got == want


def test_try_files_fallback_under_alias_serves_the_aliased_file_as_nginx(tmp_path):
    want, got = alias_try_answers(tmp_path, ["/util/missing.css"])
    assert want == [(200, b"util spa\n")]
    assert got == want


def test_try_files_redirect_cycle_under_basic_auth_asks_for_credentials_first_as_nginx(
        tmp_path):
    """nginx's access phase runs before try_files: without credentials a request whose
    try_files would loop (`/404` back into the same location) is a 401, not the 500."""
    root = tmp_path / "www"
    root.mkdir()
    hashed = subprocess.run(["openssl", "passwd", "-6", "-salt", "saltsalt", "secret"],
                            check=True, capture_output=True, text=True).stdout.strip()
    users = tmp_path / "htpasswd"
    users.write_text(f"alice:{hashed}\n")
    text = f"""
server {{
    listen 127.0.0.1:{{port0}};
    root {root};
    location / {{
        auth_basic "Area";
        auth_basic_user_file {users};
        try_files $uri /404;
    }}
}}
"""
    n = Nginx(tmp_path / "nginx", None, text, http=True)
    try:
        want = get(n.port, "/missing")[0]
    finally:
        n.stop()
    s = lfhttpd(tmp_path, text)
    try:
        got = get(s.port, "/missing")[0]
    finally:
        s.stop()
    assert want == 401
    assert got == want


def test_rewrite_to_a_path_with_a_double_slash_serves_the_file_as_nginx(tmp_path):
    """A Rails/Puma site's `if (-f $request_filename/index.html) { rewrite (.*)
    $1/index.html break; }`: for "/" the rewrite makes "//index.html", whose file nginx's
    file system reads as "/index.html"."""
    root = tmp_path / "www"
    root.mkdir()
    (root / "index.html").write_text("root index\n")
    text = f"""
server {{
    listen 127.0.0.1:{{port0}};
    root {root};
    location / {{
        if (-f $request_filename/index.html) {{ rewrite (.*) $1/index.html break; }}
        return 418;
    }}
}}
"""
    n = Nginx(tmp_path / "nginx", None, text, http=True)
    try:
        want = get(n.port, "/")[:2]
    finally:
        n.stop()
    s = lfhttpd(tmp_path, text)
    try:
        got = get(s.port, "/")[:2]
    finally:
        s.stop()
    assert want == (200, b"root index\n")
    assert got == want


def expiry_of(port, path):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=scaled(10))
    c.request("GET", path, headers={"Host": "site.test"})
    r = c.getresponse()
    r.read()
    c.close()
    return r.status, r.getheader("Cache-Control"), r.getheader("X-Type")


def test_map_of_sent_http_content_type_sets_expires_by_type_as_nginx(tmp_path):
    """The snippet many sites copy: `map $sent_http_content_type $expires { ... }` and
    `expires $expires;`, the answer's own type choosing its caching; and
    $sent_http_content_type in add_header. (Types that are not text: lfhttpd's text types
    carry `; charset=utf-8`, nginx's only with `charset`, a documented difference.)"""
    root = tmp_path / "www"
    root.mkdir()
    (root / "a.pdf").write_bytes(b"%PDF-1.4\n")
    (root / "a.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    (root / "a.json").write_text("{}\n")
    (root / "a.zip").write_bytes(b"PK\x03\x04")
    text = f"""
types {{ application/pdf pdf; image/png png; application/json json; application/zip zip; }}
map $sent_http_content_type $expires {{
    default off;
    application/pdf epoch;
    application/json max;
    ~image/ 1h;
}}
server {{
    listen 127.0.0.1:{{port0}};
    root {root};
    expires $expires;
    add_header X-Type "$sent_http_content_type";
}}
"""
    paths = ["/a.pdf", "/a.json", "/a.png", "/a.zip"]
    n = Nginx(tmp_path / "nginx", None, text, http=True)
    try:
        want = [expiry_of(n.port, p) for p in paths]
    finally:
        n.stop()
    s = lfhttpd(tmp_path, text)
    try:
        got = [expiry_of(s.port, p) for p in paths]
    finally:
        s.stop()
    assert want == [(200, "no-cache", "application/pdf"),
                    (200, "max-age=315360000", "application/json"),
                    (200, "max-age=3600", "image/png"), (200, None, "application/zip")]
    assert got == want


def test_gunzip_is_accepted_with_a_notice_that_answers_are_not_decompressed(tmp_path):
    r, conf = lfhttpd_check(tmp_path, "server {\n    listen 127.0.0.1:0;\n"
                                      "    location / { gunzip on; }\n}\n")
    assert r.returncode == 0, r.stderr
    assert f"{conf}:3: gunzip: accepted, not used: Answers are not decompressed" in r.stderr


def head_status(port, field_bytes):
    """The status of a GET whose one extra field line holds field_bytes bytes of value."""
    s = socket.create_connection(("127.0.0.1", port), timeout=scaled(5))
    try:
        s.sendall(b"GET / HTTP/1.1\r\nHost: t\r\nX-Big: " + b"a" * field_bytes +
                  b"\r\nConnection: close\r\n\r\n")
        data = b""
        while b"\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        return int(data.split(b" ", 2)[1])
    finally:
        s.close()


def test_large_client_header_buffers_bounds_the_request_head(tmp_path):
    (tmp_path / "www").mkdir()
    (tmp_path / "www" / "index.html").write_text("x\n")
    srv = lfhttpd(tmp_path, f"""
http {{
    large_client_header_buffers 2 1k;
    server {{
        listen 127.0.0.1:{{port0}};
        root {tmp_path / "www"};
    }}
}}
""")
    try:
        assert head_status(srv.port, 1500) == 200
        assert head_status(srv.port, 2100) == 431
    finally:
        srv.stop()


def test_client_body_buffer_size_is_accepted_at_every_level(tmp_path):
    """It bounds $request_body (test_request_body_var.py), so no "not used" notice."""
    r, conf = lfhttpd_check(tmp_path, """http {
    client_body_buffer_size 16k;
    server {
        listen 127.0.0.1:0;
        client_body_buffer_size 128k;
        location / { client_body_buffer_size 1m; }
    }
}
""")
    assert r.returncode == 0, r.stderr
    assert "client_body_buffer_size" not in r.stderr, r.stderr


def test_client_body_buffer_size_that_is_not_a_size_names_the_line(tmp_path):
    r, conf = lfhttpd_check(tmp_path, """http {
    server {
        listen 127.0.0.1:0;
        client_body_buffer_size lots;
    }
}
""")
    assert r.returncode != 0
    assert f"{conf}:4" in r.stderr and "client_body_buffer_size" in r.stderr, r.stderr


def test_nginx_buffer_and_pool_sizes_are_accepted_with_a_notice(tmp_path):
    r, conf = lfhttpd_check(tmp_path, """http {
    connection_pool_size 512;
    request_pool_size 4k;
    client_header_buffer_size 1k;
    open_log_file_cache max=1000 inactive=20s;
    server { listen 127.0.0.1:0; }
}
""")
    assert r.returncode == 0, r.stderr
    for line, name in ((2, "connection_pool_size"), (3, "request_pool_size"),
                       (4, "client_header_buffer_size"), (5, "open_log_file_cache")):
        assert f"{conf}:{line}: {name}: accepted, not used" in r.stderr, r.stderr


def first_bytes(port, request):
    """What the server sends back before it closes (b"" when it answers nothing)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=scaled(5))
    try:
        s.sendall(request)
        data = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                return data
            data += chunk
    except ConnectionResetError:
        return data
    finally:
        s.close()


def test_return_444_closes_the_connection_without_an_answer_as_nginx(tmp_path):
    text = """
server {
    listen 127.0.0.1:{port0};
    location / { return 444; }
    location /if { if ($arg_drop) { return 444; } return 200 "kept\\n"; }
}
"""
    theirs = Nginx(tmp_path / "nginx", None, text, http=True)
    ours = lfhttpd(tmp_path, "http {\n" + text + "}\n")
    try:
        for port in (theirs.port, ours.port):
            assert first_bytes(port, b"GET / HTTP/1.1\r\nHost: t\r\n\r\n") == b""
            assert first_bytes(port, b"GET /if?drop=1 HTTP/1.1\r\nHost: t\r\n\r\n") == b""
            kept = first_bytes(port, b"GET /if HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            assert kept.startswith(b"HTTP/1.1 200") and kept.endswith(b"kept\n")
    finally:
        theirs.stop()
        ours.stop()


def forwarding_fields_seen(port):
    """The X-Forwarded-* and X-Real-IP fields the upstream got for one GET /a."""
    e = json.loads(get(port, "/a")[1])
    return sorted((k.lower(), v) for k, v in e["headers"]
                  if k.lower().startswith("x-forwarded") or k.lower() == "x-real-ip")


def test_proxy_pass_in_a_file_with_http_sends_only_the_forwarding_fields_it_sets(tmp_path):
    """nginx adds no X-Forwarded-For, X-Real-IP or X-Forwarded-* of its own: in a file with
    `http { }`, neither does lfhttpd (in its own files it adds them by default)."""
    up = Upstream(count=1)
    text = f"""
server {{
    listen 127.0.0.1:{{port0}};
    location / {{ proxy_pass http://127.0.0.1:{up.ports[0]}; }}
    location /set/ {{
        proxy_pass http://127.0.0.1:{up.ports[0]}/;
        proxy_set_header X-Real-IP $remote_addr;
    }}
}}
"""
    try:
        n = Nginx(tmp_path / "nginx", None, text, http=True)
        try:
            want = forwarding_fields_seen(n.port)
            want_set = json.loads(get(n.port, "/set/a")[1])["headers"]
        finally:
            n.stop()
        s = lfhttpd(tmp_path, "http {\n" + text + "}\n")
        try:
            got = forwarding_fields_seen(s.port)
            got_set = json.loads(get(s.port, "/set/a")[1])["headers"]
        finally:
            s.stop()
    finally:
        up.stop()
    assert want == []
    assert got == want
    real = lambda hs: [v for k, v in hs if k.lower() == "x-real-ip"]  # noqa: E731
    assert real(want_set) == ["127.0.0.1"] and real(got_set) == real(want_set)
