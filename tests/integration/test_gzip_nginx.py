"""nginx's gzip family per http, server and location, against nginx, the oracle.

One configuration, written inside `http { }`, runs in nginx and in lfhttpd (which then
takes nginx's defaults for the gzip family: compression off, text/html only, no Vary,
gzip_min_length 20, gzip_http_version 1.1, gzip_proxied off, gzip_static off). Each test
is one behaviour: it states what nginx answers, then lfhttpd must answer the same. What is
compared is the status, Content-Encoding, Vary and the body once decoded, never the
compressed bytes (the two compress alike but not byte for byte, and lfhttpd sends a
Content-Length where nginx streams chunks).
"""
import gzip
import os
import socket
import time

import pytest

from conftest import Nginx, Server, check_clean_exit, free_port, with_ports, scaled

HTML = b"<html><body>" + b"hello, compressed world. " * 200 + b"</body></html>\n"
SIDECAR = b"<html><body>" + b"this came from the sidecar. " * 50 + b"</body></html>\n"

SITE = """\
    types {
        text/html html;
        text/plain txt;
        text/css css;
        image/png png;
        application/javascript js;
    }
    gzip on;
    server {
        listen 127.0.0.1:{port0};
        root ROOT;
        location /on/ { }
        location /off/ { gzip off; }
        location /types/ { gzip_types text/css; }
        location /star/ { gzip_types *; }
        location /min/ { gzip_min_length 6000; }
        location /vary/ { gzip_vary on; }
        location /proxied-any/ { gzip_proxied any; }
        location /proxied-no-etag/ { gzip_proxied no_etag; }
        location /proxied-expired/ { gzip_proxied expired; }
        location /proxied-auth/ { gzip_proxied no_etag auth; }
        location /disable/ { gzip_disable "^curl/" "bot"; }
        location /msie/ { gzip_disable msie6; }
        location /v10/ { gzip_http_version 1.0; }
        location /static/ { gzip_static on; }
        location /static-only/ { gzip off; gzip_static on; }
        location /always/ { gzip_static always; }
        location /always-as-is/ { alias ROOT/always/; }
        location /errpage/ { error_page 404 /errpage/404.html; }
        location /nested/ {
            gzip off;
            location /nested/on/ { gzip on; }
        }
    }
    server {
        listen 127.0.0.1:{port1};
        root ROOT;
        gzip off;
        location /loc-on/ { gzip on; }
        location / { }
    }
"""

LFHTTPD_TOP = """\
threads 2;
error_log stderr debug;
access_log "{access}";
shutdown_timeout 5s;
"""

DIRS = ["on", "off", "types", "star", "min", "vary", "proxied-any", "proxied-no-etag",
        "proxied-expired", "proxied-auth", "disable", "msie", "v10", "static", "static-only",
        "always", "nested", "nested/on", "loc-on", "other", "plain", "errpage"]


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("gzroot")
    for d in DIRS:
        p = root / d
        p.mkdir(parents=True, exist_ok=True)
        (p / "a.html").write_bytes(HTML)
        (p / "a.txt").write_bytes(HTML)
        (p / "a.css").write_bytes(HTML)
        (p / "a.png").write_bytes(HTML)
        (p / "small.html").write_bytes(b"<p>tiny</p>\n")  # 12 bytes: under 20
        (p / "short.html").write_bytes(b"<p>" + b"x" * 60 + b"</p>\n")  # 68: over 20
        (p / "big.html").write_bytes(HTML * 3)  # over 6000
        (p / "app.js").write_bytes(HTML)
        (p / "404.html").write_bytes(b"<html>" + b"not here. " * 50 + b"</html>\n")
    for d in ("static", "static-only", "always", "plain"):
        for name in ("a.html", "app.js", "small.html"):
            side = root / d / (name + ".gz")
            side.write_bytes(gzip.compress(SIDECAR))
            t = os.stat(root / d / name).st_mtime + 1  # not older than the file
            os.utime(side, (t, t))
    return root


