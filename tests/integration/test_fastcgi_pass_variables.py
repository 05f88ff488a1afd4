"""fastcgi_pass with variables (uwsgi_pass and scgi_pass alike), as nginx's
(ngx_http_fastcgi_eval, then ngx_http_upstream_init_request): the value, made per request,
names an `upstream` block (a name without a port, looked up first), or is an address,
`unix:PATH`, IPv4:PORT or [IPv6]:PORT; a malformed value, or one without a port, is 500
with nginx's line in the error log; a host name with no `resolver` is 502, "no resolver
defined to resolve NAME". A connection to a variable's address is never kept; one to a
block it names is, as the block's `keepalive` says.

Each case runs the same configuration on lfhttpd and on nginx, against the same real
PHP-FPM pools (each pool's script says which pool answered, from its env[POOL]), or the
same uWSGI application."""
import os
import re
import socket
import time

import pytest

from conftest import Nginx, check_clean_exit, free_port, scaled
from fastcgi_harness import Fpm, lfhttpd, php_root, with_conf_files
from test_fastcgi import request
from test_fastcgi_keepalive_limits import connections_to


def docroot(tmp_path):
    root = php_root(tmp_path)
    with open(os.path.join(root, "pool.php"), "w") as f:
        f.write("<?php echo getenv('POOL');\n")
    return root


@pytest.fixture
def pools(tmp_path):
    """pools(*listens): PHP-FPM pools named a, b, ... (a listen address each, None: a
    unix socket of its own), stopped at the end."""
    made = []

    def start(*listens):
        for listen in listens:
            name = chr(ord("a") + len(made))
            made.append(Fpm(tmp_path / f"fpm-{name}", listen=listen, extra=f"env[POOL] = {name}\n"))
        return made

    yield start
    for p in made:
        p.stop()


@pytest.fixture
def pair(tmp_path):
    """start(server_text, top=""): lfhttpd and nginx on the same server text, with `top`
    (map, upstream blocks) before the server, one root."""
    made = []

    def start(text, top=""):
        root = docroot(tmp_path)
        lf = lfhttpd(tmp_path / "lf", root, text, top=top)
        made.append(lf)
        with_conf_files(tmp_path / "ng")
        ng = Nginx(tmp_path / "ng", root, top + "server {\n    listen 127.0.0.1:{port0};\n"
                   f"    root {root};\n{text}\n}}\n", http=True)
        made.append(ng)
        return lf, ng

    yield start
    for m in reversed(made):
        if hasattr(m, "error_log"):
            check_clean_exit(m)
        else:
            m.stop()


def body(server, path):
    status, _, data = request(server, "GET", path)
    return status, data


def both(servers, path):
    return [body(s, path) for s in servers]


def logs(lf, ng):
    return lf.error_log(), ng.log()


def php(passing="fastcgi_pass $up;"):
    """The location of the PHP scripts, passed as `passing` says."""
    return "location ~ \\.php$ { include fastcgi.conf; %s }" % passing


def test_a_map_chooses_between_two_pools_per_request(pools, pair):
    a, b = pools(None, None)
    top = (f"map $arg_v $php {{ default unix:{a.sock}; old unix:{b.sock}; }}\n")
    servers = pair(php("fastcgi_pass $php;"), top=top)
    assert both(servers, "/pool.php") == [(200, b"a")] * 2
    assert both(servers, "/pool.php?v=old") == [(200, b"b")] * 2
    assert both(servers, "/pool.php") == [(200, b"a")] * 2


def test_a_variable_naming_an_upstream_block_uses_its_servers(pools, pair):
    a, b = pools(None, None)
    top = f"upstream php {{ server unix:{b.sock}; }}\n"
    servers = pair("set $up php;\n" + php(), top=top)
    assert both(servers, "/pool.php") == [(200, b"b")] * 2


def test_an_upstream_block_is_named_in_any_case(pools, pair):
    a, = pools(None)
    top = f"upstream php {{ server unix:{a.sock}; }}\n"
    servers = pair("set $up PHP;\n" + php(), top=top)
    assert both(servers, "/pool.php") == [(200, b"a")] * 2


