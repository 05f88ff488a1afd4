"""A real PHP application behind fastcgi_pass: DokuWiki (Debian's dokuwiki package), served
with the server block DokuWiki's own documentation gives for nginx
(https://www.dokuwiki.org/install:nginx), only its paths and listen port adapted; the
same block runs on nginx, against the same PHP-FPM pool and wiki, and every check is
made on both; a list of anonymous visits is compared answer for answer. The block's
`internal` /data/ location is there for DokuWiki's X-Accel-Redirect (its `xsendfile`
setting for nginx), which a request of the tests turns on with a header field of theirs.

The wiki is a private, writable copy made for the test: the package's code
(/usr/share/dokuwiki, its symlinked lib/plugins and lib/tpl followed) in a temporary
directory, without the package's inc/preload.php (which points the wiki at /etc/dokuwiki
and /var/lib/dokuwiki), so that DokuWiki finds conf/ and data/ in its own directory, as
upstream lays it out and as the documented deny rules expect. conf/ starts from the
package's defaults with a local.php, an ACL and a users.auth.php of the test's (user
`admin`); data/ is made empty, with one start page. PHP-FPM keeps its sessions and
uploads in the test's directory too: nothing is written outside it."""
import hashlib
import http.cookiejar
import json
import os
import re
import shutil
import urllib.error
import urllib.parse
import urllib.request

import pytest

from conftest import Nginx, Server, check_clean_exit, scaled
from fastcgi_harness import Fpm, with_conf_files

PACKAGE = "/usr/share/dokuwiki"
PACKAGE_CONF = "/etc/dokuwiki"

# DokuWiki's nginx server block, as its install:nginx page gives it; {listen}, {root} and
# {sock} are the adapted parts. The deny line is the one the page says to uncomment after
# the installer has run.
SERVER_BLOCK = r"""
server {
    listen {listen};
    server_name wiki.example.org;

    # Maximum file upload size is 4MB - change accordingly if needed
    client_max_body_size 4M;
    client_body_buffer_size 128k;

    root {root};
    index doku.php;

    #Remember to comment the below out when you're installing, and uncomment it when done.
    location ~ /(conf/|bin/|inc/|vendor/|install.php) { deny all; }

    #Support for X-Accel-Redirect
    location ~ ^/data/ { internal ; }

    location ~ ^/lib.*\.(js|css|gif|png|ico|jpg|jpeg)$ {
        expires 365d;
    }

    location / { try_files $uri $uri/ @dokuwiki; }

    location @dokuwiki {
        # rewrites "doku.php/" out of the URLs if you set the userwrite setting to .htaccess in dokuwiki config page
        rewrite ^/_media/(.*) /lib/exe/fetch.php?media=$1 last;
        rewrite ^/_detail/(.*) /lib/exe/detail.php?media=$1 last;
        rewrite ^/_export/([^/]+)/(.*) /doku.php?do=export_$1&id=$2 last;
        rewrite ^/(.*) /doku.php?id=$1&$args last;
    }

    location ~ \.php$ {
        try_files $uri $uri/ /doku.php;
        include fastcgi_params;
        fastcgi_param SCRIPT_FILENAME $document_root$fastcgi_script_name;
        fastcgi_param REDIRECT_STATUS 200;
        fastcgi_pass unix:{sock};
    }
}
"""

ADMIN, PASSWORD = "admin", "wiki-admin-secret"
START_TEXT = "====== Test wiki ======\n\nThis wiki answers through **FastCGI**.\n"

LOCAL_PHP = """<?php
$conf['title'] = 'lfhttpd test wiki';
$conf['savedir'] = './data';
$conf['useacl'] = 1;
$conf['authtype'] = 'authplain';
$conf['superuser'] = '@admin';
$conf['userewrite'] = 1;
$conf['useslash'] = 1;
$conf['updatecheck'] = 0;
// fetch.php hands a file to the server with X-Accel-Redirect (the X-Accel-Redirect
// setting for nginx) on requests that ask for it with this test's own header field.
$conf['xsendfile'] = empty($_SERVER['HTTP_X_TEST_XSENDFILE']) ? 0 : 3;
"""

ACL = """# acl.auth.php
# <?php exit()?>
*               @ALL          1
*               @user         16
"""

# What init_paths() wants in the savedir.
DATA_DIRS = ("pages", "attic", "media", "media_attic", "media_meta", "meta", "cache",
             "index", "locks", "tmp", "log")