def start_lfhttpd(dirpath, text):
    for attempt in range(3):  # a port picked may be taken before lfhttpd binds it
        ports = [free_port(), free_port()]
        top = LFHTTPD_TOP.format(access=os.path.join(str(dirpath), "access.log"))
        try:
            s = Server(dirpath / f"try{attempt}", None,
                       conf=top + "http {\n" + with_ports(text, ports) + "}\n")
            return s, ports
        except RuntimeError as e:
            if "in use" not in str(e) or attempt == 2:
                raise


@pytest.fixture(scope="module")
def daemons(tree, tmp_path_factory):
    text = SITE.replace("ROOT", str(tree))
    theirs = Nginx(tmp_path_factory.mktemp("nginx"), None, text, http=True)
    try:
        ours = start_lfhttpd(tmp_path_factory.mktemp("lfhttpd"), text)
    except BaseException:
        theirs.stop()
        raise
    yield theirs, ours
    theirs.stop()
    check_clean_exit(ours[0])


def exchange(port, target, headers=(), version="1.1"):
    """One request on its own connection: (status, {name: value}, body as sent)."""
    head = [f"GET {target} HTTP/{version}", "Host: example.org"]
    head += [f"{k}: {v}" for k, v in headers]
    head.append("Connection: close")
    with socket.create_connection(("127.0.0.1", port), timeout=scaled(10)) as s:
        s.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    raw_head, _, body = data.partition(b"\r\n\r\n")
    lines = raw_head.decode("latin-1").split("\r\n")
    fields = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        fields.setdefault(k.strip().lower(), v.strip())
    if fields.get("transfer-encoding", "").lower() == "chunked":
        body = dechunk(body)
    return int(lines[0].split(" ")[1]), fields, body


def dechunk(data):
    out = b""
    while True:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            return out
        out, data = out + data[:size], data[size + 2:]


def observe(port, target, headers=(("Accept-Encoding", "gzip"),), version="1.1"):
    """What is compared: status, Content-Encoding, Vary and the decoded body."""
    status, fields, body = exchange(port, target, headers, version)
    coding = fields.get("content-encoding")
    return {"status": status, "content-encoding": coding, "vary": fields.get("vary"),
            "body": gzip.decompress(body) if coding == "gzip" else body}


def both(daemons, target, port=0, **kw):
    """nginx's answer, after checking lfhttpd gives the same."""
    (theirs, (ours, ports)) = daemons
    nginx_seen = observe(theirs.ports[port], target, **kw)
    ours_seen = observe(ports[port], target, **kw)
    assert ours_seen == nginx_seen
    return nginx_seen


def gzipped(seen, body=HTML):
    return seen["status"] == 200 and seen["content-encoding"] == "gzip" and seen["body"] == body


def identity(seen, body=HTML):
    return seen["status"] == 200 and seen["content-encoding"] is None and seen["body"] == body


# ------------------------------------------------------------------- gzip on | off


def test_gzip_on_at_http_level_compresses_html_in_a_location_that_says_nothing(daemons):
    assert gzipped(both(daemons, "/on/a.html"))


def test_gzip_off_in_a_location_turns_off_what_http_turned_on(daemons):
    assert identity(both(daemons, "/off/a.html"))


def test_gzip_off_in_a_server_holds_in_its_locations_that_say_nothing(daemons):
    assert identity(both(daemons, "/other/a.html", port=1))


def test_gzip_on_in_a_location_turns_on_what_its_server_turned_off(daemons):
    assert gzipped(both(daemons, "/loc-on/a.html", port=1))


def test_nested_location_overrides_its_parents_gzip_off(daemons):
    assert identity(both(daemons, "/nested/a.html"))
    assert gzipped(both(daemons, "/nested/on/a.html"))


def test_a_client_that_does_not_accept_gzip_gets_the_identity(daemons):
    assert identity(both(daemons, "/on/a.html", headers=()))


def test_the_servers_own_404_page_is_compressed(daemons):
    """Each server's page is its own: status, Content-Encoding and Vary are compared."""
    (theirs, (ours, ports)) = daemons
    seen = [observe(p, "/vary/missing.html") for p in (theirs.ports[0], ports[0])]
    for s in seen:
        assert s["status"] == 404 and s["content-encoding"] == "gzip", s
        assert b"404 Not Found" in s["body"] and s["vary"] == "Accept-Encoding", s


