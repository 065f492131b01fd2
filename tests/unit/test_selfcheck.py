"""calibrate --check: which cells it runs, the step scale it stores, and how the planner applies it."""

from __future__ import annotations

import copy
import json

import pytest

from dsbench.bench.tune import default_strategies
from dsbench.errors import UserError
from dsbench.plan.candidate import Candidate
from dsbench.plan.estimate import estimate
from dsbench.plan.machine_profile import read_profile
from dsbench.plan.selfcheck import check_record, check_strategies, chosen_cells
from dsbench.report.tables import check_warnings
from tests.conftest import DATA

PROFILE = DATA / "runs" / "cpu-calibrated" / "profile-llama-tiny.json"


def test_one_cell_per_engine_family_where_the_model_allows():
    assert check_strategies(default_strategies("llama-tiny", 2)) == ["ddp", "fsdp", "zero1", "zero2", "zero3",
                                                                   "torch_tp2", "zero1_tp2", "torch_pipe2",
                                                                   "pipe2", "ulysses2"]
    # one family each: the step scales a default check stores (tests/integration/test_calibrate.py runs two cells)
    from dsbench.strategies import get

    assert sorted(get(name).family for name in check_strategies(default_strategies("llama-tiny", 2))) == sorted(
        ["ddp", "fsdp", "pipeline", "pipe_engine", "tensor", "autotp", "zero1", "zero", "zero3", "ulysses"])
    # GPT-2's Conv1D layers: torch_tp splits them (since 2026-12-01), DeepSpeed's AutoTP does not (no zero1_tp2);
    # Ulysses splits its sequence (since 2026-12-01: its attention exchanges whole heads like Llama's)
    assert check_strategies(default_strategies("gpt2-mini", 2)) == ["ddp", "fsdp", "zero1", "zero2", "zero3",
                                                                   "torch_tp2", "torch_pipe2", "pipe2", "ulysses2"]
    assert check_strategies(default_strategies("gpt2-mini", 1)) == ["single"]  # one rank (one GPU): the plain loop


def test_check_strategies_picks_among_the_check_s_cells_in_its_order():
    every = check_strategies(default_strategies("llama-tiny", 2))
    assert chosen_cells(every, ["pipe2", "ddp"]) == ["ddp", "pipe2"]
    assert chosen_cells(every, every) == every
    # a strategy the planner prices but that is no check cell, a typo, one the model cannot run: named, with the cells
    for stray in ("zero2_offload", "dpp", "zero1_tp2"):
        among = every if stray != "zero1_tp2" else check_strategies(default_strategies("gpt2-mini", 2))
        found = chosen_cells(among, ["ddp", stray])
        assert isinstance(found, str) and found.startswith(f"'{stray}' is not one of --check's cells (ddp, fsdp")
    assert len(chosen_cells(every, ["x" * 10_000])) < 200  # a hostile name is not echoed whole


def test_a_chosen_check_scales_only_the_families_it_ran(tmp_path):
    """Without ``check.chosen`` a profile missing ZeRO-1's family reads it at ZeRO-2's scale (a profile checked before
    ZeRO-1 had its own cell); with it, ZeRO-1 was left out by choice and stays unscaled."""
    from dsbench.plan.selfcheck import step_scale

    cells = [{"strategy": "zero2", "family": "zero", "measured_step_ms": 120.0, "predicted_step_ms": 100.0}]
    old = {"check": check_record(cells)}
    chosen = {"check": check_record(cells, chosen=["zero2"])}
    assert chosen["check"]["chosen"] == ["zero2"] and "chosen" not in old["check"]
    assert step_scale(old)["zero1"] == pytest.approx(1.2)
    assert step_scale(chosen) == {"zero": pytest.approx(1.2)}
    folder = tmp_path / "chosen"
    folder.mkdir()
    data = json.loads(PROFILE.read_text())
    (folder / "profile.json").write_text(json.dumps({**data, "check": chosen["check"]}))
    plain = _with_scale(tmp_path, {})
    zero1, zero2 = Candidate(strategy="zero1"), Candidate(strategy="zero2")
    assert _step(folder / "profile.json", zero1).step_s == pytest.approx(_step(plain, zero1).step_s)
    assert _step(folder / "profile.json", zero2).step_s == pytest.approx(_step(plain, zero2).step_s * 1.2)


