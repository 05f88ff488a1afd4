"""What the tests that run containers with podman share: the offline base image, whether
they run inside make test-fresh's container, and the checks that skip them, with the
reason, when podman cannot run them here."""
import os
import shutil
import subprocess

import pytest

from conftest import BY_DESIGN, environment_fact

BASE = "docker.io/library/debian:bookworm-slim"
IN_CONTAINER = os.environ.get("LFHTTPD_IN_CONTAINER") == "1"


def _run(cmd, timeout):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          errors="replace", timeout=timeout)


def require_podman(what):
    """Skip unless podman works here and has the base image (pulled if it can be: never
    --pull=always). `what`, in capitals, names what goes untested in the reason."""
    if IN_CONTAINER:
        pytest.skip(f"no container engine inside make test-fresh's container {BY_DESIGN} "
                    + environment_fact("LFHTTPD_IN_CONTAINER=1"))
    if not shutil.which("podman") or _run(["podman", "info"], timeout=60).returncode != 0:
        pytest.skip(f"{what} IS NOT TESTED: podman does not work here "
                    "(sh ../shared/tools/container-env.sh)")
    if _run(["podman", "image", "exists", BASE], timeout=60).returncode != 0:
        r = _run(["podman", "pull", BASE], timeout=600)
        if r.returncode != 0:
            pytest.skip(f"base image {BASE} is not present and cannot be pulled (offline? "
                        "run sh ../shared/tools/container-env.sh):\n" + r.stdout[-500:])
