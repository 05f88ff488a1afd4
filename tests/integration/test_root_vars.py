"""`root` and `alias` with variables and regex captures, and $document_root,
$realpath_root and $request_filename, against nginx.

One configuration is run as written by nginx and by lfhttpd over the same tree; each test
sends one request to both and compares the status and, where a file or a configured text
is served, the body (every file's body is its own path under the tree). Where lfhttpd
answers otherwise on purpose the test says so: a file that a variable leads out of the
root (a `..` in an argument, a symlink out of the root's literal directory) is served by
nginx and never by lfhttpd.
"""
import os
import socket
import subprocess
import time

import pytest

from conftest import BIN, Nginx, Server, check_clean_exit, free_port, with_ports, scaled

SITE = r"""
server {
    listen 127.0.0.1:{port0};
    server_name _;
    default_type text/plain;
    root ROOT/vhosts/$host;

    location = /roots {
        return 200 "$document_root|$realpath_root|$request_filename\n";
    }
    location ~ ^/u/(\w+)/(.*)$ {
        alias ROOT/home/$1/public/$2;
    }
    location ~ ^/tu/(\w+)/(.*)$ {
        alias ROOT/home/$1/public/$2;
        try_files $uri =404;
    }
    location ~ ^/te/(\w+)/(.*)$ {
        alias ROOT/home/$1/public/$2;
        try_files "" =404;
    }
    location ~ ^/tw/(\w+)(/.*)$ {
        alias ROOT/home/$1;
        try_files $2 =404;
    }
    location ~ ^/fixed/ {
        alias ROOT/files/a.txt;
    }
    location /arg/ {
        root ROOT/vhosts/$arg_site;
    }
    location /dl/ {
        alias ROOT/files/$arg_d/;
    }
    location /iff/ {
        if (-f $request_filename) {
            return 200 "file $request_filename\n";
        }
        return 404 "none\n";
    }
    location /try/ {
        try_files $uri /try/fallback.txt;
    }
    location /hdr/ {
        add_header X-Root $document_root;
        add_header X-File $request_filename;
    }
    location /aliasroots/ {
        alias ROOT/files/;
        return 200 "$document_root|$request_filename\n";
    }
    location /dlx {
        alias ROOT/files/$arg_d;
    }
    location /dlt/ {
        alias ROOT/files/;
        try_files $uri =404;
    }
}
server {
    listen 127.0.0.1:{port0};
    server_name plain.test;
    default_type text/plain;
    root ROOT/plain/;
    if (!-e $request_filename) {
        rewrite ^ /fallback.txt last;
    }
    location = /roots {
        return 200 "$document_root|$request_filename\n";
    }
}
"""

FILES = [
    "vhosts/example.test/index.html", "vhosts/example.test/page.txt",
    "vhosts/example.test/iff/f.txt", "vhosts/example.test/try/fallback.txt",
    "vhosts/example.test/try/here.txt", "vhosts/example.test/hdr/f.txt",
    "vhosts/other.test/page.txt", "vhosts/example.test/arg/f.txt",
    "vhosts/other.test/arg/f.txt", "vhosts/arg/f.txt",
    "home/alice/public/a.txt", "home/alice/public/sub/b.txt",
    "files/a.txt", "files/x/arg.txt",
    "secret.txt", "vhosts/secret.txt", "arg/secret.txt", "files/xyz.txt",
    "plain/page.txt", "plain/fallback.txt", "plain/roots",
]

# nginx's open follows a `..` wherever it leads; ours names no file with one (404).
DOTS = "a `..` that a variable brings names no file here"
# nginx's alias in a prefix location without a trailing slash lets the rest of the path
# continue the alias's last name; ours, with variables or not, only a rest that starts a
# new segment.
ALIAS_REST = "an alias is continued only by a rest that starts with '/'"
# nginx follows a symlink anywhere (disable_symlinks off); ours stays beneath the root's
# literal directory (open_beneath).
SYMLINK = "a symlink out of the root's literal directory is not followed here"


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("tree")
    for rel in FILES:
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(rel + "\n")
    (root / "vhosts" / "link.test").symlink_to(root / "vhosts" / "example.test")
    (root / "vhosts" / "evil.test").symlink_to(root)
    return str(root)


def site(tree):
    return SITE.replace("ROOT", tree)


def start_lfhttpd(dirpath, tree):
    for attempt in range(3):  # a port picked may be taken before lfhttpd binds it
        ports = [free_port()]
        top = ("threads 2;\nerror_log stderr debug;\nshutdown_timeout 5s;\n"
               f"access_log \"{dirpath}/access.log\";\n")
        try:
            return Server(dirpath / f"try{attempt}", None,
                          conf=top + with_ports(site(tree), ports))
        except RuntimeError as e:
            if "in use" not in str(e) or attempt == 2:
                raise


