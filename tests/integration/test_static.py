"""Static files through the real binary, the parts test_static_files.py leaves out:
traversal tried against a real file outside the root, symlinks in and out of the root,
names that need percent-encoding, media types, validators that follow the file,
preconditions against Range and HEAD, and response framing on a keep-alive connection.

Requests go over raw sockets: curl and Python's http.client normalize paths, and the
point here is what the server does with the bytes it is sent.

Most tests read one site served by one server for the whole module; the ones that change
files start their own server."""
import email.message
import email.parser
import email.utils
import hashlib
import os
import socket
import time

import pytest

from conftest import Server, check_clean_exit, scaled

SECRET = b"SECRET-OUTSIDE-THE-ROOT-7f3a"
T = bytes(range(256)) * 4  # t.txt: 1024 bytes
MTIME = 1_600_000_000  # 2020-09-13T12:26:40Z, set on every file of the site
MTIME_HTTP = "Sun, 13 Sep 2020 12:26:40 GMT"
BIG = 3 * 1024 * 1024 + 17  # more than one sendfile call, not a round number


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A document root under `base`, and next to it (outside the root) a secret file the
    traversal and symlink tests try to reach."""
    base = tmp_path_factory.mktemp("static")
    (base / "secret.txt").write_bytes(SECRET)
    root = base / "www"
    root.mkdir()
    files = {
        "t.txt": T,
        "page.html": b"<!doctype html><p>hi</p>",
        "style.css": b"p { color: red }",
        "app.js": b"console.log(1);",
        "data.json": b'{"a": 1}',
        "pixel.png": bytes.fromhex("89504e470d0a1a0a0000000d49484452"),
        "logo.svg": b'<svg xmlns="http://www.w3.org/2000/svg"/>',
        # An extension nobody knows, and bytes no content sniffer recognises.
        "blob.qqzx": bytes.fromhex("9c1e7f03b2d4e5a6c7081f2e3d4c5b6a"),
        "my file.txt": b"spaces",
        "caf\u00e9 \u00fc.txt".encode(): b"utf-8 name",
        "a+b.txt": b"plus",
        "back\\slash.txt": b"backslash",
        "big.bin": hashlib.sha256(b"seed").digest() * (BIG // 32) + b"x" * (BIG % 32),
    }
    for name, data in files.items():
        path = os.path.join(bytes(root), name.encode() if isinstance(name, str) else name)
        with open(path, "wb") as f:
            f.write(data)
    (root / "%2e%2e").mkdir()  # a directory literally named %2e%2e
    (root / "%2e%2e" / "x.txt").write_bytes(b"literal percent name")
    (root / "htm").mkdir()
    (root / "htm" / "index.htm").write_bytes(b"index.htm only")
    (root / "both").mkdir()
    (root / "both" / "index.html").write_bytes(b"index.html wins")
    (root / "both" / "index.htm").write_bytes(b"index.htm loses")
    (root / "a").mkdir()
    (root / "a" / "b").mkdir()
    (root / "a" / "b" / "index.html").write_bytes(b"nested")
    (root / "my dir").mkdir()
    (root / "my dir" / "index.html").write_bytes(b"spaced dir")
    # Symlinks: leading out of the root (relative, absolute, to /etc/passwd, to a device),
    # and staying inside it (relative, absolute).
    (root / "out_rel.txt").symlink_to("../secret.txt")
    (root / "out_abs.txt").symlink_to(base / "secret.txt")
    (root / "passwd").symlink_to("/etc/passwd")
    (root / "zero").symlink_to("/dev/zero")
    (root / "a" / "in_rel.txt").symlink_to("../t.txt")
    (root / "in_abs.txt").symlink_to(root / "t.txt")
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            os.utime(os.path.join(dirpath, n), (MTIME, MTIME), follow_symlinks=False)
    return base, root


@pytest.fixture(scope="module")
def srv(site, tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("server"), site[1], "index index.html index.htm;\n")
    yield s
    check_clean_exit(s)


def request(s, target, headers=(), method="GET"):
    """One request on a fresh connection: (status, headers, body). `target` is sent as
    given, byte for byte."""
    c = s.connect()
    try:
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers)
        c.send(f"{method} ".encode() + (target if isinstance(target, bytes) else
                                       target.encode()) +
               f" HTTP/1.1\r\nHost: t\r\n{extra}\r\n".encode())
        st, h, body, _ = c.read_response(head_only=method == "HEAD")
        return st, h, body
    finally:
        c.close()


def etag_of(s, target="/t.txt"):
    return request(s, target)[1]["etag"]


# ---------------------------------------------------------------- leaving the root

TRAVERSALS = [
    "/../secret.txt",
    "/../../../../../../etc/passwd",
    "/%2e%2e/secret.txt",
    "/%2e%2e%2fsecret.txt",
    "/%2e%2E/secret.txt",
    "/%2E%2e%2Fsecret.txt",
    "/a/../../secret.txt",
    "/a/b/../../../secret.txt",
    "/./../secret.txt",
    "/..%2fsecret.txt",
    "/a/..%2f..%2fsecret.txt",
    "/..%2f..%2f..%2f..%2f..%2f..%2fetc%2fpasswd",
    "//../secret.txt",
    "/a//..//..//secret.txt",
    "/%2e%2e%5csecret.txt",
    "/..%5c..%5c..%5cetc%5cpasswd",
    "/%c0%ae%c0%ae/secret.txt",
    "/%c0%ae%c0%ae%c0%af%c0%ae%c0%ae%c0%afetc/passwd",
    "/%e0%80%ae%e0%80%ae/secret.txt",
]


@pytest.mark.parametrize("target", TRAVERSALS)
def test_traversal_never_reaches_the_file_outside_the_root(srv, target):
    """RFC 3986 section 5.2.4 removes dot segments, which can never climb above the root;
    whatever the decoding, the file next to the root must not be served."""
    st, _, body = request(srv, target)
    assert st in (400, 403, 404), (target, st)
    assert SECRET not in body and b"root:" not in body


@pytest.mark.parametrize("target", ["/t.txt%00", "/t.txt%00.html", "/%00/t.txt"])
def test_encoded_nul_is_refused(srv, target):
    """A NUL cannot be part of a Linux file name; it is an attack on C string handling."""
    st, _, body = request(srv, target)
    assert st in (400, 404)
    assert body != T


def test_double_slash_before_an_absolute_path_stays_in_the_root(srv):
    """//etc/passwd is the path /etc/passwd under the root (repeated slashes collapse), not
    the system's /etc/passwd."""
    st, _, body = request(srv, "//etc/passwd")
    assert st in (400, 404)
    assert b"root:" not in body