def readable(directory, names):
    """copytree's ignore: what this user cannot read (the package's testing plugin is
    root's alone)."""
    return [n for n in names if not os.access(os.path.join(directory, n), os.R_OK)]


def make_wiki(base):
    """A private DokuWiki in base/wiki: code, conf/ and data/, all writable."""
    root = os.path.join(base, "wiki")
    shutil.copytree(PACKAGE, root, symlinks=False, ignore=readable)
    os.remove(os.path.join(root, "inc", "preload.php"))  # the package's /etc/dokuwiki
    conf = os.path.join(root, "conf")
    os.makedirs(conf)
    for name in os.listdir(PACKAGE_CONF):
        src = os.path.join(PACKAGE_CONF, name)
        if (name.endswith((".php", ".conf", ".css", ".json")) and os.path.isfile(src)
                and not os.path.islink(src) and name not in ("apache.conf", "lighttpd.conf",
                                                            "local.php")):
            shutil.copy(src, conf)
    with open(os.path.join(conf, "local.php"), "w") as f:
        f.write(LOCAL_PHP)
    with open(os.path.join(conf, "acl.auth.php"), "w") as f:
        f.write(ACL)
    with open(os.path.join(conf, "users.auth.php"), "w") as f:
        md5 = hashlib.md5(PASSWORD.encode()).hexdigest()  # a hash authplain reads
        f.write(f"# users.auth.php\n# <?php exit()?>\n"
                f"{ADMIN}:{md5}:Wiki Administrator:admin@example.org:admin,user\n")
    data = os.path.join(root, "data")
    for d in DATA_DIRS:
        os.makedirs(os.path.join(data, d))
    with open(os.path.join(data, "pages", "start.txt"), "w") as f:
        f.write(START_TEXT)
    return root


@pytest.fixture(scope="module")
def wiki(tmp_path_factory):
    """(document root, PHP-FPM) for the module: one wiki copy, one pool."""
    if not os.path.exists(os.path.join(PACKAGE, "doku.php")):
        pytest.fail("DokuWiki is not installed (make check-deps installs Debian's dokuwiki)")
    base = str(tmp_path_factory.mktemp("dokuwiki"))
    root = make_wiki(base)
    php = os.path.join(base, "php")
    for d in ("sessions", "uploads"):
        os.makedirs(os.path.join(php, d))
    fpm = Fpm(os.path.join(base, "fpm"), extra=(
        f"php_admin_value[session.save_path] = {php}/sessions\n"
        f"php_admin_value[upload_tmp_dir] = {php}/uploads\n"
        f"php_admin_value[sys_temp_dir] = {php}/uploads\n"))
    yield root, fpm
    fpm.stop()


# Both servers get nginx's stock type table, as Debian's nginx.conf includes it; lfhttpd's
# file has nginx's http { } around the server, as a site brought from nginx has.
TYPES = "include /etc/nginx/mime.types;\ndefault_type application/octet-stream;\n"


class Site:
    """The documented server block on `kind` (lfhttpd or nginx) in directory d, serving
    the wiki through the pool: .url; stop() checks lfhttpd's exit."""

    def __init__(self, kind, d, wiki):
        root, fpm = wiki
        with_conf_files(d)
        text = TYPES + SERVER_BLOCK.replace("{root}", root).replace("{sock}", fpm.sock)
        if kind == "lfhttpd":
            self.server = Server(d, None, conf=(
                "threads 2;\nerror_log stderr debug;\nshutdown_timeout 5s;\n"
                f'http {{\naccess_log "{d}/access.log";\n'
                + text.replace("{listen}", "127.0.0.1:0") + "}\n"))
            self.url = self.server.url
        else:
            self.server = Nginx(d, None, text.replace("{listen}", "127.0.0.1:{port0}"),
                                http=True)
            self.url = f"http://{self.server.host}:{self.server.port}"

    def stop(self):
        if isinstance(self.server, Server):
            check_clean_exit(self.server)
        else:
            self.server.stop()


@pytest.fixture(scope="module", params=["lfhttpd", "nginx"])
def site(request, wiki, tmp_path_factory):
    """The documented server block on lfhttpd, then on nginx: the wiki's base URL."""
    s = Site(request.param, str(tmp_path_factory.mktemp(request.param)), wiki)
    yield s.url
    s.stop()


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


