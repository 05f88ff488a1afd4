"""`limit_except METHOD... { }` in a location, as nginx runs it: an implicit location whose
access settings (allow, deny, auth_basic) hold for the methods not named, GET naming HEAD
too, the rest had from the location; what nginx refuses inside it refused at load.

One configuration is run as written by nginx and by lfhttpd; each test sends one request
to both and compares the status and the headers it names. A POST that passes the access
rules is answered 405 by the static files of both, so 405 says "let through".
"""
import base64
import socket
import subprocess

import pytest

from conftest import BIN, NGINX, Nginx, Server, check_clean_exit, free_port, with_ports, scaled

SITE = r"""
server {
    listen 127.0.0.1:{port0};
    server_name _;
    root ROOT;

    location /ro/ {
        limit_except GET {
            deny all;
        }
        location /ro/in/ {
        }
    }
    location /auth/ {
        limit_except GET POST {
            auth_basic "writers";
            auth_basic_user_file ROOT/users;
        }
    }
    location /lower/ {
        limit_except get {
            auth_basic "writers";
            auth_basic_user_file ROOT/users;
        }
    }
    location /inherit/ {
        deny 127.0.0.1;
        limit_except GET {
            auth_basic "writers";
            auth_basic_user_file ROOT/users;
        }
    }
    location /own/ {
        deny all;
        limit_except GET {
            allow all;
        }
    }
    location /head/ {
        limit_except HEAD {
            deny all;
        }
    }
    location /ret/ {
        limit_except GET {
            allow all;
        }
        return 200 "returned\n";
    }
    location /px/ {
        limit_except GET {
            proxy_pass http://127.0.0.1:{port1};
        }
    }
    location /uri/ {
        proxy_pass http://127.0.0.1:{port1}/replaced/;
        limit_except POST {
        }
    }
}
server {
    listen 127.0.0.1:{port1};
    default_type text/plain;
    return 200 "upstream $request_method $uri\n";
}
"""

FILES = ["ro/f.txt", "ro/in/f.txt", "auth/f.txt", "lower/f.txt", "inherit/f.txt",
         "own/f.txt", "head/f.txt", "px/f.txt"]


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("tree")
    for rel in FILES:
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(rel + "\n")
    (root / "users").write_text("writer:{PLAIN}secret\n")
    return str(root)


def start_lfhttpd(dirpath, site):
    for attempt in range(3):  # a port picked may be taken before lfhttpd binds it
        ports = [free_port(), free_port()]
        top = "threads 2;\nerror_log stderr debug;\nshutdown_timeout 5s;\n"
        try:
            return Server(dirpath / f"try{attempt}", None,
                          conf=top + with_ports(site, ports)), ports[0]
        except RuntimeError as e:
            if "in use" not in str(e) or attempt == 2:
                raise


@pytest.fixture(scope="module")
def daemons(tree, tmp_path_factory):
    site = SITE.replace("ROOT", tree)
    theirs = Nginx(tmp_path_factory.mktemp("nginx"), None, site, http=True)
    try:
        ours, port = start_lfhttpd(tmp_path_factory.mktemp("lfhttpd"), site)
    except BaseException:
        theirs.stop()
        raise
    yield theirs.port, port
    theirs.stop()
    check_clean_exit(ours)


