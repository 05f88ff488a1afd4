"""Access control (mod_auth) through the real binary: allow/deny by address and CIDR
(IPv4, IPv6, all; first match wins; 403), then HTTP Basic authentication against htpasswd
files made by Apache's htpasswd (bcrypt, SHA-256 and SHA-512 crypt; and every weaker kind
nginx takes: Apache MD5, MD5-crypt, DES, {SHA}, {SSHA}, {PLAIN}), and a comparison with
nginx on the same directives, files and requests.
"""
import base64
import hashlib
import socket
import subprocess
import time

import pytest

from conftest import BIN, scaled, wait_until

REALM_HEADER = 'Basic realm="Staff only", charset="UTF-8"'
USERS = [("alice", "secret", "-B -C 4"), ("bob", "hunter2", "-2"), ("carol", "s3cret", "-5")]


def make_htpasswd(path, users=USERS):
    """An htpasswd file made by htpasswd itself, one line per (user, password, flags)."""
    first = True
    for user, password, flags in users:
        subprocess.run(["htpasswd", "-b"] + (["-c"] if first else []) + flags.split() +
                       [str(path), user, password], check=True, capture_output=True)
        first = False
    return str(path)


def basic(user, password):
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def request(host, port, headers=(), source=None, path="/"):
    """(status, headers) of one GET on a new connection, from the source address if given."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.settimeout(scaled(10))
        if source:
            s.bind((source, 0))
        s.connect((host, port))
        head = f"GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n"
        head += "".join(f"{h}\r\n" for h in headers)
        s.sendall((head + "\r\n").encode("latin-1"))
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    lines = data.split(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")
    fields = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        fields.setdefault(k.strip().lower(), v.strip())
    return int(lines[0].split()[1]), fields


@pytest.fixture
def site(docroot, tmp_path):
    (docroot / "index.html").write_text("inside\n")
    return make_htpasswd(tmp_path / "htpasswd")


AUTH = 'auth_basic "Staff only";\nauth_basic_user_file "{}";\n'


def auth_server(start_server, docroot, users_file, more=""):
    return start_server(docroot, AUTH.format(users_file) + more)


def get(srv, headers=(), source=None):
    return request(srv.host, srv.port, headers, source)


# --- authentication ---------------------------------------------------------------------

def test_no_credentials_is_401_with_the_challenge(start_server, docroot, site):
    srv = auth_server(start_server, docroot, site)
    status, h = get(srv)
    assert status == 401
    assert h["www-authenticate"] == REALM_HEADER


@pytest.mark.parametrize("user,password", [(u, p) for u, p, _ in USERS],
                         ids=["bcrypt", "sha256_crypt", "sha512_crypt"])
def test_right_password_is_200_for_each_hash_kind(start_server, docroot, site, user,
                                                  password):
    srv = auth_server(start_server, docroot, site)
    status, h = get(srv, [f"Authorization: {basic(user, password)}"])
    assert status == 200
    assert "www-authenticate" not in h


def test_wrong_password_is_401_and_logged(start_server, docroot, site):
    srv = auth_server(start_server, docroot, site)
    status, h = get(srv, [f"Authorization: {basic('alice', 'Secret')}"])
    assert status == 401 and h["www-authenticate"] == REALM_HEADER
    assert wait_until(lambda: 'auth: user "alice": wrong password (client 127.0.0.1)'
                      in srv.error_log(), scaled(5))


def test_wrong_password_after_a_right_one_is_still_401(start_server, docroot, site):
    srv = auth_server(start_server, docroot, site)
    assert get(srv, [f"Authorization: {basic('alice', 'secret')}"])[0] == 200
    assert get(srv, [f"Authorization: {basic('alice', 'secreT')}"])[0] == 401


def test_unknown_user_is_401_and_logged(start_server, docroot, site):
    srv = auth_server(start_server, docroot, site)
    assert get(srv, [f"Authorization: {basic('mallory', 'secret')}"])[0] == 401
    assert wait_until(lambda: 'auth: user "mallory" is not in' in srv.error_log(), scaled(5))


def test_user_name_is_escaped_in_the_log(start_server, docroot, site):
    srv = auth_server(start_server, docroot, site)
    assert get(srv, [f"Authorization: {basic(chr(34) + 'x' + chr(10) + 'y', 'p')}"])[0] == 401
    # a JSON string: the quote and the line feed cannot end the name or the line
    assert wait_until(lambda: 'auth: user "\\"x\\u000ay" is not in' in srv.error_log(),
                      scaled(5))


@pytest.mark.parametrize("value", [
    "Basic !!!!", "Basic YWxpY2U6c2VjcmV0=", "Basic YWxpY2U6c2VjcmV0==", "Basic YWxpY2U",
    "Basic YWxpY2U=", "Basic", "Bearer YWxpY2U6c2VjcmV0", "Basic\tYWxpY2U6c2VjcmV0",
    "Basic YWxp Y2U6c2VjcmV0", "BasicYWxpY2U6c2VjcmV0", basic("bob", "hunter2").rstrip("="),
], ids=["bad_alphabet", "stray_padding", "double_padding", "no_padding", "no_colon",
        "no_token", "other_scheme", "tab", "space_inside", "no_space", "right_but_unpadded"])
def test_malformed_authorization_is_401(start_server, docroot, site, value):
    srv = auth_server(start_server, docroot, site)
    status, h = get(srv, [f"Authorization: {value}"])
    assert status == 401 and h["www-authenticate"] == REALM_HEADER


def test_scheme_is_case_insensitive_and_spaces_may_repeat(start_server, docroot, site):
    srv = auth_server(start_server, docroot, site)
    token = basic("alice", "secret").split()[1]
    assert get(srv, [f"Authorization: bAsIc   {token}"])[0] == 200


def test_two_authorization_fields_are_400(start_server, docroot, site):
    srv = auth_server(start_server, docroot, site)
    a = f"Authorization: {basic('alice', 'secret')}"
    assert get(srv, [a, a])[0] == 400


def test_realm_quotes_and_backslashes_are_escaped(start_server, docroot, site):
    srv = start_server(docroot, 'auth_basic "say \\"hi\\" \\\\o/";\n'
                       f'auth_basic_user_file "{site}";\n')
    assert get(srv)[1]["www-authenticate"] == \
        'Basic realm="say \\"hi\\" \\\\o/", charset="UTF-8"'


def test_auth_basic_off_asks_nothing(start_server, docroot, site):
    srv = start_server(docroot, f'auth_basic off;\nauth_basic_user_file "{site}";\n')
    assert get(srv)[0] == 200


def test_verified_credentials_are_remembered(start_server, docroot, tmp_path):
    """bcrypt at cost 12 takes a good fraction of a second; after the first request the
    same header must not pay it again."""
    users = make_htpasswd(tmp_path / "slow", [("alice", "secret", "-B -C 12")])
    (docroot / "index.html").write_text("x")
    srv = auth_server(start_server, docroot, users)
    a = [f"Authorization: {basic('alice', 'secret')}"]
    t0 = time.monotonic()
    assert get(srv, a)[0] == 200
    first = time.monotonic() - t0
    t0 = time.monotonic()
    for _ in range(10):
        assert get(srv, a)[0] == 200
    assert time.monotonic() - t0 < 2 * first


def check_config(tmp_path, docroot, users_text):
    """`lfhttpd -t` on a configuration whose user file (line 3) holds users_text."""
    users = tmp_path / "users"
    users.write_text(users_text)
    conf = tmp_path / "c.conf"
    conf.write_text(f'root "{docroot}";\nauth_basic "x";\nauth_basic_user_file "{users}";\n')
    p = subprocess.run([BIN, "-t", "-c", str(conf)],
                       capture_output=True, text=True, timeout=scaled(10))
    return p, conf, users


@pytest.mark.parametrize("line,why", [
    ("dave:$apr1$f70r3BWu$U0TnOJynS3l97q29e.VjM0", "user 'dave' has an Apache MD5 ($apr1$)"),
    ("erin:{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=", "user 'erin' has an {SHA} (unsalted SHA-1)"),
    ("frank:plain", "user 'frank' has a hash of no known kind"),
    ("gina:$apr1$", "user 'gina' has a malformed Apache MD5"),
    ("hal", "not NAME:HASH"),
], ids=["apr1", "sha1", "plain", "malformed", "no_colon"])
def test_weak_or_odd_line_is_a_warning_of_the_check_naming_both_files(tmp_path, docroot,
                                                                       line, why):
    p, conf, users = check_config(tmp_path, docroot, "# staff\n" + line + "\nok:{PLAIN}x\n")
    assert p.returncode == 0, p.stderr
    assert "[warn] " + f"{conf}:3: auth: auth_basic_user_file: {users}:2: " + why in p.stderr


def test_many_weak_lines_make_one_warning_a_kind(tmp_path, docroot):
    text = "".join(f"u{i}:{{SHA}}W6ph5Mm5Pz8GgiULbPgzG37mj9g=\n" for i in range(50))
    p, conf, users = check_config(tmp_path, docroot, text)
    assert p.returncode == 0
    assert p.stderr.count("[warn]") == 1
    assert f"{users}:1: user 'u0' has an {{SHA}}" in p.stderr
    assert "and 49 more lines of this kind" in p.stderr


def test_user_file_read_by_several_blocks_is_warned_about_once(tmp_path, docroot):
    users = tmp_path / "users"
    users.write_text("dave:{PLAIN}x\n")
    conf = tmp_path / "c.conf"
    conf.write_text(f'root "{docroot}";\nauth_basic_user_file "{users}";\n'
                    'server {\n  listen 127.0.0.1:8;\n  auth_basic "S";\n'
                    '  location /a/ { auth_basic "A"; }\n  location /b/ { auth_basic "B"; }\n}\n')
    p = subprocess.run([BIN, "-t", "-c", str(conf)],
                       capture_output=True, text=True, timeout=scaled(10))
    assert p.returncode == 0, p.stderr
    assert p.stderr.count("user 'dave' has a {PLAIN}") == 1


@pytest.mark.parametrize("text", ["", "# nobody\n"], ids=["empty", "only_comments"])
def test_user_file_without_users_fails_the_check(tmp_path, docroot, text):
    users = tmp_path / "users"
    users.write_text(text)
    conf = tmp_path / "c.conf"
    conf.write_text(f'root "{docroot}";\nauth_basic "x";\nauth_basic_user_file "{users}";\n')
    p = subprocess.run([BIN, "-t", "-c", str(conf)],
                       capture_output=True, text=True, timeout=scaled(10))
    assert p.returncode != 0 and "no user in the file" in p.stderr


# --- allow and deny ----------------------------------------------------------------------

def rules_server(start_server, docroot, rules, listen="127.0.0.1:0"):
    (docroot / "index.html").write_text("inside\n")
    return start_server(docroot, f"listen {listen};\n" + rules, conf=None) \
        if listen == "127.0.0.1:0" else start_server(
            docroot, conf=f'listen {listen};\nroot "{docroot}";\nthreads 2;\n'
                          f'error_log stderr info;\n{rules}')


def test_deny_all_is_403(start_server, docroot):
    srv = rules_server(start_server, docroot, "deny all;\n")
    assert get(srv)[0] == 403


def test_first_matching_rule_wins(start_server, docroot):
    srv = rules_server(start_server, docroot, "allow 127.0.0.2;\ndeny 127.0.0.0/8;\n"
                       "allow all;\n")
    assert get(srv, source="127.0.0.2")[0] == 200
    assert get(srv, source="127.0.0.1")[0] == 403
    assert get(srv, source="127.0.0.3")[0] == 403


def test_deny_before_allow_wins_for_the_same_address(start_server, docroot):
    srv = rules_server(start_server, docroot, "deny 127.0.0.1;\nallow 127.0.0.1;\n")
    assert get(srv)[0] == 403


def test_cidr_prefix_bounds_are_exact(start_server, docroot):
    srv = rules_server(start_server, docroot, "allow 127.0.0.4/30;\ndeny all;\n")
    for last, status in [(3, 403), (4, 200), (7, 200), (8, 403)]:
        assert get(srv, source=f"127.0.0.{last}")[0] == status, last


def test_no_matching_rule_lets_the_request_through(start_server, docroot):
    srv = rules_server(start_server, docroot, "deny 10.0.0.0/8;\n")
    assert get(srv)[0] == 200


def test_ipv6_rules_match_ipv6_clients(start_server, docroot):
    srv = rules_server(start_server, docroot, "deny ::1;\nallow all;\n", listen="[::1]:0")
    assert get(srv)[0] == 403


def test_ipv6_cidr_allows_and_ipv4_rule_does_not_match_ipv6(start_server, docroot):
    srv = rules_server(start_server, docroot,
                       "deny 127.0.0.1;\nallow ::/64;\ndeny all;\n", listen="[::1]:0")
    assert get(srv)[0] == 200


def test_denied_client_is_403_before_authentication(start_server, docroot, site):
    srv = auth_server(start_server, docroot, site, "deny all;\n")
    status, h = get(srv, [f"Authorization: {basic('alice', 'wrong')}"])
    assert status == 403 and "www-authenticate" not in h


def test_allowed_client_still_needs_credentials(start_server, docroot, site):
    srv = auth_server(start_server, docroot, site, "allow 127.0.0.1;\ndeny all;\n")
    assert get(srv)[0] == 401
    assert get(srv, [f"Authorization: {basic('bob', 'hunter2')}"])[0] == 200


@pytest.mark.parametrize("rule", ["allow 1.2.3.4/33;", "deny ::1/129;", "allow nowhere;",
                                  "deny 10.0.0.0/;"])
def test_bad_address_fails_the_check(tmp_path, docroot, rule):
    conf = tmp_path / "c.conf"
    conf.write_text(f'root "{docroot}";\n{rule}\n')
    p = subprocess.run([BIN, "-t", "-c", str(conf)],
                       capture_output=True, text=True, timeout=scaled(10))
    assert p.returncode != 0 and f"{conf}:2: auth: " in p.stderr


# --- the same configuration in nginx (the `nginx` fixture: conftest.py) ---------------------


def answer(srv, headers, source):
    status, h = request(srv.host, srv.port, headers, source)
    # nginx's challenge has no charset parameter (RFC 7617 section 2.1): ours adds it
    challenge = h.get("www-authenticate", "").replace(', charset="UTF-8"', "")
    return status, challenge


DIFF_REQUESTS = [
    ([], None),
    ([f"Authorization: {basic('alice', 'secret')}"], None),
    ([f"Authorization: {basic('bob', 'hunter2')}"], None),
    ([f"Authorization: {basic('carol', 's3cret')}"], None),
    ([f"Authorization: {basic('alice', 'wrong')}"], None),
    ([f"Authorization: {basic('mallory', 'secret')}"], None),
    (["Authorization: Basic !!!!"], None),
    (["Authorization: Basic YWxpY2U="], None),
    (["Authorization: Bearer abc"], None),
    (["Authorization: Basic"], None),
    (["Authorization: basic   " + basic("alice", "secret").split()[1]], None),
    ([f"Authorization: {basic('alice', 'secret')}"] * 2, None),
    ([], "127.0.0.2"),
    ([f"Authorization: {basic('alice', 'secret')}"], "127.0.0.2"),
    ([f"Authorization: {basic('alice', 'secret')}"], "127.0.0.3"),
    ([f"Authorization: {basic('alice', 'secret')}"], "127.0.0.9"),
]


@pytest.mark.parametrize("rules", [
    "",
    "allow 127.0.0.1;\nallow 127.0.0.2;\ndeny all;\n",
    "deny 127.0.0.3;\nallow 127.0.0.0/24;\ndeny all;\n",
    "deny all;\n",
    "allow 127.0.0.8/29;\ndeny 127.0.0.0/8;\n",
], ids=["auth_only", "allow_list", "deny_first", "deny_all", "cidr"])
def test_same_answers_as_nginx(start_server, nginx, docroot, site, rules):
    text = AUTH.format(site) + rules
    ours = start_server(docroot, text)
    theirs = nginx(docroot, text)
    for headers, source in DIFF_REQUESTS:
        assert answer(ours, headers, source) == answer(theirs, headers, source), \
            (headers, source)


def test_stray_padding_is_where_we_are_stricter_than_nginx(start_server, nginx, docroot,
                                                           site):
    """nginx drops '=' it does not need, and does without the padding: it lets
    "YWxpY2U6c2VjcmV0=" and "Ym9iOmh1bnRlcjI" in; we refuse base64 that is not RFC 4648's,
    as no client sends it."""
    text = AUTH.format(site)
    theirs, ours = nginx(docroot, text), start_server(docroot, text)
    for value in (basic("alice", "secret") + "=", basic("bob", "hunter2").rstrip("=")):
        assert answer(theirs, ["Authorization: " + value], None)[0] == 200
        assert answer(ours, ["Authorization: " + value], None)[0] == 401


# --- every kind of hash nginx takes, in nginx and here ----------------------------------------

def ssha(password, salt):
    """{SSHA} as OpenLDAP's slappasswd writes it: base64 of SHA-1(password salt), salt."""
    return "{SSHA}" + base64.b64encode(hashlib.sha1(password + salt).digest() + salt).decode()


