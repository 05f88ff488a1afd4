"""`empty_gif`, against nginx, the oracle: the same configuration run by both, the same
requests, the same status, the fields that describe the answer, and the same bytes."""
import http.client

import pytest

from conftest import nginx_beside_lfhttpd

SITE = r"""
server {
    listen 127.0.0.1:{port0};
    location = /pixel.gif { empty_gif; }
}
"""
FIELDS = ("content-type", "content-length", "last-modified", "etag", "accept-ranges")


@pytest.fixture(scope="module")
def daemons(tmp_path_factory):
    """(nginx's port, lfhttpd's port)."""
    for theirs, ours in nginx_beside_lfhttpd(tmp_path_factory, SITE):
        yield theirs[0], ours[0]


def answer(port, method, fields):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request(method, "/pixel.gif", headers=fields)
        r = c.getresponse()
        body = r.read()
        # (an error's page is each server's own: its length is not compared)
        got = {k: r.getheader(k) for k in FIELDS if r.status < 400 or k != "content-length"}
        return r.status, got, body if r.status == 200 else b""
    finally:
        c.close()


def same(daemons, method, fields, status):
    theirs, ours = daemons
    nginx = answer(theirs, method, fields)
    assert nginx[0] == status, nginx
    assert answer(ours, method, fields) == nginx


def test_the_gif_is_nginxs_byte_for_byte_with_its_fields(daemons):
    same(daemons, "GET", {}, 200)


def test_head_gets_the_fields_without_the_body(daemons):
    same(daemons, "HEAD", {}, 200)


def test_a_post_is_refused_405(daemons):
    same(daemons, "POST", {"Content-Length": "0"}, 405)


def test_if_modified_since_its_date_is_304(daemons):
    same(daemons, "GET", {"If-Modified-Since": "Mon, 28 Sep 1970 06:00:00 GMT"}, 304)


def test_if_modified_since_another_date_is_200(daemons):
    same(daemons, "GET", {"If-Modified-Since": "Tue, 29 Sep 1970 06:00:00 GMT"}, 200)


def test_if_unmodified_since_before_its_date_is_412(daemons):
    same(daemons, "GET", {"If-Unmodified-Since": "Sun, 27 Sep 1970 06:00:00 GMT"}, 412)
