"""The documentation's promises that a program can check: the README's configuration
loads as written, and every relative link of the README and docs/ names a file that
exists. (The generated reference is checked by `make check-docs`.)"""
import glob
import os
import re
import subprocess

from conftest import BIN, ROOT


def test_readme_minimal_configuration_is_valid(tmp_path):
    text = open(os.path.join(ROOT, "README.md")).read()
    blocks = re.findall(r"```nginx\n(.*?)```", text, re.S)
    assert len(blocks) == 1, "the README shows one configuration"
    conf = tmp_path / "minimal.conf"
    conf.write_text(blocks[0].replace("/srv/www", str(tmp_path)))
    p = subprocess.run([BIN, "-t", "-c", str(conf)], capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 0, p.stdout + p.stderr


def test_every_relative_link_in_the_docs_names_a_file():
    pages = [os.path.join(ROOT, "README.md")] + glob.glob(
        os.path.join(ROOT, "docs", "**", "*.md"), recursive=True)
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)\s]+)\)", open(page).read()):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            path = os.path.normpath(os.path.join(os.path.dirname(page),
                                                 target.split("#")[0]))
            if not os.path.exists(path):
                broken.append(f"{os.path.relpath(page, ROOT)}: {target}")
    assert not broken, "\n".join(broken)
