"""nginx's configuration file as nginx lays it out: the main context, `events { }`,
`http { }`, `include` with globs, `types { }`, and nginx's own directives.

The stock file of Debian's nginx (/etc/nginx, from nginx-common) is copied, pointed at the
test's port, document root and files, and run by lfhttpd and by nginx: both must answer
alike. The rest are one behaviour each, on small files of the test's own.
"""
import os
import pwd
import re
import shutil
import signal
import subprocess
import urllib.error
import urllib.request

import pytest

from conftest import BIN, NGINX, free_port, scaled, wait_until

STOCK = "/etc/nginx"
WELCOME = "/usr/share/nginx/html/index.html"  # what nginx-common installs as the page


def check(conf):
    """lfhttpd -t -c conf: (exit status, stderr + stdout)."""
    p = subprocess.run([BIN, "-t", "-c", str(conf)], capture_output=True, text=True,
                       timeout=scaled(30))
    return p.returncode, p.stderr + p.stdout


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def get(port, path):
    """(status, body) of GET path, redirects not followed."""
    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args):
            return None
    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(f"http://127.0.0.1:{port}{path}", timeout=scaled(5)) as r:
            return r.status, r.read(), r.headers
    except urllib.error.HTTPError as e:
        return e.code, e.read(), e.headers


class Running:
    """A server process started on a file, stopped by PID."""

    def __init__(self, argv, port, cwd):
        self.port = port
        self.proc = subprocess.Popen(argv, cwd=str(cwd), stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, start_new_session=True)

    def wait_answering(self):
        def answers():
            if self.proc.poll() is not None:
                return True
            try:
                get(self.port, "/")
                return True
            except OSError:
                return False
        wait_until(answers, scaled(15))
        assert self.proc.poll() is None, self.proc.stderr.read().decode()
        return self

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=scaled(10))
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


@pytest.fixture
def running():
    started = []

    def start(argv, port, cwd):
        r = Running(argv, port, cwd)
        started.append(r)
        return r.wait_answering()

    yield start
    for r in started:
        r.stop()


def stock_copy(tmp_path, port):
    """/etc/nginx copied into the test's directory with only what must change rewritten:
    the listen port, the root, the pid and log files, the includes' directory, and the
    user (root runs as root, so that nginx's workers can read the test's directory)."""
    etc = tmp_path / "etc-nginx"
    shutil.copytree(STOCK, etc, symlinks=False)
    www = tmp_path / "www"
    (www / "sub").mkdir(parents=True)
    (www / "empty").mkdir()
    welcome = open(WELCOME).read() if os.path.exists(WELCOME) else "<h1>Welcome</h1>\n"
    (www / "index.nginx-debian.html").write_text(welcome)
    (www / "sub" / "index.html").write_text("sub index\n")
    logs = tmp_path / "logs"
    logs.mkdir()
    conf = etc / "nginx.conf"
    text = conf.read_text().replace(STOCK + "/", str(etc) + "/")
    text = text.replace("/run/nginx.pid", str(tmp_path / "nginx.pid"))
    text = text.replace("/var/log/nginx/", str(logs) + "/")
    if os.geteuid() == 0:
        text = re.sub(r"(?m)^user .*;", "user root;", text)
    conf.write_text(text)
    site = etc / "sites-available" / "default"
    site.write_text(re.sub(r"(?m)^(\s*listen .*?)\b80\b", r"\g<1>%d" % port,
                           site.read_text()).replace("/var/www/html", str(www)))
    (etc / "sites-enabled" / "default").unlink()
    (etc / "sites-enabled" / "default").symlink_to(site)
    return conf


@pytest.mark.skipif(not os.path.exists(STOCK + "/nginx.conf"), reason="no /etc/nginx")
def test_stock_debian_nginx_conf_passes_check():
    rc, out = check(STOCK + "/nginx.conf")
    assert rc == 0, out
    assert "configuration /etc/nginx/nginx.conf is valid" in out


@pytest.mark.skipif(not os.path.exists(STOCK + "/nginx.conf"), reason="no /etc/nginx")
def test_stock_debian_site_answers_as_nginx_does(tmp_path, running):
    if not NGINX:
        pytest.fail("nginx is not installed (make check-deps installs nginx-light)")
    answers = {}
    for name in ("lfhttpd", "nginx"):
        port = free_port()
        conf = stock_copy(tmp_path / name, port)
        argv = ([BIN, "-c", str(conf)] if name == "lfhttpd" else
                [NGINX, "-c", str(conf), "-g", "daemon off;"])
        server = running(argv, port, tmp_path / name)
        answers[name] = {p: get(port, p) for p in ("/", "/missing.html", "/sub", "/sub/",
                                                  "/empty/")}
        assert server.stop() == 0
    ours, theirs = answers["lfhttpd"], answers["nginx"]
    assert ours["/"][0] == 200 and ours["/"][1] == theirs["/"][1]
    assert ours["/"][2]["Content-Type"].startswith("text/html")
    for path in ours:
        assert ours[path][0] == theirs[path][0], path
    assert ours["/sub"][2]["Location"].endswith("/sub/")
    assert ours["/sub/"][1] == theirs["/sub/"][1] == b"sub index\n"


