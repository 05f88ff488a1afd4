"""`proxy_pass https://...`: the reverse proxy to an upstream over TLS, side by side with
nginx on one configuration run as written, in front of one real HTTPS upstream.

The HTTPS upstream is lfhttpd itself with `listen ... ssl`, its certificates made here by
the openssl command (a CA of its own, which signs one leaf directly; a root and an
intermediate, which sign another): `/who` answers with what the TLS connection said
($ssl_server_name, $ssl_session_reused) and which connection it was ($remote_port, the
proxy's end of it), `/head` with the Host and Connection it got; anything else it proxies
on to the test upstream app (upstream_app.py), which echoes the request as JSON, and
WebSocket too.

Each test asks both proxies the same and asserts the same expected answer of each: nginx
checks the expectation, lfhttpd is checked against it.
"""
import asyncio
import http.client
import json
import os
import re
import subprocess
import sys

import pytest

from conftest import BIN, Server, free_port, scaled, wait_until
from proxy_harness import UNDER_TEST, Proxy, Upstream
from tls_harness import LEAF_EXT, Pki, new_key, openssl, sans

KINDS = ("nginx", UNDER_TEST) if UNDER_TEST != "nginx" else ("nginx",)

UPSTREAM = """
error_log stderr info;
threads 2;
shutdown_timeout 5s;
keepalive_timeout 1s;
server {{
    listen 127.0.0.1:{direct} ssl;
    ssl_certificate {direct_cert};
    ssl_certificate_key {direct_key};
    root {root};
    location = /who {{
        return 200 "sni=$ssl_server_name reused=$ssl_session_reused port=$remote_port cipher=$ssl_cipher\\n";
    }}
    location = /head {{ return 200 "host=$http_host connection=$http_connection\\n"; }}
    location /ws/ {{
        proxy_pass http://127.0.0.1:{app};
        proxy_http_version 1.1;
        proxy_set_header Upgrade $http_upgrade;
        proxy_set_header Connection "upgrade";
    }}
    location / {{ proxy_pass http://127.0.0.1:{app}; }}
}}
"""

# Another address, whose certificate the intermediate signed (its file: leaf, intermediate).
UPSTREAM_CHAIN = """
server {{
    listen 127.0.0.1:{chain2} ssl;
    ssl_certificate {chain_cert};
    ssl_certificate_key {chain_key};
    root {root};
    location = /who {{
        return 200 "sni=$ssl_server_name reused=$ssl_session_reused port=$remote_port cipher=$ssl_cipher\\n";
    }}
}}
# Asks for a client certificate and says whose it got.
server {{
    listen 127.0.0.1:{mtls} ssl;
    ssl_certificate {direct_cert};
    ssl_certificate_key {direct_key};
    ssl_verify_client optional_no_ca;
    return 200 "dn=$ssl_client_s_dn\\n";
}}
# Plain HTTP: a TLS handshake with it fails at once (it answers the ClientHello with 400).
server {{
    listen 127.0.0.1:{plain};
    return 200 "plain\\n";
}}
"""

