"""`valid_referers` and $invalid_referer (hotlink protection), against nginx, the oracle.

One configuration is run as written by nginx and by lfhttpd. Each location of its first
server has its own `valid_referers` and answers `[$invalid_referer]`; its second server
refuses an invalid Referer with `if ($invalid_referer) { return 403; }` in the server, as
sites write it, for a location that sets no list of its own and one that does. Each row
states what nginx answers; nginx is checked against it, then lfhttpd must answer the same.
"""
import http.client
import subprocess

import pytest

from conftest import BIN, nginx_beside_lfhttpd

SITE = r"""
server {
    listen 127.0.0.1:{port0};
    server_name example.org *.example.net www.example.* ~^re\d+\.example\.edu$;
    location / { return 200 "[$invalid_referer]"; }
    location /none/ { valid_referers none example.com; return 200 "[$invalid_referer]"; }
    location /blocked/ { valid_referers blocked example.com; return 200 "[$invalid_referer]"; }
    location /names/ { valid_referers server_names; return 200 "[$invalid_referer]"; }
    location /hosts/ {
        valid_referers example.com *.example.com .example.info www.other.* foo.org/galleries/;
        return 200 "[$invalid_referer]";
    }
    location /re/ { valid_referers ~\.google\.; return 200 "[$invalid_referer]"; }
    location /wcuri/ { valid_referers www.other.*/uri; return 200 "[$invalid_referer]"; }
    location /two/ {
        valid_referers none;
        valid_referers example.com;
        return 200 "[$invalid_referer]";
    }
}
server {
    listen 127.0.0.1:{port1};
    valid_referers none example.com;
    if ($invalid_referer) { return 403; }
    location / { return 200 "[$invalid_referer]"; }
    location /own/ { valid_referers other.com; return 200 "[$invalid_referer]"; }
}
server {
    listen 127.0.0.1:{port2};
    valid_referers example.com;
    location / { return 200 "[$invalid_referer]"; }
}
"""



@pytest.fixture(scope="module")
def daemons(tmp_path_factory):
    """(nginx's ports, lfhttpd's ports)."""
    yield from nginx_beside_lfhttpd(tmp_path_factory, SITE)


