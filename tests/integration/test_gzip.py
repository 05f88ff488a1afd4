"""mod_gzip: the gzip content coding, negotiated by Accept-Encoding (RFC 9110 12.5.3).

What is compressed (type, size, status, method), Vary on every negotiable response
(12.5.5), the variant's own ETag and the conditional requests that use it (8.8.3, 13.1),
Range answered from the identity, precompressed .gz sidecars, the cache of compressed
files and its invalidation, in-process handler bodies, and the directives.
Each compressed body is checked by decompressing it with Python's gzip module.
The negotiation tests run with br and zstd off (GZIP_ONLY), so that they state gzip's rules
alone; test_compress.py covers the three codings together.
"""
import gzip
import os
import random
import re
import subprocess
import threading
import time
import zlib

import brotli
import pytest
import zstandard

from conftest import BIN, scaled, wait_until

def noise(seed, alphabet, n):
    """n bytes drawn from alphabet: compressible, but not to nothing."""
    rnd = random.Random(seed)
    return bytes(rnd.choice(alphabet) for _ in range(n))


# br and zstd off: the server offers gzip only.
GZIP_ONLY = "brotli off;\nzstd off;\n"

TEXT = b"".join(b"line %05d: the quick brown fox jumps over the lazy dog\n" % i
                for i in range(400))  # ~22 KB of text


def request(server, connect, path, headers=(), method="GET"):
    """One request on a new connection: (status, headers, body, raw head)."""
    c = connect(server)
    lines = [f"{method} {path} HTTP/1.1", "Host: t"] + [f"{k}: {v}" for k, v in headers]
    c.send(("\r\n".join(lines) + "\r\n\r\n").encode())
    return c.read_response(head_only=method == "HEAD")


def gz(server, connect, path, extra=(), method="GET"):
    return request(server, connect, path, (("Accept-Encoding", "gzip"),) + tuple(extra), method)


def compressions(server, path):
    return len(re.findall(r"gzip: compressed %s: " % re.escape(path), server.error_log()))


def assert_gzip(h, body, raw, want):
    assert h.get("content-encoding") == "gzip", raw
    assert int(h["content-length"]) == len(body), raw
    assert gzip.decompress(body) == want
    assert h["vary"] == "Accept-Encoding", raw


def assert_identity(h, body, raw, want, vary=True):
    assert "content-encoding" not in h, raw
    assert body == want
    if vary:
        assert h.get("vary") == "Accept-Encoding", raw
    else:
        assert "vary" not in h, raw


@pytest.fixture
def site(docroot):
    (docroot / "a.txt").write_bytes(TEXT)
    return docroot


@pytest.fixture
def srv(start_server, site):
    return start_server(site, GZIP_ONLY)


@pytest.fixture
def srv_live(start_server, site):
    """For tests that change a file between requests: the open-file cache checks the file
    again on every request (open_file_cache_valid 0), so that the change reaches mod_gzip
    at the very next one."""
    return start_server(site, "open_file_cache_valid 0;\n" + GZIP_ONLY)


# ---------------------------------------------------------------- what is compressed


def test_text_file_is_compressed_and_round_trips(srv, connect):
    st, h, body, raw = gz(srv, connect, "/a.txt")
    assert st == 200, raw
    assert_gzip(h, body, raw, TEXT)
    assert len(body) < len(TEXT) // 3
    assert h["content-type"].startswith("text/plain"), raw
    assert "accept-ranges" not in h, raw


def test_without_accept_encoding_identity_with_vary(srv, connect):
    st, h, body, raw = request(srv, connect, "/a.txt")
    assert st == 200, raw
    assert_identity(h, body, raw, TEXT)
    assert re.fullmatch(r'"[0-9a-f-]+"', h["etag"]), raw  # the strong identity tag


@pytest.mark.parametrize("name,ctype", [
    ("s.js", "javascript"), ("d.json", "application/json"), ("x.xml", "xml"),
    ("i.svg", "image/svg+xml"), ("p.html", "text/html"), ("c.css", "text/css"),
])
def test_compressible_types(start_server, docroot, connect, name, ctype):
    (docroot / name).write_bytes(TEXT)
    s = start_server(docroot)
    st, h, body, raw = gz(s, connect, "/" + name)
    assert st == 200, raw
    assert ctype in h["content-type"], raw
    assert_gzip(h, body, raw, TEXT)


def test_non_compressible_type_is_sent_as_is_without_vary(start_server, docroot, connect):
    data = b"\x89PNG\r\n\x1a\n" + TEXT
    (docroot / "p.png").write_bytes(data)
    s = start_server(docroot)
    st, h, body, raw = gz(s, connect, "/p.png")
    assert st == 200, raw
    assert_identity(h, body, raw, data, vary=False)


def test_small_file_is_sent_as_is_without_vary(start_server, docroot, connect):
    (docroot / "small.txt").write_bytes(b"x" * 255)
    (docroot / "edge.txt").write_bytes(b"x" * 256)
    s = start_server(docroot)
    st, h, body, raw = gz(s, connect, "/small.txt")
    assert_identity(h, body, raw, b"x" * 255, vary=False)
    st, h, body, raw = gz(s, connect, "/edge.txt")  # gzip_min_length 256 is inclusive
    assert_gzip(h, body, raw, b"x" * 256)


def test_head_has_the_get_headers_and_no_body(srv, connect):
    _, hg, bg, _ = gz(srv, connect, "/a.txt")
    st, h, body, raw = gz(srv, connect, "/a.txt", method="HEAD")
    assert st == 200, raw
    assert body == b""
    for k in ("content-encoding", "content-length", "etag", "vary", "last-modified",
              "content-type"):
        assert h[k] == hg[k], (k, raw)
    c = connect(srv)  # and nothing follows the head on the connection
    c.send(b"HEAD /a.txt HTTP/1.1\r\nHost: t\r\nAccept-Encoding: gzip\r\n\r\n"
           b"GET /a.txt HTTP/1.1\r\nHost: t\r\nAccept-Encoding: gzip\r\n\r\n")
    assert c.read_response(head_only=True)[0] == 200
    st, h, body, raw = c.read_response()
    assert_gzip(h, body, raw, TEXT)


