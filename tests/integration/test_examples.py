"""The example configurations in conf/examples/ run as written.

Each example is checked by `lfhttpd -t`, then served (its `listen 8080` replaced by a free
loopback port, started from the repository root as its header says) and asked one or two
requests. Every such test runs twice: against lfhttpd and against nginx with the same text
inside `http { }` (relative paths made absolute, as nginx resolves them against its own
prefix), so that each expected answer is nginx's too. The single-page application is also
opened in headless Chromium through the DevTools protocol: a deep link, a reload, the
assets' cache lifetime as the browser received it, and a missing asset.
"""
import asyncio
import base64
import glob
import gzip
import http.client
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import urllib.request

import pytest

from conftest import BIN, NGINX, ROOT, Launched, Nginx, check_clean_exit, scaled, wait_until

EXAMPLES = os.path.join(ROOT, "conf", "examples")
NAMES = ["spa", "two-sites", "static-assets", "private-area", "office-only", "tls"]
YEAR = 365 * 86400


def example_text(name, port):
    with open(os.path.join(EXAMPLES, name + ".conf")) as f:
        text = f.read()
    assert re.search(r"(?m)^\s*listen 8080\b", text), name
    return re.sub(r"(?m)^(\s*listen) 8080\b", rf"\1 127.0.0.1:{port}", text)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------- the two servers


def nginx_text(name, edit):
    """The example as the body of nginx's http { } block: its listen on {port0} (conftest's
    Nginx picks the port), paths under conf/examples/ made absolute (nginx resolves relative
    ones against its prefix), and nginx's own type table."""
    text = edit(example_text(name, "{port0}")).replace("conf/examples/", EXAMPLES + "/")
    return ("    include /etc/nginx/mime.types;\n"
            "    default_type application/octet-stream;\n" + text + "\n")


def start_lfhttpd(dirpath, name, edit):
    """lfhttpd with the example's text, started from the repository root (so its relative
    paths resolve as they do for a user who follows the example's header)."""
    port = free_port()
    conf = os.path.join(str(dirpath), name + ".conf")
    os.makedirs(str(dirpath), exist_ok=True)
    with open(conf, "w") as f:
        f.write(edit(example_text(name, port)))
    return Launched(dirpath, ["-c", conf], cwd=ROOT)


def start_example(kind, where, name, edit=None):
    """The example `name` running under `kind` (lfhttpd or nginx), `edit` applied to its
    text first."""
    edit = edit or (lambda text: text)
    if kind == "nginx":
        if not NGINX:
            pytest.fail("nginx is not installed (make check-deps installs nginx-light)")
        return Nginx(where, None, nginx_text(name, edit), http=True)
    return start_lfhttpd(where, name, edit)


def stop_example(s):
    """Stop by PID; lfhttpd must exit 0."""
    if isinstance(s, Nginx):
        s.stop()
    else:
        check_clean_exit(s)


KINDS = ["lfhttpd", "nginx"]


@pytest.fixture(params=KINDS)
def serve(request, tmp_path):
    """serve(name, edit=None) -> (host, port) of the example `name` running under the
    parameter's server; `edit` changes the text first. Stopped at the end of the test."""
    running = []

    def start(name, edit=None):
        s = start_example(request.param, tmp_path / f"{request.param}{len(running)}",
                          name, edit)
        running.append(s)
        return s.host, s.port

    yield start
    for s in running:
        stop_example(s)


def get(addr, path, host="localhost", headers=None):
    """(status, headers, body) of one request on its own connection; redirects are not
    followed. `headers` is an http.client.HTTPMessage: get_all() gives repeated ones."""
    conn = http.client.HTTPConnection(*addr, timeout=scaled(10))
    try:
        conn.request("GET", path, headers={"Host": host, "Connection": "close",
                                            **(headers or {})})
        r = conn.getresponse()
        return r.status, r.headers, r.read()
    finally:
        conn.close()


def cache_control(headers):
    """Every Cache-Control directive of a response, its lines joined."""
    return {d.strip() for line in headers.get_all("Cache-Control") or ()
            for d in line.split(",") if d.strip()}


def example_file(*parts):
    with open(os.path.join(EXAMPLES, *parts), "rb") as f:
        return f.read()


# ---------------------------------------------------------------- every example


def test_every_example_is_tested():
    found = sorted(os.path.basename(p)[:-5] for p in glob.glob(EXAMPLES + "/*.conf"))
    assert found == sorted(NAMES)


