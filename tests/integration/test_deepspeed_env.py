"""Round trip of .deepspeed_env through DeepSpeed's own parsing and export code and a real remote-style shell."""

from __future__ import annotations

import subprocess

import pytest

from dsbench.launchers.deepspeed import format_deepspeed_env

pytestmark = pytest.mark.dist

VALUES = {"PLAIN": "cpu", "SPACES": "a b  c", "PATHLIKE": "/opt/my env/bin:/usr/bin", "PUNCT": "x,y;z&w|v<u>t(s)r",
          "QUOTE1": "it's", "GLOB": "*.json ?x [ab]", "TILDE": "~/x", "HASH": "#not-a-comment"}


def test_values_reach_the_remote_shell_unchanged(tmp_path, monkeypatch):
    from deepspeed.launcher.multinode_runner import PDSHRunner

    path = tmp_path / ".deepspeed_env"
    path.write_text(format_deepspeed_env(VALUES))
    runner = PDSHRunner.__new__(PDSHRunner)
    runner.exports = {}
    with open(path) as handle:  # DeepSpeed's own loop (launcher/runner.py)
        for var in handle.readlines():
            key, val = var.split("=", maxsplit=1)
            runner.add_export(key, val)
    exports = "".join(f"export {k}={v}; " for k, v in runner.exports.items())  # multinode_runner.py PDSHRunner
    monkeypatch.chdir(tmp_path)
    script = exports + "".join(f'printf "%s\\0" "${k}"; ' for k in VALUES)
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True, cwd=tmp_path).stdout
    assert out.split("\0")[:-1] == list(VALUES.values())