def test_stock_pid_file_is_written_at_start_and_removed_at_exit(tmp_path, running):
    port = free_port()
    pid = tmp_path / "run" / "lfhttpd.pid"
    pid.parent.mkdir()
    write(tmp_path / "www" / "index.html", "hi\n")
    conf = write(tmp_path / "n.conf", f"pid {pid};\nerror_log stderr;\nhttp {{\n"
                 f"  access_log off;\n  server {{ listen 127.0.0.1:{port}; "
                 f"root {tmp_path}/www; }}\n}}\n")
    server = running([BIN, "-c", str(conf)], port, tmp_path)
    assert pid.read_text().strip() == str(server.proc.pid)
    assert server.stop() == 0
    assert not pid.exists()


def test_include_glob_relative_to_main_file_directory_in_several_blocks(tmp_path, running):
    port = free_port()
    www = tmp_path / "www"
    write(www / "a.txt", "a\n")
    write(tmp_path / "etc" / "conf.d" / "10-server.conf",
          f"server {{\n  listen 127.0.0.1:{port};\n  root {www};\n"
          "  include snippets/*.conf;\n}\n")
    # snippets/ is beside the main file, not beside conf.d/10-server.conf, as nginx reads it
    write(tmp_path / "etc" / "snippets" / "loc.conf",
          "location = /inc { return 200 \"from an include\\n\"; }\n")
    write(tmp_path / "etc" / "snippets" / "hdr.conf", "add_header X-Inc yes;\n")
    write(tmp_path / "etc" / "types.conf", "text/x-custom txt;\n")
    conf = write(tmp_path / "etc" / "nginx.conf",
                 "error_log stderr;\nhttp {\n  access_log off;\n  types { include types.conf; }\n"
                 "  include conf.d/*.conf;\n  include does-not-match-*.conf;\n}\n")
    running([BIN, "-c", str(conf)], port, tmp_path)
    assert get(port, "/inc")[:2] == (200, b"from an include\n")
    status, _, headers = get(port, "/a.txt")
    assert status == 200 and headers["X-Inc"] == "yes"
    assert headers["Content-Type"].startswith("text/x-custom")


def test_include_absolute_path(tmp_path):
    write(tmp_path / "elsewhere" / "top.conf", "keepalive_timeout 7s;\n")
    conf = write(tmp_path / "etc" / "nginx.conf",
                 f"include {tmp_path}/elsewhere/top.conf;\nkeepalive_timeout 8s;\n")
    rc, out = check(conf)
    assert rc == 1
    # the duplicate names both places: the included file's line, then the main file's
    assert f'nginx.conf:2: "keepalive_timeout" directive is duplicate (first at ' \
           f'{tmp_path}/elsewhere/top.conf:1)' in out


def test_include_of_a_missing_file_is_an_error(tmp_path):
    conf = write(tmp_path / "nginx.conf", "include missing.conf;\n")
    rc, out = check(conf)
    assert rc == 1 and f"nginx.conf:1: include \"{tmp_path}/missing.conf\"" in out


def test_types_block_overrides_the_mime_map_and_default_type_applies(tmp_path, running):
    port = free_port()
    www = tmp_path / "www"
    write(www / "page.html", "<p>x</p>\n")
    write(www / "data.unknownext", "\x00\x01")
    conf = write(tmp_path / "nginx.conf",
                 "error_log stderr;\nhttp {\n  types { application/x-special html; }\n"
                 "  default_type application/x-fallback;\n  access_log off;\n  mime_magic off;\n"
                 f"  server {{ listen 127.0.0.1:{port}; root {www}; }}\n}}\n")
    running([BIN, "-c", str(conf)], port, tmp_path)
    assert get(port, "/page.html")[2]["Content-Type"] == "application/x-special"
    assert get(port, "/data.unknownext")[2]["Content-Type"] == "application/x-fallback"


def test_check_reports_every_error_with_its_file_and_line(tmp_path):
    write(tmp_path / "conf.d" / "site.conf",
          "server {\n  listen 127.0.0.1:1;\n  bogus_in_included on;\n"
          "  location / { also_bogus 1; }\n}\n")
    conf = write(tmp_path / "nginx.conf",
                 "worker_processes many;\nevents { worker_connections x; }\n"
                 "http {\n  unknown_at_http 1;\n  include conf.d/*.conf;\n  pid /tmp/x;\n}\n")
    rc, out = check(conf)
    assert rc == 1
    inc = f"{tmp_path}/conf.d/site.conf"
    for line in (f"{conf}:1: worker_processes:", f"{conf}:2: worker_connections:",
                 f'{conf}:4: unknown directive "unknown_at_http"',
                 f'{conf}:6: "pid" directive is not allowed in http',
                 f'{inc}:3: unknown directive "bogus_in_included"',
                 f'{inc}:4: unknown directive "also_bogus"'):
        assert line in out, out