def test_the_scale_is_measured_over_predicted_per_family_and_the_error_its_inverse():
    cells = [{"strategy": "ddp", "family": "ddp", "measured_step_ms": 60.0, "predicted_step_ms": 48.0},
             {"strategy": "zero2", "family": "zero", "measured_step_ms": 100.0, "predicted_step_ms": 108.0}]
    record = check_record(cells)
    assert record["step_scale"] == {"ddp": 1.25, "zero": pytest.approx(100 / 108)}
    assert [round(row["error"], 4) for row in record["cells"]] == [-0.2, 0.08]
    from dsbench.report.tables import check_grid

    grid = check_grid(record)
    assert [row[:2] + row[5:] for row in grid.rows] == [["ddp", "ddp", "-20.0%", "x1.250"],
                                                         ["zero2", "zero", "+8.0%", "x0.926"]]
    assert [row[3] for row in grid.rows] == ["-", "-"] and "1 run each" in grid.title  # no range recorded
    warnings = check_warnings(record)
    assert len(warnings) == 1 and "ddp" in warnings[0] and "x1.250" in warnings[0]  # 8% is within the goal
    assert record["repeats"] == 1 and check_record(cells, repeats=3)["repeats"] == 3
    assert record["step_residual_ms"] == {}  # no pipeline cell


def test_a_pipeline_s_check_is_added_to_each_step_not_multiplied():
    """The pipeline families' miss is per step (tests/unit/test_accum_split.py): their check stores measured -
    predicted, the planner adds it to every step of the family, and the tables say so; a pipeline predicted too
    slow keeps its scale."""
    from dataclasses import replace

    from dsbench.models import PRESETS
    from dsbench.plan.candidate import Candidate
    from dsbench.plan.estimate import estimate
    from dsbench.plan.hardware import Link
    from dsbench.plan.inputs import Cluster, Workload
    from dsbench.plan.selfcheck import step_residual
    from dsbench.report.tables import check_grid

    cells = [{"strategy": "ddp", "family": "ddp", "measured_step_ms": 60.0, "predicted_step_ms": 48.0},
             {"strategy": "torch_pipe2", "family": "pipeline", "measured_step_ms": 84.0, "predicted_step_ms": 72.0},
             {"strategy": "pipe2", "family": "pipe_engine", "measured_step_ms": 70.0, "predicted_step_ms": 76.0}]
    record = check_record(cells)
    assert record["step_residual_ms"] == {"pipeline": 12.0}  # pipe2 was predicted slow: scaled, 70 / 76
    assert step_residual({"check": record}) == {"pipeline": 0.012} and step_residual({}) == {}
    assert [row[-1] for row in check_grid(record).rows] == ["x1.250", "+12.0 ms", "x0.921"]
    link = Link("x", 4.5, 128.0, "test")
    cl = Cluster(nodes=1, gpus_per_node=2, gpu_mem_gib=12, peak_tflops=1.0, intra=link, inter=link, host_link=link,
                 compute_tflops=0.02, overlap_comm=False)
    checked = replace(cl, step_scale=tuple(record["step_scale"].items()), step_residual=(("pipeline", 0.012),))
    for accum in (1, 4):  # the same 12 ms at every accumulation; ddp's 25% of whatever its step is
        wl = Workload(shape=PRESETS["gpt2-mini"], seq_len=128, micro_batch=2, grad_accum=accum, precision="fp32")
        pipe = Candidate(strategy="ddp", pp=2, engine="torch")
        assert estimate(pipe, wl, checked).step_s == pytest.approx(estimate(pipe, wl, cl).step_s + 0.012)
        assert estimate(pipe, wl, checked).check_s == pytest.approx(0.012)
        ddp = Candidate(strategy="ddp")
        assert estimate(ddp, wl, checked).step_s == pytest.approx(estimate(ddp, wl, cl).step_s * 1.25)


