"""What `dsbench launch` names its run folder by default (commands/launch.run_label)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dsbench.commands.launch import run_label


@pytest.mark.parametrize("launcher, strategy, flags, elsewhere, label", [
    ("deepspeed", "deepspeed", {"zero": 3, "offload": "cpu"}, False, "deepspeed-zero3_offload"),
    ("deepspeed", "deepspeed", {"zero": 2}, False, "deepspeed-zero2"),
    ("deepspeed", "deepspeed", {"zero": 0}, False, "deepspeed-zero0"),
    ("deepspeed", "deepspeed", {"zero": 1, "pipeline_stages": 2}, False, "deepspeed-pipe2"),
    ("deepspeed", "deepspeed", {"zero": 1, "tp": 2}, False, "deepspeed-zero1_tp2"),
    ("deepspeed", "deepspeed", {"zero": 1, "ulysses": 2}, False, "deepspeed-ulysses2"),
    ("accelerate", "deepspeed", {"zero": 2}, False, "accelerate-zero2"),
    # the stage is the config's, a preset's or a --set's to decide: not named from the flags
    ("deepspeed", "deepspeed", {}, False, "deepspeed-deepspeed"),
    ("deepspeed", "deepspeed", {"zero": 2}, True, "deepspeed-deepspeed"),
    ("torchrun", "fsdp", {"zero": None}, False, "torchrun-fsdp"),
])
def test_the_default_run_folder_says_what_it_trains(launcher, strategy, flags, elsewhere, label):
    assert run_label(launcher, strategy, flags, elsewhere) == label


def test_a_launch_names_its_folder_so(cli_run, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = cli_run("launch", "--zero", "3", "--offload", "cpu", "--dry-run")
    assert result.exit_code == 0, result.output
    assert re.search(r"runs/launch-deepspeed-zero3_offload-\d{8}-\d{6}/ds_config\.json", result.output)


@pytest.mark.parametrize("typed, trained", [((), "gpt2-tiny"), (("--model", "llama-tiny"), "llama-tiny"),
                                            (("--", "--model", "gpt2-mini"), "gpt2-mini")])
def test_a_launch_sizes_zero_buckets_by_the_model_its_ranks_train(cli_run, typed, trained):
    """No --model: the ranks train the worker's default model, and ZeRO's buckets are sized by it as the HF Trainer
    sizes "auto" ones by the model it trains (oracle: transformers' HfTrainerDeepSpeedConfig), as is a model named
    after -- only; the launch says which model it trains when none was named."""
    import json
    from types import SimpleNamespace

    import transformers
    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig

    from dsbench.model_config import resolve_model

    result = cli_run("launch", "--zero", "3", "--offload", "cpu", "--run-dir", "r", "--dry-run", *typed)
    assert result.exit_code == 0, result.output
    written = json.loads((Path("r") / "ds_config.json").read_text())["zero_optimization"]
    assert json.loads((Path("r") / "run.json").read_text())["model"] == trained
    keys = ("reduce_bucket_size", "stage3_prefetch_bucket_size", "stage3_param_persistence_threshold")
    hf = HfTrainerDeepSpeedConfig({"zero_optimization": {"stage": 3, **dict.fromkeys(keys, "auto")}})
    model = SimpleNamespace(config=transformers.AutoConfig.for_model(**resolve_model(trained).hf_config()))
    hf.trainer_config_finalize(SimpleNamespace(get_warmup_steps=lambda steps: 0), model, 10)
    assert {key: written[key] for key in keys} == {key: hf.config["zero_optimization"][key] for key in keys}
    named = "no --model given: the ranks train gpt2-tiny" in " ".join(result.output.split())
    assert named is (not typed)


@pytest.mark.parametrize("typed", [(), ("--model", "llama-tiny"), ("--", "--model", "llama-tiny")])
def test_a_users_accelerate_yaml_launch_names_the_model_it_trains_when_none_was_named(cli_run, typed):
    import json

    from tests.conftest import ROOT

    yaml = ROOT / "ds_configs" / "accelerate" / "multi_gpu.yaml"
    result = cli_run("launch", "--accelerate-config", str(yaml), "--run-dir", "r", "--dry-run", *typed)
    assert result.exit_code == 0, result.output
    trained = json.loads((Path("r") / "run.json").read_text())["model"]
    assert trained == ("llama-tiny" if typed else "gpt2-tiny")
    said = "no --model given: the ranks train gpt2-tiny" in " ".join(result.output.split())
    assert said is (not typed)