def exchange(port, method, target, extra="", with_body=False):
    """(status, {lowercase name: value}) of one request on its own connection; and its
    body with_body."""
    head = (f"{method} {target} HTTP/1.1\r\nHost: example.test\r\nConnection: close\r\n"
            f"{extra}\r\n")
    if method in ("POST", "PUT", "PATCH"):
        head = head[:-2] + "Content-Length: 0\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=scaled(10)) as s:
        s.sendall(head.encode("latin-1"))
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    top = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in top[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    if with_body:
        return int(top[0].split()[1]), body.decode("latin-1")
    return int(top[0].split()[1]), headers


def same(daemons, method, target, status, extra="", **headers):
    """nginx answers status and the headers named (None: absent, `_` for `-`), and lfhttpd
    answers the same."""
    for who, port in zip(("nginx", "lfhttpd"), daemons):
        st, h = exchange(port, method, target, extra)
        seen = {k: h.get(k.replace("_", "-")) for k in headers}
        assert (st, seen) == (status, headers), who


WRITER = "Authorization: Basic " + base64.b64encode(b"writer:secret").decode() + "\r\n"


def test_named_method_passes_a_deny_all_block(daemons):
    same(daemons, "GET", "/ro/f.txt", 200)


def test_get_names_head_too(daemons):
    same(daemons, "HEAD", "/ro/f.txt", 200)


def test_method_not_named_meets_the_block_s_deny(daemons):
    same(daemons, "POST", "/ro/f.txt", 403)


def test_every_method_not_named_meets_it(daemons):
    same(daemons, "DELETE", "/ro/f.txt", 403)


def test_nested_location_does_not_inherit_limit_except(daemons):
    same(daemons, "POST", "/ro/in/f.txt", 405)


def test_method_not_named_is_asked_for_a_password(daemons):
    # lfhttpd's challenge adds charset="UTF-8" (RFC 7617): the realm is compared
    for who, port in zip(("nginx", "lfhttpd"), daemons):
        st, h = exchange(port, "PUT", "/auth/f.txt")
        assert (st, h.get("www-authenticate", "").startswith('Basic realm="writers"')) == \
            (401, True), who


def test_second_named_method_is_not_asked(daemons):
    same(daemons, "POST", "/auth/f.txt", 405, www_authenticate=None)


def test_method_not_named_with_the_password_passes(daemons):
    same(daemons, "PUT", "/auth/f.txt", 405, extra=WRITER)


def test_methods_are_named_without_case(daemons):
    same(daemons, "GET", "/lower/f.txt", 200)


def test_block_inherits_the_location_s_deny(daemons):
    same(daemons, "POST", "/inherit/f.txt", 403, extra=WRITER)


def test_block_s_own_allow_replaces_the_location_s_deny(daemons):
    same(daemons, "POST", "/own/f.txt", 405)


def test_named_method_keeps_the_location_s_deny(daemons):
    same(daemons, "GET", "/own/f.txt", 403)


def test_head_alone_does_not_name_get(daemons):
    same(daemons, "GET", "/head/f.txt", 403)


def answers(daemons, method, target, expected):
    """nginx answers expected (status, body), and lfhttpd the same."""
    for who, port in zip(("nginx", "lfhttpd"), daemons):
        assert exchange(port, method, target, with_body=True) == expected, who


def test_location_s_return_answers_a_named_method(daemons):
    answers(daemons, "GET", "/ret/x", (200, "returned\n"))


def test_location_s_return_is_not_the_block_s(daemons):
    # the block's settings are the request's: the location's return is not among them
    assert exchange(daemons[0], "POST", "/ret/x")[0] == \
        exchange(daemons[1], "POST", "/ret/x")[0] == 404


def test_proxy_pass_in_the_block_answers_a_method_not_named(daemons):
    answers(daemons, "DELETE", "/px/f.txt", (200, "upstream DELETE /px/f.txt\n"))


def test_named_method_is_served_by_the_location(daemons):
    answers(daemons, "GET", "/px/f.txt", (200, "px/f.txt\n"))


def test_block_has_the_location_s_proxy_pass_and_its_uri(daemons):
    answers(daemons, "GET", "/uri/a", (200, "upstream GET /replaced/a\n"))


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


def test_add_header_in_limit_except_is_refused_at_load(tmp_path):
    text = ("server {\n listen 127.0.0.1:1;\n location /a/ {\n  limit_except GET {\n"
            "   add_header X-A 1;\n  }\n }\n}\n")
    rc, err = nginx_t(tmp_path, text)
    assert rc != 0 and '"add_header" directive is not allowed here' in err, err
    rc, err, conf = lfhttpd_t(tmp_path, text)
    assert rc != 0 and f"{conf}:5" in err and '"add_header" directive is not allowed' in err, err


def test_unknown_method_is_refused_at_load(tmp_path):
    text = ("server {\n listen 127.0.0.1:1;\n location /a/ {\n  limit_except GET FETCH {\n"
            "   deny all;\n  }\n }\n}\n")
    rc, err = nginx_t(tmp_path, text)
    assert rc != 0 and 'invalid method "FETCH"' in err, err
    rc, err, conf = lfhttpd_t(tmp_path, text)
    assert rc != 0 and f"{conf}:4" in err and 'invalid method "FETCH"' in err, err


def test_webdav_methods_are_taken_at_load(tmp_path):
    text = ("server {\n listen 127.0.0.1:1;\n location /a/ {\n  limit_except GET PROPFIND "
            "MKCOL LOCK {\n   deny all;\n  }\n }\n}\n")
    assert nginx_t(tmp_path, text)[0] == 0
    rc, err, _ = lfhttpd_t(tmp_path, text)
    assert rc == 0, err


def test_limit_except_in_a_server_is_refused_at_load(tmp_path):
    text = ("server {\n listen 127.0.0.1:1;\n limit_except GET {\n  deny all;\n }\n}\n")
    rc, err = nginx_t(tmp_path, text)
    assert rc != 0 and '"limit_except" directive is not allowed here' in err, err
    rc, err, conf = lfhttpd_t(tmp_path, text)
    assert rc != 0 and f"{conf}:3" in err and '"limit_except"' in err, err


def test_second_limit_except_is_refused_at_load(tmp_path):
    text = ("server {\n listen 127.0.0.1:1;\n location /a/ {\n  limit_except GET {\n"
            "   deny all;\n  }\n  limit_except POST {\n   deny all;\n  }\n }\n}\n")
    rc, err = nginx_t(tmp_path, text)
    assert rc != 0 and '"limit_except" directive is duplicate' in err, err
    rc, err, conf = lfhttpd_t(tmp_path, text)
    assert rc != 0 and f"{conf}:7" in err and "duplicate" in err, err


def test_proxy_pass_with_a_uri_in_limit_except_is_refused_at_load(tmp_path):
    text = ("server {\n listen 127.0.0.1:1;\n location /a/ {\n  limit_except GET {\n"
            "   proxy_pass http://127.0.0.1:1/b/;\n  }\n }\n}\n")
    rc, err = nginx_t(tmp_path, text)
    assert rc != 0 and "cannot have URI part" in err and '"limit_except"' in err, err
    rc, err, conf = lfhttpd_t(tmp_path, text)
    assert rc != 0 and f"{conf}:5" in err and "URI part" in err and "limit_except" in err, err


def test_access_log_and_proxy_pass_in_limit_except_are_taken_at_load(tmp_path):
    text = ("server {\n listen 127.0.0.1:1;\n location /a/ {\n  limit_except GET {\n"
            "   access_log off;\n   proxy_pass http://127.0.0.1:1;\n  }\n }\n}\n")
    assert nginx_t(tmp_path, text)[0] == 0
    rc, err, _ = lfhttpd_t(tmp_path, text)
    assert rc == 0, err