def test_check_repeats_ask_compare_for_interleaved_launches(tmp_path, monkeypatch):
    """``--check-repeats 3``: the check's compare gets repeats 3 (compare runs every cell once, then again), and
    the stored record says so."""
    from dsbench.commands import calibrate as command

    seen = {}

    def fake_compare(_config, flags, folder, **_kwargs):
        seen.update(flags)
        raise SystemExit(0)  # stop before any launch: what the compare was asked for is the assertion

    monkeypatch.setattr("dsbench.bench.session.run_compare", fake_compare)
    with pytest.raises(SystemExit):
        command._run_cells(["ddp"], "llama-tiny", 2, 2, 128, "fp32", tmp_path, 60.0, 3, str(PROFILE))
    assert seen["repeats"] == 3 and seen["strategies"] == ["ddp"]


def _with_scale(tmp_path, scale, **rates):
    data = json.loads(PROFILE.read_text())
    data["check"] = {"step_scale": scale}
    data["rates"].update(rates)
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(data))
    return path


def _step(profile_path, candidate):
    from dsbench.plan.api import build
    from dsbench.plan.request import PlanRequest

    request = PlanRequest(model="llama-tiny", gpus=2, seq_len=128, micro_batch=2, precision="fp32",
                          profile=read_profile(str(profile_path)))
    workload, cluster, _ = build(request)
    return estimate(candidate, workload, cluster)


def test_the_planner_scales_the_checked_families_only(tmp_path):
    plain, scaled = tmp_path / "plain", tmp_path / "scaled"
    plain.mkdir(), scaled.mkdir()
    unscaled = _with_scale(plain, {})
    checked = _with_scale(scaled, {"ddp": 1.25, "zero": 0.9, "zero3": 1.5, "pipeline": 1.3})
    cases = ((dict(strategy="ddp"), 1.25), (dict(strategy="zero1"), 0.9), (dict(strategy="zero3"), 1.5),
             (dict(strategy="zero2", offload="cpu"), 0.9), (dict(strategy="fsdp"), 1.0),
             (dict(strategy="ddp", tp=2, engine="torch"), 1.0),  # tensor parallelism: not checked here
             (dict(strategy="zero1", pp=2), 1.3))  # DeepSpeed's pipeline engine, at torch_pipe2's scale
    for fields, factor in cases:
        candidate = Candidate(**fields)
        before, after = _step(unscaled, candidate), _step(checked, candidate)
        assert after.step_s == pytest.approx(before.step_s * factor)
        assert after.check_s == pytest.approx(before.step_s * (factor - 1))
        assert after.tokens_per_s == pytest.approx(before.tokens_per_s / factor)
    # a profile whose check ran ZeRO-1's own cell scales it by its own figure, ZeRO-2 by the zero family's
    own = tmp_path / "own"
    own.mkdir()
    both = _with_scale(own, {"zero": 0.9, "zero1": 1.2})
    for fields, factor in ((dict(strategy="zero1"), 1.2), (dict(strategy="zero2"), 0.9)):
        assert _step(both, Candidate(**fields)).step_s == pytest.approx(_step(unscaled, Candidate(**fields)).step_s
                                                                         * factor)


def test_the_offloaded_zero_steps_are_unscaled_where_the_profile_timed_the_offload(tmp_path):
    """A profile that timed the offload on its model (``rates.zero_offload_param_s``) leaves the offloaded ZeRO-1/2
    unscaled and ZeRO-2 at its scale; one that did not reads them at ZeRO-2's scale, as they were planned then."""
    folders = [tmp_path / name for name in ("plain", "timed", "guessed")]
    for folder in folders:
        folder.mkdir()
    rate = -5e-9  # seconds per stepped parameter: the offload 5 ms faster per million, as calibrate read it
    plain = _with_scale(folders[0], {}, zero_offload_param_s=rate)
    with_rate = _with_scale(folders[1], {"zero": 1.3}, zero_offload_param_s=rate)
    without_rate = _with_scale(folders[2], {"zero": 1.3})
    for zero in (1, 2):
        offload = Candidate(strategy=f"zero{zero}", offload="cpu")
        assert _step(with_rate, offload).step_s == pytest.approx(_step(plain, offload).step_s)
        assert _step(with_rate, offload).check_s == 0
        assert _step(without_rate, offload).check_s > 0
    assert _step(with_rate, Candidate(strategy="zero2")).step_s == pytest.approx(
        _step(plain, Candidate(strategy="zero2")).step_s * 1.3)