CONF = """
upstream tls_keep {{ server 127.0.0.1:{direct}; keepalive 4; }}
upstream tls_reuse {{ server 127.0.0.1:{direct}; }}
upstream tls_noreuse {{ server 127.0.0.1:{direct}; }}
upstream tls_after_plain {{ server 127.0.0.1:{plain}; server 127.0.0.1:{direct}; }}
# (a block each where the certificate is verified: nginx keeps a session per server of a
# block, and a resumed session carries the verification of the handshake that made it)
upstream tls_verify {{ server 127.0.0.1:{direct}; }}
upstream tls_verify_ca {{ server 127.0.0.1:{direct}; }}
upstream tls_verify_name {{ server 127.0.0.1:{direct}; }}
upstream tls_depth1 {{ server 127.0.0.1:{chain2}; }}
upstream tls_depth0 {{ server 127.0.0.1:{chain2}; }}
upstream tls_command {{ server 127.0.0.1:{direct}; }}
server {{
    listen 127.0.0.1:{{port0}};
    location /plain/ {{ proxy_pass https://127.0.0.1:{direct}; }}
    location = /plain-head {{ proxy_pass https://127.0.0.1:{direct}/head; }}
    location /keep/ {{
        proxy_pass https://tls_keep/;
        proxy_http_version 1.1;
        proxy_set_header Connection "";
    }}
    # (no session resumed in these: a resumed session tells the name it was made with)
    location /sni-off/ {{
        proxy_pass https://127.0.0.1:{direct}/;
        proxy_ssl_name up.test;
        proxy_ssl_session_reuse off;
    }}
    location /sni-on/ {{
        proxy_pass https://127.0.0.1:{direct}/;
        proxy_ssl_server_name on;
        proxy_ssl_name up.test;
        proxy_ssl_session_reuse off;
    }}
    location /sni-host/ {{
        proxy_pass https://tls_keep/;
        proxy_ssl_server_name on;
        proxy_ssl_session_reuse off;
    }}
    location /sni-ip/ {{
        proxy_pass https://127.0.0.1:{direct}/;
        proxy_ssl_server_name on;
        proxy_ssl_session_reuse off;
    }}
    location /sni-var/ {{
        proxy_pass https://127.0.0.1:{direct}/;
        proxy_ssl_server_name on;
        proxy_ssl_name $http_x_name;
        proxy_ssl_session_reuse off;
    }}
    location /verify/ {{
        proxy_pass https://tls_verify/;
        proxy_ssl_verify on;
        proxy_ssl_trusted_certificate {ca};
        proxy_ssl_name up.test;
    }}
    location /verify-other-ca/ {{
        proxy_pass https://tls_verify_ca/;
        proxy_ssl_verify on;
        proxy_ssl_trusted_certificate {other_ca};
        proxy_ssl_name up.test;
    }}
    location /verify-other-name/ {{
        proxy_pass https://tls_verify_name/;
        proxy_ssl_verify on;
        proxy_ssl_trusted_certificate {ca};
        proxy_ssl_name other.test;
    }}
    location /depth1/ {{
        proxy_pass https://tls_depth1/;
        proxy_ssl_verify on;
        proxy_ssl_trusted_certificate {root_ca};
        proxy_ssl_name up.test;
    }}
    location /depth0/ {{
        proxy_pass https://tls_depth0/;
        proxy_ssl_verify on;
        proxy_ssl_verify_depth 0;
        proxy_ssl_trusted_certificate {root_ca};
        proxy_ssl_name up.test;
    }}
    location /reuse/ {{ proxy_pass https://tls_reuse/; }}
    location /conf-command/ {{
        proxy_pass https://tls_command/;
        proxy_ssl_conf_command MaxProtocol TLSv1.2;
    }}
    location /noreuse/ {{ proxy_pass https://tls_noreuse/; proxy_ssl_session_reuse off; }}
    location /after-plain/ {{
        proxy_pass https://tls_after_plain/;
        proxy_connect_timeout 5s;
    }}
    location /client-cert/ {{
        proxy_pass https://127.0.0.1:{mtls}/;
        proxy_ssl_certificate {client_cert};
        proxy_ssl_certificate_key {client_key};
        proxy_ssl_session_reuse off;
    }}
    location /no-client-cert/ {{
        proxy_pass https://127.0.0.1:{mtls}/;
        proxy_ssl_session_reuse off;
    }}
    location /ws/ {{
        proxy_pass https://127.0.0.1:{direct};
        proxy_http_version 1.1;
        proxy_set_header Upgrade $http_upgrade;
        proxy_set_header Connection "upgrade";
    }}
}}
"""


