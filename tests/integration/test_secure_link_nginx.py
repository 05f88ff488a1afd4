"""Secure links ($secure_link, $secure_link_expires), against nginx, the oracle.

One configuration is run as written by nginx and by lfhttpd; each answer is `return 200`
of the variables. Links are made here as a site makes them (the MD5 of the
`secure_link_md5` text, in base64url) and then spoiled one way at a time; nginx must give
the answer each row states, and lfhttpd must give nginx's.
"""
import base64
import hashlib
import http.client
import time

import pytest

from conftest import nginx_beside_lfhttpd

SITE = r"""
server {
    listen 127.0.0.1:{port0};
    location /s/ {
        secure_link $arg_md5,$arg_expires;
        secure_link_md5 "$secure_link_expires$uri secret";
        return 200 "link=[$secure_link] expires=[$secure_link_expires]";
    }
    location /plain/ {
        secure_link $arg_md5;
        secure_link_md5 "$uri secret";
        return 200 "link=[$secure_link]";
    }
    location /p/ {
        secure_link_secret word;
        return 200 "link=[$secure_link]";
    }
    location /inherit/ {
        secure_link_secret word;
        location /inherit/new {
            secure_link $arg_md5;
            secure_link_md5 "$uri secret";
            return 200 "link=[$secure_link]";
        }
    }
}
"""


@pytest.fixture(scope="module")
def daemons(tmp_path_factory):
    """(nginx's port, lfhttpd's port)."""
    for theirs, ours in nginx_beside_lfhttpd(tmp_path_factory, SITE):
        yield theirs[0], ours[0]


def b64url(text):
    return base64.urlsafe_b64encode(hashlib.md5(text.encode()).digest()).decode()


def body(port, target):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request("GET", target)
        return c.getresponse().read().decode()
    finally:
        c.close()


def same(daemons, target, expected):
    theirs, ours = daemons
    nginx = body(theirs, target)
    assert nginx == expected, nginx
    assert body(ours, target) == nginx


FUTURE = int(time.time()) + 3600
PAST = int(time.time()) - 3600


def test_a_right_link_that_has_not_expired_is_1(daemons):
    h = b64url(f"{FUTURE}/s/file secret").rstrip("=")
    same(daemons, f"/s/file?md5={h}&expires={FUTURE}", f"link=[1] expires=[{FUTURE}]")


def test_a_right_link_with_its_padding_is_1(daemons):
    h = b64url(f"{FUTURE}/s/file secret")
    same(daemons, f"/s/file?md5={h}&expires={FUTURE}", f"link=[1] expires=[{FUTURE}]")


def test_a_right_link_that_has_expired_is_0(daemons):
    h = b64url(f"{PAST}/s/file secret").rstrip("=")
    same(daemons, f"/s/file?md5={h}&expires={PAST}", f"link=[0] expires=[{PAST}]")


def test_a_link_for_another_uri_is_empty(daemons):
    h = b64url(f"{FUTURE}/s/other secret").rstrip("=")
    same(daemons, f"/s/file?md5={h}&expires={FUTURE}", f"link=[] expires=[{FUTURE}]")


@pytest.mark.parametrize("md5", ["", "short", "A" * 22, "!" * 22, "A" * 30])
def test_a_hash_that_is_not_an_md5_in_base64url_is_empty(daemons, md5):
    same(daemons, f"/s/file?md5={md5}&expires={FUTURE}", f"link=[] expires=[{FUTURE}]")


@pytest.mark.parametrize("expires", ["0", "-5", "12x"])
def test_an_expiry_that_is_no_positive_number_is_empty(daemons, expires):
    h = b64url(f"{expires}/s/file secret").rstrip("=")
    theirs, ours = daemons
    assert body(ours, f"/s/file?md5={h}&expires={expires}").startswith("link=[]")
    assert body(theirs, f"/s/file?md5={h}&expires={expires}").startswith("link=[]")


def test_a_link_without_expiry_is_1(daemons):
    h = b64url("/plain/file secret").rstrip("=")
    same(daemons, f"/plain/file?md5={h}", "link=[1]")


def test_the_older_form_gives_the_link_when_its_hex_md5_is_right(daemons):
    h = hashlib.md5(b"some/file.txtword").hexdigest()
    same(daemons, f"/p/{h}/some/file.txt", "link=[some/file.txt]")


def test_the_older_form_takes_the_hex_without_case(daemons):
    h = hashlib.md5(b"some/file.txtword").hexdigest().upper()
    same(daemons, f"/p/{h}/some/file.txt", "link=[some/file.txt]")


def test_the_older_form_with_a_wrong_hash_is_empty(daemons):
    h = hashlib.md5(b"other.txtword").hexdigest()
    same(daemons, f"/p/{h}/some/file.txt", "link=[]")


def test_a_hash_with_base64urls_own_characters_is_read(daemons):
    """'-' and '_' (base64url's 62 and 63): an expiry is picked whose hash has both."""
    t = FUTURE
    while not {"-", "_"} <= set(b64url(f"{t}/s/file secret").rstrip("=")):
        t += 1
    h = b64url(f"{t}/s/file secret").rstrip("=")
    same(daemons, f"/s/file?md5={h}&expires={t}", f"link=[1] expires=[{t}]")


def test_a_block_with_its_own_expressions_does_not_take_the_outer_secret(daemons):
    h = b64url("/inherit/new secret").rstrip("=")
    same(daemons, f"/inherit/new?md5={h}", "link=[1]")
