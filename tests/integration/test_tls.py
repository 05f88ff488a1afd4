"""HTTPS through the real binary: the issue's configuration as written, the certificate
chosen by SNI and by the client's signature algorithms, full chains, ALPN, session
resumption (tickets and session IDs, across threads), the protocol versions, plain HTTP
and TLS sent to the wrong port, what HTTPS changes in answers ($scheme, redirects,
X-Forwarded-Proto, CGI's HTTPS), keep-alive, pipelining and bodies over TLS, and
certificates at reload and at load. Last, nginx answers the issue's configuration and
lfhttpd must answer as it does.

Clients: Python's ssl module, `openssl s_client` and curl. Certificates are made with
`openssl` into the test's directory (tls_harness.py): a root CA and an intermediate
sign the leaves, whose files hold the full chain.
"""
import concurrent.futures
import hashlib
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import time

import pytest

from conftest import (BIN, SANITIZED, Client, Nginx, Server, check_clean_exit, free_port,
                      scaled, wait_until, with_ports)
from proxy_harness import Upstream
from tls_harness import (Pki, client_hello, context, get, line_of,
                         new_key, pair_of, rss_kib, s_client, s_client_leaf,
                         s_client_reused, ssl_lines, text, tls_client,
                         tls_conf, tls_socket)

TLS12, TLS13 = ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3
MIB = 1 << 20


def request(target="/", host="example.org", method="GET", extra=()):
    return ("\r\n".join([f"{method} {target} HTTP/1.1", f"Host: {host}", *extra])
            + "\r\n\r\n").encode("latin-1")


# ------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """The CA and the leaves the tests serve (each file a full chain; read only)."""
    p = Pki(tmp_path_factory.mktemp("pki"))
    p.ec = p.issue("example.org")
    p.rsa = p.issue("example.org", "rsa")
    p.names = {name: p.issue(name) for name in ("a.test", "b.test", "c.test")}
    return p


@pytest.fixture
def site(docroot):
    """A document root with an index, a page, a stylesheet and a directory."""
    (docroot / "index.html").write_text("index\n")
    (docroot / "page.html").write_text("a page of text\n")
    (docroot / "style.css").write_text("body { color: black }\n")
    (docroot / "dir").mkdir()
    (docroot / "dir" / "index.html").write_text("dir index\n")
    return docroot


@pytest.fixture
def tls(start_server):
    """tls(port, **kw) -> a conftest Client over TLS (tls_harness.tls_client); each is
    closed when the test ends, before the servers stop."""
    clients = []

    def connect(port, **kw):
        c = tls_client(port, **kw)
        clients.append(c)
        return c

    yield connect
    for c in clients:
        c.close()


def https(start_server, site, *pairs, extra="", threads=4):
    """A server whose only address is TLS (port 0) with the pairs' certificates."""
    return start_server(site, conf=tls_conf(site, *pairs, extra=extra, threads=threads))


def start_on_ports(start_server, site, text, count):
    """A server on `text` whose {portN} are free ports picked here: (server, ports), once
    every port accepts."""
    for attempt in range(3):  # a port picked may be taken before lfhttpd binds it
        ports = [free_port() for _ in range(count)]
        try:
            s = start_server(site, conf=with_ports(text, ports))
            break
        except RuntimeError as e:
            if "in use" not in str(e) or attempt == 2:
                raise
    assert wait_until(lambda: all(accepts("127.0.0.1", p) for p in ports), scaled(10))
    return s, ports


def accepts(host, port):
    try:
        socket.create_connection((host, port), timeout=1).close()
        return True
    except OSError:
        return False


# ------------------------------------------------------------------- the issue's file

# The issue's configuration; {port0} stands for 8443, {port1} for 8080, and [::1] for [::]
# (a test listens on loopback only).
ISSUE = """\
server {
    listen 127.0.0.1:{port0} ssl;
    listen [::1]:{port0} ssl;
    server_name example.org;
    ssl_certificate     CERT;
    ssl_certificate_key KEY;
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_ciphers ECDHE+AESGCM:ECDHE+CHACHA20;
    ssl_session_timeout 1d;
    ssl_session_tickets on;
    add_header Strict-Transport-Security "max-age=63072000" always;
    root ROOT;
}
server {
    listen 127.0.0.1:{port1};
    server_name example.org;
    return 301 https://$host$request_uri;
}
"""

TOP = "threads 2;\nerror_log stderr debug;\nshutdown_timeout 5s;\n"


def issue_text(pair, root):
    return ISSUE.replace("CERT", pair.cert).replace("KEY", pair.key).replace("ROOT", str(root))


@pytest.fixture
def issue_server(start_server, site, pki):
    """lfhttpd on the issue's configuration: (server, https port, http port)."""
    s, ports = start_on_ports(start_server, site, TOP + issue_text(pki.ec, site), 2)
    return s, ports[0], ports[1]