def test_large_file_round_trips_to_a_slow_reader(start_server, docroot, connect):
    rnd = random.Random(1)
    words = [b"alpha", b"beta", b"gamma", b"delta", b"<p>", b"</p>", b"\n"]
    data = b" ".join(rnd.choice(words) for _ in range(700000))  # ~3.5 MB
    (docroot / "big.html").write_bytes(data)
    s = start_server(docroot)
    c = connect(s, rcvbuf=4096)
    c.send(b"GET /big.html HTTP/1.1\r\nHost: t\r\nAccept-Encoding: gzip\r\n\r\n")
    time.sleep(0.3)  # the server parks the rest of the response
    st, h, body, raw = c.read_response(timeout=20)
    assert st == 200, raw
    assert_gzip(h, body, raw, data)


def test_file_over_max_length_is_sent_as_is(start_server, site, connect):
    s = start_server(site, conf_extra="gzip_max_length 10k;\n")
    st, h, body, raw = gz(s, connect, "/a.txt")
    assert st == 200, raw
    assert_identity(h, body, raw, TEXT, vary=False)


def test_gzip_off(start_server, site, connect):
    s = start_server(site, conf_extra="gzip off;\n" + GZIP_ONLY)
    st, h, body, raw = gz(s, connect, "/a.txt")
    assert_identity(h, body, raw, TEXT, vary=False)


def test_gzip_types_adds_types(start_server, docroot, connect):
    (docroot / "d.pdf").write_bytes(TEXT)
    (docroot / "f.woff").write_bytes(TEXT)
    s = start_server(docroot, conf_extra="gzip_types application/pdf font/*;\n")
    for name in ("d.pdf", "f.woff"):
        st, h, body, raw = gz(s, connect, "/" + name)
        assert_gzip(h, body, raw, TEXT)


def test_gzip_types_star_compresses_every_type(start_server, docroot, connect):
    (docroot / "p.png").write_bytes(TEXT)
    s = start_server(docroot, conf_extra="gzip_types *;\n")
    st, h, body, raw = gz(s, connect, "/p.png")
    assert_gzip(h, body, raw, TEXT)


def test_gzip_min_length_directive(start_server, site, connect):
    s = start_server(site, conf_extra="gzip_min_length 100k;\n")
    st, h, body, raw = gz(s, connect, "/a.txt")
    assert_identity(h, body, raw, TEXT, vary=False)


def test_comp_level_changes_the_bytes_not_the_content(start_server, docroot, connect):
    data = noise(2, b"abcdefgh ", 200000)
    (docroot / "r.txt").write_bytes(data)
    s1 = start_server(docroot, conf_extra="gzip_comp_level 1;\n")
    s9 = start_server(docroot, conf_extra="gzip_comp_level 9;\n")
    b1 = gz(s1, connect, "/r.txt")[2]
    b9 = gz(s9, connect, "/r.txt")[2]
    assert gzip.decompress(b1) == gzip.decompress(b9) == data
    assert len(b9) < len(b1)


def test_error_pages_are_not_compressed(srv, connect):
    st, h, body, raw = gz(srv, connect, "/nothing.txt")
    assert st == 404, raw
    assert "content-encoding" not in h, raw


# ---------------------------------------------------------------- negotiation


@pytest.mark.parametrize("ae", ["gzip;q=0", "GZIP;Q=0", "br, deflate", "*, gzip;q=0",
                                "gzip;q=0.5, identity", "gzip;q=0.5, *;q=1", ""])
def test_negotiated_to_identity(srv, connect, ae):
    st, h, body, raw = request(srv, connect, "/a.txt", [("Accept-Encoding", ae)])
    assert st == 200, raw
    assert_identity(h, body, raw, TEXT)


@pytest.mark.parametrize("ae", ["*", "gzip;q=0.5", "x-gzip", "deflate, gzip;q=1.0, *;q=0.5",
                                " br ,\tGzip ; q=0.7 ", "gzip, identity;q=0", "*;q=0.3"])
def test_negotiated_to_gzip(srv, connect, ae):
    st, h, body, raw = request(srv, connect, "/a.txt", [("Accept-Encoding", ae)])
    assert st == 200, raw
    assert_gzip(h, body, raw, TEXT)


@pytest.mark.parametrize("ae", ["identity;q=0", "*;q=0", "br, identity;q=0"])
def test_nothing_acceptable_gets_identity_not_406(srv, connect, ae):
    # RFC 9110 12.5.3 allows 406 or the identity; like nginx we send the identity.
    st, h, body, raw = request(srv, connect, "/a.txt", [("Accept-Encoding", ae)])
    assert st == 200, raw
    assert_identity(h, body, raw, TEXT)


def test_accept_encoding_on_several_lines(srv, connect):
    st, h, body, raw = request(srv, connect, "/a.txt",
                               [("Accept-Encoding", "br"), ("Accept-Encoding", "gzip")])
    assert_gzip(h, body, raw, TEXT)


# ---------------------------------------------------------------- ETag and conditionals


def test_variants_have_distinct_etags_and_same_last_modified(srv, connect):
    _, hi, _, _ = request(srv, connect, "/a.txt")
    _, hg, _, raw = gz(srv, connect, "/a.txt")
    assert hg["etag"] == "W/" + hi["etag"][:-1] + '-gzip"', raw
    assert hg["last-modified"] == hi["last-modified"]