def test_a_unix_prefix_in_any_case_is_a_socket(pools, pair):
    a, = pools(None)
    servers = pair(f"set $up UNIX:{a.sock};\n" + php())
    assert both(servers, "/pool.php") == [(200, b"a")] * 2


def test_set_to_an_ipv4_address_and_port(pools, pair):
    port = free_port()
    pools(f"127.0.0.1:{port}")
    servers = pair(f"set $up 127.0.0.1:{port};\n" +
                   php())
    assert both(servers, "/pool.php") == [(200, b"a")] * 2


def ipv6_loopback():
    try:
        s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        s.bind(("::1", 0))
        s.close()
        return True
    except OSError:
        return False


@pytest.mark.skipif(not ipv6_loopback(), reason="no IPv6 loopback on this machine")
def test_set_to_an_ipv6_address_in_brackets_and_port(pools, pair):
    with socket.socket(socket.AF_INET6) as s:
        s.bind(("::1", 0))
        port = s.getsockname()[1]
    pools(f"[::1]:{port}")
    servers = pair(f"set $up [::1]:{port};\n" + php())
    assert both(servers, "/pool.php") == [(200, b"a")] * 2


@pytest.mark.parametrize("value, status, line", [
    ("''", 500, 'no host in upstream ""'),
    ("127.0.0.1", 500, 'no port in upstream "127.0.0.1"'),
    ("nosuchblock", 500, 'no port in upstream "nosuchblock"'),
    ("127.0.0.1:http", 500, 'invalid port in upstream "127.0.0.1:http"'),
    ("127.0.0.1:70000", 500, 'invalid port in upstream "127.0.0.1:70000"'),
    ("unix:", 500, 'no path in the unix domain socket in upstream "unix:"'),
    ("127.0.0.1:9000/x", 500, 'invalid host in upstream "127.0.0.1:9000/x"'),
    ("[::1", 500, 'invalid host in upstream "[::1"'),
    ("'[::zz]:9000'", 500, 'invalid IPv6 address in upstream "[::zz]:9000"'),
    ("::1:9000", 500, 'invalid port in upstream "::1:9000"'),
    ("'php.example:9000?x'", 500, 'invalid host in upstream "php.example:9000?x"'),
])
def test_a_bad_value_is_answered_with_nginx_status_and_log_line(pools, pair, value, status,
                                                                line):
    pools(None)
    servers = pair(f"set $up {value};\n" + php())
    got = [body(s, "/pool.php")[0] for s in servers]
    assert got == [status, status]
    lf_log, ng_log = logs(*servers)
    assert line in ng_log, ng_log
    assert line in lf_log, lf_log


def test_a_host_and_port_another_fastcgi_pass_names_uses_its_servers(pools, pair):
    """nginx keeps the set of `fastcgi_pass HOST:PORT;` (resolved at load) among its
    upstreams, and a variable's HOST:PORT that names it as written uses it: no resolver is
    asked."""
    port = free_port()
    pools(f"127.0.0.1:{port}")
    servers = pair(f"location /static/ {{ fastcgi_pass localhost:{port}; }}\n"
                   f"set $up localhost:{port};\n" + php())
    assert both(servers, "/pool.php") == [(200, b"a")] * 2


def test_a_host_name_without_a_resolver_is_502_as_nginx_logs_it(pools, pair):
    pools(None)
    servers = pair("set $up php.invalid:9000;\n" + php())
    assert [body(s, "/pool.php")[0] for s in servers] == [502, 502]
    for log in logs(*servers):
        assert "no resolver defined to resolve php.invalid" in log, log


def test_a_unix_socket_nobody_listens_on_is_502(pools, pair, tmp_path):
    pools(None)
    servers = pair(f"set $up unix:{tmp_path}/none.sock;\n" +
                   php())
    assert [body(s, "/pool.php")[0] for s in servers] == [502, 502]


