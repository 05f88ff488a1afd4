"""Static files through the real binary: whole files (checked by SHA-256 over curl),
Range (RFC 9110 section 14), conditional requests (section 13), directories, types,
and files the server must refuse."""
import email
import hashlib
import os
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor

import pytest

BIG = 10 * 1024 * 1024


@pytest.fixture
def site(docroot):
    data = os.urandom(BIG)
    (docroot / "big.bin").write_bytes(data)
    (docroot / "t.txt").write_bytes(bytes(range(256)) * 4)  # 1024 bytes
    (docroot / "empty.txt").write_bytes(b"")
    (docroot / "dir").mkdir()
    (docroot / "dir" / "index.html").write_text("<p>index</p>")
    (docroot / "noindex").mkdir()
    return docroot, data


def get(server, connect, path, headers=(), method="GET"):
    c = connect(server)
    extra = "".join(f"{k}: {v}\r\n" for k, v in headers)
    c.send(f"{method} {path} HTTP/1.1\r\nHost: t\r\n{extra}\r\n".encode())
    st, h, body, _ = c.read_response(head_only=method == "HEAD")
    return st, h, body


def test_10_mib_file_downloaded_with_curl_matches_sha256(start_server, site, tmp_path):
    docroot, data = site
    s = start_server(docroot)
    out = tmp_path / "out.bin"
    subprocess.run(["curl", "-sf", "-o", str(out), s.url + "/big.bin"], check=True, timeout=60)
    assert hashlib.sha256(out.read_bytes()).hexdigest() == hashlib.sha256(data).hexdigest()


def test_concurrent_downloads_of_a_large_file_all_match(start_server, site, tmp_path):
    docroot, data = site
    s = start_server(docroot)
    want = hashlib.sha256(data).hexdigest()

    def one(i):
        out = tmp_path / f"out{i}.bin"
        subprocess.run(["curl", "-sf", "-o", str(out), s.url + "/big.bin"], check=True,
                       timeout=60)
        return hashlib.sha256(out.read_bytes()).hexdigest()

    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(one, range(8))) == [want] * 8


def test_empty_file_is_200_with_zero_length(start_server, site, connect):
    s = start_server(site[0])
    st, h, body = get(s, connect, "/empty.txt")
    assert st == 200 and h["content-length"] == "0" and body == b""


def test_file_has_validators_and_accepts_ranges(start_server, site, connect):
    s = start_server(site[0])
    st, h, _ = get(s, connect, "/t.txt")
    assert st == 200
    assert h["etag"].startswith('"') and h["etag"].endswith('"')
    assert email.utils.parsedate_to_datetime(h["last-modified"])
    assert h["accept-ranges"] == "bytes"
    assert h["content-type"] == "text/plain; charset=utf-8"


# ---------------------------------------------------------------- Range

@pytest.mark.parametrize("spec,first,last", [
    ("bytes=0-99", 0, 99),
    ("bytes=100-", 100, 1023),
    ("bytes=-100", 924, 1023),
    ("bytes=1000-999999", 1000, 1023),
    ("bytes=-5000", 0, 1023),
])
def test_single_range_is_206_with_exactly_those_bytes(start_server, site, connect, spec,
                                                       first, last):
    s = start_server(site[0])
    whole = (site[0] / "t.txt").read_bytes()
    st, h, body = get(s, connect, "/t.txt", [("Range", spec)])
    assert st == 206
    assert h["content-range"] == f"bytes {first}-{last}/1024"
    assert body == whole[first:last + 1]


def test_multiple_ranges_are_multipart_byteranges_byte_for_byte(start_server, site, connect):
    s = start_server(site[0])
    whole = (site[0] / "t.txt").read_bytes()
    st, h, body = get(s, connect, "/t.txt", [("Range", "bytes=0-9,20-29,-5")])
    assert st == 206
    ctype = h["content-type"]
    assert ctype.startswith("multipart/byteranges; boundary=")
    msg = email.message_from_bytes(b"Content-Type: " + ctype.encode() + b"\r\n\r\n" + body)
    parts = msg.get_payload()
    assert len(parts) == 3
    for part, (a, b) in zip(parts, [(0, 9), (20, 29), (1019, 1023)]):
        assert part["Content-Range"] == f"bytes {a}-{b}/1024"
        assert part.get_payload(decode=True) == whole[a:b + 1]
    assert int(h["content-length"]) == len(body)


@pytest.mark.parametrize("spec", ["bytes=1024-", "bytes=5000-6000", "bytes=-0"])
def test_unsatisfiable_range_is_416_with_star_content_range(start_server, site, connect, spec):
    s = start_server(site[0])
    st, h, _ = get(s, connect, "/t.txt", [("Range", spec)])
    assert st == 416
    assert h["content-range"] == "bytes */1024"


@pytest.mark.parametrize("spec", ["bytes=abc", "items=0-1", "bytes=5-1", "bytes=0-5,3-8"])
def test_malformed_or_overlapping_range_is_ignored_with_200(start_server, site, connect, spec):
    s = start_server(site[0])
    st, h, body = get(s, connect, "/t.txt", [("Range", spec)])
    assert st == 200 and len(body) == 1024


