"""`geo`: a variable whose value is chosen by the client's address, against nginx, the
oracle.

One configuration is run as written by nginx and by lfhttpd. Its geo blocks take the
address from the client (the tests connect from 127.0.0.1), from `$arg_ip` (so that one
request can name any address, IPv4 or IPv6), behind trusted proxies (X-Forwarded-For), and
as ranges. Every answer is `return 200` of the variables, so one request shows each
server's choice. Each row states what nginx answers; nginx is checked against it, then
lfhttpd must answer the same.
"""
import http.client

import pytest

from conftest import BIN, nginx_beside_lfhttpd

SITE = r"""
geo $client {
    default        none;
    127.0.0.0/8    loopback;
    127.0.0.1      me;
}
geo $arg_ip $net {
    default          ZZ;
    10.0.0.0/8       ten;
    10.1.0.0/16      ten-one;
    10.1.2.0/24      ten-one-two;
    10.1.2.3         host;
    10.2.0.0/16      old;
    10.2.0.0/16      new;
    10.3.0.0/16      gone;
    delete           10.3.0.0/16;
    192.168.1.77/24  low-bits;
    2001:db8::/32    doc6;
    2001:db8:1::/48  doc6-one;
    ::/0             any6;
    255.255.255.255  all-ones;
}
geo $arg_ip $nodefault {
    10.0.0.0/8       ten;
}
geo $behind {
    default          direct;
    proxy            127.0.0.1;
    proxy            10.9.0.0/16;
    10.0.0.0/8       ten;
    192.0.2.0/24     doc;
    127.0.0.1        self;
}
geo $behindr {
    default          direct;
    proxy            127.0.0.1;
    proxy            10.9.0.0/16;
    proxy_recursive;
    10.0.0.0/8       ten;
    192.0.2.0/24     doc;
}
geo $notbehind {
    default          direct;
    proxy            10.9.0.0/16;
    192.0.2.0/24     doc;
    127.0.0.1        self;
}
geo $arg_ip $range {
    ranges;
    default                   ZZ;
    10.0.0.0-10.0.0.255       first;
    10.0.1.0-10.0.1.255       second;
    10.0.0.128-10.0.0.200     inner;
}
geo $arg_ip $rdel {
    ranges;
    default                   ZZ;
    10.0.0.0-10.0.0.255       all;
    10.0.0.7-10.0.0.7         seven;
    10.0.0.9-10.0.0.9         nine;
    delete                    10.0.0.5-10.0.0.9;
    delete                    10.0.0.9-10.0.0.9;
    10.0.0.8-10.0.0.8         eight;
}
server {
    listen 127.0.0.1:{port0};
    location / {
        return 200 "client=$client net=$net nodefault=[$nodefault] behind=$behind behindr=$behindr notbehind=$notbehind range=$range rdel=$rdel\n";
    }
}
"""



@pytest.fixture(scope="module")
def daemons(tmp_path_factory):
    """(nginx's port, lfhttpd's port)."""
    for theirs, ours in nginx_beside_lfhttpd(tmp_path_factory, SITE):
        yield theirs[0], ours[0]