def asking(server, n):
    for _ in range(n):
        assert body(server, "/pool.php")[0] == 200
        time.sleep(scaled(0.1))  # (a kept connection is put back just after the answer)


@pytest.mark.parametrize("kept", [True, False])
def test_connections_are_kept_only_for_a_named_block_with_keepalive(tmp_path, pools, kept):
    """Three requests: one connection when the variable names a block with `keepalive`
    (and fastcgi_keep_conn on), three when it is the block's address itself; nginx the
    same, each server on a pool of its own so that their connections are counted apart."""
    made = []
    try:
        root = docroot(tmp_path)
        ports = [free_port(), free_port()]
        pools(f"127.0.0.1:{ports[0]}", f"127.0.0.1:{ports[1]}")
        servers = []
        for i, port in enumerate(ports):
            top = f"upstream php {{ server 127.0.0.1:{port}; keepalive 2; }}\n"
            value = "php" if kept else f"127.0.0.1:{port}"
            text = (f"set $up {value};\n"
                    + php("fastcgi_pass $up; fastcgi_keep_conn on;"))
            if i == 0:
                servers.append(lfhttpd(tmp_path / "lf", root, text, top=top))
            else:
                with_conf_files(tmp_path / "ng")
                servers.append(Nginx(tmp_path / "ng", root, top + "server {\n"
                                     "    listen 127.0.0.1:{port0};\n"
                                     f"    root {root};\n{text}\n}}\n", http=True))
            made.append(servers[-1])
        counts = []
        for server, port in zip(servers, ports):
            asking(server, 1)  # (the pool's first connection, then counted from here)
            before = connections_to(port)
            asking(server, 3)
            counts.append(connections_to(port) - before)
        assert counts == ([0, 0] if kept else [3, 3])
    finally:
        for m in made:
            if hasattr(m, "error_log"):
                check_clean_exit(m)
            else:
                m.stop()


def test_the_configuration_test_accepts_a_variable(tmp_path):
    """`lfhttpd -t` takes `fastcgi_pass $php;` (it refused variables before)."""
    from conftest import BIN
    import subprocess
    with_conf_files(tmp_path)
    conf = tmp_path / "t.conf"
    conf.write_text("server { listen 127.0.0.1:0; location / { fastcgi_pass $php_backend; } }\n"
                    "map $host $php_backend { default unix:/run/php.sock; }\n")
    r = subprocess.run([BIN, "-t", "-c", str(conf)], capture_output=True, text=True,
                       timeout=scaled(20))
    assert r.returncode == 0, r.stdout + r.stderr


# --- uwsgi_pass and scgi_pass --------------------------------------------------------------

@pytest.mark.parametrize("protocol", ["uwsgi", "scgi"])
def test_uwsgi_and_scgi_pass_take_a_variable(tmp_path, protocol):
    from uwsgi_harness import Uwsgi
    from uwsgi_harness import lfhttpd as wire_lfhttpd
    from uwsgi_harness import with_conf_files as wire_conf_files
    app = Uwsgi(tmp_path / "app", protocol)
    made = [app]
    try:
        root = str(tmp_path)
        scheme = "uwsgi://" if protocol == "uwsgi" else ""
        top = f"map $arg_to $app {{ default {scheme}unix:{app.sock}; bad 127.0.0.1; }}\n"
        text = f"location / {{ {protocol}_pass $app; include {protocol}_params; }}\n"
        lf = wire_lfhttpd(tmp_path / "lf", root, text, top=top)
        made.append(lf)
        wire_conf_files(tmp_path / "ng")
        ng = Nginx(tmp_path / "ng", root, top + "server {\n    listen 127.0.0.1:{port0};\n"
                   f"    root {root};\n{text}\n}}\n", http=True)
        made.append(ng)
        for s in (lf, ng):
            assert body(s, "/status?b=hi") == (200, b"hi")
            assert body(s, "/status?to=bad")[0] == 500
        assert 'no port in upstream "127.0.0.1"' in lf.error_log()
        assert 'no port in upstream "127.0.0.1"' in ng.log()
    finally:
        for m in reversed(made):
            if hasattr(m, "error_log"):
                check_clean_exit(m)
            else:
                m.stop()