def test_an_error_page_served_from_a_file_is_compressed_with_its_status(daemons):
    seen = both(daemons, "/errpage/missing.html")
    assert seen["status"] == 404 and seen["content-encoding"] == "gzip", seen
    assert seen["body"] == b"<html>" + b"not here. " * 50 + b"</html>\n"


# ------------------------------------------------------------------- gzip_types


def test_only_text_html_is_compressed_by_default(daemons):
    assert identity(both(daemons, "/on/a.txt"))
    assert identity(both(daemons, "/on/a.css"))


def test_gzip_types_in_a_location_adds_its_types(daemons):
    assert gzipped(both(daemons, "/types/a.css"))
    assert identity(both(daemons, "/types/a.txt"))


def test_gzip_types_always_keeps_text_html(daemons):
    assert gzipped(both(daemons, "/types/a.html"))


def test_gzip_types_star_compresses_every_type(daemons):
    assert gzipped(both(daemons, "/star/a.png"))


# ------------------------------------------------------------------- gzip_min_length


def test_default_min_length_is_20_bytes(daemons):
    assert identity(both(daemons, "/on/small.html"), b"<p>tiny</p>\n")
    assert gzipped(both(daemons, "/on/short.html"), b"<p>" + b"x" * 60 + b"</p>\n")


def test_gzip_min_length_in_a_location_compares_the_content_length(daemons):
    assert identity(both(daemons, "/min/a.html"))
    assert gzipped(both(daemons, "/min/big.html"), HTML * 3)


# ------------------------------------------------------------------- gzip_vary


def test_no_vary_by_default(daemons):
    assert both(daemons, "/on/a.html")["vary"] is None


def test_gzip_vary_adds_vary_accept_encoding(daemons):
    seen = both(daemons, "/vary/a.html")
    assert gzipped(seen) and seen["vary"] == "Accept-Encoding"


def test_gzip_vary_adds_vary_to_an_answer_not_compressed(daemons):
    seen = both(daemons, "/vary/a.html", headers=())
    assert identity(seen) and seen["vary"] == "Accept-Encoding"


# ------------------------------------------------------------------- gzip_proxied

VIA = ("Via", "1.1 proxy.example")
AE = ("Accept-Encoding", "gzip")


def test_request_through_a_proxy_is_not_compressed_by_default(daemons):
    assert identity(both(daemons, "/on/a.html", headers=(AE, VIA)))


def test_gzip_proxied_any_compresses_a_request_through_a_proxy(daemons):
    assert gzipped(both(daemons, "/proxied-any/a.html", headers=(AE, VIA)))


def test_gzip_proxied_no_etag_refuses_an_answer_with_an_etag(daemons):
    assert identity(both(daemons, "/proxied-no-etag/a.html", headers=(AE, VIA)))


def test_gzip_proxied_expired_compresses_an_answer_with_neither_expires_nor_cache_control(
        daemons):
    assert gzipped(both(daemons, "/proxied-expired/a.html", headers=(AE, VIA)))


def test_gzip_proxied_auth_compresses_a_request_with_authorization(daemons):
    """no_etag alone refuses the file (it has an ETag); auth lets one with Authorization
    through."""
    assert gzipped(both(daemons, "/proxied-auth/a.html",
                        headers=(AE, VIA, ("Authorization", "Basic dTpw"))))
    assert identity(both(daemons, "/proxied-auth/a.html", headers=(AE, VIA)))


# ------------------------------------------------------------------- gzip_disable


def test_gzip_disable_refuses_a_user_agent_its_regex_matches(daemons):
    assert identity(both(daemons, "/disable/a.html", headers=(AE, ("User-Agent", "curl/8.5"))))


def test_gzip_disable_regex_matches_without_case(daemons):
    assert identity(both(daemons, "/disable/a.html", headers=(AE, ("User-Agent", "GoodBot 1"))))


def test_gzip_disable_lets_other_user_agents_through(daemons):
    assert gzipped(both(daemons, "/disable/a.html", headers=(AE, ("User-Agent", "Wget/1.2"))))


