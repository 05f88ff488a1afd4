"""Kept FastCGI connections and the application's workers: PHP-FPM gives a kept connection
a worker of its own until the web server closes it, so a connection idle past its block's
keepalive_timeout is closed (nginx's upstream keepalive timer), and the worker serves
others. A pool of one worker makes it visible: a second server's request is answered only
once the first server lets go of its kept connection."""
import os

from conftest import check_clean_exit
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
