"""``dsbench calibrate --repeats``: what the command hands its ranks, read back by the ranks' own parser."""

from __future__ import annotations

import shlex

import pytest


def _worker_args(cli_run, *flags: str):
    """The calibration ranks' arguments as ``dsbench calibrate --dry-run`` prints them, parsed by the ranks' parser."""
    from dsbench.worker.calibrate import _parser

    result = cli_run("calibrate", "--num-gpus", "2", "--model", "gpt2-tiny", "--dry-run", *flags)
    assert result.exit_code == 0, result.output
    line = next(line for line in result.output.splitlines() if "torchrun" in line)
    argv = shlex.split(line)
    return _parser().parse_args(argv[argv.index("dsbench.worker.calibrate") + 1:])


def test_the_ranks_time_each_figure_over_the_repeats_given(cli_run):
    assert _worker_args(cli_run).repeats == 5  # the default, stated once (the click option)
    assert _worker_args(cli_run, "--repeats", "9").repeats == 9


@pytest.mark.parametrize("value", ["2", "0", "-1", "x", "", "nan", "1e9", "101", "3.5", "$(id)"])
def test_repeats_outside_three_to_a_hundred_is_a_usage_error(cli_run, value):
    result = cli_run("calibrate", "--num-gpus", "2", "--dry-run", "--repeats", value)
    assert result.exit_code == 2 and "--repeats" in result.output and "Traceback" not in result.output


def test_the_ranks_parser_needs_the_repeats():
    """The worker takes no default of its own: the command's is the one."""
    from dsbench.worker.calibrate import _parser

    with pytest.raises(SystemExit):
        _parser().parse_args(["--out", "m.json"])


def test_the_printed_spread_says_how_many_samples_it_is_over():
    """A profile written since --repeats records it, and calibrate's summary says so; an older one is read as it
    was (no count)."""
    import json

    from dsbench.plan.profile_summary import summary_lines
    from tests.conftest import DATA

    stored = DATA / "runs" / "cpu-calibrated"
    new = json.loads((stored / "oos-20261129-1024-llama-tiny" / "profile.json").read_text())
    old = json.loads((stored / "oos-20261129-0410-llama-tiny" / "profile.json").read_text())
    assert new["repeats"] == 5 and "repeats" not in old

    def spread(profile: dict) -> str:
        return next(line for line in summary_lines(profile) if line.startswith("spread over the samples"))

    assert spread(new).startswith("spread over the samples (5 samples each, half the p10-p90 range / median): ")
    assert spread(old).startswith("spread over the samples (half the p10-p90 range / median): ")
    # since 2026-11-29 18:15 the ZeRO steps on the model take 3 rounds per repeat, and the line says so
    rounds = json.loads((stored / "oos-20261129-1818-gpt2-tiny" / "profile.json").read_text())
    assert spread(rounds).startswith("spread over the samples (5 samples each, the ZeRO steps on the model 15, half ")
    # and since 21:05 the split layers too (calibrate_engines.MODEL_ROUNDS); a llama-tiny profile's line says so
    layers = json.loads((stored / "oos-20261129-2045-llama-tiny" / "profile.json").read_text())
    assert layers["tensor_parallel"]["torch_forward_backward"]["samples"] == 5
    assert spread(layers).startswith("spread over the samples (5 samples each, the ZeRO steps on the model 15, half ")
    for timed in layers["tensor_parallel"].values():
        if isinstance(timed, dict):
            timed["samples"] = 15
    assert spread(layers).startswith(
        "spread over the samples (5 samples each, the ZeRO steps and split layers on the model 15, half ")


def test_check_strategies_runs_only_the_cells_named(cli_run):
    """The dry run names the check's cells: every family's by default, the chosen ones (in the check's order) with
    ``--check-strategies``."""
    def cells(*flags: str) -> str:
        result = cli_run("calibrate", "--num-gpus", "2", "--model", "llama-tiny", "--check", "--dry-run", *flags)
        assert result.exit_code == 0, result.output
        return next(line for line in result.output.splitlines() if line.startswith("then --check: "))

    assert cells().startswith("then --check: ddp, fsdp, zero1, zero2, zero3, torch_tp2, zero1_tp2, torch_pipe2, "
                              "pipe2, ulysses2 (")
    assert cells("--check-strategies", "pipe2, ddp").startswith("then --check: ddp, pipe2 (")
