"""The container image (Dockerfile): build it, run it, serve from it, stop it.

The image is built once per test session, with docker when a docker engine answers, else
with podman (`--format docker`, which keeps the HEALTHCHECK). Containers publish their
port on 127.0.0.1 only, on a port picked here, and every container started is removed
(by name) when its test ends, pass or fail. When no engine can build here (none installed,
none answering, or the base image neither present nor pullable) the tests are skipped
with the reason, which `-rs` prints in the summary and LFHTTPD_STRICT_SKIPS turns into a
failure; on this project's machines `sh ../shared/tools/container-env.sh` sets podman up
offline. Inside `make test-fresh`'s container no engine can run (no nested engine): that
skip alone is by design.

Environment:
  LFHTTPD_IMAGE     the tag to build (default lfhttpd-test)
  LFHTTPD_SANITIZE  set for the sanitizer runs of the suite, which test another binary
                    than the image's: these tests are skipped there
  LFHTTPD_IN_CONTAINER  set by `make test-fresh` inside its container
"""
import http.client
import json
import os
import shutil
import socket
import ssl
import subprocess
import time
import uuid

import pytest

from conftest import BY_DESIGN, ROOT, SANITIZED, Client, environment_fact

TAG = os.environ.get("LFHTTPD_IMAGE", "lfhttpd-test")
BASE = "docker.io/library/debian:bookworm-slim"
UID = 10001
CONF = "/etc/lfhttpd/lfhttpd.conf"

pytestmark = pytest.mark.skipif(
    SANITIZED, reason="the image holds the plain build; tested in the plain run " + BY_DESIGN)
IN_CONTAINER = os.environ.get("LFHTTPD_IN_CONTAINER") == "1"


def _run(cmd, timeout=120, check=False):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       errors="replace", timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stdout[-4000:]}")
    return r


def _find_engine():
    """'docker' when a docker engine answers, else 'podman' when it works; else skip."""
    if IN_CONTAINER:  # (podman may be installed there, as podman-compose's dependency)
        pytest.skip(f"no container engine inside make test-fresh's container {BY_DESIGN} "
                    + environment_fact("LFHTTPD_IN_CONTAINER=1"))
    reasons = []
    if shutil.which("docker"):
        try:
            if _run(["docker", "info"], timeout=30).returncode == 0:
                return "docker"
            reasons.append("docker: no engine answers (`docker info` fails)")
        except subprocess.TimeoutExpired:
            reasons.append("docker: `docker info` timed out")
    else:
        reasons.append("docker: not installed")
    if shutil.which("podman"):
        try:
            r = _run(["podman", "info"], timeout=60)
            if r.returncode == 0:
                return "podman"
            reasons.append("podman: `podman info` fails: " + r.stdout.strip()[-300:])
        except subprocess.TimeoutExpired:
            reasons.append("podman: `podman info` timed out")
    else:
        reasons.append("podman: not installed (sh ../shared/tools/container-env.sh)")
    why = "; ".join(reasons)
    if IN_CONTAINER:
        pytest.skip(f"no container engine inside make test-fresh's container {BY_DESIGN}: "
                    + why)
    pytest.skip("THE IMAGE IS NOT TESTED: no container engine can build here; " + why)


@pytest.fixture(scope="module")
def engine():
    return _find_engine()


@pytest.fixture(scope="module")
def image(engine):
    """Build the image once for the module; returns its tag."""
    if _run([engine, "image", "inspect", BASE], timeout=60).returncode != 0:
        # Never --pull=always: a base image already present is used as it is.
        r = _run([engine, "pull", BASE], timeout=600)
        if r.returncode != 0:
            pytest.skip(f"base image {BASE} is not present and cannot be pulled "
                        f"(offline? run sh ../shared/tools/container-env.sh):\n"
                        + r.stdout.strip()[-500:])
    cmd = [engine, "build", "-t", TAG]
    if engine == "podman":
        cmd += ["--format", "docker"]  # the OCI format has no HEALTHCHECK
    r = _run(cmd + [ROOT], timeout=1200)
    assert r.returncode == 0, "image build failed:\n" + r.stdout[-6000:]
    return TAG


