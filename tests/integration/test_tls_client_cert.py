"""Client certificates, the $ssl_* variables, and the TLS directives around them
(ssl_password_file, ssl_conf_command, ssl_stapling with ssl_stapling_file), as nginx's.

A test CA is made here with the `openssl` command: a server certificate, a client
certificate (alice), one revoked in a CRL (mallory), one from another CA (eve); an
encrypted copy of the server's key; an OCSP response for the server's certificate
(`openssl ocsp` answering from the CA's index.txt, written with -respout).

nginx checks a client certificate in the handshake with a callback that accepts whatever
comes, and refuses at the HTTP level: a 400 "The SSL certificate error" when it did not
verify, and with `ssl_verify_client on` a 400 "No required SSL certificate was sent" when
none came. The differential tests run one configuration on nginx (nginx-light) and on
lfhttpd and compare the status and the variables echoed by `return 200`.
"""
import json
import os
import re
import signal
import subprocess
import time

import pytest

from proxy_harness import upstream  # noqa: F401 fixture
from conftest import BIN, free_port, scaled, wait_until, with_ports
from tls_harness import line_of, openssl, s_client, text

CLIENTS = ("alice", "mallory", "eve", "none")

VARS = ("$ssl_client_verify|$ssl_client_s_dn|$ssl_client_i_dn|$ssl_client_serial|"
        "$ssl_client_fingerprint|$ssl_client_v_start|$ssl_client_v_end|$ssl_client_v_remain|"
        "$ssl_server_name|$https|$ssl_protocol|$ssl_session_reused|"
        "$ssl_client_s_dn_legacy|$ssl_client_i_dn_legacy|$ssl_cipher|$ssl_ciphers|$ssl_curve|"
        "$ssl_curves|"
        "$ssl_early_data")

LOCAL = b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"

CA_CNF = """\
[ca]
default_ca = ca_default
[ca_default]
database = {d}/index.txt
crlnumber = {d}/crlnumber
default_md = sha256
default_crl_days = 2
"""


class Ca:
    """The files of the test CA, under dirpath."""

    def __init__(self, d):
        self.d = str(d)
        p = self.path
        subj = {"ca": "/CN=Test CA/O=Example", "other": "/CN=Other CA"}
        for ca, s in subj.items():
            openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                    "-nodes", "-keyout", p(f"{ca}.key"), "-out", p(f"{ca}.crt"), "-days", "3",
                    "-subj", s)
        self.leaf("server", "/CN=localhost", "ca", "0x1001",
                  "subjectAltName=DNS:localhost,DNS:a.test,DNS:b.test,IP:127.0.0.1")
        # a comma in a name, escaped in RFC 2253 (nginx 1.11.6+)
        self.leaf("alice", "/C=US/O=Example, Inc./CN=alice", "ca", "0x2A")
        self.leaf("mallory", "/CN=mallory", "ca", "0x2B")
        self.leaf("eve", "/CN=eve", "other", "0x2C")
        # a chain: carol under an intermediate CA under the test CA
        self.leaf("inter", "/CN=Intermediate CA", "ca", "0x30",
                  "basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign")
        self.leaf("carol", "/CN=carol", "inter", "0x31")
        # $ssl_client_v_remain counts whole days to a certificate's end: 2 in the second it
        # is made, 1 after. A second later both servers read 1, whenever each looks.
        time.sleep(1.05)
        with open(p("chain.crt"), "w") as f:
            f.write(open(p("inter.crt")).read() + open(p("ca.crt")).read())
        with open(p("index.txt"), "w"):
            pass
        with open(p("crlnumber"), "w") as f:
            f.write("01\n")
        with open(p("ca.cnf"), "w") as f:
            f.write(CA_CNF.format(d=self.d))
        ca = ("-config", p("ca.cnf"), "-keyfile", p("ca.key"), "-cert", p("ca.crt"))
        openssl("ca", *ca, "-valid", p("server.crt"))
        openssl("ca", *ca, "-revoke", p("mallory.crt"))
        openssl("ca", *ca, "-gencrl", "-out", p("crl.pem"))
        # the staple: the CA answers for the server's certificate from its index
        openssl("ocsp", "-issuer", p("ca.crt"), "-cert", p("server.crt"), "-reqout",
                p("req.der"))
        openssl("ocsp", "-index", p("index.txt"), "-rsigner", p("ca.crt"), "-rkey", p("ca.key"),
                "-CA", p("ca.crt"), "-reqin", p("req.der"), "-respout", p("staple.der"),
                "-ndays", "1")
        openssl("pkey", "-in", p("server.key"), "-aes256", "-passout", "pass:open sesame",
                "-out", p("server.enc.key"))
        with open(p("passwords"), "w") as f:
            f.write("wrong one\nopen sesame\n")

    def path(self, name):
        return os.path.join(self.d, name)

    def leaf(self, name, subj, ca, serial, ext=None):
        p = self.path
        openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-keyout", p(f"{name}.key"), "-out", p(f"{name}.csr"), "-subj", subj)
        extra = []
        if ext:
            with open(p(f"{name}.ext"), "w") as f:
                f.write(ext + "\n")
            extra = ["-extfile", p(f"{name}.ext")]
        openssl("x509", "-req", "-in", p(f"{name}.csr"), "-CA", p(f"{ca}.crt"), "-CAkey",
                p(f"{ca}.key"), "-set_serial", serial, "-days", "2", "-out", p(f"{name}.crt"),
                *extra)