def test_issue_configuration_serves_the_site_over_https(issue_server, pki):
    _, port, _ = issue_server
    status, fields, body, _, _ = get(port, "/page.html", sni="example.org",
                                     ctx=context(cafile=pki.root))
    assert (status, body) == (200, b"a page of text\n")


def test_issue_configuration_sends_hsts(issue_server):
    _, port, _ = issue_server
    status, fields, _, _, _ = get(port, "/page.html", sni="example.org")
    assert status == 200
    assert fields.get("strict-transport-security") == "max-age=63072000"


def test_issue_configuration_sends_hsts_on_a_404_too(issue_server):
    _, port, _ = issue_server
    status, fields, _, _, _ = get(port, "/missing.html", sni="example.org")
    assert status == 404
    assert fields.get("strict-transport-security") == "max-age=63072000"


def test_issue_configuration_answers_on_the_ipv6_address_too(issue_server):
    _, port, _ = issue_server
    status, _, body, _, _ = get(port, "/page.html", sni="example.org", addr="::1")
    assert (status, body) == (200, b"a page of text\n")


def test_issue_configuration_redirects_plain_http_to_https(issue_server):
    s, _, plain = issue_server
    with socket.create_connection(("127.0.0.1", plain), timeout=scaled(10)) as sock:
        c = Client(sock)
        c.send(request("/a/b.html?x=1&y", host="example.org:%d" % plain,
                       extra=["Connection: close"]))
        status, fields, _, _ = c.read_response()
    assert status == 301
    assert fields["location"] == "https://example.org/a/b.html?x=1&y"
    assert "strict-transport-security" not in fields


def test_curl_fetches_the_issue_configuration_verifying_the_chain(issue_server, pki):
    _, port, _ = issue_server
    r = subprocess.run(["curl", "-sS", "--cacert", pki.root, "--resolve",
                        f"example.org:{port}:127.0.0.1", "-D", "-",
                        f"https://example.org:{port}/page.html"],
                       capture_output=True, timeout=scaled(20))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(b"HTTP/1.1 200")
    assert r.stdout.endswith(b"a page of text\n")


# ------------------------------------------------------------------- certificates

# Three names on one address; the second is the default server, so that choosing it over
# the first server shows.
SNI = """\
listen 127.0.0.1:{port0} ssl;
threads 2;
error_log stderr debug;
shutdown_timeout 5s;
server {
    listen 127.0.0.1:{port0} ssl;
    server_name a.test;
    root ROOT/a;
A}
server {
    listen 127.0.0.1:{port0} ssl default_server;
    server_name b.test;
    root ROOT/b;
B}
server {
    listen 127.0.0.1:{port0} ssl;
    server_name c.test *.c.test;
    root ROOT/c;
C}
"""


@pytest.fixture
def sni_server(start_server, docroot, pki):
    text = SNI.replace("ROOT", str(docroot))
    for name in "abc":
        (docroot / name).mkdir()
        (docroot / name / "index.html").write_text(f"site {name}\n")
        text = text.replace(f"{name.upper()}}}",
                            ssl_lines(pki.names[f"{name}.test"], indent="    ") + "}")
    s, ports = start_on_ports(start_server, docroot, text, 1)
    return ports[0]


@pytest.mark.parametrize("name", ["a.test", "b.test", "c.test"])
def test_sni_picks_the_certificate_of_the_server_named(sni_server, pki, name):
    leaf = get(sni_server, sni=name, host=name, ctx=context(cafile=pki.root))[4]
    assert leaf == pki.names[name].leaf


@pytest.mark.parametrize("name", ["a.test", "c.test"])
def test_curl_verifies_the_certificate_sni_picks(sni_server, pki, name):
    """curl checks the name: it fails unless the certificate served is the name's own."""
    r = subprocess.run(["curl", "-sS", "--cacert", pki.root, "--resolve",
                        f"{name}:{sni_server}:127.0.0.1", f"https://{name}:{sni_server}/"],
                       capture_output=True, timeout=scaled(20))
    assert (r.returncode, r.stdout) == (0, f"site {name[0]}\n".encode()), r.stderr


def test_sni_matches_a_wildcard_server_name(sni_server, pki):
    assert get(sni_server, sni="www.c.test", host="www.c.test")[4] == pki.names["c.test"].leaf


def test_absent_sni_gets_the_default_servers_certificate(sni_server, pki):
    assert get(sni_server, sni=None, host="b.test")[4] == pki.names["b.test"].leaf


def test_unknown_sni_gets_the_default_servers_certificate(sni_server, pki):
    assert get(sni_server, sni="nobody.test", host="b.test")[4] == pki.names["b.test"].leaf


def test_host_not_sni_decides_which_server_answers(sni_server, pki):
    status, _, body, _, leaf = get(sni_server, sni="a.test", host="c.test")
    assert leaf == pki.names["a.test"].leaf
    assert (status, body) == (200, b"site c\n")