def test_double_encoded_dots_decode_once_to_a_literal_name(srv):
    """%252e decodes once, to the three characters %2e: a name, not a dot segment
    (RFC 3986 section 2.4: never decode twice)."""
    assert request(srv, "/%252e%252e/%252e%252e/secret.txt")[0] == 404


def test_double_encoded_dots_name_the_directory_called_percent_2e_2e(srv):
    """The proof that decoding happens once: a directory literally named %2e%2e exists
    and /%252e%252e/x.txt is the file in it."""
    st, _, body = request(srv, "/%252e%252e/x.txt")
    assert st == 200 and body == b"literal percent name"


def test_backslash_is_an_ordinary_byte_of_a_file_name(srv):
    """On Linux a backslash is a character of the name, not a separator."""
    st, _, body = request(srv, "/back%5Cslash.txt")
    assert st == 200 and body == b"backslash"


def test_backslash_in_a_name_that_does_not_exist_is_404(srv):
    assert request(srv, "/a%5Cin_rel.txt")[0] == 404


# ---------------------------------------------------------------- symlinks

@pytest.mark.parametrize("name", ["out_rel.txt", "out_abs.txt"])
def test_symlink_to_a_file_outside_the_root_is_refused(srv, name):
    """The root is a boundary for the file actually opened, not only for the path."""
    st, _, body = request(srv, "/" + name)
    assert st in (403, 404)
    assert SECRET not in body


def test_symlink_to_etc_passwd_is_refused(srv):
    st, _, body = request(srv, "/passwd")
    assert st in (403, 404)
    assert b"root:" not in body


def test_symlink_to_a_device_is_refused_without_hanging(srv):
    """/dev/zero would never end; it is outside the root anyway."""
    t0 = time.monotonic()
    st, _, _ = request(srv, "/zero")
    assert st in (403, 404)
    assert time.monotonic() - t0 < scaled(3)