@pytest.fixture(scope="module")
def ca(tmp_path_factory):
    return Ca(tmp_path_factory.mktemp("ca"))


def server_block(ca, settings, port="{port0}", name="localhost", default=False):
    return (f"server {{\n    listen 127.0.0.1:{port} ssl{' default_server' if default else ''};\n"
            f"    server_name {name};\n"
            f"    ssl_protocols TLSv1.2 TLSv1.3;\n"
            f"    ssl_certificate {ca.path('server.crt')};\n"
            f"    ssl_certificate_key {ca.path('server.key')};\n"
            f"{settings}"
            f"    location / {{ return 200 \"{VARS}\\n\"; }}\n"
            f"    location /cert {{ return 200 \"$ssl_client_cert\"; }}\n"
            f"    location /raw {{ return 200 \"$ssl_client_raw_cert\"; }}\n"
            f"    location /escaped {{ return 200 \"$ssl_client_escaped_cert\"; }}\n"
            f"}}\n")


TOP = "threads 2;\nerror_log stderr info;\nshutdown_timeout 5s;\n"


@pytest.fixture
def serve(start_server, nginx, docroot):
    """serve(blocks, on="lfhttpd"|"nginx") -> (port, server): the server blocks (listening
    on {port0}) run by lfhttpd or nginx."""
    def start(blocks, on="lfhttpd"):
        if on == "nginx":
            n = nginx(docroot, blocks, http=True)
            return n.port, n
        for attempt in range(3):  # a port picked may be taken before lfhttpd binds it
            port = free_port()
            try:
                return port, start_server(docroot, conf=with_ports(TOP + blocks, [port]))
            except RuntimeError as e:
                if "in use" not in str(e) or attempt == 2:
                    raise
    return start


def curl(ca, port, client, path="/", name="localhost"):
    """A request by curl with the client's certificate (client "none": without one):
    (status, body)."""
    cmd = ["curl", "-sk", "--resolve", f"{name}:{port}:127.0.0.1", "-o", "-", "-w",
           "\n%{http_code}", f"https://{name}:{port}{path}"]
    if client != "none":
        cmd += ["--cert", ca.path(f"{client}.crt"), "--key", ca.path(f"{client}.key")]
    r = subprocess.run(cmd, capture_output=True, timeout=scaled(20))
    body, _, status = r.stdout.rpartition(b"\n")
    return int(status), body