def test_a_server_inherits_the_top_levels_certificate(start_server, site, pki):
    text = (tls_conf(site, pki.ec, listen="listen 127.0.0.1:{port0} ssl;")
            + "server {\n    server_name example.org;\n}\n")
    _, ports = start_on_ports(start_server, site, text, 1)
    status, _, body, _, leaf = get(ports[0], sni="example.org", ctx=context(cafile=pki.root))
    assert (status, leaf) == (200, pki.ec.leaf)


@pytest.mark.parametrize("version", ["-tls1_2", "-tls1_3"])
@pytest.mark.parametrize("kind, sigalgs", [
    ("ec", "ecdsa_secp256r1_sha256"),
    ("rsa", "rsa_pss_rsae_sha256:rsa_pkcs1_sha256"),
])
def test_client_limited_to_one_key_type_gets_that_certificate(start_server, site, pki,
                                                               version, kind, sigalgs):
    """RSA and ECDSA pairs in one server: the client's signature algorithms choose."""
    s = https(start_server, site, pki.rsa, pki.ec)
    r = s_client(s.port, version, "-sigalgs", sigalgs, sni="example.org")
    assert s_client_leaf(r) == getattr(pki, kind).leaf, text(r)


def test_full_chain_is_sent_and_verifies_against_the_root_alone(start_server, site, pki):
    s = https(start_server, site, pki.ec)
    # verification fails unless the server sends the intermediate with the leaf
    c = tls_socket(s.port, sni="example.org", ctx=context(cafile=pki.root))
    c.close()
    r = s_client(s.port, "-CAfile", pki.root, "-verify_return_error", "-showcerts",
                 sni="example.org")
    assert "Verify return code: 0 (ok)" in text(r), text(r)
    assert r.stdout.count(b"-----BEGIN CERTIFICATE-----") == 2


def test_start_up_log_says_once_which_path_file_bodies_take(start_server, site, pki):
    s = https(start_server, site, pki.ec)

    def lines():
        return [line for line in s.error_log().splitlines() if "kernel TLS" in line]

    wait_until(lines, scaled(5))  # written after the listening line the fixture waits for
    assert get(s.port, sni="example.org")[0] == 200
    assert len(lines()) == 1, s.error_log()


# ------------------------------------------------------------------- ALPN


def test_alpn_selects_http11(start_server, site, pki):
    s = https(start_server, site, pki.ec)
    c = tls_socket(s.port, sni="example.org", ctx=context(alpn=["h2", "http/1.1"]))
    try:
        assert c.selected_alpn_protocol() == "http/1.1"
    finally:
        c.close()


def test_client_offering_only_h2_is_refused_with_no_application_protocol(start_server,
                                                                         site, pki):
    s = https(start_server, site, pki.ec)
    with pytest.raises(ssl.SSLError, match="(?i)no.application.protocol"):
        tls_socket(s.port, sni="example.org", ctx=context(alpn=["h2"])).close()
    assert get(s.port, sni="example.org")[0] == 200


# ------------------------------------------------------------------- resumption


@pytest.mark.parametrize("version", ["-tls1_2", "-tls1_3"])
def test_session_is_resumed_by_ticket(start_server, site, pki, tmp_path, version):
    """With the session cache off, only a ticket can resume the session."""
    s = https(start_server, site, pki.ec, extra="ssl_session_cache off;\n")
    sess = str(tmp_path / "session.pem")
    first = s_client(s.port, version, "-sess_out", sess, sni="example.org")
    assert not s_client_reused(first)
    assert "TLS session ticket:" in text(first), text(first)
    again = s_client(s.port, version, "-sess_in", sess, sni="example.org")
    assert s_client_reused(again), text(again)


def test_session_is_resumed_by_session_id_with_tickets_off(start_server, site, pki,
                                                             tmp_path):
    """TLS 1.2's session ID, found in the server's session cache."""
    s = https(start_server, site, pki.ec, extra="ssl_session_tickets off;\n")
    sess = str(tmp_path / "session.pem")
    first = s_client(s.port, "-tls1_2", "-no_ticket", "-sess_out", sess, sni="example.org")
    assert not s_client_reused(first)
    again = s_client(s.port, "-tls1_2", "-no_ticket", "-sess_in", sess, sni="example.org")
    assert s_client_reused(again), text(again)


def test_ssl_session_tickets_off_sends_no_ticket(start_server, site, pki):
    s = https(start_server, site, pki.ec, extra="ssl_session_tickets off;\n")
    r = s_client(s.port, "-tls1_2", sni="example.org")
    assert "Verify return code" in text(r), text(r)  # the handshake was done
    assert "TLS session ticket:" not in text(r), text(r)


