"""A config's batch read once (configs/batch.py), by explain and plan as by the rank, against DeepSpeed's own
DeepSpeedConfig as the oracle."""

import json

import pytest

from dsbench.configs.batch import config_batch

CASES = [
    ({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2}, 8),
    ({"train_batch_size": 64}, 8),
    ({"train_batch_size": 48, "gradient_accumulation_steps": 3}, 4),
    ({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2}, 2),
]


def _deepspeed(config, world, monkeypatch):
    from deepspeed.runtime import config as ds_config

    monkeypatch.setattr(ds_config.dist, "get_world_size", lambda *a, **k: world)
    monkeypatch.setattr(ds_config.dist, "get_rank", lambda *a, **k: 0)
    theirs = ds_config.DeepSpeedConfig(dict(config))
    return theirs.train_batch_size, theirs.train_micro_batch_size_per_gpu, theirs.gradient_accumulation_steps


@pytest.mark.parametrize("config, world", CASES)
def test_the_batch_is_deepspeeds(monkeypatch, config, world):
    batch = config_batch(config, world)
    assert (batch.train, batch.micro, batch.accum) == _deepspeed(config, world, monkeypatch)


@pytest.mark.parametrize("config", [{"train_micro_batch_size_per_gpu": "auto"}, {"gradient_accumulation_steps": 2},
                                    {"train_batch_size": 2.5}, {"train_batch_size": 8, "pipeline": {"stages": 3}}])
def test_no_definite_batch_is_none(config):
    assert config_batch(config, 4) is None


def test_explain_and_plan_say_the_batch_deepspeed_runs(cli_run, tmp_path, monkeypatch):
    """train 64 and micro 2 on 8 ranks: 4 accumulation steps (explain said 1; plan priced the flags' 8, a global
    batch of 128), train 64 alone: a micro-batch of 8 (plan priced 1)."""
    for config, world in CASES[:2]:
        path = tmp_path / "ds.json"
        path.write_text(json.dumps({**config, "zero_optimization": {"stage": 2}}))
        train, micro, accum = _deepspeed(config, world, monkeypatch)
        explained = cli_run("explain", str(path), "--world-size", str(world))
        assert explained.exit_code == 0, explained.output
        assert f"batch: {micro}" in explained.output and f"x {accum}" in explained.output
        assert f"x {world} data-parallel ranks = {train} samples per optimizer step" in explained.output
        planned = cli_run("plan", "--model", "llama-tiny", "--gpus", str(world), "--config", str(path), "--json")
        assert planned.exit_code == 0, planned.output
        workload = json.loads(planned.output)["workload"]
        assert (workload["micro_batch"], workload["grad_accum"], workload["global_batch"]) == (micro, accum, train)


class _TensorParallelGroups:
    """What ZeRO-3's zero.Init hands DeepSpeedConfig once AutoTP has made its groups (deepspeed.utils.groups): the
    data-parallel ranks, world / autotp_size."""

    def __init__(self, data_parallel: int) -> None:
        self.data_parallel = data_parallel

    def get_data_parallel_world_size(self) -> int:
        return self.data_parallel