VERIFY = {
    "on": "    ssl_verify_client on;\n    ssl_client_certificate {ca};\n    ssl_crl {crl};\n",
    "optional": "    ssl_verify_client optional;\n    ssl_client_certificate {ca};\n"
                "    ssl_crl {crl};\n",
    "optional_no_ca": "    ssl_verify_client optional_no_ca;\n"
                      "    ssl_trusted_certificate {ca};\n    ssl_crl {crl};\n",
    "off": "",
}


def verify_lines(ca, mode):
    return VERIFY[mode].format(ca=ca.path("ca.crt"), crl=ca.path("crl.pem"))


# ------------------------------------------------------------------- differential


@pytest.mark.parametrize("mode", list(VERIFY))
@pytest.mark.parametrize("client", CLIENTS)
def test_client_certificate_status_and_variables_are_nginxs(ca, serve, mode, client):
    """The same block on nginx and lfhttpd, the same client: the same status, and (when
    answered) the same $ssl_client_* and connection variables."""
    blocks = server_block(ca, verify_lines(ca, mode))
    answers = []
    for on in ("nginx", "lfhttpd"):
        port, _ = serve(blocks, on)
        status, body = curl(ca, port, client)
        answers.append((status, body if status == 200 else None))
    assert answers[1] == answers[0]


@pytest.mark.parametrize("path", ["/cert", "/raw", "/escaped"])
def test_client_certificate_in_pem_variables_are_nginxs(ca, serve, path):
    """$ssl_client_cert (tabs after each newline but the last, which is left out),
    $ssl_client_raw_cert and $ssl_client_escaped_cert, byte for byte as nginx's."""
    blocks = server_block(ca, verify_lines(ca, "on"))
    answers = []
    for on in ("nginx", "lfhttpd"):
        port, _ = serve(blocks, on)
        answers.append(curl(ca, port, "alice", path))
    assert answers[1] == answers[0]
    assert answers[1][0] == 200 and b"BEGIN" in answers[1][1]


# ------------------------------------------------------------------- the refusals


def test_certificate_that_does_not_verify_is_400_the_ssl_certificate_error(ca, serve):
    port, _ = serve(server_block(ca, verify_lines(ca, "on")))
    status, body = curl(ca, port, "eve")
    assert status == 400
    assert b"<title>400 The SSL certificate error</title>" in body


def test_revoked_certificate_is_refused_with_ssl_crl(ca, serve):
    """mallory's certificate is in the CA's CRL: refused with ssl_crl, taken without."""
    port, _ = serve(server_block(ca, verify_lines(ca, "on")))
    assert curl(ca, port, "mallory")[0] == 400
    port2, _ = serve(server_block(ca, verify_lines(ca, "on").replace(
        f"    ssl_crl {ca.path('crl.pem')};\n", "")))
    status, body = curl(ca, port2, "mallory")
    assert (status, body.split(b"|")[:2]) == (200, [b"SUCCESS", b"CN=mallory"])


def test_optional_no_ca_answers_an_unknown_issuer_with_failed_and_the_reason(ca, serve):
    port, _ = serve(server_block(ca, verify_lines(ca, "optional_no_ca")))
    status, body = curl(ca, port, "eve")
    assert status == 200
    assert body.split(b"|")[:3] == [b"FAILED:unable to verify the first certificate",
                                    b"CN=eve", b"CN=Other CA"]


def test_no_certificate_under_on_is_400_no_required_ssl_certificate_and_closes(ca, serve):
    port, _ = serve(server_block(ca, verify_lines(ca, "on")))
    r = subprocess.run(["curl", "-sk", "-i", f"https://127.0.0.1:{port}/"],
                       capture_output=True, timeout=scaled(20))
    head, _, body = r.stdout.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 ")
    assert b"\r\nConnection: close" in head
    assert b"<title>400 No required SSL certificate was sent</title>" in body


