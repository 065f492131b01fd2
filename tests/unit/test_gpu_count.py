"""How many GPUs a launch on this machine plans for (envinfo.local_gpu_count), which decides CPU ranks
(DS_ACCELERATOR=cpu, gloo) or GPU ranks. Oracle on this CPU machine: torch's own CUDA count, under the same
CUDA_VISIBLE_DEVICES."""

from __future__ import annotations

import functools
import subprocess
import sys

import pytest

from dsbench.envinfo import local_gpu_count


@pytest.mark.parametrize("visible", [None, "0", "0,1", "GPU-8c1f,GPU-2d7e", "-1", ""])
def test_a_machine_without_nvidia_devices_has_no_gpus_whatever_cuda_visible_devices_lists(tmp_path, monkeypatch,
                                                                                           visible):
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert local_gpu_count(str(tmp_path)) == 0  # an empty /dev
    (tmp_path / "nvidia0").touch()
    (tmp_path / "nvidia1").touch()
    (tmp_path / "nvidiactl").touch()
    expected = {None: 2, "0": 1, "0,1": 2, "GPU-8c1f,GPU-2d7e": 2, "-1": 0, "": 0}[visible]
    assert local_gpu_count(str(tmp_path)) == expected  # two GPUs, the variable choosing among them
    for name in ("nvidia0", "nvidia1", "nvidiactl"):
        (tmp_path / name).unlink()
    (tmp_path / "dxg").touch()  # WSL2: GPUs behind /dev/dxg, none as /dev/nvidiaN
    assert local_gpu_count(str(tmp_path)) == (0 if visible is None else expected)


def test_a_stray_cuda_visible_devices_on_this_cpu_machine_counts_as_torch_counts():
    """`CUDA_VISIBLE_DEVICES=0,1 dsbench launch` on a machine without GPUs plans CPU ranks; torch sees no device."""
    code = ("import torch; from dsbench.envinfo import local_gpu_count; "
            "print(torch.cuda.device_count(), local_gpu_count())")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={"CUDA_VISIBLE_DEVICES": "0,1", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    torch_count, ours = map(int, done.stdout.split())
    assert ours == torch_count


def test_a_launch_with_a_stray_cuda_visible_devices_plans_cpu_ranks(cli_run, monkeypatch, tmp_path):
    """`CUDA_VISIBLE_DEVICES=0,1 dsbench launch --zero 2` where /dev holds no NVIDIA device (an empty folder stands
    for it, whatever this machine has): two CPU ranks, as the launch plans them without the variable."""
    import dsbench.envinfo

    (tmp_path / "dev").mkdir()
    monkeypatch.setattr(dsbench.envinfo, "local_gpu_count", functools.partial(local_gpu_count, str(tmp_path / "dev")))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    result = cli_run("launch", "--zero", "2", "--run-dir", "r", "--dry-run")
    assert result.exit_code == 0, result.output
    assert "DS_ACCELERATOR=cpu" in result.output and "--num_gpus 2" in result.output
