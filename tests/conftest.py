"""Shared fixtures: data paths, a CLI runner, a tmp working directory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
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
