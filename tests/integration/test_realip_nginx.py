"""The client's real address (realip), the PROXY protocol, `satisfy` and `stub_status`,
against nginx, the oracle.

One configuration is run as written by nginx and by lfhttpd. Its first server trusts
127.0.0.1 (where the tests connect from) and names the client by X-Real-IP, X-Forwarded-For
or a field of its own, per location; its second listens with `proxy_protocol` and takes the
client from the header. Every answer carries `X-Who: $remote_addr|$remote_port|
$realip_remote_addr` (and the $proxy_protocol_* on the second server), so one request shows
which address each server decided on. Each row states what nginx answers, and nginx is
checked against it; then lfhttpd must answer the same.
"""
import os
import re
import socket
import ssl
import struct
import subprocess
import time

import pytest

from conftest import BIN, Nginx, Server, check_clean_exit, free_port, scaled, wait_until, \
    with_ports

SITE = r"""
client_header_timeout 2s;
server {
    listen 127.0.0.1:{port0};
    root ROOT/www;
    set_real_ip_from 127.0.0.1;
    add_header X-Who "$remote_addr|$remote_port|$realip_remote_addr|$realip_remote_port" always;

    location /xri/ { alias ROOT/www/; }
    location /xff/ { real_ip_header X-Forwarded-For; alias ROOT/www/; }
    location /xffr/ {
        real_ip_header X-Forwarded-For;
        real_ip_recursive on;
        set_real_ip_from 127.0.0.1;
        set_real_ip_from 10.0.0.0/8;
        set_real_ip_from 2001:db8::/32;
        alias ROOT/www/;
    }
    location /custom/ { real_ip_header X-Client; alias ROOT/www/; }
    location /untrusted/ {
        set_real_ip_from 192.0.2.0/24;
        real_ip_header X-Forwarded-For;
        alias ROOT/www/;
    }
    location /acl/ {
        real_ip_header X-Forwarded-For;
        allow 10.0.0.0/8;
        deny all;
        alias ROOT/www/;
    }
    location /any/ {
        satisfy any;
        allow 10.0.0.0/8;
        deny all;
        auth_basic "realip";
        auth_basic_user_file ROOT/htpasswd;
        alias ROOT/www/;
    }
    location /all/ {
        satisfy all;
        allow 10.0.0.0/8;
        deny all;
        auth_basic "realip";
        auth_basic_user_file ROOT/htpasswd;
        alias ROOT/www/;
    }
    location /anydeny/ { satisfy any; deny all; alias ROOT/www/; }
    location /anynomatch/ { satisfy any; deny 10.0.0.0/8; alias ROOT/www/; }
    location /anypassword/ {
        satisfy any;
        auth_basic "realip";
        auth_basic_user_file ROOT/htpasswd;
        alias ROOT/www/;
    }
    location /anyparent/ {
        satisfy any;
        location /anyparent/child/ {
            allow 10.0.0.0/8;
            deny all;
            auth_basic "realip";
            auth_basic_user_file ROOT/htpasswd;
            alias ROOT/www/;
        }
    }
    location /proxied/ {
        real_ip_header X-Forwarded-For;
        proxy_set_header X-Real-IP $remote_addr;
        proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
        proxy_pass http://127.0.0.1:{port3}/;
    }
    location = /status { stub_status; }
    location = /conns {
        return 200 "$connections_active $connections_reading $connections_writing $connections_waiting\n";
    }
}
server {
    listen 127.0.0.1:{port1} proxy_protocol;
    root ROOT/www;
    set_real_ip_from 127.0.0.1;
    real_ip_header proxy_protocol;
    add_header X-Who "$remote_addr|$remote_port|$realip_remote_addr|$proxy_protocol_addr|$proxy_protocol_port|$proxy_protocol_server_addr|$proxy_protocol_server_port" always;
    location / { }
    location /other/ { set_real_ip_from 192.0.2.0/24; alias ROOT/www/; }
}
server {
    listen 127.0.0.1:{port3};
    root ROOT/www;
    location / {
        return 200 "$http_x_real_ip|$http_x_forwarded_for\n";
    }
    location /missing/ { error_page 404 /page/; }
    location /page/ {
        set_real_ip_from 127.0.0.1;
        alias ROOT/www/;
        add_header X-Who "$remote_addr|$realip_remote_addr" always;
    }
}
server {
    listen 127.0.0.1:{port2} ssl proxy_protocol;
    ssl_certificate ROOT/cert.pem;
    ssl_certificate_key ROOT/key.pem;
    root ROOT/www;
    add_header X-Who "$remote_addr|$proxy_protocol_addr|$proxy_protocol_port" always;
    location / { }
}
"""

