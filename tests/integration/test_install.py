"""A non-editable wheel install finds its templates, presets and hostfiles (setup.cfg data_files)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.dist


def test_wheel_install_renders_presets(tmp_path):
    wheel_dir, prefix = tmp_path / "wheel", tmp_path / "prefix"
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                            str(wheel_dir), str(ROOT)], check=True, capture_output=True, text=True)
    # a quiet build: every importable folder (dsbench/data too) is a declared package, so setuptools has no warning
    assert "absent from the `packages` configuration" not in built.stdout + built.stderr
    [wheel] = wheel_dir.glob("dsbench-*.whl")
    # --ignore-installed: never uninstall the dsbench this environment already has (e.g. an editable one)
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--ignore-installed", "-q", "--prefix",
                    str(prefix), str(wheel)],
                   check=True, capture_output=True)
    [site] = prefix.glob("lib/python*/site-packages")
    check = ("import dsbench, json; from dsbench.configs.api import render_config; "
             "from dsbench.paths import data_file; assert data_file('tokenizer.json').is_file(); "
             "from dsbench.paths import shipped_dir; print(dsbench.__file__); print(shipped_dir('ds_configs')); "
             "print(json.dumps(render_config({'zero': 3}, 'zero3_offload')[0]['zero_optimization']['offload_param']))")
    out = subprocess.run([sys.executable, "-c", check], cwd=tmp_path, env={"PYTHONPATH": str(site)},
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0].startswith(str(site))
    assert out[1] == str(prefix / "share" / "dsbench" / "ds_configs")
    assert '"device": "cpu"' in out[2]
    assert (prefix / "share" / "dsbench" / "hostfiles" / "a100").is_file()
    assert (prefix / "share" / "dsbench" / "ds_configs" / "accelerate" / "fsdp.yaml").is_file()