class Browser:
    """A cookie jar and a base URL: get/post answer (status, headers, body), redirects
    not followed (the test follows the ones it expects)."""

    def __init__(self, base):
        self.base = base
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar),
                                                  NoRedirect())

    def open(self, path, data=None, headers=None):
        req = urllib.request.Request(self.base + path, data=data, headers=headers or {})
        try:
            with self.opener.open(req, timeout=scaled(20)) as r:
                return r.status, r.headers, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.headers, e.read()

    def get(self, path):
        return self.open(path)

    def post(self, path, fields):
        return self.open(path, urllib.parse.urlencode(fields).encode(),
                         {"Content-Type": "application/x-www-form-urlencoded"})

    def post_multipart(self, path, fields, files):
        boundary = "----lfhttpd-dokuwiki-" + hashlib.md5(os.urandom(8)).hexdigest()
        parts = []
        for name, value in fields.items():
            parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"'
                         f"\r\n\r\n{value}\r\n".encode())
        for name, (filename, ctype, content) in files.items():
            parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; '
                         f'filename="{filename}"\r\nContent-Type: {ctype}\r\n\r\n'.encode()
                         + content + b"\r\n")
        body = b"".join(parts) + f"--{boundary}--\r\n".encode()
        return self.open(path, body,
                         {"Content-Type": f"multipart/form-data; boundary={boundary}"})


def form_fields(html, form_id):
    """The named inputs of the form with id `form_id`: {name: value}."""
    m = re.search(r'<form\b[^>]*\bid="%s".*?</form>' % re.escape(form_id), html, re.S)
    assert m, f"no form {form_id} in the page"
    fields = {}
    for tag in re.findall(r"<input\b[^>]*>", m.group(0)):
        name = re.search(r'\bname="([^"]*)"', tag)
        value = re.search(r'\bvalue="([^"]*)"', tag)
        if name:
            fields[name.group(1)] = value.group(1) if value else ""
    return fields


def sectok(html):
    m = re.search(r'name="sectok" value="([0-9a-f]*)"', html)
    assert m, "no sectok in the page"
    return m.group(1)


def logged_in(base):
    """A Browser logged in as the admin, through the login form."""
    b = Browser(base)
    status, _, body = b.get("/start?do=login")
    assert status == 200, body[:300]
    fields = form_fields(body.decode(), "dw__login")
    fields.update({"u": ADMIN, "p": PASSWORD})
    status, headers, body = b.post("/start?do=login", fields)
    assert status == 302, body[:500]
    return b


def test_start_page_renders_as_dokuwiki_html(site):
    status, headers, body = Browser(site).get("/")
    html = body.decode()
    assert status == 200
    assert headers["Content-Type"].startswith("text/html")
    assert '<meta name="generator" content="DokuWiki"' in html
    assert "This wiki answers through <strong>FastCGI</strong>." in html
    assert "lfhttpd test wiki" in html


@pytest.mark.parametrize("path", ["/conf/local.php", "/conf/users.auth.php", "/conf/",
                                  "/bin/dwpage.php", "/inc/init.php", "/vendor/autoload.php",
                                  "/install.php"])
def test_documented_denials_answer_403(site, path):
    status, _, body = Browser(site).get(path)
    assert status == 403
    assert b"authplain" not in body and b"$conf" not in body


def test_data_directory_is_internal_only(site):
    status, _, body = Browser(site).get("/data/pages/start.txt")
    assert status == 404
    assert b"FastCGI" not in body


def test_template_asset_is_static_with_a_year_of_expiry(site):
    path = "/lib/tpl/dokuwiki/images/logo.png"
    status, headers, body = Browser(site).get(path)
    assert status == 200
    with open(os.path.join(PACKAGE, path.lstrip("/")), "rb") as f:
        assert body == f.read()
    assert headers["Cache-Control"] == "max-age=31536000"


def test_login_as_admin_succeeds(site):
    b = logged_in(site)
    assert any(c.name.startswith("DW") for c in b.jar), [c.name for c in b.jar]
    status, _, body = b.get("/start")
    html = body.decode()
    assert status == 200
    assert "do=logout" in html
    assert "do=admin" in html  # the superuser's menu


def test_login_with_a_wrong_password_is_refused(site):
    b = Browser(site)
    _, _, body = b.get("/start?do=login")
    fields = form_fields(body.decode(), "dw__login")
    fields.update({"u": ADMIN, "p": "not-the-password"})
    status, _, body = b.post("/start?do=login", fields)
    assert status == 403  # DokuWiki's answer to a failed login
    assert "username or password was wrong" in body.decode()
    assert "do=logout" not in body.decode()


