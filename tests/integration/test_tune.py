"""dsbench tune for real on 2 CPU ranks: at most --budget runs, each a compare cell, then the winner raced with its
speed options; --resume runs nothing again."""

from __future__ import annotations

import json

import pytest

from tests.conftest import ROOT
from tests.integration.conftest import dsbench

pytestmark = pytest.mark.dist
TUNE = ["tune", "--model", "gpt2-tiny", "--num-gpus", "2", "--strategies", "ddp,zero2,zero3", "--no-checkpointing",
        "--budget", "2", "--steps", "4", "--warmup", "1", "--gpu-mem", "12", "--speed-options", "--json"]


def test_tune_runs_within_its_budget_and_resumes(tmp_path):
    out = tmp_path / "tune"
    result = dsbench(*TUNE, "--out", str(out), cwd=ROOT, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    found = json.loads(result.stdout)
    assert 1 <= found["runs_used"] <= 2 and len(found["layouts"]) == 9  # 3 strategies x micro-batch 1, 2, 4
    winner = found["winner"]
    cell = out / "cells" / winner["cell"]
    summary = json.loads((cell / "summary.json").read_text())
    assert winner["tokens_per_s"] == summary["throughput"]["tokens_per_s"]  # the wall clock, as measured
    assert winner["micro_batch"] * winner["grad_accum"] == 4 and winner["command"].startswith("dsbench launch")
    # every layout steps with a fused Adam (torch's fused AdamW for ddp, DeepSpeed's FusedAdam for ZeRO); the speed
    # race: the winning layout again uncompiled, then compiled (every strategy here compiles)
    speed = found["speed"]
    assert [r["compile"] for r in speed] == [False, True] and all(r["tokens_per_s"] for r in speed)
    assert {r["fused_optimizer"] for r in speed} == {winner["strategy"] == "ddp"}
    fastest = max(speed, key=lambda r: r["tokens_per_s"])
    assert winner["cell"] == fastest["cell"] and winner["tokens_per_s"] == fastest["tokens_per_s"]
    assert ("--compile" in winner["command"]) is fastest["compile"]
    assert json.loads((out / "tune.json").read_text())["winner"]["cell"] == winner["cell"]
    cells = sorted(p.name for p in (out / "cells").iterdir())
    again = dsbench(*TUNE, "--out", str(out), "--resume", cwd=ROOT)
    assert again.returncode == 0, again.stderr[-3000:]
    assert sorted(p.name for p in (out / "cells").iterdir()) == cells  # nothing ran again
    resumed = json.loads(again.stdout)
    assert resumed["winner"]["cell"] == winner["cell"]
    # the runs replayed in the order they started: every layout's figures as the tune printed them, a measured
    # layout's corrected prediction (the one that chose it) included
    assert resumed["layouts"] == found["layouts"] and resumed["runs"] == found["runs"]
    report = dsbench("report", str(out / "cells"), "-o", str(tmp_path / "report"), "--no-plots", cwd=ROOT)
    assert report.returncode == 0, report.stderr[-2000:]