@pytest.mark.parametrize("on", ["nginx", "lfhttpd"])
def test_error_page_of_496_answers_a_missing_certificate_with_status_400(ca, serve, docroot, on):
    """error_page 495 and 496 are theirs (not 400's); the answer's status stays 400."""
    (docroot / "nocert.html").write_text("please send a certificate\n")
    port, _ = serve(server_block(ca, verify_lines(ca, "on") +
                                 f"    root {docroot};\n    error_page 496 /nocert.html;\n"
                                 "    location = /nocert.html { }\n"), on)
    assert curl(ca, port, "none") == (400, b"please send a certificate\n")


def test_verified_certificate_variables(ca, serve):
    """RFC 2253 names (the comma escaped), the serial in uppercase hex, SUCCESS."""
    port, _ = serve(server_block(ca, verify_lines(ca, "on")))
    status, body = curl(ca, port, "alice")
    assert status == 200
    f = body.decode().split("|")
    assert f[:4] == ["SUCCESS", "CN=alice,O=Example\\, Inc.,C=US", "O=Example,CN=Test CA", "2A"]
    assert len(f[4]) == 40
    assert f[8:11] == ["localhost", "on", f[10]] and f[10].startswith("TLSv1.")


def test_handshake_completes_without_the_certificate_asked_for(ca, serve):
    """nginx's way: the handshake goes through; the refusal is the request's."""
    port, _ = serve(server_block(ca, verify_lines(ca, "on")))
    r = s_client(port, sni="localhost", request=LOCAL)
    assert "Acceptable client certificate CA names" in text(r)
    assert b"HTTP/1.1 400 " in r.stdout


@pytest.mark.parametrize("depth", [0, 1])
@pytest.mark.parametrize("on", ["nginx", "lfhttpd"])
def test_ssl_verify_depth_bounds_the_client_chain(ca, serve, on, depth):
    """carol's certificate is under an intermediate CA under the root: refused at depth 0,
    taken at depth 1 (the default: one intermediate)."""
    port, _ = serve(server_block(ca, "    ssl_verify_client on;\n"
                                     f"    ssl_client_certificate {ca.path('chain.crt')};\n"
                                     f"    ssl_verify_depth {depth};\n"), on)
    status, body = curl(ca, port, "carol")
    assert status == (400 if depth == 0 else 200)


# ------------------------------------------------------------------- a block chosen by SNI


def two_blocks(ca, port="{port0}"):
    """a.test (the default server, no client certificate) and b.test (`on`)."""
    return (server_block(ca, "", port=port, name="a.test", default=True) +
            server_block(ca, verify_lines(ca, "on"), port=port, name="b.test"))


def test_block_chosen_by_sni_asks_and_checks_its_client_certificate(ca, serve):
    port, _ = serve(two_blocks(ca))
    assert curl(ca, port, "none", name="a.test")[0] == 200
    assert curl(ca, port, "none", name="b.test")[0] == 400
    status, body = curl(ca, port, "alice", name="b.test")
    assert (status, body.split(b"|")[0]) == (200, b"SUCCESS")
    assert curl(ca, port, "eve", name="b.test")[0] == 400


def test_session_of_a_block_without_the_check_is_not_resumed_by_one_with_it(
        ca, serve, tmp_path):
    """A session made for a.test (no certificate asked), offered with SNI b.test: a full
    handshake where b.test asks for the certificate."""
    port, _ = serve(two_blocks(ca))
    sess = str(tmp_path / "a.sess")
    r = s_client(port, "-sess_out", sess, sni="a.test",
                 request=b"GET / HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n")
    assert b"HTTP/1.1 200 " in r.stdout
    r = s_client(port, "-sess_in", sess, "-cert", ca.path("alice.crt"), "-key",
                 ca.path("alice.key"), sni="b.test",
                 request=b"GET / HTTP/1.1\r\nHost: b.test\r\nConnection: close\r\n\r\n")
    out = text(r)
    assert "\nNew, TLS" in out
    assert b"\r\n\r\nSUCCESS|CN=alice" in r.stdout