def ca_of(d, name):
    """A CA (certificate, key) made by the openssl command: it signs leaves directly."""
    key = new_key(os.path.join(d, name + ".key"))
    cert = os.path.join(d, name + ".pem")
    openssl("req", "-x509", "-new", "-key", key, "-subj", f"/CN={name}", "-days", "2",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign", "-out", cert)
    return cert, key


def leaf_of(d, name, ca, ca_key, names):
    key = new_key(os.path.join(d, name + ".key"))
    csr, ext, cert = (os.path.join(d, name + s) for s in (".csr", ".ext", ".pem"))
    openssl("req", "-new", "-key", key, "-subj", f"/CN={names[0]}", "-out", csr)
    with open(ext, "w") as f:
        f.write(LEAF_EXT.format(sans=sans(names)))
    openssl("x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-days", "2",
            "-set_serial", "7", "-extfile", ext, "-out", cert)
    return cert, key


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """({kind: Proxy}, the HTTPS upstream, the app, its ports, the client certificate and
    key) on CONF."""
    d = str(tmp_path_factory.mktemp("pki"))
    ca, ca_key = ca_of(d, "upstream-ca")
    other_ca, other_key = ca_of(d, "other-ca")
    direct_cert, direct_key = leaf_of(d, "direct", ca, ca_key, ["up.test", "127.0.0.1"])
    client_cert, client_key = leaf_of(d, "client", other_ca, other_key, ["proxy.test"])
    pki = Pki(os.path.join(d, "chain"))
    chain = pki.issue("up.test")
    app = Upstream()
    started = {}
    tls_up = None
    try:
        ports = dict(direct=free_port(), chain2=free_port(), plain=free_port(),
                     mtls=free_port())
        root = tmp_path_factory.mktemp("root")
        conf = (UPSTREAM.format(direct_cert=direct_cert, direct_key=direct_key, root=root,
                                app=app.ports[0], **ports)
                + UPSTREAM_CHAIN.format(chain_cert=chain.cert, chain_key=chain.key,
                                        direct_cert=direct_cert, direct_key=direct_key,
                                        root=root, **ports))
        tls_up = Server(tmp_path_factory.mktemp("tls-upstream"), None, conf=conf)
        text = CONF.format(ca=ca, other_ca=other_ca, root_ca=pki.root, app=app.ports[0],
                           client_cert=client_cert, client_key=client_key, **ports)
        for kind in KINDS:
            started[kind] = Proxy(tmp_path_factory.mktemp(kind), text, app, root, kind=kind,
                                  site_lines=False)
        yield started, tls_up, app, ports, (client_cert, client_key)
    finally:
        try:
            for p in started.values():
                p.stop()
        finally:
            if tls_up:
                tls_up.stop()
            app.stop()


def request(p, target, method="GET", body=None, headers=()):
    """(status, {lowercase name: [values]}, body) of one request on a new connection."""
    c = http.client.HTTPConnection(p.host, p.port, timeout=scaled(10))
    try:
        c.putrequest(method, target, skip_accept_encoding=True)
        for k, v in headers:
            c.putheader(k, v)
        if body is not None:
            c.putheader("Content-Length", str(len(body)))
        c.endheaders(body)
        r = c.getresponse()
        fields = {}
        for k, v in r.getheaders():
            fields.setdefault(k.lower(), []).append(v)
        return r.status, fields, r.read()
    finally:
        c.close()


def who(p, target, headers=()):
    """What /who said through target: {sni, reused, port}."""
    status, _, body = request(p, target, headers=headers)
    assert status == 200, body
    return dict(re.findall(r"(\w+)=(\S*)", body.decode()))


def each(setup, ask):
    return {kind: ask(p) for kind, p in setup[0].items()}


def same(seen, expected):
    for kind, got in seen.items():
        assert got == expected, f"{kind}: {got!r}, expected {expected!r}"


def log_after(p, before, needle, timeout=5):
    """Does p's error log say needle after its first `before` characters (soon)?"""
    return wait_until(lambda: needle in p.log()[before:], scaled(timeout))


# ----------------------------------------------------------------------- plain exchanges


def test_a_get_goes_through_an_https_upstream(setup):
    def ask(p):
        status, fields, body = request(p, "/plain/a?b=c")
        e = json.loads(body)
        return status, fields["content-type"], e["method"], e["target"]
    same(each(setup, ask), (200, ["application/json"], "GET", "/plain/a?b=c"))


def test_a_post_body_goes_through_an_https_upstream(setup):
    def ask(p):
        status, _, body = request(p, "/plain/post", "POST", b"x=1&y=" + b"z" * 5000)
        e = json.loads(body)
        return status, e["method"], e["body"]
    same(each(setup, ask), (200, "POST", "x=1&y=" + "z" * 5000))


def test_the_upstream_gets_proxy_host_and_connection_close_over_tls(setup):
    direct = setup[3]["direct"]
    same(each(setup, lambda p: request(p, "/plain-head")[::2]),
         (200, f"host=127.0.0.1:{direct} connection=close\n".encode()))


# ---------------------------------------------------------------------------- keepalive


def test_a_kept_tls_connection_carries_the_next_requests(setup):
    """Three requests, each on a new client connection: one upstream connection, kept
    with its TLS session, carries them all."""
    same(each(setup, lambda p: len({who(p, "/keep/who")["port"] for _ in range(3)})), 1)


def close_wait_to(port):
    """The connections to 127.0.0.1:port whose peer closed and this side did not."""
    r = subprocess.run(["ss", "-Htn", "state", "close-wait", f"( dport = :{port} )"],
                       capture_output=True, text=True, timeout=10)
    return [line for line in r.stdout.splitlines() if line.strip()]


def test_a_kept_tls_connection_the_upstream_closed_is_closed_and_not_used(setup):
    """The upstream closes idle connections after 1s (with close_notify): the proxy closes
    its side at once (no connection left half-closed), and the next request goes on a new
    connection and is answered."""
    def ask(p):
        first = who(p, "/keep/who")["port"]
        wait_until(lambda: False, scaled(1.6))
        left = close_wait_to(setup[3]["direct"])
        second = who(p, "/keep/who")["port"]
        return first != second, left
    same(each(setup, ask), (True, []))


# -------------------------------------------------------------------------------- SNI


def test_no_server_name_is_sent_by_default(setup):
    same(each(setup, lambda p: who(p, "/sni-off/who")["sni"]), "")


def test_proxy_ssl_server_name_on_sends_proxy_ssl_name(setup):
    same(each(setup, lambda p: who(p, "/sni-on/who")["sni"]), "up.test")


def test_proxy_ssl_name_defaults_to_proxy_host(setup):
    same(each(setup, lambda p: who(p, "/sni-host/who")["sni"]), "tls_keep")


def test_an_ip_address_is_never_sent_as_server_name(setup):
    same(each(setup, lambda p: who(p, "/sni-ip/who")["sni"]), "")


def test_proxy_ssl_name_takes_variables(setup):
    same(each(setup, lambda p: who(p, "/sni-var/who", [("X-Name", "from.var")])["sni"]),
         "from.var")


# ------------------------------------------------------------------------- verification


def test_a_certificate_that_verifies_is_answered(setup):
    same(each(setup, lambda p: request(p, "/verify/who")[0]), 200)


def test_a_certificate_of_another_ca_is_502_with_the_reason_logged(setup):
    def ask(p):
        before = len(p.log())
        status = request(p, "/verify-other-ca/who")[0]
        return status, log_after(p, before, "upstream SSL certificate verify error: (21:")
    same(each(setup, ask), (502, True))


def test_a_certificate_for_another_name_is_502_with_the_reason_logged(setup):
    def ask(p):
        before = len(p.log())
        status = request(p, "/verify-other-name/who")[0]
        return status, log_after(p, before,
                                 'upstream SSL certificate does not match "other.test"')
    same(each(setup, ask), (502, True))


def test_a_chain_through_an_intermediate_verifies_within_the_default_depth(setup):
    """Depth 1 (the default) counts the CAs above the leaf but the trust anchor: leaf,
    intermediate, root."""
    same(each(setup, lambda p: request(p, "/depth1/who")[0]), 200)


def test_a_chain_deeper_than_proxy_ssl_verify_depth_is_502_with_the_reason_logged(setup):
    def ask(p):
        before = len(p.log())
        status = request(p, "/depth0/who")[0]
        return status, log_after(p, before, "upstream SSL certificate verify error: (20:")
    same(each(setup, ask), (502, True))


# ------------------------------------------------------------------------------ sessions


def test_the_next_connections_resume_the_first_ones_session(setup):
    """Also the third: the session goes on being offered while the server takes it (the
    upstream here sends no new ticket on a resumed connection)."""
    same(each(setup, lambda p: [who(p, "/reuse/who")["reused"] for _ in range(3)]),
         [".", "r", "r"])


def test_proxy_ssl_session_reuse_off_never_resumes(setup):
    same(each(setup, lambda p: [who(p, "/noreuse/who")["reused"] for _ in range(2)]),
         [".", "."])


# ---------------------------------------------------------------- client certificates


def test_proxy_ssl_certificate_is_shown_to_an_upstream_that_asks(setup):
    same(each(setup, lambda p: request(p, "/client-cert/x")[::2]),
         (200, b"dn=CN=proxy.test\n"))


def test_no_certificate_is_shown_without_proxy_ssl_certificate(setup):
    same(each(setup, lambda p: request(p, "/no-client-cert/x")[::2]), (200, b"dn=\n"))


@pytest.mark.skipif(UNDER_TEST == "nginx", reason="nginx 1.22 lacks it (1.23.4 has it)")
def test_an_empty_proxy_ssl_certificate_cancels_the_outer_one(setup, tmp_path):
    cert, key = setup[4]
    mtls = setup[3]["mtls"]
    p = Proxy(tmp_path, "server { listen 127.0.0.1:{port0}; "
              f"proxy_ssl_certificate {cert}; proxy_ssl_certificate_key {key}; "
              "proxy_ssl_session_reuse off; "
              f"location /outer/ {{ proxy_pass https://127.0.0.1:{mtls}/; }} "
              f"location /none/ {{ proxy_pass https://127.0.0.1:{mtls}/; "
              'proxy_ssl_certificate ""; proxy_ssl_certificate_key ""; } }',
              None, tmp_path, kind="lfhttpd", site_lines=False)
    try:
        assert request(p, "/outer/x")[::2] == (200, b"dn=CN=proxy.test\n")
        assert request(p, "/none/x")[::2] == (200, b"dn=\n")
    finally:
        p.stop()


def test_proxy_ssl_conf_command_sets_what_openssl_offers(setup):
    """MaxProtocol TLSv1.2: a TLS 1.2 cipher (a TLS 1.3 one is named TLS_...)."""
    same(each(setup, lambda p: who(p, "/conf-command/who")["cipher"]),
         "ECDHE-ECDSA-AES256-GCM-SHA384")


# -------------------------------------------------------------------------------- failures


def test_a_failed_handshake_goes_to_the_next_server(setup):
    """The first server speaks plain HTTP: its handshake fails, an `error` for
    proxy_next_upstream, and the request goes to the second."""
    def ask(p):
        before = len(p.log())
        statuses = [request(p, "/after-plain/who")[0] for _ in range(3)]
        return statuses, log_after(p, before, "while SSL handshaking to upstream")
    same(each(setup, ask), ([200, 200, 200], True))


# ------------------------------------------------------------------------------ WebSocket


def test_a_websocket_is_tunnelled_through_an_https_upstream(setup):
    websockets = pytest.importorskip("websockets")

    def ask(p):
        async def talk():
            async with websockets.connect(f"ws://{p.host}:{p.port}/ws/_upgrade",
                                          open_timeout=scaled(10)) as ws:
                replies = []
                for message in ["hello", b"\x00\x01binary", "x" * 70000]:
                    await ws.send(message)
                    replies.append(await asyncio.wait_for(ws.recv(), scaled(10)))
                return replies
        return asyncio.run(talk())
    same(each(setup, ask), ["hello", b"\x00\x01binary", "x" * 70000])


# ------------------------------------------------------- an upstream without close_notify

# An HTTPS server that answers each connection with an HTTP/1.0 head and a body that ends
# with the connection, then closes its socket without close_notify (as many servers do).
NO_NOTIFY = r"""
import socket, ssl, sys
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[1], sys.argv[2])
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(16)
print(s.getsockname()[1], flush=True)
while True:
    c, _ = s.accept()
    try:
        t = ctx.wrap_socket(c, server_side=True)
        head = b""
        while b"\r\n\r\n" not in head:
            got = t.recv(4096)
            if not got:
                break
            head += got
        t.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n" + b"b" * 30000)
        t.close()  # (close, not unwrap: no close_notify)
    except (OSError, ssl.SSLError):
        c.close()
"""


def test_a_body_ended_by_a_close_without_close_notify_is_whole(setup, tmp_path):
    conf = open(setup[1].conf_path).read()
    cert, key = (re.search(r"ssl_certificate\s+(\S+);", conf).group(1),
                 re.search(r"ssl_certificate_key\s+(\S+);", conf).group(1))
    srv = subprocess.Popen([sys.executable, "-c", NO_NOTIFY, cert, key],
                           stdout=subprocess.PIPE, text=True)
    try:
        port = int(srv.stdout.readline())
        started = {}
        for kind in KINDS:
            started[kind] = Proxy(tmp_path / kind, "server { listen 127.0.0.1:{port0}; "
                                  f"location / {{ proxy_pass https://127.0.0.1:{port}; }} }}",
                                  None, tmp_path, kind=kind, site_lines=False)
        try:
            same({k: (lambda r: (r[0], len(r[2])))(request(p, "/x"))
                  for k, p in started.items()}, (200, 30000))
        finally:
            for p in started.values():
                p.stop()
    finally:
        srv.kill()
        srv.wait()


# ------------------------------------------------------------------------- configuration


def check(tmp_path, location_lines):
    """lfhttpd -t on a server whose location has location_lines: (return code, output)."""
    conf = tmp_path / "lfhttpd.conf"
    conf.write_text("server {\n    listen 127.0.0.1:0;\n    location / {\n"
                    + "".join(f"        {line}\n" for line in location_lines) + "    }\n}\n")
    r = subprocess.run([BIN, "-t", "-c", str(conf)], capture_output=True, text=True,
                       timeout=30)
    return r.returncode, r.stdout + r.stderr


def test_verify_without_trusted_certificates_is_refused_at_its_line(tmp_path):
    rc, out = check(tmp_path, ["proxy_pass https://127.0.0.1:1;", "proxy_ssl_verify on;"])
    assert rc != 0
    assert "lfhttpd.conf:4:" in out and "no proxy_ssl_trusted_certificate for " \
        "proxy_ssl_verify" in out, out


def test_an_unreadable_trusted_certificate_is_refused_at_its_line(tmp_path):
    rc, out = check(tmp_path, ["proxy_pass https://127.0.0.1:1;", "proxy_ssl_verify on;",
                               f"proxy_ssl_trusted_certificate {tmp_path}/none.pem;"])
    assert rc != 0
    assert "lfhttpd.conf:4:" in out and "proxy_ssl_trusted_certificate" in out, out


def test_an_unknown_openssl_command_is_refused_at_the_proxy_pass_line(tmp_path):
    rc, out = check(tmp_path, ["proxy_pass https://127.0.0.1:1;",
                               "proxy_ssl_conf_command NoSuchCommand x;"])
    assert rc != 0
    assert "lfhttpd.conf:4:" in out and "NoSuchCommand" in out, out


def test_an_unknown_protocol_is_refused(tmp_path):
    rc, out = check(tmp_path, ["proxy_pass https://127.0.0.1:1;",
                               "proxy_ssl_protocols TLSv1.2 TLSv9;"])
    assert rc != 0
    assert "lfhttpd.conf:5:" in out and "TLSv9" in out, out


def test_a_scheme_other_than_http_and_https_is_refused(tmp_path):
    rc, out = check(tmp_path, ["proxy_pass ftp://127.0.0.1:1;"])
    assert rc != 0
    assert "lfhttpd.conf:4:" in out and "ftp://127.0.0.1:1" in out, out
