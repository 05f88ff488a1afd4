"""TLS session resumption between server blocks: a session resumes on the server block that
made it, and a session made for one server block, offered with the name of another on the
same address, gets a full handshake and that other block's certificate, by session ID and
by ticket, in TLS 1.2 and TLS 1.3. (nginx 1.22 resumes such a session with the first
block's certificate; lfhttpd deliberately does not.)

Two server blocks, a.test and b.test, each with its own certificate, listen on one
address; a.test is the default server, whose TLS context every connection starts with
until the client's SNI picks another. Clients: Python's ssl module, verifying each
certificate against the test CA.
"""
import ssl

import pytest

from conftest import free_port, scaled, with_ports
from test_metrics import METRICS, parse, value
from tls_harness import Pki, context, s_client, s_client_reused, ssl_lines, text, tls_client

TLS12, TLS13 = ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3

TWO_SERVERS = """\
listen 127.0.0.1:{port0} ssl;
threads 2;
error_log stderr debug;
shutdown_timeout 5s;
METRICS
server {
    listen 127.0.0.1:{port0} ssl default_server;
    server_name a.test;
    root ROOT/a;
    BY
A}
server {
    listen 127.0.0.1:{port0} ssl;
    server_name b.test;
    root ROOT/b;
    BY
B}
"""

# How a session is kept: by session ID in the server's cache (TLS 1.3's stateful
# tickets), or by ticket with the cache off, so that nothing else can resume it.
BY = {
    "session_id": "ssl_session_tickets off;",
    "ticket": "ssl_session_tickets on; ssl_session_cache off;",
}

VERSIONS = [pytest.param(TLS12, id="tls12"), pytest.param(TLS13, id="tls13")]
KINDS = [pytest.param(k, id=k) for k in BY]


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    p = Pki(tmp_path_factory.mktemp("pki"))
    p.names = {name: p.issue(name) for name in ("a.test", "b.test")}
    p.both = p.issue("ab.test", names=["a.test", "b.test"])  # one certificate for both
    return p


@pytest.fixture
def two_servers(start_server, docroot, pki):
    """two_servers(by, shared=False) -> (server, port): a.test and b.test on one TLS
    address, keeping sessions as BY[by] says; each with its own certificate, or with
    shared=True one certificate for both."""
    def start(by, shared=False):
        text = TWO_SERVERS.replace("ROOT", str(docroot)).replace("BY", BY[by])
        text = text.replace("METRICS", METRICS)
        for name in "ab":
            (docroot / name).mkdir(exist_ok=True)
            (docroot / name / "index.html").write_text(f"site {name}\n")
            text = text.replace(f"{name.upper()}}}",
                                ssl_lines(pki.both if shared else pki.names[f"{name}.test"],
                                          indent="    ") + "}")
        for attempt in range(3):  # a port picked may be taken before lfhttpd binds it
            port = free_port()
            try:
                s = start_server(docroot, conf=with_ports(text, [port]))
                break
            except RuntimeError as e:
                if "in use" not in str(e) or attempt == 2:
                    raise
        return s, port
    return start


def client_context(pki, version, by):
    ctx = context(cafile=pki.root, version=version)
    if by == "session_id":
        ctx.options |= ssl.OP_NO_TICKET  # TLS 1.2: offer the session ID, ask no ticket
    return ctx


