"""mod_dirlist: directory listings (`autoindex on;`), HTML and JSON.

File names are hostile input: they must appear as text, never as markup; every link must
fetch exactly the file it names; the JSON form must parse whatever the bytes of a name are.
The browser tests render the page in headless Chromium and check the DOM it built.
"""
import collections
import html.parser
import json
import os
import re
import shutil
import struct
import subprocess
import tempfile
import time
import urllib.parse
import zlib

import pytest

from conftest import BIN, SANITIZED, scaled, wait_until

# Names that break naive HTML, URL or JSON building. (No '/' or NUL: a file name can't.)
HOSTILE = [
    "<img src=x onerror=alert(1)>",
    "<script>alert(1)<",
    "a&b.txt",
    "&amp;.txt",
    '"quoted".txt',
    "it's.txt",
    "with space.txt",
    "é café.txt",
    "100%.txt",
    "%41.txt",
    "#hash.txt",
    "q?x=1.txt",
    "javascript:alert(1)",
    "semi;colon+plus=eq.txt",
    "back\\slash.txt",
    "日本語.txt",
]
ISO_Z = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")


def content_of(name):
    return ("content of " + name).encode()


@pytest.fixture
def tree(docroot):
    """A docroot with hostile names, subdirectories, a dotfile and symlinks."""
    for n in HOSTILE:
        (docroot / n).write_bytes(content_of(n))
    (docroot / "zeta dir").mkdir()
    (docroot / "Alpha").mkdir()
    (docroot / "Alpha" / "inner.txt").write_bytes(b"inner\n")
    (docroot / "<b>dir").mkdir()
    (docroot / ".hidden").write_bytes(b"secret\n")
    (docroot / ".hiddendir").mkdir()
    (docroot / "big.bin").write_bytes(b"\0" * 1536)
    return docroot


@pytest.fixture
def site(start_server, tree):
    return start_server(tree, conf_extra="autoindex on;\n")


def get(server, path, extra=b"", method=b"GET"):
    c = server.connect()
    try:
        c.send(method + b" " + path.encode() + b" HTTP/1.1\r\nHost: t\r\nConnection: close\r\n"
               + extra + b"\r\n")
        return c.read_response(head_only=method == b"HEAD")
    finally:
        c.close()


def get_json(server, path):
    st, h, body, head = get(server, path + "?format=json")
    assert st == 200, head
    assert h["content-type"] == "application/json", head
    return json.loads(body)


class Links(html.parser.HTMLParser):
    """Collects <a href> (href, text) pairs and the tags seen."""

    def __init__(self):
        super().__init__()
        self.links, self.tags, self.attrs = [], [], []
        self._href = None
        self._text = ""

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs.extend(k for k, _ in attrs)
        if tag == "a":
            self._href = dict(attrs).get("href")
            self._text = ""

    def handle_data(self, data):
        if self._href is not None:
            self._text += data

    def handle_endtag(self, tag):
        if tag == "a" and self._href is not None:
            self.links.append((self._href, self._text))
            self._href = None


def parse(body):
    p = Links()
    p.feed(body.decode("utf-8"))
    return p


def entry_links(p):
    """The links of the table's entries: not the breadcrumbs, not the parent link."""
    return [(h, t) for h, t in p.links
            if not h.startswith("..") and h != "./" and t != "Parent directory"]


# ---------------------------------------------------------------- switching it on and off


def test_autoindex_off_is_403(start_server, tree):
    s = start_server(tree)
    st, _, _, head = get(s, "/")
    assert st == 403, head


def test_autoindex_off_explicitly_is_403(start_server, tree):
    s = start_server(tree, conf_extra="autoindex off;\n")
    assert get(s, "/Alpha/")[0] == 403


def test_directory_with_index_serves_the_index(start_server, tree):
    (tree / "Alpha" / "index.html").write_bytes(b"<p>index</p>\n")
    s = start_server(tree, conf_extra="autoindex on;\n")
    st, h, body, head = get(s, "/Alpha/")
    assert st == 200, head
    assert body == b"<p>index</p>\n"


def test_directory_without_slash_is_redirected(site):
    st, h, _, head = get(site, "/Alpha")
    assert st == 301, head
    assert h["location"].endswith("/Alpha/"), head


def test_files_are_still_served(site):
    st, _, body, head = get(site, "/Alpha/inner.txt")
    assert (st, body) == (200, b"inner\n"), head


def test_missing_directory_is_404(site):
    assert get(site, "/nope/")[0] == 404


