"""plan --layout says where the GPU model is known to miss, beside the prediction it concerns: the published runs
held out of shared/ (docs/planner.md, "Tables held out of shared/") are the oracle of each caveat."""

from __future__ import annotations

import json

from dsbench.plan.caveats import caveats
from dsbench.plan.gpu_layout import Layout, Shape
from dsbench.plan.gpu_profiles import profile_for
from dsbench.plan.gpu_time import step_time
from tests.conftest import DATA

MPT_13B = ["--layers", "40", "--hidden", "5120", "--heads", "40", "--ffn", "20480", "--vocab", "50368", "--arch",
           "gpt", "--seq-len", "2048"]


def _plan(cli_run, *args: str) -> dict:
    result = cli_run("plan", "--layout", "fsdp", *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_a_comm_bound_multi_node_fsdp_layout_is_read_as_an_upper_bound(cli_run):
    """MosaicML's MPT-13B on 64 H100s (micro-batch 2, no accumulation) ran 0.85 s a step; the one-NIC rule prices
    it near 2.3 s, most of it data-parallel traffic: the caveat says so. On one node the same layout has none."""
    many = _plan(cli_run, *MPT_13B, "--gpu", "h100-sxm", "--gpus", "64", "--nodes", "8", "--micro-batch", "2",
                 "--global-batch", "128")
    assert many["step_s"] > 2 * 128 * 2048 / 307209  # the table's 307,209 tokens/s on 64 GPUs
    assert len(many["caveats"]) == 1 and "one NIC per GPU" in many["caveats"][0]
    one = _plan(cli_run, *MPT_13B, "--gpu", "h100-sxm", "--gpus", "8", "--micro-batch", "2", "--global-batch", "16")
    assert one["caveats"] == []
    shown = cli_run("plan", "--layout", "fsdp", *MPT_13B, "--gpu", "h100-sxm", "--gpus", "64", "--nodes", "8",
                    "--micro-batch", "2", "--global-batch", "128")
    assert "  note: data-parallel traffic across nodes is" in shown.output


def test_long_flash_attention_points_at_calibrating_the_kernel(cli_run):
    long = _plan(cli_run, "--layers", "24", "--hidden", "2048", "--heads", "16", "--ffn", "8192", "--vocab", "50368",
                 "--arch", "gpt", "--seq-len", "32768", "--gpu", "a100-80g", "--gpus", "8", "--global-batch", "32")
    assert any("attention is" in c and "dsbench calibrate" in c for c in long["caveats"])
    short = _plan(cli_run, "--layers", "24", "--hidden", "2048", "--heads", "16", "--ffn", "8192", "--vocab",
                  "50368", "--arch", "gpt", "--seq-len", "2048", "--gpu", "a100-80g", "--gpus", "8",
                  "--global-batch", "32")
    assert short["caveats"] == []


def test_a_calibrated_profile_measured_the_kernel_so_attention_gets_no_caveat(cli_run):
    shape = Shape("llama", 24, 2048, 16, 16, 8192, 32000)
    lay = Layout(shape, 32768, "h200", 8, 8, strategy="fsdp", global_batch=8).check()
    time = step_time(lay, profile_for("h200"))
    assert caveats(lay, time.terms, time.seconds, calibrated=False)
    assert caveats(lay, time.terms, time.seconds, calibrated=True) == []
    measured = _plan(cli_run, "--layers", "24", "--hidden", "2048", "--heads", "16", "--ffn", "8192", "--vocab",
                     "32000", "--seq-len", "32768", "--gpus", "8", "--global-batch", "8", "--profile",
                     str(DATA / "runs" / "gpu-h200-calibrated-20261127" / "a" / "profile-gpu.json"))
    assert measured["gpu"]["kind"] == "h200" and measured["caveats"] == []


def test_the_ranking_carries_the_caveats_and_prints_those_of_its_two_choices(cli_run):
    args = ("plan", "--model", "llama-7b", "--gpus", "64", "--nodes", "8", "--gpu", "h100", "--seq-len", "2048",
            "--micro-batch", "1", "--grad-accum", "1")
    result = cli_run(*args, "--json")
    assert result.exit_code == 0, result.output
    candidates = json.loads(result.output)["candidates"]
    noted = [c for c in candidates if c["notes"]]
    assert noted and all("one NIC per GPU" in c["notes"][0] for c in noted)
    assert all(c["exposed_comm_s"] >= c["step_s"] / 6 * 0.99 for c in noted)  # the caveat's share, of the step
    shown = cli_run(*args).output
    chosen = [c for c in candidates if c["rank"] in (1, 2)]
    assert ("  note: data-parallel traffic" in shown) == any(c["notes"] for c in chosen)
