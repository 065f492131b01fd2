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
    # every note is the data-parallel one, first; or, for an offloaded candidate, the CPU Adam one (8 ranks share
    # each host) after it or alone
    noted = [c for c in candidates if c["notes"] and "one NIC per GPU" in c["notes"][0]]
    offloaded = [c for c in candidates if c["notes"] and "CPU Adam" in c["notes"][-1]]
    assert noted and all(c["exposed_comm_s"] >= c["step_s"] / 6 * 0.99 for c in noted)  # the caveat's share
    assert all(c["offload"] != "none" and c["offload_s"] >= c["step_s"] / 6 * 0.99 for c in offloaded)
    assert all(len(c["notes"]) == (c in noted) + (c in offloaded) for c in candidates if c["notes"])
    shown = cli_run(*args).output
    chosen = [c for c in candidates if c["rank"] in (1, 2)]
    assert ("  note: data-parallel traffic" in shown) == any(c in noted for c in chosen)


def test_more_gpus_in_a_node_than_a_node_holds_is_said_once_with_the_flags_that_fix_it(cli_run):
    """`--gpus 16` alone is one node of 16, every pair at NVLink's rate: faster than the 2 HGX nodes 16 H100s are
    (the network's traffic is missing), so the ranking and --layout say so, and name the flags."""
    ranking = ("plan", "--model", "llama-7b", "--gpu", "h100", "--seq-len", "2048", "--micro-batch", "1")
    one = json.loads(cli_run(*ranking, "--gpus", "16", "--json").output)
    two = json.loads(cli_run(*ranking, "--gpus", "16", "--nodes", "2", "--json").output)
    [note] = one["cluster"]["notes"]
    assert "16 GPUs in one node" in note and "--nodes 2 --gpus-per-node 8" in note
    assert two["cluster"]["notes"] == []
    by_name = {c["name"]: c["step_s"] for c in two["candidates"]}
    assert any(c["step_s"] < by_name[c["name"]] for c in one["candidates"])  # what the missing network hides
    shown = cli_run(*ranking, "--gpus", "16").output
    assert shown.count("note: 16 GPUs in one node") == 1
    layout = _plan(cli_run, *MPT_13B, "--gpu", "h100-sxm", "--nodes", "2", "--gpus-per-node", "12",
                   "--global-batch", "48")
    assert "give --nodes 3 --gpus-per-node 8 " in layout["caveats"][0]  # the same 24 GPUs
    layout = _plan(cli_run, *MPT_13B, "--gpu", "h100-sxm", "--gpus", "12", "--global-batch", "24")
    assert "--nodes and --gpus-per-node (at most 8)" in layout["caveats"][0]
    cpu = cli_run("plan", "--model", "gpt2-mini", "--gpus", "16", "--json", "--profile",
                  str(DATA / "runs" / "cpu-calibrated" / "profile-gpt2-mini.json"))
    assert json.loads(cpu.output)["cluster"]["notes"] == []  # a CPU profile's ranks per node are its machine's
