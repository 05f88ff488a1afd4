"""mod_gzip's three codings together: gzip, br (Brotli) and zstd (Zstandard).

Chosen by Accept-Encoding q-values (RFC 9110 12.5.3), a tie going to the server's
preference br, zstd, gzip; each variant with its own weak ETag and its own conditional
answers; .br and .zst sidecars as .gz ones; ranges from the identity; the directives.
Bodies are decoded by curl --compressed (as a browser would) or by Python's brotli and
zstandard modules (Debian python3-brotli, python3-zstandard; `make check-deps`).
"""
import gzip
import os
import random
import re
import subprocess

import brotli
import pytest
import zstandard

from conftest import BIN

TEXT = b"".join(b"line %05d: the quick brown fox jumps over the lazy dog\n" % i
                for i in range(400))  # ~22 KB of text

DECODE = {
    "gzip": gzip.decompress,
    "br": brotli.decompress,
    "zstd": lambda b: zstandard.ZstdDecompressor().decompress(b),
}


def request(server, connect, path, headers=(), method="GET"):
    """One request on a new connection: (status, headers, body, raw head)."""
    c = connect(server)
    lines = [f"{method} {path} HTTP/1.1", "Host: t"] + [f"{k}: {v}" for k, v in headers]
    c.send(("\r\n".join(lines) + "\r\n\r\n").encode())
    return c.read_response(head_only=method == "HEAD")


def ask(server, connect, ae, path="/a.txt", extra=(), method="GET"):
    return request(server, connect, path, (("Accept-Encoding", ae),) + tuple(extra), method)


def coding_of(h):
    return h.get("content-encoding", "identity")


def assert_coded(h, body, raw, coding, want=TEXT):
    assert coding_of(h) == coding, raw
    assert int(h["content-length"]) == len(body), raw
    assert DECODE[coding](body) == want
    assert h["vary"] == "Accept-Encoding", raw


def compressions(server, coding, path):
    return len(re.findall(r"%s: compressed %s: " % (coding, re.escape(path)),
                          server.error_log()))


@pytest.fixture
def site(docroot):
    (docroot / "a.txt").write_bytes(TEXT)
    return docroot


@pytest.fixture
def srv(start_server, site):
    return start_server(site)


# ---------------------------------------------------------------- a real client