def test_session_is_not_resumed_after_a_reload_changes_the_trusted_ca(ca, serve, tmp_path):
    """The session ID context covers the client-certificate settings: a session whose
    certificate was checked against one CA is not resumed once the block trusts another
    (ticket keys outlive a reload), and the certificate is checked anew."""
    port, s = serve(server_block(ca, verify_lines(ca, "on")))
    sess = str(tmp_path / "s.sess")
    cert = ("-cert", ca.path("alice.crt"), "-key", ca.path("alice.key"))
    r = s_client(port, "-sess_out", sess, *cert, sni="localhost", request=LOCAL)
    assert b"\r\n\r\nSUCCESS|" in r.stdout
    r = s_client(port, "-sess_in", sess, *cert, sni="localhost", request=LOCAL)
    assert "\nReused, TLS" in text(r)
    with open(s.conf_path, "w") as f:
        f.write(with_ports(TOP + server_block(ca, verify_lines(ca, "on").replace(
            ca.path("ca.crt"), ca.path("other.crt"))), [port]))
    before = len(s.error_log())
    s.proc.send_signal(signal.SIGHUP)
    assert wait_until(lambda: "configuration reloaded" in s.error_log()[before:], scaled(10))
    r = s_client(port, "-sess_in", sess, *cert, sni="localhost", request=LOCAL)
    assert "\nNew, TLS" in text(r)
    assert b"HTTP/1.1 400 " in r.stdout


def test_ssl_session_reused_is_r_on_a_resumed_session(ca, serve, tmp_path):
    port, _ = serve(server_block(ca, ""))
    sess = str(tmp_path / "s.sess")
    reused = re.compile(rb"\|on\|TLSv1\.[23]\|([r.])\|")
    r = s_client(port, "-sess_out", sess, sni="localhost")
    assert reused.search(r.stdout).group(1) == b"."
    r = s_client(port, "-sess_in", sess, sni="localhost")
    assert reused.search(r.stdout).group(1) == b"r"


@pytest.mark.parametrize("on", ["nginx", "lfhttpd"])
def test_host_other_than_the_sni_name_of_a_checking_server_is_421(ca, serve, on):
    """The certificate was asked for by the server the SNI name chose: a request naming
    another host, to a server that checks certificates, is misdirected (to one that does
    not check, it is answered)."""
    port, _ = serve(two_blocks(ca), on)
    cert = ("-cert", ca.path("alice.crt"), "-key", ca.path("alice.key"))
    r = s_client(port, "-quiet", *cert, sni="b.test",
                 request=b"GET / HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n")
    assert b"HTTP/1.1 200 OK\r\n" in r.stdout
    r = s_client(port, "-quiet", *cert, sni="a.test",
                 request=b"GET / HTTP/1.1\r\nHost: b.test\r\nConnection: close\r\n\r\n")
    assert b"HTTP/1.1 421 Misdirected Request\r\n" in r.stdout
    r = s_client(port, "-quiet", *cert, sni="b.test",
                 request=b"GET / HTTP/1.1\r\nHost: B.test.:443\r\nConnection: close\r\n\r\n")
    assert b"HTTP/1.1 200 OK\r\n" in r.stdout


@pytest.mark.parametrize("on", ["nginx", "lfhttpd"])
def test_server_without_a_certificate_chosen_by_sni_checks_with_its_own_settings(
        ca, serve, on):
    """A server on the address with no certificate of its own: the default server's
    certificate is sent (which asked for none), and the chosen server's `on` refuses the
    request, as nginx's."""
    blocks = (server_block(ca, "", name="a.test", default=True) +
              "server {\n    listen 127.0.0.1:{port0} ssl;\n    server_name c.test;\n"
              "    ssl_verify_client on;\n    ssl_client_certificate " + ca.path("ca.crt") +
              ";\n    location / { return 200 \"c\"; }\n}\n")
    port, _ = serve(blocks, on)
    assert curl(ca, port, "none", name="c.test")[0] == 400
    assert curl(ca, port, "none", name="a.test")[0] == 200


