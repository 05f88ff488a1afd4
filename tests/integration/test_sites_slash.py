"""nginx's redirect of a location's prefix without its final slash: with
`location /api/ { proxy_pass ...; }`, a request for /api is answered 301 to /api/ (its
arguments kept), as nginx does when an upstream answers the location; a location that
names the path as it is, or one served by files, is not redirected. Run against nginx too
(PROXY_UNDER_TEST=nginx): every row here is nginx's behaviour.
"""
import pytest

from proxy_harness import proxy, upstream  # noqa: F401 fixtures
from test_proxy import request

SITE = """
server {
    listen 127.0.0.1:{port0};
    location / { return 200 "root\\n"; }
    location /api/ { proxy_pass http://127.0.0.1:{up0}; }
    location /cached/ {
        proxy_pass http://127.0.0.1:{up0};
        expires 30d;
        add_header X-Where cached;
    }
    location = /exact/ { proxy_pass http://127.0.0.1:{up0}; }
    location /own/ { proxy_pass http://127.0.0.1:{up0}; }
    location /own { return 200 "own\\n"; }
    location /files/ { root ROOT; }
    location ~ ^/regex$ { return 200 "regex\\n"; }
    location /regex/ { proxy_pass http://127.0.0.1:{up0}; }
}
"""


@pytest.fixture
def site(upstream, proxy):
    return proxy(SITE, upstream())


def location_path(headers):
    value = headers["location"]
    return value[value.index("/", value.index("//") + 2):]


def test_the_prefix_without_its_slash_is_301_to_the_proxied_location(site):
    status, headers, _, _ = request(site, "/api")
    assert status == 301
    assert location_path(headers) == "/api/"


def test_the_slash_redirect_keeps_the_arguments(site):
    status, headers, _, _ = request(site, "/api?a=1&b=2")
    assert status == 301
    assert location_path(headers) == "/api/?a=1&b=2"


def test_an_exact_proxied_location_ending_in_a_slash_is_redirected_to_too(site):
    status, headers, _, _ = request(site, "/exact")
    assert status == 301
    assert location_path(headers) == "/exact/"


def test_a_location_that_names_the_path_as_it_is_answers_without_redirect(site):
    status, _, body, _ = request(site, "/own")
    assert (status, body) == (200, b"own\n")


def test_a_location_served_by_files_is_not_redirected_to(site):
    status, _, body, _ = request(site, "/files")
    assert (status, body) == (200, b"root\n")


def test_the_slash_redirect_comes_before_the_regex_locations(site):
    status, headers, _, _ = request(site, "/regex")
    assert status == 301
    assert location_path(headers) == "/regex/"


def test_the_slash_redirect_is_answered_as_the_proxied_locations_own(site):
    """nginx's search ends in `location /cached/`: its expires and add_header apply to the
    redirect (add_header's default statuses include 301)."""
    status, headers, _, _ = request(site, "/cached")
    assert status == 301
    assert headers.get("x-where") == "cached"
    assert headers.get("cache-control") == "max-age=2592000"
