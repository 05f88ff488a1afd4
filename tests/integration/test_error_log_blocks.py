"""nginx's error_log in a server and in a location: the messages about a request go to the
error log of the block that answers it, from that log's level up; the others stay in the
top-level one. The same configuration is run by nginx and by lfhttpd and the files each
request's lines land in are compared (the lines' words differ: nginx's `open() "..."
failed`, lfhttpd's `static: open "...": ...`; both name the request line)."""
import re

import pytest

from conftest import free_port, scaled, wait_until

BLOCKS = """
server {{
    listen 127.0.0.1:{port};
    root {root};
    error_log {d}/srv.err warn;
    location /a/ {{ error_log {d}/loc.err; }}
    location /quiet/ {{ error_log {d}/quiet.err crit; }}
    location /deny/ {{ deny all; error_log {d}/deny.err info; }}
    location /nf/ {{ log_not_found off; }}
    location /up/ {{ proxy_pass http://127.0.0.1:{dead}/; error_log {d}/up.err; }}
    location /nested/ {{
        error_log {d}/outer.err;
        location /nested/in/ {{ }}
    }}
}}
"""

FILES = ("top", "srv.err", "loc.err", "quiet.err", "deny.err", "outer.err", "up.err")
PATHS = ("/missing", "/a/missing", "/quiet/missing", "/deny/x", "/nf/missing",
         "/nested/in/missing", "/up/x")


def get(host, port, path):
    import socket
    with socket.create_connection((host, port), timeout=scaled(5)) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return int(data.split(b" ", 2)[1])


def where(read, paths):
    """{path: sorted [(file, level)...]}: the files (and levels) whose lines name the path's
    request line."""
    out = {p: [] for p in paths}
    for name in FILES:
        for line in read(name).splitlines():
            m = re.search(r'request: "GET (\S+) HTTP/1.1"', line)
            level = re.search(r"\[(\w+)\]", line)
            if m and m.group(1) in out:
                out[m.group(1)].append((name, level.group(1) if level else "?"))
    return {p: sorted(v) for p, v in out.items()}


def run_paths(host, port):
    return [get(host, port, p) for p in PATHS]


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "www"
    root.mkdir()
    return root


def test_request_messages_land_in_the_blocks_error_log_as_nginx(tmp_path, tree, nginx,
                                                               start_server):
    nd = tmp_path / "n"
    nd.mkdir()
    dead = free_port()
    n = nginx(tree, BLOCKS.format(port="{port0}", root=tree, d=nd, dead=dead), http=True)
    n_status = run_paths(n.host, n.port)

    ld = tmp_path / "l"
    ld.mkdir()
    s = start_server(tree, conf="error_log stderr info;\naccess_log off;\n"
                     + BLOCKS.format(port=0, root=tree, d=ld, dead=dead))
    l_status = run_paths(s.host, s.port)
    assert l_status == n_status == [404, 404, 404, 403, 404, 404, 502]

    def reader(d, top):
        def read(name):
            if name == "top":
                return top()
            p = d / name
            return p.read_text() if p.exists() else ""
        return read

    theirs = reader(nd, n.log)
    ours = reader(ld, s.error_log)
    expected = {"/missing": [("srv.err", "error")], "/a/missing": [("loc.err", "error")],
                "/quiet/missing": [], "/deny/x": [("deny.err", "error")],
                "/nf/missing": [], "/nested/in/missing": [("outer.err", "error")],
                "/up/x": [("up.err", "error")]}
    assert wait_until(lambda: where(theirs, PATHS) == expected, scaled(3)), \
        where(theirs, PATHS)
    assert wait_until(lambda: where(ours, PATHS) == expected, scaled(3)), where(ours, PATHS)


def test_a_level_above_the_message_keeps_it_out(tmp_path, tree, start_server):
    """error_log FILE crit in a location: a missing file's error is left out, and not sent
    to an outer log either (nginx too: the test above)."""
    d = tmp_path / "l"
    d.mkdir()
    s = start_server(tree, conf="error_log stderr debug;\naccess_log off;\n"
                     + BLOCKS.format(port=0, root=tree, d=d, dead=free_port()))
    assert get(s.host, s.port, "/quiet/missing") == 404
    assert get(s.host, s.port, "/missing") == 404  # written: the server's log is warn
    assert wait_until(lambda: (d / "srv.err").exists() and "/missing" in
                      (d / "srv.err").read_text(), scaled(3))
    assert "/quiet/missing" not in s.error_log() + (d / "srv.err").read_text()
    assert not (d / "quiet.err").read_text()


def test_a_cgi_scripts_502_goes_to_its_locations_error_log(tmp_path, tree, start_server):
    cgi = tmp_path / "cgi"
    cgi.mkdir()
    (cgi / "bad.sh").write_text("#!/bin/sh\nexit 0\n")
    (cgi / "bad.sh").chmod(0o755)
    err = tmp_path / "cgi.err"
    s = start_server(tree, conf="listen 127.0.0.1:0;\nerror_log stderr info;\naccess_log off;\n"
                     f'server {{ location /cgi-bin/ {{ cgi "{cgi}"; error_log {err}; }} }}\n')
    assert get(s.host, s.port, "/cgi-bin/bad.sh") == 502
    assert wait_until(lambda: err.exists() and "answered 502: no output" in err.read_text(),
                      scaled(5))
    assert "answered 502" not in s.error_log()


def test_an_error_log_that_cannot_be_opened_is_a_config_error(tmp_path, tree):
    import subprocess
    from conftest import BIN
    conf = tmp_path / "t.conf"
    conf.write_text("listen 127.0.0.1:0;\naccess_log off;\nserver {\n"
                    f"  location / {{ error_log {tmp_path}/missing/dir/x.err; }}\n}}\n")
    r = subprocess.run([BIN, "-t", "-c", str(conf)], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 1, r.stderr
    assert f"{conf}:4: error_log \"{tmp_path}/missing/dir/x.err\": No such file" in r.stderr, \
        r.stderr


def test_error_log_off_in_a_server_writes_its_requests_messages_nowhere(tmp_path, tree,
                                                                        start_server):
    """`error_log off;` in a server (nginx would write a file named "off"; sites write it
    to silence a server): accepted with a notice, and a missing file's line is written
    neither in the top-level log nor anywhere else; another server's still is."""
    import subprocess
    from conftest import BIN
    text = ("listen 127.0.0.1:0;\nerror_log stderr info;\naccess_log off;\n"
            "server { server_name quiet; error_log off; }\nserver { server_name loud; }\n")
    conf = tmp_path / "t.conf"
    conf.write_text(text)
    r = subprocess.run([BIN, "-t", "-c", str(conf)], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0 and f"{conf}:4: error_log off: nginx would write a file" in \
        r.stderr, r.stderr
    s = start_server(tree, conf=text)
    import socket
    for host in ("quiet", "loud"):
        with socket.create_connection((s.host, s.port), timeout=scaled(5)) as c:
            c.sendall(f"GET /missing-{host} HTTP/1.1\r\nHost: {host}\r\n"
                      "Connection: close\r\n\r\n".encode())
            while c.recv(65536):
                pass
    assert wait_until(lambda: "/missing-loud" in s.error_log(), scaled(3))
    assert "/missing-quiet" not in s.error_log()
    import os
    assert not os.path.exists("off")  # no file of that name where the server runs
