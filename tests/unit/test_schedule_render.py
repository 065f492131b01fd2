"""The LR schedule a rendered config makes DeepSpeed step, and validate's two checks of a schedule: oracle, DeepSpeed
0.19.8's own scheduler classes (runtime/lr_schedules.py) built from the rendered params on a torch optimizer, and
stepped as the engine steps them (once per optimizer step)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dsbench.configs.validate import ValidateContext, validate


def _rendered(cli_run, *flags):
    result = cli_run("render", *flags)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _deepspeeds_lrs(config, steps):
    """The LR DeepSpeed's own scheduler of ``config`` sets before each of ``steps`` optimizer steps, on a torch
    AdamW at the config's lr (the engine builds the class by name with the params, then steps it once a step)."""
    import torch
    from deepspeed.runtime import lr_schedules

    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=config["optimizer"]["params"]["lr"])
    scheduler = getattr(lr_schedules, config["scheduler"]["type"])(optimizer, **config["scheduler"]["params"])
    lrs = []
    for _ in range(steps):
        lrs.append(optimizer.param_groups[0]["lr"])
        scheduler.step()
    return lrs


def test_a_set_optimizer_lr_is_the_warmups_peak(cli_run):
    """Until 2026-12-04 the warm-up's "auto" peak was --lr's default, 3e-4, whatever `--set optimizer.params.lr`
    said: the schedule writes its LR into the optimizer at every step, so the run trained at 3e-4."""
    config = _rendered(cli_run, "--warmup-steps", "10", "--set", "optimizer.params.lr=1e-5")
    lrs = _deepspeeds_lrs(config, 30)
    assert max(lrs) == pytest.approx(1e-5) and lrs[-1] == pytest.approx(1e-5) and lrs[0] == 0


@pytest.mark.parametrize("kind", ["WarmupDecayLR", "WarmupCosineLR"])
def test_a_decaying_scheduler_named_by_set_takes_the_flags_warmup_length_and_lr(cli_run, kind):
    """`--set scheduler.type` names the schedule; --warmup-steps, --train-steps and --lr fill what it leaves out
    (until 2026-12-04 WarmupDecayLR was refused for its total_num_steps whatever --train-steps said, and with that
    set by hand it warmed up over DeepSpeed's default 1000 steps to its default peak 0.001)."""
    config = _rendered(cli_run, "--warmup-steps", "10", "--train-steps", "50", "--lr", "2e-4",
                       "--set", f'scheduler.type="{kind}"')
    lrs = _deepspeeds_lrs(config, 60)
    peak = lrs.index(max(lrs))
    # the peak (--lr) after the 10 warm-up steps (the list starts with the LR before the first step)
    assert max(lrs) == pytest.approx(2e-4) and peak in (10, 11), lrs[:12]
    assert all(a <= b for a, b in zip(lrs[:peak], lrs[1:peak + 1], strict=True))  # rising to it
    assert all(a >= b for a, b in zip(lrs[peak:51], lrs[peak + 1:52], strict=True))  # then falling
    floor = 0.0 if kind == "WarmupDecayLR" else 2e-4 * 1e-4  # WarmupCosineLR ends at cos_min_ratio x lr
    assert lrs[51:] == pytest.approx([floor] * len(lrs[51:]), abs=1e-12)  # at its end by --train-steps 50


def test_a_warmup_without_train_steps_is_accepted_and_an_unused_train_steps_refused(cli_run):
    """--train-steps is the length of a decaying schedule only: until 2026-12-04 `--warmup-steps 200` alone was
    refused against --train-steps' default (100), which the rendered WarmupLR never reads, and an explicit
    --train-steps beside it went nowhere."""
    config = _rendered(cli_run, "--warmup-steps", "200")
    assert config["scheduler"]["type"] == "WarmupLR" and "total_num_steps" not in config["scheduler"]["params"]
    for flags, which in ((["--train-steps", "500"], "none: a constant LR"),
                         (["--warmup-steps", "10", "--train-steps", "500"], "WarmupLR, which holds its peak")):
        result = cli_run("render", *flags)
        expected = (f"--train-steps 500 sets a decaying scheduler's total_num_steps, and the rendered config's "
                    f"scheduler has none ({which}")
        assert result.exit_code == 2 and expected in " ".join(result.output.split()), result.output


def _findings(scheduler, lr=1e-5):
    config = {"train_batch_size": 2, "train_micro_batch_size_per_gpu": 2, "scheduler": scheduler,
              "optimizer": {"type": "AdamW", "params": {"lr": lr}}}
    return {f.code: f for f in validate(config, ValidateContext(world_size=1), deepspeed_check=False)}


