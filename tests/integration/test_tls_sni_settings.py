"""The TLS settings of a server block chosen by SNI: every ssl_* directive a server block
sets applies to the connections whose ClientHello names it, not only its certificate, even
when another block is the default server of the address (whose settings a connection
starts with, before its ClientHello is read). ssl_session_cache is the exception: OpenSSL
keeps the sessions in the default server's cache, so a block whose cache differs from it is
refused at load. (Certificates by SNI: test_tls.py.)

Two server blocks, a.test (the default server) and b.test, listen on one address, each with
its own certificate and a different value of the directive under test. Each test asks b.test
by SNI and checks that b.test's value holds; asking a.test the same way shows a.test's, so
that the test tells the two apart. Clients: Python's ssl module and `openssl s_client`.

With PROXY_UNDER_TEST=nginx the same configurations run on nginx. nginx 1.22 takes the
chosen block's cipher list and copies its options when it reads the name (after the
offered session is looked up: ssl_prefer_server_ciphers and ssl_session_tickets off follow
the block, ssl_session_tickets on does not where the default server has them off), but
keeps the default server's protocols, curves and session timeout, and accepts a block's
ssl_session_cache that differs from the default server's.
"""
import collections
import ssl
import subprocess
import time

import pytest

from conftest import BIN, free_port, scaled, with_ports
from proxy_harness import UNDER_NGINX, lfhttpd_only
from tls_harness import Pki, context, line_of, s_client, ssl_lines, tls_client

TLS12, TLS13 = ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3
VERSIONS = [pytest.param(TLS12, id="tls12"), pytest.param(TLS13, id="tls13")]

Seen = collections.namedtuple("Seen", "version cipher session reused")

SERVER = """\
server {{
    listen 127.0.0.1:{{port0}} ssl{default};
    server_name {name};
    root {root};
{certs}    {settings}
}}
"""


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    p = Pki(tmp_path_factory.mktemp("pki"))
    p.names = {name: p.issue(name) for name in ("a.test", "b.test")}
    # RSA: an ECDSA P-256 certificate is usable in TLS 1.2 only where P-256 is a group both
    # sides have, which would refuse handshakes whatever the curves under test.
    p.rsa = {name: p.issue(name, "rsa") for name in ("a.test", "b.test")}
    return p


def two_server_blocks(docroot, pki, a, b, rsa=False):
    """The text of a.test (the default server, with the directives `a`) and b.test (with
    `b`) on 127.0.0.1:{port0}, each with a document root of its own under docroot and a
    certificate: ECDSA, or RSA."""
    blocks = ""
    for name, settings in (("a.test", a), ("b.test", b)):
        root = docroot / name
        root.mkdir(exist_ok=True)
        (root / "index.html").write_text(f"site {name}\n")
        blocks += SERVER.format(default=" default_server" if name == "a.test" else "",
                                name=name, root=root, settings=settings,
                                certs=ssl_lines((pki.rsa if rsa else pki.names)[name],
                                                indent="    "))
    return blocks


TOP = "threads 2;\nerror_log stderr debug;\nshutdown_timeout 5s;\n"


@pytest.fixture
def two_servers(start_server, nginx, docroot, pki):
    """two_servers(a, b, rsa=False) -> port: two_server_blocks served by lfhttpd (or
    nginx, PROXY_UNDER_TEST)."""
    def start(a, b, rsa=False):
        blocks = two_server_blocks(docroot, pki, a, b, rsa)
        if UNDER_NGINX:
            return nginx(docroot, blocks, http=True).port
        for attempt in range(3):  # a port picked may be taken before lfhttpd binds it
            port = free_port()
            try:
                start_server(docroot, conf=with_ports(TOP + blocks, [port]))
                return port
            except RuntimeError as e:
                if "in use" not in str(e) or attempt == 2:
                    raise
    return start


def visit(port, name, ctx=None, session=None):
    """A request to `name` with SNI `name`, the answer read (so that TLS 1.3's tickets are
    in): what the TLS socket says of its version, cipher and session."""
    c = tls_client(port, sni=name, ctx=ctx or context(), session=session)
    try:
        c.send(f"GET / HTTP/1.1\r\nHost: {name}\r\n\r\n".encode())
        status, _, body, _ = c.read_response(timeout=scaled(10))
        assert (status, body) == (200, f"site {name}\n".encode())
        t = c.sock
        return Seen(t.version(), t.cipher()[0], t.session, t.session_reused)
    finally:
        c.close()


def handshakes(port, name, ctx):
    """Does a handshake with SNI `name` and the client context ctx succeed?"""
    try:
        visit(port, name, ctx)
        return True
    except ssl.SSLError:
        return False


