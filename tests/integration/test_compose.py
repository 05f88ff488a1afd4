"""The Compose deployment (deploy/compose/): brought up with podman-compose, it
serves its static site from `web` (lfhttpd, built from the repository's Dockerfile) and
answers /api/ from `app` through lfhttpd's proxy; both services report healthy.

The stack is built and started once for the module under a project name of its own, its
`web` port published on a free port of 127.0.0.1 (WEB_PORT), and always torn down at the
end, pass or fail: containers, then the project's network. When podman-compose is missing
(`make check-deps` installs it), or no podman works here, or the base image is neither
present nor pullable, the tests are skipped with the reason, which LFHTTPD_STRICT_SKIPS
turns into a failure; on this project's machines `sh ../shared/tools/container-env.sh`
sets podman up offline. Inside `make test-fresh`'s container no engine can run: that skip
alone is by design.
"""
import http.client
import json
import os
import re
import shutil
import subprocess
import time

import pytest
import yaml

from conftest import BY_DESIGN, ROOT, SANITIZED, free_port
from podman_harness import IN_CONTAINER, require_podman

EXAMPLE = os.path.join(ROOT, "deploy", "compose")
PROJECT = f"lfhttpd-compose-test-{os.getpid()}"

pytestmark = pytest.mark.skipif(
    SANITIZED, reason="the images hold the plain build; tested in the plain run " + BY_DESIGN)


def _run(cmd, timeout=120, env=None):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          errors="replace", timeout=timeout, cwd=EXAMPLE,
                          env=dict(os.environ, **(env or {})))


def _compose(*args, port=None, timeout=120):
    env = {"WEB_PORT": str(port)} if port else None
    return _run(["podman-compose", "-p", PROJECT, "-f", "compose.yaml"] + list(args),
                timeout=timeout, env=env)


def _check_tools():
    """Skip, with the reason, when the stack cannot be brought up here."""
    if not IN_CONTAINER and not shutil.which("podman-compose"):
        pytest.skip("THE COMPOSE EXAMPLE IS NOT TESTED: podman-compose is not installed "
                    "(apt-get install podman-compose; make check-deps installs it)")
    require_podman("THE COMPOSE EXAMPLE")


def _containers():
    """{service: container name} of this project's containers."""
    r = _run(["podman", "ps", "-a", "--filter", f"label=io.podman.compose.project={PROJECT}",
              "--format", '{{.Names}} {{index .Labels "com.docker.compose.service"}}'])
    return dict(reversed(line.split()) for line in r.stdout.splitlines()
                if len(line.split()) == 2)


def _tear_down():
    _compose("down", timeout=300)
    # podman-compose 1.0's `down` leaves whatever it could not stop, and the network.
    for name in _containers().values():
        _run(["podman", "rm", "-f", name], timeout=120)
    _run(["podman", "network", "rm", "-f", f"{PROJECT}_default"], timeout=60)