@pytest.mark.parametrize("version", [TLS12, TLS13], ids=["tls12", "tls13"])
@pytest.mark.parametrize("by", [
    pytest.param("ssl_session_tickets on;\nssl_session_cache off;\n", id="ticket"),
    pytest.param("ssl_session_tickets off;\n", id="session_cache"),
])
def test_resumption_works_across_threads(start_server, site, pki, version, by):
    """One session, resumed by 24 connections made 8 at a time to a server of 4 threads:
    each is resumed, whichever thread made the session or takes the connection (by the
    ticket keys alone, or by the session cache alone)."""
    s = https(start_server, site, pki.ec, extra=by)
    ctx = context(version=version)
    first = tls_client(s.port, sni="example.org", ctx=ctx)
    first.send(request())
    assert first.read_response()[0] == 200  # TLS 1.3 tickets come after the handshake
    session = first.sock.session
    first.close()

    def resume(_):
        c = tls_client(s.port, sni="example.org", ctx=ctx, session=session)
        try:
            c.send(request())
            return c.read_response()[0], c.sock.session_reused
        finally:
            c.close()

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(resume, range(24)))
    assert results == [(200, True)] * 24


# ------------------------------------------------------------------- protocol versions


@pytest.mark.parametrize("version", ["-tls1", "-tls1_1"])
def test_tls11_and_below_are_refused(start_server, site, pki, version):
    s = https(start_server, site, pki.ec)
    r = s_client(s.port, version, "-cipher", "DEFAULT@SECLEVEL=0", sni="example.org")
    assert r.returncode != 0, text(r)
    assert s_client_leaf(r) is None
    assert "Cipher is (NONE)" in text(r), text(r)


@pytest.mark.parametrize("version", [TLS12, TLS13], ids=["tls12", "tls13"])
def test_tls12_and_tls13_are_accepted(start_server, site, pki, version):
    s = https(start_server, site, pki.ec)
    c = tls_socket(s.port, sni="example.org", ctx=context(version=version))
    try:
        assert c.version() == {TLS12: "TLSv1.2", TLS13: "TLSv1.3"}[version]
    finally:
        c.close()


def test_ssl_protocols_tls13_alone_refuses_tls12(start_server, site, pki):
    s = https(start_server, site, pki.ec, extra="ssl_protocols TLSv1.3;\n")
    with pytest.raises(ssl.SSLError):
        tls_socket(s.port, sni="example.org", ctx=context(version=TLS12)).close()
    c = tls_socket(s.port, sni="example.org", ctx=context(version=TLS13))
    c.close()


def check_protocols(tmp_path, site, pki, protocols):
    """`lfhttpd -t` on a TLS site with `ssl_protocols PROTOCOLS;`: (result, "FILE:LINE:")."""
    conf = tmp_path / "t.conf"
    text_ = tls_conf(site, pki.ec, extra=f"ssl_protocols {protocols};\n")
    conf.write_text(text_)
    r = subprocess.run([BIN, "-t", "-c", str(conf)], capture_output=True, text=True,
                       timeout=scaled(30))
    return r, f"{conf}:{line_of(text_, 'ssl_protocols')}:"


def test_ssl_protocols_naming_tls1_and_tls11_passes_check_with_a_notice_for_each(
        tmp_path, site, pki):
    r, where = check_protocols(tmp_path, site, pki, "TLSv1 TLSv1.1 TLSv1.2 TLSv1.3")
    assert r.returncode == 0, r.stderr
    assert f"notice: {where} ssl_protocols: TLSv1 is accepted, not offered" in r.stderr
    assert f"notice: {where} ssl_protocols: TLSv1.1 is accepted, not offered" in r.stderr


@pytest.mark.parametrize("protocols", ["TLSv1 TLSv1.1", "SSLv3 TLSv1.2"])
def test_ssl_protocols_without_tls12_or_tls13_or_with_sslv3_is_refused_at_load(
        tmp_path, site, pki, protocols):
    r, where = check_protocols(tmp_path, site, pki, protocols)
    assert r.returncode != 0
    assert where in r.stderr, r.stderr


@pytest.mark.parametrize("version", [TLS12, TLS13], ids=["tls12", "tls13"])
def test_ssl_protocols_naming_tls1_and_tls11_still_offers_tls12_and_tls13(start_server, site,
                                                                           pki, version):
    s = https(start_server, site, pki.ec,
              extra="ssl_protocols TLSv1 TLSv1.1 TLSv1.2 TLSv1.3;\n")
    c = tls_socket(s.port, sni="example.org", ctx=context(version=version))
    try:
        assert c.version() == {TLS12: "TLSv1.2", TLS13: "TLSv1.3"}[version]
    finally:
        c.close()


# ------------------------------------------------------------------- the wrong port


def test_plain_http_on_the_tls_port_is_400_and_closed(start_server, site, pki, connect):
    s = https(start_server, site, pki.ec)
    c = connect(s)
    c.send(request("/page.html"))
    status, fields, body, _ = c.read_response(timeout=scaled(5))
    assert status == 400
    assert b"The plain HTTP request was sent to HTTPS port" in body
    assert fields.get("connection") == "close"
    assert c.is_closed(scaled(5))