@pytest.mark.parametrize("kind", ["WarmupDecayLR", "WarmupCosineLR"])
@pytest.mark.parametrize("params", [{"total_num_steps": 500}, {"total_num_steps": 5000},
                                    {"total_num_steps": 50, "warmup_num_steps": 100},
                                    {"total_num_steps": 100, "warmup_num_steps": 100},
                                    {"total_num_steps": 100, "warmup_num_steps": 10}])
def test_a_warmup_longer_than_the_schedule_is_named_where_deepspeeds_lr_is_still_rising_at_its_end(kind, params):
    """The error fires exactly where DeepSpeed's own schedule never reaches its peak within total_num_steps steps
    (DeepSpeed only logs "total_num_steps is less than warmup_num_steps")."""
    scheduler = {"type": kind, "params": {**params, **({"warmup_max_lr": 1e-5} if kind == "WarmupDecayLR" else {})}}
    lrs = _deepspeeds_lrs({"optimizer": {"params": {"lr": 1e-5}}, "scheduler": scheduler},
                          params["total_num_steps"] + 1)
    rising = max(lrs) < 1e-5 * (1 - 1e-9)  # within total_num_steps steps it never reaches its peak
    finding = _findings(scheduler).get("warmup-outlasts-schedule")
    assert (finding is not None) is rising, (params, lrs[-3:])
    if finding:
        assert finding.severity == "error" and finding.path == "scheduler.params.total_num_steps"
        default = "" if "warmup_num_steps" in params else ", DeepSpeed's default where warmup_num_steps is unset"
        assert f"warm-up ({params.get('warmup_num_steps', 1000)} steps{default}) outlasts" in finding.message


@pytest.mark.parametrize(("kind", "params", "lr"), [
    ("WarmupDecayLR", {"total_num_steps": 500, "warmup_num_steps": 10}, 1e-5),
    ("WarmupDecayLR", {"total_num_steps": 500, "warmup_num_steps": 10}, 1e-3),
    ("WarmupDecayLR", {"total_num_steps": 500, "warmup_num_steps": 10, "warmup_max_lr": 1e-5}, 1e-5),
    ("WarmupLR", {"warmup_num_steps": 10}, 1e-5),
    ("WarmupCosineLR", {"total_num_steps": 500, "warmup_num_steps": 10}, 1e-5),
])
def test_a_peak_that_is_not_the_optimizers_lr_is_named_where_deepspeeds_peak_differs(kind, params, lr):
    """WarmupDecayLR without warmup_max_lr peaks at DeepSpeed's default 0.001; WarmupLR takes the optimizer's lr,
    WarmupCosineLR scales it: the warning fires exactly where DeepSpeed's peak is not the optimizer's lr."""
    scheduler = {"type": kind, "params": params}
    peak = max(_deepspeeds_lrs({"optimizer": {"params": {"lr": lr}}, "scheduler": scheduler}, 20))
    finding = _findings(scheduler, lr).get("warmup-peak-default")
    assert (finding is not None) is (peak != pytest.approx(lr)), (kind, params, lr, peak)
    if finding:
        assert finding.severity == "warning" and f"not optimizer.params.lr {lr}" in finding.message
        assert finding.fix == f"set scheduler.params.warmup_max_lr to {lr}"


def test_a_rank_completing_a_config_peaks_its_auto_warmup_at_the_lr_the_config_states():
    """A user's config with its optimizer's lr written and the warm-up's peak "auto" (as LLaMA-Factory-style configs
    leave it): the rank fills the peak with that lr, not the worker's --lr default (until 2026-12-04 3e-4, which the
    schedule then wrote into the optimizer). Oracle: DeepSpeed's WarmupLR built from the completed params."""
    from dsbench.configs.autofill import AutoInputs
    from dsbench.worker.setup import complete_ds_config

    raw = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, "zero_optimization": {"stage": 1},
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-5}},
           "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto",
                                                        "warmup_num_steps": "auto"}}}
    inputs = AutoInputs(micro_batch=2, grad_accum=1, data_parallel_size=2, lr=3e-4, warmup_steps=5, train_steps=20,
                        precision="fp32", hidden_size=64)
    config, _ = complete_ds_config(raw, "user.json", inputs, world_size=2)
    lrs = _deepspeeds_lrs(config, 12)
    assert max(lrs) == pytest.approx(1e-5) and config["scheduler"]["params"]["warmup_num_steps"] == 5


