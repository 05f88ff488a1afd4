"""`split_clients` (A/B splits), against nginx, the oracle.

One configuration is run as written by nginx and by lfhttpd. Its splits hash a request's
argument (so that one request can name any key), and each answer is `return 200` of the
variables. nginx and lfhttpd must give every key of a few hundred the same parts: the hash
is MurmurHash2 and the percentages split its range alike, or the answers drift apart.
"""
import http.client
import subprocess

import pytest

from conftest import BIN, nginx_beside_lfhttpd

SITE = r"""
split_clients "${arg_k}AAA" $variant {
    0.5%   .one;
    2.0%   .two;
    *      "";
}
split_clients $arg_k $half {
    50%    a;
    50%    b;
}
split_clients $arg_k $partial {
    10.25% x;
    33%    y;
}
split_clients "k=$arg_k" $ab {
    12.5%  first;
    *      rest;
}
server {
    listen 127.0.0.1:{port0};
    location / { return 200 "variant=[$variant] half=[$half] partial=[$partial] ab=[$ab]"; }
}
"""

KEYS = [f"{i}" for i in range(200)] + [f"10.0.{i}.{i * 7 % 256}" for i in range(200)] + \
    ["", "a", "ab", "abc", "abcd", "abcde", "x" * 100]


@pytest.fixture(scope="module")
def daemons(tmp_path_factory):
    """(nginx's port, lfhttpd's port)."""
    for theirs, ours in nginx_beside_lfhttpd(tmp_path_factory, SITE):
        yield theirs[0], ours[0]


def answers(port, keys):
    """The body for each key, on one kept-alive connection."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    out = []
    try:
        for k in keys:
            c.request("GET", f"/?k={k}")
            out.append(c.getresponse().read().decode())
    finally:
        c.close()
    return out


def test_every_key_gets_the_same_parts_as_from_nginx(daemons):
    theirs, ours = daemons
    nginx = answers(theirs, KEYS)
    assert answers(ours, KEYS) == nginx


def test_the_parts_take_their_shares_of_the_keys(daemons):
    """The oracle's split is the one the percentages say (roughly, over 400 keys), so that
    the comparison above compares real splits."""
    theirs, _ = daemons
    nginx = answers(theirs, KEYS)
    halves = sum("half=[a]" in a for a in nginx)
    firsts = sum("ab=[first]" in a for a in nginx)
    empty = sum("partial=[]" in a for a in nginx)
    assert 150 < halves < 257 and 20 < firsts < 90 and 200 < empty < 330


def test_percentages_over_100_are_refused_with_the_line(tmp_path):
    conf = tmp_path / "t.conf"
    conf.write_text("listen 127.0.0.1:0;\nsplit_clients $remote_addr $v {\n  60% a;\n"
                    "  50% b;\n}\n")
    r = subprocess.run([BIN, "-t", "-c", str(conf)], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 1 and f"{conf}:4:" in r.stderr and "100%" in r.stderr, r.stderr


@pytest.mark.parametrize("pct", ["1.234%", "50", "abc%", "101%"])
def test_a_percentage_nginx_refuses_is_refused(tmp_path, pct):
    conf = tmp_path / "t.conf"
    conf.write_text(f"listen 127.0.0.1:0;\nsplit_clients $remote_addr $v {{\n  {pct} a;\n}}\n")
    r = subprocess.run([BIN, "-t", "-c", str(conf)], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 1 and f"{conf}:3:" in r.stderr, r.stderr


def test_a_part_after_the_star_is_refused_as_over_100(tmp_path):
    conf = tmp_path / "t.conf"
    conf.write_text("listen 127.0.0.1:0;\nsplit_clients $remote_addr $v {\n  * a;\n"
                    "  10% b;\n}\n")
    r = subprocess.run([BIN, "-t", "-c", str(conf)], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 1 and f"{conf}:4:" in r.stderr and "100%" in r.stderr, r.stderr