def test_edit_is_saved_and_read_back_at_the_nice_url(site, request):
    kind = request.node.callspec.id.replace("-", "_")
    page = "playground/" + kind
    b = logged_in(site)
    status, _, body = b.get(f"/{page}?do=edit")
    assert status == 200
    fields = form_fields(body.decode(), "dw__editform")
    assert fields["id"] == page.replace("/", ":")
    text = f"Saved through **{kind}** at its nice address.\n"
    fields.update({"wikitext": text, "summary": "test", "do": "save"})
    status, headers, body = b.post("/doku.php", fields)
    assert status == 302, body[:500]
    assert headers["Location"] == f"{site}/{page}"
    status, _, body = b.get(f"/{page}")
    assert status == 200
    html = body.decode()
    page_text = html[html.find("<!-- wikipage start"):][:400]
    assert f"Saved through <strong>{kind}</strong> at its nice address." in html, page_text
    status, _, raw = b.get(f"/_export/raw/{page}")
    assert (status, raw.decode()) == (200, text)


def upload(b, name, content):
    """Upload content as wiki:name through the media manager's AJAX call."""
    _, _, body = b.get("/start?do=media&ns=wiki")
    token = sectok(body.decode())
    status, _, body = b.post_multipart(
        "/lib/exe/ajax.php",
        {"call": "mediaupload", "sectok": token, "ns": "wiki", "mediaid": name, "ow": "1"},
        {"qqfile": (name, "image/png", content)})
    assert status == 200, body[:500]
    answer = json.loads(body)
    assert answer.get("success") is True, answer
    assert answer["id"] == f"wiki:{name}"


def png_bytes():
    """Binary, every byte value: a PNG's signature, then noise."""
    return b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 300 + os.urandom(4096)


def test_media_upload_is_fetched_back_byte_for_byte(site, request):
    name = "upload_" + request.node.callspec.id.replace("-", "_") + ".png"
    content = png_bytes()
    b = logged_in(site)
    upload(b, name, content)
    for path in (f"/_media/wiki:{name}", f"/lib/exe/fetch.php?media=wiki:{name}"):
        status, headers, got = b.get(path)
        assert status == 200, path
        assert headers["Content-Type"] == "image/png", path
        assert got == content, path


def test_media_upload_just_under_client_max_body_size_is_whole(site, request):
    name = "large_" + request.node.callspec.id.replace("-", "_") + ".png"
    content = b"\x89PNG\r\n\x1a\n" + os.urandom((4 << 20) - 8 - 2048)  # the form's fields fit
    b = logged_in(site)
    upload(b, name, content)
    status, _, got = b.get(f"/_media/wiki:{name}")
    assert status == 200 and got == content


def test_media_upload_over_client_max_body_size_is_413(site):
    b = logged_in(site)
    _, _, body = b.get("/start?do=media&ns=wiki")
    status, _, _ = b.post_multipart(
        "/lib/exe/ajax.php",
        {"call": "mediaupload", "sectok": sectok(body.decode()), "ns": "wiki"},
        {"qqfile": ("big.png", "image/png", os.urandom((4 << 20) + 1))})
    assert status == 413


def test_media_handed_over_by_x_accel_redirect_is_the_file(site, request):
    """DokuWiki's xsendfile for nginx: fetch.php answers X-Accel-Redirect to the file
    under /data/ (the documented `internal` location), and the server sends it, with
    the application's type, disposition and caching, and the client's range."""
    name = "accel_" + request.node.callspec.id.replace("-", "_") + ".png"
    content = png_bytes()
    b = logged_in(site)
    upload(b, name, content)
    asks = {"X-Test-Xsendfile": "1"}
    status, headers, got = b.open(f"/_media/wiki:{name}", headers=asks)
    assert status == 200
    assert got == content
    assert headers["Content-Type"] == "image/png"
    assert headers["Content-Disposition"].startswith("inline;")
    assert "max-age" in headers["Cache-Control"]
    status, headers, got = b.open(f"/lib/exe/fetch.php?media=wiki:{name}",
                                  headers=dict(asks, Range="bytes=8-263"))
    assert (status, got) == (206, content[8:264])
    status, _, got = Browser(site).open(f"/data/media/wiki/{name}")
    assert status == 404  # the internal location, asked directly