@pytest.mark.parametrize(("kind", "params"), [
    ("WarmupLR", {"warmup_num_steps": 10, "warmup_max_lr": 2e-5}),
    ("WarmupLR", {"warmup_num_steps": 10}),
    ("WarmupDecayLR", {"total_num_steps": 5000, "warmup_num_steps": 100, "warmup_max_lr": 1e-5}),
    ("WarmupDecayLR", {"total_num_steps": 5000, "warmup_min_lr": 1e-7, "warmup_type": "linear"}),
    ("WarmupCosineLR", {"total_num_steps": 5000, "warmup_num_steps": 100, "cos_min_ratio": 0.1}),
    ("WarmupLR", {"warmup_num_steps": 10, "warmup_type": "cosine"}),  # a curve DeepSpeed does not know: log
])
def test_explain_says_the_schedule_deepspeed_builds(kind, params):
    """`dsbench explain`'s scheduler line names the values DeepSpeed's own scheduler object holds when built from
    the params: stated ones as written, the rest its class defaults (until 2026-12-04 the line was the type only)."""
    import torch
    from deepspeed.runtime import lr_schedules

    from dsbench.configs.explain import explain

    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=1e-5)
    built = getattr(lr_schedules, kind)(optimizer, **params)
    config = {"train_batch_size": 2, "train_micro_batch_size_per_gpu": 2, "scheduler": {"type": kind, "params": params},
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-5}}}
    line = next(line for line in explain(config) if line.startswith("scheduler:"))
    # a value the config leaves out is labelled "(DeepSpeed's default)" after it
    assert f"over {built.warmup_num_steps} " in line and f"optimizer steps on a {built.warmup_type} curve" in line
    if kind == "WarmupCosineLR":
        assert f"rising from {built.warmup_min_ratio}" in line and f"down to {built.cos_min_ratio}" in line
    else:
        # WarmupLR's default peak is the optimizer's lr (None in its signature), WarmupDecayLR's 0.001
        peak = "the optimizer's lr" if kind == "WarmupLR" and "warmup_max_lr" not in params else built.max_lrs[0]
        assert f"rises from {built.min_lrs[0]}" in line and f"to {peak}" in line, line
    assert line.endswith("then held") if kind == "WarmupLR" else f"at step {built.total_num_steps}" in line


@pytest.mark.parametrize("curve", ["log", "linear", "cosine", "Linear"])
def test_a_warmup_curve_deepspeed_does_not_know_is_named_where_it_draws_another(curve):
    """DeepSpeed logs an unknown warmup_type and draws log: the warning fires exactly where the curve its object
    holds is not the one the config states."""
    import torch
    from deepspeed.runtime import lr_schedules

    params = {"warmup_num_steps": 10, "warmup_type": curve}
    built = lr_schedules.WarmupLR(torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=1e-5), **params)
    finding = _findings({"type": "WarmupLR", "params": params}).get("warmup-curve-unknown")
    assert (finding is not None) is (built.warmup_type != curve)
    if finding:
        assert f"for {curve!r} DeepSpeed draws {built.warmup_type}" in finding.message


@pytest.mark.parametrize("after", [(), ("--", "--steps", "60")])
def test_a_launchs_decaying_schedule_ends_at_the_steps_its_ranks_train(cli_run, after):
    """`dsbench launch` with a decaying scheduler and no --train-steps: total_num_steps is the run's steps (`--steps`
    after --, else the worker's 20), as the HF Trainer fills it from the steps it trains (oracle: transformers'
    HfTrainerDeepSpeedConfig.trainer_config_finalize). Rendered without a run, it is --train-steps' 100."""
    from types import SimpleNamespace

    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig

    from dsbench.trainspec import DEFAULT_STEPS

    result = cli_run("launch", "--warmup-steps", "5", "--set", 'scheduler.type="WarmupDecayLR"', "--run-dir", "r",
                     "--dry-run", *after)
    assert result.exit_code == 0, result.output
    written = json.loads((Path("r") / "ds_config.json").read_text())["scheduler"]["params"]["total_num_steps"]
    hf = HfTrainerDeepSpeedConfig({"scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": "auto"}}})
    steps = int(after[-1]) if after else DEFAULT_STEPS
    hf.trainer_config_finalize(SimpleNamespace(get_warmup_steps=lambda n: 5), None, steps)
    assert written == hf.config["scheduler"]["params"]["total_num_steps"] == steps


@pytest.mark.parametrize("optimizer", [{"type": "AdamW", "params": [1]}, {"type": "AdamW"}, "AdamW", None])
def test_an_optimizer_of_another_shape_beside_a_warmup_is_named_once_not_a_crash(optimizer):
    """validate's schedule check reads the optimizer's lr only where it is a number in an object; a section of
    another shape is check_types' line (until 2026-12-04's first version of the check, a list of params stopped
    it), and the peak's warning says "the optimizer's lr"."""
    config = {"train_batch_size": 2, "train_micro_batch_size_per_gpu": 2,
              "scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": 50, "warmup_num_steps": 5}},
              **({"optimizer": optimizer} if optimizer is not None else {})}
    found = {f.code: f for f in validate(config, ValidateContext(world_size=1), deepspeed_check=False)}
    assert "not the optimizer's lr" in found["warmup-peak-default"].message
    assert found["warmup-peak-default"].fix == "set scheduler.params.warmup_max_lr to your lr"
