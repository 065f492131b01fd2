"""dsbench calibrate on 2 CPU ranks: a profile that plan --profile reads."""

from __future__ import annotations

import json
import re
import time

import pytest

from tests.conftest import ROOT
from tests.integration.conftest import dsbench

pytestmark = pytest.mark.dist


def test_calibrate_measures_the_ranks_checks_itself_and_plan_uses_it(tmp_path):
    profile_path = tmp_path / "profile.json"
    started = time.monotonic()
    # --repeats 3, the fewest: the default (5) is what the command hands its ranks by default
    # (tests/unit/test_calibrate_command.py); here the given count reaches every stored figure
    result = dsbench("calibrate", "--num-gpus", "2", "--model", "llama-tiny", "--run-dir", str(tmp_path / "cal"),
                     "-o", str(profile_path), "--check", "--check-strategies", "ddp,pipe2", "--repeats", "3", cwd=ROOT,
                     timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    took = time.monotonic() - started
    profile = json.loads(profile_path.read_text())
    # the profile's seconds are the measurement's own wall time, a part of the command's (which also runs --check);
    # no bound in seconds: on CI (2026-11-27) it took 90.7 s and failed a bound of 60; timings are for benchmarks
    assert profile["world_size"] == 2 and profile["backend"] == "gloo" and 0 < profile["seconds"] < took
    assert len(profile["compute_per_rank"]) == 2 and profile["command"].startswith("dsbench calibrate")
    assert profile["rates"]["model_tflops"] > 0 and profile["rates"]["adam_params_per_s"] > 0
    world = profile["collectives"]["world"]
    for kind in ("all-reduce", "all-gather", "reduce-scatter", "p2p"):
        sizes = [point["bytes"] for point in world[kind]["points"]]
        every = [2**k for k in range(12, 25, 2)]
        # every size, or (a slow moment of a loaded machine: a warm-up call of 50 ms or more) the first three or
        # more, stopped at the size whose warm-up the profile records
        stopped = world[kind].get("stopped_early")
        assert sizes == every if stopped is None else (
            len(sizes) >= 3 and sizes == every[:len(sizes)] and stopped["bytes"] == sizes[-1]
            and stopped["warmup_s"] >= 0.05), (kind, sizes, stopped)
        assert all(p["p10"] <= p["seconds"] <= p["p90"] for p in world[kind]["points"]), kind
        assert world[kind]["bandwidth_gbs"] > 0, kind
    # the engines' own costs, from the stack run plain, under FSDP2 and under ZeRO-1/2/3 (a real step each), from
    # the model itself under ZeRO-1/2, from the model's own layers split over both ranks by DTensor (with and
    # without SP) and by DeepSpeed AutoTP's layers and under DeepSpeed Ulysses, and from its LM head and loss split
    # by vocabulary; torch's zero-bubble split backward on each rank
    for key in ("fsdp_unit_s_per_micro_step", "fsdp_unit_s_per_step", "zero1_call_s", "zero2_call_s",
                "zero1_model_call_s", "zero2_model_call_s", "zero_offload_param_s",
                "zero3_tensor_s", "torch_tp_layer_s", "autotp_layer_s", "torch_tp_sp_layer_s", "torch_tp_lp_head_s",
                "ulysses_layer_s", "zb_split_layer_s", "torch_pp_1f1b_pass_s", "torch_pp_interleaved_pass_s",
                "torch_pp_interleaved_zb_pass_s", "deepspeed_pipe_pass_s", "torch_pp_1f1b_step_s",
                "torch_pp_interleaved_step_s", "torch_pp_interleaved_zb_step_s", "deepspeed_pipe_step_s"):
        assert key in profile["rates"], key
    # torch's pipeline schedules and DeepSpeed's pipeline engine over both ranks on near-empty stages: 1, 2 and 4 x 2
    # micro-batches, 2 chunks interleaved
    pipeline = profile["pipeline"]
    assert (pipeline["stages"], pipeline["micro_batches"], pipeline["virtual_stages"]) == (2, [2, 4, 8], 2)
    assert set(pipeline["schedules"]) == {"1f1b", "interleaved", "interleaved-zb", "deepspeed"}
    assert all(len(points) == 3 and all(timed["p10"] <= timed["seconds"] <= timed["p90"] for timed in points)
               for points in pipeline["schedules"].values())
    for rank in profile["compute_per_rank"]:
        zb = rank["split_backward"]
        assert zb["layers"] == 2 and zb["whole"]["seconds"] > 0 and zb["split"]["seconds"] > 0
    assert profile["deepspeed"]["zero3_step"]["seconds"] > profile["fsdp"]["plain_step"]["seconds"]
    assert profile["repeats"] == 3 and profile["deepspeed"]["zero3_step"]["samples"] == 3
    # the model itself under ZeRO-1 and ZeRO-2 (and ZeRO-2 with the optimizer on the host): each step slower than
    # the plain one, which steps every parameter; 3 rounds per repeat (calibrate_engines.MODEL_ROUNDS), as the
    # split layers
    zero_model = profile["zero_model"]
    assert min(zero_model[f"zero{stage}_step"]["seconds"] for stage in ("1", "2", "2_offload")) > zero_model[
        "plain_forward_backward"]["seconds"] and zero_model["zero2_offload_step"]["samples"] == 3 * 3
    assert profile["tensor_parallel"]["ulysses_forward_backward"]["samples"] == 3 * 3
    split = profile["tensor_parallel"]
    assert split["tp"] == 2 and split["layers"] == 2
    assert split["torch_forward_backward"]["seconds"] > split["plain_forward_backward"]["seconds"] / 2
    assert split["lp_forward_backward"]["seconds"] > split["head_forward_backward"]["seconds"] / 2
    assert split["ulysses_forward_backward"]["seconds"] > split["plain_forward_backward"]["seconds"] / 2
    assert (tmp_path / "cal" / "measured.json").exists()  # the raw measurements stay beside the log
    again = dsbench("calibrate", "--num-gpus", "2", "--run-dir", str(tmp_path / "cal2"), "-o", str(profile_path),
                    cwd=ROOT, timeout=60)
    assert again.returncode == 2 and "exists: choose a new -o" in again.stderr  # a measurement is never replaced
    plan = dsbench("plan", "--model", "llama-tiny", "--gpus", "2", "--precision", "fp32", "--gpu-mem", "12",
                   "--profile", str(profile_path), "--json", cwd=ROOT, timeout=60)
    assert plan.returncode == 0, plan.stderr[-2000:]
    planned = json.loads(plan.stdout)
    assert planned["cluster"]["compute_tflops"] == profile["rates"]["model_tflops"]
    # --check: real cells, run by dsbench compare into the run folder and predicted from the fresh profile;
    # measured / predicted per family is stored, printed, and applied by the planner. Two of the ten a default
    # check runs (one per engine family: tests/unit/test_selfcheck.py), a scaled family and a pipeline's added
    # milliseconds (since 2026-12-05: the other eight engines train in other files, and each cell is 30 steps)
    check = profile["check"]
    assert [cell["strategy"] for cell in check["cells"]] == check["chosen"] == ["ddp", "pipe2"]
    assert set(check["step_scale"]) == {"ddp", "pipe_engine"}
    for cell in check["cells"]:
        folder = next((tmp_path / "cal" / "check" / "cells").glob(f"{cell['strategy']}-w2-*"))
        summary = json.loads((folder / "summary.json").read_text())
        assert summary["status"] == "ok" and summary["measured_steps"] == check["steps"] - check["warmup"]
        step_ms = 1e3 * summary["throughput"]["window_s"] / summary["measured_steps"]  # the run's own wall clock
        assert cell["measured_step_ms"] == pytest.approx(step_ms, rel=1e-6), cell
        scale = cell["measured_step_ms"] / cell["predicted_step_ms"]
        assert check["step_scale"][cell["family"]] == pytest.approx(scale)
        if cell["family"] in ("pipeline", "pipe_engine"):  # a pipeline's correction: measured - predicted, added
            added = cell["measured_step_ms"] - cell["predicted_step_ms"]
            assert check["step_residual_ms"].get(cell["family"]) == (pytest.approx(added) if added > 0 else None)
        assert cell["measured_range_ms"] == pytest.approx([step_ms, step_ms], rel=1e-6)  # one launch: its own
        # the check's table: the cell's row whole, its measured and predicted step as the profile holds them
        low, high = cell["measured_range_ms"]
        cells = (cell["strategy"], cell["family"], f"{cell['measured_step_ms']:,.1f}", f"{low:,.1f}-{high:,.1f}",
                 f"{cell['predicted_step_ms']:,.1f}", f"{cell['error']:+.1%}")
        row = r"\s+".join(map(re.escape, cells))
        assert re.search(row, result.stdout), (row, result.stdout[-3000:])
    rows = {row["name"]: row for row in planned["candidates"]}
    ddp = rows["ddp"]
    assert ddp["check_s"] == pytest.approx(ddp["step_s"] * (1 - 1 / check["step_scale"]["ddp"]))
    assert rows["zero2"]["check_s"] == 0  # a family the check left out by choice keeps no scale
