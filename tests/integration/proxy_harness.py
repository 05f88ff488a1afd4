"""What the reverse-proxy tests share: the test upstream (upstream_app.py in its own
process) and a proxy started on a configuration written once in nginx's syntax, run by
lfhttpd or, with PROXY_UNDER_TEST=nginx, by nginx (to check the tests themselves while
lfhttpd cannot proxy, and where the two must agree).

A configuration text names its ports with placeholders: {port0}, {port1}... are the
proxy's own listen ports (picked free here), {up0}, {up1}... the upstream app's, {dead0},
{dead1}... ports nothing listens on, and ROOT the test's document root.

Both are given, in every location with proxy_pass, the lines of a typical site that
keeps upstream connections and passes WebSocket upgrades (HTTP/1.1 to the upstream, a
Connection field only when the client asks for an upgrade, its Upgrade then), and nginx
what it needs to behave as lfhttpd's defaults (X-Forwarded-* and X-Real-IP, streaming
without a temporary file), unless the location sets the same itself. A test of the
defaults themselves (HTTP/1.0, `Connection: close`, no tunnel) sets
`proxy_http_version 1.0;` or those fields in its location, or is started with
site_lines=False: then both run the text as it is.
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

from conftest import (BY_DESIGN, Nginx, Server, check_clean_exit, free_port, scaled,
                      wait_until)

HERE = os.path.dirname(os.path.abspath(__file__))
UNDER_TEST = os.environ.get("PROXY_UNDER_TEST", "lfhttpd")
UNDER_NGINX = UNDER_TEST == "nginx"


def lfhttpd_only(why):
    """Mark a test of a behaviour the specification gives lfhttpd and nginx lacks."""
    return pytest.mark.skipif(UNDER_NGINX, reason=f"{BY_DESIGN} nginx differs: {why}")


class Upstream:
    """upstream_app.py listening on `count` ports (and on a Unix socket at `unix`), their
    connections' receive buffers `rcvbuf` bytes when given; stopped by PID."""

    def __init__(self, count=1, unix=None, rcvbuf=None):
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "upstream_app.py"),
                                      "--ports", str(count)]
                                     + (["--unix", str(unix)] if unix else [])
                                     + (["--rcvbuf", str(rcvbuf)] if rcvbuf else []),
                                     stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("ports "):
            self.stop()
            raise RuntimeError("upstream_app did not start")
        words = line.split()
        self.ports = [int(p) for p in words[1:-2]]
        self.control_port = int(words[-1])

    def control(self, path):
        with socket.create_connection(("127.0.0.1", self.control_port), timeout=scaled(10)) as s:
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: control\r\nConnection: close\r\n\r\n"
                      .encode())
            data = b""
            while True:
                chunk = s.recv(1 << 20)
                if not chunk:
                    break
                data += chunk
        return json.loads(data.partition(b"\r\n\r\n")[2] or b"{}")

    def log(self):
        return self.control("/__log")

    def requests(self):
        return self.log()["requests"]

    def conns(self):
        return self.log()["conns"]

    def clear(self):
        self.control("/__clear")

    def down(self, port):
        self.control(f"/__down?port={port}")

    def up(self, port):
        self.control(f"/__up?port={port}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()


NGINX_HTTP = r"""
    map "$http_connection|$http_upgrade" $proxy_connection {
        "~*upgrade[^|]*\|."  upgrade;
        default "";
    }
    map "$http_connection|$http_upgrade" $proxy_upgrade {
        "~*upgrade[^|]*\|(?<u>.+)$"  $u;
        default "";
    }
"""

SITE_LOCATION = {
    "Connection": "$proxy_connection",
    "Upgrade": "$proxy_upgrade",
}

NGINX_LOCATION = {
    **SITE_LOCATION,
    "X-Forwarded-For": "$proxy_add_x_forwarded_for",
    "X-Real-IP": "$remote_addr",
    "X-Forwarded-Proto": "$scheme",
    "X-Forwarded-Host": "$http_host",
}


def for_nginx(text, fields=None):
    """text with the extra lines after each proxy_pass (see the module's docstring):
    nginx's, or with fields=SITE_LOCATION the site's that both are given."""
    fields = NGINX_LOCATION if fields is None else fields
    out, pos = [], 0
    for m in re.finditer(r"proxy_pass\s+[^;]+;", text):
        start = text.rfind("{", 0, m.start())
        end = text.find("}", m.end())
        block = text[start:end]
        lines = ([] if "proxy_http_version" in block else ["proxy_http_version 1.1;"])
        lines += ["proxy_buffering off;"] if fields is NGINX_LOCATION else []
        # (a text with proxy_set_header lines of its own at the top level gets no
        # location's: they would stop every location inheriting those)
        top_level = fields is SITE_LOCATION and re.search(r"^proxy_set_header", text, re.M)
        lines += [f'proxy_set_header {name} "{value}";' for name, value in fields.items()
                  if not top_level
                  and not re.search(r"proxy_set_header\s+" + name + r"\s", block, re.I)]
        out.append(text[pos:m.end()] + "\n" + "".join(f"        {x}\n" for x in lines))
        pos = m.end()
    return "".join(out) + text[pos:]


class BigNginx(Nginx):
    """conftest's nginx with room for a thousand proxied connections; with master=True
    a master process and a worker, for a graceful reload (a single nginx process drops
    connections when it reloads)."""

    def __init__(self, *args, master=False, **kw):
        self.master = master
        super().__init__(*args, **kw)

    def config(self, http_text):
        text = super().config(http_text).replace("worker_connections 64;",
                                                 "worker_connections 8192;")
        if self.master:
            text = text.replace("master_process off;", "master_process on;\nworker_processes 1;")
        return text


LFHTTPD_TOP = """\
threads {threads};
error_log stderr debug;
access_log "{access}";
shutdown_timeout 5s;
root "{root}";
"""


class Proxy:
    """The proxy under test on `text`: .host, .port (its first listen port), .ports, .pid,
    reload(text), peak_rss_kib(), log(); stopped by PID."""

    def __init__(self, dirpath, text, upstream, docroot, threads=2, reloads=False,
                 kind=UNDER_TEST, site_lines=True):
        self.kind = kind
        self.site_lines = site_lines
        self.dir = str(dirpath)
        self.upstream, self.docroot, self.threads = upstream, str(docroot), threads
        self.dead = [free_port() for _ in range(4)]
        self.host = "127.0.0.1"
        if kind == "nginx":
            self.impl = BigNginx(dirpath, None, self.nginx_text(text),
                                 http=True, master=reloads)
            self.ports = self.impl.ports
        else:
            self.impl = self.start_lfhttpd(text)
        self.port = self.ports[0]
        self.pid = self.impl.proc.pid

    def fill(self, text):
        for i, p in enumerate(self.upstream.ports if self.upstream else []):
            text = text.replace("{up%d}" % i, str(p))
        for i, p in enumerate(self.dead):
            text = text.replace("{dead%d}" % i, str(p))
        return text.replace("ROOT", self.docroot)

    def nginx_text(self, text):
        return NGINX_HTTP + self.fill(for_nginx(text) if self.site_lines else text)

    def lfhttpd_text(self, text):
        top = LFHTTPD_TOP.format(threads=self.threads, root=self.docroot,
                                 access=os.path.join(self.dir, "access.log"))
        text = NGINX_HTTP + self.fill(for_nginx(text, SITE_LOCATION) if self.site_lines
                                      else text)
        for i, p in enumerate(self.ports):
            text = text.replace("{port%d}" % i, str(p))
        return top + text

    def start_lfhttpd(self, text):
        count = max((int(n) + 1 for n in re.findall(r"\{port(\d+)\}", text)), default=1)
        for attempt in range(3):  # a port picked may be taken before lfhttpd binds it
            self.ports = [free_port() for _ in range(count)]
            try:
                return Server(os.path.join(self.dir, f"try{attempt}"), None,
                              conf=self.lfhttpd_text(text))
            except RuntimeError as e:
                if "in use" not in str(e) or attempt == 2:
                    raise

    def reload(self, text):
        """Replace the configuration and SIGHUP; returns once the proxy said it reloaded."""
        if self.kind == "nginx":
            conf = os.path.join(self.impl.dir, "nginx.conf")
            body = self.nginx_text(text)
            for i, p in enumerate(self.ports):
                body = body.replace("{port%d}" % i, str(p))
            with open(conf, "w") as f:
                f.write(self.impl.config(body))
            before = len(self.impl.log())
            self.impl.proc.send_signal(signal.SIGHUP)
            assert wait_until(lambda: "reconfiguring" in self.impl.log()[before:],
                              scaled(10)), self.impl.log()[before:]
            time.sleep(0.2)  # nginx logs before it swaps the cycle
            return
        with open(self.impl.conf_path, "w") as f:
            f.write(self.lfhttpd_text(text))
        before = len(self.impl.error_log())
        self.impl.proc.send_signal(signal.SIGHUP)
        assert wait_until(lambda: "configuration reloaded" in self.impl.error_log()[before:],
                          scaled(10)), self.impl.error_log()[before:]

    def peak_rss_kib(self):
        with open(f"/proc/{self.pid}/status") as f:
            return int(re.search(r"VmHWM:\s+(\d+)", f.read()).group(1))

    def rss_kib(self):
        with open(f"/proc/{self.pid}/status") as f:
            return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))

    def log(self):
        return self.impl.log() if self.kind == "nginx" else self.impl.error_log()

    def stop(self):
        if self.kind == "nginx":
            self.impl.stop()
        else:
            check_clean_exit(self.impl)


@pytest.fixture
def upstream():
    """upstream(count=1, unix=None, rcvbuf=None) -> a running Upstream; each is stopped
    when the test ends."""
    started = []

    def start(count=1, unix=None, rcvbuf=None):
        u = Upstream(count, unix, rcvbuf)
        started.append(u)
        return u

    yield start
    for u in started:
        u.stop()


@pytest.fixture
def proxy(tmp_path, docroot):
    """proxy(text, upstream=None, threads=2, reloads=False) -> a running Proxy on text (see
    the module's docstring; `reloads`: the test reloads it, so nginx runs with a master
    process); each is stopped when the test ends."""
    started = []

    def start(text, upstream=None, threads=2, reloads=False):
        p = Proxy(tmp_path / f"proxy{len(started)}", text, upstream, docroot, threads, reloads)
        started.append(p)
        return p

    yield start
    for p in started:
        p.stop()
