"""`if` in a location, as nginx runs it: an implicit location inside the location, whose
settings (add_header, expires, root, error_page, proxy_pass, access_log, gzip...) are the
request's while its condition holds, and what nginx refuses inside `if` refused at load.

One configuration is run as written by nginx and by lfhttpd; each test sends one request
to both and compares the status, the headers the test names and the body. The load
tests run `nginx -t` and `lfhttpd -t` on the same text.
"""
import os
import socket
import subprocess
import time

import pytest

from conftest import BIN, NGINX, Nginx, Server, check_clean_exit, free_port, with_ports, scaled

SITE = r"""
server {
    listen 127.0.0.1:{port0};
    server_name _;
    default_type text/plain;
    root ROOT/site;

    location /h/ {
        add_header X-Loc loc;
        if ($arg_x) {
            add_header X-If yes;
        }
    }
    location /two/ {
        if ($arg_a) {
            add_header X-First 1;
        }
        if ($arg_b) {
            add_header X-Second 2;
        }
    }
    location /exp/ {
        expires 1h;
        if ($arg_long) {
            expires 30d;
        }
    }
    location /r/ {
        if ($arg_other) {
            root ROOT/other;
        }
    }
    location /p/ {
        if ($arg_up) {
            proxy_pass http://127.0.0.1:{port1};
        }
    }
    location /pi/ {
        proxy_pass http://127.0.0.1:{port1};
        if ($arg_x) {
            add_header X-Pi yes;
        }
    }
    location /ep/ {
        if ($arg_e) {
            error_page 404 /custom404.txt;
        }
    }
    location /tf/ {
        try_files $uri /tf/fallback.txt;
        if ($arg_x) {
        }
    }
    location /brk/ {
        if ($arg_x) {
            add_header X-Brk yes;
            rewrite ^/brk/(.*)$ /brk/b.txt break;
        }
    }
    location /ret/ {
        if ($arg_x) {
            add_header X-Ret yes;
            return 200 "returned\n";
        }
        return 200 "not\n";
    }
    location /q/ {
        if ($arg_q) {
            access_log off;
        }
    }
    location /gz/ {
        if ($arg_x) {
            gzip off;
        }
    }
}
server {
    listen 127.0.0.1:{port1};
    default_type text/plain;
    location / {
        return 200 "upstream $request_uri\n";
    }
}
"""

FILES = [
    "site/h/f.txt", "site/two/f.txt", "site/exp/f.txt", "site/r/f.txt", "other/r/f.txt",
    "site/p/f.txt", "site/custom404.txt", "site/tf/fallback.txt", "site/brk/b.txt",
    "site/gz/f.txt", "site/q/f.txt",
]


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("tree")
    for rel in FILES:
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(rel + "\n")
    return str(root)


def site(tree):
    return SITE.replace("ROOT", tree)


def start_lfhttpd(dirpath, tree):
    for attempt in range(3):  # a port picked may be taken before lfhttpd binds it
        ports = [free_port(), free_port()]
        top = ("threads 2;\nerror_log stderr debug;\nshutdown_timeout 5s;\n"
               f"access_log \"{dirpath}/access.log\";\n")
        try:
            return Server(dirpath / f"try{attempt}", None,
                          conf=top + with_ports(site(tree), ports)), ports[0], \
                f"{dirpath}/access.log"
        except RuntimeError as e:
            if "in use" not in str(e) or attempt == 2:
                raise


@pytest.fixture(scope="module")
def daemons(tree, tmp_path_factory):
    theirs = Nginx(tmp_path_factory.mktemp("nginx"), None, site(tree), http=True)
    try:
        ours, port, log = start_lfhttpd(tmp_path_factory.mktemp("lfhttpd"), tree)
    except BaseException:
        theirs.stop()
        raise
    yield theirs.port, port, log
    theirs.stop()
    check_clean_exit(ours)