class Container:
    def __init__(self, engine, name, port):
        self.engine, self.name, self.port = engine, name, port

    def inspect(self, fmt):
        return _run([self.engine, "inspect", "--format", fmt, self.name],
                    check=True).stdout.strip()

    def logs(self):
        return _run([self.engine, "logs", self.name]).stdout

    def running(self):
        return self.inspect("{{.State.Running}}") == "true"

    def exec(self, *cmd):
        return _run([self.engine, "exec", self.name] + list(cmd))

    def get(self, path, headers=None):
        """GET path on a fresh connection -> (status, headers with lowercase names, body)."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            c.request("GET", path, headers=headers or {})
            r = c.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            c.close()

    def wait_ready(self, timeout=30.0):
        """Until the server answers HTTP through the published port."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                self.get("/")
                return
            except (OSError, http.client.HTTPException):
                if not self.running():
                    raise AssertionError(f"container {self.name} exited at start:\n"
                                         + self.logs())
                time.sleep(0.1)
        raise AssertionError(f"container {self.name} did not answer within {timeout}s:\n"
                             + self.logs())


@pytest.fixture
def run_container(engine, image):
    """run_container(args=(), volumes=(), port=8080) -> Container, started detached with
    -p 127.0.0.1:<free port>:<port> and ready. Every container is removed at the end."""
    names = []

    def run(args=(), volumes=(), port=8080, wait=True):
        name = f"lfhttpd-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        names.append(name)
        # No host port given: the engine picks a free one as it binds (no window in which
        # another process could take a port the test chose), and `port` tells which.
        cmd = [engine, "run", "-d", "--name", name, "-p", f"127.0.0.1::{port}"]
        for v in volumes:
            cmd += ["-v", v]
        r = _run(cmd + [image] + list(args), timeout=120)
        assert r.returncode == 0, f"{' '.join(cmd)} failed:\n{r.stdout}"
        mapped = _run([engine, "port", name, str(port)], check=True).stdout.split()[0]
        c = Container(engine, name, int(mapped.rpartition(":")[2]))
        if wait:
            c.wait_ready()
        return c

    yield run
    for name in names:
        _run([engine, "rm", "-f", name], timeout=120)


def _healthcheck(engine, image):
    """The image's HEALTHCHECK command as an argv list."""
    out = _run([engine, "image", "inspect", "--format", "{{json .Config.Healthcheck}}", image],
               check=True).stdout.strip()
    hc = json.loads(out) if out not in ("", "null", "<no value>") else None
    assert hc and hc.get("Test"), f"the image has no HEALTHCHECK: {out!r}"
    test = hc["Test"]
    if test[0] == "CMD":
        return test[1:]
    assert test[0] == "CMD-SHELL", test
    return ["/bin/sh", "-c", test[1]]


def _site(tmp_path, name="site"):
    """A document root the container's user can read (pytest's tmp dirs are 0700)."""
    d = tmp_path / name
    (d / "sub").mkdir(parents=True)
    files = {
        "index.html": b"<!doctype html><title>mounted</title><p>from the volume\n",
        "blob.bin": os.urandom(300 * 1024 + 7),
        "sub/page.txt": b"a file in a subdirectory\n",
    }
    for rel, data in files.items():
        (d / rel).write_bytes(data)
        os.chmod(d / rel, 0o644)
    for p in (d, d / "sub"):
        os.chmod(p, 0o755)
    return d, files


def _conf_file(tmp_path, text):
    p = tmp_path / "my.conf"
    p.write_text(text)
    os.chmod(p, 0o644)
    return p


def test_image_config(engine, image):
    fmt = ("{{json .Config.User}}|{{json .Config.ExposedPorts}}|{{json .Config.StopSignal}}|"
           "{{json .Config.Entrypoint}}")
    user, ports, stopsig, entry = _run(
        [engine, "image", "inspect", "--format", fmt, image], check=True).stdout.strip().split("|")
    assert json.loads(user).split(":")[0] in ("lfhttpd", str(UID))
    assert "8080/tcp" in json.loads(ports)
    assert json.loads(stopsig) in ("SIGTERM", "TERM", "15")
    assert json.loads(entry)[0] == "/usr/local/bin/lfhttpd"
    _healthcheck(engine, image)
    # Flags given to `run` are added to the image's configuration: -t checks it, -V.
    r = _run([engine, "run", "--rm", image, "-t"])
    assert r.returncode == 0 and f"{CONF} is valid" in r.stdout, r.stdout
    r = _run([engine, "run", "--rm", image, "-V"])
    assert r.returncode == 0 and "lfhttpd " in r.stdout, r.stdout
    r = _run([engine, "run", "--rm", image, "-r", "/nonexistent", "-t"])
    assert r.returncode == 1 and '"/nonexistent"' in r.stdout and "No such file" in r.stdout, \
        r.stdout


