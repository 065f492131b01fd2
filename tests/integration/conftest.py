"""Real multi-process launches on 2 CPU ranks (gloo). Runs are cached per session: several tests read one run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

STEPS = 12
CPU_ENV = {"DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1", "DSBENCH_DEVICE": "cpu", "PYTHONUNBUFFERED": "1"}


def bin_path(name: str) -> str:
    """A console script of this venv (deepspeed, accelerate, torchrun)."""
    return str(Path(sys.executable).parent / name)


def run_command(argv: list[str], cwd: Path, env: dict[str, str] | None = None,
                timeout: int = 900) -> subprocess.CompletedProcess:
    """Run a command with the CPU environment; output captured as text."""
    full_env = {**os.environ, **CPU_ENV, **(env or {})}
    full_env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{full_env.get('PATH', '')}"
    return subprocess.run(argv, cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout)


def dsbench(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: int = 900):
    return run_command([sys.executable, "-m", "dsbench", *args], cwd=cwd, env=env, timeout=timeout)


def load_run(folder: Path) -> dict:
    """metrics.jsonl records by type, and summary.json."""
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    return {"header": [r for r in records if r["type"] == "header"],
            "steps": [r for r in records if r["type"] == "step"],
            "states": [r for r in records if r["type"] == "model_states"],
            "window": [r for r in records if r["type"] == "window"],
            "summary": json.loads((folder / "summary.json").read_text())}


class Runs:
    """Launch each named configuration once per session and keep the result."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.cache: dict[str, tuple[subprocess.CompletedProcess, Path]] = {}

    def get(self, name: str, launch_args: list[str], worker_args: list[str] | None = None):
        if name not in self.cache:
            folder = self.base / name
            worker = ["--steps", str(STEPS), "--warmup", "2", "--quiet", *(worker_args or [])]
            result = dsbench("launch", *launch_args, "--run-dir", str(folder), "--", *worker, cwd=ROOT)
            self.cache[name] = (result, folder)
        return self.cache[name]


@pytest.fixture(scope="session")
def runs(tmp_path_factory) -> Runs:
    return Runs(tmp_path_factory.mktemp("runs"))