@pytest.fixture(scope="module")
def daemons(tree, tmp_path_factory):
    theirs = Nginx(tmp_path_factory.mktemp("nginx"), None, site(tree), http=True)
    try:
        ours = start_lfhttpd(tmp_path_factory.mktemp("lfhttpd"), tree)
    except BaseException:
        theirs.stop()
        raise
    yield theirs.port, ours.port
    theirs.stop()
    check_clean_exit(ours)


def exchange(port, target, host):
    """(status, {lowercase name: value}, body) of one request on its own connection."""
    head = f"GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
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


def both(daemons, target, host="example.test"):
    theirs, ours = daemons
    return exchange(theirs, target, host), exchange(ours, target, host)


def same(daemons, target, host="example.test", status=None, body=None, tree=None):
    """nginx answers status (and body, a file's path or a text) and lfhttpd as nginx."""
    (ns, nh, nb), (ls, lh, lb) = both(daemons, target, host)
    assert ns == status, f"nginx: {ns} {nb!r}"
    if body is not None:
        assert nb == body + "\n", "nginx"
    assert (ls, lb if body is not None else None) == (ns, nb if body is not None else None)


# --------------------------------------------------------------- root with variables


def test_root_with_host_serves_the_host_s_directory(daemons):
    same(daemons, "/page.txt", "example.test", 200, "vhosts/example.test/page.txt")


def test_root_with_host_serves_another_host_s_directory(daemons):
    same(daemons, "/page.txt", "other.test", 200, "vhosts/other.test/page.txt")


def test_root_with_host_serves_the_index_of_the_host_s_directory(daemons):
    same(daemons, "/", "example.test", 200, "vhosts/example.test/index.html")


def test_root_with_an_unknown_host_is_404(daemons):
    same(daemons, "/page.txt", "nowhere.test", 404)


def test_root_with_host_is_case_folded_as_host_is(daemons):
    same(daemons, "/page.txt", "EXAMPLE.test", 200, "vhosts/example.test/page.txt")


def test_root_with_an_argument_serves_the_argument_s_directory(daemons):
    same(daemons, "/arg/f.txt?site=other.test", status=200, body="vhosts/other.test/arg/f.txt")


def test_root_with_an_empty_argument_doubles_a_slash_that_names_the_same_file(daemons):
    same(daemons, "/arg/f.txt", status=200, body="vhosts/arg/f.txt")


# --------------------------------------------------------------- escapes


def test_host_of_two_dots_is_refused(daemons):
    same(daemons, "/secret.txt", "..", 400)  # a Host of dots alone names no host


def test_host_with_encoded_dots_is_a_name_not_a_parent(daemons):
    same(daemons, "/secret.txt", "%2e%2e", 404)


def test_host_with_a_slash_is_refused(daemons):
    same(daemons, "/secret.txt", "a/..", 400)


def test_argument_of_two_dots_does_not_leave_the_root(daemons, tree):
    (ns, _, nb), (ls, _, lb) = both(daemons, "/arg/secret.txt?site=..")
    assert (ns, nb) == (200, "arg/secret.txt\n"), DOTS  # nginx: ROOT/vhosts/../arg/secret.txt
    assert ls == 404 and "secret" not in lb


def test_argument_of_two_dots_and_a_slash_does_not_leave_the_root(daemons):
    (ns, _, nb), (ls, _, lb) = both(daemons, "/arg/secret.txt?site=../..")
    assert ns == 404 or "secret" in nb  # nginx: wherever ROOT/../.. leads
    assert ls == 404 and "secret" not in lb


def test_argument_of_encoded_dots_stays_a_name(daemons):
    same(daemons, "/arg/secret.txt?site=%2e%2e", status=404)


def test_alias_argument_of_two_dots_does_not_leave_the_alias(daemons):
    (ns, _, nb), (ls, _, lb) = both(daemons, "/dl/secret.txt?d=..")
    assert (ns, nb) == (200, "secret.txt\n"), DOTS  # nginx: ROOT/files/../secret.txt
    assert ls == 404 and "secret" not in lb


def test_alias_argument_naming_a_subdirectory_is_served(daemons):
    same(daemons, "/dl/arg.txt?d=x", status=200, body="files/x/arg.txt")


