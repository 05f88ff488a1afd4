"""`server` and `location` blocks through the real binary: which server a request reaches
(address, then Host, then default_server, then the first server), per-location settings
(root, alias, index, try_files, return, error_page, access, headers, handlers), the
messages of `lfhttpd -t` for misplaced or conflicting blocks, reload, and several servers
on one keep-alive connection.

Servers listen on 127.0.0.1: on the top-level `listen 127.0.0.1:0` when a server block has
no `listen`, else on ports picked free here (bound to port 0, closed, then named), because
several server blocks must name the same address.
"""
import base64
import os
import signal
import socket
import subprocess
import time

import pytest

from conftest import BIN, Client, scaled, wait_until


# ---------------------------------------------------------------- helpers


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def top(docroot, listen=None):
    """The top level of a test's configuration: the servers follow it. Server blocks
    without `listen` listen on its address, a port picked free."""
    if listen is None:
        listen = f"listen 127.0.0.1:{free_port()};\n"
    return (listen + f'root "{docroot}";\nthreads 2;\nerror_log stderr debug;\n'
            "shutdown_timeout 5s;\n")


def raw_request(method, target, host="t", headers=(), body=b"", close=True):
    lines = [f"{method} {target} HTTP/1.1"]
    if host is not None:
        lines.append(f"Host: {host}")
    lines += [f"{k}: {v}" for k, v in headers]
    if body:
        lines.append(f"Content-Length: {len(body)}")
    if close:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def get(port, target="/", host="t", method="GET", headers=(), body=b""):
    """One request on a fresh connection: (status, headers, body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=scaled(10)) as s:
        c = Client(s)
        c.send(raw_request(method, target, host, headers, body))
        status, hdrs, data, _ = c.read_response(head_only=method == "HEAD",
                                                timeout=scaled(10))
        return status, hdrs, data


def basic(user, password):
    return ("Authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())


def htpasswd(path, user="alice", password="secret"):
    subprocess.run(["htpasswd", "-b", "-c", "-B", "-C", "5", str(path), user, password],
                   check=True, capture_output=True)
    return path


def site_dir(parent, name, files):
    """A directory `name` under parent holding files {relative path: text}."""
    d = parent / name
    d.mkdir(parents=True, exist_ok=True)
    for rel, text in files.items():
        p = d / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return d


def check_conf(tmp_path, text):
    """`lfhttpd -t` on a file holding text: (result, the file's path)."""
    conf = tmp_path / "t.conf"
    conf.write_text(text)
    r = subprocess.run([BIN, "-t", "-c", str(conf)], capture_output=True, text=True,
                       cwd=tmp_path, timeout=scaled(30))
    return r, str(conf)


def reload(server, text):
    """Write the new configuration, SIGHUP, wait for "configuration reloaded"."""
    with open(server.conf_path, "w") as f:
        f.write(text)
    before = len(server.error_log())
    server.proc.send_signal(signal.SIGHUP)
    assert wait_until(lambda: "configuration reloaded" in server.error_log()[before:],
                      scaled(10)), server.error_log()[before:]


# ---------------------------------------------------------------- no server blocks


def test_configuration_without_server_blocks_serves_its_root_as_before(start_server, docroot):
    (docroot / "page.html").write_text("plain root\n")
    s = start_server(docroot)
    status, _, body = get(s.port, "/page.html")
    assert (status, body) == (200, b"plain root\n")


# ---------------------------------------------------------------- server selection


@pytest.fixture
def named_sites(start_server, docroot, tmp_path):
    """Six servers on one port, each with a root whose index.html names it; `dflt` is the
    default_server although it is not first."""
    port = free_port()
    names = {
        "first": "first.test",
        "star": "*.example.org",  # before the exact name: file order must not decide
        "exact": "www.example.org",
        "dot": ".example.net",
        "dflt": "default.test",
        "upper": "MiXeD.Test",
    }
    text = top(docroot, "")
    for key, name in names.items():
        root = site_dir(tmp_path, key, {"index.html": key})
        extra = " default_server" if key == "dflt" else ""
        text += (f"server {{\n  listen 127.0.0.1:{port}{extra};\n  server_name {name};\n"
                 f'  root "{root}";\n}}\n')
    start_server(docroot, conf=text)
    return port


def site_of(port, host, target="/"):
    status, _, body = get(port, target, host=host)
    assert status == 200, (host, status, body)
    return body.decode()


def test_exact_server_name_picks_its_server(named_sites):
    assert site_of(named_sites, "first.test") == "first"
    assert site_of(named_sites, "www.example.org") == "exact"


def test_exact_name_wins_over_a_matching_wildcard(named_sites):
    assert site_of(named_sites, "www.example.org") == "exact"
    assert site_of(named_sites, "api.example.org") == "star"


def test_star_wildcard_matches_subdomains_at_any_depth(named_sites):
    assert site_of(named_sites, "a.example.org") == "star"
    assert site_of(named_sites, "a.b.example.org") == "star"


def test_star_wildcard_does_not_match_the_bare_domain(named_sites):
    assert site_of(named_sites, "example.org") == "dflt"


def test_dot_wildcard_matches_the_bare_domain_and_its_subdomains(named_sites):
    assert site_of(named_sites, "example.net") == "dot"
    assert site_of(named_sites, "x.example.net") == "dot"


def test_host_with_a_trailing_dot_matches_the_name(named_sites):
    assert site_of(named_sites, "first.test.") == "first"


def test_host_with_a_port_matches_the_name(named_sites):
    assert site_of(named_sites, f"first.test:{named_sites}") == "first"


def test_host_is_compared_without_case(named_sites):
    assert site_of(named_sites, "FIRST.Test") == "first"
    assert site_of(named_sites, "mixed.test") == "upper"
    assert site_of(named_sites, "A.EXAMPLE.ORG") == "star"


def test_unknown_host_goes_to_the_default_server(named_sites):
    assert site_of(named_sites, "nobody.invalid") == "dflt"


def test_unknown_host_without_a_default_server_goes_to_the_first_server(start_server,
                                                                        docroot, tmp_path):
    a = site_dir(tmp_path, "a", {"index.html": "a"})
    b = site_dir(tmp_path, "b", {"index.html": "b"})
    s = start_server(docroot, conf=top(docroot) +
                     f'server {{ server_name a.test; root "{a}"; }}\n'
                     f'server {{ server_name b.test; root "{b}"; }}\n')
    assert site_of(s.port, "b.test") == "b"
    assert site_of(s.port, "nobody.invalid") == "a"


def test_servers_without_listen_on_a_port_0_listen_are_chosen_by_host(start_server, docroot,
                                                                      tmp_path):
    """The port the system picks for `listen 127.0.0.1:0` is the servers' port too."""
    a = site_dir(tmp_path, "a", {"index.html": "a"})
    b = site_dir(tmp_path, "b", {"index.html": "b"})
    s = start_server(docroot, conf=top(docroot, "listen 127.0.0.1:0;\n") +
                     f'server {{ server_name a.test; root "{a}"; }}\n'
                     f'server {{ server_name b.test; root "{b}"; }}\n')
    assert site_of(s.port, "b.test") == "b"
    assert site_of(s.port, "a.test") == "a"


def test_absolute_form_target_authority_wins_over_host(named_sites):
    assert site_of(named_sites, "first.test", "http://www.example.org/") == "exact"


def test_two_addresses_each_have_their_own_servers(start_server, docroot, tmp_path):
    p1, p2 = free_port(), free_port()
    roots = {k: site_dir(tmp_path, k, {"index.html": k}) for k in ("one-a", "one-b", "two-a")}
    s = start_server(docroot, conf=top(docroot, "") +
                     f'server {{ listen 127.0.0.1:{p1}; server_name a.test; '
                     f'root "{roots["one-a"]}"; }}\n'
                     f'server {{ listen 127.0.0.1:{p1}; server_name b.test; '
                     f'root "{roots["one-b"]}"; }}\n'
                     f'server {{ listen 127.0.0.1:{p2}; server_name a.test; '
                     f'root "{roots["two-a"]}"; }}\n')
    assert s.port in (p1, p2)
    assert site_of(p1, "a.test") == "one-a"
    assert site_of(p1, "b.test") == "one-b"
    assert site_of(p2, "a.test") == "two-a"
    # b.test has no server on the second port: that port's only server answers.
    assert site_of(p2, "b.test") == "two-a"


# ---------------------------------------------------------------- the open-file cache


def test_open_file_cache_keeps_two_servers_files_apart(start_server, docroot, tmp_path):
    a = site_dir(tmp_path, "a", {"index.html": "site a\n"})
    b = site_dir(tmp_path, "b", {"index.html": "site b, longer\n"})
    s = start_server(docroot, conf=top(docroot) +
                     f'server {{ server_name a.test; root "{a}"; }}\n'
                     f'server {{ server_name b.test; root "{b}"; }}\n')
    for _ in range(25):
        for host, want in (("a.test", b"site a\n"), ("b.test", b"site b, longer\n")):
            status, _, body = get(s.port, "/index.html", host=host)
            assert (status, body) == (200, want), host


def test_open_file_cache_keeps_a_location_root_apart_from_the_server_root(start_server,
                                                                          docroot, tmp_path):
    srv = site_dir(tmp_path, "srv", {"pics/p.txt": "server root\n"})
    loc = site_dir(tmp_path, "loc", {"pics/p.txt": "location root, longer\n"})
    s = start_server(docroot, conf=top(docroot) +
                     f'server {{ root "{srv}";\n'
                     f'  location /pics/ {{ root "{loc}"; }}\n'
                     f'  location /all/ {{ alias "{srv}/"; }}\n}}\n')
    # Both name pics/p.txt beneath a root: the location's, and the server's directory.
    for _ in range(25):
        assert get(s.port, "/pics/p.txt")[2] == b"location root, longer\n"
        assert get(s.port, "/all/pics/p.txt")[2] == b"server root\n"


# ---------------------------------------------------------------- alias


@pytest.fixture
def alias_site(start_server, docroot, tmp_path):
    files = site_dir(tmp_path, "files", {"a.txt": "file a\n", "sub/index.html": "sub index\n",
                                         "list/x.txt": "x", "list/y.txt": "y"})
    (tmp_path / "secret.txt").write_text("outside the alias\n")
    return start_server(docroot, conf=top(docroot) +
                        "server {\n"
                        f'  location /downloads/ {{ alias "{files}/"; }}\n'
                        f'  location /dl {{ alias "{files}/"; }}\n'
                        f'  location /listing/ {{ alias "{files}/list/"; autoindex on; }}\n'
                        "}\n")


def test_alias_serves_a_file_from_the_alias_directory(alias_site):
    assert get(alias_site.port, "/downloads/a.txt")[:3:2] == (200, b"file a\n")


def test_alias_directory_serves_its_index(alias_site):
    assert get(alias_site.port, "/downloads/sub/")[:3:2] == (200, b"sub index\n")


def test_alias_with_autoindex_lists_the_alias_directory(alias_site):
    status, _, body = get(alias_site.port, "/listing/")
    assert status == 200
    assert b"x.txt" in body and b"y.txt" in body


def test_alias_prefix_without_slash_does_not_reach_the_parent_directory(alias_site):
    """nginx's alias traversal: /dl../secret.txt would be FILES/../secret.txt."""
    status, _, body = get(alias_site.port, "/dl../secret.txt")
    assert status == 404
    assert b"outside the alias" not in body
    assert get(alias_site.port, "/dl/a.txt")[:3:2] == (200, b"file a\n")


# ---------------------------------------------------------------- try_files


@pytest.fixture
def spa(start_server, docroot, tmp_path):
    root = site_dir(tmp_path, "app", {"index.html": "app shell\n", "real.txt": "real file\n",
                                      "dir/index.html": "dir index\n"})
    (tmp_path / "secret.txt").write_text("outside the root\n")
    return start_server(docroot, conf=top(docroot) +
                        f'server {{\n  root "{root}";\n'
                        "  location / { try_files $uri $uri/ /index.html; }\n"
                        "  location /strict/ { try_files $uri =404; }\n"
                        "  location /named/ { try_files $uri @fallback; }\n"
                        '  location @fallback { return 200 "from the named location"; }\n'
                        "  location /loop/ { try_files $uri /loop/again; }\n"
                        "  location = /latest { try_files /nothing.txt /real.txt =404; }\n"
                        "}\n")


def test_try_files_serves_the_uri_when_the_file_exists(spa):
    assert get(spa.port, "/real.txt")[:3:2] == (200, b"real file\n")


def test_try_files_directory_candidate_serves_its_index(spa):
    assert get(spa.port, "/dir/")[:3:2] == (200, b"dir index\n")


def test_try_files_directory_candidate_without_its_slash_is_redirected_to_it(spa):
    """As nginx: `$uri/` finds the directory, and a directory is served with its slash."""
    status, headers, _ = get(spa.port, "/dir")
    assert status == 301
    assert headers["location"] == f"http://t:{spa.port}/dir/"


def test_try_files_tests_each_candidate_for_itself(spa):
    """/latest does not exist, /nothing.txt neither, /real.txt does: it is served."""
    assert get(spa.port, "/latest")[:3:2] == (200, b"real file\n")


def test_try_files_falls_back_to_the_last_uri(spa):
    assert get(spa.port, "/settings/profile")[:3:2] == (200, b"app shell\n")


def test_try_files_equals_code_answers_that_status(spa):
    assert get(spa.port, "/strict/missing.js")[0] == 404


def test_try_files_named_location_answers(spa):
    assert get(spa.port, "/named/missing")[:3:2] == (200, b"from the named location")


def test_try_files_fallback_that_loops_ends_in_500(spa):
    start = time.monotonic()
    assert get(spa.port, "/loop/x")[0] == 500
    assert time.monotonic() - start < scaled(5)


@pytest.mark.parametrize("target", ["/%2e%2e/secret.txt", "/dir/%2e%2e/%2e%2e/secret.txt",
                                    "/%2E%2E%2fsecret.txt"])
def test_try_files_uri_with_encoded_dot_dot_never_leaves_the_root(spa, target):
    status, _, body = get(spa.port, target)
    assert b"outside the root" not in body, (target, status)


# ---------------------------------------------------------------- return


@pytest.fixture
def returns(start_server, docroot, tmp_path):
    users = htpasswd(tmp_path / "htpasswd")
    return start_server(docroot, conf=top(docroot) +
                        "server {\n"
                        '  auth_basic "Staff";\n'
                        f'  auth_basic_user_file "{users}";\n'
                        "  location /old/ { return 301 https://example.org$request_uri; }\n"
                        "  location = /moved { return https://example.org/new; }\n"
                        '  location = /ok { return 200 "plain text"; }\n'
                        '  location = /no { return 403 "go away"; }\n'
                        "}\n")


def test_return_301_with_a_url_and_request_uri(returns):
    status, h, _ = get(returns.port, "/old/page?x=1")
    assert (status, h.get("location")) == (301, "https://example.org/old/page?x=1")


def test_return_with_a_bare_url_is_302(returns):
    status, h, _ = get(returns.port, "/moved")
    assert (status, h.get("location")) == (302, "https://example.org/new")


def test_return_200_with_text_answers_the_text(returns):
    assert get(returns.port, "/ok")[:3:2] == (200, b"plain text")


def test_return_403_with_text_answers_the_text(returns):
    assert get(returns.port, "/no")[:3:2] == (403, b"go away")


def test_location_return_comes_before_auth(returns):
    """The server asks for a password, but return answers before the access phase."""
    assert get(returns.port, "/ok")[0] == 200
    assert get(returns.port, "/anything-else")[0] == 401


def test_server_return_wins_over_every_location(start_server, docroot):
    (docroot / "index.html").write_text("never")
    s = start_server(docroot, conf=top(docroot) +
                     "server {\n  return 301 https://elsewhere.example$request_uri;\n"
                     '  location = /exact { return 200 "exact"; }\n'
                     "  location ^~ /stop/ { }\n"
                     '  location ~ \\.txt$ { return 200 "regex"; }\n'
                     "  location / { }\n}\n")
    for target in ("/exact", "/stop/a", "/a.txt", "/", "/index.html"):
        status, h, _ = get(s.port, target)
        assert (status, h.get("location")) == (301, "https://elsewhere.example" + target)


# ---------------------------------------------------------------- regex locations (PCRE2)


@pytest.fixture
def regexes(start_server, docroot, tmp_path):
    site_dir(docroot, "img", {"cat.png": "a cat", "users/bob.txt": "bob's file"})
    return start_server(docroot, conf=top(docroot) +
                        "server {\n"
                        '  location ~ ^/num/(\\w+)/(\\d+)$ { return 200 "$2:$1"; }\n'
                        '  location ~ ^/named/(?<user>[a-z]+)$ { return 200 "user $user"; }\n'
                        "  location ~ ^/go/(.*)$ { return 302 https://example.org/$1; }\n"
                        "  location ~ ^/try/(.+)$ { try_files /img/$1 =404; }\n"
                        "  location ~ ^/kept/(?<n>[a-z.]+)$ {\n"
                        "    add_header X-Name $n;\n"
                        "    try_files /img/$1 =404;\n"
                        "  }\n"
                        "  location ~ ^/hdr/([a-z]+) {\n"
                        "    add_header X-Cap $1;\n"
                        '    return 200 "h";\n'
                        "  }\n"
                        '  location ~ ^/order/a { return 200 "first"; }\n'
                        '  location ~ ^/order/ { return 200 "second"; }\n'
                        '  location ~* \\.PNG$ { return 200 "png any case"; }\n'
                        '  location ~ (?i)^/inline/x$ { return 200 "inline"; }\n'
                        "  location ~ /\\.(?!well-known) { return 403; }\n"
                        '  location ~ \\.php$ { return 200 "php"; }\n'
                        '  location ~ ^/slow/(a+)+$ { return 200 "never"; }\n'
                        '  location / { return 200 "prefix"; }\n'
                        "}\n")


def body_of(port, target):
    status, _, body = get(port, target)
    return status, body


def test_regex_numbered_captures_expand_in_return_text(regexes):
    assert body_of(regexes.port, "/num/abc/42") == (200, b"42:abc")


def test_regex_captures_hold_for_a_path_seen_again(regexes):
    """The thread's memo of recent answers skips the search, not the captures."""
    for _ in range(3):
        assert body_of(regexes.port, "/num/again/7") == (200, b"7:again")


def test_regex_named_capture_expands_as_its_name(regexes):
    assert body_of(regexes.port, "/named/alice") == (200, b"user alice")


def test_regex_capture_in_a_return_redirect(regexes):
    status, h, _ = get(regexes.port, "/go/a/b?x=1")
    assert (status, h.get("location")) == (302, "https://example.org/a/b")


def test_regex_capture_in_try_files_picks_the_file(regexes):
    assert body_of(regexes.port, "/try/users/bob.txt") == (200, b"bob's file")
    assert get(regexes.port, "/try/nobody.txt")[0] == 404


def test_regex_captures_outlive_the_path_try_files_picks(regexes):
    """The file found becomes the path; add_header still sees the captures of the path the
    regex matched, as nginx's."""
    status, h, body = get(regexes.port, "/kept/cat.png")
    assert (status, body, h.get("x-name")) == (200, b"a cat", "cat.png")


def test_regex_capture_in_add_header(regexes):
    status, h, _ = get(regexes.port, "/hdr/word/rest")
    assert (status, h.get("x-cap")) == (200, "word")


def test_regex_locations_first_in_file_order_wins(regexes):
    assert body_of(regexes.port, "/order/abc") == (200, b"first")
    assert body_of(regexes.port, "/order/xyz") == (200, b"second")


def test_regex_tilde_star_ignores_case(regexes):
    assert body_of(regexes.port, "/img/cat.png") == (200, b"png any case")


def test_regex_inline_caseless_option(regexes):
    assert body_of(regexes.port, "/INLINE/X") == (200, b"inline")


def test_regex_negative_lookahead_spares_well_known(regexes):
    assert get(regexes.port, "/.git/config")[0] == 403
    assert body_of(regexes.port, "/.well-known/acme") == (200, b"prefix")


def test_regex_dollar_does_not_match_before_a_decoded_final_newline(regexes):
    r"""`\.php$` takes /x.php, not /x.php%0A (PCRE2_DOLLAR_ENDONLY; nginx's PCRE does)."""
    assert body_of(regexes.port, "/x.php") == (200, b"php")
    assert body_of(regexes.port, "/x.php%0A") == (200, b"prefix")


def test_regex_over_its_match_limit_is_500_and_logged(regexes):
    target = "/slow/" + "a" * 60 + "b"
    assert get(regexes.port, target)[0] == 500
    assert wait_until(lambda: "over its limits" in regexes.error_log(), scaled(5)), \
        regexes.error_log()[-2000:]
    assert body_of(regexes.port, "/num/x/1") == (200, b"1:x")  # still answering


def test_regex_over_its_limit_does_not_hold_the_server(regexes):
    """Requests that each hit the limit, then an ordinary one: it is answered while the
    others are bounded (a generous bound: the property is "bounded", not "fast")."""
    target = "/slow/" + "a" * 4000 + "b"
    start = time.monotonic()
    for _ in range(5):
        assert get(regexes.port, target)[0] == 500
    assert body_of(regexes.port, "/named/ok") == (200, b"user ok")
    assert time.monotonic() - start < scaled(20)


# ---------------------------------------------------------------- error_page


@pytest.fixture
def error_pages(start_server, docroot, tmp_path):
    root = site_dir(tmp_path, "site", {"404.html": "custom not found\n",
                                       "401.html": "custom unauthorized\n",
                                       "private/in.txt": "inside"})
    users = htpasswd(tmp_path / "htpasswd")
    return start_server(docroot, conf=top(docroot) +
                        f'server {{\n  root "{root}";\n'
                        "  error_page 404 /404.html;\n"
                        "  location /ok200/ { error_page 404 =200 /404.html; }\n"
                        "  location /own/ { error_page 404 = /own-answer; }\n"
                        "  location = /own-answer { return 302 /elsewhere; }\n"
                        "  location /nopage/ { error_page 404 /not-there.html; }\n"
                        "  location /tried/ { error_page 404 /tried/missing.html; "
                        "try_files $uri =404; }\n"
                        "  location /strict/ { try_files $uri =404; }\n"
                        "  location /private/ {\n"
                        '    auth_basic "Staff";\n'
                        f'    auth_basic_user_file "{users}";\n'
                        "    error_page 401 /401.html;\n  }\n"
                        "}\n")


def test_error_page_is_served_with_the_original_status(error_pages):
    assert get(error_pages.port, "/missing")[:3:2] == (404, b"custom not found\n")


def test_error_page_with_equals_200_answers_200(error_pages):
    assert get(error_pages.port, "/ok200/missing")[:3:2] == (200, b"custom not found\n")


def test_error_page_with_a_bare_equals_sends_the_pages_own_answer(error_pages):
    """nginx's `error_page 404 = /x;`: the status is the page's (here a redirect)."""
    status, headers, _ = get(error_pages.port, "/own/missing")
    assert status == 302
    assert headers["location"] == f"http://t:{error_pages.port}/elsewhere"


def test_missing_error_page_gives_the_plain_error(error_pages):
    status, _, body = get(error_pages.port, "/nopage/missing")
    assert status == 404
    assert b"custom" not in body


def test_error_page_that_is_itself_missing_does_not_loop(error_pages):
    start = time.monotonic()
    status, _, body = get(error_pages.port, "/tried/missing")
    assert status == 404
    assert b"custom" not in body
    assert time.monotonic() - start < scaled(5)


def test_post_to_a_missing_path_gets_the_error_page(error_pages):
    """As nginx: the file is looked for first, so a missing one is 404 (not 405)."""
    status, _, body = get(error_pages.port, "/missing", method="POST", body=b"a=1",
                          headers=[("Content-Type", "application/x-www-form-urlencoded")])
    assert (status, body) == (404, b"custom not found\n")


def test_post_refused_by_try_files_gets_the_error_page_by_get(error_pages):
    """The error page is fetched as a GET: static files do not answer POST."""
    status, _, body = get(error_pages.port, "/strict/missing", method="POST", body=b"a=1")
    assert (status, body) == (404, b"custom not found\n")


def test_auth_401_is_answered_by_its_error_page_with_the_challenge(error_pages):
    status, h, body = get(error_pages.port, "/private/in.txt")
    assert (status, body) == (401, b"custom unauthorized\n")
    assert h.get("www-authenticate", "").startswith('Basic realm="Staff"')
    assert get(error_pages.port, "/private/in.txt",
               headers=[basic("alice", "secret")])[:3:2] == (200, b"inside")


# ---------------------------------------------------------------- access per location


@pytest.fixture
def access(start_server, docroot, tmp_path):
    root = site_dir(tmp_path, "site", {"office/a.txt": "office", "closed/a.txt": "closed",
                                       "private/a.txt": "private", "open.txt": "open"})
    users = htpasswd(tmp_path / "htpasswd")
    return start_server(docroot, conf=top(docroot) +
                        f'server {{\n  root "{root}";\n'
                        "  location /office/ { allow 10.0.0.0/8; allow 127.0.0.1; deny all; }\n"
                        "  location /closed/ { deny all; }\n"
                        "  location /private/ {\n"
                        '    auth_basic "Staff only";\n'
                        f'    auth_basic_user_file "{users}";\n  }}\n'
                        "}\n")


def test_allow_lets_the_loopback_client_into_a_location(access):
    assert get(access.port, "/office/a.txt")[:3:2] == (200, b"office")


def test_deny_all_in_a_location_is_403_and_only_there(access):
    assert get(access.port, "/closed/a.txt")[0] == 403
    assert get(access.port, "/open.txt")[:3:2] == (200, b"open")


def test_auth_basic_in_a_location_protects_only_that_location(access):
    status, h, _ = get(access.port, "/private/a.txt")
    assert status == 401
    assert h.get("www-authenticate", "").startswith('Basic realm="Staff only"')
    assert get(access.port, "/private/a.txt", headers=[basic("alice", "secret")])[0] == 200
    assert get(access.port, "/private/a.txt", headers=[basic("alice", "wrong")])[0] == 401
    assert get(access.port, "/open.txt")[0] == 200


def test_auth_basic_off_in_an_inner_location_of_a_protected_server(start_server, docroot,
                                                                     tmp_path):
    root = site_dir(tmp_path, "site", {"public/a.txt": "public", "a.txt": "guarded"})
    users = htpasswd(tmp_path / "htpasswd")
    s = start_server(docroot, conf=top(docroot) +
                     f'server {{\n  root "{root}";\n  auth_basic "Staff";\n'
                     f'  auth_basic_user_file "{users}";\n'
                     "  location /public/ { auth_basic off; }\n}\n")
    assert get(s.port, "/public/a.txt")[:3:2] == (200, b"public")
    assert get(s.port, "/a.txt")[0] == 401


# ---------------------------------------------------------------- headers, types, listings


@pytest.fixture
def decorated(start_server, docroot, tmp_path):
    root = site_dir(tmp_path, "site", {"a.txt": "a", "own/a.txt": "own", "plain/a.txt": "plain",
                                       "assets/app.css": "css", "raw/README": "raw",
                                       "files/f.txt": "f", "nolist/f.txt": "f"})
    # mime_magic off: README's content must not decide its type.
    return start_server(docroot, conf=top(docroot) + "mime_magic off;\n" +
                        f'server {{\n  root "{root}";\n'
                        "  add_header X-Server yes;\n"
                        "  add_header X-Also yes;\n"
                        "  location /own/ { add_header X-Own yes; }\n"
                        "  location /plain/ { }\n"
                        "  location /assets/ { expires 1y; }\n"
                        "  location /raw/ { default_type text/x-raw; }\n"
                        "  location /files/ { autoindex on; }\n"
                        "}\n")


def test_location_with_its_own_add_header_drops_the_servers_list(decorated):
    _, h, _ = get(decorated.port, "/own/a.txt")
    assert h.get("x-own") == "yes"
    assert "x-server" not in h and "x-also" not in h


def test_location_without_add_header_inherits_the_servers_list(decorated):
    for target in ("/plain/a.txt", "/a.txt"):
        _, h, _ = get(decorated.port, target)
        assert (h.get("x-server"), h.get("x-also")) == ("yes", "yes"), target


def test_expires_applies_only_in_its_location(decorated):
    _, h, _ = get(decorated.port, "/assets/app.css")
    assert h.get("cache-control") == "max-age=31536000"
    assert "expires" in h
    _, h, _ = get(decorated.port, "/a.txt")
    assert "max-age" not in h.get("cache-control", "") and "expires" not in h


def test_default_type_applies_only_in_its_location(decorated):
    # A text type: the charset is added, as to every text type lfhttpd names.
    assert get(decorated.port, "/raw/README")[1].get("content-type") == \
        "text/x-raw; charset=utf-8"
    assert get(decorated.port, "/a.txt")[1].get("content-type", "").startswith("text/plain")


def test_autoindex_on_in_one_location_only(decorated):
    status, _, body = get(decorated.port, "/files/")
    assert status == 200 and b"f.txt" in body
    assert get(decorated.port, "/nolist/")[0] in (403, 404)


# ---------------------------------------------------------------- handlers and CGI


@pytest.fixture
def programs(start_server, docroot, tmp_path):
    cgi = tmp_path / "cgi"
    cgi.mkdir()
    for name, body in (("env.sh", 'printf "Content-Type: text/plain\\n\\n%s|%s" '
                                  '"$SCRIPT_NAME" "$PATH_INFO"\n'),
                       ("cat.sh", 'printf "Content-Type: text/plain\\n\\n"\nexec cat\n')):
        p = cgi / name
        p.write_text("#!/bin/sh\n" + body)
        p.chmod(0o755)
    return start_server(docroot, conf=top(docroot) +
                        "server {\n"
                        "  location /api/ping { handler hello; }\n"
                        f'  location /app/cgi-bin/ {{ cgi "{cgi}"; }}\n'
                        "}\n")


def test_handler_in_a_location_answers_there(programs):
    assert get(programs.port, "/api/ping")[:3:2] == (200, b"Hello, world!\n")
    assert get(programs.port, "/api/other")[0] == 404


def test_cgi_script_in_a_location_gets_the_prefix_in_script_name(programs):
    status, _, body = get(programs.port, "/app/cgi-bin/env.sh/more")
    assert (status, body) == (200, b"/app/cgi-bin/env.sh|/more")


def test_post_to_a_cgi_location_reaches_the_script(programs):
    status, _, body = get(programs.port, "/app/cgi-bin/cat.sh", method="POST",
                          body=b"posted body")
    assert (status, body) == (200, b"posted body")


# ---------------------------------------------------------------- a root that does not exist


@pytest.fixture
def missing_roots(start_server, docroot, tmp_path):
    """A server whose root, a location's root and a location's alias do not exist."""
    (docroot / "here.txt").write_text("here\n")
    return start_server(docroot, conf=top(docroot) +
                        "server {\n  server_name a;\n"
                        f'  location /r/ {{ root "{tmp_path}/no-root"; }}\n'
                        f'  location /al/ {{ alias "{tmp_path}/no-alias/"; }}\n'
                        "}\n"
                        f'server {{\n  server_name b;\n  root "{tmp_path}/no-server-root";\n}}\n')


def test_a_location_root_that_does_not_exist_answers_404(missing_roots):
    assert get(missing_roots.port, "/r/x.txt", host="a")[0] == 404


def test_a_location_alias_that_does_not_exist_answers_404(missing_roots):
    assert get(missing_roots.port, "/al/x.txt", host="a")[0] == 404


def test_a_server_root_that_does_not_exist_answers_404(missing_roots):
    assert get(missing_roots.port, "/here.txt", host="b")[0] == 404


def test_a_request_under_a_missing_root_logs_its_path_and_the_root(missing_roots, tmp_path):
    get(missing_roots.port, "/r/x.txt", host="a")
    assert wait_until(lambda: f'"/r/x.txt": root "{tmp_path}/no-root" does not exist'
                      in missing_roots.error_log(), scaled(5)), missing_roots.error_log()


def test_the_servers_other_locations_still_serve_beside_a_missing_root(missing_roots):
    assert get(missing_roots.port, "/here.txt", host="a")[::2] == (200, b"here\n")


def test_check_passes_with_a_notice_naming_a_missing_location_root(tmp_path):
    r, conf = check_conf(tmp_path, conf_with_server(
        tmp_path, f'  location /x/ {{\n    root "{tmp_path}/gone";\n  }}\n'))
    assert r.returncode == 0, r.stderr
    assert f'notice: {conf}:6: root "{tmp_path}/gone": No such file or directory' in r.stderr


# ---------------------------------------------------------------- lfhttpd -t


def conf_with_server(tmp_path, inside, before=""):
    return (f'listen 127.0.0.1:0;\nroot "{tmp_path}";\n{before}'
            f"server {{\n  server_name a.test;\n{inside}}}\n")


def test_check_names_alias_in_a_server(tmp_path):
    r, conf = check_conf(tmp_path, conf_with_server(tmp_path, f'  alias "{tmp_path}";\n'))
    assert r.returncode == 1
    assert f"{conf}:5:" in r.stderr and "alias" in r.stderr, r.stderr


def test_check_names_server_name_at_the_top_level(tmp_path):
    r, conf = check_conf(tmp_path, f'listen 127.0.0.1:0;\nroot "{tmp_path}";\n'
                                   "server_name a.test;\n")
    assert r.returncode == 1
    assert f"{conf}:3:" in r.stderr and "server_name" in r.stderr, r.stderr


def test_check_names_location_at_the_top_level(tmp_path):
    r, conf = check_conf(tmp_path, f'listen 127.0.0.1:0;\nroot "{tmp_path}";\n'
                                   "location / { }\n")
    assert r.returncode == 1
    assert f"{conf}:3:" in r.stderr and "location" in r.stderr, r.stderr


def test_check_names_a_duplicate_location(tmp_path):
    r, conf = check_conf(tmp_path, conf_with_server(tmp_path, "  location /a { }\n"
                                                              "  location ^~ /a { }\n"))
    assert r.returncode == 1
    assert f"{conf}:6:" in r.stderr and "duplicate" in r.stderr, r.stderr


def test_check_names_an_invalid_regex(tmp_path):
    r, conf = check_conf(tmp_path, conf_with_server(tmp_path, '  location ~ "(unclosed" { }\n'))
    assert r.returncode == 1
    assert f"{conf}:5:" in r.stderr, r.stderr


def test_check_gives_pcre2_message_and_offset_of_an_invalid_regex(tmp_path):
    r, conf = check_conf(tmp_path, conf_with_server(tmp_path, '  location ~ "^/a[b" { }\n'))
    assert r.returncode == 1
    assert (f'{conf}:5: location: invalid regular expression "^/a[b": missing terminating ] '
            "for character class at offset 5") in r.stderr, r.stderr


def test_check_refuses_an_unknown_variable_that_no_regex_names(tmp_path):
    r, conf = check_conf(tmp_path, conf_with_server(
        tmp_path, '  location ~ ^/(?<who>.+)$ { return 200 "$who $whom"; }\n'))
    assert r.returncode == 1
    assert f'{conf}:5:' in r.stderr and 'unknown "whom" variable' in r.stderr, r.stderr


def test_check_names_two_default_servers_on_one_address(tmp_path):
    port = free_port()
    r, conf = check_conf(tmp_path, f'root "{tmp_path}";\n'
                         f"server {{ listen 127.0.0.1:{port} default_server; }}\n"
                         f"server {{ listen 127.0.0.1:{port} default_server; }}\n")
    assert r.returncode == 1
    assert f"{conf}:3:" in r.stderr and "default" in r.stderr, r.stderr


def test_check_names_an_unreadable_htpasswd_file(tmp_path):
    missing = tmp_path / "no-such-htpasswd"
    r, conf = check_conf(tmp_path, conf_with_server(
        tmp_path, '  location /p/ {\n    auth_basic "x";\n'
                  f'    auth_basic_user_file "{missing}";\n  }}\n'))
    assert r.returncode == 1
    assert f"{conf}:7:" in r.stderr and str(missing) in r.stderr, r.stderr


def test_check_names_root_and_alias_in_one_location(tmp_path):
    r, conf = check_conf(tmp_path, conf_with_server(
        tmp_path, f'  location /x/ {{\n    root "{tmp_path}";\n    alias "{tmp_path}/";\n  }}\n'))
    assert r.returncode == 1
    assert f"{conf}:7:" in r.stderr and "alias" in r.stderr, r.stderr


# ---------------------------------------------------------------- reload


def test_reload_adds_a_location(start_server, docroot):
    text = top(docroot) + 'server {\n  location = /a { return 200 "a"; }\n}\n'
    s = start_server(docroot, conf=text)
    assert get(s.port, "/b")[0] == 404
    reload(s, text.replace('}\n}\n', '}\n  location = /b { return 200 "b"; }\n}\n'))
    assert get(s.port, "/b")[:3:2] == (200, b"b")
    assert get(s.port, "/a")[:3:2] == (200, b"a")


def test_reload_adds_a_server(start_server, docroot):
    text = top(docroot) + 'server { server_name a.test; return 200 "a"; }\n'
    s = start_server(docroot, conf=text)
    assert get(s.port, "/", host="b.test")[:3:2] == (200, b"a")
    reload(s, text + 'server { server_name b.test; return 200 "b"; }\n')
    assert get(s.port, "/", host="b.test")[:3:2] == (200, b"b")
    assert get(s.port, "/", host="a.test")[:3:2] == (200, b"a")


# ---------------------------------------------------------------- HEAD and keep-alive


def test_head_to_a_server_gets_its_headers_without_a_body(start_server, docroot, tmp_path):
    a = site_dir(tmp_path, "a", {"index.html": "site a\n"})
    b = site_dir(tmp_path, "b", {"index.html": "site b, longer\n"})
    s = start_server(docroot, conf=top(docroot) +
                     f'server {{ server_name a.test; root "{a}"; }}\n'
                     f'server {{ server_name b.test; root "{b}"; }}\n')
    with socket.create_connection(("127.0.0.1", s.port), timeout=scaled(10)) as sock:
        c = Client(sock)
        c.send(raw_request("HEAD", "/", "b.test", close=False))
        status, h, body, _ = c.read_response(head_only=True)
        assert (status, h.get("content-length"), body) == (200, "15", b"")
        c.send(raw_request("GET", "/", "a.test"))
        assert c.read_response()[2] == b"site a\n"  # nothing of a HEAD body came before


def test_keepalive_requests_to_different_hosts_each_reach_their_server(start_server, docroot,
                                                                       tmp_path):
    a = site_dir(tmp_path, "a", {"index.html": "site a\n"})
    b = site_dir(tmp_path, "b", {"index.html": "site b\n"})
    s = start_server(docroot, conf=top(docroot) +
                     f'server {{ server_name a.test; root "{a}"; }}\n'
                     f'server {{ server_name b.test; root "{b}"; }}\n')
    hosts = ["a.test", "b.test", "b.test", "a.test", "b.test", "a.test"]
    with socket.create_connection(("127.0.0.1", s.port), timeout=scaled(10)) as sock:
        c = Client(sock)
        # Pipelined, then one by one: each answer is its own Host's.
        c.send(b"".join(raw_request("GET", "/", h, close=False) for h in hosts[:3]))
        for h in hosts[:3]:
            assert c.read_response()[2] == f"site {h[0]}\n".encode(), h
        for h in hosts[3:]:
            c.send(raw_request("GET", "/", h, close=False))
            assert c.read_response()[2] == f"site {h[0]}\n".encode(), h


# ---------------------------------------------------------------- header injection


@pytest.fixture
def redirects(start_server, docroot):
    return start_server(docroot, conf=top(docroot) +
                        "server {\n"
                        "  location /r/ { return 302 https://example.org$uri; }\n"
                        "  location /h/ { add_header X-Uri $uri; return 200 ok; }\n"
                        "  error_page 404 https://example.org/missing$uri;\n"
                        "}\n")


CRLF_TARGET = "/r/a%0d%0aSet-Cookie:%20x=1"


def test_return_location_cannot_be_split_by_a_decoded_crlf(redirects):
    status, headers, _ = get(redirects.port, CRLF_TARGET)
    assert status == 302
    assert "set-cookie" not in headers
    assert headers["location"] == "https://example.org/r/a%0D%0ASet-Cookie: x=1"


def test_add_header_value_cannot_be_split_by_a_decoded_crlf(redirects):
    status, headers, _ = get(redirects.port, "/h/a%0d%0aX-Injected:%20yes")
    assert status == 200
    assert "x-injected" not in headers
    assert headers["x-uri"] == "/h/a%0D%0AX-Injected: yes"


def test_error_page_url_cannot_be_split_by_a_decoded_crlf(redirects):
    status, headers, _ = get(redirects.port, "/nothing%0d%0aX-Injected:%20yes")
    assert status == 302
    assert "x-injected" not in headers
    assert headers["location"] == "https://example.org/missing/nothing%0D%0AX-Injected: yes"


# ---------------------------------------------------------------- arguments on redirects


@pytest.fixture
def args_site(start_server, docroot, tmp_path):
    root = site_dir(tmp_path, "site", {"sub/index.html": "sub\n"})
    return start_server(docroot, conf=top(docroot) +
                        f'server {{\n  root "{root}";\n'
                        "  location / { try_files $uri /show?from=$uri; }\n"
                        "  location = /show { return 200 \"args=$args\"; }\n"
                        "  location /keep/ { try_files $uri /show; }\n"
                        "}\n")


def test_try_files_uri_with_args_replaces_the_requests_args(args_site):
    status, _, body = get(args_site.port, "/missing?x=1")
    assert (status, body) == (200, b"args=from=/missing")


def test_try_files_uri_without_args_keeps_the_requests_args(args_site):
    status, _, body = get(args_site.port, "/keep/missing?x=1")
    assert (status, body) == (200, b"args=x=1")


def test_args_from_a_decoded_uri_are_percent_encoded(args_site):
    """A space or a CR decoded from the path cannot enter the arguments as it is."""
    status, _, body = get(args_site.port, "/a%20b%0d")
    assert (status, body) == (200, b"args=from=/a%20b%0D")


def test_only_server_of_an_address_with_a_regex_name_keeps_its_groups(start_server, docroot):
    """The address's only server answers any Host; its `server_name ~RE` still gives $1 and
    $name of a Host it matches (and nothing of one it does not)."""
    import http.client
    s = start_server(docroot, "server {\n"
                     "  server_name ~^(?<sub>[a-z]+)\\.one\\.test$;\n"
                     "  location / { return 200 \"sub=$sub n=$1\\n\"; }\n"
                     "}\n")

    def body(host):
        c = http.client.HTTPConnection(s.host, s.port, timeout=10)
        try:
            c.request("GET", "/", headers={"Host": host})
            return c.getresponse().read().decode()
        finally:
            c.close()
    assert body("abc.one.test") == "sub=abc n=abc\n"
    assert body("other.test") == "sub= n=\n"
