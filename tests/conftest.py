"""Shared fixtures: data paths, a CLI runner, a tmp working directory."""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType

import pytest
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"


def file_digests(folder: Path) -> dict[str, str]:
    """sha256 of every regular file under ``folder``, by its relative path: what a fixture whose files the tests
    link to (``copy_function=os.link``, one copy for all of them) checks is unchanged after them, since a command
    that wrote into a given file in place would change it for every test after."""
    import hashlib

    return {str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(folder.rglob("*")) if path.is_file()}


def load_script(name: str) -> ModuleType:
    """``scripts/<name>.py`` as a module, so its pure functions are tested without running the program (scripts/
    is no package: its programs import each other from their own folder, which goes on the path)."""
    import importlib.util
    import sys

    sys.path.insert(0, str(ROOT / "scripts"))
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
CORPUS = DATA / "corpus"

os.environ.setdefault("DS_ACCELERATOR", "cpu")


@pytest.fixture
def cli_run(tmp_path, monkeypatch):
    """Invoke the dsbench CLI in-process from a temporary working directory; returns the click Result."""
    from dsbench.cli import cli

    monkeypatch.chdir(tmp_path)
    runner = CliRunner()

    def invoke(*args: str):
        return runner.invoke(cli, list(args), catch_exceptions=False)

    return invoke