def test_alias_with_variables_is_continued_by_a_new_segment(daemons):
    same(daemons, "/dlx/xyz.txt?d=x", status=404)  # ROOT/files/x/xyz.txt: none


def test_alias_with_variables_is_not_continued_by_the_rest_of_a_name(daemons):
    (ns, _, nb), (ls, _, lb) = both(daemons, "/dlxyz.txt?d=x")
    assert (ns, nb) == (200, "files/xyz.txt\n"), ALIAS_REST  # nginx: ROOT/files/x + yz.txt
    assert ls == 404


def test_symlinked_host_directory_inside_the_root_is_served(daemons):
    same(daemons, "/page.txt", "link.test", 200, "vhosts/example.test/page.txt")


def test_symlinked_host_directory_out_of_the_root_is_not_followed(daemons):
    (ns, _, nb), (ls, _, lb) = both(daemons, "/secret.txt", "evil.test")
    assert (ns, nb) == (200, "secret.txt\n"), SYMLINK
    assert ls in (403, 404) and "secret" not in lb


def test_captures_are_taken_after_the_path_s_dot_segments_are_resolved(daemons):
    same(daemons, "/u/bob/..%2falice%2fa.txt", status=200, body="home/alice/public/a.txt")


def test_path_above_the_top_is_refused_before_any_capture(daemons):
    same(daemons, "/u/alice/..%2f..%2f..%2fsecret.txt", status=400)


# --------------------------------------------------------------- alias and captures


def test_alias_with_captures_names_the_whole_file(daemons):
    same(daemons, "/u/alice/a.txt", status=200, body="home/alice/public/a.txt")


def test_alias_with_captures_reaches_a_subdirectory(daemons):
    same(daemons, "/u/alice/sub/b.txt", status=200, body="home/alice/public/sub/b.txt")


def test_alias_with_captures_of_an_unknown_user_is_404(daemons):
    same(daemons, "/u/bob/a.txt", status=404)


def test_try_files_beneath_a_regex_alias_puts_the_candidate_after_the_alias(daemons):
    same(daemons, "/tu/alice/a.txt", status=404)  # ROOT/home/alice/public/a.txt/tu/alice/a.txt


def test_try_files_empty_candidate_beneath_a_regex_alias_is_the_alias(daemons):
    same(daemons, "/te/alice/a.txt", status=200, body="home/alice/public/a.txt")


def test_try_files_capture_candidate_beneath_a_regex_alias_is_served(daemons):
    same(daemons, "/tw/alice/public/sub/b.txt", status=200, body="home/alice/public/sub/b.txt")


def test_alias_in_a_regex_location_without_captures_names_one_file(daemons):
    same(daemons, "/fixed/anything", status=200, body="files/a.txt")


# --------------------------------------------------------------- the variables


def test_document_root_realpath_root_and_request_filename(daemons, tree):
    same(daemons, "/roots", "link.test", 200,
         f"{tree}/vhosts/link.test|{tree}/vhosts/example.test|{tree}/vhosts/link.test/roots")


def test_alias_document_root_and_request_filename(daemons, tree):
    same(daemons, "/aliasroots/z.txt", status=200,
         body=f"{tree}/files/|{tree}/files/z.txt")


def test_root_s_trailing_slash_is_not_in_document_root(daemons, tree):
    same(daemons, "/roots", "plain.test", 200, f"{tree}/plain|{tree}/plain/roots")


def test_server_if_reads_the_server_s_request_filename(daemons):
    same(daemons, "/page.txt", "plain.test", 200, "plain/page.txt")


def test_server_if_rewrites_a_missing_file(daemons):
    same(daemons, "/gone.txt", "plain.test", 200, "plain/fallback.txt")


def test_if_file_request_filename_holds_for_a_file(daemons, tree):
    same(daemons, "/iff/f.txt", status=200,
         body=f"file {tree}/vhosts/example.test/iff/f.txt")


def test_if_file_request_filename_is_false_for_a_missing_file(daemons):
    same(daemons, "/iff/missing.txt", status=404, body="none")


def test_try_files_beneath_a_root_with_variables_finds_the_file(daemons):
    same(daemons, "/try/here.txt", status=200, body="vhosts/example.test/try/here.txt")


def test_try_files_beneath_a_root_with_variables_falls_back(daemons):
    same(daemons, "/try/gone.txt", status=200, body="vhosts/example.test/try/fallback.txt")


def test_try_files_beneath_an_alias_serves_the_alias_s_file(daemons):
    same(daemons, "/dlt/a.txt", status=200, body="files/a.txt")


