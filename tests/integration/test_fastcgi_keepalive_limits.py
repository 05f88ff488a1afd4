"""A kept FastCGI connection honours its upstream block's keepalive_requests and
keepalive_time, as nginx's (ngx_http_upstream_keepalive_module): the connection that
carried its keepalive_requests-th request is closed rather than kept, and one made longer
ago than keepalive_time is closed after the request it is carrying.

The application listens on a TCP port of its own, so that the connections made to it can be
counted in the kernel's table (/proc/net/tcp: open ones and those closed a moment ago, in
TIME_WAIT), each by its ephemeral port; nginx runs the same upstream block against a pool
of its own, and both make as many connections for the same requests."""
import os
import time

import pytest

from conftest import Nginx, check_clean_exit, free_port, scaled
from fastcgi_harness import Fpm, lfhttpd, php_root, with_conf_files
from test_fastcgi import request


def connections_to(port):
    """The connections made to 127.0.0.1:port that the kernel still lists (open, closing,
    or in TIME_WAIT), each counted once by its other end's port."""
    ends = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                lines = f.readlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            fields = line.split()
            local, remote, state = fields[1], fields[2], fields[3]
            lport = int(local.rsplit(":", 1)[1], 16)
            rport = int(remote.rsplit(":", 1)[1], 16)
            if lport == port and state != "0A":  # (0A: the listener itself)
                ends.add(rport)
            elif rport == port:
                ends.add(lport)
    return len(ends)


def pool(tmp_path, name):
    port = free_port()
    return Fpm(tmp_path / name, listen=f"127.0.0.1:{port}"), port


def hello_root(tmp_path):
    root = php_root(tmp_path)
    with open(os.path.join(root, "hello.php"), "w") as f:
        f.write("<?php echo 'hello';\n")
    return root


LOCATION = """
    location ~ \\.php$ { fastcgi_pass php; fastcgi_keep_conn on; include fastcgi.conf; }
"""


def start_both(tmp_path, root, keepalive_lines, first="", backup=""):
    """lfhttpd and nginx, each on a pool of its own with the same upstream block (`first`:
    server lines before the pool's; `backup`: " backup" on the pool's): [(server, pool's
    port, pool)]."""
    servers = []
    try:
        fpm, port = pool(tmp_path, "fpm-lf")
        servers.append([None, port, fpm])
        servers[-1][0] = lfhttpd(tmp_path / "lf", root, LOCATION,
                                 top=f"upstream php {{ {first} server 127.0.0.1:{port}"
                                     f"{backup}; "
                                     f"keepalive 2; "
                                     f"{keepalive_lines} }}\n")
        fpm, port = pool(tmp_path, "fpm-ng")
        servers.append([None, port, fpm])
        with_conf_files(tmp_path / "ng")
        servers[-1][0] = Nginx(tmp_path / "ng", root, f"""
    upstream php {{ {first} server 127.0.0.1:{port}{backup}; keepalive 2; {keepalive_lines} }}
    server {{
        listen 127.0.0.1:{{port0}};
        root {root};
{LOCATION}
    }}
""", http=True)
        return servers
    except BaseException:
        stop_all(servers)
        raise


def stop_all(servers):
    for server, _, fpm in servers:
        if server is not None:
            if hasattr(server, "error_log"):
                check_clean_exit(server)
            else:
                server.stop()
        fpm.stop()


def hello(server):
    assert request(server, "GET", "/hello.php")[::2] == (200, b"hello")
    # (the connection is put back just after the answer went: the next request finds it)
    time.sleep(scaled(0.2))


def connections_made(servers, requests):
    """For each of servers (lfhttpd's, nginx's), the connections its application was sent
    while requests(server) ran (the pool's start was checked by one before)."""
    made = []
    for server, port, _ in servers:
        before = connections_to(port)
        requests(server)
        made.append(connections_to(port) - before)
    return made


def asking(n):
    """n requests, one after the other."""
    def ask(server):
        for _ in range(n):
            hello(server)
    return ask


def asking_across_keepalive_time(server):
    """Four requests, with keepalive_time 1s: the second is carried by the first connection,
    past its time, which is closed then; the third and fourth go on a second one."""
    hello(server)
    time.sleep(1.5)
    hello(server)
    hello(server)
    hello(server)