# ------------------------------------------------------------------- variables elsewhere


def test_ssl_variables_in_map_if_add_header_and_log_format(ca, serve, tmp_path):
    log = tmp_path / "tls.log"
    blocks = (f"map $ssl_client_verify $who {{ SUCCESS ok; default no; }}\n"
              f"log_format tls '$ssl_protocol $ssl_cipher $ssl_client_serial $who';\n" +
              server_block(ca, verify_lines(ca, "optional") +
                           f"    access_log {log} tls;\n"
                           "    add_header X-Client \"$ssl_client_s_dn\" always;\n"
                           "    if ($ssl_client_verify != SUCCESS) { return 403; }\n"))
    port, _ = serve(blocks)
    r = subprocess.run(["curl", "-sk", "-i", "--cert", ca.path("alice.crt"), "--key",
                        ca.path("alice.key"), f"https://127.0.0.1:{port}/"],
                       capture_output=True, timeout=scaled(20))
    assert r.stdout.startswith(b"HTTP/1.1 200 ")
    assert b"\r\nX-Client: CN=alice,O=Example\\, Inc.,C=US\r\n" in r.stdout
    assert curl(ca, port, "none")[0] == 403
    assert wait_until(lambda: log.exists() and len(log.read_text().splitlines()) == 2)
    first = log.read_text().splitlines()[0].split(" ")
    assert first[0].startswith("TLSv1.") and first[2:] == ["2A", "ok"]


def test_ssl_variables_in_proxy_set_header(ca, serve, upstream):
    """The upstream is told who the client is, as sites behind nginx are."""
    u = upstream()
    port, _ = serve(server_block(ca, verify_lines(ca, "on")).replace(
        "    location / {", f"    location /app {{\n        proxy_pass http://127.0.0.1:{u.ports[0]};\n"
        "        proxy_set_header X-Client-DN $ssl_client_s_dn;\n"
        "        proxy_set_header X-Client-Verify $ssl_client_verify;\n    }\n"
        "    location / {", 1))
    status, body = curl(ca, port, "alice", "/app")
    assert status == 200
    headers = {k.lower(): v for k, v in json.loads(body)["headers"]}
    assert headers["x-client-dn"] == "CN=alice,O=Example\\, Inc.,C=US"
    assert headers["x-client-verify"] == "SUCCESS"


# ------------------------------------------------------------------- directives


def check(tmp_path, text_):
    """`lfhttpd -t` on text_: the CompletedProcess, and the file's name."""
    conf = tmp_path / "t.conf"
    conf.write_text(text_)
    return subprocess.run([BIN, "-t", "-c", str(conf)], capture_output=True, text=True,
                          timeout=scaled(30)), str(conf)


def enc_block(ca, extra=""):
    return server_block(ca, extra).replace(ca.path("server.key"), ca.path("server.enc.key"))


def test_ssl_password_file_opens_an_encrypted_key_with_a_later_line(ca, serve):
    port, _ = serve(enc_block(ca, f"    ssl_password_file {ca.path('passwords')};\n"))
    assert curl(ca, port, "none")[0] == 200


def test_encrypted_key_without_ssl_password_file_is_refused_at_its_line(ca, tmp_path):
    text_ = with_ports(TOP + enc_block(ca), [free_port()])
    r, conf = check(tmp_path, text_)
    key = ca.path("server.enc.key")
    assert r.returncode == 1
    assert f"{conf}:{line_of(text_, 'ssl_certificate_key')}: ssl_certificate_key \"{key}\": " \
        in r.stderr
    assert "does not match" not in r.stderr


def test_ssl_password_file_without_the_passphrase_is_refused(ca, tmp_path):
    wrong = tmp_path / "wrong"
    wrong.write_text("nope\n")
    text_ = with_ports(TOP + enc_block(ca, f"    ssl_password_file {wrong};\n"), [free_port()])
    r, conf = check(tmp_path, text_)
    assert r.returncode == 1
    assert "no passphrase of ssl_password_file opens it" in r.stderr