def test_relative_symlink_inside_the_root_is_served(srv):
    st, _, body = request(srv, "/a/in_rel.txt")
    assert st == 200 and body == T


def test_absolute_symlink_inside_the_root_is_served(srv):
    st, _, body = request(srv, "/in_abs.txt")
    assert st == 200 and body == T


# ---------------------------------------------------------------- names and directories

@pytest.mark.parametrize("target,body", [
    ("/my%20file.txt", b"spaces"),
    ("/caf%C3%A9%20%C3%BC.txt", b"utf-8 name"),
    ("/caf%c3%a9%20%c3%bc.txt", b"utf-8 name"),
    ("/a+b.txt", b"plus"),
    ("/a%2Bb.txt", b"plus"),
    ("/%74.txt", T),
])
def test_percent_encoded_names_are_served(srv, target, body):
    """RFC 3986 section 2.1: %XX is the octet XX, either case of hex; '+' in a path is a
    plus sign, not a space."""
    st, _, got = request(srv, target)
    assert st == 200 and got == body


def test_query_string_does_not_change_the_file(srv):
    st, _, body = request(srv, "/t.txt?v=123&x")
    assert st == 200 and body == T


def test_nested_directory_without_slash_is_301_keeping_the_query(srv):
    """RFC 9110 section 15.4.2; the query of the request stays on the new URI, an absolute
    one as nginx's (absolute_redirect on): the Host, and the port the request came in on."""
    st, h, _ = request(srv, "/a/b?x=1&y=2")
    assert st == 301
    assert h["location"] == f"http://t:{srv.port}/a/b/?x=1&y=2"


def test_directory_redirect_location_is_percent_encoded(srv):
    """Location is a URI-reference (RFC 9110 section 10.2.2): a space in the directory's
    name must go out as %20."""
    st, h, _ = request(srv, "/my%20dir")
    assert st == 301
    assert h["location"] == f"http://t:{srv.port}/my%20dir/"


def test_directory_redirect_without_host_names_the_local_address(srv):
    """HTTP/1.0 without Host: the address the connection came in on, as nginx."""
    c = srv.connect()
    c.send(b"GET /a/b HTTP/1.0\r\n\r\n")
    st, h, _, _ = c.read_response()
    c.close()
    assert st == 301 and h["location"] == f"http://127.0.0.1:{srv.port}/a/b/"


def test_directory_redirect_is_relative_with_absolute_redirect_off(start_server, docroot):
    (docroot / "d").mkdir()
    s = start_server(docroot, "absolute_redirect off;\n")
    st, h, _ = request(s, "/d?q=1")
    assert st == 301 and h["location"] == "/d/?q=1"


def test_directory_redirect_for_head_has_no_body(srv):
    c = srv.connect()
    c.send(b"HEAD /a/b HTTP/1.1\r\nHost: t\r\n\r\nGET /t.txt HTTP/1.1\r\nHost: t\r\n\r\n")
    st, h, _, _ = c.read_response(head_only=True)
    assert st == 301 and h["location"] == f"http://t:{srv.port}/a/b/"
    st, _, body, _ = c.read_response()
    assert st == 200 and body == T
    c.close()


def test_directory_with_only_index_htm_serves_it(srv):
    """The `index` directive's second name is tried when the first is absent."""
    st, h, body = request(srv, "/htm/")
    assert st == 200 and body == b"index.htm only"
    assert h["content-type"] == "text/html; charset=utf-8"


def test_index_html_is_preferred_over_index_htm(srv):
    st, _, body = request(srv, "/both/")
    assert st == 200 and body == b"index.html wins"


def test_index_files_are_tried_in_the_directives_order(start_server, site):
    s = start_server(site[1], "index index.htm index.html;\n")
    st, _, body = request(s, "/both/")
    assert st == 200 and body == b"index.htm loses"


def test_directory_index_keeps_the_query(srv):
    st, _, body = request(srv, "/a/b/?q=1")
    assert st == 200 and body == b"nested"