def test_add_header_with_document_root_and_request_filename(daemons, tree):
    (ns, nh, nb), (ls, lh, lb) = both(daemons, "/hdr/f.txt")
    assert ns == 200 and nh["x-root"] == f"{tree}/vhosts/example.test"
    assert nh["x-file"] == f"{tree}/vhosts/example.test/hdr/f.txt"
    assert (ls, lh.get("x-root"), lh.get("x-file"), lb) == (ns, nh["x-root"], nh["x-file"], nb)


# --------------------------------------------------------------- at load


def test_realpath_root_in_root_is_refused_at_load(tmp_path):
    conf = tmp_path / "x.conf"
    conf.write_text("server {\n    listen 127.0.0.1:0;\n    root /srv/$realpath_root;\n}\n")
    r = subprocess.run([BIN, "-t", "-c", str(conf)], capture_output=True, text=True)
    assert r.returncode != 0
    assert f"{conf}:3" in r.stderr and "$realpath_root" in r.stderr


# --------------------------------------------------------------- in a log line


def test_log_format_with_document_root_and_request_filename_gives_nginx_s_line(tree,
                                                                                tmp_path):
    fmt = "log_format roots '$document_root $realpath_root $request_filename';\n"
    server = ("server {\n    listen 127.0.0.1:{port0};\n    root ROOT/vhosts/$host;\n"
              "    access_log LOG roots;\n}\n").replace("ROOT", tree)
    theirs_log, ours_log = tmp_path / "nginx.log", tmp_path / "ours.log"
    theirs = Nginx(tmp_path / "nginx", None,
                   fmt + server.replace("LOG", str(theirs_log)), http=True)
    ours = None
    try:
        port = free_port()
        ours = Server(tmp_path / "ours", None,
                      conf="threads 2;\nerror_log stderr debug;\naccess_log off;\n" + fmt +
                      with_ports(server.replace("LOG", str(ours_log)), [port]))
        for p in (theirs.port, port):
            assert exchange(p, "/page.txt", "link.test")[0] == 200
        want = f"{tree}/vhosts/link.test {tree}/vhosts/example.test " \
               f"{tree}/vhosts/link.test/page.txt\n"
        for log in (theirs_log, ours_log):
            deadline = time.monotonic() + scaled(5)
            while not (log.exists() and log.read_text()) and time.monotonic() < deadline:
                time.sleep(0.05)
        assert theirs_log.read_text() == want
        assert ours_log.read_text() == want
    finally:
        theirs.stop()
        if ours:
            check_clean_exit(ours)


# --------------------------------------------------------------- the top level's root


def top_level_pair(tree, tmp_path, text):
    """nginx and lfhttpd on `text` (at nginx's http level, lfhttpd's top level), with
    {port0}: (nginx, lfhttpd, lfhttpd's port)."""
    text = text.replace("ROOT", tree)
    theirs = Nginx(tmp_path / "nginx", None, "default_type text/plain;\n" + text, http=True)
    try:
        port = free_port()
        ours = Server(tmp_path / "ours", None,
                      conf="threads 2;\nerror_log stderr debug;\naccess_log off;\n"
                      "default_type text/plain;\n" + with_ports(text, [port]))
    except BaseException:
        theirs.stop()
        raise
    return theirs, ours, port


def test_top_level_root_with_host_serves_each_server_s_host(tree, tmp_path):
    theirs, ours, port = top_level_pair(
        tree, tmp_path, "root ROOT/vhosts/$host;\nserver {\n    listen 127.0.0.1:{port0};\n}\n")
    try:
        for host, want in (("example.test", "vhosts/example.test/page.txt\n"),
                           ("other.test", "vhosts/other.test/page.txt\n")):
            for p in (theirs.port, port):
                st, _, body = exchange(p, "/page.txt", host)
                assert (st, body) == (200, want), (p, host)
        for p in (theirs.port, port):
            assert exchange(p, "/secret.txt", "..")[0] in (400, 404)
    finally:
        theirs.stop()
        check_clean_exit(ours)


def test_top_level_root_with_host_without_server_blocks(tree, tmp_path):
    ours = Server(tmp_path / "ours", None,
                  conf="listen 127.0.0.1:0;\nthreads 2;\nerror_log stderr debug;\n"
                  f"access_log off;\ndefault_type text/plain;\nroot {tree}/vhosts/$host;\n")
    try:
        assert exchange(ours.port, "/page.txt", "other.test")[::2] == \
            (200, "vhosts/other.test/page.txt\n")
        assert exchange(ours.port, "/secret.txt", "..")[0] == 400  # refused, as nginx
    finally:
        check_clean_exit(ours)