@pytest.mark.parametrize("check, message", [
    ([], "check.step_scale must map"),
    ({"step_scale": [1.0]}, "check.step_scale must map"),
    ({"step_scale": {"ddp": 0}}, "check.step_scale.ddp must be a finite number > 0"),
    ({"step_scale": {"ddp": "1.2"}}, "check.step_scale.ddp must be a finite number > 0"),
    ({"step_scale": {"ddp": True}}, "check.step_scale.ddp must be a finite number > 0"),
    ({"step_scale": {}, "step_residual_ms": 12.0}, "check.step_residual_ms must map"),
    ({"step_scale": {}, "step_residual_ms": {"pipeline": -1.0}},
     "check.step_residual_ms.pipeline must be a finite number > 0"),
    ({"step_scale": {}, "step_residual_ms": {"pipeline": float("nan")}},
     "check.step_residual_ms.pipeline must be a finite number > 0"),
    ({"step_scale": {}, "chosen": "ddp"}, "check.chosen must list strategy names"),
    ({"step_scale": {}, "chosen": [1]}, "check.chosen must list strategy names"),
])
def test_a_bad_check_section_is_one_line(tmp_path, check, message):
    data = json.loads(PROFILE.read_text())
    path = tmp_path / "profile.json"
    path.write_text(json.dumps({**copy.deepcopy(data), "check": check}))
    with pytest.raises(UserError, match=message) as caught:
        read_profile(str(path))
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("name, family", [
    ("single", "ddp"), ("ddp", "ddp"), ("fsdp", "fsdp"), ("fsdp_no_reshard", "fsdp"), ("zero0", "deepspeed"),
    ("zero1", "zero1"), ("zero2", "zero"), ("zero2_offload", "zero_offload"), ("zero3", "zero3"),
    ("zero3_offload", "zero3"),
    ("pipe2", "pipe_engine"), ("zero1_tp2", "autotp"), ("torch_pipe4", "pipeline"), ("torch_tp2_sp", "tensor"),
])
def test_every_strategy_has_the_family_of_its_code_path(name, family):
    from dsbench.strategies import get
    from dsbench.strategy_match import for_candidate

    assert get(name).family == family
    assert for_candidate("zero1", offload="cpu").family == "zero_offload"


def test_plan_says_which_scales_a_checked_profile_applied():
    from click.testing import CliRunner

    from dsbench.cli import cli

    checked = DATA / "runs" / "cpu-calibrated" / "oos-20261126-0319-gpt2-mini" / "profile.json"
    scale = json.loads(checked.read_text())["check"]["step_scale"]
    args = ["plan", "--model", "gpt2-mini", "--gpus", "2", "--precision", "fp32", "--gpu-mem", "12", "--profile",
            str(checked)]
    planned = json.loads(CliRunner().invoke(cli, [*args, "--json"]).output)
    # checked before ZeRO-1, DeepSpeed's pipeline engine and the offload had their own families (nor timed the
    # offload on its model): read at the scales of the families they were in, as they were planned then
    assert "zero1" not in scale and planned["cluster"]["step_scale"] == {
        **scale, "zero1": scale["zero"], "pipe_engine": scale["pipeline"], "zero_offload": scale["zero"]}
    text = CliRunner().invoke(cli, args, terminal_width=400).output
    assert f"step times corrected by its calibrate --check: ddp x{scale['ddp']:.2f}" in " ".join(text.split())
    # a family the check did not run (here the offload's, --check-strategies' left-out ones) is said to be uncorrected
    assert "; other families as predicted)" in " ".join(text.split())


def test_the_check_table_names_its_launches_and_their_range():
    """With ``--check-repeats 3`` the measured figure is the median of three launches: the title says so (it said
    "1 run each" until 2026-11-27) and each cell shows its fastest and slowest launch."""
    from dsbench.report.tables import check_grid

    cells = [{"strategy": "ddp", "family": "ddp", "measured_step_ms": 21.7, "measured_range_ms": [20.25, 24.5],
              "predicted_step_ms": 16.3}]
    grid = check_grid(check_record(cells, repeats=3))
    assert "median of 3 runs each" in grid.title
    assert grid.rows[0][2:4] == ["21.7", "20.2-24.5"]