def openssl_passwd(*args):
    return subprocess.run(["openssl", "passwd", *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def htpasswd_line(flags, user, password):
    return subprocess.run(["htpasswd", "-nb", *flags.split(), user, password], check=True,
                          capture_output=True, text=True).stdout.splitlines()[0]


@pytest.fixture
def every_kind(tmp_path):
    """A user file with a line of every kind nginx reads, made by the tools that make them;
    the malformed hashes and odd lines nginx's own tests use; a user listed twice."""
    lines = [
        htpasswd_line("-B -C 4", "bcrypt", "pw-bcrypt"),
        htpasswd_line("-5", "sha512", "pw-sha512"),
        htpasswd_line("-m", "apr1", "pw-apr1"),
        "apr1ssl:" + openssl_passwd("-apr1", "-salt", "saltsalt", "pw-apr1ssl"),
        "md5:" + openssl_passwd("-1", "pw-md5"),
        htpasswd_line("-d", "des", "pw-des"),
        htpasswd_line("-s", "sha", "pw-sha"),
        "ssha:" + ssha(b"pw-ssha", b"\x00salt\xfe"),
        "plain:{PLAIN}pw-plain",
        htpasswd_line("-p", "bare", "pw-bare"),
        "apr1bad:$apr1$",
        "md5bad:$1$",
        "sshabad:{SSHA}_____wQadOA1e+/f+T+H3eCQQhRzYWx0",
        "shabad:{SHA}Zm9vCg==",
        "nocolon",
        "twice:{PLAIN}first",
        "twice:{PLAIN}second",
        "comment:{PLAIN}pw-comment:Comment Field",
    ]
    path = tmp_path / "every-kind"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


EVERY_KIND_USERS = ["bcrypt", "sha512", "apr1", "apr1ssl", "md5", "des", "sha", "ssha",
                    "plain", "bare", "comment"]


def every_kind_requests():
    out = []
    for u in EVERY_KIND_USERS:
        out += [basic(u, "pw-" + u), basic(u, "pw-" + u + "x"), basic(u, "")]
    out += [basic("apr1bad", ""), basic("apr1bad", "x"), basic("md5bad", ""),
            basic("sshabad", "1"), basic("shabad", "foo"), basic("nocolon", ""),
            basic("twice", "first"), basic("twice", "second"), basic("nobody", "x"),
            basic("comment", "pw-comment:Comment Field")]
    return out


def test_every_hash_kind_answers_as_nginx(start_server, nginx, docroot, every_kind):
    (docroot / "index.html").write_text("inside\n")
    text = AUTH.format(every_kind)
    ours, theirs = start_server(docroot, text), nginx(docroot, text)
    answers = {}
    for value in every_kind_requests():
        mine = answer(ours, ["Authorization: " + value], None)
        assert mine == answer(theirs, ["Authorization: " + value], None), \
            base64.b64decode(value.split()[1])
        answers[base64.b64decode(value.split()[1]).decode("latin-1")] = mine[0]
    # and the comparison is not of two servers that refuse everything
    assert [answers[f"{u}:pw-{u}"] for u in EVERY_KIND_USERS if u != "bare"] == [200] * 10
    assert answers["twice:first"] == 200 and answers["twice:second"] == 401
    assert answers["apr1bad:"] == 401 and answers["bare:pw-bare"] == 401


@pytest.mark.parametrize("query", ["?f=users", "?f=nothere", "", "?f=users&x=1"],
                         ids=["file", "missing_file", "empty_name", "file_more_args"])
def test_user_file_named_by_a_variable_answers_as_nginx(start_server, nginx, docroot, tmp_path,
                                                        query):
    (docroot / "index.html").write_text("inside\n")
    (tmp_path / "users").write_text("alice:" + openssl_passwd("-apr1", "secret") + "\n")
    text = AUTH.format(str(tmp_path) + "/$arg_f")
    ours, theirs = start_server(docroot, text), nginx(docroot, text)
    for headers in ([], [f"Authorization: {basic('alice', 'secret')}"],
                    [f"Authorization: {basic('alice', 'wrong')}"]):
        assert request(ours.host, ours.port, headers, path="/" + query)[0] == \
            request(theirs.host, theirs.port, headers, path="/" + query)[0], headers
