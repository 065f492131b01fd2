"""The documentation site builds with `mkdocs build --strict`: a broken link, a missing anchor or a page left out
of the navigation fails it (issue 29). The package metadata leaves a GPU machine's own torch alone."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import requires
from pathlib import Path

from tests.conftest import ROOT


def test_the_docs_site_builds_strictly(tmp_path):
    mkdocs = Path(sys.executable).parent / "mkdocs"
    done = subprocess.run([str(mkdocs), "build", "--strict", "--site-dir", str(tmp_path / "site")], cwd=ROOT,
                          capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    home = (tmp_path / "site" / "index.html").read_text()
    assert "make demo" in home and 'href="compare/' in home  # the README, its docs/ links made relative
    for page in ("install", "configs", "launching", "parallelism", "compare", "plan", "checkpoints", "errors"):
        assert (tmp_path / "site" / page / "index.html").exists(), page


def test_a_page_left_out_of_the_navigation_fails_the_build(tmp_path):
    """The check can fail: a copy of the docs with one page more than the navigation names."""
    import shutil

    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    shutil.copytree(ROOT / "scripts", tmp_path / "scripts")
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    (tmp_path / "docs" / "orphan.md").write_text("# Not in the navigation\n\nSee [a page](missing.md).\n")
    done = subprocess.run([str(Path(sys.executable).parent / "mkdocs"), "build", "--strict"], cwd=tmp_path,
                          capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode != 0 and "missing.md" in done.stderr and "orphan.md" in done.stderr


def test_the_package_metadata_pins_no_torch_build():
    """setup.cfg states lower bounds only: installed beside a GPU machine's CUDA torch and DeepSpeed, pip never
    replaces them (constraints.txt pins this CPU machine only). Read from the installed metadata."""
    wanted = [r.split(";")[0].strip() for r in requires("dsbench") or []]  # the requirement, not its marker
    assert wanted and not [r for r in wanted if any(pin in r for pin in ("==", "~=", "<", "!=", "+cpu", "@"))]
    assert "torch" in wanted and "deepspeed" in wanted  # unversioned: whatever CUDA build the machine has