def test_ssl_stapling_file_is_stapled_for_a_client_that_asks(ca, serve):
    port, _ = serve(server_block(ca, "    ssl_stapling on;\n"
                                     f"    ssl_stapling_file {ca.path('staple.der')};\n"))
    out = text(s_client(port, "-status", sni="localhost"))
    assert "OCSP Response Status: successful" in out
    assert "Cert Status: good" in out


def test_ssl_stapling_without_a_file_staples_nothing_and_says_so(ca, serve, tmp_path):
    text_ = with_ports(TOP + server_block(ca, "    ssl_stapling on;\n"), [free_port()])
    r, conf = check(tmp_path, text_)
    assert r.returncode == 0
    assert f"{conf}:{line_of(text_, 'ssl_stapling')}: ssl_stapling: without " \
           "ssl_stapling_file" in r.stderr
    port, _ = serve(server_block(ca, "    ssl_stapling on;\n"))
    assert "OCSP response: no response sent" in text(s_client(port, "-status",
                                                              sni="localhost"))


def test_ssl_stapling_file_that_is_no_ocsp_response_is_refused(ca, tmp_path):
    text_ = with_ports(TOP + server_block(ca, "    ssl_stapling on;\n"
                                              f"    ssl_stapling_file {ca.path('ca.crt')};\n"),
                       [free_port()])
    r, conf = check(tmp_path, text_)
    assert r.returncode == 1
    assert f"{conf}:{line_of(text_, 'ssl_stapling_file')}: ssl_stapling_file" in r.stderr


def test_ssl_conf_command_applies(ca, serve):
    port, _ = serve(server_block(
        ca, "    ssl_conf_command Ciphersuites TLS_CHACHA20_POLY1305_SHA256;\n"))
    out = text(s_client(port, "-tls1_3", sni="localhost"))
    assert "Cipher is TLS_CHACHA20_POLY1305_SHA256" in out


def test_ssl_conf_command_unknown_is_refused_at_its_line(ca, tmp_path):
    text_ = with_ports(TOP + server_block(ca, "    ssl_conf_command NoSuchThing yes;\n"),
                       [free_port()])
    r, conf = check(tmp_path, text_)
    assert r.returncode == 1
    assert f"{conf}:{line_of(text_, 'ssl_conf_command')}: ssl_conf_command \"NoSuchThing\"" \
        in r.stderr


def test_ssl_verify_client_on_without_a_ca_is_refused(ca, tmp_path):
    text_ = with_ports(TOP + server_block(ca, "    ssl_verify_client on;\n"), [free_port()])
    r, conf = check(tmp_path, text_)
    assert r.returncode == 1
    assert f"{conf}:{line_of(text_, 'ssl_verify_client')}: no ssl_client_certificate or " \
           "ssl_trusted_certificate for ssl_verify_client" in r.stderr


def test_http2_on_is_accepted_with_a_notice(ca, tmp_path):
    text_ = with_ports(TOP + server_block(ca, "    http2 on;\n"), [free_port()])
    r, conf = check(tmp_path, text_)
    assert r.returncode == 0, r.stderr
    assert f"{conf}:{line_of(text_, 'http2')}: http2: accepted, not used" in r.stderr


def test_certificate_of_a_server_not_listening_with_ssl_is_checked_at_load(ca, tmp_path):
    """nginx reads a server's certificates, keys and password file whether or not it listens
    with `ssl`: a key that does not open is refused at load all the same."""
    text_ = with_ports(TOP + enc_block(ca).replace(" ssl;\n", ";\n", 1), [free_port()])
    r, conf = check(tmp_path, text_)
    assert r.returncode == 1
    assert f"{conf}:{line_of(text_, 'ssl_certificate_key')}: ssl_certificate_key" in r.stderr