def test_if_none_match_with_gzip_etag_is_304(srv, connect):
    _, h, _, _ = gz(srv, connect, "/a.txt")
    etag = h["etag"]
    st, h2, body, raw = gz(srv, connect, "/a.txt", [("If-None-Match", etag)])
    assert st == 304, raw
    assert body == b""
    assert h2["etag"] == etag, raw
    assert h2["vary"] == "Accept-Encoding", raw
    assert "content-encoding" not in h2 and "content-length" not in h2, raw
    assert "last-modified" in h2, raw
    # weak comparison: the tag without W/ matches too, and in a list
    st, _, _, raw = gz(srv, connect, "/a.txt", [("If-None-Match", '"x", ' + etag[2:])])
    assert st == 304, raw


def test_if_none_match_gzip_etag_head_is_304(srv, connect):
    etag = gz(srv, connect, "/a.txt")[1]["etag"]
    st, h, _, raw = gz(srv, connect, "/a.txt", [("If-None-Match", etag)], method="HEAD")
    assert st == 304, raw


def test_gzip_etag_without_accepting_gzip_gets_identity_200(srv, connect):
    etag = gz(srv, connect, "/a.txt")[1]["etag"]
    st, h, body, raw = request(srv, connect, "/a.txt", [("If-None-Match", etag)])
    assert st == 200, raw
    assert_identity(h, body, raw, TEXT)


def test_identity_etag_when_accepting_gzip_gets_gzip_200(srv, connect):
    etag = request(srv, connect, "/a.txt")[1]["etag"]
    st, h, body, raw = gz(srv, connect, "/a.txt", [("If-None-Match", etag)])
    assert st == 200, raw
    assert_gzip(h, body, raw, TEXT)
    assert h["content-type"].startswith("text/plain"), raw


def test_identity_etag_without_gzip_is_304_with_vary(srv, connect):
    etag = request(srv, connect, "/a.txt")[1]["etag"]
    st, h, _, raw = request(srv, connect, "/a.txt", [("If-None-Match", etag)])
    assert st == 304, raw
    assert h["etag"] == etag, raw
    assert h["vary"] == "Accept-Encoding", raw


def test_both_etags_in_the_list_with_gzip_is_304_naming_the_gzip_one(srv, connect):
    ei = request(srv, connect, "/a.txt")[1]["etag"]
    eg = gz(srv, connect, "/a.txt")[1]["etag"]
    st, h, _, raw = gz(srv, connect, "/a.txt", [("If-None-Match", f"{ei}, {eg}")])
    assert st == 304, raw
    assert h["etag"] == eg, raw


def test_if_modified_since_gives_304_with_the_gzip_etag(srv, connect):
    _, h, _, _ = gz(srv, connect, "/a.txt")
    st, h2, _, raw = gz(srv, connect, "/a.txt", [("If-Modified-Since", h["last-modified"])])
    assert st == 304, raw
    assert h2["etag"] == h["etag"], raw
    assert h2["vary"] == "Accept-Encoding", raw


def test_if_match_identity_etag_fails_for_the_gzip_variant(srv, connect):
    ei = request(srv, connect, "/a.txt")[1]["etag"]
    st, h, _, raw = gz(srv, connect, "/a.txt", [("If-Match", ei)])
    assert st == 412, raw
    st, h, body, raw = gz(srv, connect, "/a.txt", [("If-Match", "*")])
    assert st == 200, raw
    assert_gzip(h, body, raw, TEXT)


# ---------------------------------------------------------------- ranges


def test_range_is_answered_from_the_identity_with_vary(srv, connect):
    st, h, body, raw = gz(srv, connect, "/a.txt", [("Range", "bytes=0-99")])
    assert st == 206, raw
    assert body == TEXT[:100]
    assert "content-encoding" not in h, raw
    assert h["vary"] == "Accept-Encoding", raw
    assert h["content-range"] == f"bytes 0-99/{len(TEXT)}", raw


def test_multipart_range_has_vary(srv, connect):
    st, h, body, raw = gz(srv, connect, "/a.txt", [("Range", "bytes=0-9,100-109")])
    assert st == 206, raw
    assert h["content-type"].startswith("multipart/byteranges"), raw
    assert h["vary"] == "Accept-Encoding", raw
    assert TEXT[100:110] in body


def test_failed_if_range_gets_identity_200(srv, connect):
    st, h, body, raw = gz(srv, connect, "/a.txt",
                          [("Range", "bytes=0-9"), ("If-Range", '"other"')])
    assert st == 200, raw
    assert_identity(h, body, raw, TEXT)


# ---------------------------------------------------------------- .gz sidecars


def sidecar(docroot, name, data, age=0):
    """Write name.gz with a marker in its header (so its bytes are recognisably its own),
    its mtime `age` seconds after (positive) or before (negative) the file's."""
    blob = gzip.compress(data, compresslevel=1, mtime=12345)
    p = docroot / (name + ".gz")
    p.write_bytes(blob)
    st = os.stat(docroot / name)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + int(age * 1e9)))
    return blob


def test_fresh_sidecar_is_sent(start_server, site, connect):
    blob = sidecar(site, "a.txt", TEXT, age=1)
    s = start_server(site)
    st, h, body, raw = gz(s, connect, "/a.txt")
    assert st == 200, raw
    assert body == blob
    assert_gzip(h, body, raw, TEXT)
    assert compressions(s, "/a.txt") == 0


def test_sidecar_with_the_same_mtime_is_fresh(start_server, site, connect):
    blob = sidecar(site, "a.txt", TEXT, age=0)
    s = start_server(site)
    assert gz(s, connect, "/a.txt")[2] == blob


def test_older_sidecar_is_ignored(start_server, site, connect):
    blob = sidecar(site, "a.txt", b"stale content", age=-10)
    s = start_server(site)
    st, h, body, raw = gz(s, connect, "/a.txt")
    assert body != blob
    assert_gzip(h, body, raw, TEXT)
    assert compressions(s, "/a.txt") == 1