def test_tls_client_hello_on_a_plain_port_is_answered_and_closed(start_server, site,
                                                                  connect):
    server = start_server(site)
    c = connect(server)
    c.send(client_hello())
    data = c.recv_all(timeout=scaled(5))
    assert data.startswith(b"HTTP/1.1 400 "), data[:200]
    assert c.is_closed(0.5), "still open after the answer"
    c2 = connect(server)
    c2.send(b"GET /page.html HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    assert c2.read_response()[0] == 200


# ------------------------------------------------------------------- what https changes


def test_scheme_is_https(start_server, site, pki):
    s = https(start_server, site, pki.ec,
              extra='server {\n    location = /scheme { return 200 "$scheme"; }\n}\n')
    status, _, body, _, _ = get(s.port, "/scheme", sni="example.org")
    assert (status, body) == (200, b"https")


def test_redirect_to_a_directory_is_absolute_https(start_server, site, pki):
    s = https(start_server, site, pki.ec)
    status, fields, _, _, _ = get(s.port, "/dir", sni="example.org")
    assert status == 301
    assert re.fullmatch(r"https://example\.org(:%d)?/dir/" % s.port, fields["location"]), \
        fields["location"]


def test_proxy_sends_x_forwarded_proto_https(start_server, site, pki):
    up = Upstream()
    try:
        s = https(start_server, site, pki.ec,
                  extra=("server {\n    location /app/ { proxy_pass http://127.0.0.1:%d; }\n}\n"
                         % up.ports[0]))
        status, _, _, _, _ = get(s.port, "/app/x", sni="example.org")
        assert status == 200
        received = up.requests()[-1]["headers"]
        assert [v for k, v in received if k.lower() == "x-forwarded-proto"] == ["https"]
    finally:
        up.stop()


def test_cgi_sees_https_on(start_server, site, pki, tmp_path):
    cgi = tmp_path / "cgi"
    cgi.mkdir()
    script = cgi / "env.sh"
    script.write_text("#!/bin/sh\nprintf 'Content-Type: text/plain\\n\\n'\nexec env\n")
    script.chmod(0o755)
    s = https(start_server, site, pki.ec, extra=f'cgi /cgi-bin/ "{cgi}";\n')
    status, _, body, _, _ = get(s.port, "/cgi-bin/env.sh", sni="example.org")
    assert status == 200
    assert "HTTPS=on" in body.decode().splitlines(), body


# ------------------------------------------------------------------- connections, bodies


def test_hundred_requests_on_one_tls_connection(start_server, site, pki, tls):
    s = https(start_server, site, pki.ec)
    c = tls(s.port, sni="example.org")
    for i in range(100):
        c.send(request("/page.html?n=%d" % i))
        status, _, body, _ = c.read_response(timeout=scaled(5))
        assert (i, status, body) == (i, 200, b"a page of text\n")


def test_pipelined_requests_in_one_tls_record(start_server, site, pki, tls):
    s = https(start_server, site, pki.ec)
    c = tls(s.port, sni="example.org")
    c.send(request("/page.html") + request("/dir/") + request("/style.css"))  # one write
    bodies = [c.read_response(timeout=scaled(5))[2] for _ in range(3)]
    assert bodies == [b"a page of text\n", b"dir index\n", b"body { color: black }\n"]


@pytest.mark.parametrize("piece", [1, 7, 50])
def test_pipelined_requests_across_tls_records(start_server, site, pki, tls, piece):
    """The bytes of three requests in records of `piece` bytes, so that records end
    inside request lines, fields and between requests."""
    s = https(start_server, site, pki.ec)
    c = tls(s.port, sni="example.org")
    data = request("/page.html") + request("/dir/") + request("/style.css")
    for i in range(0, len(data), piece):
        c.send(data[i:i + piece])  # each send is a record of its own
    bodies = [c.read_response(timeout=scaled(5))[2] for _ in range(3)]
    assert bodies == [b"a page of text\n", b"dir index\n", b"body { color: black }\n"]


def test_chunked_post_is_echoed_over_tls(start_server, site, pki, tls):
    s = https(start_server, site, pki.ec, extra="handler /echo echo;\n")
    c = tls(s.port, sni="example.org")
    body = os.urandom(100_000)
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 30_000]), body[i:i + 30_000])
                      for i in range(0, len(body), 30_000))
    c.send(request("/echo", method="POST", extra=["Transfer-Encoding: chunked"])
           + chunks + b"0\r\n\r\n")
    status, _, echoed, _ = c.read_response(timeout=scaled(10))
    assert (status, len(echoed), echoed == body) == (200, len(body), True)
    c.send(request("/page.html"))
    assert c.read_response(timeout=scaled(5))[2] == b"a page of text\n"


@pytest.fixture
def big(site):
    """A 10 MiB file of random bytes in the site: its sha256."""
    data = os.urandom(10 * MIB)
    (site / "big.bin").write_bytes(data)
    return hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("sendfile", ["on", "off"])