def _both_checks(config, world, tp, monkeypatch):
    """DeepSpeed's two DeepSpeedConfig checks of an AutoTP + ZeRO-3 config: deepspeed.initialize's (no mpu, every
    rank counted) and zero.Init's (the TP groups' data-parallel size)."""
    from deepspeed.runtime import config as ds_config

    monkeypatch.setattr(ds_config.dist, "get_world_size", lambda *a, **k: world)
    monkeypatch.setattr(ds_config.dist, "get_rank", lambda *a, **k: 0)
    first = ds_config.DeepSpeedConfig(dict(config))
    second = ds_config.DeepSpeedConfig(dict(config), _TensorParallelGroups(world // tp))
    return first, second


@pytest.mark.parametrize("world, tp", [(2, 2), (4, 2), (8, 4)])
def test_autotp_under_zero3_renders_a_batch_both_of_deepspeeds_checks_accept(monkeypatch, world, tp):
    """Oracle: DeepSpeed's own DeepSpeedConfig, built as deepspeed.initialize and ZeRO-3's zero.Init build it. With
    the train_batch_size dsbench rendered until 2026-12-01 the second refuses it (`dsbench launch --zero 3 --tp 2`
    stopped on every rank); rendered now, each derives it, over the micro-batch and accumulation dsbench gave."""
    from dsbench.configs.batch import checked_twice
    from dsbench.configs.render import render
    from dsbench.spec import RenderSpec

    config, _ = render(RenderSpec(zero=3, tp=tp, world_size=world, micro_batch=2, grad_accum=2))
    assert checked_twice(config) and "train_batch_size" not in config
    first, second = _both_checks(config, world, tp, monkeypatch)
    assert (first.train_micro_batch_size_per_gpu, first.gradient_accumulation_steps) == (2, 2)
    assert (second.train_micro_batch_size_per_gpu, second.gradient_accumulation_steps) == (2, 2)
    assert config_batch(config, world).train == first.train_batch_size  # what dsbench's rank completes it to
    with pytest.raises(AssertionError, match="train_batch_size is not equal"):
        _both_checks({**config, "train_batch_size": first.train_batch_size}, world, tp, monkeypatch)


@pytest.mark.parametrize("stage, tp", [(2, 2), (3, 1), (1, 2)])
def test_only_autotp_under_zero3_loses_its_train_batch_size(stage, tp):
    from dsbench.configs.batch import for_deepspeed
    from dsbench.configs.render import render
    from dsbench.spec import RenderSpec

    config, _ = render(RenderSpec(zero=stage, tp=tp, world_size=2, micro_batch=2))
    assert config["train_batch_size"] == 4  # micro 2 x 2 ranks: DeepSpeed counts AutoTP's ranks (no mpu)
    assert for_deepspeed(config) is config


def _accepted(config, world, monkeypatch):
    """Whether DeepSpeed's own DeepSpeedConfig takes the config's batch on ``world`` ranks."""
    try:
        _deepspeed(config, world, monkeypatch)
    except AssertionError:
        return False
    return True


@pytest.mark.parametrize("train, micro, accum, world", [
    (2048, 1, None, 384), (256, 4, None, 24), (256, 4, None, 48), (10, 3, None, 2), (3, 4, None, 2),
    (32, 4, 2, 2), (50, None, 3, 4), (7, None, None, 4), (2, None, 4, 4),
])
def test_a_batch_fix_names_values_deepspeed_accepts(monkeypatch, train, micro, accum, world):
    """Every train_batch_size the fix names is one DeepSpeed's DeepSpeedConfig takes with the other keys as written,
    and validation then finds nothing (2048 with micro 1 on 384 ranks was told 384: a valid value, but 1 accumulation
    step where DeepSpeed had derived 5; 256 with micro 4 on 24 ranks was told 96 beside a product of 192)."""
    import re

    from dsbench.configs.validate import ValidateContext, validate

    given = {"train_batch_size": train, "train_micro_batch_size_per_gpu": micro, "gradient_accumulation_steps": accum}
    config = {"zero_optimization": {"stage": 1}, **{k: v for k, v in given.items() if v is not None}}
    assert not _accepted(config, world, monkeypatch)
    [finding] = validate(config, ValidateContext(world_size=world), deepspeed_check=False)
    assert finding.code == "batch-mismatch"
    named = [int(n) for n in re.findall(r"\d+", finding.fix.split(", or drop it")[0])]
    values = named[1:] if "multiple of" in finding.fix else named
    assert values and all(value % (micro or 1) == 0 for value in values), finding.fix
    derived = (micro or 1) * (accum or 1) * world
    assert named[0] == derived if "multiple of" in finding.fix else len(values) == 1
    for value in values:
        fixed = {**config, "train_batch_size": value}
        assert _accepted(fixed, world, monkeypatch), (finding.fix, value)
        assert validate(fixed, ValidateContext(world_size=world), deepspeed_check=False) == [], value
    if "multiple of" in finding.fix:  # the two nearest: one at or below the user's value (or the first), one above
        assert values[1] - values[0] == derived and values[0] <= max(train, derived) < values[1] + derived


@pytest.mark.parametrize("flags, sets, left_out, batches", [
    # (world: DeepSpeed's train, micro, accumulation) on 1, 2 and 8 data-parallel ranks
    ({"zero": 2}, (), "train_batch_size", {1: (2, 2, 1), 2: (4, 2, 1), 8: (16, 2, 1)}),
    ({"zero": 3, "grad_accum": 4}, (), "train_batch_size", {1: (8, 2, 4), 2: (16, 2, 4), 8: (64, 2, 4)}),
    ({"zero": 2, "global_batch": 16}, (), "gradient_accumulation_steps", {1: (16, 2, 8), 2: (16, 2, 4),
                                                                         8: (16, 2, 1)}),
    ({"zero": 1}, ("train_batch_size=64",), "gradient_accumulation_steps", {1: (64, 2, 32), 2: (64, 2, 16),
                                                                            8: (64, 2, 4)}),
])
def test_a_render_with_no_world_size_runs_on_any_number_of_ranks(monkeypatch, flags, sets, left_out, batches):
    """`dsbench render --zero 2` (no --world-size, no hostfile) wrote train_batch_size 2 beside a micro-batch of 2
    and 1 accumulation step: DeepSpeed refuses that on 8 ranks (2 != 2 x 1 x 8), so `deepspeed --hostfile ...` with
    the rendered file failed. The key the user did not ask for is left for DeepSpeed to derive, and DeepSpeedConfig
    (the oracle) accepts the file on every rank count, with the batch the flags asked for."""
    from dsbench.configs.api import render_config

    config, notes = render_config(flags, sets=sets)
    assert left_out not in config and any(note.startswith(f"no --world-size or --hostfile: {left_out} left out")
                                          for note in notes)
    for world, batch in batches.items():
        assert _deepspeed(config, world, monkeypatch) == batch, world
    # what the file held before: the key as one rank derives it, which DeepSpeed refuses on 8
    config[left_out] = batches[1][0 if left_out == "train_batch_size" else 2]
    with pytest.raises(AssertionError, match="Check batch related parameters"):
        _deepspeed(config, 8, monkeypatch)
    if sets:  # with ranks given, a --set train_batch_size must match the flags' accumulation (refused otherwise)
        return
    sized, notes = render_config({**flags, "world_size": 8})  # given ranks: all three keys, for them
    assert all(key in sized for key in ("train_batch_size", "train_micro_batch_size_per_gpu",
                                        "gradient_accumulation_steps")) and not any("--world-size" in n for n in notes)


def test_a_render_with_no_world_size_keeps_a_global_batch_and_accumulation_both_given(monkeypatch):
    from dsbench.configs.api import render_config
    from dsbench.errors import UserError

    config, notes = render_config({"zero": 2, "grad_accum": 4}, sets=("train_batch_size=64",))
    assert "hold on 8 data-parallel rank(s) only" in notes[-1]
    assert _deepspeed(config, 8, monkeypatch) == (64, 2, 4)
    with pytest.raises(UserError, match="train_batch_size 64 is not micro-batch 2 x accumulation 3 x a number of "):
        render_config({"zero": 2, "grad_accum": 3}, sets=("train_batch_size=64",))
    # a global batch no rank count divides (DeepSpeed stopped the render on its own assertion, naming no key)
    with pytest.raises(UserError, match="train_batch_size 65 is not a multiple of micro-batch 2, so no number of"):
        render_config({"zero": 2}, sets=("train_batch_size=65",))
    # null is DeepSpeed's "absent" (get_scalar_param): no global batch given, so the accumulation stays
    config, notes = render_config({"zero": 2}, sets=("train_batch_size=null",))
    assert "train_batch_size" not in config and config["gradient_accumulation_steps"] == 1
    assert _deepspeed(config, 8, monkeypatch) == (16, 2, 1)
