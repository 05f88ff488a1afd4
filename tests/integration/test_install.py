"""`make install`: what lands where, under PREFIX and DESTDIR, and that the installed
systemd unit names the installed files and passes `systemd-analyze verify`.

The binary installed is the one under test (LFHTTPD_BIN): make is told its build folder
and not to build it again (`-o`)."""
import os
import shutil
import stat
import subprocess

import pytest

from conftest import BIN, ROOT


def make_install(tmp_path, prefix, destdir=""):
    build = os.path.dirname(BIN)
    p = subprocess.run(["make", "--no-print-directory", "-C", ROOT, "-o", BIN, f"B={build}",
                        f"PREFIX={prefix}", f"DESTDIR={destdir}", "install"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    return p


def test_install_puts_binary_configuration_man_pages_and_unit_under_destdir(tmp_path):
    dest = tmp_path / "dest"
    make_install(tmp_path, "/usr", str(dest))
    sbin = dest / "usr/sbin/lfhttpd"
    assert os.stat(sbin).st_mode & stat.S_IXUSR
    assert subprocess.run([str(sbin), "-V"], capture_output=True, text=True,
                          timeout=10).stdout.startswith("lfhttpd ")
    conf = dest / "usr/etc/lfhttpd/lfhttpd.conf"
    assert conf.read_bytes() == open(os.path.join(ROOT, "conf", "lfhttpd.conf"), "rb").read()
    assert (dest / "usr/share/man/man8/lfhttpd.8").read_text().startswith(".TH LFHTTPD 8")
    assert ".TH LFHTTPD.CONF 5" in (dest / "usr/share/man/man5/lfhttpd.conf.5").read_text()
    unit = (dest / "usr/lib/systemd/system/lfhttpd.service").read_text()
    assert "ExecStart=/usr/sbin/lfhttpd -c /usr/etc/lfhttpd/lfhttpd.conf" in unit
    assert "ExecReload=/bin/kill -HUP $MAINPID" in unit
    # Nothing outside DESTDIR's tree: every file is one of these.
    files = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())
    assert files == ["usr/etc/lfhttpd/fastcgi.conf", "usr/etc/lfhttpd/fastcgi_params",
                     "usr/etc/lfhttpd/lfhttpd.conf", "usr/etc/lfhttpd/scgi_params",
                     "usr/etc/lfhttpd/uwsgi_params", "usr/lib/systemd/system/lfhttpd.service",
                     "usr/sbin/lfhttpd", "usr/share/man/man5/lfhttpd.conf.5",
                     "usr/share/man/man8/lfhttpd.8"]


def test_install_keeps_a_configuration_already_there(tmp_path):
    dest = tmp_path / "dest"
    conf = dest / "usr/local/etc/lfhttpd/lfhttpd.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text("listen 8081;\n")
    make_install(tmp_path, "/usr/local", str(dest))
    assert conf.read_text() == "listen 8081;\n"
    assert (dest / "usr/local/sbin/lfhttpd").exists()


def test_installed_unit_passes_systemd_analyze_verify(tmp_path):
    """Installed without DESTDIR into a prefix of its own, the unit names files that exist,
    which the verifier checks (WorkingDirectory, /srv, made a real folder too)."""
    tool = shutil.which("systemd-analyze")
    if not tool:
        pytest.skip("systemd-analyze is not installed (make check-deps installs systemd)")
    prefix = tmp_path / "prefix"
    make_install(tmp_path, str(prefix))
    text = (prefix / "lib/systemd/system/lfhttpd.service").read_text()
    assert f"ExecStart={prefix}/sbin/lfhttpd -c {prefix}/etc/lfhttpd/lfhttpd.conf" in text
    unit = tmp_path / "lfhttpd.service"
    unit.write_text(text.replace("WorkingDirectory=/srv", f"WorkingDirectory={tmp_path}"))
    p = subprocess.run([tool, "verify", "--man=no", str(unit)], capture_output=True,
                       text=True, timeout=60, env=dict(os.environ, SYSTEMD_LOG_LEVEL="notice"))
    # Only what concerns this unit counts (verify also loads the units it depends on).
    ours = [line for line in (p.stdout + p.stderr).splitlines() if "lfhttpd.service" in line]
    assert not ours, "\n".join(ours)