def test_post_to_a_directory_is_405(site):
    st, h, _, head = get(site, "/", method=b"POST", extra=b"Content-Length: 0\r\n")
    assert st == 405, head


# ---------------------------------------------------------------- the HTML page


def test_listing_headers(site):
    st, h, body, head = get(site, "/")
    assert st == 200, head
    assert h["content-type"] == "text/html; charset=utf-8"
    assert int(h["content-length"]) == len(body)
    assert h["x-content-type-options"] == "nosniff"
    text = body.decode()
    assert text.startswith("<!DOCTYPE html>")
    assert '<meta name="viewport"' in text
    assert "prefers-color-scheme" in text


def test_listing_carries_a_content_security_policy_that_allows_no_script(site):
    """Defence in depth: even an escaping bug could run no script in the page."""
    st, h, _, head = get(site, "/")
    assert st == 200, head
    assert h.get("content-security-policy") == \
        "default-src 'none'; style-src 'unsafe-inline'; img-src data:", head


def test_head_has_the_get_headers_and_no_body(site):
    st, hh, _, head = get(site, "/", method=b"HEAD")
    assert st == 200, head
    st, gh, body, _ = get(site, "/")
    assert int(hh["content-length"]) == len(body)
    hh.pop("date"), gh.pop("date")
    assert hh == gh


def test_hostile_names_are_text_not_markup(site):
    _, _, body, _ = get(site, "/")
    text = body.decode()
    assert "<img" not in text
    assert "<script" not in text
    assert "&lt;img src=x onerror=alert(1)&gt;" in text
    assert "&lt;b&gt;dir/" in text
    p = parse(body)
    assert "img" not in p.tags and "script" not in p.tags and "b" not in p.tags
    assert "onerror" not in p.attrs
    names = {t for _, t in entry_links(p)}
    for n in HOSTILE:
        assert n in names, n


def test_links_are_percent_encoded_and_fetch_the_files(site):
    _, _, body, _ = get(site, "/")
    links = dict((t, h) for h, t in entry_links(parse(body)))
    for n in HOSTILE:
        href = links[n]
        assert href == urllib.parse.quote(n, safe="/"), (n, href)
        st, _, got, head = get(site, "/" + href)
        assert (st, got) == (200, content_of(n)), (n, head)


def test_sorted_directories_first_then_files_in_byte_order(site):
    _, _, body, _ = get(site, "/")
    names = [t for _, t in entry_links(parse(body))]
    dirs = [n for n in names if n.endswith("/")]
    files = [n for n in names if not n.endswith("/")]
    assert names == dirs + files
    assert dirs == sorted(dirs, key=lambda n: n.encode())
    assert files == sorted(files, key=lambda n: n.encode())
    assert dirs == ["<b>dir/", "Alpha/", "zeta dir/"]


def test_directory_links_end_in_slash(site):
    _, _, body, _ = get(site, "/")
    links = dict((t, h) for h, t in entry_links(parse(body)))
    assert links["zeta dir/"] == "zeta%20dir/"
    assert links["<b>dir/"] == "%3Cb%3Edir/"
    assert get(site, "/zeta%20dir/")[0] == 200


def test_sizes_human_and_exact(site):
    _, _, body, _ = get(site, "/")
    text = body.decode()
    assert re.search(r'title="1536 bytes">1\.5 KiB<', text), text


def test_times_are_utc_iso(site):
    _, _, body, _ = get(site, "/")
    stamps = re.findall(r'<time datetime="([^"]+)"', body.decode())
    assert stamps and all(ISO_Z.match(s) for s in stamps), stamps


def test_parent_link_except_at_the_root(site):
    _, _, body, _ = get(site, "/")
    assert "../" not in [h for h, _ in parse(body).links]
    _, _, body, _ = get(site, "/Alpha/")
    p = parse(body)
    assert ("../", "Parent directory") in p.links
    assert [t for _, t in entry_links(p)] == ["inner.txt"]


def test_title_and_breadcrumbs_escape_the_path(site):
    st, _, body, head = get(site, "/%3Cb%3Edir/")
    assert st == 200, head
    text = body.decode()
    assert "<title>Index of /&lt;b&gt;dir/</title>" in text
    assert "<b>" not in text


def test_hidden_files_not_listed_by_default(site):
    _, _, body, _ = get(site, "/")
    assert ".hidden" not in body.decode()
    assert all(not e["name"].startswith(".") for e in get_json(site, "/"))