def test_ten_mib_file_arrives_whole(start_server, site, pki, tls, big, sendfile):
    s = https(start_server, site, pki.ec, extra=f"sendfile {sendfile};\n")
    c = tls(s.port, sni="example.org")
    for _ in range(2):  # and the connection serves the next request after it
        c.send(request("/big.bin"))
        status, fields, body, _ = c.read_response(timeout=scaled(30))
        assert (status, len(body)) == (200, 10 * MIB)
        assert hashlib.sha256(body).hexdigest() == big


def test_slow_reader_gets_the_whole_large_file(start_server, site, pki, tls, big):
    """A client reading a record (16 KiB at most) every 5 ms, through a small receive
    buffer, gets every byte, and the server does not hold the file in memory meanwhile."""
    s = https(start_server, site, pki.ec)
    c = tls(s.port, sni="example.org", rcvbuf=16384)
    before = rss_kib(s.proc.pid)
    c.send(request("/big.bin", extra=["Connection: close"]))
    c.sock.settimeout(scaled(10))
    data, peak = b"", before
    while True:
        chunk = c.sock.recv(65536)
        if not chunk:
            break
        data += chunk
        peak = max(peak, rss_kib(s.proc.pid))
        time.sleep(0.005)
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ")
    assert hashlib.sha256(body).hexdigest() == big
    if not SANITIZED:
        assert peak - before < 8 * 1024, f"RSS grew {peak - before} KiB while sending"


# ------------------------------------------------------------------- reload, load


def copy_pair(pair, dirpath, name):
    """A writable copy of a pair's files: (cert path, key path)."""
    os.makedirs(dirpath, exist_ok=True)
    cert, key = os.path.join(dirpath, name + ".pem"), os.path.join(dirpath, name + ".key")
    shutil.copyfile(pair.cert, cert)
    shutil.copyfile(pair.key, key)
    return pair_of(cert, key)


def sighup(server, expect):
    """SIGHUP, then the new lines of the error log once the server says it reloaded
    (expect="reloaded") or refused ("not reloaded")."""
    before = len(server.error_log())
    server.proc.send_signal(signal.SIGHUP)
    word = "configuration reloaded" if expect == "reloaded" else "configuration not reloaded"
    assert wait_until(lambda: word in server.error_log()[before:], scaled(10)), \
        server.error_log()[before:]
    return server.error_log()[before:]


@pytest.fixture
def reloadable(start_server, site, pki, tmp_path):
    """A server on a copy of pki.ec's files; then a second certificate for the same name:
    (server, the files served, the new pair)."""
    served = copy_pair(pki.ec, tmp_path / "live", "example.org")
    fresh = pki.issue("example.org")
    return https(start_server, site, served), served, fresh


def test_reload_serves_a_new_certificate_to_new_connections(reloadable):
    s, served, fresh = reloadable
    assert get(s.port, sni="example.org")[4] == served.leaf
    shutil.copyfile(fresh.cert, served.cert)
    shutil.copyfile(fresh.key, served.key)
    sighup(s, "reloaded")
    assert get(s.port, sni="example.org")[4] == fresh.leaf


def test_reload_keeps_a_keepalive_connection_opened_before_working(reloadable, tls):
    s, served, fresh = reloadable
    c = tls(s.port, sni="example.org")
    c.send(request("/page.html"))
    assert c.read_response()[0] == 200
    shutil.copyfile(fresh.cert, served.cert)
    shutil.copyfile(fresh.key, served.key)
    sighup(s, "reloaded")
    for _ in range(3):
        c.send(request("/page.html"))
        assert c.read_response(timeout=scaled(5))[:3:2] == (200, b"a page of text\n")
    assert get(s.port, sni="example.org")[4] == fresh.leaf


def break_garbage(served, tmp_path):
    with open(served.cert, "w") as f:
        f.write("-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n")
    return "ssl_certificate "


def break_key_mismatch(served, tmp_path):
    new_key(served.key + ".other")
    shutil.move(served.key + ".other", served.key)
    return None  # the pair's lines, either one


def break_missing(served, tmp_path):
    os.unlink(served.cert)
    return "ssl_certificate "


def break_empty_key(served, tmp_path):
    open(served.key, "w").close()
    return "ssl_certificate_key"


BREAKS = [pytest.param(f, id=f.__name__[len("break_"):])
          for f in (break_garbage, break_key_mismatch, break_missing, break_empty_key)]


def refusal_at(log, conf_path, conf_text, directive):
    """The log names the configuration file and the line of `directive` (of either line
    of the pair when None)."""
    lines = ([line_of(conf_text, directive)] if directive else
             [line_of(conf_text, "ssl_certificate "), line_of(conf_text, "ssl_certificate_key")])
    name = re.escape(os.path.basename(conf_path))
    return re.search(r"%s:(%s): " % (name, "|".join(map(str, lines))), log)