# ------------------------------------------------------------------- ssl_protocols


@lfhttpd_only("nginx 1.22 negotiates the version of the default server")
def test_ssl_protocols_of_a_server_chosen_by_sni_refuse_a_version_it_does_not_list(
        two_servers):
    port = two_servers("ssl_protocols TLSv1.2 TLSv1.3;", "ssl_protocols TLSv1.3;")
    assert handshakes(port, "a.test", context(version=TLS12))
    assert not handshakes(port, "b.test", context(version=TLS12))


@lfhttpd_only("nginx 1.22 negotiates the version of the default server")
def test_ssl_protocols_of_a_server_chosen_by_sni_allow_a_version_the_default_refuses(
        two_servers):
    port = two_servers("ssl_protocols TLSv1.3;", "ssl_protocols TLSv1.2;")
    assert visit(port, "a.test").version == "TLSv1.3"
    assert visit(port, "b.test").version == "TLSv1.2"


# ------------------------------------------------------------------- ssl_ciphers


def test_ssl_ciphers_of_a_server_chosen_by_sni_apply(two_servers):
    port = two_servers("ssl_ciphers ECDHE+AESGCM;", "ssl_ciphers ECDHE+CHACHA20;")
    ctx = context(version=TLS12, ciphers="ECDHE+AESGCM:ECDHE+CHACHA20")
    assert "GCM" in visit(port, "a.test", ctx).cipher
    assert "CHACHA20" in visit(port, "b.test", ctx).cipher


# ------------------------------------------------------------------- ssl_prefer_server_ciphers

SERVER_ORDER = "ssl_ciphers ECDHE+CHACHA20:ECDHE+AESGCM;"
CLIENT_ORDER = "ECDHE+AESGCM:ECDHE+CHACHA20"


def test_ssl_prefer_server_ciphers_on_on_a_server_chosen_by_sni_takes_the_server_order(
        two_servers):
    port = two_servers(SERVER_ORDER + " ssl_prefer_server_ciphers off;",
                       SERVER_ORDER + " ssl_prefer_server_ciphers on;")
    ctx = context(version=TLS12, ciphers=CLIENT_ORDER)
    assert "GCM" in visit(port, "a.test", ctx).cipher
    assert "CHACHA20" in visit(port, "b.test", ctx).cipher


def test_ssl_prefer_server_ciphers_off_on_a_server_chosen_by_sni_takes_the_client_order(
        two_servers):
    port = two_servers(SERVER_ORDER + " ssl_prefer_server_ciphers on;",
                       SERVER_ORDER + " ssl_prefer_server_ciphers off;")
    ctx = context(version=TLS12, ciphers=CLIENT_ORDER)
    assert "CHACHA20" in visit(port, "a.test", ctx).cipher
    assert "GCM" in visit(port, "b.test", ctx).cipher


# ------------------------------------------------------------------- ssl_session_tickets


def test_ssl_session_tickets_off_on_a_server_chosen_by_sni_issues_no_ticket(two_servers):
    port = two_servers("ssl_session_tickets on;", "ssl_session_tickets off;")
    ctx = context(version=TLS12)
    assert visit(port, "a.test", ctx).session.has_ticket
    assert not visit(port, "b.test", ctx).session.has_ticket


@lfhttpd_only("nginx 1.22 copies the options once the offered session is looked up: a "
              "default server's ssl_session_tickets off has already refused a ticket")
def test_ssl_session_tickets_on_on_a_server_chosen_by_sni_issues_a_ticket(two_servers):
    port = two_servers("ssl_session_tickets off;", "ssl_session_tickets on;")
    ctx = context(version=TLS12)
    assert not visit(port, "a.test", ctx).session.has_ticket
    assert visit(port, "b.test", ctx).session.has_ticket


# ------------------------------------------------------------------- ssl_session_timeout


@lfhttpd_only("nginx 1.22 gives a session the timeout of the default server")
@pytest.mark.parametrize("version", VERSIONS)
def test_ssl_session_timeout_of_a_server_chosen_by_sni_is_the_ticket_lifetime(
        two_servers, version):
    port = two_servers("ssl_session_timeout 5m;", "ssl_session_timeout 1m;")
    ctx = context(version=version)
    assert visit(port, "a.test", ctx).session.ticket_lifetime_hint == 300
    assert visit(port, "b.test", ctx).session.ticket_lifetime_hint == 60