def test_serves_the_image_www_as_unprivileged_user(engine, image, run_container):
    c = run_container()
    for name in ("index.html", "style.css", "favicon.ico"):
        with open(os.path.join(ROOT, "www", name), "rb") as f:
            want = f.read()
        status, headers, body = c.get("/" + name)
        assert status == 200 and body == want, (name, status, headers)
    status, headers, body = c.get("/")
    assert status == 200 and b"<html" in body.lower()
    assert headers["server"].startswith("lfhttpd")

    # The server (PID 1 of the container) and anything exec'd run as uid 10001.
    status_lines = c.exec("cat", "/proc/1/status").stdout
    uids = next(line for line in status_lines.splitlines() if line.startswith("Uid:"))
    assert uids.split()[1:] == [str(UID)] * 4, uids
    assert c.exec("id", "-u").stdout.strip() == str(UID)
    assert c.exec("cat", "/proc/1/cmdline").stdout.split("\0")[0] == "/usr/local/bin/lfhttpd"
    # It cannot write to its own files.
    assert c.exec("touch", "/srv/www/x").returncode != 0

    # The HEALTHCHECK command, as the engine would run it, passes.
    r = c.exec(*_healthcheck(engine, image))
    assert r.returncode == 0, r.stdout
    # Logs go to the container's output: the error log and the access log.
    deadline = time.time() + 5
    while '"GET /style.css HTTP/1.1" 200' not in c.logs() and time.time() < deadline:
        time.sleep(0.2)  # the access log is flushed at least once a second
    logs = c.logs()
    assert "listening on 0.0.0.0:8080" in logs
    assert '"GET /style.css HTTP/1.1" 200' in logs, logs


def test_mounted_docroot_byte_exact(run_container, tmp_path):
    site, files = _site(tmp_path)
    c = run_container(volumes=[f"{site}:/srv/www:ro"])
    for rel, data in files.items():
        status, headers, body = c.get("/" + rel)
        assert status == 200, (rel, status)
        assert int(headers["content-length"]) == len(data)
        assert body == data, rel
    status, _, body = c.get("/")
    assert status == 200 and body == files["index.html"]
    assert c.get("/style.css")[0] == 404  # the image's own site is hidden by the mount


def test_flags_add_to_the_image_config(engine, image, run_container, tmp_path):
    site, files = _site(tmp_path)
    c = run_container(args=["-r", "/srv/site", "-l", "0.0.0.0:9090", "-n", "2"],
                      volumes=[f"{site}:/srv/site:ro"], port=9090)
    status, _, body = c.get("/blob.bin")
    assert status == 200 and body == files["blob.bin"]
    logs = c.logs()
    assert "listening on 0.0.0.0:9090" in logs and "class default: 2 threads" in logs, logs
    # The health check probes port 8080, where nothing listens now: it must fail.
    r = c.exec(*_healthcheck(engine, image))
    assert r.returncode != 0, "the health check passed with no server on port 8080"


def test_mounted_config_replaces_the_image_config(run_container, tmp_path):
    site, files = _site(tmp_path)
    conf = _conf_file(tmp_path, "listen 8080;\nroot /srv/site;\nserver_tokens off;\n"
                                "access_log off;\nerror_log stderr debug;\n")
    c = run_container(volumes=[f"{site}:/srv/site:ro", f"{conf}:{CONF}:ro"])
    status, headers, body = c.get("/sub/page.txt")
    assert status == 200 and body == files["sub/page.txt"]
    assert headers["server"] == "lfhttpd"
    # A -c on the command line wins over the image's.
    c2 = run_container(args=["-c", "/srv/conf/my.conf"],
                       volumes=[f"{site}:/srv/site:ro", f"{conf}:/srv/conf/my.conf:ro"])
    status, headers, body = c2.get("/index.html")
    assert status == 200 and body == files["index.html"] and headers["server"] == "lfhttpd"


