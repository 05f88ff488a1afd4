"""What docs/guide/https.md promises of HTTPS beyond serving it, checked from outside with `openssl
s_client`: session ticket keys kept across reloads and rotated (a process-wide ring of
three, a new key every `ssl_session_timeout / 2`, an older key's ticket accepted and
replaced), sessions that expire with `ssl_session_timeout`; `ssl_prefer_server_ciphers`,
`ssl_ecdh_curve` and the forms of `ssl_session_cache`; cipher lists, curves and cache
forms refused at load with FILE:LINE; and the `$https` variable.

A ticket's first 16 bytes name the key that encrypted it (OpenSSL's ticket layout with
the server's own key callback): that is how a test sees a rotation, and whether a resumed
session was given a new ticket. Sessions are TLS 1.2's unless a test says otherwise: their
tickets come in the handshake, so s_client prints the one it was given.
"""
import re
import signal
import subprocess
import time

import pytest

from conftest import BIN, free_port, scaled, wait_until
from tls_harness import (line_of, s_client, s_client_reused, self_signed, text, tls_conf)

TICKETS_ONLY = "ssl_session_cache off;\n"  # no session cache: only a ticket can resume


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """An ECDSA P-256 certificate for example.org (and 127.0.0.1)."""
    return self_signed(tmp_path_factory.mktemp("cert"), "example.org")


@pytest.fixture
def site(docroot):
    (docroot / "index.html").write_text("index\n")
    return docroot


def https(start_server, site, pair, extra=""):
    return start_server(site, conf=tls_conf(site, pair, extra=extra, threads=2))


def handshake(port, *args, sess_in=None, sess_out=None):
    """One TLS 1.2 connection by s_client (a request, then the server closes)."""
    more = ["-tls1_2", *args]
    if sess_in:
        more += ["-sess_in", str(sess_in)]
    if sess_out:
        more += ["-sess_out", str(sess_out)]
    r = s_client(port, *more, sni="example.org")
    assert "HTTP/1.1 200" in text(r), text(r)
    return r


def ticket_of(r):
    """The session ticket s_client printed, as bytes (None when it printed none)."""
    out = r.stdout.decode("latin-1")
    m = re.search(r"TLS session ticket:\n((?:\s+[0-9a-f]{4} - .*\n)+)", out)
    if not m:
        return None
    data = b""
    for line in m.group(1).splitlines():
        hexes = line.split(" - ", 1)[1][:48]  # 16 bytes, "xx xx ... xx-xx ... xx"
        data += bytes.fromhex(hexes.replace("-", " "))
    return data


def key_name(r):
    ticket = ticket_of(r)
    assert ticket and len(ticket) > 16, text(r)
    return ticket[:16]