def curl(server, *args):
    p = subprocess.run(["curl", "-sS", "-D", "-", *args,
                        f"http://127.0.0.1:{server.port}/a.txt"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
    assert p.returncode == 0, p.stderr
    head, _, body = p.stdout.partition(b"\r\n\r\n")
    return head.decode("latin-1").lower(), body


def test_curl_compressed_gets_br_and_decodes_it(srv):
    """curl --compressed offers every coding it decodes (deflate, gzip, br, zstd), all at
    q=1, as browsers do: the server's preference picks br."""
    head, body = curl(srv, "--compressed")
    assert "\r\ncontent-encoding: br\r\n" in head, head
    assert body == TEXT


@pytest.mark.parametrize("coding", ["br", "zstd"])
def test_curl_decodes_each_coding(srv, coding):
    head, body = curl(srv, "--compressed", "-H", f"Accept-Encoding: {coding}")
    assert f"\r\ncontent-encoding: {coding}\r\n" in head, head
    assert body == TEXT


# ---------------------------------------------------------------- negotiation


@pytest.mark.parametrize("ae,coding", [
    ("br", "br"), ("zstd", "zstd"),
    ("gzip, deflate, br, zstd", "br"), ("gzip, zstd", "zstd"), ("*", "br"),
    ("ZSTD, GZip", "zstd"), ("br;q=0.5, gzip", "gzip"), ("br;q=0.8, zstd;q=0.9", "zstd"),
    ("gzip;q=1.0, br;q=0.999", "gzip"),
])
def test_highest_weight_wins_and_a_tie_goes_to_br_then_zstd_then_gzip(srv, connect, ae,
                                                                        coding):
    st, h, body, raw = ask(srv, connect, ae)
    assert st == 200, raw
    assert_coded(h, body, raw, coding)


@pytest.mark.parametrize("ae,coding", [
    ("br;q=0, gzip", "gzip"), ("*, br;q=0", "zstd"), ("*, br;q=0, zstd;q=0", "gzip"),
    ("br;q=0, zstd;q=0, gzip;q=0", "identity"), ("br, identity;q=1, *;q=0", "br"),
    ("br;q=0.5, identity", "identity"),
])
def test_q_zero_refuses_a_coding(srv, connect, ae, coding):
    st, h, body, raw = ask(srv, connect, ae)
    assert st == 200, raw
    if coding == "identity":
        assert coding_of(h) == "identity" and body == TEXT, raw
        assert h["vary"] == "Accept-Encoding", raw
    else:
        assert_coded(h, body, raw, coding)


# ---------------------------------------------------------------- ETags and conditionals


def test_each_variant_has_its_own_weak_etag(srv, connect):
    _, hi, _, _ = request(srv, connect, "/a.txt")
    for coding in ("gzip", "br", "zstd"):
        _, h, _, raw = ask(srv, connect, coding)
        assert h["etag"] == "W/" + hi["etag"][:-1] + f'-{coding}"', raw
        assert h["last-modified"] == hi["last-modified"], raw


@pytest.mark.parametrize("coding", ["br", "zstd"])
def test_if_none_match_with_the_variant_etag_is_304(srv, connect, coding):
    _, h, _, _ = ask(srv, connect, coding)
    st, h2, body, raw = ask(srv, connect, coding, extra=[("If-None-Match", h["etag"])])
    assert st == 304 and body == b"", raw
    assert h2["etag"] == h["etag"], raw
    assert h2["vary"] == "Accept-Encoding", raw


def test_br_etag_asked_with_zstd_gets_the_zstd_variant(srv, connect):
    _, hb, _, _ = ask(srv, connect, "br")
    st, h, body, raw = ask(srv, connect, "zstd", extra=[("If-None-Match", hb["etag"])])
    assert st == 200, raw
    assert_coded(h, body, raw, "zstd")


def test_identity_etag_asked_with_br_gets_the_br_variant(srv, connect):
    _, hi, _, _ = request(srv, connect, "/a.txt")
    st, h, body, raw = ask(srv, connect, "br", extra=[("If-None-Match", hi["etag"])])
    assert st == 200, raw
    assert_coded(h, body, raw, "br")


@pytest.mark.parametrize("coding", ["br", "zstd"])
def test_head_has_the_variant_length_and_no_body(srv, connect, coding):
    _, hg, bg, _ = ask(srv, connect, coding)
    st, h, body, raw = ask(srv, connect, coding, method="HEAD")
    assert st == 200 and body == b"", raw
    assert h["content-encoding"] == coding, raw
    assert h["content-length"] == str(len(bg)), raw
    assert h["etag"] == hg["etag"], raw


def test_range_is_answered_from_the_identity(srv, connect):
    st, h, body, raw = ask(srv, connect, "br, zstd", extra=[("Range", "bytes=0-99")])
    assert st == 206, raw
    assert body == TEXT[:100]
    assert "content-encoding" not in h, raw
    assert h["vary"] == "Accept-Encoding", raw


# ---------------------------------------------------------------- the cache


@pytest.mark.parametrize("coding", ["br", "zstd"])
def test_variant_is_compressed_once_and_kept(srv, connect, coding):
    for _ in range(3):
        st, h, body, raw = ask(srv, connect, coding)
        assert_coded(h, body, raw, coding)
    assert compressions(srv, coding, "/a.txt") == 1


def test_each_coding_is_cached_apart(srv, connect):
    """One file's three variants live side by side in the cache: asking for one does not
    replace another."""
    for _ in range(2):
        for coding in ("gzip", "br", "zstd"):
            st, h, body, raw = ask(srv, connect, coding)
            assert_coded(h, body, raw, coding)
    assert [compressions(srv, c, "/a.txt") for c in ("gzip", "br", "zstd")] == [1, 1, 1]


# ---------------------------------------------------------------- sidecars


def sidecar(docroot, name, suffix, blob, age=1):
    p = docroot / (name + suffix)
    p.write_bytes(blob)
    st = os.stat(docroot / name)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + int(age * 1e9)))


SIDECARS = {
    "br": (".br", lambda: brotli.compress(TEXT, quality=1)),
    "zstd": (".zst", lambda: zstandard.ZstdCompressor(level=1).compress(TEXT)),
}


@pytest.mark.parametrize("coding", ["br", "zstd"])
def test_fresh_sidecar_is_sent_as_it_is(start_server, site, connect, coding):
    suffix, make = SIDECARS[coding]
    blob = make()
    sidecar(site, "a.txt", suffix, blob)
    s = start_server(site)
    st, h, body, raw = ask(s, connect, coding)
    assert st == 200, raw
    assert body == blob
    assert_coded(h, body, raw, coding)
    assert compressions(s, coding, "/a.txt") == 0


@pytest.mark.parametrize("coding", ["br", "zstd"])
def test_older_sidecar_is_ignored(start_server, site, connect, coding):
    suffix, _ = SIDECARS[coding]
    sidecar(site, "a.txt", suffix, b"stale bytes", age=-10)
    s = start_server(site)
    st, h, body, raw = ask(s, connect, coding)
    assert_coded(h, body, raw, coding)
    assert compressions(s, coding, "/a.txt") == 1


def test_gzip_static_off_ignores_br_sidecars(start_server, site, connect):
    sidecar(site, "a.txt", ".br", b"not brotli at all")
    s = start_server(site, "gzip_static off;\n")
    st, h, body, raw = ask(s, connect, "br")
    assert_coded(h, body, raw, "br")


