"""GPU checks (issues 4-6): run only where CUDA is present (a lent H100); skipped on CPU machines and in CI.

    pytest tests/gpu -m gpu -v

They record nothing by themselves: copy the printed figures into docs/benchmarks.md with the command.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(shutil.which("nvidia-smi") is None or
                                                  not os.path.exists("/dev/nvidia0"), reason="needs a CUDA GPU")]


def _dsbench(*args: str, cwd) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("DS_ACCELERATOR", "DSBENCH_DEVICE")}
    return subprocess.run([sys.executable, "-m", "dsbench", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=3600)


@pytest.mark.parametrize("model, micro", [("gpt2", 16), ("llama-1b", 4)])
def test_bf16_matrix_on_one_gpu(tmp_path, model, micro):
    """Issue 5: single/zero1/zero2/zero3/zero2_offload at world size 1, bf16, with MFU."""
    result = _dsbench("compare", "--models", model, "--world-sizes", "1", "--micro-batches", str(micro),
                      "--strategies", "single,zero1,zero2,zero3,zero2_offload", "--precision", "bf16",
                      "--seq-len", "1024", "--steps", "25", "--warmup", "5", "--out", str(tmp_path / "out"),
                      cwd=tmp_path)
    print(result.stdout)
    assert result.returncode == 0, result.stderr[-3000:]
    cells = json.loads((tmp_path / "out" / "report" / "report.json").read_text())["cells"]
    assert all(c["status"] == "ok" and c["mfu"] and c["memory_kind"] == "cuda_max_allocated" for c in cells)


@pytest.mark.parametrize("model", ["gpt2", "llama-1b"])
def test_planner_peak_memory_within_10_percent(tmp_path, model):
    """Issue 6: predicted vs torch.cuda.max_memory_allocated for the top candidates on one GPU."""
    result = _dsbench("plan", "--model", model, "--gpus", "1", "--micro-batch", "4", "--seq-len", "1024",
                      "--verify", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = json.loads(result.stdout)["verify"]
    print(json.dumps(rows, indent=2))
    assert rows and all(abs(r["peak_memory_error"]) < 0.10 for r in rows)