@pytest.mark.parametrize("breaking", BREAKS)
def test_reload_with_a_bad_certificate_is_refused_and_the_old_one_serves(reloadable,
                                                                         tmp_path, breaking):
    s, served, _ = reloadable
    directive = breaking(served, tmp_path)
    log = sighup(s, "not reloaded")
    with open(s.conf_path) as f:
        assert refusal_at(log, s.conf_path, f.read(), directive), log
    assert s.proc.poll() is None
    status, _, _, _, leaf = get(s.port, sni="example.org")
    assert (status, leaf) == (200, served.leaf)


@pytest.mark.parametrize("breaking", BREAKS)
@pytest.mark.parametrize("how", ["start", "check"])
def test_a_bad_certificate_stops_a_start_and_fails_the_check(site, pki, tmp_path, breaking,
                                                             how):
    served = copy_pair(pki.ec, tmp_path / "live", "example.org")
    directive = breaking(served, tmp_path)
    conf_text = tls_conf(site, served)
    conf = tmp_path / "t.conf"
    conf.write_text(conf_text)
    args = [BIN, "-t", "-c", str(conf)] if how == "check" else [BIN, "-c", str(conf)]
    r = subprocess.run(args, capture_output=True, text=True, timeout=scaled(10))
    assert r.returncode != 0
    assert refusal_at(r.stderr, str(conf), conf_text, directive), r.stderr


@pytest.mark.parametrize("how", ["start", "check"])
def test_ssl_listen_without_a_certificate_is_refused_at_load(site, tmp_path, how):
    port = free_port()
    conf_text = (f'root "{site}";\nthreads 2;\nerror_log stderr debug;\n'
                 f"server {{\n    listen 127.0.0.1:{port} ssl;\n    server_name a.test;\n}}\n")
    conf = tmp_path / "t.conf"
    conf.write_text(conf_text)
    args = [BIN, "-t", "-c", str(conf)] if how == "check" else [BIN, "-c", str(conf)]
    r = subprocess.run(args, capture_output=True, text=True, timeout=scaled(10))
    assert r.returncode != 0
    assert re.search(r'%s:\d+: no "ssl_certificate" for the server of "listen 127\.0\.0\.1:%d '
                     r'ssl"' % (re.escape(str(conf)), port), r.stderr), r.stderr



@pytest.mark.parametrize("how", ["start", "check"])
def test_top_level_ssl_listen_without_a_certificate_is_refused_at_load(site, tmp_path, how):
    """A file without servers is one implicit server: the same refusal, naming the
    address that wants the certificate."""
    port = free_port()
    conf_text = (f'root "{site}";\nthreads 2;\nerror_log stderr debug;\n'
                 f"listen 127.0.0.1:{free_port()};\nlisten 127.0.0.1:{port} ssl;\n")
    conf = tmp_path / "t.conf"
    conf.write_text(conf_text)
    args = [BIN, "-t", "-c", str(conf)] if how == "check" else [BIN, "-c", str(conf)]
    r = subprocess.run(args, capture_output=True, text=True, timeout=scaled(10))
    assert r.returncode != 0
    line = line_of(conf_text, f"listen 127.0.0.1:{port} ssl")
    assert re.search(r'%s:%d: no "ssl_certificate" for the server of "listen 127\.0\.0\.1:%d '
                     r'ssl"' % (re.escape(str(conf)), line, port), r.stderr), r.stderr


# ------------------------------------------------------------------- against nginx

# What nginx alone needs around ISSUE (lfhttpd has these built in): the media types of the
# files served, and the charset lfhttpd adds to every text type.
NGINX_HTTP = """\
    types {
        text/html html;
        text/css css;
    }
    charset utf-8;
    charset_types text/html text/css;
"""


def drow(name, target, status, *, body=False, method="GET", port=0, host="example.org",
         headers=()):
    """One request of the differential: to the TLS port (0) or the redirect one (1), with
    Host `host` (PORT: the daemon's own port); `status` is nginx's answer; with body=True
    a file is served and its body and type are compared too."""
    return pytest.param(dict(target=target, status=status, body=body, method=method,
                             port=port, host=host, headers=list(headers)), id=name)


DIFFERENTIAL = [
    drow("index_of_the_root", "/", 200, body=True),
    drow("file", "/page.html", 200, body=True),
    drow("stylesheet_and_its_type", "/style.css", 200, body=True),
    drow("head_of_a_file", "/page.html", 200, body=True, method="HEAD"),
    drow("missing_file_with_hsts", "/missing.html", 404),
    drow("head_of_a_missing_file", "/missing.html", 404, method="HEAD"),
    drow("directory_without_slash_redirects_to_https", "/dir", 301),
    drow("directory_index", "/dir/", 200, body=True),
    drow("directory_without_an_index", "/noindex/", 403),
    drow("range_of_the_first_bytes", "/page.html", 206, body=True,
         headers=["Range: bytes=0-3"]),
    drow("range_of_the_last_bytes", "/page.html", 206, body=True,
         headers=["Range: bytes=-4"]),
    drow("range_past_the_end", "/page.html", 416, headers=["Range: bytes=1000-"]),
    drow("unknown_host_on_the_tls_port", "/page.html", 200, body=True, host="other.test"),
    drow("redirect_server_keeps_path_and_query", "/a/b.html?x=1&y", 301, port=1),
    drow("redirect_server_drops_the_hosts_port", "/p", 301, port=1, host="example.org:PORT"),
    drow("redirect_server_to_another_host", "/p", 301, port=1, host="other.test"),
    drow("redirect_server_head", "/p", 301, port=1, method="HEAD"),
]