def test_a_kept_connection_carries_keepalive_requests_requests_then_closes_as_nginx(
        tmp_path):
    root = hello_root(tmp_path)
    servers = start_both(tmp_path, root, "keepalive_requests 2;")
    try:
        made = connections_made(servers, asking(6))
        # each connection carries two requests: three for six, lfhttpd's and nginx's
        assert made == [3, 3]
    finally:
        stop_all(servers)


def test_a_kept_connection_older_than_keepalive_time_closes_after_its_request_as_nginx(
        tmp_path):
    root = hello_root(tmp_path)
    servers = start_both(tmp_path, root, "keepalive_time 1s;")
    try:
        made = connections_made(servers, asking_across_keepalive_time)
        assert made == [2, 2]
    finally:
        stop_all(servers)


def test_keepalive_requests_1_keeps_no_connection_as_nginx(tmp_path):
    root = hello_root(tmp_path)
    servers = start_both(tmp_path, root, "keepalive_requests 1;")
    try:
        made = connections_made(servers, asking(3))
        assert made == [3, 3]
    finally:
        stop_all(servers)


@pytest.mark.parametrize("lines", ["", "keepalive_requests 1000; keepalive_time 1h;"])
def test_a_kept_connection_within_its_limits_carries_every_request(tmp_path, lines):
    root = hello_root(tmp_path)
    servers = start_both(tmp_path, root, lines)
    try:
        made = connections_made(servers, asking(5))
        assert made == [1, 1]
    finally:
        stop_all(servers)


def test_a_kept_connection_taken_after_a_failed_try_keeps_its_count_as_nginx(tmp_path):
    # A server nothing listens on, never taken out (max_fails=0), comes first every other
    # request: that request fails there at once and goes to the pool's server, whose kept
    # connection it takes then; its count of requests goes with it.
    root = hello_root(tmp_path)
    dead = free_port()
    servers = start_both(tmp_path, root, "keepalive_requests 2;",
                         first=f"server 127.0.0.1:{dead} max_fails=0;")
    try:
        made = connections_made(servers, asking(6))
        assert made == [3, 3]
    finally:
        stop_all(servers)


def test_a_kept_connection_taken_after_a_failed_try_keeps_its_age_as_nginx(tmp_path):
    # The pool's server is the backup of one nothing listens on (never taken out): every
    # request fails there first, then takes the backup's kept connection, with its age.
    root = hello_root(tmp_path)
    dead = free_port()
    servers = start_both(tmp_path, root, "keepalive_time 1s;",
                         first=f"server 127.0.0.1:{dead} max_fails=0;", backup=" backup")
    try:
        made = connections_made(servers, asking_across_keepalive_time)
        assert made == [2, 2]
    finally:
        stop_all(servers)


def test_a_connection_let_go_before_a_slow_client_is_served_keeps_its_count(tmp_path):
    # fastcgi_buffering on: the answer for a client that does not read is read whole into a
    # temporary file, and the application's connection is put back then, while the client
    # waits; it still carries its count of requests, and its age
    from test_fastcgi_buffering import BIG_MIB, php_big, read_answer, read_whole_into_file
    from test_proxy_buffering import slow_client
    root = hello_root(tmp_path)
    fpm, port = pool(tmp_path, "fpm")
    temp = tmp_path / "temp"
    temp.mkdir()
    s = None
    try:
        s = lfhttpd(tmp_path / "lf", root, f"""
    location ~ \\.php$ {{ fastcgi_pass php; fastcgi_keep_conn on; fastcgi_buffering on;
                         fastcgi_temp_path {temp}; include fastcgi.conf; }}
""", top=f"upstream php {{ server 127.0.0.1:{port}; keepalive 2; keepalive_requests 3; }}\n")
        before = connections_to(port)
        made = []
        for step in ("hello", "big", "hello", "hello", "hello", "hello"):
            if step == "hello":
                hello(s)
            else:
                c, got = slow_client(s, f"/big.php?mib={BIG_MIB}")
                try:
                    assert read_whole_into_file(s.proc.pid, temp)
                    _, body = read_answer(c, got)
                finally:
                    c.close()
                assert body == php_big(BIG_MIB)
                time.sleep(scaled(0.2))
            made.append(connections_to(port) - before)
        # the first connection carries hello, big.php and hello, the second the rest
        assert made == [1, 1, 1, 2, 2, 2]
    finally:
        if s:
            check_clean_exit(s)
        fpm.stop()