def exchange(port, target):
    """(status, {lowercase name: value}, body) of one request on its own connection."""
    head = f"GET {target} HTTP/1.1\r\nHost: example.test\r\nConnection: close\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=scaled(10)) as s:
        s.sendall(head.encode("latin-1"))
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    top, _, body = data.partition(b"\r\n\r\n")
    lines = top.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(lines[0].split()[1]), headers, body.decode("latin-1")


def same(daemons, target, status, body, **headers):
    """nginx answers status, body (None: not compared) and the headers named (None: absent,
    with `_` for `-`), and lfhttpd answers the same."""
    answers = [exchange(port, target) for port in daemons[:2]]
    for who, (st, h, b) in zip(("nginx", "lfhttpd"), answers):
        seen = {k: h.get(k.replace("_", "-")) for k in headers}
        assert (st, b if body is not None else None, seen) == \
            (status, body, headers), who


# --------------------------------------------------------------- settings of the if


def test_add_header_in_if_replaces_the_location_s_when_it_holds(daemons):
    same(daemons, "/h/f.txt?x=1", 200, "site/h/f.txt\n", x_if="yes", x_loc=None)


def test_location_s_add_header_holds_when_the_if_does_not(daemons):
    same(daemons, "/h/f.txt", 200, "site/h/f.txt\n", x_if=None, x_loc="loc")


def test_last_if_that_holds_gives_its_settings_alone(daemons):
    same(daemons, "/two/f.txt?a=1&b=1", 200, "site/two/f.txt\n", x_first=None, x_second="2")


def test_first_if_holding_alone_gives_its_settings(daemons):
    same(daemons, "/two/f.txt?a=1", 200, "site/two/f.txt\n", x_first="1", x_second=None)


def test_expires_in_if(daemons):
    same(daemons, "/exp/f.txt?long=1", 200, "site/exp/f.txt\n",
         cache_control="max-age=2592000")


def test_expires_of_the_location_without_the_if(daemons):
    same(daemons, "/exp/f.txt", 200, "site/exp/f.txt\n", cache_control="max-age=3600")


def test_root_in_if_serves_from_its_directory(daemons):
    same(daemons, "/r/f.txt?other=1", 200, "other/r/f.txt\n")


def test_root_of_the_location_without_the_if(daemons):
    same(daemons, "/r/f.txt", 200, "site/r/f.txt\n")


def test_proxy_pass_in_if_proxies_when_it_holds(daemons):
    same(daemons, "/p/f.txt?up=1", 200, "upstream /p/f.txt?up=1\n")


def test_location_with_proxy_pass_in_if_serves_files_otherwise(daemons):
    same(daemons, "/p/f.txt", 200, "site/p/f.txt\n")


def test_proxy_pass_of_the_location_holds_in_a_true_if(daemons):
    same(daemons, "/pi/a?x=1", 200, "upstream /pi/a?x=1\n", x_pi="yes")


def test_error_page_in_if(daemons):
    same(daemons, "/ep/missing?e=1", 404, "site/custom404.txt\n")


def test_try_files_of_the_location_does_not_hold_in_a_true_if(daemons):
    same(daemons, "/tf/missing?x=1", 404, None)


def test_try_files_of_the_location_holds_when_the_if_does_not(daemons):
    same(daemons, "/tf/missing", 200, "site/tf/fallback.txt\n")


def test_rewrite_break_in_if_serves_with_the_if_s_settings(daemons):
    same(daemons, "/brk/a.txt?x=1", 200, "site/brk/b.txt\n", x_brk="yes")


def test_return_in_if_answers_with_the_if_s_add_header(daemons):
    same(daemons, "/ret/?x=1", 200, "returned\n", x_ret="yes")


def test_gzip_in_if_is_taken(daemons):
    same(daemons, "/gz/f.txt?x=1", 200, "site/gz/f.txt\n")