@pytest.mark.parametrize("target", ["http://t", "http://t?q=1"])
def test_absolute_form_target_without_a_path_serves_the_root_index(start_server, tmp_path,
                                                                    target):
    """An absolute-form target's empty path is "/" (RFC 9112 section 3.2.2, RFC 9110
    section 4.2.3)."""
    (tmp_path / "www").mkdir()
    (tmp_path / "www" / "index.html").write_bytes(b"root index")
    s = start_server(tmp_path / "www", "index index.html;\n")
    st, _, body = request(s, target)
    assert st == 200 and body == b"root index"


def test_missing_file_is_404(srv):
    assert request(srv, "/no-such-file.txt")[0] == 404


def test_file_with_trailing_slash_is_404(srv):
    """/t.txt/ names a directory that does not exist (ENOTDIR), not the file."""
    st, _, body = request(srv, "/t.txt/")
    assert st == 404 and body != T


# ---------------------------------------------------------------- representation metadata

@pytest.mark.parametrize("name,ctype", [
    ("page.html", "text/html; charset=utf-8"),
    ("style.css", "text/css; charset=utf-8"),
    ("app.js", "text/javascript; charset=utf-8"),
    ("data.json", "application/json"),
    ("t.txt", "text/plain; charset=utf-8"),
    ("pixel.png", "image/png"),
    ("logo.svg", "image/svg+xml"),
    ("blob.qqzx", "application/octet-stream"),
])
def test_content_type_follows_the_extension(srv, name, ctype):
    """RFC 9110 section 8.3."""
    st, h, _ = request(srv, "/" + name)
    assert st == 200
    assert h["content-type"].lower().replace(" ", "") == ctype.lower().replace(" ", "")


@pytest.mark.parametrize("name", ["t.txt", "page.html", "blob.qqzx", "big.bin"])
def test_content_length_is_the_file_size(srv, site, name):
    """RFC 9110 section 8.6."""
    st, h, body = request(srv, "/" + name)
    size = os.path.getsize(site[1] / name)
    assert st == 200 and int(h["content-length"]) == size == len(body)


def test_large_file_body_is_the_file_byte_for_byte(srv, site):
    """Several sendfile calls on one response: no byte lost, repeated or reordered."""
    st, _, body = request(srv, "/big.bin")
    assert st == 200
    assert hashlib.sha256(body).digest() == \
        hashlib.sha256((site[1] / "big.bin").read_bytes()).digest()


def test_last_modified_is_the_imf_fixdate_of_the_mtime(srv):
    """RFC 9110 section 8.8.2, in the IMF-fixdate form of section 5.6.7."""
    assert request(srv, "/t.txt")[1]["last-modified"] == MTIME_HTTP


def test_etag_is_strong_and_quoted(srv):
    """RFC 9110 section 8.8.3: entity-tag = [ W/ ] DQUOTE *etagc DQUOTE."""
    etag = etag_of(srv)
    assert not etag.startswith("W/")
    assert len(etag) >= 3 and etag[0] == etag[-1] == '"' and '"' not in etag[1:-1]


def test_etag_is_the_same_on_every_request_for_an_unchanged_file(srv):
    assert etag_of(srv) == etag_of(srv) == request(srv, "/t.txt", method="HEAD")[1]["etag"]


def test_etags_of_different_files_differ(srv):
    assert etag_of(srv, "/t.txt") != etag_of(srv, "/page.html")


def test_symlink_inside_the_root_has_the_targets_validators(srv):
    """Both names select one representation; a cache may then share it."""
    a, b = request(srv, "/t.txt")[1], request(srv, "/in_abs.txt")[1]
    assert a["etag"] == b["etag"] and a["last-modified"] == b["last-modified"]


# ---------------------------------------------------------------- files that change

@pytest.fixture
def live(start_server, docroot):
    """A server of its own, on a root the test may change while it runs. Its open-file
    cache checks a cached file again on every request (open_file_cache_valid 0), so that a
    change must show at the very next request: the tests below then check that the check
    catches each kind of change."""
    f = docroot / "f.txt"
    f.write_bytes(b"first version")
    os.utime(f, (MTIME, MTIME))
    return start_server(docroot, "open_file_cache_valid 0;\n"), f