@pytest.fixture(scope="module")
def cert():
    """`make cert`, as tls.conf's header says: conf/tls/localhost.pem and its key."""
    p = subprocess.run(["make", "-s", "cert"], cwd=ROOT, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=60)
    assert p.returncode == 0, p.stdout.decode("utf-8", "replace")
    return os.path.join(ROOT, "conf", "tls", "localhost.pem")


@pytest.mark.parametrize("name", NAMES)
def test_example_passes_the_configuration_check(name, cert):
    p = subprocess.run([BIN, "-t", "-c", f"conf/examples/{name}.conf"], cwd=ROOT,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=scaled(20))
    assert p.returncode == 0, p.stdout.decode("utf-8", "replace")


# ---------------------------------------------------------------- spa.conf


def test_spa_deep_link_gets_the_app_page_revalidated_each_time(serve):
    addr = serve("spa")
    status, headers, body = get(addr, "/settings/profile")
    assert status == 200
    assert body == example_file("spa", "index.html")
    assert "no-cache" in cache_control(headers)


def test_spa_fingerprinted_asset_is_cached_a_year_and_immutable(serve):
    addr = serve("spa")
    status, headers, body = get(addr, "/assets/app.3f9a1c.js")
    assert status == 200
    assert body == example_file("spa", "assets", "app.3f9a1c.js")
    assert {f"max-age={YEAR}", "immutable"} <= cache_control(headers)


def test_spa_missing_asset_is_a_404_not_the_app(serve):
    addr = serve("spa")
    status, headers, body = get(addr, "/assets/missing.js")
    assert status == 404
    assert b'id="route"' not in body
    assert not cache_control(headers)


# ---------------------------------------------------------------- two-sites.conf


def test_two_sites_host_picks_the_site(serve):
    addr = serve("two-sites")
    assert get(addr, "/", host="blog.example.org")[2] == \
        example_file("sites", "blog.example.org", "index.html")
    assert get(addr, "/", host="WWW.Example.org:8080")[2] == \
        example_file("sites", "example.org", "index.html")


def test_two_sites_unknown_host_goes_to_the_default_server(serve):
    addr = serve("two-sites")
    status, _, body = get(addr, "/", host="203.0.113.7")
    assert (status, body) == (200, example_file("sites", "example.org", "index.html"))


def test_two_sites_error_page_is_the_sites_own(serve):
    addr = serve("two-sites")
    status, _, body = get(addr, "/no-such-page", host="example.org")
    assert (status, body) == (404, example_file("sites", "example.org", "404.html"))
    # The other site has no error_page: its 404 is not example.org's page.
    status, _, body = get(addr, "/no-such-page", host="blog.example.org")
    assert status == 404 and body != example_file("sites", "example.org", "404.html")


# ---------------------------------------------------------------- static-assets.conf


def test_static_assets_lifetime_follows_the_extension(serve):
    addr = serve("static-assets")
    lifetimes = {}
    for path in ("/", "/css/site.css", "/img/logo.svg", "/img/pixel.PNG"):
        status, headers, _ = get(addr, path)
        assert status == 200, path
        lifetimes[path] = cache_control(headers)
    assert lifetimes == {"/": {"no-cache"}, "/css/site.css": {"max-age=604800"},
                         "/img/logo.svg": {"max-age=2592000"},
                         "/img/pixel.PNG": {"max-age=2592000"}}


def test_static_assets_stylesheet_is_sent_gzipped(serve):
    addr = serve("static-assets")
    status, headers, body = get(addr, "/css/site.css", headers={"Accept-Encoding": "gzip"})
    assert status == 200
    assert headers["Content-Encoding"] == "gzip"
    assert gzip.decompress(body) == example_file("sites", "static", "css", "site.css")


# ---------------------------------------------------------------- private-area.conf


def basic(user, password):
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def test_private_area_asks_for_a_login(serve):
    addr = serve("private-area")
    status, headers, _ = get(addr, "/")
    assert status == 401
    assert headers["WWW-Authenticate"].startswith('Basic realm="Staff only"')
    assert get(addr, "/", headers=basic("alice", "wrong"))[0] == 401


def test_private_area_opens_with_the_example_password(serve):
    addr = serve("private-area")
    status, _, body = get(addr, "/", headers=basic("alice", "wonderland"))
    assert (status, body) == (200, example_file("sites", "intranet", "index.html"))