def test_access_log_off_in_if_leaves_the_request_out(daemons):
    # nginx's own log is off in the harness: lfhttpd's alone is read
    assert exchange(daemons[1], "/q/f.txt?q=1&tag=silent")[0] == 200
    assert exchange(daemons[1], "/q/f.txt?tag=logged")[0] == 200
    deadline = time.monotonic() + scaled(5)
    while time.monotonic() < deadline:
        with open(daemons[2]) as f:
            log = f.read()
        if "tag=logged" in log:
            break
        time.sleep(0.05)
    assert "tag=logged" in log and "tag=silent" not in log


# --------------------------------------------------------------- at load


def nginx_t(tmp_path, server_text):
    d = tmp_path / "nginx-t"
    d.mkdir(exist_ok=True)
    conf = d / "nginx.conf"
    conf.write_text(f"error_log {d}/error.log;\npid {d}/nginx.pid;\nevents {{}}\n"
                    f"http {{\n    access_log off;\n{server_text}}}\n")
    r = subprocess.run([NGINX, "-t", "-p", f"{d}/", "-c", str(conf)], capture_output=True,
                       text=True)
    return r.returncode, r.stderr


def lfhttpd_t(tmp_path, server_text):
    conf = tmp_path / "lf.conf"
    conf.write_text(server_text)
    r = subprocess.run([BIN, "-t", "-c", str(conf)], capture_output=True, text=True)
    return r.returncode, r.stderr, str(conf)


def refused_by_both(tmp_path, server_text, line, directive):
    rc, err = nginx_t(tmp_path, server_text)
    assert rc != 0 and f'"{directive}" directive is not allowed here' in err, err
    rc, err, conf = lfhttpd_t(tmp_path, server_text)
    assert rc != 0 and f"{conf}:{line}" in err and f'"{directive}"' in err, err


def taken_by_both(tmp_path, server_text):
    rc, err = nginx_t(tmp_path, server_text)
    assert rc == 0, err
    rc, err, _ = lfhttpd_t(tmp_path, server_text)
    assert rc == 0, err


def test_alias_in_if_is_refused_at_load(tmp_path):
    refused_by_both(tmp_path, "server {\n listen 127.0.0.1:1;\n location /a/ {\n"
                    "  if ($arg_x) {\n   alias /tmp/;\n  }\n }\n}\n", 5, "alias")


def test_try_files_in_if_is_refused_at_load(tmp_path):
    refused_by_both(tmp_path, "server {\n listen 127.0.0.1:1;\n location /a/ {\n"
                    "  if ($arg_x) {\n   try_files $uri =404;\n  }\n }\n}\n", 5, "try_files")


def test_add_header_in_a_server_s_if_is_refused_at_load(tmp_path):
    refused_by_both(tmp_path, "server {\n listen 127.0.0.1:1;\n if ($arg_x) {\n"
                    "  add_header X-A 1;\n }\n}\n", 4, "add_header")


def test_location_settings_in_if_are_taken_at_load(tmp_path):
    taken_by_both(tmp_path, "server {\n listen 127.0.0.1:1;\n location /a/ {\n"
                  "  if ($arg_x) {\n   add_header X-A 1;\n   expires 1h;\n   root /tmp;\n"
                  "   access_log off;\n   gzip on;\n   error_page 404 /x;\n"
                  "   proxy_pass http://127.0.0.1:1;\n   set $a 1;\n   break;\n  }\n }\n}\n")


def test_proxy_pass_with_a_uri_in_if_is_refused_at_load(tmp_path):
    text = ("server {\n listen 127.0.0.1:1;\n location /a/ {\n  if ($arg_x) {\n"
            "   proxy_pass http://127.0.0.1:1/b/;\n  }\n }\n}\n")
    rc, err = nginx_t(tmp_path, text)
    assert rc != 0 and "cannot have URI part" in err and '"if"' in err, err
    rc, err, conf = lfhttpd_t(tmp_path, text)
    assert rc != 0 and f"{conf}:5" in err and "URI part" in err and "if" in err, err