def test_rewritten_file_gets_a_new_etag_length_and_body(live):
    """RFC 9110 section 8.8.3: a strong validator changes whenever the representation
    does. The server caches open files; the cache must not outlive a change once the file
    is checked again."""
    s, f = live
    st, h1, body = request(s, "/f.txt")
    assert st == 200 and body == b"first version"
    f.write_bytes(b"second, longer version")
    os.utime(f, (MTIME + 60, MTIME + 60))
    st, h2, body = request(s, "/f.txt")
    assert st == 200 and body == b"second, longer version"
    assert h2["content-length"] == str(len(body))
    assert h2["etag"] != h1["etag"]
    assert h2["last-modified"] != h1["last-modified"]


def test_same_size_rewrite_with_new_mtime_gets_a_new_etag(live):
    s, f = live
    h1 = request(s, "/f.txt")[1]
    f.write_bytes(b"FIRST VERSION")
    os.utime(f, (MTIME + 1, MTIME + 1))
    st, h2, body = request(s, "/f.txt")
    assert st == 200 and body == b"FIRST VERSION"
    assert h2["etag"] != h1["etag"]


def test_file_replaced_by_rename_is_served_new(live):
    """Editors and deploy tools replace a file by renaming a new one over it."""
    s, f = live
    h1 = request(s, "/f.txt")[1]
    tmp = f.with_name("f.txt.new")
    tmp.write_bytes(b"renamed in")
    os.utime(tmp, (MTIME, MTIME))  # even with the very same mtime
    os.rename(tmp, f)
    st, h2, body = request(s, "/f.txt")
    assert st == 200 and body == b"renamed in"
    assert h2["etag"] != h1["etag"]


def test_deleted_file_is_404(live):
    s, f = live
    assert request(s, "/f.txt")[0] == 200
    f.unlink()
    assert request(s, "/f.txt")[0] == 404


def test_old_etag_no_longer_matches_if_none_match(live):
    """RFC 9110 section 13.1.2: after a change, the old tag must give the new body."""
    s, f = live
    old = request(s, "/f.txt")[1]["etag"]
    f.write_bytes(b"changed")
    os.utime(f, (MTIME + 5, MTIME + 5))
    st, _, body = request(s, "/f.txt", [("If-None-Match", old)])
    assert st == 200 and body == b"changed"


# ---------------------------------------------------------------- preconditions

def test_if_none_match_on_head_is_304(srv):
    """RFC 9110 section 13.1.2: If-None-Match applies to GET and HEAD alike."""
    st, h, _ = request(srv, "/t.txt", [("If-None-Match", etag_of(srv))], method="HEAD")
    assert st == 304 and h["etag"] == etag_of(srv)


def test_if_modified_since_on_head_is_304(srv):
    st, _, _ = request(srv, "/t.txt", [("If-Modified-Since", MTIME_HTTP)], method="HEAD")
    assert st == 304


def test_if_none_match_list_without_the_tag_is_200(srv):
    st, _, body = request(srv, "/t.txt", [("If-None-Match", '"a", "b", W/"c"')])
    assert st == 200 and body == T


def test_if_modified_since_after_the_mtime_is_304(srv):
    """RFC 9110 section 13.1.3: not modified since a later date."""
    st, _, _ = request(srv, "/t.txt", [("If-Modified-Since", "Fri, 01 Jan 2021 00:00:00 GMT")])
    assert st == 304


def test_if_modified_since_one_second_before_the_mtime_is_200(srv):
    st, _, body = request(srv, "/t.txt",
                          [("If-Modified-Since", "Sun, 13 Sep 2020 12:26:39 GMT")])
    assert st == 200 and body == T


@pytest.mark.parametrize("date", ["Sunday, 13-Sep-20 12:26:40 GMT",
                                  "Sun Sep 13 12:26:40 2020"])
def test_if_modified_since_in_obsolete_date_forms_is_understood(srv, date):
    """RFC 9110 section 5.6.7: a recipient MUST accept all three HTTP-date formats."""
    assert request(srv, "/t.txt", [("If-Modified-Since", date)])[0] == 304


def test_if_none_match_match_wins_over_an_old_if_modified_since(srv):
    """RFC 9110 section 13.1.3: If-Modified-Since is ignored when If-None-Match is
    present; here the tag matches, so 304 even though the date says modified."""
    st, _, _ = request(srv, "/t.txt", [("If-None-Match", etag_of(srv)),
                                       ("If-Modified-Since", "Mon, 01 Jan 2001 00:00:00 GMT")])
    assert st == 304