def next_key(port, current, limit):
    """Make full handshakes (each is given a ticket) until one's ticket names a key other
    than `current`: that key's name. Fails after `limit` seconds."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        name = key_name(handshake(port))
        if name != current:
            return name
        time.sleep(0.1)
    pytest.fail(f"no new ticket key within {limit} s")


def sighup(server):
    before = len(server.error_log())
    server.proc.send_signal(signal.SIGHUP)
    assert wait_until(lambda: "configuration reloaded" in server.error_log()[before:],
                      scaled(10)), server.error_log()[before:]


# ------------------------------------------------------------------- ticket keys


@pytest.mark.parametrize("version", ["-tls1_2", "-tls1_3"])
def test_ticket_issued_before_a_reload_resumes_after_it(start_server, site, pair, tmp_path,
                                                        version):
    """The keys belong to the process, not to the configuration a reload replaces."""
    s = https(start_server, site, pair, TICKETS_ONLY)
    sess = tmp_path / "session.pem"
    first = s_client(s.port, version, "-sess_out", str(sess), sni="example.org")
    assert not s_client_reused(first)
    sighup(s)
    again = s_client(s.port, version, "-sess_in", str(sess), sni="example.org")
    assert s_client_reused(again), text(again)


def test_ticket_keys_rotate_after_half_the_session_timeout(start_server, site, pair):
    """ssl_session_timeout 4s: a ticket made once 2 s have passed names a new key, and
    none made before does (the server's clock is coarse by a few milliseconds)."""
    s = https(start_server, site, pair, TICKETS_ONLY + "ssl_session_timeout 4s;\n")
    t0 = time.monotonic()  # the first key is made after this, by the first ticket
    first = key_name(handshake(s.port))
    next_key(s.port, first, scaled(10))
    assert time.monotonic() - t0 >= 2.0 - 0.05


def test_ticket_of_the_current_key_is_resumed_without_a_new_one(start_server, site, pair,
                                                                tmp_path):
    s = https(start_server, site, pair, TICKETS_ONLY)
    sess = tmp_path / "session.pem"
    first = handshake(s.port, sess_out=sess)
    again = handshake(s.port, sess_in=sess)
    assert s_client_reused(again), text(again)
    assert ticket_of(again) == ticket_of(first)


def test_ticket_of_the_previous_key_is_resumed_and_replaced(start_server, site, pair,
                                                            tmp_path):
    """Once the keys have rotated, a ticket of the previous key still resumes its session,
    and the client is given a new ticket, of the new key."""
    s = https(start_server, site, pair, TICKETS_ONLY + "ssl_session_timeout 6s;\n")
    sess = tmp_path / "session.pem"
    old = key_name(handshake(s.port, sess_out=sess))
    new = next_key(s.port, old, scaled(10))
    again = handshake(s.port, sess_in=sess)
    assert s_client_reused(again), text(again)
    assert key_name(again) == new


def test_ticket_stays_readable_across_two_rotations(start_server, site, pair, tmp_path):
    """The ring of three: a ticket made late in its key's life (its key 3 s old of the 5 s
    that ssl_session_timeout 10s gives it) resumes after two more keys were made, 7 s or so
    later, within its session's timeout."""
    s = https(start_server, site, pair, TICKETS_ONLY + "ssl_session_timeout 10s;\n")
    first = key_name(handshake(s.port))
    time.sleep(3)
    sess = tmp_path / "session.pem"
    assert key_name(handshake(s.port, sess_out=sess)) == first
    second = next_key(s.port, first, scaled(10))
    next_key(s.port, second, scaled(10))
    again = handshake(s.port, sess_in=sess)
    assert s_client_reused(again), text(again)


def test_session_older_than_the_session_timeout_is_a_full_handshake(start_server, site,
                                                                     pair, tmp_path):
    s = https(start_server, site, pair, TICKETS_ONLY + "ssl_session_timeout 2s;\n")
    sess = tmp_path / "session.pem"
    handshake(s.port, sess_out=sess)
    time.sleep(3)
    again = handshake(s.port, sess_in=sess)
    assert not s_client_reused(again), text(again)


# ------------------------------------------------------------------- ciphers and curves

AES256, AES128 = "ECDHE-ECDSA-AES256-GCM-SHA384", "ECDHE-ECDSA-AES128-GCM-SHA256"


def cipher_of(r):
    m = re.search(r"Cipher is (\S+)", text(r))
    assert m, text(r)
    return m.group(1)


@pytest.mark.parametrize("prefer, chosen", [("on", AES256), ("off", AES128)])
def test_prefer_server_ciphers_decides_whose_order_wins(start_server, site, pair, prefer,
                                                        chosen):
    """The server lists AES256 first, the client AES128 first: `on` takes the server's
    first, `off` the client's."""
    s = https(start_server, site, pair, f"ssl_ciphers {AES256}:{AES128};\n"
                                        f"ssl_prefer_server_ciphers {prefer};\n")
    assert cipher_of(handshake(s.port, "-cipher", f"{AES128}:{AES256}")) == chosen


def group_of(r):
    """The key exchange's group, as s_client names it ("secp384r1", "X25519")."""
    m = re.search(r"Server Temp Key: (?:ECDH, )?([^,]+),", text(r))
    assert m, text(r)
    return m.group(1)


@pytest.mark.parametrize("version", ["-tls1_2", "-tls1_3"])
@pytest.mark.parametrize("curve, group", [("P-384", "secp384r1"), ("auto", "X25519")])
def test_ecdh_curve_is_the_group_negotiated(start_server, site, pair, version, curve,
                                            group):
    """The client offers X25519, P-256 and P-384 (in that order): the server's curve is
    the one used."""
    s = https(start_server, site, pair, f"ssl_ecdh_curve {curve};\n")
    r = s_client(s.port, version, "-groups", "X25519:P-256:P-384", sni="example.org")
    assert group_of(r) == group


def check(tmp_path, site, pair, extra):
    """`lfhttpd -t` on a TLS configuration with `extra` after it: (result, conf, text)."""
    conf_text = tls_conf(site, pair, extra=extra)
    conf = tmp_path / "t.conf"
    conf.write_text(conf_text)
    r = subprocess.run([BIN, "-t", "-c", str(conf)], capture_output=True, text=True,
                       timeout=scaled(10))
    return r, str(conf), conf_text


REFUSED = [
    pytest.param("ssl_ciphers NO-SUCH-CIPHER;\n", "ssl_ciphers", id="unknown_cipher"),
    pytest.param("ssl_ecdh_curve P-999;\n", "ssl_ecdh_curve", id="unknown_curve"),
    pytest.param("ssl_session_cache bogus;\n", "ssl_session_cache", id="cache_bogus"),
    pytest.param("ssl_session_cache builtin:many;\n", "ssl_session_cache",
                 id="cache_builtin_not_a_number"),
    pytest.param("ssl_session_cache shared:SSL;\n", "ssl_session_cache",
                 id="cache_shared_without_size"),
    pytest.param("ssl_session_cache shared:SSL:lots;\n", "ssl_session_cache",
                 id="cache_shared_bad_size"),
]


@pytest.mark.parametrize("extra, directive", REFUSED)
def test_bad_tls_setting_is_refused_at_load_with_its_line(tmp_path, site, pair, extra,
                                                          directive):
    """The refusal names the file and the line, with ordinary lines around it."""
    r, conf, conf_text = check(tmp_path, site, pair, "access_log off;\n" + extra +
                               "keepalive_timeout 5s;\n")
    assert r.returncode == 1, r.stdout + r.stderr
    line = line_of(conf_text, directive)
    assert f"{conf}:{line}: {directive}" in r.stderr, r.stderr


@pytest.mark.parametrize("form, resumes", [
    ("off", False), ("none", False), ("builtin", True), ("builtin:1000", True),
    ("shared:SSL:1m", True), ("builtin:1000 shared:SSL:10m", True),
])
def test_session_cache_form_decides_resumption_by_session_id(start_server, site, pair,
                                                             tmp_path, form, resumes):
    """With tickets off, only the session cache resumes a session (by its ID). Without a
    cache the server gives no session ID, and s_client then writes no session out."""
    s = https(start_server, site, pair, f"ssl_session_tickets off;\nssl_session_cache {form};\n")
    sess = tmp_path / "session.pem"
    handshake(s.port, "-no_ticket", sess_out=sess)
    resumed = sess.exists() and s_client_reused(handshake(s.port, "-no_ticket", sess_in=sess))
    assert resumed == resumes


# ------------------------------------------------------------------- $https


def test_https_variable_is_on_over_tls_and_empty_over_plain_http(start_server, site, pair):
    """One server on a plain and a TLS address."""
    plain, secure = free_port(), free_port()
    conf = (f'root "{site}";\nthreads 2;\nerror_log stderr debug;\nshutdown_timeout 5s;\n'
            "server {\n"
            f"    listen 127.0.0.1:{plain};\n    listen 127.0.0.1:{secure} ssl;\n"
            f"    ssl_certificate {pair.cert};\n    ssl_certificate_key {pair.key};\n"
            '    location /h { return 200 "https=[$https]"; }\n'
            "}\n")
    start_server(site, conf=conf)
    request = b"GET /h HTTP/1.1\r\nHost: example.org\r\nConnection: close\r\n\r\n"
    r = s_client(secure, "-quiet", request=request, sni="example.org")
    assert r.stdout.endswith(b"https=[on]"), text(r)
    r = subprocess.run(["curl", "-s", f"http://127.0.0.1:{plain}/h"], capture_output=True,
                       timeout=scaled(10))
    assert r.stdout == b"https=[]", r