def test_stop_sends_sigterm_and_exits_0(engine, run_container):
    c = run_container()
    # An idle keep-alive client: the graceful stop closes it and does not wait for it.
    idle = Client(socket.create_connection(("127.0.0.1", c.port), timeout=10))
    try:
        idle.send(b"GET /logo.svg HTTP/1.1\r\nHost: x\r\n\r\n")
        status, _, body, _ = idle.read_response()
        assert status == 200 and body == open(os.path.join(ROOT, "www", "logo.svg"), "rb").read()
        t0 = time.time()
        r = _run([engine, "stop", "-t", "10", c.name], timeout=60)
        elapsed = time.time() - t0
        assert r.returncode == 0, r.stdout
        assert idle.is_closed(timeout=5), "the idle connection was left open"
    finally:
        idle.close()
    assert elapsed < 5, f"stop took {elapsed:.1f}s (SIGKILL after 10s?)"
    assert c.inspect("{{.State.Running}}") == "false"
    code = c.inspect("{{.State.ExitCode}}")
    logs = c.logs()
    assert code == "0", f"exit status {code}:\n{logs}"
    assert "SIGTERM: shutting down" in logs, logs


def test_kill_hup_reloads_a_mounted_config(engine, run_container, tmp_path):
    """`docker kill -s HUP` reloads: the mounted file (its directory mounted, so that an
    edit on the host is seen inside) now serves another root, and the container lives on."""
    site, files = _site(tmp_path)
    other, _ = _site(tmp_path, "other")
    (other / "index.html").write_bytes(b"the other site\n")
    confdir = tmp_path / "conf"
    confdir.mkdir()
    os.chmod(confdir, 0o755)
    text = "listen 8080;\nroot %s;\naccess_log off;\nerror_log stderr info;\n"
    conf = confdir / "my.conf"
    conf.write_text(text % "/srv/site")
    os.chmod(conf, 0o644)
    c = run_container(args=["-c", "/srv/conf/my.conf"],
                      volumes=[f"{site}:/srv/site:ro", f"{other}:/srv/other:ro",
                               f"{confdir}:/srv/conf:ro"])
    assert c.get("/")[2] == files["index.html"]
    conf.write_text(text % "/srv/other")
    r = _run([engine, "kill", "--signal", "HUP", c.name], timeout=60)
    assert r.returncode == 0, r.stdout
    deadline = time.time() + 15
    while "configuration reloaded" not in c.logs() and time.time() < deadline:
        time.sleep(0.1)
    assert "configuration reloaded (generation 2)" in c.logs(), c.logs()
    assert c.get("/")[2] == b"the other site\n"
    assert c.running()


def test_serves_https_from_a_mounted_configuration_and_certificate(run_container, tmp_path):
    site, files = _site(tmp_path)
    certs = tmp_path / "certs"
    certs.mkdir()
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost",
                    "-keyout", str(certs / "site.key"), "-out", str(certs / "site.pem")],
                   check=True, capture_output=True)
    for p in (certs / "site.key", certs / "site.pem"):
        os.chmod(p, 0o644)  # the container's user is not the file's owner
    os.chmod(certs, 0o755)
    conf = _conf_file(tmp_path, "listen 8443 ssl;\nroot /srv/site;\n"
                                "ssl_certificate /etc/lfhttpd/certs/site.pem;\n"
                                "ssl_certificate_key /etc/lfhttpd/certs/site.key;\n"
                                "access_log off;\nerror_log stderr info;\n")
    c = run_container(volumes=[f"{site}:/srv/site:ro", f"{conf}:{CONF}:ro",
                               f"{certs}:/etc/lfhttpd/certs:ro"], port=8443, wait=False)
    ctx = ssl.create_default_context(cafile=str(certs / "site.pem"))
    deadline = time.time() + 30
    while True:
        conn = http.client.HTTPSConnection("localhost", c.port, context=ctx, timeout=10)
        try:
            conn.request("GET", "/sub/page.txt")
            r = conn.getresponse()
            status, body = r.status, r.read()
            break
        except (OSError, http.client.HTTPException):
            assert c.running() and time.time() < deadline, c.logs()
            time.sleep(0.2)
        finally:
            conn.close()
    assert status == 200 and body == files["sub/page.txt"]
    assert "TLS: kernel TLS" in c.logs()