def test_if_match_with_the_current_etag_is_200(srv):
    st, _, body = request(srv, "/t.txt", [("If-Match", etag_of(srv))])
    assert st == 200 and body == T


def test_if_match_star_is_200_for_an_existing_file(srv):
    """RFC 9110 section 13.1.1: "*" matches any current representation."""
    st, _, body = request(srv, "/t.txt", [("If-Match", "*")])
    assert st == 200 and body == T


def test_if_match_with_the_weak_form_of_the_etag_is_412(srv):
    """RFC 9110 section 13.1.1: If-Match uses the strong comparison, and a weak tag never
    matches strongly (section 8.8.3.2)."""
    st, _, _ = request(srv, "/t.txt", [("If-Match", "W/" + etag_of(srv))])
    assert st == 412


def test_if_unmodified_since_at_the_mtime_is_200(srv):
    st, _, body = request(srv, "/t.txt", [("If-Unmodified-Since", MTIME_HTTP)])
    assert st == 200 and body == T


def test_if_match_success_overrides_an_old_if_unmodified_since(srv):
    """RFC 9110 section 13.2.2, step 2 is taken only when If-Match is absent."""
    st, _, body = request(srv, "/t.txt", [("If-Match", etag_of(srv)),
                                          ("If-Unmodified-Since", "Mon, 01 Jan 2001 00:00:00 GMT")])
    assert st == 200 and body == T


def test_failed_if_match_is_412_even_with_a_matching_if_none_match(srv):
    """RFC 9110 section 13.2.2: step 1 (If-Match) is evaluated before step 3."""
    st, _, _ = request(srv, "/t.txt", [("If-Match", '"nope"'),
                                       ("If-None-Match", etag_of(srv))])
    assert st == 412


def test_failed_if_match_on_head_is_412(srv):
    st, _, _ = request(srv, "/t.txt", [("If-Match", '"nope"')], method="HEAD")
    assert st == 412


def test_if_none_match_is_evaluated_before_range(srv):
    """RFC 9110 section 13.2.2: Range (step 5) only after the preconditions: a matching
    If-None-Match is 304, not 206."""
    st, h, _ = request(srv, "/t.txt", [("If-None-Match", etag_of(srv)),
                                       ("Range", "bytes=0-9")])
    assert st == 304 and "content-range" not in h


def test_failed_if_match_is_412_not_206(srv):
    st, _, _ = request(srv, "/t.txt", [("If-Match", '"nope"'), ("Range", "bytes=0-9")])
    assert st == 412


def test_304_carries_etag_and_no_body_on_the_wire(srv):
    """RFC 9110 section 15.4.5: a 304 has no content. Checked on the wire: the next
    response on the connection must start right after the 304's head."""
    etag = etag_of(srv)
    c = srv.connect()
    c.send(f"GET /t.txt HTTP/1.1\r\nHost: t\r\nIf-None-Match: {etag}\r\n\r\n"
           "GET /page.html HTTP/1.1\r\nHost: t\r\n\r\n".encode())
    st, h, _, _ = c.read_response()
    assert st == 304 and h["etag"] == etag
    assert "content-length" not in h and "transfer-encoding" not in h
    assert c.buf == b"" or c.buf.startswith(b"HTTP/1.1 200")
    st, _, body, _ = c.read_response()
    assert st == 200 and body == b"<!doctype html><p>hi</p>"
    c.close()


# ---------------------------------------------------------------- Range

def test_range_with_head_is_ignored_and_gives_the_whole_files_headers(srv):
    """RFC 9110 section 14.2: "A server MUST ignore a Range header field received with a
    request method ... for which range handling is not defined", and GET is the only one
    for which it is. So HEAD gives 200 and the headers GET would give without Range; the
    next response on the connection proves no body was sent."""
    c = srv.connect()
    c.send(b"HEAD /t.txt HTTP/1.1\r\nHost: t\r\nRange: bytes=0-99\r\n\r\n"
           b"GET /page.html HTTP/1.1\r\nHost: t\r\n\r\n")
    st, h, _, _ = c.read_response(head_only=True)
    assert st == 200
    assert h["content-length"] == "1024" and "content-range" not in h
    assert h["accept-ranges"] == "bytes"
    st, _, body, _ = c.read_response()
    assert st == 200 and body == b"<!doctype html><p>hi</p>"
    c.close()


