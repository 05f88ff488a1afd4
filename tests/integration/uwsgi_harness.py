"""What the uwsgi and SCGI tests share: a real uWSGI (Debian's uwsgi and its python3 plugin)
running tests/integration/wsgi/app.py in the foreground, no master, one worker, on a unix
socket in the test's directory, speaking uwsgi or SCGI; stopped by PID. lfhttpd and nginx
run on the same configuration text, with the repository's conf/uwsgi_params and
conf/scgi_params beside it."""
import os
import shutil
import signal
import subprocess

from conftest import Nginx, Server, scaled, wait_until

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
UWSGI = shutil.which("uwsgi") or "/usr/bin/uwsgi"


class Uwsgi:
    """uwsgi --plugin python3 on a socket of its own: .sock, .log(); stopped by PID.
    protocol: "uwsgi" or "scgi"."""

    def __init__(self, dirpath, protocol="uwsgi"):
        self.dir = str(dirpath)
        os.makedirs(self.dir, exist_ok=True)
        self.sock = os.path.join(self.dir, protocol + ".sock")
        self.log_path = os.path.join(self.dir, "uwsgi.log")
        argv = [UWSGI, "--plugin", "python3", f"--{protocol}-socket", self.sock,
                "--wsgi-file", os.path.join(HERE, "wsgi", "app.py"), "--need-app",
                "--die-on-term", "--buffer-size", "32768", "--logto", self.log_path]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True)
        if not wait_until(lambda: self.ready() or self.proc.poll() is not None,
                          scaled(15)) or self.proc.poll() is not None:
            self.stop()
            raise RuntimeError("uwsgi did not start: " + self.log())

    def ready(self):
        return os.path.exists(self.sock) and "ready in" in self.log()

    def log(self):
        try:
            with open(self.log_path, errors="backslashreplace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # (--die-on-term: exit)
            try:
                self.proc.wait(timeout=scaled(10))
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def with_conf_files(dirpath):
    """uwsgi_params and scgi_params beside a configuration in dirpath."""
    os.makedirs(str(dirpath), exist_ok=True)
    for name in ("uwsgi_params", "scgi_params"):
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