def visit(port, ctx, name, session=None):
    """A request to `name` with SNI `name`, offering `session`: (body, whether the session
    was resumed, the certificate's DER, the session to offer next)."""
    c = tls_client(port, sni=name, ctx=ctx, session=session)
    try:
        c.send(f"GET / HTTP/1.1\r\nHost: {name}\r\n\r\n".encode())
        status, _, body, _ = c.read_response(timeout=scaled(10))
        assert status == 200, body
        # (TLS 1.3's tickets come after the handshake: an answer read, they are in)
        return body, c.sock.session_reused, c.sock.getpeercert(binary_form=True), c.sock.session
    finally:
        c.close()


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("by", KINDS)
@pytest.mark.parametrize("name", ["a.test", "b.test"])
def test_session_resumes_on_the_server_block_that_made_it(two_servers, pki, by, version,
                                                          name):
    s, port = two_servers(by)
    ctx = client_context(pki, version, by)
    _, reused, _, session = visit(port, ctx, name)
    assert not reused
    body, reused, leaf, _ = visit(port, ctx, name, session)
    assert reused
    assert (body, leaf) == (f"site {name[0]}\n".encode(), pki.names[name].leaf)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("by", KINDS)
@pytest.mark.parametrize("made_for, offered_to", [("a.test", "b.test"), ("b.test", "a.test")],
                         ids=["default_to_other", "other_to_default"])
def test_session_of_another_server_block_gets_a_full_handshake_and_its_certificate(
        two_servers, pki, by, version, made_for, offered_to):
    s, port = two_servers(by)
    ctx = client_context(pki, version, by)
    _, _, _, session = visit(port, ctx, made_for)
    body, reused, leaf, _ = visit(port, ctx, offered_to, session)
    assert not reused
    assert (body, leaf) == (f"site {offered_to[0]}\n".encode(), pki.names[offered_to].leaf)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("by", KINDS)
def test_session_of_another_server_block_with_the_same_certificate_is_not_resumed(
        two_servers, pki, by, version):
    """The blocks are told apart by their names, not only by their certificates."""
    s, port = two_servers(by, shared=True)
    ctx = client_context(pki, version, by)
    _, _, _, session = visit(port, ctx, "a.test")
    assert visit(port, ctx, "a.test", session)[1]  # the session resumes where it was made
    body, reused, _, _ = visit(port, ctx, "b.test", session)
    assert (body, reused) == (b"site b\n", False)


def tls_metrics(port, pki):
    """The samples of /metrics, asked over a new TLS connection (its handshake counted)."""
    c = tls_client(port, sni="a.test", ctx=context(cafile=pki.root))
    try:
        c.send(b"GET /metrics HTTP/1.1\r\nHost: a.test\r\n\r\n")
        status, _, body, _ = c.read_response(timeout=scaled(10))
        assert status == 200, body
        return parse(body.decode())
    finally:
        c.close()


@pytest.mark.parametrize("by", KINDS)
def test_refused_resumption_is_not_counted_as_a_resumption(two_servers, pki, by):
    """A handshake is counted when it ends, before its answer: the scrape's own is in."""
    s, port = two_servers(by)
    ctx = client_context(pki, TLS12, by)
    _, _, _, session = visit(port, ctx, "a.test")
    assert visit(port, ctx, "a.test", session)[1]  # counted
    assert not visit(port, ctx, "b.test", session)[1]  # not counted
    m = tls_metrics(port, pki)
    assert value(m, "lfhttpd_tls_handshakes_total") == 4
    assert value(m, "lfhttpd_tls_resumptions_total") == 1


@pytest.mark.parametrize("by", KINDS)
def test_a_resumed_tls13_connection_brings_a_new_ticket(two_servers, pki, by, tmp_path):
    """A TLS 1.3 ticket is spent once (RFC 8446 C.4): OpenSSL's client keeps, for its next
    connection, only what the last one brought. Each resumed connection brings a new ticket,
    as nginx's does, so that a client such as wrk, which offers its last connection's
    session, resumes every time rather than every other time."""
    s, port = two_servers(by)
    sess = str(tmp_path / "session.pem")
    first = s_client(port, "-tls1_3", "-sess_out", sess, sni="a.test")
    assert not s_client_reused(first)
    again = s_client(port, "-tls1_3", "-sess_in", sess, "-msg", sni="a.test")
    assert s_client_reused(again)
    assert "NewSessionTicket" in text(again)
