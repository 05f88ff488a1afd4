"""WordPress (Debian's wordpress package) behind the server with WordPress's documented nginx
configuration (the "Nginx" article of WordPress's Advanced Administration handbook: the
global restrictions and the single-site rules, `try_files $uri $uri/ /index.php?$args`,
PHP through FastCGI with `fastcgi_intercept_errors on`, static files with `expires max`),
only its paths, socket and port adapted.

Everything is the test's own: a copy of WordPress's files with a wp-config.php of its own
(Debian's reads /etc/wordpress, which is never touched), a MariaDB server on a unix socket
in a temporary directory, a PHP-FPM pool. Each site is installed once per module, on
lfhttpd and on nginx (the same text), and every test asserts the same of both: what
passes on nginx and fails on lfhttpd is a difference of lfhttpd's."""
import base64
import http.client
import json
import os
import re
import secrets
import shutil
import socket
import struct
import zlib

import pytest

from apps_harness import Browser, MariaDB
from conftest import NGINX, Nginx, Server, check_clean_exit
from fastcgi_harness import Fpm, with_conf_files

WORDPRESS = "/usr/share/wordpress"
ADMIN, PASSWORD = "admin", "Qx7-" + secrets.token_hex(10)

# The handbook's main file (its http block, less the paths of its logs) and its per-site
# and global files, as one http block: `{listen}`, `{root}` and `{sock}` are filled in.
SITE = """
    sendfile           on;
    keepalive_timeout  3;
    client_max_body_size 13m;
    index              index.php index.html index.htm;
    default_type       application/octet-stream;

    upstream php {
        server unix:{sock};
    }

    server {
        listen {listen};
        server_name localhost;
        root {root};
        index index.php;

        location = /favicon.ico {
            log_not_found off;
            access_log off;
        }

        location = /robots.txt {
            allow all;
            log_not_found off;
            access_log off;
        }

        location ~ /\\. {
            deny all;
        }

        location ~* /(?:uploads|files)/.*\\.php$ {
            deny all;
        }

        location / {
            try_files $uri $uri/ /index.php?$args;
        }

        location ~ \\.php$ {
            include fastcgi_params;
            fastcgi_intercept_errors on;
            fastcgi_pass php;
            fastcgi_param  SCRIPT_FILENAME $document_root$fastcgi_script_name;
        }

        location ~* \\.(js|css|png|jpg|jpeg|gif|ico)$ {
            expires max;
            log_not_found off;
        }
    }
"""

WP_CONFIG = """<?php
define( 'DB_NAME', '{db}' );
define( 'DB_USER', '{user}' );
define( 'DB_PASSWORD', '{password}' );
define( 'DB_HOST', 'localhost:{sock}' );
define( 'DB_CHARSET', 'utf8mb4' );
define( 'DB_COLLATE', '' );
{keys}
$table_prefix = 'wp_';
define( 'WP_DEBUG', false );
define( 'WP_HTTP_BLOCK_EXTERNAL', true );
define( 'AUTOMATIC_UPDATER_DISABLED', true );
define( 'WP_ENVIRONMENT_TYPE', 'local' ); /* application passwords without HTTPS */
if ( ! defined( 'ABSPATH' ) ) {{
    define( 'ABSPATH', __DIR__ . '/' );
}}
require_once ABSPATH . 'wp-settings.php';
"""
KEYS = ("AUTH_KEY", "SECURE_AUTH_KEY", "LOGGED_IN_KEY", "NONCE_KEY", "AUTH_SALT",
        "SECURE_AUTH_SALT", "LOGGED_IN_SALT", "NONCE_SALT")

EXPIRES_MAX = "Thu, 31 Dec 2037 23:55:55 GMT"