def test_hidden_files_listed_when_asked(start_server, tree):
    s = start_server(tree, conf_extra="autoindex on;\nautoindex_hidden on;\n")
    names = [e["name"] for e in get_json(s, "/")]
    assert ".hidden" in names and ".hiddendir" in names
    assert "." not in names and ".." not in names


# ---------------------------------------------------------------- JSON


def test_json_listing(site):
    entries = get_json(site, "/")
    by_name = {e["name"]: e for e in entries}
    for n in HOSTILE:
        e = by_name[n]
        assert e["type"] == "file"
        assert e["size"] == len(content_of(n))
        assert ISO_Z.match(e["mtime"]), e
    assert by_name["Alpha"]["type"] == "dir"
    assert by_name["big.bin"]["size"] == 1536
    names = [e["name"] for e in entries]
    dirs = [e["name"] for e in entries if e["type"] == "dir"]
    assert names[: len(dirs)] == sorted(dirs, key=lambda n: n.encode())
    files = names[len(dirs):]
    assert files == sorted(files, key=lambda n: n.encode())


def test_json_href_fetches_the_file(site):
    for e in get_json(site, "/"):
        if e["type"] == "file":
            st, _, body, _ = get(site, "/" + e["href"])
            assert st == 200, e
            assert len(body) == e["size"], e


def test_json_with_other_query_parameters(site):
    st, h, body, _ = get(site, "/?sort=x&format=json&y")
    assert h["content-type"] == "application/json"
    json.loads(body)
    assert get(site, "/?format=html")[1]["content-type"].startswith("text/html")


def test_json_of_names_with_control_bytes_and_invalid_utf8(start_server, docroot):
    """The document stays valid JSON: control bytes escaped, invalid UTF-8 as U+FFFD; the
    href keeps the exact bytes."""
    raw = [b"new\nline", b"tab\tand\x01ctl", b"bad\xff\xfe.bin", b"half\xc3.txt",
           b"quote\"back\\slash", b"\xed\xa0\x80surrogate"]
    for r in raw:
        with open(os.path.join(os.fsencode(str(docroot)), r), "wb") as f:
            f.write(r)
    s = start_server(docroot, conf_extra="autoindex on;\n")
    st, _, body, _ = get(s, "/?format=json")
    entries = json.loads(body.decode("utf-8"))  # strict: the body is valid UTF-8
    names = {e["name"] for e in entries}
    assert "new\nline" in names and "tab\tand\x01ctl" in names
    assert "quote\"back\\slash" in names
    assert "bad\ufffd\ufffd.bin" in names and "half\ufffd.txt" in names
    assert "\ufffd\ufffd\ufffdsurrogate" in names
    for e in entries:
        st, _, got, head = get(s, "/" + e["href"])
        assert st == 200, (e, head)
        assert got in raw, e
    # The HTML page is valid UTF-8 too, and shows the names.
    st, _, body, _ = get(s, "/")
    text = body.decode("utf-8")
    assert "bad\ufffd\ufffd.bin" in text
    links = [h for h, _ in entry_links(parse(body))]
    assert "bad%FF%FE.bin" in links and "new%0Aline" in links


def test_empty_directory(start_server, docroot):
    (docroot / "empty").mkdir()
    s = start_server(docroot, conf_extra="autoindex on;\n")
    assert get_json(s, "/empty/") == []
    st, _, body, _ = get(s, "/empty/")
    assert st == 200 and "0 directories, 0 files" in body.decode()


# ---------------------------------------------------------------- symlinks and odd files


def test_symlinks_inside_listed_as_targets_outside_never(start_server, tmp_path, docroot):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_bytes(b"secret")
    (docroot / "real.txt").write_bytes(b"12345")
    (docroot / "sub").mkdir()
    os.symlink("real.txt", docroot / "rel-link")
    os.symlink(str(docroot / "real.txt"), docroot / "abs-link")
    os.symlink("sub", docroot / "dir-link")
    os.symlink("../../outside/secret.txt", docroot / "sub" / "escape")
    os.symlink(str(outside / "secret.txt"), docroot / "abs-escape")
    os.symlink(str(outside), docroot / "outdir")
    os.symlink("nowhere", docroot / "broken")
    os.symlink("loop", docroot / "loop")
    os.symlink("../real.txt", docroot / "sub" / "up-link")
    os.mkfifo(docroot / "fifo")
    s = start_server(docroot, conf_extra="autoindex on;\n")
    by_name = {e["name"]: e for e in get_json(s, "/")}
    assert by_name["rel-link"] == dict(by_name["rel-link"], type="file", size=5)
    assert by_name["abs-link"]["type"] == "file" and by_name["abs-link"]["size"] == 5
    assert by_name["dir-link"]["type"] == "dir"
    for gone in ("abs-escape", "outdir", "broken", "loop", "fifo"):
        assert gone not in by_name, gone
    sub = {e["name"] for e in get_json(s, "/sub/")}
    assert sub == {"up-link"}
    assert get(s, "/sub/up-link")[2] == b"12345"
    assert get(s, "/outdir/")[0] in (403, 404)