@pytest.mark.parametrize("line,module", [
    ("auth_request /auth;", "ngx_http_auth_request_module"),
    ("proxy_cache_valid 200 1h;", "proxy cache"),
    ("fastcgi_cache WORDPRESS;", "FastCGI cache"),
    ("sub_filter_once off;", "ngx_http_sub_module"),
])
def test_a_directive_of_an_nginx_module_lfhttpd_lacks_is_named_with_its_module(tmp_path, line,
                                                                              module):
    conf = write(tmp_path / "nginx.conf",
                 f"http {{\n  server {{\n    location / {{ {line} }}\n  }}\n}}\n")
    rc, out = check(conf)
    name = line.split()[0]
    assert rc == 1
    assert f'{conf}:3: unknown directive "{name}" (' in out and module in out and \
        "which lfhttpd does not have" in out, out


def test_an_unknown_name_that_only_starts_like_an_nginx_directive_gets_no_module(tmp_path):
    conf = write(tmp_path / "nginx.conf",
                 "http {\n  server {\n    location / { mirrors on; }\n  }\n}\n")
    rc, out = check(conf)
    assert rc == 1 and f'{conf}:3: unknown directive "mirrors"\n' in out + "\n", out


def test_worker_processes_and_connections_map_to_threads_and_max_connections(tmp_path):
    conf = write(tmp_path / "nginx.conf",
                 "worker_processes 3;\nevents { worker_connections 100; multi_accept on; "
                 "use epoll; }\nhttp { root /; }\n")
    rc, out = check(conf)
    assert rc == 0, out
    assert "nginx.conf:1: worker_processes 3: one process with 3 threads (threads 3)" in out
    assert "nginx.conf:2: worker_connections 100: max_connections 300" in out
    assert "nginx.conf:2: multi_accept: accepted, not used" in out
    assert "nginx.conf:2: use: accepted, not used" in out


NGINX_ONLY = ["daemon off;", "master_process on;", "load_module modules/x.so;",
              "worker_cpu_affinity auto;", "worker_priority -5;",
              "worker_shutdown_timeout 10s;", "thread_pool default threads=4;",
              "env TZ;", "lock_file /tmp/lock;", "pcre_jit on;", "timer_resolution 100ms;",
              "working_directory /tmp;"]
HTTP_NOOPS = ["tcp_nopush on;", "tcp_nodelay on;", "types_hash_max_size 2048;",
              "types_hash_bucket_size 64;", "server_names_hash_bucket_size 64;",
              "server_names_hash_max_size 512;"]


@pytest.mark.parametrize("stmt", NGINX_ONLY + HTTP_NOOPS)
def test_nginx_only_directive_is_accepted_with_a_notice(tmp_path, stmt):
    name = stmt.split()[0]
    in_http = stmt in HTTP_NOOPS
    text = (f"http {{\n{stmt}\nroot /;\n}}\n" if in_http else f"{stmt}\nroot /;\n")
    conf = write(tmp_path / "nginx.conf", text)
    rc, out = check(conf)
    assert rc == 0, out
    assert f"notice: {conf}:{2 if in_http else 1}: {name}: accepted, not used: " in out


@pytest.mark.parametrize("level,ours", [("debug", None), ("info", None), ("notice", "info"),
                                        ("warn", None), ("error", None), ("crit", "error"),
                                        ("alert", "error"), ("emerg", "error")])
def test_error_log_takes_every_nginx_level(tmp_path, level, ours):
    conf = write(tmp_path / "nginx.conf", f"error_log stderr {level};\nroot /;\n")
    rc, out = check(conf)
    assert rc == 0, out
    said = f"error_log: level {level} is lfhttpd's {ours}"
    assert (said in out) == (ours is not None), out


def test_client_max_body_size_limits_the_body(tmp_path, running):
    port = free_port()
    conf = write(tmp_path / "nginx.conf",
                 f"error_log stderr;\nhttp {{ client_max_body_size 10; access_log off;\n"
                 f"  server {{ listen 127.0.0.1:{port}; root {tmp_path}; }} }}\n")
    running([BIN, "-c", str(conf)], port, tmp_path)
    req = urllib.request.Request(f"http://127.0.0.1:{port}/", data=b"x" * 11, method="POST")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=scaled(5))
    assert e.value.code == 413


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can change its user")
def test_user_runs_the_server_as_that_user_after_binding(tmp_path, running):
    port = free_port()
    conf = write(tmp_path / "nginx.conf",
                 f"user nobody nogroup;\nerror_log stderr;\nhttp {{ access_log off;\n"
                 f"  server {{ listen 127.0.0.1:{port}; root {tmp_path}; }} }}\n")
    server = running([BIN, "-c", str(conf)], port, tmp_path)
    status = open(f"/proc/{server.proc.pid}/status").read()
    uids = re.search(r"(?m)^Uid:\s+(\d+)\s+(\d+)\s+(\d+)", status).groups()
    assert set(uids) == {str(pwd.getpwnam("nobody").pw_uid)}