def answer(port, path, referer=None):
    """(status, body) of GET path, with that Referer field (None: without one)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.putrequest("GET", path, skip_host=True)
        c.putheader("Host", "example.org")
        if referer is not None:
            c.putheader("Referer", referer)
        c.endheaders()
        r = c.getresponse()
        return r.status, r.read().decode() if r.status == 200 else ""
    finally:
        c.close()


def same(daemons, path, referer, expected, server=0):
    """nginx answers `expected` ("[]" valid, "[1]" invalid, or a status), and lfhttpd
    answers what nginx answers."""
    theirs, ours = daemons
    nginx = answer(theirs[server], path, referer)
    assert (nginx[1] if nginx[0] == 200 else nginx[0]) == expected, nginx
    assert answer(ours[server], path, referer) == nginx


def test_a_block_without_valid_referers_has_an_empty_invalid_referer(daemons):
    same(daemons, "/", "http://evil.test/", "[]")


@pytest.mark.parametrize("referer,expected", [(None, "[]"), ("http://evil.test/", "[1]"),
                                              ("", "[1]")])
def test_none_makes_only_a_missing_referer_valid(daemons, referer, expected):
    same(daemons, "/none/", referer, expected)


@pytest.mark.parametrize("referer,expected", [
    ("stripped-by-proxy", "[]"),
    ("ftp://example.com/", "[]"),
    ("http://a.b", "[]"),
    ("http://evil.test/", "[1]"),
    (None, "[1]"),
])
def test_blocked_makes_a_referer_without_http_scheme_valid(daemons, referer, expected):
    same(daemons, "/blocked/", referer, expected)


@pytest.mark.parametrize("referer,expected", [
    ("http://example.org/page", "[]"),
    ("https://EXAMPLE.ORG:8443/page", "[]"),
    ("http://a.b.example.net/", "[]"),
    ("http://example.net/", "[1]"),
    ("http://www.example.co.uk/", "[]"),
    ("http://re42.example.edu/", "[]"),
    ("http://rex.example.edu/", "[1]"),
    ("http://example.org.evil.test/", "[1]"),
])
def test_server_names_makes_a_referer_from_the_servers_names_valid(daemons, referer, expected):
    same(daemons, "/names/", referer, expected)


@pytest.mark.parametrize("referer,expected", [
    ("http://example.com/", "[]"),
    ("http://www.example.com/x", "[]"),
    ("http://example.info/", "[]"),
    ("http://deep.sub.example.info/", "[]"),
    ("http://www.other.org/", "[]"),
    ("http://foo.org/galleries/cat.jpg", "[]"),
    ("http://foo.org:81/galleries/", "[]"),
    ("http://foo.org/elsewhere/", "[1]"),
    ("http://notexample.com/", "[1]"),
])
def test_named_hosts_wildcards_and_uri_prefixes_are_nginxs(daemons, referer, expected):
    same(daemons, "/hosts/", referer, expected)


@pytest.mark.parametrize("referer,expected", [
    ("https://www.google.com/search?q=x", "[]"),
    ("http://WWW.GOOGLE.DE/", "[]"),
    ("http://google/", "[1]"),
])
def test_a_regex_is_searched_without_case_after_the_scheme(daemons, referer, expected):
    same(daemons, "/re/", referer, expected)


@pytest.mark.parametrize("referer,expected", [(None, "[]"), ("http://example.com/", "[]"),
                                              ("http://evil.test/", "[1]")])
def test_the_lines_of_a_block_add_up(daemons, referer, expected):
    same(daemons, "/two/", referer, expected)


@pytest.mark.parametrize("path,referer,expected", [
    ("/", "http://example.com/", "[]"),
    ("/", "http://evil.test/", 403),
    ("/own/", "http://evil.test/", 403),
])
def test_an_if_in_the_server_refuses_by_the_servers_list(daemons, path, referer, expected):
    same(daemons, path, referer, expected, server=1)


def test_invalid_referer_keeps_its_first_value_for_the_request(daemons):
    """Read first by the server's `if` (valid there), the variable keeps that value in a
    location whose own list would refuse the Referer: nginx keeps a variable's value."""
    same(daemons, "/own/", "http://example.com/", "[]", server=1)


def test_valid_referers_with_a_bad_regex_is_refused_with_its_line(tmp_path):
    conf = tmp_path / "t.conf"
    conf.write_text("listen 127.0.0.1:0;\nserver {\n  valid_referers ~(unclosed;\n}\n")
    r = subprocess.run([BIN, "-t", "-c", str(conf)], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 1 and f"{conf}:3:" in r.stderr and "valid_referers" in r.stderr, \
        r.stderr


def test_none_or_blocked_alone_is_refused_as_nginx_refuses_it(tmp_path):
    conf = tmp_path / "t.conf"
    conf.write_text("listen 127.0.0.1:0;\nserver {\n  location / {\n"
                    "    valid_referers none blocked;\n  }\n}\n")
    r = subprocess.run([BIN, "-t", "-c", str(conf)], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 1 and "without any valid referer" in r.stderr, r.stderr


@pytest.mark.parametrize("referer,expected", [("http://example.com/", "[]"),
                                              ("http://evil.test/", "[1]")])
def test_a_location_without_a_list_takes_its_servers(daemons, referer, expected):
    same(daemons, "/", referer, expected, server=2)


@pytest.mark.parametrize("referer,expected", [
    ("http://www.other.net/uri", "[]"),
    ("http://www.other.net/urii", "[]"),
    ("http://www.other.net/x", "[1]"),
])
def test_a_trailing_wildcard_takes_a_uri_prefix_too(daemons, referer, expected):
    same(daemons, "/wcuri/", referer, expected)
