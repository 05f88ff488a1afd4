"""Kept FastCGI connections and the application's workers: PHP-FPM gives a kept connection
a worker of its own until the web server closes it, so a connection idle past its block's
keepalive_timeout is closed (nginx's upstream keepalive timer), and the worker serves
others. A pool of one worker makes it visible: a second server's request is answered only
once the first server lets go of its kept connection.

A request that takes a kept connection takes it where it is registered: its socket stays in
the handle set, and waiting on it again is a reactivation, no epoll_ctl (the kernel's list of
the sets' registrations, in /proc, shows it)."""
import http.client
import json
import os
import re
import time

import pytest

from conftest import check_clean_exit, scaled
from fastcgi_harness import Fpm, lfhttpd, php_root
from test_fastcgi import request


def servers(tmp_path, fpm, keep_timeout):
    root = php_root(tmp_path)
    with open(os.path.join(root, "hello.php"), "w") as f:
        f.write("<?php echo 'hello';\n")
    keeper = lfhttpd(tmp_path / "keeper", root, """
    location ~ \\.php$ { fastcgi_pass php; fastcgi_keep_conn on; include fastcgi.conf; }
""", top=f"upstream php {{ server unix:{fpm.sock}; keepalive 2; "
         f"keepalive_timeout {keep_timeout}; }}\n")
    other = lfhttpd(tmp_path / "other", root, f"""
    location ~ \\.php$ {{ fastcgi_pass unix:{fpm.sock}; fastcgi_read_timeout 15s;
                         include fastcgi.conf; }}
""")
    return keeper, other


def test_kept_connection_idle_past_keepalive_timeout_frees_the_applications_worker(
        tmp_path):
    fpm = Fpm(tmp_path / "fpm", children=1)
    keeper = other = None
    try:
        keeper, other = servers(tmp_path, fpm, "1s")
        assert request(keeper, "GET", "/hello.php")[::2] == (200, b"hello")
        # The one worker is the kept connection's until keeper closes it, a second or so
        # later; without that the request waits 15 s for nothing and is 504.
        assert request(other, "GET", "/hello.php", timeout=30)[::2] == (200, b"hello")
    finally:
        for s in (keeper, other):
            if s:
                check_clean_exit(s)
        fpm.stop()


def registrations(server):
    """Every handle-set registration of the server's sockets, as the kernel lists them
    (/proc/PID/fdinfo of each epoll descriptor): {(set, fd): data}. The data names the
    handle and counts its registrations, so a socket taken out of a set and put back, or
    put in for another handle, has other data; a re-arm of the same handle keeps it."""
    pid = server.proc.pid
    regs = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") != "anon_inode:[eventpoll]":
                continue
            with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                info = f.read()
        except OSError:
            continue
        for m in re.finditer(r"tfd:\s*(\d+)\s+events:\s*\S+\s+data:\s*(\S+)", info):
            target = m.group(1)
            try:
                if not os.readlink(f"/proc/{pid}/fd/{target}").startswith("socket:"):
                    continue
            except OSError:
                continue
            regs[(int(fd), int(target))] = m.group(2)
    return regs


def settled_registrations(server):
    """registrations() once two readings a little apart agree (the answer can reach the
    client just before its connection to the application is put back)."""
    last = registrations(server)
    deadline = time.monotonic() + scaled(5)
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = registrations(server)
        if now == last:
            return now
        last = now
    return last


def test_requests_through_a_kept_connection_leave_its_socket_registered(tmp_path):
    fpm = Fpm(tmp_path / "fpm")
    keeper = None
    try:
        root = php_root(tmp_path)
        with open(os.path.join(root, "hello.php"), "w") as f:
            f.write("<?php echo 'hello';\n")
        keeper = lfhttpd(tmp_path / "keeper", root, """
    location ~ \\.php$ { fastcgi_pass php; fastcgi_keep_conn on; include fastcgi.conf; }
""", top=f"upstream php {{ server unix:{fpm.sock}; keepalive 2; }}\n")
        client = http.client.HTTPConnection(keeper.host, keeper.port, timeout=scaled(20))

        def get():
            client.request("GET", "/hello.php")
            r = client.getresponse()
            assert (r.status, r.read()) == (200, b"hello")

        get()  # the application's connection is made, registered, then kept
        before = settled_registrations(keeper)
        assert len(before) >= 3  # (listeners, the client's connection, the kept one)
        for _ in range(20):
            get()
            # one client connection, one kept connection: every socket stays registered
            # as the same handle, none taken out and put back
            assert settled_registrations(keeper) == before
        client.close()
    finally:
        if keeper:
            check_clean_exit(keeper)
        fpm.stop()


def test_a_kept_connection_carries_a_request_larger_than_its_buffer_whole(tmp_path):
    # The state that kept the connection becomes the next request's, with the buffer it
    # kept (a small request's); a 200 KiB body needs a larger one, and the one after a
    # small one again.
    fpm = Fpm(tmp_path / "fpm")
    keeper = None
    try:
        root = php_root(tmp_path)
        keeper = lfhttpd(tmp_path / "keeper", root, """
    client_max_body_size 1m;
    location ~ \\.php$ { fastcgi_pass php; fastcgi_keep_conn on; include fastcgi.conf; }
""", top=f"upstream php {{ server unix:{fpm.sock}; keepalive 2; }}\n")
        client = http.client.HTTPConnection(keeper.host, keeper.port, timeout=scaled(20))
        big = b"".join(b"%07d\n" % i for i in range(25600))  # 200 KiB, each line its own
        for body in (b"small", big, b"small again", big):
            client.request("POST", "/env.php", body=body,
                           headers={"Content-Type": "application/octet-stream"})
            r = client.getresponse()
            assert r.status == 200
            assert json.loads(r.read())["body"] == body.decode()
        client.close()
    finally:
        if keeper:
            check_clean_exit(keeper)
        fpm.stop()
