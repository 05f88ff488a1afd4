"""`$upstream_cookie_NAME`, as nginx 1.22 gives it: the value of the cookie NAME (without
case) that the upstream's answer sets, from the first `Set-Cookie` field that sets it, up
to its `;`; empty without one.

One configuration is run as written by nginx and by lfhttpd, each proxying to its own
second server; each test compares a header made of the variable.
"""
import socket

import pytest

from conftest import Nginx, Server, check_clean_exit, free_port, with_ports, scaled

SITE = r"""
server {
    listen 127.0.0.1:{port0};
    location /foo {
        proxy_pass http://127.0.0.1:{port1};
        add_header X-Got "[$upstream_cookie_foo]";
    }
    location /bar {
        proxy_pass http://127.0.0.1:{port1};
        add_header X-Got "[$upstream_cookie_bar]";
    }
    location /bazz {
        proxy_pass http://127.0.0.1:{port1};
        add_header X-Got "[$upstream_cookie_bazz]";
    }
    location /quux {
        proxy_pass http://127.0.0.1:{port1};
        add_header X-Got "[$upstream_cookie_quux]";
    }
    location /fo {
        proxy_pass http://127.0.0.1:{port1};
        add_header X-Got "[$upstream_cookie_fo]";
    }
    location /none {
        proxy_pass http://127.0.0.1:{port1};
        add_header X-Got "[$upstream_cookie_none]";
    }
}
server {
    listen 127.0.0.1:{port1};
    location / {
        add_header Set-Cookie "foo=1; Path=/";
        add_header Set-Cookie "bar=two";
        add_header Set-Cookie "Bazz=3;";
        add_header Set-Cookie "foo=again";
        add_header Set-Cookie "x=1; quux=2";
        return 204;
    }
}
"""


def start_lfhttpd(dirpath, text):
    for attempt in range(3):  # a port picked may be taken before lfhttpd binds it
        ports = [free_port(), free_port()]
        top = "threads 2;\nerror_log stderr debug;\nshutdown_timeout 5s;\n"
        try:
            return Server(dirpath / f"try{attempt}", None,
                          conf=top + with_ports(text, ports)), ports[0]
        except RuntimeError as e:
            if "in use" not in str(e) or attempt == 2:
                raise


@pytest.fixture(scope="module")
def daemons(tmp_path_factory):
    theirs = Nginx(tmp_path_factory.mktemp("nginx"), None, SITE, http=True)
    try:
        ours, port = start_lfhttpd(tmp_path_factory.mktemp("lfhttpd"), SITE)
    except BaseException:
        theirs.stop()
        raise
    yield theirs.port, port
    theirs.stop()
    check_clean_exit(ours)


def got(port, target):
    head = f"GET {target} HTTP/1.1\r\nHost: example.test\r\nConnection: close\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=scaled(10)) as s:
        s.sendall(head.encode())
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    for line in data.decode("latin-1").split("\r\n"):
        if line.lower().startswith("x-got:"):
            return line.partition(":")[2].strip()
    return None


def same(daemons, name, expected):
    for who, port in zip(("nginx", "lfhttpd"), daemons):
        assert got(port, "/" + name) == expected, who


def test_value_is_the_first_field_s_that_sets_it_up_to_its_semicolon(daemons):
    same(daemons, "foo", "[1]")


def test_field_without_attributes_gives_its_whole_value(daemons):
    same(daemons, "bar", "[two]")


def test_cookie_name_is_matched_without_case(daemons):
    same(daemons, "bazz", "[3]")


def test_name_after_the_cookie_s_own_is_an_attribute_not_a_cookie(daemons):
    same(daemons, "quux", "[]")


def test_name_must_be_the_whole_cookie_name(daemons):
    same(daemons, "fo", "[]")


def test_cookie_no_field_sets_is_empty(daemons):
    same(daemons, "none", "[]")