def test_sidecar_and_compressed_variant_share_the_weak_etag(start_server, site, connect):
    s = start_server(site)
    e1 = gz(s, connect, "/a.txt")[1]["etag"]
    sidecar(site, "a.txt", TEXT, age=1)
    e2 = gz(s, connect, "/a.txt")[1]["etag"]
    assert e1 == e2 and e1.startswith("W/")


def test_gzip_static_off_ignores_sidecars(start_server, site, connect):
    blob = sidecar(site, "a.txt", TEXT, age=1)
    s = start_server(site, conf_extra="gzip_static off;\n")
    st, h, body, raw = gz(s, connect, "/a.txt")
    assert body != blob
    assert_gzip(h, body, raw, TEXT)


def test_sidecar_is_not_sent_without_accept_encoding(start_server, site, connect):
    sidecar(site, "a.txt", TEXT, age=1)
    s = start_server(site)
    st, h, body, raw = request(s, connect, "/a.txt")
    assert_identity(h, body, raw, TEXT)


def test_sidecar_of_a_file_over_max_length_is_sent(start_server, site, connect):
    blob = sidecar(site, "a.txt", TEXT, age=1)
    s = start_server(site, conf_extra="gzip_max_length 1k;\n")
    st, h, body, raw = gz(s, connect, "/a.txt")
    assert body == blob
    assert_gzip(h, body, raw, TEXT)
    st, h, body, raw = request(s, connect, "/a.txt")
    assert_identity(h, body, raw, TEXT)  # with Vary: a gzip variant exists


def test_sidecar_of_an_index_file(start_server, docroot, connect):
    (docroot / "sub").mkdir()
    (docroot / "sub" / "index.html").write_bytes(TEXT)
    blob = sidecar(docroot / "sub", "index.html", TEXT, age=1)
    s = start_server(docroot)
    st, h, body, raw = gz(s, connect, "/sub/")
    assert st == 200, raw
    assert body == blob
    assert_gzip(h, body, raw, TEXT)


def test_sidecar_that_is_a_directory_is_ignored(start_server, site, connect):
    (site / "a.txt.gz").mkdir()
    s = start_server(site)
    st, h, body, raw = gz(s, connect, "/a.txt")
    assert_gzip(h, body, raw, TEXT)


