"""`resolver` and `proxy_pass` with variables, as nginx's.

A real DNS server, dnsmasq, started by each test on a port of its own with a hosts file the
test writes (and changes: dnsmasq reads it again on SIGHUP), answers the proxy's queries;
a name that is not in the file does not exist (--local=/test/). A resolver that never
answers is a UDP socket the test opens and only reads. The upstream is the proxy tests'
upstream_app. The differential tests run the same configuration by nginx with the same
dnsmasq and compare what the client got and what the upstream received.
"""
import os
import signal
import socket
import struct
import subprocess
import time

import pytest

from conftest import free_port, scaled, wait_until
from proxy_harness import Proxy, proxy, upstream  # noqa: F401 (fixtures)

DNSMASQ = "/usr/sbin/dnsmasq"

pytestmark = pytest.mark.skipif(not os.path.exists(DNSMASQ),
                                reason="dnsmasq (dnsmasq-base) is not installed")


def dns_query(port, name, qtype=1, timeout=1.0):
    """One DNS question to 127.0.0.1:port: the answer's RCODE and its A addresses."""
    qname = b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"
    packet = struct.pack(">HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0) + qname + struct.pack(
        ">HH", qtype, 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(timeout)
        s.sendto(packet, ("127.0.0.1", port))
        data, _ = s.recvfrom(4096)
    rcode = data[3] & 0xF
    # (an answer's type A, class IN, TTL, length 4, then the address)
    addrs = [socket.inet_ntoa(data[i + 10:i + 14]) for i in range(12, len(data) - 13)
             if data[i:i + 4] == b"\x00\x01\x00\x01" and data[i + 8:i + 10] == b"\x00\x04"]
    return rcode, addrs


class Dnsmasq:
    """dnsmasq on 127.0.0.1:.port answering from a hosts file ({name: address}); stopped by
    PID."""

    def __init__(self, dirpath, hosts, extra=()):
        self.dir = str(dirpath)
        os.makedirs(self.dir, exist_ok=True)
        self.hosts_path = os.path.join(self.dir, "hosts")
        self.write(hosts)
        self.port = free_port()
        args = [DNSMASQ, "--no-daemon", "--keep-in-foreground", f"--port={self.port}",
                "--listen-address=127.0.0.1", "--bind-interfaces", "--no-resolv",
                "--no-hosts", f"--addn-hosts={self.hosts_path}", "--local=/test/",
                "--pid-file=", "--log-facility=-", *extra]
        if os.geteuid() == 0:
            args.append("--user=root")
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        first = next(iter(hosts))
        if not wait_until(lambda: self.answers(first), scaled(10)):
            self.stop()
            raise RuntimeError("dnsmasq did not start")

    def write(self, hosts):
        with open(self.hosts_path, "w") as f:
            f.writelines(f"{addr} {name}\n" for name, addr in hosts.items())

    def answers(self, name):
        try:
            return dns_query(self.port, name, timeout=0.2)[1]
        except OSError:
            return []

    def change(self, hosts):
        """Rewrite the hosts file and make dnsmasq read it again."""
        self.write(hosts)
        self.proc.send_signal(signal.SIGHUP)
        want = next(iter(hosts.values()))
        assert wait_until(lambda: want in self.answers(next(iter(hosts))), scaled(10))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def dns(tmp_path):
    """dns(hosts) -> a running Dnsmasq; each stopped when the test ends."""
    started = []

    def start(hosts, extra=()):
        d = Dnsmasq(tmp_path / f"dns{len(started)}", hosts, extra)
        started.append(d)
        return d

    yield start
    for d in started:
        d.stop()


@pytest.fixture
def silent_dns():
    """A UDP socket on 127.0.0.1 that reads the queries sent to it and never answers."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    s.setblocking(False)
    yield s
    s.close()


def queries_read(s):
    """The (id, qtype) of every query waiting on the silent socket."""
    seen = []
    while True:
        try:
            data = s.recv(4096)
        except BlockingIOError:
            return seen
        qtype = struct.unpack(">H", data[-4:-2])[0]
        seen.append((struct.unpack(">H", data[:2])[0], qtype))


def get(port, path, host="proxy.test"):
    """GET path: (status, body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=scaled(20)) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body


def received(u):
    """What the upstream received since it was cleared: [(request line, Host)]."""
    out = []
    for q in u.requests():
        host = [v for n, v in q["headers"] if n.lower() == "host"]
        out.append((f"{q['method']} {q['target']}", host[0] if host else None))
    return out


def start(proxy, upstream, text, **names):
    u = upstream()
    for k, v in names.items():
        text = text.replace("{%s}" % k, str(v))
    return u, proxy(text, u)


# --- resolving ------------------------------------------------------------------------------

DOCKER = """
server {
    listen 127.0.0.1:{port0};
    resolver 127.0.0.1:{dns} valid=10s;
    location / {
        set $up http://app.test:{up0};
        proxy_pass $up;
    }
}
"""


def test_a_name_in_a_variable_is_resolved_and_proxied(proxy, upstream, dns):
    d = dns({"app.test": "127.0.0.1"})
    u, p = start(proxy, upstream, DOCKER, dns=d.port)
    status, _ = get(p.port, "/x?y=1")
    assert status == 200
    assert received(u) == [("GET /x?y=1", f"app.test:{u.ports[0]}")]


def test_an_answer_is_kept_until_valid_passes_then_asked_again(proxy, upstream, dns):
    # The name first points where nothing listens (502), then at the upstream: the old
    # answer holds for valid=2s (dnsmasq's own TTL for its hosts is 0), the new one after.
    d = dns({"app.test": "127.0.0.2"})
    text = DOCKER.replace("valid=10s", "valid=2s")
    u, p = start(proxy, upstream, text, dns=d.port)
    assert get(p.port, "/a")[0] == 502
    d.change({"app.test": "127.0.0.1"})
    began = time.monotonic()
    assert get(p.port, "/b")[0] == 502  # still the kept answer
    assert time.monotonic() - began < 1.5  # (the test is valid only inside valid=)
    assert received(u) == []
    time.sleep(2.2)
    assert get(p.port, "/c")[0] == 200
    assert received(u) == [("GET /c", f"app.test:{u.ports[0]}")]


def test_a_cname_leads_to_its_names_address(proxy, upstream, dns):
    d = dns({"app.test": "127.0.0.1"}, ["--cname=www.test,app.test"])
    text = DOCKER.replace("http://app.test:", "http://www.test:")
    u, p = start(proxy, upstream, text, dns=d.port)
    assert get(p.port, "/w")[0] == 200
    assert received(u) == [("GET /w", f"www.test:{u.ports[0]}")]


def test_a_name_that_does_not_exist_is_502_logged_as_nginx_does(proxy, upstream, dns):
    d = dns({"app.test": "127.0.0.1"})
    text = DOCKER.replace("app.test", "nowhere.test")
    u, p = start(proxy, upstream, text, dns=d.port)
    assert get(p.port, "/")[0] == 502
    assert "nowhere.test could not be resolved (3: Host not found)" in p.log()
    assert received(u) == []


def test_without_a_resolver_a_name_is_502_logged_as_nginx_does(proxy, upstream):
    text = """
server {
    listen 127.0.0.1:{port0};
    location / { set $up http://app.test:{up0}; proxy_pass $up; }
}
"""
    u, p = start(proxy, upstream, text)
    assert get(p.port, "/")[0] == 502
    assert "no resolver defined to resolve app.test" in p.log()


def test_a_resolver_that_does_not_answer_is_502_after_resolver_timeout(proxy, upstream,
                                                                       silent_dns):
    text = """
server {
    listen 127.0.0.1:{port0};
    resolver 127.0.0.1:{dns};
    resolver_timeout 1s;
    location / { proxy_pass http://app.test:{up0}$request_uri; }
}
"""
    u, p = start(proxy, upstream, text, dns=silent_dns.getsockname()[1])
    began = time.monotonic()
    assert get(p.port, "/slow")[0] == 502
    assert time.monotonic() - began >= 0.95
    assert "app.test could not be resolved (110: Operation timed out)" in p.log()
    assert queries_read(silent_dns)  # it was asked
    # the server goes on: another request is answered as well
    assert get(p.port, "/again")[0] == 502


def test_a_query_that_was_lost_is_sent_again(proxy, upstream, silent_dns):
    # A DNS server that drops the first question and answers the next ones (an address
    # for A): the proxy's resolver sends it again on its own (c-ares's 2s), well within
    # resolver_timeout, with no other request to make it act.
    import threading
    silent_dns.setblocking(True)
    silent_dns.settimeout(10)
    seen = []

    def serve():
        try:
            while True:
                q, peer = silent_dns.recvfrom(4096)
                seen.append(q)
                if len(seen) == 1:
                    continue
                answer = (q[:2] + b"\x81\x80" + q[4:6] + b"\x00\x01\x00\x00\x00\x00" + q[12:]
                          + b"\xc0\x0c\x00\x01\x00\x01\x00\x00\x00\x00\x00\x04"
                          + socket.inet_aton("127.0.0.1"))
                silent_dns.sendto(answer, peer)
        except OSError:
            return

    threading.Thread(target=serve, daemon=True).start()
    text = """
server {
    listen 127.0.0.1:{port0};
    resolver 127.0.0.1:{dns} ipv6=off;
    resolver_timeout 8s;
    location / { proxy_pass http://lost.test:{up0}$request_uri; }
}
"""
    u, p = start(proxy, upstream, text, dns=silent_dns.getsockname()[1])
    began = time.monotonic()
    assert get(p.port, "/lost")[0] == 200
    assert time.monotonic() - began < 7
    assert len(seen) >= 2


def test_requests_for_a_name_being_asked_share_one_query(proxy, upstream, silent_dns):
    text = """
server {
    listen 127.0.0.1:{port0};
    resolver 127.0.0.1:{dns} ipv6=off;
    resolver_timeout 1500ms;
    location / { proxy_pass http://shared.test:{up0}$request_uri; }
}
"""
    u, p = start(proxy, upstream, text, dns=silent_dns.getsockname()[1])
    conns = []
    for i in range(3):
        c = socket.create_connection(("127.0.0.1", p.port), timeout=scaled(20))
        c.sendall(f"GET /{i} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        conns.append(c)
    for c in conns:
        assert c.recv(100).startswith(b"HTTP/1.1 502")
        c.close()
    asked = [q for q in queries_read(silent_dns) if q[1] == 1]  # A questions
    assert len(asked) == 1, asked


def test_an_ip_address_in_a_variable_is_used_without_a_resolver(proxy, upstream):
    text = """
server {
    listen 127.0.0.1:{port0};
    location / { set $h 127.0.0.1; proxy_pass http://$h:{up0}; }
}
"""
    u, p = start(proxy, upstream, text)
    assert get(p.port, "/ip?z")[0] == 200
    assert received(u) == [("GET /ip?z", f"127.0.0.1:{u.ports[0]}")]


def test_a_variable_naming_an_upstream_block_uses_the_block(proxy, upstream):
    text = """
upstream backend { server 127.0.0.1:{up0}; }
server {
    listen 127.0.0.1:{port0};
    location / { set $b backend; proxy_pass http://$b; }
}
"""
    u, p = start(proxy, upstream, text)
    assert get(p.port, "/blk")[0] == 200
    assert received(u) == [("GET /blk", "backend")]


def test_an_expanded_url_that_is_not_http_is_500(proxy, upstream):
    text = """
server {
    listen 127.0.0.1:{port0};
    location / { set $up app.test:{up0}; proxy_pass $up; }
}
"""
    u, p = start(proxy, upstream, text)
    assert get(p.port, "/")[0] == 500
    assert 'invalid URL prefix in "app.test:' in p.log()


# --- against nginx ------------------------------------------------------------------------

NGINX_CONF = """
upstream backend { server 127.0.0.1:{up0}; }
server {
    listen 127.0.0.1:{port0};
    resolver 127.0.0.1:{dns} valid=10s ipv6=off;
    resolver_timeout 5s;
    location /docker/ { set $up http://app.test:{up0}; proxy_pass $up; }
    location /uri/ { proxy_pass http://app.test:{up0}/fixed?$args; }
    location /request-uri/ { proxy_pass http://app.test:{up0}$request_uri; }
    location /arg/ { proxy_pass http://$arg_h:{up0}; }
    location /block/ { set $b backend; proxy_pass http://$b; }
    location /missing/ { proxy_pass http://missing.test:{up0}$request_uri; }
    location /ip/ { set $h 127.0.0.1; proxy_pass http://$h:{up0}; }
    location /no-prefix/ { set $up app.test:{up0}; proxy_pass $up; }
}
"""

DIFF_TARGETS = [
    "/docker/a?b=1",
    "/uri/x?y=2",
    "/uri/x",
    "/request-uri/p%20q?r",
    "/arg/?h=app.test",
    "/arg/?h=127.0.0.1",
    "/arg/?h=missing.test",
    "/block/z",
    "/missing/m",
    "/ip/i",
    "/no-prefix/n",
]


@pytest.fixture
def both(tmp_path, docroot, upstream, dns):
    """(upstream, nginx, lfhttpd) on NGINX_CONF, with one dnsmasq."""
    d = dns({"app.test": "127.0.0.1"})
    u = upstream()
    text = NGINX_CONF.replace("{dns}", str(d.port))
    theirs = Proxy(tmp_path / "nginx", text, u, docroot, kind="nginx")
    try:
        ours = Proxy(tmp_path / "lfhttpd", text, u, docroot, kind="lfhttpd")
    except Exception:
        theirs.stop()
        raise
    yield u, theirs, ours
    ours.stop()
    theirs.stop()


def observed(u, p, target):
    u.clear()
    status, _ = get(p.port, target)
    return status, received(u)


@pytest.mark.parametrize("target", DIFF_TARGETS)
def test_resolves_and_proxies_as_nginx_does(both, target):
    u, theirs, ours = both
    assert observed(u, ours, target) == observed(u, theirs, target)


# --- the configuration ----------------------------------------------------------------------

def check_conf(tmp_path, text):
    """`lfhttpd -t` on an http block of text: (exit status, stderr, the file's path)."""
    from conftest import BIN
    conf = tmp_path / "t.conf"
    conf.write_text("events {}\nhttp {\n" + text + "\n}\n")
    r = subprocess.run([BIN, "-t", "-c", str(conf)], capture_output=True, text=True,
                       timeout=30)
    return r.returncode, r.stderr, str(conf)


def test_resolver_with_ipv4_and_ipv6_off_is_refused_with_its_line(tmp_path):
    rc, err, conf = check_conf(tmp_path, "server {\n listen 127.0.0.1:0;\n"
                                         " resolver 127.0.0.1 ipv4=off ipv6=off;\n}")
    assert rc != 0
    assert f"{conf}:5" in err and "resolver" in err and "cannot both be" in err


def test_resolver_with_an_address_that_is_not_one_is_refused_with_its_line(tmp_path):
    rc, err, conf = check_conf(tmp_path, "resolver 127.0.0.1:99999;")
    assert rc != 0
    assert f"{conf}:3" in err and 'invalid address "127.0.0.1:99999"' in err


def test_resolver_parameters_as_nginx_writes_them_are_accepted(tmp_path):
    rc, err, _ = check_conf(tmp_path, "resolver 127.0.0.11 [::1]:5353 valid=30s ipv6=off "
                                      "status_zone=dns;\nresolver_timeout 5s;\nserver {\n"
                                      " listen 127.0.0.1:0;\n location / { set $up "
                                      "http://app:8000; proxy_pass $up; }\n}")
    assert rc == 0, err
