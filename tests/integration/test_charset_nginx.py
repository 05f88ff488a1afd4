"""nginx's `charset` and `charset_types` in a file with nginx's `http { }`, against nginx:
an answer whose type the block's list holds and that names no charset gets
`; charset=NAME`, whoever made it (a file, `return`, the error page, an upstream); an
answer that names its own keeps it; `charset off` (nginx's default) adds nothing, and the
error page then says plain `text/html`. One configuration is run by nginx and by lfhttpd
and each test compares the Content-Type of the same request. (A file without `http { }`
keeps lfhttpd's rule: text types always carry utf-8, test_mime.py.)
"""
import http.client

import pytest

from conftest import Nginx, Server, check_clean_exit, free_port, scaled, with_ports

UPSTREAM = """
server {
    listen 127.0.0.1:{port0};
    location /plain { default_type text/plain; return 200 "up\\n"; }
    location /latin { default_type "text/plain; charset=iso-8859-1"; return 200 "up\\n"; }
    location /js { default_type application/javascript; return 200 "up\\n"; }
}
"""

SITE = """
types {
    text/html html;
    text/plain txt;
    text/css css;
    application/json json;
    application/javascript js;
}
server {
    listen 127.0.0.1:{port0};
    root ROOT;
    location / { charset utf-8; }
    location /off/ { }
    location /koi/ { charset koi8-r; }
    location /types/ { charset utf-8; charset_types text/css; }
    location /any/ { charset utf-8; charset_types *; }
    location = /ret { charset utf-8; return 200 "text\\n"; }
    location = /ret-off { return 200 "text\\n"; }
    location /up/ { charset utf-8; proxy_pass http://127.0.0.1:UPPORT/; }
    location /cond/ {
        if ($arg_c) { charset windows-1251; }
    }
}
"""


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    root = tmp_path_factory.mktemp("cs")
    for d in ("", "off/", "koi/", "types/", "any/", "cond/"):
        (root / d).mkdir(exist_ok=True)
        for name, body in (("a.html", "<p>x\n"), ("a.txt", "x\n"), ("a.css", "p{}\n"),
                           ("a.json", "{}\n"), ("a.js", "1\n")):
            (root / d / name).write_text(body)
    up = Nginx(tmp_path_factory.mktemp("up"), None, UPSTREAM, http=True)
    text = SITE.replace("ROOT", str(root)).replace("UPPORT", str(up.port))
    servers = [up]
    try:
        theirs = Nginx(tmp_path_factory.mktemp("nginx"), None, text, http=True)
        servers.append(theirs)
        ours = Server(tmp_path_factory.mktemp("lfhttpd"), None,
                      conf="error_log stderr info;\naccess_log off;\nhttp {\n" +
                      with_ports(text, [free_port()]) + "}\n")
    except BaseException:
        for s in servers:
            s.stop()
        raise
    yield {"nginx": theirs.port, "lfhttpd": ours.port}
    theirs.stop()
    up.stop()
    check_clean_exit(ours)


def content_type(port, path):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=scaled(5))
    try:
        c.request("GET", path)
        r = c.getresponse()
        r.read()
        return r.status, r.getheader("Content-Type")
    finally:
        c.close()


def same(both, path):
    ours, theirs = content_type(both["lfhttpd"], path), content_type(both["nginx"], path)
    assert ours == theirs, f"{path}: lfhttpd {ours}, nginx {theirs}"
    return ours


def test_charset_labels_a_listed_file_type(both):
    assert same(both, "/a.txt") == (200, "text/plain; charset=utf-8")


def test_charset_leaves_a_type_the_default_list_does_not_hold(both):
    assert same(both, "/a.css") == (200, "text/css")


def test_charset_types_adds_to_text_html(both):
    assert same(both, "/types/a.css") == (200, "text/css; charset=utf-8")
    assert same(both, "/types/a.html") == (200, "text/html; charset=utf-8")
    assert same(both, "/types/a.txt") == (200, "text/plain")


def test_charset_types_star_labels_every_type(both):
    assert same(both, "/any/a.json") == (200, "application/json; charset=utf-8")


def test_charset_off_by_default_labels_nothing(both):
    assert same(both, "/off/a.txt") == (200, "text/plain")
    assert same(both, "/off/a.html") == (200, "text/html")


def test_charset_names_any_charset_in_a_file_with_http(both):
    assert same(both, "/koi/a.html") == (200, "text/html; charset=koi8-r")


def test_charset_labels_a_return_text(both):
    assert same(both, "/ret") == (200, "text/plain; charset=utf-8")
    assert same(both, "/ret-off") == (200, "text/plain")


def test_the_error_page_is_plain_text_html_without_charset(both):
    assert same(both, "/off/missing") == (404, "text/html")


def test_the_error_page_carries_the_blocks_charset(both):
    assert same(both, "/missing") == (404, "text/html; charset=utf-8")
    assert same(both, "/koi/missing") == (404, "text/html; charset=koi8-r")


def test_charset_labels_an_upstreams_answer_that_names_none(both):
    assert same(both, "/up/plain") == (200, "text/plain; charset=utf-8")
    assert same(both, "/up/js") == (200, "application/javascript; charset=utf-8")


def test_an_upstreams_own_charset_is_kept(both):
    assert same(both, "/up/latin") == (200, "text/plain; charset=iso-8859-1")


def test_charset_in_a_locations_if_applies_when_it_holds(both):
    assert same(both, "/cond/a.txt?c=1") == (200, "text/plain; charset=windows-1251")
    assert same(both, "/cond/a.txt") == (200, "text/plain")
