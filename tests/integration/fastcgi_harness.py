"""What the FastCGI tests share: a real PHP-FPM (php-fpm8.2) started in the foreground on
a pool of its own (2 static children, a unix socket in the test's directory), stopped by
PID; the test scripts of tests/integration/php copied into a document root; lfhttpd and
nginx run on the same configuration text, with the repository's conf/fastcgi.conf and
conf/fastcgi_params beside it."""
import os
import shutil
import signal
import socket
import subprocess

import pytest

from conftest import Nginx, Server, scaled, wait_until

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FPM = shutil.which("php-fpm8.2") or "/usr/sbin/php-fpm8.2"

FPM_CONF = """\
[global]
pid = {dir}/fpm.pid
error_log = {dir}/fpm.log
daemonize = no

[test]
{user}listen = {sock}
pm = static
pm.max_children = {children}
catch_workers_output = no
php_admin_value[log_errors] = On
php_admin_value[display_errors] = Off
php_admin_value[upload_max_filesize] = 16M
php_admin_value[post_max_size] = 16M
{extra}"""


class Fpm:
    """php-fpm8.2 -F on a pool of its own: .sock, .log(); stopped by PID. `extra`: more
    lines for the pool (an application's php_admin_value settings)."""

    def __init__(self, dirpath, listen=None, children=2, extra=""):
        self.dir = str(dirpath)
        os.makedirs(self.dir, exist_ok=True)
        self.sock = os.path.join(self.dir, "fpm.sock")
        self.listen = listen or self.sock
        user = "user = root\ngroup = root\n" if os.geteuid() == 0 else ""
        conf = os.path.join(self.dir, "fpm.conf")
        with open(conf, "w") as f:
            f.write(FPM_CONF.format(dir=self.dir, sock=self.listen, user=user,
                                    children=children, extra=extra))
        argv = [FPM, "-F", "-y", conf, "-p", self.dir] + (["-R"] if os.geteuid() == 0 else [])
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True)
        if not wait_until(lambda: self.listening() or self.proc.poll() is not None,
                          scaled(15)) or self.proc.poll() is not None:
            self.stop()
            raise RuntimeError("php-fpm did not start: " + self.log())

    def listening(self):
        if self.listen == self.sock:
            return os.path.exists(self.sock)
        host, port = self.listen.rsplit(":", 1)
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=1).close()
            return True
        except OSError:
            return False

    def log(self):
        try:
            with open(os.path.join(self.dir, "fpm.log"), errors="backslashreplace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)  # (fpm's graceful stop)
            try:
                self.proc.wait(timeout=scaled(10))
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def php_root(dirpath):
    """A document root with the test scripts, and a directory for uploads."""
    root = os.path.join(str(dirpath), "www")
    shutil.copytree(os.path.join(HERE, "php"), root)
    return root


def with_conf_files(dirpath):
    """fastcgi.conf and fastcgi_params beside a configuration in dirpath."""
    os.makedirs(str(dirpath), exist_ok=True)
    for name in ("fastcgi.conf", "fastcgi_params"):
        shutil.copy(os.path.join(ROOT, "conf", name), os.path.join(str(dirpath), name))


def lfhttpd(dirpath, root, text, top=""):
    """lfhttpd with `text` inside its one server block (root `root`), `top` before it."""
    with_conf_files(dirpath)
    conf = (top + "threads 2;\nerror_log stderr debug;\nshutdown_timeout 5s;\n"
            f'access_log "{dirpath}/access.log";\n'
            f"server {{\n    listen 127.0.0.1:0;\n    root {root};\n{text}\n}}\n")
    return Server(dirpath, None, conf=conf)


def nginx(dirpath, root, text):
    """nginx with the same server block."""
    with_conf_files(dirpath)
    return Nginx(dirpath, root, text)


@pytest.fixture
def fpm(tmp_path):
    f = Fpm(tmp_path / "fpm")
    yield f
    f.stop()