def test_if_range_with_current_etag_gives_206_and_old_etag_gives_200(start_server, site,
                                                                      connect):
    s = start_server(site[0])
    etag = get(s, connect, "/t.txt")[1]["etag"]
    st, _, body = get(s, connect, "/t.txt", [("Range", "bytes=0-9"), ("If-Range", etag)])
    assert st == 206 and len(body) == 10
    st, _, body = get(s, connect, "/t.txt", [("Range", "bytes=0-9"),
                                              ("If-Range", '"stale"')])
    assert st == 200 and len(body) == 1024


def test_if_range_with_last_modified_date_gives_206(start_server, site, connect):
    s = start_server(site[0])
    lm = get(s, connect, "/t.txt")[1]["last-modified"]
    st, _, body = get(s, connect, "/t.txt", [("Range", "bytes=0-9"), ("If-Range", lm)])
    assert st == 206 and len(body) == 10


# ---------------------------------------------------------------- conditionals

def test_if_none_match_with_current_etag_is_304_without_body_or_length(start_server, site,
                                                                        connect):
    s = start_server(site[0])
    etag = get(s, connect, "/t.txt")[1]["etag"]
    for value in (etag, f'"x", {etag}', "*", "W/" + etag):
        st, h, body = get(s, connect, "/t.txt", [("If-None-Match", value)])
        assert st == 304, value
        assert h["etag"] == etag and "content-length" not in h and body == b""


def test_if_modified_since_at_or_after_mtime_is_304_and_before_is_200(start_server, site,
                                                                      connect):
    s = start_server(site[0])
    lm = get(s, connect, "/t.txt")[1]["last-modified"]
    assert get(s, connect, "/t.txt", [("If-Modified-Since", lm)])[0] == 304
    assert get(s, connect, "/t.txt",
               [("If-Modified-Since", "Mon, 01 Jan 2001 00:00:00 GMT")])[0] == 200
    assert get(s, connect, "/t.txt", [("If-Modified-Since", "yesterday")])[0] == 200


def test_if_none_match_wins_over_if_modified_since(start_server, site, connect):
    s = start_server(site[0])
    lm = get(s, connect, "/t.txt")[1]["last-modified"]
    st, _, _ = get(s, connect, "/t.txt", [("If-None-Match", '"other"'),
                                          ("If-Modified-Since", lm)])
    assert st == 200


def test_failed_if_match_and_if_unmodified_since_are_412(start_server, site, connect):
    s = start_server(site[0])
    assert get(s, connect, "/t.txt", [("If-Match", '"other"')])[0] == 412
    assert get(s, connect, "/t.txt",
               [("If-Unmodified-Since", "Mon, 01 Jan 2001 00:00:00 GMT")])[0] == 412


def test_head_gives_the_same_headers_as_get_without_body(start_server, site, connect):
    s = start_server(site[0])
    _, hg, _ = get(s, connect, "/t.txt")
    st, hh, body = get(s, connect, "/t.txt", method="HEAD")
    assert st == 200 and body == b""
    for k in ("content-length", "etag", "last-modified", "content-type"):
        assert hh[k] == hg[k]


# ---------------------------------------------------------------- directories and refusals

def test_directory_without_slash_is_301_keeping_the_query(start_server, site, connect):
    s = start_server(site[0])
    st, h, _ = get(s, connect, "/dir?a=1")
    assert st == 301 and h["location"] == f"http://t:{s.port}/dir/?a=1"


def test_directory_with_slash_serves_its_index(start_server, site, connect):
    s = start_server(site[0])
    st, h, body = get(s, connect, "/dir/")
    assert st == 200 and body == b"<p>index</p>"


def test_directory_without_index_is_403(start_server, site, connect):
    s = start_server(site[0])
    assert get(s, connect, "/noindex/")[0] == 403


def test_fifo_in_the_root_is_refused_without_hanging(start_server, site, connect):
    os.mkfifo(site[0] / "pipe")
    s = start_server(site[0])
    st, _, _ = get(s, connect, "/pipe")
    assert st in (403, 404)


@pytest.mark.parametrize("target", ["/../etc/passwd", "/%2e%2e/etc/passwd",
                                    "/a/../../etc/passwd", "/%2e%2E/%2e%2e/etc/passwd",
                                    "/..%2f..%2fetc/passwd", "/t.txt%00.html"])
def test_traversal_attempts_never_leave_the_root(start_server, site, connect, target):
    s = start_server(site[0])
    st, _, body = get(s, connect, target)
    assert st in (400, 403, 404)
    assert b"root:" not in body


def test_unreadable_file_is_403(start_server, connect, tmp_path):
    """Run as root, the server would read anything: the test runs it as nobody (who must
    then be able to read its configuration, under pytest's private temporary folder)."""
    if os.geteuid() == 0:
        p = tmp_path
        while str(p) not in ("/", "/tmp"):
            os.chmod(p, 0o755)
            p = p.parent
    root = tempfile.mkdtemp(dir="/tmp")
    os.chmod(root, 0o755)
    with open(os.path.join(root, "secret.txt"), "w") as f:
        f.write("secret")
    os.chmod(os.path.join(root, "secret.txt"), 0o000)
    with open(os.path.join(root, "ok.txt"), "w") as f:
        f.write("ok")
    os.chmod(os.path.join(root, "ok.txt"), 0o644)
    wrap = ()
    if os.geteuid() == 0:
        wrap = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")
    s = start_server(root, "access_log off;\n", wrap=wrap)
    assert get(s, connect, "/ok.txt")[0] == 200
    assert get(s, connect, "/secret.txt")[0] == 403
