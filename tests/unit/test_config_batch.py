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
        assert f"x {world} = {train} samples per optimizer step" in explained.output
        planned = cli_run("plan", "--model", "llama-tiny", "--gpus", str(world), "--config", str(path), "--json")
        assert planned.exit_code == 0, planned.output
        workload = json.loads(planned.output)["workload"]
        assert (workload["micro_batch"], workload["grad_accum"], workload["global_batch"]) == (micro, accum, train)