COMPARED = ("status", "location", "strict-transport-security", "content-range")
COMPARED_WITH_BODY = ("content-type", "content-length", "last-modified", "body")


@pytest.fixture(scope="module")
def diff_tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("diff")
    site = root / "site"
    (site / "dir").mkdir(parents=True)
    (site / "noindex").mkdir()
    (site / "index.html").write_text("index\n")
    (site / "page.html").write_text("a page of text\n")
    (site / "style.css").write_text("body { color: black }\n")
    (site / "dir" / "index.html").write_text("dir index\n")
    (site / "noindex" / "f.txt").write_text("f\n")
    return root


def start_issue_lfhttpd(dirpath, text):
    """lfhttpd on ISSUE with ports of its own: (server, ports), once both accept."""
    for attempt in range(3):  # a port picked may be taken before lfhttpd binds it
        ports = [free_port(), free_port()]
        try:
            s = Server(dirpath / f"try{attempt}", None, conf=TOP + with_ports(text, ports))
            break
        except RuntimeError as e:
            if "in use" not in str(e) or attempt == 2:
                raise
    if not wait_until(lambda: all(accepts("127.0.0.1", p) for p in ports), scaled(10)):
        check_clean_exit(s)
        raise RuntimeError(f"lfhttpd does not accept on {ports}")
    return s, ports


@pytest.fixture(scope="module")
def diff_daemons(diff_tree, pki):
    """nginx and lfhttpd on ISSUE, each on ports of its own: (nginx's ports, lfhttpd's
    ports or the reason lfhttpd did not start: each test then fails with it, after
    checking nginx's answer)."""
    text = issue_text(pki.ec, diff_tree / "site")
    theirs = Nginx(diff_tree / "nginx", None, NGINX_HTTP + text, http=True)
    ours = None
    try:
        try:
            ours, ports = start_issue_lfhttpd(diff_tree / "lfhttpd", text)
        except RuntimeError as e:
            ports = e
        yield theirs.ports, ports
    finally:
        theirs.stop()
        if ours is not None:
            check_clean_exit(ours)


def diff_observe(ports, r):
    port = ports[r["port"]]
    host = r["host"].replace("PORT", str(port))
    lines = r["headers"] + [f"Host: {host}", "Connection: close"]
    req = ("\r\n".join([f"{r['method']} {r['target']} HTTP/1.1", *lines])
           + "\r\n\r\n").encode()
    if r["port"] == 0:
        c = tls_client(port, sni="example.org")
    else:
        c = Client(socket.create_connection(("127.0.0.1", port), timeout=scaled(10)))
    try:
        c.send(req)
        status, fields, body, _ = c.read_response(head_only=r["method"] == "HEAD",
                                                  timeout=scaled(10))
    finally:
        c.close()
    seen = {"status": status, "body": body}
    seen.update({k: v.replace(f":{port}", ":PORT") for k, v in fields.items()})
    keys = COMPARED + (COMPARED_WITH_BODY if r["body"] else ())
    if r["body"] and status == 200:
        # nginx leaves Accept-Ranges out of a 206, lfhttpd keeps it (both are right)
        keys += ("accept-ranges",)
    return {k: seen.get(k) for k in keys}


@pytest.mark.parametrize("r", DIFFERENTIAL)
def test_issue_configuration_answers_as_nginx_does(diff_daemons, r):
    theirs, ours = diff_daemons
    nginx_seen = diff_observe(theirs, r)
    assert nginx_seen["status"] == r["status"], f"nginx does not answer as the row says: " \
                                                f"{nginx_seen}"
    if isinstance(ours, Exception):
        pytest.fail(f"lfhttpd did not start on the configuration: {ours}")
    assert diff_observe(ours, r) == nginx_seen


@pytest.mark.parametrize("version", [TLS12, TLS13], ids=["tls12", "tls13"])
def test_issue_configuration_negotiates_as_nginx_does(diff_daemons, version):
    """The same client gets the same protocol, cipher suite and ALPN from both."""
    theirs, ours = diff_daemons
    if isinstance(ours, Exception):
        pytest.fail(f"lfhttpd did not start on the configuration: {ours}")

    def negotiated(port):
        c = tls_socket(port, sni="example.org",
                       ctx=context(version=version, alpn=["http/1.1"]))
        try:
            return c.version(), c.cipher()[0], c.selected_alpn_protocol()
        finally:
            c.close()

    assert negotiated(ours[0]) == negotiated(theirs[0])