def answer(port, query="", xff=()):
    """The variables of the answer to GET /query, with one X-Forwarded-For field for each
    of xff."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.putrequest("GET", f"/{query}")
        for v in xff:
            c.putheader("X-Forwarded-For", v)
        c.endheaders()
        body = c.getresponse().read().decode()
    finally:
        c.close()
    return dict(kv.split("=", 1) for kv in body.split())


def same(daemons, query="", xff=(), **expected):
    """nginx answers `expected` (the variables named), and lfhttpd answers what nginx
    answers, every variable."""
    theirs, ours = daemons
    nginx = answer(theirs, query, xff)
    for name, value in expected.items():
        assert nginx[name] == value, (name, nginx)
    assert answer(ours, query, xff) == nginx


def test_the_client_address_chooses_its_most_specific_network(daemons):
    same(daemons, client="me")


@pytest.mark.parametrize("ip,net", [
    ("10.200.0.1", "ten"),
    ("10.1.9.9", "ten-one"),
    ("10.1.2.9", "ten-one-two"),
    ("10.1.2.3", "host"),
    ("11.0.0.1", "ZZ"),
])
def test_an_address_from_a_variable_chooses_the_longest_prefix_that_holds_it(daemons, ip, net):
    same(daemons, f"?ip={ip}", net=net)


def test_of_two_equal_networks_the_later_counts(daemons):
    same(daemons, "?ip=10.2.3.4", net="new")


def test_a_deleted_network_no_longer_matches(daemons):
    same(daemons, "?ip=10.3.3.4", net="ten")


def test_a_network_written_with_low_bits_set_holds_its_whole_prefix(daemons):
    same(daemons, "?ip=192.168.1.5", net="low-bits")


@pytest.mark.parametrize("ip,net", [
    ("2001:db8::5", "doc6"),
    ("2001:db8:1::5", "doc6-one"),
    ("fe80::1", "any6"),
])
def test_ipv6_addresses_match_ipv6_networks(daemons, ip, net):
    same(daemons, f"?ip={ip}", net=net)


def test_an_ipv4_mapped_ipv6_address_is_looked_up_as_ipv4(daemons):
    same(daemons, "?ip=::ffff:10.1.2.3", net="host")


def test_a_value_that_is_no_address_is_looked_up_as_255_255_255_255(daemons):
    same(daemons, "?ip=not-an-address", net="all-ones")


def test_without_default_an_unmatched_address_gives_an_empty_value(daemons):
    same(daemons, "?ip=11.0.0.1", nodefault="[]")


def test_a_trusted_client_is_replaced_by_the_last_forwarded_address(daemons):
    same(daemons, xff=["192.0.2.9"], behind="doc")


def test_without_proxy_recursive_the_last_forwarded_address_counts_even_if_trusted(daemons):
    same(daemons, xff=["192.0.2.9, 10.9.1.1"], behind="ten", behindr="doc")


def test_several_forwarded_fields_are_read_as_one_list(daemons):
    same(daemons, xff=["192.0.2.9", "10.9.1.1"], behindr="doc")


def test_an_untrusted_client_is_not_replaced_by_a_forwarded_address(daemons):
    same(daemons, xff=["192.0.2.9"], notbehind="self")


def test_without_forwarded_field_a_trusted_client_stays_itself(daemons):
    same(daemons, behind="self", behindr="direct")


@pytest.mark.parametrize("ip,rng", [
    ("10.0.0.5", "first"),
    ("10.0.1.5", "second"),
    ("10.0.0.150", "inner"),
    ("10.0.2.1", "ZZ"),
    ("2001:db8::1", "ZZ"),
])
def test_a_range_inside_another_splits_it(daemons, ip, rng):
    same(daemons, f"?ip={ip}", range=rng)


def test_a_geo_with_a_bad_network_is_refused_with_its_line(tmp_path):
    import subprocess
    conf = tmp_path / "t.conf"
    conf.write_text("listen 127.0.0.1:0;\ngeo $g {\n  default 0;\n  10.0.0.0/33 1;\n}\n")
    r = subprocess.run([BIN, "-t", "-c", str(conf)], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 1 and f"{conf}:4:" in r.stderr and "10.0.0.0/33" in r.stderr, \
        r.stderr


@pytest.mark.parametrize("ip,value", [
    ("10.0.0.1", "all"),
    ("10.0.0.6", "all"),
    ("10.0.0.7", "seven"),
    ("10.0.0.8", "eight"),
    ("10.0.0.9", "ZZ"),
    ("10.0.0.10", "all"),
])
def test_delete_takes_away_only_a_range_written_exactly_so(daemons, ip, value):
    same(daemons, f"?ip={ip}", rdel=value)


def test_a_range_that_overlaps_another_partly_is_refused_with_its_line(tmp_path):
    import subprocess
    conf = tmp_path / "t.conf"
    conf.write_text("listen 127.0.0.1:0;\ngeo $g {\n  ranges;\n  10.0.0.0-10.0.0.10 a;\n"
                    "  10.0.0.5-10.0.0.20 b;\n}\n")
    r = subprocess.run([BIN, "-t", "-c", str(conf)], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 1 and f"{conf}:5:" in r.stderr and "overlaps" in r.stderr, r.stderr