LFHTTPD_TOP = "threads 2;\nerror_log stderr info;\nshutdown_timeout 5s;\n"
PASSWORD = ("u", "pw")


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("realip")
    (root / "www").mkdir()
    (root / "www" / "index.html").write_text("index\n")
    hashed = subprocess.run(["openssl", "passwd", "-5", "-salt", "realipsalt", PASSWORD[1]],
                            check=True, capture_output=True, text=True).stdout.strip()
    (root / "htpasswd").write_text(f"{PASSWORD[0]}:{hashed}\n")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=localhost", "-keyout", str(root / "key.pem"),
                    "-out", str(root / "cert.pem")], check=True, capture_output=True)
    return root


def site(tree):
    return SITE.replace("ROOT", str(tree))


def start_lfhttpd(dirpath, tree):
    for attempt in range(3):  # a port picked may be taken before lfhttpd binds it
        ports = [free_port() for _ in range(4)]
        try:
            return Server(dirpath / f"try{attempt}", None,
                          conf=LFHTTPD_TOP + "http {\n" + with_ports(site(tree), ports) +
                          "}\n"), ports
        except RuntimeError as e:
            if "in use" not in str(e) or attempt == 2:
                raise


@pytest.fixture(scope="module")
def daemons(tree, tmp_path_factory):
    """(nginx's ports, lfhttpd's ports, nginx, lfhttpd)."""
    theirs = Nginx(tmp_path_factory.mktemp("nginx"), None, site(tree), http=True)
    try:
        ours, ports = start_lfhttpd(tmp_path_factory.mktemp("lfhttpd"), tree)
    except BaseException:
        theirs.stop()
        raise
    yield theirs.ports, ports, theirs, ours
    theirs.stop()
    check_clean_exit(ours)