def test_range_clamped_to_the_end_of_the_file(srv):
    """RFC 9110 section 14.1.2: a last-pos past the end means the end."""
    st, h, body = request(srv, "/t.txt", [("Range", "bytes=0-999999999")])
    assert st == 206
    assert h["content-range"] == "bytes 0-1023/1024" and body == T


def test_range_inside_a_large_file_is_those_bytes(srv, site):
    """sendfile from an offset far into the file."""
    data = (site[1] / "big.bin").read_bytes()
    a, b = 2_000_001, 2_100_000
    st, h, body = request(srv, "/big.bin", [("Range", f"bytes={a}-{b}")])
    assert st == 206
    assert h["content-range"] == f"bytes {a}-{b}/{len(data)}"
    assert body == data[a:b + 1]


def test_last_byte_of_a_large_file(srv, site):
    data = (site[1] / "big.bin").read_bytes()
    st, h, body = request(srv, "/big.bin", [("Range", "bytes=-1")])
    assert st == 206
    assert h["content-range"] == f"bytes {len(data) - 1}-{len(data) - 1}/{len(data)}"
    assert body == data[-1:]


def parse_multipart(ctype, body):
    msg = email.parser.BytesParser().parsebytes(
        b"Content-Type: " + ctype.encode() + b"\r\n\r\n" + body)
    assert msg.is_multipart()
    return msg.get_payload()


def test_multipart_ranges_of_a_large_file_byte_for_byte(srv, site):
    """RFC 9110 section 14.6: one part per range, each with its Content-Range."""
    data = (site[1] / "big.bin").read_bytes()
    n = len(data)
    spans = [(0, 0), (65535, 65536 + 70000), (1_500_000, 1_500_009), (n - 300, n - 1)]
    spec = "bytes=" + ",".join(f"{a}-{b}" for a, b in spans[:-1]) + ",-300"
    st, h, body = request(srv, "/big.bin", [("Range", spec)])
    assert st == 206
    assert h["content-type"].startswith("multipart/byteranges")
    assert int(h["content-length"]) == len(body)
    parts = parse_multipart(h["content-type"], body)
    assert len(parts) == len(spans)
    for part, (a, b) in zip(parts, spans):
        assert part["Content-Range"] == f"bytes {a}-{b}/{n}"
        assert part.get_payload(decode=True) == data[a:b + 1]


def test_multipart_parts_carry_the_files_content_type(srv):
    """RFC 9110 section 14.6: each body part has the Content-Type the whole would have."""
    st, h, body = request(srv, "/page.html", [("Range", "bytes=0-1,4-5")])
    assert st == 206
    for part in parse_multipart(h["content-type"], body):
        assert part["Content-Type"].replace(" ", "") == "text/html;charset=utf-8"


def test_multipart_boundary_does_not_occur_in_the_content(srv):
    """RFC 2046 section 5.1.1: the boundary must not appear inside the encapsulated parts."""
    st, h, body = request(srv, "/t.txt", [("Range", "bytes=0-255,512-767")])
    assert st == 206
    boundary = h["content-type"].split("boundary=", 1)[1].strip('"').encode()
    assert boundary not in T
    assert body.count(b"--" + boundary) == 3  # two delimiters and the closing one


def test_unsatisfiable_ranges_among_satisfiable_ones_are_left_out(srv):
    """RFC 9110 section 14.1.1: the range-set is satisfiable if any range is; only the
    satisfiable ones are sent (as one part, or a multipart with one part)."""
    st, h, body = request(srv, "/t.txt", [("Range", "bytes=5000-6000,10-19")])
    assert st == 206
    if h["content-type"].startswith("multipart/byteranges"):
        parts = parse_multipart(h["content-type"], body)
        assert len(parts) == 1
        assert parts[0]["Content-Range"] == "bytes 10-19/1024"
        assert parts[0].get_payload(decode=True) == T[10:20]
    else:
        assert h["content-range"] == "bytes 10-19/1024" and body == T[10:20]


def test_unsatisfiable_range_with_head_is_ignored_too(srv):
    """RFC 9110 section 14.2: Range is ignored for HEAD, so not even a 416."""
    st, h, _ = request(srv, "/t.txt", [("Range", "bytes=2048-")], method="HEAD")
    assert st == 200 and h["content-length"] == "1024" and "content-range" not in h


