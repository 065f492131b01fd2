"""dsbench compare: durable cells, resume, failures recorded while the matrix goes on, report built."""

from __future__ import annotations

import json
import shlex
import shutil

import pytest

from dsbench.bench.compare import cell_command, run_matrix
from dsbench.bench.matrix import Cell
from tests.conftest import ROOT
from tests.integration.conftest import dsbench

pytestmark = pytest.mark.dist


class Recorder:
    """A reporter that remembers what happened."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def start(self, total: int) -> None:
        self.events.append(("start", str(total)))

    def skipped(self, cell, status):
        self.events.append(("skip", cell.id))

    def begin(self, cell):
        self.events.append(("begin", cell.id))

    def step(self, cell, record):
        pass

    def end(self, cell, status, reason):
        self.events.append((status, cell.id))

    def stop(self):
        pass


def test_failed_cell_is_recorded_and_matrix_goes_on_then_resume_skips(tmp_path):
    bad = Cell(strategy="zero2", world_size=2, micro_batch=2, model="no-such-model", steps=4, warmup=1)
    also_bad = Cell(strategy="ddp", world_size=2, micro_batch=2, model="no-such-model", steps=4, warmup=1)
    done = Cell(strategy="zero1", world_size=2, micro_batch=2, model="gpt2-tiny", steps=4, warmup=1)
    interrupted = Cell(strategy="zero3", world_size=2, micro_batch=2, model="no-such-model", steps=4, warmup=1)
    # a finished cell from an earlier run, and one whose run was interrupted (status still "running"), each
    # cell.json as compare writes it (a field missing or of another type: the cell runs again, tests/unit)
    for cell, status in ((done, "ok"), (interrupted, "running")):
        folder = tmp_path / "cells" / cell.id
        folder.mkdir(parents=True)
        (folder / "cell.json").write_text(json.dumps({"cell": cell.to_dict(), "id": cell.id, "status": status,
                                                      "command": shlex.join(cell_command(cell, folder, None))}))
        (folder / "metrics.jsonl").write_text('{"type": "header"}\n')
    reporter = Recorder()
    results = run_matrix([bad, also_bad, done, interrupted], tmp_path, resume=True, retry_failed=False, timeout=120,
                         nvme_path=None, reporter=reporter)
    assert [r.status for r in results] == ["failed", "failed", "ok", "failed"]
    assert results[2].skipped and ("skip", done.id) in reporter.events
    status = json.loads((tmp_path / "cells" / bad.id / "cell.json").read_text())
    assert status["status"] == "failed" and status["exit_code"] == 2 and "no-such-model" in status["reason"]
    assert "dsbench launch" in status["command"]
    # the interrupted cell's partial data was kept aside, not deleted
    kept = list((tmp_path / "cells").glob(f"{interrupted.id}.interrupted-*"))
    assert len(kept) == 1 and (kept[0] / "metrics.jsonl").exists()
    # resuming again skips the failed cells too, unless asked to retry them
    again = run_matrix([bad, done], tmp_path, resume=True, retry_failed=False, timeout=120, nvme_path=None,
                       reporter=Recorder())
    assert all(r.skipped for r in again)
    retry = run_matrix([bad, done], tmp_path, resume=True, retry_failed=True, timeout=120, nvme_path=None,
                       reporter=Recorder())
    assert [r.skipped for r in retry] == [False, True]


def test_small_compare_end_to_end(tmp_path):
    out = tmp_path / "cmp"
    # a user's accelerate YAML beside dsbench's strategies (trl's multi-GPU config: DDP), labelled by file name
    shutil.copy(ROOT / "tests" / "data" / "corpus" / "accelerate" /
                "huggingface__trl__examples_accelerate_configs_multi_gpu.yaml", tmp_path / "trl_multi_gpu.yaml")
    result = dsbench("compare", "--strategies", "single,ddp,zero2,accel:trl_multi_gpu.yaml", "--models", "gpt2-tiny",
                     "--steps", "6", "--warmup", "2", "--out", str(out), "--quiet", cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "4/4 cells ok" in result.stdout
    cells = {c["strategy"]: c for c in json.loads((out / "report" / "report.json").read_text())["cells"]}
    # by default every dsbench strategy steps with a fused Adam: torch's fused AdamW (single, ddp), DeepSpeed's
    # FusedAdam (zero2); the user's YAML runs as its own launch would (torch AdamW's default kernel)
    assert {name: c["optimizer"] for name, c in cells.items()} == {
        "single+fused": "AdamW (fused)", "ddp+fused": "AdamW (fused)", "zero2": "FusedAdam",
        "accel:trl_multi_gpu.yaml": "AdamW (for-loop)"}
    assert cells["accel:trl_multi_gpu.yaml"]["final_loss"] == pytest.approx(cells["ddp+fused"]["final_loss"],
                                                                           rel=1e-4)
    for name in ("report.html", "report.md", "report.csv", "report.json", "throughput.png", "memory.png",
                 "scaling.png", "loss.png", "step_time.png"):
        assert (out / "report" / name).stat().st_size > 0, name
    assert cells["ddp+fused"]["scaling_baseline"] == "single+fused"
    assert cells["ddp+fused"]["scaling_efficiency"] == pytest.approx(
        cells["ddp+fused"]["tokens_per_s"] / (2 * cells["single+fused"]["tokens_per_s"]))
    zero2, ddp = cells["zero2"], cells["ddp+fused"]
    assert zero2["speedup_vs_ddp"] == pytest.approx(zero2["tokens_per_s"] / ddp["tokens_per_s"])
    # the same matrix again without --resume is refused; with --resume nothing re-runs
    strategies = "single,ddp,zero2,accel:trl_multi_gpu.yaml"
    assert dsbench("compare", "--strategies", strategies, "--models", "gpt2-tiny", "--steps", "6", "--warmup",
                   "2", "--out", str(out), cwd=tmp_path).returncode == 2
    resumed = dsbench("compare", "--strategies", strategies, "--models", "gpt2-tiny", "--steps", "6",
                      "--warmup", "2", "--out", str(out), "--resume", "--quiet", cwd=tmp_path)
    assert resumed.returncode == 0 and resumed.stderr.count("skip") == 4