def raw(port, data, pieces=(), pause=0.0, tls=False):
    """Send data (then each of pieces after a pause) on a new connection; what comes back
    until the server closes, b"" when it closes unanswered (a reset included)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=scaled(10))
    try:
        s.sendall(data)
        for p in pieces:
            time.sleep(pause)
            s.sendall(p)
        if tls:
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            s = ctx.wrap_socket(s, server_hostname="localhost")
            s.sendall(REQUEST)
        out = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return out
            out += chunk
    except (ConnectionResetError, BrokenPipeError):
        return b""
    finally:
        s.close()


REQUEST = b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"


def get(port, path, headers=()):
    head = f"GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers)
    return raw(port, (head + "\r\n").encode("latin-1"))


def answer(data):
    """(status, X-Who with the connection's own port masked, WWW-Authenticate, body)."""
    if not data:
        return None
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    fields = {k.strip().lower(): v.strip()
              for k, _, v in (line.partition(":") for line in lines[1:])}
    who = fields.get("x-who")
    return int(lines[0].split()[1]), who, fields.get("www-authenticate"), body


def masked(who, port):
    """X-Who with the client's own ephemeral port written as PORT."""
    return who and re.sub(r"\|\d{4,5}(?=\||$)", lambda m: "|PORT" if int(m.group(0)[1:]) not in
                          (5555, 6666, 443, 80, 8080) else m.group(0), who)


def basic():
    import base64
    return "Basic " + base64.b64encode(":".join(PASSWORD).encode()).decode()


# (name, path, headers, status, X-Who as nginx answers, PORT: the connection's own port)
HEADER_ROWS = [
    ("x_real_ip_names_the_client", "/xri/", [("X-Real-IP", "203.0.113.7")], 200,
     "203.0.113.7||127.0.0.1|PORT"),
    ("x_real_ip_with_a_port_sets_remote_port", "/xri/", [("X-Real-IP", "203.0.113.7:5555")],
     200, "203.0.113.7|5555|127.0.0.1|PORT"),
    ("x_real_ip_ipv6_in_brackets_with_a_port", "/xri/", [("X-Real-IP", "[2001:db8::5]:8080")],
     200, "2001:db8::5|8080|127.0.0.1|PORT"),
    ("x_real_ip_that_is_no_address_changes_nothing", "/xri/", [("X-Real-IP", "nonsense")],
     200, "127.0.0.1|PORT|127.0.0.1|PORT"),
    ("x_real_ip_first_field_counts", "/xri/",
     [("X-Real-IP", "203.0.113.1"), ("X-Real-IP", "203.0.113.2")], 200,
     "203.0.113.1||127.0.0.1|PORT"),
    ("no_field_keeps_the_connections_address", "/xri/", [], 200,
     "127.0.0.1|PORT|127.0.0.1|PORT"),
    ("x_forwarded_for_takes_the_last_address", "/xff/",
     [("X-Forwarded-For", "198.51.100.1, 10.1.1.1, 203.0.113.9")], 200,
     "203.0.113.9||127.0.0.1|PORT"),
    ("x_forwarded_for_not_recursive_takes_a_trusted_last_address", "/xff/",
     [("X-Forwarded-For", "198.51.100.1, 127.0.0.1")], 200, "127.0.0.1||127.0.0.1|PORT"),
    ("x_forwarded_for_last_of_the_last_field", "/xff/",
     [("X-Forwarded-For", "198.51.100.1"), ("X-Forwarded-For", "203.0.113.4")], 200,
     "203.0.113.4||127.0.0.1|PORT"),
    ("recursive_skips_trusted_proxies", "/xffr/",
     [("X-Forwarded-For", "198.51.100.1, 10.1.1.1, 10.2.2.2")], 200,
     "198.51.100.1||127.0.0.1|PORT"),
    ("recursive_stops_at_the_first_untrusted", "/xffr/",
     [("X-Forwarded-For", "10.9.9.9, 198.51.100.1, 10.1.1.1")], 200,
     "198.51.100.1||127.0.0.1|PORT"),
    ("recursive_all_trusted_gives_the_first", "/xffr/",
     [("X-Forwarded-For", "10.9.9.9, 10.1.1.1")], 200, "10.9.9.9||127.0.0.1|PORT"),
    ("recursive_goes_through_earlier_fields", "/xffr/",
     [("X-Forwarded-For", "198.51.100.3"), ("X-Forwarded-For", "10.1.1.1, 10.2.2.2")], 200,
     "198.51.100.3||127.0.0.1|PORT"),
    ("recursive_ipv6_proxies", "/xffr/",
     [("X-Forwarded-For", "2001:db9::1, 2001:db8::7")], 200, "2001:db9::1||127.0.0.1|PORT"),
    ("recursive_separators_and_spaces", "/xffr/",
     [("X-Forwarded-For", "198.51.100.8 10.1.1.1,, ")], 200,
     "198.51.100.8||127.0.0.1|PORT"),
    ("own_field_name", "/custom/", [("x-client", "203.0.113.77")], 200,
     "203.0.113.77||127.0.0.1|PORT"),
    ("untrusted_connection_is_not_replaced", "/untrusted/",
     [("X-Forwarded-For", "203.0.113.9")], 200, "127.0.0.1|PORT|127.0.0.1|PORT"),
    ("allow_deny_see_the_real_address_allowed", "/acl/", [("X-Forwarded-For", "10.3.3.3")],
     200, "10.3.3.3||127.0.0.1|PORT"),
    ("allow_deny_see_the_real_address_denied", "/acl/",
     [("X-Forwarded-For", "203.0.113.3")], 403, "203.0.113.3||127.0.0.1|PORT"),
]

# (name, path, headers, status, asks for a password)
SATISFY_ROWS = [
    ("any_neither_is_401", "/any/", [], 401, True),
    ("any_password_alone_suffices", "/any/", [("Authorization", "BASIC")], 200, False),
    ("any_wrong_password_is_401", "/any/", [("Authorization", "Basic dTp4")], 401, True),
    ("any_allowed_address_alone_suffices", "/any/", [("X-Real-IP", "10.0.0.5")], 200, False),
    ("any_allowed_address_with_a_wrong_password", "/any/",
     [("X-Real-IP", "10.0.0.5"), ("Authorization", "Basic dTp4")], 200, False),
    ("all_password_without_the_address_is_403", "/all/", [("Authorization", "BASIC")], 403,
     False),
    ("all_address_without_the_password_is_401", "/all/", [("X-Real-IP", "10.0.0.5")], 401,
     True),
    ("all_both_pass", "/all/", [("X-Real-IP", "10.0.0.5"), ("Authorization", "BASIC")], 200,
     False),
    ("any_only_a_deny_rule_is_403", "/anydeny/", [], 403, False),
    ("any_no_rule_matches_and_no_password_asked_passes", "/anynomatch/", [], 200, False),
    ("any_no_rule_matches_denied_address", "/anynomatch/", [("X-Real-IP", "10.0.0.5")], 403,
     False),
    ("any_password_only_asks_it", "/anypassword/", [], 401, True),
    ("any_inherited_by_a_nested_location", "/anyparent/child/", [("X-Real-IP", "10.0.0.5")],
     200, False),
]


def row_headers(headers):
    return [(k, basic() if v == "BASIC" else v) for k, v in headers]


@pytest.mark.parametrize("name,path,headers,status,who", HEADER_ROWS,
                         ids=[r[0] for r in HEADER_ROWS])
def test_real_ip_header_as_nginx(daemons, name, path, headers, status, who):
    theirs, ours, _, _ = daemons
    t = answer(get(theirs[0], path, headers))
    assert (t[0], masked(t[1], theirs[0])) == (status, who), "nginx answers otherwise"
    o = answer(get(ours[0], path, headers))
    assert (o[0], masked(o[1], ours[0])) == (status, who)


@pytest.mark.parametrize("name,path,headers,status,asks", SATISFY_ROWS,
                         ids=[r[0] for r in SATISFY_ROWS])
def test_satisfy_as_nginx(daemons, name, path, headers, status, asks):
    theirs, ours, _, _ = daemons
    t = answer(get(theirs[0], path, row_headers(headers)))
    assert (t[0], t[2] is not None) == (status, asks), "nginx answers otherwise"
    o = answer(get(ours[0], path, row_headers(headers)))
    assert (o[0], o[2] is not None) == (status, asks)


@pytest.mark.parametrize("xff,upstream_sees", [
    ("198.51.100.1, 203.0.113.9", b"203.0.113.9|198.51.100.1, 203.0.113.9, 203.0.113.9\n"),
    (None, b"127.0.0.1|127.0.0.1\n"),
])
def test_proxy_passes_the_real_address_as_nginx(daemons, xff, upstream_sees):
    theirs, ours, _, _ = daemons
    headers = [("X-Forwarded-For", xff)] if xff else []
    assert answer(get(theirs[0], "/proxied/", headers))[3] == upstream_sees, "nginx"
    assert answer(get(ours[0], "/proxied/", headers))[3] == upstream_sees


def test_error_pages_location_decides_the_address_as_nginx(daemons):
    # the page's location trusts the connection, the first one did not: the answer and
    # its filters see the address the page's location decided (nginx's preaccess phase
    # runs again after the internal redirect)
    theirs, ours, _, _ = daemons
    for port in (theirs[3], ours[3]):
        for _ in range(3):
            t = answer(get(port, "/missing/x", [("X-Real-IP", "203.0.113.70")]))
            assert t[:2] == (404, "203.0.113.70|127.0.0.1")


def test_cgi_sees_the_real_address(tmp_path):
    cgi = tmp_path / "cgi"
    cgi.mkdir()
    script = cgi / "env.sh"
    script.write_text('#!/bin/sh\nprintf "Content-Type: text/plain\\r\\n\\r\\n'
                      '%s|%s\\n" "$REMOTE_ADDR" "$REMOTE_PORT"\n')
    script.chmod(0o755)
    conf = (LFHTTPD_TOP + f'listen 127.0.0.1:0;\nroot "{tmp_path}";\n'
            f'set_real_ip_from 127.0.0.1;\ncgi /cgi-bin/ "{cgi}";\n')
    srv = Server(tmp_path / "srv", None, conf=conf)
    def env(real_ip):  # HTTP/1.0: the script's answer unchunked
        return answer(raw(srv.port, b"GET /cgi-bin/env.sh HTTP/1.0\r\nX-Real-IP: " +
                          real_ip + b"\r\n\r\n"))[3]
    try:
        assert env(b"203.0.113.60") == b"203.0.113.60|\n"
        assert env(b"203.0.113.61:4444") == b"203.0.113.61|4444\n"
    finally:
        check_clean_exit(srv)


def test_access_log_writes_the_real_address(tree, tmp_path):
    conf = (LFHTTPD_TOP + f'access_log "{tmp_path}/access.log";\nlisten 127.0.0.1:0;\n'
            f'root "{tree}/www";\nset_real_ip_from 127.0.0.1;\n')
    srv = Server(tmp_path / "srv", None, conf=conf)
    try:
        assert answer(get(srv.port, "/", [("X-Real-IP", "203.0.113.50")]))[0] == 200
        assert wait_until(lambda: os.path.exists(f"{tmp_path}/access.log") and
                          open(f"{tmp_path}/access.log").read().startswith("203.0.113.50 "),
                          scaled(5))
    finally:
        check_clean_exit(srv)


@pytest.mark.parametrize("text,message", [
    ("set_real_ip_from 10.0.0.0/99;", 'set_real_ip_from: invalid address "10.0.0.0/99"'),
    ("set_real_ip_from no-such-host.invalid;",
     'host not found in set_real_ip_from "no-such-host.invalid"'),
    ("real_ip_recursive maybe;", 'real_ip_recursive: expected "on" or "off", not "maybe"'),
    ("satisfy some;", 'satisfy: expected "all" or "any", not "some"'),
    ("server { listen 127.0.0.1:0 proxy_protocol bogus; }",
     'unsupported parameter "bogus"'),
    ("server { location /s { stub_status a b; } }", "stub_status takes 0 to 1 values"),
])
def test_bad_statements_are_refused_naming_file_and_line(tmp_path, text, message):
    conf = tmp_path / "bad.conf"
    conf.write_text("listen 127.0.0.1:0;\n" + text + "\n")
    r = subprocess.run([BIN, "-t", "-c", str(conf)], capture_output=True, text=True)
    assert r.returncode == 1
    assert f"{conf}:2: " in r.stderr and message in r.stderr, r.stderr


# --- PROXY protocol ------------------------------------------------------------------------

def v2(command=0x21, family=0x11, addrs=None, tlv=b""):
    """A PROXY protocol v2 header, built byte by byte from the specification."""
    if addrs is None:
        addrs = (socket.inet_aton("192.0.2.1") + socket.inet_aton("198.51.100.2") +
                 struct.pack("!HH", 5555, 443))
    body = addrs + tlv
    return (b"\r\n\r\n\x00\r\nQUIT\n" + bytes([command, family]) +
            struct.pack("!H", len(body)) + body)


V2_IPV6 = v2(family=0x21, addrs=socket.inet_pton(socket.AF_INET6, "2001:db8::1") +
             socket.inet_pton(socket.AF_INET6, "2001:db8::2") + struct.pack("!HH", 6666, 80),
             tlv=b"\x04\x00\x04abcd")

# (name, header bytes, path, X-Who as nginx answers)
PROXY_ROWS = [
    ("v1_tcp4", b"PROXY TCP4 192.0.2.1 198.51.100.2 5555 443\r\n", "/",
     "192.0.2.1|5555|127.0.0.1|192.0.2.1|5555|198.51.100.2|443"),
    ("v1_tcp6", b"PROXY TCP6 2001:db8::1 2001:db8::2 6666 80\r\n", "/",
     "2001:db8::1|6666|127.0.0.1|2001:db8::1|6666|2001:db8::2|80"),
    ("v1_unknown_keeps_the_connections_address", b"PROXY UNKNOWN\r\n", "/",
     "127.0.0.1|PORT|127.0.0.1||||"),
    ("v2_tcp4", v2(), "/", "192.0.2.1|5555|127.0.0.1|192.0.2.1|5555|198.51.100.2|443"),
    ("v2_tcp6_with_a_tlv", V2_IPV6, "/",
     "2001:db8::1|6666|127.0.0.1|2001:db8::1|6666|2001:db8::2|80"),
    ("v2_local_keeps_the_connections_address", v2(command=0x20, family=0, addrs=b""), "/",
     "127.0.0.1|PORT|127.0.0.1||||"),
    # the server's settings decide first (nginx's post-read phase): the location's own
    # list is not asked again
    ("server_level_decides_before_the_location", b"PROXY TCP4 192.0.2.1 198.51.100.2 5555 443\r\n",
     "/other/", "192.0.2.1|5555|127.0.0.1|192.0.2.1|5555|198.51.100.2|443"),
]


@pytest.mark.parametrize("name,header,path,who", PROXY_ROWS, ids=[r[0] for r in PROXY_ROWS])
def test_proxy_protocol_as_nginx(daemons, name, header, path, who):
    theirs, ours, _, _ = daemons
    req = f"GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".encode()
    t = answer(raw(theirs[1], header + req))
    assert (t[0], masked(t[1], theirs[1])) == (200, who), "nginx answers otherwise"
    o = answer(raw(ours[1], header + req))
    assert (o[0], masked(o[1], ours[1])) == (200, who)


BROKEN = [
    ("missing", b""),
    ("v1_bad_protocol", b"PROXY UDP4 192.0.2.1 198.51.100.2 5555 443\r\n"),
    ("v1_bad_port", b"PROXY TCP4 192.0.2.1 198.51.100.2 5555 x\r\n"),
    ("v1_no_crlf", b"PROXY TCP4 192.0.2.1 198.51.100.2 5555 443\n"),
    ("v2_version_3", b"\r\n\r\n\x00\r\nQUIT\n\x31\x11\x00\x0c" + b"\x00" * 12),
]


@pytest.mark.parametrize("name,header", BROKEN, ids=[b[0] for b in BROKEN])
def test_broken_proxy_header_closes_and_logs_one_line(daemons, name, header):
    theirs, ours, nginx, lfhttpd = daemons
    for port, log in ((theirs[1], nginx.log), (ours[1], lfhttpd.error_log)):
        line = f"while reading PROXY protocol, client: 127.0.0.1, server: 127.0.0.1:{port}"
        before = log().count(line)
        assert raw(port, header + REQUEST) == b""
        assert wait_until(lambda: log().count(line) == before + 1, scaled(5)), log()[-2000:]


def test_header_in_pieces_is_read_whole(daemons):
    # nginx wants the header in its first read; lfhttpd reads it as it comes
    _, ours, _, _ = daemons
    head = b"PROXY TCP4 192.0.2.1 198.51.100.2 5555 443\r\n"
    data = raw(ours[1], head[:3], [head[3:20], head[20:], REQUEST], pause=0.1)
    assert answer(data)[1].startswith("192.0.2.1|5555|")


def test_v2_header_in_pieces_is_read_whole(daemons):
    _, ours, _, _ = daemons
    h = v2()
    data = raw(ours[1], h[:5], [h[5:14], h[14:17], h[17:] + REQUEST], pause=0.1)
    assert answer(data)[1].startswith("192.0.2.1|5555|")


def test_header_that_never_ends_is_closed_at_client_header_timeout(daemons):
    _, ours, _, lfhttpd = daemons
    start = time.monotonic()
    s = socket.create_connection(("127.0.0.1", ours[1]), timeout=scaled(10))
    try:
        s.sendall(b"PROXY TCP4 192.0.2.1")
        assert s.recv(100) == b""
    except ConnectionResetError:
        pass
    finally:
        s.close()
    assert 1.5 <= time.monotonic() - start <= scaled(6)


def test_proxy_header_before_the_tls_handshake(daemons):
    theirs, ours, _, _ = daemons
    head = b"PROXY TCP4 192.0.2.9 198.51.100.2 7777 443\r\n"
    for port in (theirs[2], ours[2]):
        assert answer(raw(port, head, tls=True))[:2] == (200, "127.0.0.1|192.0.2.9|7777")


def test_proxy_header_in_pieces_before_the_tls_handshake(daemons):
    _, ours, _, _ = daemons
    head = b"PROXY TCP4 192.0.2.9 198.51.100.2 7777 443\r\n"
    data = raw(ours[2], head[:10], [head[10:]], pause=0.1, tls=True)
    assert answer(data)[:2] == (200, "127.0.0.1|192.0.2.9|7777")


# --- stub_status ---------------------------------------------------------------------------

STUB = re.compile(rb"\AActive connections: (\d+) \nserver accepts handled requests\n"
                  rb" (\d+) (\d+) (\d+) \nReading: (\d+) Writing: (\d+) Waiting: (\d+) \n\Z")


def test_stub_status_has_nginxs_shape(daemons):
    theirs, ours, _, _ = daemons
    for port in (theirs[0], ours[0]):
        data = get(port, "/status")
        head, _, body = data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 ") and b"Content-Type: text/plain\r\n" in head
        m = STUB.match(body)
        assert m, body
        active, accepts, handled, requests, reading, writing, waiting = map(int, m.groups())
        assert writing >= 1 and active == reading + writing + waiting
        assert accepts >= handled >= 1 and requests >= 1


def test_stub_status_counts_accepts_and_requests(daemons):
    _, ours, _, _ = daemons
    first = [int(x) for x in STUB.match(get(ours[0], "/status").partition(b"\r\n\r\n")[2])
             .groups()]
    get(ours[0], "/xri/")
    second = [int(x) for x in STUB.match(get(ours[0], "/status").partition(b"\r\n\r\n")[2])
              .groups()]
    assert second[1] - first[1] == 2 and second[2] - first[2] == 2
    assert second[3] - first[3] == 2


def test_stub_status_refuses_post_as_nginx(daemons):
    theirs, ours, _, _ = daemons
    for port in (theirs[0], ours[0]):
        data = raw(port, b"POST /status HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n"
                         b"Connection: close\r\n\r\n")
        assert answer(data)[0] == 405


def test_connections_variables_as_nginx(daemons):
    theirs, ours, _, _ = daemons
    for port in (theirs[0], ours[0]):
        assert answer(get(port, "/conns"))[3] == b"1 0 1 0\n"


def test_idle_keep_alive_connection_counts_as_waiting(daemons):
    theirs, ours, _, _ = daemons
    for port in (theirs[0], ours[0]):
        idle = socket.create_connection(("127.0.0.1", port), timeout=scaled(10))
        try:
            idle.sendall(b"GET /xri/ HTTP/1.1\r\nHost: t\r\n\r\n")
            assert idle.recv(65536).startswith(b"HTTP/1.1 200")
            assert wait_until(lambda: answer(get(port, "/conns"))[3] == b"2 0 1 1\n",
                              scaled(5))
        finally:
            idle.close()