def test_private_area_public_corner_needs_no_login(serve):
    addr = serve("private-area")
    status, headers, body = get(addr, "/public/")
    assert (status, body) == (200, example_file("sites", "intranet", "public", "index.html"))
    assert "WWW-Authenticate" not in headers


# ---------------------------------------------------------------- office-only.conf


def test_office_only_path_is_forbidden_outside_the_office(serve):
    addr = serve("office-only")
    assert get(addr, "/office/")[0] == 403
    assert get(addr, "/")[0] == 200


def test_office_only_path_opens_inside_the_office_network(serve):
    # This machine stands in for the office: its network in place of the office LAN's.
    def office_is_here(text):
        assert "allow 192.168.10.0/24;" in text
        return text.replace("allow 192.168.10.0/24;", "allow 127.0.0.0/8;")
    addr = serve("office-only", office_is_here)
    status, _, body = get(addr, "/office/")
    assert (status, body) == (200, example_file("sites", "intranet", "office", "index.html"))


# ---------------------------------------------------------------- the SPA in a browser


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    pytest.fail("chromium is not installed (make check-deps installs it: "
                "apt-get install chromium)")


class DevTools:
    """One page of a headless Chromium, driven over the DevTools protocol: call() sends a
    command and returns its result; every event is kept in `events` (method, params)."""

    def __init__(self, ws):
        self.ws = ws
        self.next_id = 0
        self.events = []

    async def call(self, method, **params):
        self.next_id += 1
        mine = self.next_id
        await self.ws.send(json.dumps({"id": mine, "method": method, "params": params}))
        while True:
            msg = json.loads(await self.ws.recv())
            if msg.get("id") == mine:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]
            if "method" in msg:
                self.events.append((msg["method"], msg.get("params", {})))

    async def wait_event(self, method, since):
        """The first `method` event at or after index `since` of `events`."""
        while True:
            for name, params in self.events[since:]:
                if name == method:
                    return params
            msg = json.loads(await self.ws.recv())
            if "method" in msg:
                self.events.append((msg["method"], msg.get("params", {})))

    async def evaluate(self, expression):
        r = await self.call("Runtime.evaluate", expression=expression, awaitPromise=True,
                            returnByValue=True)
        assert "exceptionDetails" not in r, r
        return r["result"].get("value")

    async def load(self, command, **params):
        """Run a navigation command and wait for the page's load event."""
        since = len(self.events)
        await self.call(command, **params)
        await self.wait_event("Page.loadEventFired", since)
        return since

    def responses(self, since=0):
        """URL -> (status, headers with lowercase names) of every response received."""
        return {p["response"]["url"]: (p["response"]["status"],
                                       {k.lower(): v for k, v in p["response"]["headers"].items()})
                for name, p in self.events[since:] if name == "Network.responseReceived"}


# The app's script is deferred: by the load event it has rendered the route, or never will
# ("Loading…" stays). The heading's colour comes from the app's stylesheet.
RENDERED = """({route: document.getElementById("route").textContent,
  colour: getComputedStyle(document.getElementById("route")).color})"""

MISSING = """fetch("/assets/missing.js").then(async r =>
  ({status: r.status, body: await r.text()}))"""


async def browse(ws_url, url):
    """Open `url`, reload it, fetch a missing asset: what the page showed each time and
    what the browser received."""
    try:
        import websockets
    except ImportError:
        pytest.fail("python3-websockets is not installed (make check-deps installs it)")
    async with websockets.connect(ws_url, max_size=None) as ws:
        page = DevTools(ws)
        await page.call("Page.enable")
        await page.call("Network.enable")
        first = await page.load("Page.navigate", url=url)
        seen = {"first": await page.evaluate(RENDERED), "first_responses": page.responses(first)}
        again = await page.load("Page.reload")
        seen["reload"] = await page.evaluate(RENDERED)
        seen["reload_responses"] = page.responses(again)
        seen["missing"] = await page.evaluate(MISSING)
        return seen