def test_sidecar_symlink_out_of_the_root_is_ignored(start_server, site, tmp_path, connect):
    outside = tmp_path / "secret.gz"
    outside.write_bytes(gzip.compress(b"secret"))
    os.symlink(outside, site / "a.txt.gz")
    st = os.stat(site / "a.txt")
    os.utime(outside, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    s = start_server(site)
    st, h, body, raw = gz(s, connect, "/a.txt")
    assert_gzip(h, body, raw, TEXT)


def test_sidecar_conditional_304(start_server, site, connect):
    sidecar(site, "a.txt", TEXT, age=1)
    s = start_server(site)
    etag = gz(s, connect, "/a.txt")[1]["etag"]
    st, h, _, raw = gz(s, connect, "/a.txt", [("If-None-Match", etag)])
    assert st == 304, raw


# ---------------------------------------------------------------- the cache


def test_cached_variant_is_reused(srv, connect):
    b1 = gz(srv, connect, "/a.txt")[2]
    b2 = gz(srv, connect, "/a.txt")[2]
    b3 = gz(srv, connect, "/a.txt", method="HEAD")
    assert b1 == b2
    assert int(b3[1]["content-length"]) == len(b1)
    assert compressions(srv, "/a.txt") == 1


def test_without_cache_every_response_is_compressed(start_server, site, connect):
    s = start_server(site, conf_extra="gzip_cache_size 0;\n")
    b1 = gz(s, connect, "/a.txt")[2]
    b2 = gz(s, connect, "/a.txt")[2]
    assert b1 == b2  # deterministic
    assert compressions(s, "/a.txt") == 2


def test_changed_file_is_compressed_again(srv_live, site, connect):
    b1 = gz(srv_live, connect, "/a.txt")[2]
    e1 = gz(srv_live, connect, "/a.txt")[1]["etag"]
    new = TEXT.replace(b"fox", b"cat")  # same size: only the mtime tells
    (site / "a.txt").write_bytes(new)
    st = os.stat(site / "a.txt")
    os.utime(site / "a.txt", ns=(st.st_atime_ns, st.st_mtime_ns + 5 * 10**9))
    st, h, b2, raw = gz(srv_live, connect, "/a.txt")
    assert_gzip(h, b2, raw, new)
    assert b2 != b1 and h["etag"] != e1
    assert compressions(srv_live, "/a.txt") == 2
    assert gz(srv_live, connect, "/a.txt")[2] == b2
    assert compressions(srv_live, "/a.txt") == 2


def test_touched_file_is_compressed_again_to_the_same_bytes(srv_live, site, connect):
    b1 = gz(srv_live, connect, "/a.txt")[2]
    st = os.stat(site / "a.txt")
    os.utime(site / "a.txt", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    st, h, b2, raw = gz(srv_live, connect, "/a.txt")
    assert b2 == b1
    assert compressions(srv_live, "/a.txt") == 2


def test_old_etag_after_a_change_is_not_304(srv_live, site, connect):
    e1 = gz(srv_live, connect, "/a.txt")[1]["etag"]
    (site / "a.txt").write_bytes(TEXT + b"more\n")
    st, h, body, raw = gz(srv_live, connect, "/a.txt", [("If-None-Match", e1)])
    assert st == 200, raw
    assert_gzip(h, body, raw, TEXT + b"more\n")


def test_small_cache_evicts_and_still_serves(start_server, docroot, connect):
    files = {}
    for i in range(6):
        data = noise(i, b"abcdefghijklmnop \n", 60000)
        (docroot / f"f{i}.txt").write_bytes(data)
        files[i] = data
    s = start_server(docroot, conf_extra="gzip_cache_size 100k;\n")
    for _ in range(2):
        for i, data in files.items():
            st, h, body, raw = gz(s, connect, f"/f{i}.txt")
            assert_gzip(h, body, raw, data)
    # each variant is ~35 KB: the cache holds two of them, so the second round recompresses
    assert sum(compressions(s, f"/f{i}.txt") for i in files) > 6


def test_concurrent_requests_for_one_file_compress_it_once(start_server, docroot, connect):
    """Requests that come while the file is being compressed get the identity (they do not
    wait); those after it share the one variant."""
    data = noise(3, b"abcdefgh \n", 2_000_000)
    (docroot / "hot.txt").write_bytes(data)
    s = start_server(docroot)
    bodies, errors = [], []

    def worker():
        try:
            c = s.connect(timeout=30)
            for _ in range(5):
                c.send(b"GET /hot.txt HTTP/1.1\r\nHost: t\r\nAccept-Encoding: gzip\r\n\r\n")
                st, h, body, raw = c.read_response(timeout=30)
                assert st == 200, raw
                coded = h.get("content-encoding") == "gzip"
                assert (gzip.decompress(body) if coded else body) == data
                if coded:
                    bodies.append(body)
            c.close()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(set(bodies)) == 1
    assert compressions(s, "/hot.txt") == 1


# ---------------------------------------------------------------- bounds on compression work

# Brotli at level 11 takes about a second of CPU on this megabyte of noise: long enough for
# other requests to come while it runs. No CPU budget: these tests are about the others.
# One thread group: a request never lands in a group whose threads are all compressing.
# br alone: `gzip off` would take it away too, unless said.
SLOW = ("gzip off;\nbrotli on;\nzstd off;\nbrotli_comp_level 11;\ngzip_cpu_per_second 0;\n"
        "groups 1;\n")
BIG = 1_000_000


def br(server, connect, path):
    return request(server, connect, path, (("Accept-Encoding", "br"),))


def started(server, path, coding="br"):
    """Wait until the server says it began compressing path."""
    assert wait_until(lambda: f"{coding}: compressing {path}\n" in server.error_log(),
                      scaled(10)), server.error_log()


def finished(server, path, coding="br"):
    return f"{coding}: compressed {path}: " in server.error_log()


def test_request_for_a_variant_being_made_gets_identity_at_once(start_server, docroot,
                                                                  connect):
    data = noise(5, b"abcdefgh \n", BIG)
    (docroot / "big.txt").write_bytes(data)
    s = start_server(docroot, SLOW)
    first = connect(s, timeout=scaled(30))
    first.send(b"GET /big.txt HTTP/1.1\r\nHost: t\r\nAccept-Encoding: br\r\n\r\n")
    started(s, "/big.txt")
    st, h, body, raw = br(s, connect, "/big.txt")
    assert_identity(h, body, raw, data)
    assert not finished(s, "/big.txt"), "answered only after the compression"
    st, h, body, raw = first.read_response(timeout=scaled(30))
    assert st == 200 and h.get("content-encoding") == "br", raw
    assert "br: not compressing /big.txt: another request is" in s.error_log()


def test_past_max_compressions_a_response_goes_identity(start_server, site, connect):
    data = noise(6, b"abcdefgh \n", BIG)
    (site / "big.txt").write_bytes(data)
    s = start_server(site, SLOW + "gzip_max_compressions 1;\n")
    first = connect(s, timeout=scaled(30))
    first.send(b"GET /big.txt HTTP/1.1\r\nHost: t\r\nAccept-Encoding: br\r\n\r\n")
    started(s, "/big.txt")
    st, h, body, raw = br(s, connect, "/a.txt")  # another file: one compression is running
    assert_identity(h, body, raw, TEXT)
    assert not finished(s, "/big.txt"), "answered only after the compression"
    assert "br: not compressing /a.txt: gzip_max_compressions are running" in s.error_log()
    st, h, body, raw = first.read_response(timeout=scaled(30))
    assert h.get("content-encoding") == "br", raw
    st, h, body, raw = br(s, connect, "/a.txt")  # the place is free again
    assert h.get("content-encoding") == "br", raw


def test_default_max_compressions_is_half_the_threads(start_server, site, connect):
    """threads 4: two compressions at once, a third request goes identity."""
    for i in range(2):
        (site / f"big{i}.txt").write_bytes(noise(10 + i, b"abcdefgh \n", BIG))
    s = start_server(site, SLOW + "threads 4;\n")
    running = []
    for i in range(2):
        c = connect(s, timeout=scaled(30))
        c.send(f"GET /big{i}.txt HTTP/1.1\r\nHost: t\r\nAccept-Encoding: br\r\n\r\n"
               .encode())
        started(s, f"/big{i}.txt")
        running.append(c)
    st, h, body, raw = br(s, connect, "/a.txt")
    assert_identity(h, body, raw, TEXT)
    assert not finished(s, "/big0.txt") and not finished(s, "/big1.txt")
    for c in running:
        assert c.read_response(timeout=scaled(30))[1].get("content-encoding") == "br"


def test_cycle_over_the_cache_size_is_bounded_by_the_cpu_budget(start_server, docroot,
                                                                connect):
    """Four files whose variants do not fit together in the cache, asked for in a cycle:
    without a bound every request would be a compression. Each takes some 20 ms of CPU,
    the budget is 1 ms a second: after the first, the cycle is served identity."""
    files = {f"/cyc{i}.txt": noise(20 + i, b"abcdefghijklmnop \n", 400_000) for i in range(4)}
    for path, data in files.items():
        (docroot / path[1:]).write_bytes(data)
    s = start_server(docroot, GZIP_ONLY + "gzip_cache_size 300k;\ngzip_cpu_per_second 1ms;\n")
    identity = 0
    for _ in range(3):
        for path, data in files.items():
            st, h, body, raw = gz(s, connect, path)
            assert st == 200, raw
            if h.get("content-encoding") == "gzip":  # compressed, or the one cached
                assert gzip.decompress(body) == data
            else:
                assert_identity(h, body, raw, data)
                identity += 1
    assert sum(compressions(s, p) for p in files) <= 2, s.error_log()
    assert identity >= 6
    assert "not compressing /cyc1.txt: gzip_cpu_per_second is spent" in s.error_log()


def test_cpu_budget_zero_is_no_budget(start_server, docroot, connect):
    files = {f"/cyc{i}.txt": noise(20 + i, b"abcdefghijklmnop \n", 400_000) for i in range(4)}
    for path, data in files.items():
        (docroot / path[1:]).write_bytes(data)
    s = start_server(docroot, GZIP_ONLY + "gzip_cache_size 300k;\ngzip_cpu_per_second 0;\n")
    for _ in range(2):
        for path, data in files.items():
            assert_gzip(*gz(s, connect, path)[1:], data)
    assert sum(compressions(s, p) for p in files) == 8


def test_handler_bodies_pass_the_same_gate(start_server, site, connect):
    s = start_server(site, GZIP_ONLY + "handler /request request;\ngzip_cpu_per_second 1ms;\n")
    (site / "big.txt").write_bytes(noise(7, b"abcdefghijklmnop \n", 400_000))
    assert gz(s, connect, "/big.txt")[1].get("content-encoding") == "gzip"  # spends it
    st, h, body, raw = gz(s, connect, "/request", [("X-Pad", "x" * 2000)])
    assert st == 200 and "content-encoding" not in h, raw
    assert "gzip: not compressing /request: gzip_cpu_per_second is spent" in s.error_log()


# ---------------------------------------------------------------- in-process handlers

HANDLERS = ("handler /echo echo;\nhandler /request request;\nhandler /hello hello;\n"
            "handler /status status;\n")


@pytest.fixture
def hsrv(start_server, site):
    return start_server(site, conf_extra=HANDLERS)


def test_handler_body_is_compressed(hsrv, connect):
    pad = "p" * 2000
    st, h, body, raw = gz(hsrv, connect, "/request", [("X-Pad", pad)])
    assert st == 200, raw
    assert h["content-encoding"] == "gzip", raw
    assert h["vary"] == "Accept-Encoding", raw
    text = gzip.decompress(body)
    assert text.startswith(b"GET /request HTTP/1.1\r\n")
    assert pad.encode() in text


def test_handler_body_head_has_gzip_length(hsrv, connect):
    pad = [("X-Pad", "q" * 3000)]
    _, hg, bg, _ = gz(hsrv, connect, "/request", pad)
    st, h, body, raw = gz(hsrv, connect, "/request", pad, method="HEAD")
    assert st == 200 and body == b"", raw


def test_handler_body_without_gzip_is_identity_with_vary(hsrv, connect):
    st, h, body, raw = request(hsrv, connect, "/request", [("X-Pad", "p" * 2000)])
    assert "content-encoding" not in h, raw
    assert h["vary"] == "Accept-Encoding", raw
    assert body.startswith(b"GET /request HTTP/1.1\r\n")


def test_post_answer_is_not_compressed(hsrv, connect):
    body = b"b" * 5000
    c = connect(hsrv)
    c.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nAccept-Encoding: gzip\r\n"
           b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    st, h, got, raw = c.read_response()
    assert st == 200, raw
    assert "content-encoding" not in h, raw
    assert got == body


def test_small_handler_body_is_not_compressed(hsrv, connect):
    st, h, body, raw = gz(hsrv, connect, "/hello")
    assert st == 200, raw
    assert body == b"Hello, world!\n"
    assert "content-encoding" not in h and "vary" not in h, raw


def test_existing_vary_is_extended(hsrv, start_server, site, connect):
    s = start_server(site, conf_extra=HANDLERS + "gzip_min_length 16;\n")
    st, h, body, raw = gz(s, connect, "/status?format=json")
    assert st == 200, raw
    assert h["content-encoding"] == "gzip", raw
    assert gzip.decompress(body).startswith(b"{")
    vary = [v.strip().lower() for v in h["vary"].split(",")]
    assert vary == ["accept", "accept-encoding"], raw


def test_large_handler_body_to_a_slow_reader(hsrv, connect):
    c = connect(hsrv, rcvbuf=4096)
    pad = noise(5, b"abcdef", 7000).decode()
    c.send(f"GET /request HTTP/1.1\r\nHost: t\r\nAccept-Encoding: gzip\r\nX-Pad: {pad}\r\n\r\n"
           .encode())
    time.sleep(0.2)
    st, h, body, raw = c.read_response()
    assert h["content-encoding"] == "gzip", raw
    assert pad.encode() in gzip.decompress(body)


# ---------------------------------------------------------------- directives


def check_config(tmp_path, text):
    path = tmp_path / "t.conf"
    path.write_text("listen 127.0.0.1:0;\nroot .;\n" + text)
    p = subprocess.run([BIN, "-t", "-c", str(path)], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=10, cwd=str(tmp_path))
    return p.returncode, p.stdout.decode("latin-1"), str(path)


def test_all_directives_pass_the_check(tmp_path):
    code, out, _ = check_config(tmp_path, "gzip on;\ngzip_types application/pdf font/*;\n"
                                "gzip_min_length 1k;\ngzip_max_length 1m;\n"
                                "gzip_comp_level 9;\ngzip_static off;\ngzip_cache_size 0;\n"
                                "gzip_max_compressions 3;\ngzip_cpu_per_second 2s;\n")
    assert code == 0, out


@pytest.mark.parametrize("line", [
    "gzip maybe;", "gzip;", "gzip on off;", "gzip_comp_level 0;", "gzip_comp_level 10;",
    "gzip_comp_level x;", "gzip_min_length big;", "gzip_max_length 2g;",
    "gzip_types;", "gzip_types texthtml;", "gzip_types /x;", "gzip_types text/;",
    "gzip_static yes;", "gzip_cache_size -1;", "gzip_max_compressions 0;",
    "gzip_max_compressions many;", "gzip_cpu_per_second half;", "gzip_cpu_per_second -1s;",
])
def test_bad_directive_is_an_error_naming_the_line(tmp_path, line):
    code, out, path = check_config(tmp_path, "\n" + line + "\n")
    assert code != 0, out
    assert f"{path}:4:" in out, out


def test_min_length_over_max_length_is_an_error(tmp_path):
    code, out, path = check_config(tmp_path, "gzip_min_length 2m;\ngzip_max_length 1m;\n")
    assert code != 0, out
    assert f"{path}:3:" in out and "gzip_min_length" in out, out


# ---------------------------------------------------------------- CGI output

# Compressed as it streams, in the coding the client prefers among those switched on: br and
# zstd are on here (the server's defaults), unlike the negotiation tests above.
DECODE = {
    "gzip": gzip.decompress,
    "br": brotli.decompress,
    # (a streamed frame does not say its size: decoded as a stream)
    "zstd": lambda b: zstandard.ZstdDecompressor().decompressobj().decompress(b),
}


def cgi_site(start_server, docroot, script_text, extra=""):
    """A server with /cgi-bin/ mounted on docroot/cgi-bin, whose text.sh is script_text
    (POSIX sh, run in that directory, where text.txt holds TEXT)."""
    cgi = docroot / "cgi-bin"
    cgi.mkdir()
    (cgi / "text.txt").write_bytes(TEXT)
    script = cgi / "text.sh"
    script.write_text("#!/bin/sh\n" + script_text)
    script.chmod(0o755)
    return start_server(docroot, f'cgi /cgi-bin/ "{cgi}";\n' + extra)


def text_script(head="Content-Type: text/plain\\n", length=False):
    if length:
        head += f"Content-Length: {len(TEXT)}\\n"
    return f"printf '{head}\\n'\ncat text.txt\n"


@pytest.mark.parametrize("length", [False, True], ids=["chunked", "content-length"])
@pytest.mark.parametrize("coding", ["gzip", "br", "zstd"])
def test_cgi_output_is_compressed_in_the_accepted_coding(start_server, docroot, connect,
                                                        coding, length):
    """A CGI script's text is compressed as it streams, in the coding the client accepts,
    and decodes to what the script wrote; a Content-Length the script gave is the identity's,
    so the compressed answer is chunked."""
    s = cgi_site(start_server, docroot, text_script(length=length))
    st, h, body, raw = request(s, connect, "/cgi-bin/text.sh", (("Accept-Encoding", coding),))
    assert st == 200, raw
    assert h.get("content-encoding") == coding, raw
    assert h.get("transfer-encoding") == "chunked" and "content-length" not in h, raw
    assert h.get("vary") == "Accept-Encoding", raw
    assert len(body) < len(TEXT) // 2
    assert DECODE[coding](body) == TEXT


@pytest.mark.parametrize("length", [False, True], ids=["chunked", "content-length"])
def test_cgi_output_without_accept_encoding_is_sent_as_it_is(start_server, docroot, connect,
                                                           length):
    s = cgi_site(start_server, docroot, text_script(length=length))
    st, h, body, raw = request(s, connect, "/cgi-bin/text.sh")
    assert st == 200, raw
    assert "content-encoding" not in h, raw
    assert body == TEXT
    assert compressions(s, "/cgi-bin/text.sh") == 0


def test_cgi_output_of_a_type_not_compressible_is_sent_as_it_is(start_server, docroot,
                                                                connect):
    s = cgi_site(start_server, docroot,
                 text_script(head="Content-Type: application/octet-stream\\n"))
    st, h, body, raw = gz(s, connect, "/cgi-bin/text.sh")
    assert st == 200, raw
    assert "content-encoding" not in h and "vary" not in h, raw
    assert body == TEXT


def test_cgi_output_the_script_encoded_is_sent_as_it_is(start_server, docroot, connect):
    """A script that says Content-Encoding has encoded its body itself: it goes through
    untouched, never compressed twice."""
    s = cgi_site(start_server, docroot,
                 "printf 'Content-Type: text/plain\\nContent-Encoding: gzip\\n\\n'\n"
                 "gzip -c text.txt\n")
    st, h, body, raw = gz(s, connect, "/cgi-bin/text.sh")
    assert st == 200, raw
    assert h.get("content-encoding") == "gzip", raw
    assert gzip.decompress(body) == TEXT  # once: twice would decode to gzip bytes


def test_cgi_output_is_not_compressed_with_gzip_off(start_server, docroot, connect):
    s = cgi_site(start_server, docroot, text_script(), extra="gzip off;\n")
    st, h, body, raw = request(s, connect, "/cgi-bin/text.sh", (("Accept-Encoding", "br"),))
    assert st == 200, raw
    assert "content-encoding" not in h, raw
    assert body == TEXT


@pytest.mark.parametrize("coding", ["gzip", "br", "zstd"])
def test_cgi_output_written_in_pieces_arrives_compressed_in_pieces(start_server, docroot,
                                                                  connect, tmp_path, coding):
    """The first piece a script writes reaches the client, compressed and decodable, while
    the script still runs: the script writes the rest only once the test has decoded the
    first (it waits up to 60 s for a file the test creates)."""
    go = tmp_path / "go"
    first = TEXT[:3000]
    s = cgi_site(start_server, docroot,
                 "printf 'Content-Type: text/plain\\n\\n'\nhead -c 3000 text.txt\n"
                 f"i=0; while [ ! -e '{go}' ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); "
                 "done\ntail -c +3001 text.txt\n")
    c = connect(s)
    c.send(f"GET /cgi-bin/text.sh HTTP/1.1\r\nHost: t\r\nAccept-Encoding: {coding}\r\n\r\n"
           .encode())
    c.sock.settimeout(scaled(10))
    while b"\r\n\r\n" not in c.buf:
        c._fill()
    head, _, c.buf = c.buf.partition(b"\r\n\r\n")
    assert f"Content-Encoding: {coding}".encode() in head, head
    decoder = {"gzip": lambda: zlib.decompressobj(16 + 15),
               "br": brotli.Decompressor,
               "zstd": lambda: zstandard.ZstdDecompressor().decompressobj()}[coding]()
    take = decoder.decompress if coding != "br" else decoder.process
    got = b""
    try:
        while len(got) < len(first):
            size = int(c._read_line().split(b";")[0], 16)
            assert size > 0, "the body ended before the script did"
            got += take(c._read_exact(size))
            assert c._read_exact(2) == b"\r\n"
    except TimeoutError:
        pytest.fail(f"the first piece did not arrive decodable: {len(got)} bytes of it")
    assert got == first
    go.touch()
    while True:
        size = int(c._read_line().split(b";")[0], 16)
        if size == 0:
            break
        got += take(c._read_exact(size))
        assert c._read_exact(2) == b"\r\n"
    assert got == TEXT


# ---------------------------------------------------------------- the cache under load


def test_concurrent_clients_of_many_files_share_a_small_gzip_cache(start_server, docroot):
    """8 clients ask at once for 12 files whose variants do not all fit in the cache
    (gzip_cache_size 150k, ~35 KB a variant): entries are added, found and evicted on
    several threads at once, and every client gets each file's exact body (gzip, or the
    identity while a variant is being made or past gzip_max_compressions). No CPU budget:
    spent (a sanitizer build compresses slowly), it would answer identity instead of making
    the evicted variants again, which is what the test watches."""
    files = {}
    for i in range(12):
        files[f"/c{i}.txt"] = noise(100 + i, b"abcdefghijklmnop \n", 60000)
        (docroot / f"c{i}.txt").write_bytes(files[f"/c{i}.txt"])
    s = start_server(docroot, conf_extra="gzip_cache_size 150k;\ngzip_cpu_per_second 0;\n")
    errors = []

    def worker(k):
        try:
            c = s.connect(timeout=scaled(30))
            order = list(files)
            random.Random(k).shuffle(order)
            for path in order * 2:
                c.send(f"GET {path} HTTP/1.1\r\nHost: t\r\nAccept-Encoding: gzip\r\n\r\n"
                       .encode())
                st, h, body, raw = c.read_response(timeout=scaled(30))
                assert st == 200, raw
                if h.get("content-encoding") == "gzip":  # else being made, or a bound
                    body = gzip.decompress(body)
                assert body == files[path], path
            c.close()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert sum(compressions(s, p) for p in files) > len(files)  # some were evicted


# ---------------------------------------------------------------- settings per block


def test_cached_variants_in_a_location_of_its_own_settings_do_not_allocate_per_request(
        start_server, docroot, tmp_path, connect):
    """Keep-alive requests for a file whose gzip variant is cached, in a location with its
    own gzip settings (types, a User-Agent regex, Vary, Via rules): reading the block's
    settings, testing the request and taking the variant from the cache allocate nothing."""
    from conftest import BY_DESIGN, SANITIZED
    from test_allocations import alloc_counter, allocations
    if SANITIZED:
        pytest.skip("the sanitizers replace malloc, so there is nothing to count " + BY_DESIGN)
    lib = alloc_counter()
    (docroot / "page.html").write_bytes(TEXT)
    counter = tmp_path / "allocs"
    s = start_server(docroot, "access_log off;\nkeepalive_requests 0;\n"
                     "server {\n"
                     "  location / {\n"
                     "    gzip_types text/css; gzip_disable msie6 \"^curl/\"; gzip_vary on;\n"
                     "    gzip_proxied expired no_etag; gzip_comp_level 5;\n"
                     "  }\n"
                     "}\n",
                     env={"LD_PRELOAD": lib, "LFHTTPD_ALLOC_COUNTER": str(counter)})
    req = (b"GET /page.html HTTP/1.1\r\nHost: t\r\nAccept-Encoding: gzip\r\n"
           b"User-Agent: Mozilla/5.0 (X11; Linux x86_64)\r\n\r\n")
    c = connect(s, timeout=10)

    def run(n, batch=100):
        for _ in range(n // batch):
            c.send(req * batch)
            for _ in range(batch):
                st, h, body, raw = c.read_response()
                assert st == 200 and h.get("content-encoding") == "gzip", raw

    run(500)
    before = allocations(counter)
    run(5000)
    after = allocations(counter)
    assert after - before < 50, f"{after - before} allocations over 5,000 requests"


def test_gzip_off_still_sends_a_fresh_gz_sidecar_with_gzip_static_on(start_server, site,
                                                                    connect):
    """gzip_static is its own switch, as nginx's: `gzip off` stops compressing, not the
    sidecars."""
    side = b"the sidecar's text\n" * 40
    (site / "a.txt.gz").write_bytes(gzip.compress(side))
    t = os.stat(site / "a.txt").st_mtime + 1
    os.utime(site / "a.txt.gz", (t, t))
    s = start_server(site, "gzip off;\ngzip_static on;\n")
    st, h, body, raw = gz(s, connect, "/a.txt")
    assert st == 200, raw
    assert_gzip(h, body, raw, side)