def test_gzip_disable_msie6_refuses_msie_6(daemons):
    ua = ("User-Agent", "Mozilla/4.0 (compatible; MSIE 6.0; Windows NT 5.1)")
    assert identity(both(daemons, "/msie/a.html", headers=(AE, ua)))


def test_gzip_disable_msie6_lets_msie_6_with_sv1_through(daemons):
    ua = ("User-Agent", "Mozilla/4.0 (compatible; MSIE 6.0; Windows NT 5.1; SV1)")
    assert gzipped(both(daemons, "/msie/a.html", headers=(AE, ua)))


# ------------------------------------------------------------------- gzip_http_version


def test_http_1_0_request_is_not_compressed_by_default(daemons):
    assert identity(both(daemons, "/on/a.html", version="1.0"))


def test_gzip_http_version_1_0_compresses_an_http_1_0_request(daemons):
    assert gzipped(both(daemons, "/v10/a.html", version="1.0"))


# ------------------------------------------------------------------- gzip_static


def test_gzip_static_on_sends_the_sidecar_to_a_client_that_accepts_gzip(daemons):
    assert gzipped(both(daemons, "/static/a.html"), SIDECAR)


def test_gzip_static_on_sends_the_file_to_a_client_that_does_not(daemons):
    assert identity(both(daemons, "/static/a.html", headers=()))


def test_gzip_static_on_sends_the_sidecar_with_gzip_off(daemons):
    assert gzipped(both(daemons, "/static-only/a.html"), SIDECAR)


def test_gzip_static_sends_the_sidecar_of_a_type_gzip_types_does_not_list(daemons):
    assert gzipped(both(daemons, "/static/app.js"), SIDECAR)
    assert identity(both(daemons, "/on/app.js"))


def test_gzip_static_sends_the_sidecar_of_a_file_under_gzip_min_length(daemons):
    assert gzipped(both(daemons, "/static/small.html"), SIDECAR)


def test_gzip_static_always_sends_the_sidecar_to_every_client(daemons):
    assert gzipped(both(daemons, "/always/a.html", headers=()), SIDECAR)


def test_gzip_static_always_sends_the_sidecar_to_a_client_holding_the_files_etag(daemons):
    """The identity's ETag (from a location that sends the file as it is) does not stand
    for the sidecar: 200, not 304."""
    (theirs, (ours, ports)) = daemons
    seen = []
    for port in (theirs.ports[0], ports[0]):
        _, fields, _ = exchange(port, "/always-as-is/a.html")
        seen.append(observe(port, "/always/a.html",
                            headers=(("If-None-Match", fields["etag"]),)))
    assert seen[0] == seen[1] and gzipped(seen[0], SIDECAR), seen


def test_no_sidecar_is_sent_by_default(daemons):
    assert gzipped(both(daemons, "/plain/a.html"))


# ------------------------------------------------------------------- lfhttpd's own codings


@pytest.fixture
def ours_only(tree, tmp_path):
    started = []

    def start(text):
        s, ports = start_lfhttpd(tmp_path / f"s{len(started)}",
                                 text.replace("ROOT", str(tree)))
        started.append(s)
        return ports[0]
    yield start
    for s in started:
        check_clean_exit(s)


BR_SITE = """\
    gzip on;
    server {
        listen 127.0.0.1:{port0};
        root ROOT;
        location /on/ { }
        location /off/ { gzip off; }
        location /other/ { gzip off; brotli on; }
    }
    server { listen 127.0.0.1:{port1}; }
"""


def test_gzip_off_in_a_location_turns_off_br_and_zstd_too(ours_only):
    port = ours_only(BR_SITE)
    seen = observe(port, "/off/a.html", headers=(("Accept-Encoding", "br, zstd, gzip"),))
    assert identity(seen), seen
    seen = observe(port, "/on/a.html", headers=(("Accept-Encoding", "br"),))
    assert seen["content-encoding"] == "br", seen