def visit_in_chromium(tmp_path, url):
    """Run browse() in a fresh headless Chromium (its own profile), stopped by PID."""
    exe = chromium()
    profile = tmp_path / "profile"
    log_path = tmp_path / "chromium.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [exe, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-background-networking", "--disable-component-update",
             "--disable-sync", "--remote-debugging-port=0", f"--user-data-dir={profile}",
             "about:blank"],
            stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
    try:
        def devtools_port():
            m = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", log_path.read_text())
            return m and int(m.group(1))
        port = wait_until(lambda: proc.poll() is not None or devtools_port(), scaled(60))
        assert proc.poll() is None and port, "chromium did not start:\n" + log_path.read_text()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list",
                                    timeout=scaled(10)) as r:
            targets = json.load(r)
        ws_url = next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")
        return asyncio.run(asyncio.wait_for(browse(ws_url, url), scaled(60)))
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=scaled(10))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module", params=KINDS)
def spa_visit(request, tmp_path_factory):
    """One visit of the SPA in Chromium per server (Chromium is slow to start): the
    server's base URL and what browse() saw. The server is stopped before the tests
    read the result."""
    where = tmp_path_factory.mktemp(f"spa-{request.param}")
    s = start_example(request.param, where / "server", "spa")
    try:
        base = f"http://{s.host}:{s.port}"
        seen = visit_in_chromium(where, base + "/settings/profile")
    finally:
        stop_example(s)
    return base, seen


def test_spa_deep_link_loads_the_app_in_chromium(spa_visit):
    base, seen = spa_visit
    # The app's script ran (it rendered the route) and its stylesheet applied.
    assert seen["first"] == {"route": "/settings/profile", "colour": "rgb(0, 102, 51)"}
    status, headers = seen["first_responses"][base + "/settings/profile"]
    assert status == 200 and "no-cache" in headers.get("cache-control", "")


def test_spa_deep_link_loads_the_app_again_after_a_reload_in_chromium(spa_visit):
    base, seen = spa_visit
    assert base + "/settings/profile" in seen["reload_responses"]  # asked the server again
    assert seen["reload"] == {"route": "/settings/profile", "colour": "rgb(0, 102, 51)"}


def test_spa_assets_reach_chromium_with_a_year_of_cache(spa_visit):
    base, seen = spa_visit
    for asset in ("/assets/app.3f9a1c.js", "/assets/app.7b2e4d.css"):
        status, headers = seen["first_responses"][base + asset]
        assert status == 200, asset
        assert f"max-age={YEAR}" in headers.get("cache-control", ""), (asset, headers)


def test_spa_missing_asset_is_a_404_in_chromium(spa_visit):
    base, seen = spa_visit
    assert seen["missing"]["status"] == 404
    assert 'id="route"' not in seen["missing"]["body"]


# ---------------------------------------------------------------- tls.conf


def tls_edit(port, seen=None):
    """tls.conf's 8443 on a free loopback port, its relative paths made absolute (nginx
    resolves them against its own prefix). The plain port, once chosen, goes to seen."""
    def edit(text):
        m = re.search(r"(?m)^\s*listen 127\.0\.0\.1:(\d+);", text)
        if m and seen is not None:
            seen["plain"] = int(m.group(1))
        text = re.sub(r"(?m)^(\s*listen) 8443 ssl", rf"\1 127.0.0.1:{port} ssl", text)
        return (text.replace("conf/tls/", os.path.join(ROOT, "conf", "tls") + "/")
                .replace("root www;", f"root {os.path.join(ROOT, 'www')};"))
    return edit


def https_get(port, path, cafile):
    ctx = ssl.create_default_context(cafile=cafile)
    conn = http.client.HTTPSConnection("localhost", port, context=ctx, timeout=scaled(10))
    try:
        conn.request("GET", path, headers={"Connection": "close"})
        r = conn.getresponse()
        return r.status, r.headers, r.read()
    finally:
        conn.close()


def test_tls_serves_the_site_over_https_with_hsts(serve, cert):
    port = free_port()
    serve("tls", tls_edit(port))
    status, headers, body = https_get(port, "/", cert)
    assert status == 200
    with open(os.path.join(ROOT, "www", "index.html"), "rb") as f:
        assert body == f.read()
    assert headers["Strict-Transport-Security"] == "max-age=63072000"


def test_tls_sends_hsts_on_an_error_too(serve, cert):
    port = free_port()
    serve("tls", tls_edit(port))
    status, headers, _ = https_get(port, "/no-such-file", cert)
    assert status == 404
    assert headers["Strict-Transport-Security"] == "max-age=63072000"


def test_tls_plain_port_redirects_to_https_keeping_the_target(serve, cert):
    seen = {}
    addr = serve("tls", tls_edit(free_port(), seen))
    if "plain" in seen:  # lfhttpd's log names the TLS port first
        addr = (addr[0], seen["plain"])
    status, headers, _ = get(addr, "/some/page?x=1")
    assert status == 301
    assert headers["Location"] == "https://localhost/some/page?x=1"