def png(width, height):
    """A PNG image of width x height (8-bit RGB, a gradient), made here."""
    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff))
    rows = b"".join(b"\0" + bytes(v for x in range(width)
                                  for v in (x * 255 // width, y * 255 // height, (x ^ y) & 255))
                    for y in range(height))
    return (b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def hidden(page, name):
    """The value of the form field `name` in an HTML page."""
    n = re.escape(name)
    m = re.search(r"""<input[^>]*name=["']%s["'][^>]*value=["']([^"']*)["']""" % n, page) or \
        re.search(r"""<input[^>]*value=["']([^"']*)["'][^>]*name=["']%s["']""" % n, page)
    assert m, f"no field {name} in the page"
    return m.group(1)


def wordpress_copy(dirpath, db, user, password, sock):
    """WordPress's files copied to dirpath/www (its languages left out), with a
    wp-config.php of the test's own in place of Debian's."""
    root = os.path.join(str(dirpath), "www")
    shutil.copytree(WORDPRESS, root, ignore=lambda d, names: [
        n for n in names if (d == WORDPRESS and n == "wp-config.php")
        or (d == os.path.join(WORDPRESS, "wp-content") and n == "languages")])
    keys = "".join(f"define( '{k}', '{secrets.token_hex(32)}' );\n" for k in KEYS)
    with open(os.path.join(root, "wp-config.php"), "w") as f:
        f.write(WP_CONFIG.format(db=db, user=user, password=password, sock=sock, keys=keys))
    return root


@pytest.fixture(scope="module")
def mariadb(tmp_path_factory):
    db = MariaDB(tmp_path_factory.mktemp("db"))
    yield db
    db.stop()


class Site:
    def __init__(self, kind, server, root):
        self.kind, self.server, self.root = kind, server, root
        self.base = f"http://127.0.0.1:{server.port}"
        self.browser = Browser(self.base)


@pytest.fixture(scope="module", params=["lfhttpd", "nginx"])
def site(request, tmp_path_factory, mariadb):
    """WordPress on a server of `kind`, installed (install.php's step 2), with an
    administrator logged in in site.browser."""
    kind = request.param
    if kind == "nginx" and not NGINX:
        pytest.fail("nginx is not installed (make test-apps installs nginx-light)")
    d = tmp_path_factory.mktemp("wp-" + kind)
    user, password = mariadb.database("wp_" + kind)
    root = wordpress_copy(d, user, user, password, mariadb.sock)
    fpm = Fpm(d / "fpm", children=4)
    conf_dir = d / kind
    with_conf_files(conf_dir)
    server = None
    try:
        if kind == "lfhttpd":
            text = SITE.replace("{listen}", "127.0.0.1:0")
            text = text.replace("{root}", root).replace("{sock}", fpm.sock)
            server = Server(conf_dir, None, conf=(
                "error_log stderr info;\nshutdown_timeout 5s;\n"
                f'http {{\n    access_log "{conf_dir}/access.log";\n{text}}}\n'))
        else:
            text = SITE.replace("{listen}", "127.0.0.1:{port0}")
            text = text.replace("{root}", root).replace("{sock}", fpm.sock)
            server = Nginx(conf_dir, None, "    include /etc/nginx/mime.types;\n" + text,
                           http=True)
        s = Site(kind, server, root)
        install(s)
        log_in(s)
        yield s
    finally:
        if server is not None:
            if kind == "lfhttpd":
                check_clean_exit(server)
            else:
                server.stop()
        fpm.stop()


def install(site):
    b = site.browser
    r = b.get("/wp-admin/install.php?step=1&language=")
    assert r.status == 200, r.text[:2000]
    r = b.post("/wp-admin/install.php?step=2", {
        "weblog_title": "Apps test", "user_name": ADMIN, "admin_password": PASSWORD,
        "admin_password2": PASSWORD, "admin_email": "admin@example.com",
        "blog_public": "0", "language": "", "Submit": "Install WordPress"})
    assert r.status == 200 and "Success!" in r.text, r.text[:3000]


def log_in(site):
    b = site.browser
    b.get("/wp-login.php")  # (sets the test cookie the login form checks)
    r = b.post("/wp-login.php", {"log": ADMIN, "pwd": PASSWORD, "wp-submit": "Log In",
                                 "redirect_to": site.base + "/wp-admin/", "testcookie": "1"},
               follow=False)
    assert r.status == 302, r.text[:2000]
    assert r.header("Location") == site.base + "/wp-admin/"


def publish(site, title, content):
    """A post published through the editor's form (post-new.php, then post.php with the
    form's nonce): its ID."""
    b = site.browser
    page = b.get("/wp-admin/post-new.php")
    assert page.status == 200, page.text[:2000]
    post_id = hidden(page.text, "post_ID")
    r = b.post("/wp-admin/post.php", {
        "_wpnonce": hidden(page.text, "_wpnonce"), "action": "editpost",
        "originalaction": "editpost", "post_ID": post_id, "post_type": "post",
        "user_ID": hidden(page.text, "user_ID"), "post_title": title, "content": content,
        "post_status": "publish", "publish": "Publish"}, follow=False)
    assert r.status == 302, r.text[:2000]
    assert f"post={post_id}" in r.header("Location")
    return post_id


def set_permalinks(site, structure):
    b = site.browser
    page = b.get("/wp-admin/options-permalink.php")
    assert page.status == 200, page.text[:2000]
    r = b.post("/wp-admin/options-permalink.php", {
        "_wpnonce": hidden(page.text, "_wpnonce"),
        "_wp_http_referer": "/wp-admin/options-permalink.php",
        "selection": "custom", "permalink_structure": structure,
        "category_base": "", "tag_base": "", "submit": "Save Changes"})
    # (the page the form redirects to writes the new rewrite rules, as in a browser)
    assert r.status == 200 and "Permalink structure updated" in r.text, r.text[:2000]


def test_the_installed_site_shows_its_title_on_the_front_page(site):
    r = site.browser.get("/")
    assert r.status == 200
    assert "<title>Apps test" in r.text


def test_the_dashboard_answers_the_logged_in_administrator(site):
    r = site.browser.get("/wp-admin/", follow=False)
    assert r.status == 200
    assert "Dashboard" in r.text and "wp-admin-bar-my-account" in r.text


def test_wp_admin_sends_a_visitor_without_cookies_to_the_login_page(site):
    r = Browser(site.base).get("/wp-admin/", follow=False)
    assert r.status == 302
    assert r.header("Location").startswith(site.base + "/wp-login.php?redirect_to=")


def test_a_published_post_reads_back_at_its_pretty_permalink(site):
    set_permalinks(site, "/%postname%/")
    publish(site, "Hello from the apps suite", "A body <em>written</em> by the test.")
    r = Browser(site.base).get("/hello-from-the-apps-suite/", follow=False)
    assert r.status == 200, r.text[:2000]
    assert "Hello from the apps suite" in r.text
    assert "A body <em>written</em> by the test." in r.text


def test_the_rest_api_answers_at_its_pretty_path_with_the_query_string(site):
    set_permalinks(site, "/%postname%/")
    publish(site, "Found by the REST search", "Searched for.")
    r = Browser(site.base).get("/wp-json/wp/v2/posts?search=REST+search&_fields=title",
                               follow=False)
    assert r.status == 200, r.text[:2000]
    assert r.header("Content-Type").startswith("application/json")
    # (the query reached PHP: one post found, and only the field asked for)
    assert json.loads(r.body) == [{"title": {"rendered": "Found by the REST search"}}]


def rest_nonce(site):
    """The REST API's nonce for the logged-in administrator (admin-ajax's rest-nonce)."""
    r = site.browser.get("/wp-admin/admin-ajax.php?action=rest-nonce")
    assert r.status == 200 and re.fullmatch(r"[0-9a-f]{10}", r.text), r.text[:500]
    return r.text


def test_a_post_is_published_with_an_application_password_as_basic_authorization(site):
    set_permalinks(site, "/%postname%/")
    r = site.browser.request(
        "POST", "/wp-json/wp/v2/users/me/application-passwords",
        data=json.dumps({"name": "apps suite"}).encode(),
        headers={"X-WP-Nonce": rest_nonce(site), "Content-Type": "application/json"})
    assert r.status == 201, r.text[:2000]
    token = base64.b64encode(f"{ADMIN}:{json.loads(r.body)['password']}".encode()).decode()
    r = Browser(site.base).request(
        "POST", "/wp-json/wp/v2/posts",
        data=json.dumps({"title": "Sent with a password", "status": "publish"}).encode(),
        headers={"Authorization": "Basic " + token, "Content-Type": "application/json"})
    assert r.status == 201, r.text[:2000]
    assert Browser(site.base).get("/sent-with-a-password/", follow=False).status == 200


def test_site_health_finds_that_the_site_can_request_itself(site):
    r = site.browser.get("/wp-json/wp-site-health/v1/tests/loopback-requests",
                         headers={"X-WP-Nonce": rest_nonce(site)})
    assert r.status == 200, r.text[:2000]
    assert json.loads(r.body)["status"] == "good", r.text[:2000]


def test_the_feed_asked_again_with_its_etag_is_304_and_the_connection_goes_on(site):
    conn = http.client.HTTPConnection("127.0.0.1", site.server.port, timeout=60)
    try:
        conn.request("GET", "/?feed=rss2")
        r = conn.getresponse()
        assert r.status == 200 and b"<rss" in r.read()
        etag = r.getheader("ETag")
        assert etag
        conn.request("GET", "/?feed=rss2", headers={"If-None-Match": etag})
        r = conn.getresponse()
        assert r.status == 304 and r.read() == b""
        conn.request("GET", "/?feed=rss2")  # (a 304 from PHP carries no body to read past)
        r = conn.getresponse()
        assert r.status == 200 and b"<rss" in r.read()
    finally:
        conn.close()


def test_a_missing_page_is_wordpress_s_own_404(site):
    set_permalinks(site, "/%postname%/")
    r = Browser(site.base).get("/no-such-post-here/", follow=False)
    assert r.status == 404
    assert "<title>" in r.text and "Apps test" in r.text  # the theme's page, not the server's


def test_an_uploaded_image_reads_back_byte_identical_with_expires_max(site):
    image = png(320, 240)
    b = site.browser
    page = b.get("/wp-admin/media-new.php?browser-uploader")
    assert page.status == 200, page.text[:2000]
    r = b.post_multipart("/wp-admin/async-upload.php", {
        "name": "apps-test.png", "action": "upload-attachment",
        "_wpnonce": hidden(page.text, "_wpnonce")},
        {"async-upload": ("apps-test.png", "image/png", image)})
    assert r.status == 200, r.text[:2000]
    m = re.search(r'"url":"([^"]+)"', r.text)
    assert m and '"success":true' in r.text, r.text[:2000]
    url = m.group(1).replace("\\/", "/")
    assert url.startswith(site.base + "/wp-content/uploads/") and url.endswith(".png")
    got = Browser(site.base).get(url, follow=False)
    assert got.status == 200
    assert got.body == image
    assert got.header("Content-Type") == "image/png"
    assert got.header("Expires") == EXPIRES_MAX
    assert got.header("Cache-Control") == "max-age=315360000"


def test_an_upload_past_client_max_body_size_is_refused_before_php(site):
    cookie = "; ".join(f"{c.name}={c.value}" for c in site.browser.jar)
    with socket.create_connection(("127.0.0.1", site.server.port), timeout=30) as s:
        s.sendall(b"POST /wp-admin/async-upload.php HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                  b"Content-Type: multipart/form-data; boundary=x\r\n"
                  b"Content-Length: %d\r\nCookie: %s\r\n\r\n" % (14 << 20, cookie.encode()))
        head = s.recv(65536)
    assert head.startswith(b"HTTP/1.1 413 "), head[:200]


def test_a_thumbnail_made_by_php_is_served_as_a_static_file(site):
    b = site.browser
    page = b.get("/wp-admin/media-new.php?browser-uploader")
    r = b.post_multipart("/wp-admin/async-upload.php", {
        "name": "thumbs.png", "action": "upload-attachment",
        "_wpnonce": hidden(page.text, "_wpnonce")},
        {"async-upload": ("thumbs.png", "image/png", png(400, 300))})
    m = re.search(r'"thumbnail":\{[^}]*"url":"([^"]+)"', r.text)
    assert m, r.text[:2000]
    got = Browser(site.base).get(m.group(1).replace("\\/", "/"), follow=False)
    assert got.status == 200
    assert got.body.startswith(b"\x89PNG") and got.header("Expires") == EXPIRES_MAX


def test_a_stylesheet_of_wordpress_is_served_static_with_expires_max(site):
    with open(os.path.join(site.root, "wp-includes/css/dashicons.min.css"), "rb") as f:
        css = f.read()
    r = Browser(site.base).get("/wp-includes/css/dashicons.min.css?ver=6.1", follow=False)
    assert r.status == 200
    assert r.body == css
    assert r.header("Content-Type").startswith("text/css")
    assert r.header("Expires") == EXPIRES_MAX


def test_a_php_file_under_uploads_is_refused(site):
    r = Browser(site.base).get("/wp-content/uploads/evil.php", follow=False)
    assert r.status == 403


def test_a_hidden_file_is_refused(site):
    r = Browser(site.base).get("/.htaccess", follow=False)
    assert r.status == 403