def test_large_directory_is_listed_whole(start_server, docroot):
    d = docroot / "many"
    d.mkdir()
    n = 10000
    for i in range(n):
        (d / f"file-{i:05d}-{'x' * 40}.txt").write_bytes(b"")
    s = start_server(docroot, conf_extra="autoindex on;\n")
    entries = get_json(s, "/many/")
    assert len(entries) == n
    assert [e["name"] for e in entries] == sorted(e["name"] for e in entries)
    st, h, body, head = get(s, "/many/")
    assert st == 200, head
    assert len(entry_links(parse(body))) == n
    assert f"0 directories, {n} files" in body.decode()


def test_listing_over_64_mib_is_500_never_cut(start_server, docroot):
    """36,000 hard links to one empty file, named with 245 '&' each: the HTML page would
    be about 80 MB ('&' is 5 bytes as text, 3 in a link), past the 64 MiB limit, so it is
    refused whole (500); the JSON form of the same directory ('&' stays 1 byte) is about
    38 MB and is listed whole. Links make the directory cheap: no data, no inodes."""
    (docroot / "f").write_bytes(b"")
    d = docroot / "many"
    d.mkdir()
    n = 36000
    for i in range(n):
        os.link(docroot / "f", d / ("&" * 245 + f"{i:05d}"))
    s = start_server(docroot, conf_extra="autoindex on;\n")

    def fetch(target):  # read_response's buffer is too slow for tens of megabytes
        c = s.connect(timeout=scaled(20))
        c.send(b"GET " + target + b" HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        raw = c.recv_all(timeout=scaled(20))
        c.close()
        return raw.partition(b"\r\n\r\n")[::2]

    head, body = fetch(b"/many/")
    assert head.startswith(b"HTTP/1.1 500 "), head
    assert len(body) < 1000 and b"&amp;" not in body, head
    assert wait_until(lambda: "/many/: not listed (500)" in s.error_log(), scaled(5)), \
        s.error_log()[-2000:]
    head, body = fetch(b"/many/?format=json")
    assert head.startswith(b"HTTP/1.1 200 "), head
    assert len(body) > 30 << 20
    assert b"\r\nContent-Length: %d\r\n" % len(body) in head, head
    assert len(json.loads(body)) == n


# ---------------------------------------------------------------- configuration


@pytest.mark.parametrize("line", ["autoindex maybe;", "autoindex;", "autoindex on off;",
                                  "autoindex_hidden yes;", "autoindex on;\nautoindex off;"])
def test_bad_autoindex_directive_is_a_config_error(tmp_path, line):
    path = tmp_path / "t.conf"
    path.write_text("listen 127.0.0.1:0;\nroot .;\n" + line + "\n")
    p = subprocess.run([BIN, "-t", "-c", str(path)], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=10, cwd=str(tmp_path))
    out = p.stdout.decode("latin-1")
    assert p.returncode == 1, out
    assert re.search(re.escape(str(path)) + r":[34]:", out), out


# ---------------------------------------------------------------- in a browser


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


def run_chromium(args, timeout=90):
    exe = chromium()
    if not exe:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    with tempfile.TemporaryDirectory() as profile:
        p = subprocess.run(
            [exe, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}"] + args,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    return p


def test_browser_dom_shows_names_as_text_with_right_links(site):
    url = site.url + "/"
    p = run_chromium(["--dump-dom", url])
    dom = p.stdout.decode("utf-8")
    assert "Index of" in dom, p.stderr.decode(errors="replace")[-2000:]
    parsed = parse(p.stdout)
    # No element the names could have injected: not one <img>, <script> or <b>.
    assert "img" not in parsed.tags and "script" not in parsed.tags and "b" not in parsed.tags
    assert "onerror" not in parsed.attrs
    links = dict((t, h) for h, t in entry_links(parsed))
    for n in HOSTILE:
        assert n in links, n
        resolved = urllib.parse.urljoin(url, links[n])
        assert resolved == url + urllib.parse.quote(n, safe="/"), (n, resolved)
        # The URL the browser would fetch gives the file.
        path = urllib.parse.urlsplit(resolved).path
        assert get(site, path)[2] == content_of(n), n
    for d in ("Alpha/", "zeta dir/", "<b>dir/"):
        assert urllib.parse.urljoin(url, links[d]) == url + urllib.parse.quote(d, safe="/")


def test_browser_breadcrumbs_resolve(site):
    url = site.url + "/Alpha/"
    parsed = parse(run_chromium(["--dump-dom", url]).stdout)
    crumbs = [(urllib.parse.urljoin(url, h), t) for h, t in parsed.links
              if h.startswith("..") or h == "./"]
    assert (site.url + "/", "/") in crumbs
    assert (site.url + "/Alpha/", "Alpha/") in crumbs
    assert (site.url + "/", "Parent directory") in crumbs


def png_pixels(path):
    """(width, height, rows) of an 8-bit RGB or RGBA, non-interlaced PNG (what Chromium
    writes); each row a bytearray of 3 or 4 bytes a pixel. Enough of the format for a
    screenshot, with no imaging library."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, b""
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", chunk)
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + n
    assert depth == 8 and ctype in (2, 6) and interlace == 0, (depth, ctype, interlace)
    bpp = 3 if ctype == 2 else 4
    raw = zlib.decompress(idat)
    stride = w * bpp
    prev, rows = bytearray(stride), []
    for y in range(h):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):  # undo the row's filter (PNG spec, section 9)
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + a) & 255
            elif kind == 2:
                line[i] = (line[i] + b) & 255
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else b if pb <= pc else c
                line[i] = (line[i] + pred) & 255
        rows.append(line)
        prev = line
    return w, h, [bytes(r[x:x + 3]) for r in rows for x in range(0, stride, bpp)]


@pytest.mark.parametrize("width", [1000, 390])
def test_browser_screenshot_shows_the_styled_listing(site, tmp_path, width):
    """The rendered page is the listing with its style applied (which the CSP must let
    through), not an error page or unstyled text: the exact colours of the table head's
    background, its lines, the links and the directory icons are all on screen."""
    shot = tmp_path / f"listing-{width}.png"
    run_chromium([f"--screenshot={shot}", f"--window-size={width},800", site.url + "/"])
    assert shot.exists()
    w, h, pixels = png_pixels(shot)
    assert (w, h) == (width, 800)
    count = collections.Counter(pixels)
    seen = {name: count[bytes.fromhex(rgb)] for name, rgb in
            (("table head", "f6f8fa"), ("lines", "d1d9e0"), ("links", "0969da"),
             ("directory icons", "9a6700"))}
    assert seen["table head"] > 5000, seen
    assert seen["lines"] > 1000, seen
    assert seen["links"] > 20, seen
    assert seen["directory icons"] > 20, seen


# ---------------------------------------------------------------- the cache of listings


def built(server, form, path):
    """How often the server says (error log, debug level) it built this listing."""
    return server.error_log().count(f'dirlist: built the {form} listing of "{path}"')


def settle(directory):
    """Wait until the directory's last change is over a second old: a younger version is
    listed but not kept (its change may share a timestamp tick with the next one)."""
    age = time.time() - os.stat(directory).st_ctime
    if age < 1.2:
        time.sleep(1.2 - age)


@pytest.fixture
def listed(start_server, docroot):
    d = docroot / "d"
    d.mkdir()
    for i in range(5):
        (d / f"f{i}.txt").write_bytes(b"x" * i)
    settle(d)
    return start_server(docroot, conf_extra="autoindex on;\n"), d


def test_listing_is_built_once_per_directory_version_and_form(listed):
    s, _ = listed
    pages = [get(s, "/d/")[2] for _ in range(5)]
    docs = [get_json(s, "/d/") for _ in range(3)]
    assert all(p == pages[0] for p in pages) and all(d == docs[0] for d in docs)
    assert wait_until(lambda: built(s, "JSON", "/d/") == 1, scaled(2)), s.error_log()[-2000:]
    assert built(s, "HTML", "/d/") == 1, s.error_log()[-2000:]


def test_html_listing_is_kept_per_request_path(listed):
    """The page shows the path it was asked by: /d/ and /d/../d/ are one path once
    normalized; a symlink to the directory is another path, and another page."""
    s, d = listed
    os.symlink("d", d.parent / "alias")
    assert "Index of" in get(s, "/d/")[2].decode() and get(s, "/d/../d/")[0] == 200
    body = get(s, "/alias/")[2].decode()
    assert "<title>Index of /alias/</title>" in body, body[:300]
    assert wait_until(lambda: built(s, "HTML", "/alias/") == 1, scaled(2))
    assert built(s, "HTML", "/d/") == 1, s.error_log()[-2000:]


def test_changed_directory_gives_a_fresh_listing(listed):
    s, d = listed
    assert {e["name"] for e in get_json(s, "/d/")} == {f"f{i}.txt" for i in range(5)}
    (d / "new.txt").write_bytes(b"new")
    (d / "f0.txt").unlink()
    names = {e["name"] for e in get_json(s, "/d/")}
    assert names == {"new.txt"} | {f"f{i}.txt" for i in range(1, 5)}
    os.rename(d / "f1.txt", d / "renamed.txt")
    names = {e["name"] for e in get_json(s, "/d/")}
    assert "renamed.txt" in names and "f1.txt" not in names
    assert "renamed.txt" in get(s, "/d/")[2].decode()
    assert built(s, "JSON", "/d/") >= 3, s.error_log()[-2000:]


def test_a_file_rewritten_inside_shows_after_autoindex_cache_valid(start_server, docroot):
    """A file rewritten in place changes nothing in its directory's times: its new size is
    listed once the cached listing is autoindex_cache_valid old."""
    d = docroot / "d"
    d.mkdir()
    (d / "grows.txt").write_bytes(b"12345")
    settle(d)
    s = start_server(docroot, conf_extra="autoindex on;\nautoindex_cache_valid 1s;\n")
    assert get_json(s, "/d/")[0]["size"] == 5
    with open(d / "grows.txt", "ab") as f:
        f.write(b"6789")
    assert wait_until(lambda: get_json(s, "/d/")[0]["size"] == 9, scaled(3))
    assert built(s, "JSON", "/d/") == 2, s.error_log()[-2000:]


def test_listings_over_autoindex_cache_size_are_sent_but_not_kept(start_server, docroot):
    d = docroot / "d"
    d.mkdir()
    for i in range(200):
        (d / f"{i:03d}-{'n' * 100}").write_bytes(b"")
    settle(d)
    s = start_server(docroot, conf_extra="autoindex on;\nautoindex_cache_size 4k;\n")
    for _ in range(3):
        assert len(get_json(s, "/d/")) == 200
    assert wait_until(lambda: built(s, "JSON", "/d/") == 3, scaled(2)), s.error_log()[-2000:]


def vm_rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def test_clients_that_never_read_a_big_listing_share_one_copy(start_server, docroot, connect):
    """60 clients ask for a 6 MB listing and read nothing (each with a 4 KiB receive
    buffer, so almost all of it waits in the server). The listing is one sealed memfd the
    parked responses refer to: the server's VmRSS grows by far less than one copy per
    client (360 MB; the bound is 48 MB, 400 under sanitizers)."""
    (docroot / "f").write_bytes(b"")
    d = docroot / "many"
    d.mkdir()
    for i in range(8000):
        os.link(docroot / "f", d / (f"{i:05d}-" + "n" * 200))
    settle(d)
    s = start_server(docroot, conf_extra="autoindex on;\nsend_timeout 60s;\n")
    assert get(s, "/many/")[0] == 200
    base = vm_rss_mb(s.proc.pid)
    clients = []
    for _ in range(60):
        c = connect(s, rcvbuf=4096)
        c.send(b"GET /many/ HTTP/1.1\r\nHost: t\r\n\r\n")
        clients.append(c)
    time.sleep(scaled(1.5))
    assert wait_until(lambda: s.access_log().count("GET /many/") >= 61, scaled(10))
    grown = vm_rss_mb(s.proc.pid) - base
    fd_dir = f"/proc/{s.proc.pid}/fd"
    memfds = sum(os.readlink(os.path.join(fd_dir, n)).startswith("/memfd:lfhttpd-dirlist")
                 for n in os.listdir(fd_dir))
    print(f"\n60 non-reading clients of a 6 MB listing: VmRSS +{grown:.1f} MB, "
          f"{memfds} listing memfd(s)")
    assert grown < (400 if SANITIZED else 48), f"VmRSS grew by {grown:.1f} MB"
    # a listing outside VmRSS: one memfd, not one per client
    assert memfds == 1 and built(s, "HTML", "/many/") == 1, s.error_log()[-2000:]
