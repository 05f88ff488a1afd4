"""nginx's `keepalive_timeout TIMEOUT HEADER_TIMEOUT`: a response on a connection that stays
open says `Keep-Alive: timeout=HEADER_TIMEOUT`; one that closes it does not. Every test
here holds on nginx too (PROXY_UNDER_TEST=nginx)."""
import pytest

from proxy_harness import proxy, upstream  # noqa: F401 fixtures
from test_proxy import request

SITE = """
keepalive_timeout 65 {header};
server {{
    listen 127.0.0.1:{{port0}};
    location / {{ return 200 "x\\n"; }}
    location /up/ {{ proxy_pass http://127.0.0.1:{{up0}}; }}
}}
"""


def test_the_second_value_is_sent_as_the_keep_alive_header(proxy, upstream):
    p = proxy(SITE.format(header="60"), upstream())
    _, headers, _, _ = request(p, "/", close=False)
    assert headers.get("keep-alive") == "timeout=60"


def test_a_proxied_answer_carries_the_keep_alive_header_too(proxy, upstream):
    p = proxy(SITE.format(header="30"), upstream())
    status, headers, _, _ = request(p, "/up/x", close=False)
    assert status == 200
    assert headers.get("keep-alive") == "timeout=30"


def test_a_response_that_closes_the_connection_has_no_keep_alive_header(proxy, upstream):
    p = proxy(SITE.format(header="60"), upstream())
    _, headers, _, _ = request(p, "/", close=True)
    assert "keep-alive" not in headers


def test_without_a_second_value_there_is_no_keep_alive_header(proxy, upstream):
    p = proxy(SITE.format(header=""), upstream())
    _, headers, _, _ = request(p, "/", close=False)
    assert "keep-alive" not in headers