# What an anonymous visitor may ask: pages through the rewrite, the PHP entry points, the
# denied and internal directories (with and without their slash, and spelt otherwise),
# directories with no index, static files of the template, and PHP scripts that are not
# there (try_files falls back to /doku.php).
VISITS = ["/", "/start", "/doku.php", "/doku.php?id=start", "/start?do=index",
          "/start?do=recent", "/wiki/not_written_yet", "/_export/raw/start",
          "/_export/xhtml/start", "/_detail/wiki:missing.png", "/_media/wiki:missing.png",
          "/lib/exe/fetch.php?media=wiki:missing.png", "/lib/exe/css.php",
          "/lib/exe/js.php", "/lib/exe/taskrunner.php?id=start", "/feed.php",
          "/lib/exe/not_there.php", "/not_there.php", "/doku.php/start", "/conf", "/conf/",
          "/data", "/data/", "/data/pages/start.txt", "/%63onf/local.php",
          "/lib/plugins/../../conf/local.php", "/inc", "/bin/", "/vendor/",
          "/install.php?step=1", "/lib/", "/lib/tpl/dokuwiki/images/",
          "/lib/tpl/dokuwiki/images/logo.png", "/lib/tpl/dokuwiki/style.ini",
          "/lib/tpl/dokuwiki/script.js", "/.htaccess", "/VERSION", "/lib/images/",
          # DokuWiki's own compression and conditional answers, relayed
          ("/lib/exe/css.php", {"Accept-Encoding": "gzip"}),
          ("/lib/exe/js.php", {"Accept-Encoding": "gzip"}),
          ("/lib/exe/css.php", {"If-Modified-Since": "Fri, 01 Jan 2100 00:00:00 GMT"}),
          ("/lib/tpl/dokuwiki/images/logo.png", {"Range": "bytes=0-99"})]

# The parts of an answer that do not depend on the time or on a session.
COMPARED = ("Content-Type", "Location", "Cache-Control", "Content-Encoding", "Content-Range")


def visit(base, path, asks=None):
    status, headers, body = Browser(base).open(path, headers=asks)
    seen = {h: (headers.get(h) or "").replace(base, "BASE") for h in COMPARED}
    return status, seen, body


def test_anonymous_visits_answer_as_under_nginx(wiki, tmp_path):
    lf = Site("lfhttpd", str(tmp_path / "lf"), wiki)
    ng = Site("nginx", str(tmp_path / "ng"), wiki)
    try:
        differences = []
        for path in VISITS:
            path, asks = path if isinstance(path, tuple) else (path, None)
            a, b = visit(lf.url, path, asks), visit(ng.url, path, asks)
            if a[:2] != b[:2]:
                differences.append((path, a[:2], b[:2]))
            elif a[0] == 200 and a[2] != b[2] and \
                    path.startswith(("/lib/tpl/", "/_export/raw/", "/VERSION", "/.ht")):
                differences.append((path, "body differs"))
        assert differences == [], "\n".join(map(repr, differences))
    finally:
        lf.stop()
        ng.stop()


# What the administrator may ask, logged in: the admin pages, a page's history, the
# search, the media manager and the detail page of a file, an AJAX call, the export of
# a page, the logout.
ADMIN_VISITS = ["/start?do=admin", "/start?do=admin&page=config",
                "/start?do=admin&page=usermanager", "/start?do=admin&page=acl",
                "/start?do=revisions", "/start?do=diff", "/start?do=search&q=FastCGI",
                "/start?do=media&ns=wiki", "/start?do=profile", "/start?do=index",
                "/_detail/wiki:shared.png", "/lib/exe/detail.php?media=wiki:shared.png",
                "/lib/exe/ajax.php?call=medialist&ns=wiki", "/_export/xhtml/start",
                "/start?do=export_raw", "/start?do=logout"]


def test_admin_visits_answer_as_under_nginx(wiki, tmp_path):
    lf = Site("lfhttpd", str(tmp_path / "lf"), wiki)
    ng = Site("nginx", str(tmp_path / "ng"), wiki)
    try:
        upload(logged_in(lf.url), "shared.png", png_bytes())
        browsers = (logged_in(lf.url), logged_in(ng.url))
        differences, statuses = [], {}
        for path in ADMIN_VISITS:
            seen = []
            for b in browsers:
                status, headers, _ = b.get(path)
                seen.append((status, {h: (headers.get(h) or "").replace(b.base, "BASE")
                                      for h in COMPARED}))
            if seen[0] != seen[1]:
                differences.append((path, *seen))
            statuses[path] = seen[0][0]
        assert differences == [], "\n".join(map(repr, differences))
        assert statuses == {p: 200 for p in ADMIN_VISITS}  # (logout without sectok: a form)
    finally:
        lf.stop()
        ng.stop()