# --- names, through `resolver` ----------------------------------------------------------------

needs_dnsmasq = pytest.mark.skipif(not os.path.exists("/usr/sbin/dnsmasq"),
                                   reason="dnsmasq (dnsmasq-base) is not installed")


@needs_dnsmasq
def test_a_host_name_is_resolved_by_the_resolver(pools, pair, tmp_path):
    from test_proxy_resolver import Dnsmasq
    port = free_port()
    pools(f"127.0.0.1:{port}")
    d = Dnsmasq(tmp_path / "dns", {"php.test": "127.0.0.1"})
    try:
        servers = pair(f"resolver 127.0.0.1:{d.port};\nset $up php.test:{port};\n" + php())
        assert both(servers, "/pool.php") == [(200, b"a")] * 2
        assert both(servers, "/pool.php") == [(200, b"a")] * 2  # (the answer kept)
    finally:
        d.stop()


@needs_dnsmasq
def test_a_name_that_does_not_exist_is_502_as_nginx_logs_it(pools, pair, tmp_path):
    from test_proxy_resolver import Dnsmasq
    pools(None)
    d = Dnsmasq(tmp_path / "dns", {"php.test": "127.0.0.1"})
    try:
        servers = pair(f"resolver 127.0.0.1:{d.port};\nset $up nosuch.test:9000;\n" + php())
        assert [body(s, "/pool.php")[0] for s in servers] == [502, 502]
        for log in logs(*servers):
            assert "nosuch.test could not be resolved (3: Host not found)" in log, log
    finally:
        d.stop()


def test_a_resolver_that_does_not_answer_is_502_after_resolver_timeout(pools, pair):
    pools(None)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as silent:
        silent.bind(("127.0.0.1", 0))
        dns = silent.getsockname()[1]
        servers = pair(f"resolver 127.0.0.1:{dns};\nresolver_timeout 1s;\n"
                       "set $up php.test:9000;\n" + php())
        for s in servers:
            start = time.monotonic()
            assert body(s, "/pool.php")[0] == 502
            assert time.monotonic() - start >= 0.9
        for log in logs(*servers):
            assert "php.test could not be resolved (110: Operation timed out)" in log, log


def test_a_client_that_leaves_while_its_name_is_asked_for_leaves_no_wait_behind(pools, tmp_path):
    """The client closes while the resolver has not answered: its wait is cancelled, the
    descriptors it held closed (counted in /proc), and the server answers the next
    request."""
    a, = pools(None)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as silent:
        silent.bind(("127.0.0.1", 0))
        silent.settimeout(scaled(5))
        root = docroot(tmp_path)
        lf = lfhttpd(tmp_path / "lf", root,
                     f"resolver 127.0.0.1:{silent.getsockname()[1]};\nresolver_timeout 30s;\n"
                     f"location = /gone.php {{ include fastcgi.conf; set $up php.test:9000;"
                     f" fastcgi_pass $up; }}\n"
                     f"location = /pool.php {{ include fastcgi.conf; set $up unix:{a.sock};"
                     f" fastcgi_pass $up; }}\n")
        fds = f"/proc/{lf.proc.pid}/fd"

        def leave():
            c = socket.create_connection((lf.host, lf.port))
            c.sendall(b"GET /gone.php HTTP/1.1\r\nHost: t\r\n\r\n")
            silent.recv(512)  # (asked: the request waits for the name)
            c.close()
            time.sleep(scaled(0.3))

        try:
            leave()  # (the resolver's own socket is made at its first question)
            before = len(os.listdir(fds))
            for _ in range(3):
                leave()
            assert len(os.listdir(fds)) == before
            assert body(lf, "/pool.php") == (200, b"a")
        finally:
            check_clean_exit(lf)