def _get(port, path):
    """GET path on a fresh connection -> (status, headers with lowercase names, body)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


def _logs():
    return "".join(f"--- {svc} ({name}):\n" + _run(["podman", "logs", name]).stdout
                   for svc, name in sorted(_containers().items()))


def _wait_for_web(port, timeout=60.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            return _get(port, "/")
        except (OSError, http.client.HTTPException):
            web = _containers().get("web")
            state = _run(["podman", "inspect", "--format", "{{.State.Status}}", web]).stdout \
                if web else ""
            if state.strip() == "exited":
                raise AssertionError("web exited at start:\n" + _logs()) from None
            time.sleep(0.3)
    raise AssertionError(f"web did not answer on 127.0.0.1:{port} within {timeout:.0f}s:\n"
                         + _logs())


@pytest.fixture(scope="module")
def stack():
    """Build both images, bring the stack up; yields the web port. Always torn down."""
    _check_tools()
    port = free_port()
    try:
        r = _compose("build", port=port, timeout=1800)
        assert r.returncode == 0, "podman-compose build failed:\n" + r.stdout[-6000:]
        r = _compose("up", "-d", port=port, timeout=300)
        assert r.returncode == 0, "podman-compose up -d failed:\n" + r.stdout[-6000:]
        _wait_for_web(port)
        yield port
    finally:
        _tear_down()


def _seconds(text, directive, default):
    """A duration directive of lfhttpd.conf (or compose's `15s`) in seconds."""
    m = re.search(rf"^\s*{directive}\s+(\d+)(ms|s|m)?;", text, re.M) if directive else \
        re.fullmatch(r"(\d+)(ms|s|m)?", text)
    if not m:
        return default
    return int(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60, None: 1}[m.group(2)]


def test_web_drains_within_the_stop_grace_period():
    """web's shutdown_delay plus shutdown_timeout end before compose's SIGKILL."""
    with open(os.path.join(EXAMPLE, "lfhttpd.conf"), encoding="utf-8") as f:
        conf = f.read()
    with open(os.path.join(EXAMPLE, "compose.yaml"), encoding="utf-8") as f:
        grace = yaml.safe_load(f)["services"]["web"]["stop_grace_period"]
    delay = _seconds(conf, "shutdown_delay", 0)
    assert delay > 0
    assert delay + _seconds(conf, "shutdown_timeout", 10) < _seconds(grace, None, 10)


def test_web_serves_the_static_site(stack):
    status, headers, body = _get(stack, "/")
    with open(os.path.join(EXAMPLE, "site", "index.html"), "rb") as f:
        assert (status, body) == (200, f.read()), _logs()
    assert headers["server"].startswith("lfhttpd")
    status, _, body = _get(stack, "/style.css")
    with open(os.path.join(EXAMPLE, "site", "style.css"), "rb") as f:
        assert (status, body) == (200, f.read())


def test_api_is_answered_by_app_through_the_proxy(stack):
    status, headers, body = _get(stack, "/api/hello?x=1")
    assert status == 200, f"{status} {body[:300]!r}\n" + _logs()
    assert headers["server"].startswith("lfhttpd")  # the proxy's own, not the app's
    answer = json.loads(body)
    assert answer["app"] == "compose-example"
    assert (answer["method"], answer["path"]) == ("GET", "/api/hello?x=1")
    # The proxy's default headers reached the application.
    assert answer["x_forwarded_for"] and answer["x_real_ip"], answer
    assert answer["x_forwarded_proto"] == "http", answer


def test_app_is_reached_only_through_web(stack):
    """Only web's port is published; a path outside /api/ never reaches the app."""
    assert _run(["podman", "port", _containers()["app"]]).stdout.strip() == ""
    status, _, _ = _get(stack, "/health")  # the app's health path, not proxied
    assert status == 404


def test_web_health_endpoint_answers_200(stack):
    """web's health check asks lfhttpd's own health handler, not a page of the site."""
    status, headers, body = _get(stack, "/healthz")
    assert (status, body.strip()) == (200, b"ok"), f"{status} {body[:200]!r}\n" + _logs()
    assert headers["server"].startswith("lfhttpd")


def test_both_services_are_healthy(stack):
    """The health checks of compose.yaml, run now (podman runs them on a timer only where
    systemd is there to keep one)."""
    for svc in ("app", "web"):
        name = _containers()[svc]
        r = _run(["podman", "healthcheck", "run", name], timeout=60)
        assert r.returncode == 0, f"{svc}: {r.stdout}\n" + _logs()
        state = _run(["podman", "inspect", "--format", "{{.State.Health.Status}}", name])
        assert state.stdout.strip() == "healthy", f"{svc}: {state.stdout}"


def test_stop_ends_both_services_with_status_0(stack):
    """`stop` sends SIGTERM: lfhttpd finishes and exits 0, and so does the app (PID 1 of
    its container, which must handle SIGTERM itself). Last: the stack is down after it."""
    names = _containers()
    r = _run(["podman", "stop", "-t", "10"] + [names["web"], names["app"]], timeout=120)
    assert r.returncode == 0, r.stdout
    for svc in ("web", "app"):
        code = _run(["podman", "inspect", "--format", "{{.State.ExitCode}}", names[svc]])
        assert code.stdout.strip() == "0", f"{svc} exited {code.stdout.strip()}\n" + _logs()