def test_range_beyond_size_is_416_with_star_content_range_and_a_body_framed(srv):
    """RFC 9110 section 15.5.17: 416 with Content-Range: bytes */SIZE; whatever body the
    416 has is framed, so the connection goes on."""
    c = srv.connect()
    c.send(b"GET /t.txt HTTP/1.1\r\nHost: t\r\nRange: bytes=1024-2047\r\n\r\n"
           b"GET /data.json HTTP/1.1\r\nHost: t\r\n\r\n")
    st, h, _, _ = c.read_response()
    assert st == 416 and h["content-range"] == "bytes */1024"
    st, _, body, _ = c.read_response()
    assert st == 200 and body == b'{"a": 1}'
    c.close()


def test_range_on_an_empty_file_is_never_206(start_server, docroot):
    """No range of a 0-byte representation is satisfiable (RFC 9110 section 14.1.2):
    416 with bytes */0, or the Range ignored (section 14.2 allows it) with 200."""
    (docroot / "empty").write_bytes(b"")
    s = start_server(docroot)
    st, h, body = request(s, "/empty", [("Range", "bytes=0-")])
    assert st in (200, 416)
    if st == 416:
        assert h["content-range"] == "bytes */0"
    else:
        assert h["content-length"] == "0" and body == b""


def test_if_range_with_a_weak_etag_gives_the_whole_file(srv):
    """RFC 9110 section 13.1.5: If-Range compares strongly; a weak tag never matches."""
    st, _, body = request(srv, "/t.txt", [("Range", "bytes=0-9"),
                                          ("If-Range", "W/" + etag_of(srv))])
    assert st == 200 and body == T


def test_if_range_with_a_date_other_than_last_modified_gives_the_whole_file(srv):
    """RFC 9110 section 13.1.5: a date validator must match Last-Modified exactly."""
    st, _, body = request(srv, "/t.txt", [("Range", "bytes=0-9"),
                                          ("If-Range", "Fri, 01 Jan 2021 00:00:00 GMT")])
    assert st == 200 and body == T


def test_if_range_without_range_is_ignored(srv):
    st, _, body = request(srv, "/t.txt", [("If-Range", '"stale"')])
    assert st == 200 and body == T


# ---------------------------------------------------------------- framing on one connection

def test_pipelined_mix_of_200_206_304_416_head_and_404_keeps_framing(srv):
    """RFC 9112 section 9.3.2: responses to pipelined requests come in order, each framed
    exactly, whatever its kind."""
    etag = etag_of(srv)
    reqs = [
        ("GET /t.txt", "", 200, T),
        ("GET /t.txt", "Range: bytes=10-19\r\n", 206, T[10:20]),
        ("GET /t.txt", f"If-None-Match: {etag}\r\n", 304, b""),
        ("HEAD /big.bin", "", 200, b""),
        ("GET /t.txt", "Range: bytes=5000-\r\n", 416, None),
        ("GET /nope", "", 404, None),
        ("GET /a/b", "", 301, None),
        ("GET /style.css", "", 200, b"p { color: red }"),
    ]
    c = srv.connect()
    c.send(b"".join(f"{r} HTTP/1.1\r\nHost: t\r\n{h}\r\n".encode() for r, h, _, _ in reqs))
    for r, _, want_st, want_body in reqs:
        st, _, body, _ = c.read_response(head_only=r.startswith("HEAD"))
        assert st == want_st, r
        if want_body is not None:
            assert body == want_body, r
    c.close()


def test_many_small_files_on_one_keep_alive_connection(srv):
    c = srv.connect()
    for _ in range(200):
        c.send(b"GET /data.json HTTP/1.1\r\nHost: t\r\n\r\n")
        st, h, body, _ = c.read_response()
        assert st == 200 and body == b'{"a": 1}'
    c.close()


def test_client_closing_mid_download_does_not_disturb_the_server(srv, site):
    """A client that goes away during a large body must cost the server nothing lasting."""
    for _ in range(5):
        sock = socket.create_connection((srv.host, srv.port))
        sock.sendall(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n")
        sock.recv(1000)
        sock.close()
    st, _, body = request(srv, "/big.bin")
    assert st == 200 and len(body) == BIG