@lfhttpd_only("nginx 1.22 gives a session the timeout of the default server")
@pytest.mark.parametrize("version", VERSIONS)
def test_session_of_a_server_chosen_by_sni_is_not_resumed_after_its_ssl_session_timeout(
        two_servers, version):
    port = two_servers("ssl_session_timeout 5m;", "ssl_session_timeout 1s;")
    ctx = context(version=version)
    a, b = visit(port, "a.test", ctx).session, visit(port, "b.test", ctx).session
    time.sleep(3)  # OpenSSL counts whole seconds: 1 s is past in at most 2
    assert visit(port, "a.test", ctx, a).reused
    assert not visit(port, "b.test", ctx, b).reused


# ------------------------------------------------------------------- ssl_ecdh_curve


def answers_with(port, version, group, name):
    """Does `name` answer a client (`openssl s_client`) that offers `group` alone?"""
    r = s_client(port, version, "-groups", group, sni=name,
                 request=f"GET / HTTP/1.1\r\nHost: {name}\r\nConnection: close\r\n\r\n"
                 .encode())
    return f"site {name}".encode() in r.stdout


SHELLO_VERSIONS = [pytest.param("-tls1_2", id="tls12"), pytest.param("-tls1_3", id="tls13")]


@lfhttpd_only("nginx 1.22 offers the curves of the default server")
@pytest.mark.parametrize("version", SHELLO_VERSIONS)
def test_ssl_ecdh_curve_of_a_server_chosen_by_sni_applies(two_servers, version):
    port = two_servers("ssl_ecdh_curve X25519;", "ssl_ecdh_curve secp384r1;", rsa=True)
    assert not answers_with(port, version, "P-384", "a.test")
    assert answers_with(port, version, "P-384", "b.test")
    assert not answers_with(port, version, "X25519", "b.test")


@lfhttpd_only("nginx 1.22 offers the curves of the default server")
@pytest.mark.parametrize("version", SHELLO_VERSIONS)
def test_ssl_ecdh_curve_auto_on_a_server_chosen_by_sni_offers_the_default_curves(
        two_servers, version):
    port = two_servers("ssl_ecdh_curve X25519;", "ssl_ecdh_curve auto;", rsa=True)
    assert not answers_with(port, version, "P-384", "a.test")
    for group in ("X25519", "P-256", "P-384"):
        assert answers_with(port, version, group, "b.test"), group


# ------------------------------------------------------------------- ssl_session_cache


def check(tmp_path, text_):
    """`lfhttpd -t` on text_: the CompletedProcess, and the file's name."""
    conf = tmp_path / "t.conf"
    conf.write_text(text_)
    return subprocess.run([BIN, "-t", "-c", str(conf)], capture_output=True, text=True,
                          timeout=scaled(30)), str(conf)


@lfhttpd_only("nginx 1.22 accepts it, and keeps the sessions in the default server's cache")
@pytest.mark.parametrize("top, a, b, at", [
    ("", "ssl_session_cache builtin;", "ssl_session_cache off;", "ssl_session_cache off"),
    ("", "ssl_session_cache off;", "ssl_session_cache builtin;", "ssl_session_cache builtin"),
    ("", "", "ssl_session_cache builtin:100;", "ssl_session_cache builtin:100"),
    ("ssl_session_cache off;\n", "ssl_session_cache builtin;", "", "server_name b.test"),
], ids=["off", "on", "size", "inherited"])
def test_ssl_session_cache_of_a_server_unlike_its_default_servers_loads_with_a_warning(
        tmp_path, docroot, pki, top, a, b, at):
    """OpenSSL keeps the sessions in the cache of the address's default server: another
    block's own is not used, as in nginx, and the load says so. Reported at the block's
    statement, or at the block (its server_name's line is the one after) when it inherits
    the top level's."""
    text_ = with_ports(TOP + top + two_server_blocks(docroot, pki, a, b), [free_port()])
    r, conf = check(tmp_path, text_)
    line = line_of(text_, at) - (2 if at.startswith("server_name") else 0)
    assert r.returncode == 0, r.stderr
    assert f"{conf}:{line}: ssl_session_cache differs from that of the default server" \
        in r.stderr, r.stderr


@lfhttpd_only("lfhttpd's load check")
def test_ssl_session_cache_of_a_server_like_its_default_servers_is_accepted(tmp_path, docroot,
                                                                            pki):
    """The same cache, said otherwise (20480 sessions is the default)."""
    text_ = with_ports(TOP + two_server_blocks(docroot, pki, "ssl_session_cache builtin;",
                                               "ssl_session_cache builtin:20480;"),
                       [free_port()])
    r, _ = check(tmp_path, text_)
    assert r.returncode == 0, r.stderr
    assert "ssl_session_cache differs" not in r.stderr
