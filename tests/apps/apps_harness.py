"""What the application tests share: a MariaDB server of the test's own (its own datadir,
a unix socket in the test's directory, no TCP), a browser of sorts (urllib with a cookie
jar, redirects followed or not as the test asks, multipart forms), and the servers of
tests/integration (lfhttpd, nginx, a PHP-FPM pool) started on a site's configuration."""
import http.cookiejar
import os
import secrets
import signal
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "integration"))

from conftest import scaled, wait_until  # noqa: E402

MARIADBD = "/usr/sbin/mariadbd"


def _tool(name):
    for d in ("/usr/bin", "/usr/sbin"):
        if os.path.exists(os.path.join(d, name)):
            return os.path.join(d, name)
    return name


class MariaDB:
    """mariadbd --no-defaults on a datadir made by mariadb-install-db in `dirpath`,
    listening on `dirpath`/db.sock only; .sock, .sql(), .log(); stopped by PID."""

    def __init__(self, dirpath):
        self.dir = str(dirpath)
        os.makedirs(self.dir, exist_ok=True)
        self.datadir = os.path.join(self.dir, "data")
        self.sock = os.path.join(self.dir, "db.sock")
        self.err = os.path.join(self.dir, "db.err")
        user = ["--user=root"] if os.geteuid() == 0 else []
        with open(os.path.join(self.dir, "install.log"), "w") as log:
            subprocess.run([_tool("mariadb-install-db"), "--no-defaults",
                            "--datadir=" + self.datadir, "--skip-test-db",
                            "--auth-root-authentication-method=normal"] + user,
                           stdout=log, stderr=subprocess.STDOUT, check=True,
                           timeout=scaled(120))
        self.proc = subprocess.Popen(
            [MARIADBD, "--no-defaults", "--datadir=" + self.datadir, "--socket=" + self.sock,
             "--skip-networking", "--pid-file=" + os.path.join(self.dir, "db.pid"),
             "--log-error=" + self.err, "--innodb-buffer-pool-size=32M"] + user,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        if not wait_until(lambda: self.proc.poll() is not None or self.answers(), scaled(60)) \
                or self.proc.poll() is not None:
            self.stop()
            raise RuntimeError("mariadbd did not start: " + self.log())

    def answers(self):
        return os.path.exists(self.sock) and subprocess.run(
            [_tool("mariadb"), "--no-defaults", "-S", self.sock, "-u", "root", "-e", "SELECT 1"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0

    def sql(self, text):
        return subprocess.run(
            [_tool("mariadb"), "--no-defaults", "-S", self.sock, "-u", "root", "-N", "-B",
             "-e", text], capture_output=True, text=True, check=True).stdout

    def database(self, name):
        """A new database and a user of its own for it: (user, password)."""
        password = secrets.token_hex(12)
        self.sql(f"CREATE DATABASE {name} CHARACTER SET utf8mb4; "
                 f"CREATE USER '{name}'@'localhost' IDENTIFIED BY '{password}'; "
                 f"GRANT ALL ON {name}.* TO '{name}'@'localhost';")
        return name, password

    def log(self):
        try:
            with open(self.err, errors="backslashreplace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # (mariadbd's clean shutdown)
            try:
                self.proc.wait(timeout=scaled(60))
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Response:
    def __init__(self, status, headers, body, url):
        self.status, self.headers, self.body, self.url = status, headers, body, url

    def header(self, name):
        return self.headers.get(name)

    @property
    def text(self):
        return self.body.decode("utf-8", "replace")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


class Browser:
    """A client that keeps cookies (http.cookiejar) across requests to one site."""

    def __init__(self, base):
        self.base = base
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(self.jar), _NoRedirect())

    def request(self, method, path, data=None, headers=None, follow=True):
        """One request (urlencoded when data is a dict); redirects followed with GET when
        `follow`. Every answer is returned, 4xx and 5xx too."""
        url = path if path.startswith("http") else self.base + path
        hdrs = dict(headers or {})
        if isinstance(data, dict):
            data = urllib.parse.urlencode(data).encode()
            hdrs.setdefault("Content-Type", "application/x-www-form-urlencoded")
        for _ in range(10):
            req = urllib.request.Request(url, data=data, headers=hdrs, method=method)
            try:
                with self.opener.open(req, timeout=scaled(60)) as r:
                    resp = Response(r.status, r.headers, r.read(), url)
            except urllib.error.HTTPError as e:
                resp = Response(e.code, e.headers, e.read(), url)
            if not follow or resp.status not in (301, 302, 303, 307, 308):
                return resp
            url = urllib.parse.urljoin(url, resp.header("Location"))
            if resp.status in (301, 302, 303):
                method, data = "GET", None
                hdrs.pop("Content-Type", None)
        raise AssertionError("too many redirects, last to " + url)

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, data, **kw):
        return self.request("POST", path, data=data, **kw)

    def post_multipart(self, path, fields, files, **kw):
        """fields: {name: value}; files: {name: (filename, content type, bytes)}."""
        boundary = "----form" + secrets.token_hex(12)
        parts = []
        for name, value in fields.items():
            parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"'
                         f"\r\n\r\n{value}\r\n".encode())
        for name, (filename, ctype, content) in files.items():
            parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; '
                         f'filename="{filename}"\r\nContent-Type: {ctype}\r\n\r\n'.encode()
                         + content + b"\r\n")
        body = b"".join(parts) + f"--{boundary}--\r\n".encode()
        return self.request("POST", path, data=body, headers={
            "Content-Type": "multipart/form-data; boundary=" + boundary}, **kw)