def test_brotli_on_in_a_location_with_gzip_off_offers_br_alone(ours_only):
    port = ours_only(BR_SITE)
    seen = observe(port, "/other/a.html", headers=(("Accept-Encoding", "br"),))
    assert seen["content-encoding"] == "br", seen
    seen = observe(port, "/other/a.html")
    assert identity(seen), seen


# ------------------------------------------------------------------- proxied answers

PROXY_SITE = """\
    gzip on;
    server {
        listen 127.0.0.1:{port0};
        location /on/ { proxy_pass http://127.0.0.1:UP; }
        location /off/ { proxy_pass http://127.0.0.1:UP; gzip off; }
        location /css/ { proxy_pass http://127.0.0.1:UP; gzip_types text/css; }
        location /min/ { proxy_pass http://127.0.0.1:UP; gzip_min_length 20000; }
        location /expired/ { proxy_pass http://127.0.0.1:UP; gzip_proxied expired; }
        location /no-cache/ { proxy_pass http://127.0.0.1:UP; gzip_proxied no-cache; }
    }
"""

NGINX_PROXY = "proxy_http_version 1.1;\n        proxy_buffering off;\n"


def generated(size):
    """_big's body: byte i is i % 251."""
    return bytes(i % 251 for i in range(size))


@pytest.fixture(scope="module")
def proxied(tmp_path_factory):
    from proxy_harness import Upstream
    up = Upstream()
    text = PROXY_SITE.replace("UP", str(up.ports[0]))
    nginx_text = text.replace("proxy_pass http://127.0.0.1:%d;" % up.ports[0],
                              "proxy_pass http://127.0.0.1:%d;\n        %s"
                              % (up.ports[0], NGINX_PROXY))
    theirs = ours = None
    try:
        theirs = Nginx(tmp_path_factory.mktemp("nginx-proxy"), None, nginx_text, http=True)
        ours = start_lfhttpd(tmp_path_factory.mktemp("lfhttpd-proxy"), text)
        yield theirs, ours
    finally:
        if theirs:
            theirs.stop()
        if ours:
            check_clean_exit(ours[0])
        up.stop()


def big(path, size=10000, type="text/html", *fields):
    extra = "".join(f"&h={f}" for f in fields)
    return f"{path}_big?mb={size / 1048576}&type={type}{extra}"


def test_proxied_answer_is_compressed_where_gzip_is_on(proxied):
    assert gzipped(both(proxied, big("/on/")), generated(10000))


def test_proxied_answer_is_not_compressed_in_a_location_with_gzip_off(proxied):
    assert identity(both(proxied, big("/off/")), generated(10000))


def test_proxied_answer_of_a_type_a_location_adds_is_compressed(proxied):
    assert gzipped(both(proxied, big("/css/", type="text/css")), generated(10000))
    assert identity(both(proxied, big("/on/", type="text/css")), generated(10000))


def test_proxied_answer_shorter_than_the_locations_min_length_is_not_compressed(proxied):
    assert identity(both(proxied, big("/min/")), generated(10000))


def test_gzip_proxied_expired_compresses_an_upstream_answer_already_expired(proxied):
    past = "Expires:Thu,%2001%20Jan%201970%2000:00:01%20GMT"
    assert gzipped(both(proxied, big("/expired/", 10000, "text/html", past),
                        headers=(AE, VIA)), generated(10000))


def test_gzip_proxied_expired_refuses_an_upstream_answer_expiring_later(proxied):
    later = "Expires:Thu,%2031%20Dec%202037%2023:55:55%20GMT"
    assert identity(both(proxied, big("/expired/", 10000, "text/html", later),
                         headers=(AE, VIA)), generated(10000))


def test_gzip_proxied_expired_refuses_an_upstream_answer_with_cache_control(proxied):
    cc = "Cache-Control:max-age=60"
    assert identity(both(proxied, big("/expired/", 10000, "text/html", cc),
                         headers=(AE, VIA)), generated(10000))


def test_gzip_proxied_no_cache_compresses_an_upstream_answer_saying_no_cache(proxied):
    cc = "Cache-Control:private,%20no-cache"
    assert gzipped(both(proxied, big("/no-cache/", 10000, "text/html", cc),
                        headers=(AE, VIA)), generated(10000))