def test_file_over_max_length_offers_only_the_codings_of_its_sidecars(start_server, site,
                                                                      connect):
    blob = zstandard.ZstdCompressor(level=1).compress(TEXT)
    sidecar(site, "a.txt", ".zst", blob)
    s = start_server(site, "gzip_max_length 10k;\n")
    st, h, body, raw = ask(s, connect, "gzip, br, zstd")
    assert body == blob
    assert_coded(h, body, raw, "zstd")
    st, h, body, raw = ask(s, connect, "gzip, br")
    assert coding_of(h) == "identity" and body == TEXT, raw
    assert h["vary"] == "Accept-Encoding", raw


# ---------------------------------------------------------------- handler bodies


def test_handler_body_is_compressed_in_the_chosen_coding(start_server, site, connect):
    s = start_server(site, "handler /request request;\n")
    pad = "p" * 2000
    for coding in ("br", "zstd"):
        st, h, body, raw = ask(s, connect, coding, path="/request", extra=[("X-Pad", pad)])
        assert st == 200 and coding_of(h) == coding, raw
        assert pad.encode() in DECODE[coding](body)


# ---------------------------------------------------------------- directives


@pytest.mark.parametrize("conf,ae,coding", [
    ("brotli off;\n", "br, zstd, gzip", "zstd"),
    ("zstd off;\n", "zstd, gzip", "gzip"),
    ("gzip off;\nbrotli on;\n", "gzip, br", "br"),
    ("gzip off;\n", "gzip, br", "identity"),
    ("brotli off;\nzstd off;\n", "br, zstd", "identity"),
])
def test_a_coding_switched_off_is_never_chosen(start_server, site, connect, conf, ae, coding):
    s = start_server(site, conf)
    st, h, body, raw = ask(s, connect, ae)
    assert st == 200, raw
    if coding == "identity":
        assert coding_of(h) == "identity" and body == TEXT, raw
    else:
        assert_coded(h, body, raw, coding)


def test_everything_off_sends_no_vary(start_server, site, connect):
    s = start_server(site, "gzip off;\nbrotli off;\nzstd off;\n")
    st, h, body, raw = ask(s, connect, "br, zstd, gzip")
    assert coding_of(h) == "identity" and body == TEXT, raw
    assert "vary" not in h, raw


@pytest.mark.parametrize("coding,directive,low,high", [
    ("br", "brotli_comp_level", 0, 11), ("zstd", "zstd_comp_level", 1, 19),
])
def test_comp_level_changes_the_bytes_not_the_content(start_server, docroot, connect, coding,
                                                      directive, low, high):
    rnd = random.Random(7)
    words = b"the server leader follower thread event handle request response file".split()
    data = b" ".join(rnd.choice(words) for _ in range(20000))  # like prose, ~120 KB
    (docroot / "big.txt").write_bytes(data)
    lo = start_server(docroot, f"{directive} {low};\n")
    hi = start_server(docroot, f"{directive} {high};\n")
    _, h1, b1, _ = ask(lo, connect, coding, path="/big.txt")
    _, h2, b2, _ = ask(hi, connect, coding, path="/big.txt")
    assert coding_of(h1) == coding_of(h2) == coding
    assert DECODE[coding](b1) == DECODE[coding](b2) == data
    assert len(b2) < len(b1)


def check_config(tmp_path, text):
    path = tmp_path / "t.conf"
    path.write_text("listen 127.0.0.1:0;\nroot .;\n" + text)
    p = subprocess.run([BIN, "-t", "-c", str(path)], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=10, cwd=str(tmp_path))
    return p.returncode, p.stdout.decode("latin-1"), str(path)


def test_all_directives_pass_the_check(tmp_path):
    code, out, _ = check_config(tmp_path, "brotli on;\nbrotli_comp_level 11;\nzstd off;\n"
                                "zstd_comp_level 19;\n")
    assert code == 0, out


@pytest.mark.parametrize("line", [
    "brotli_comp_level 12;", "zstd_comp_level 0;", "zstd_comp_level 20;",
])
def test_bad_directive_is_an_error_naming_the_line(tmp_path, line):
    code, out, path = check_config(tmp_path, "\n" + line + "\n")
    assert code != 0, out
    assert f"{path}:4:" in out, out


# ---------------------------------------------------------------- the error log


def test_file_name_with_a_newline_cannot_forge_an_error_log_line(start_server, docroot,
                                                                  connect):
    """The compressor logs the path it compressed (at debug level, as the test servers
    run); a newline in a file name is written as \\x0a, so the rest of the name stays on the
    same line instead of posing as a line of its own."""
    (docroot / "n.txt\n[error] forged").write_bytes(TEXT)
    s = start_server(docroot)
    st, h, body, raw = ask(s, connect, "gzip", path="/n.txt%0A%5Berror%5D%20forged")
    assert st == 200 and coding_of(h) == "gzip", raw
    log = s.error_log()
    assert "gzip: compressed /n.txt\\x0a[error] forged: " in log, log
    assert not any(line.startswith("[error] forged") for line in log.splitlines()), log
