"""A Megatron-LM accelerate YAML (``distributed_type: MEGATRON_LM``) read as accelerate's own MegatronLMPlugin reads
it, checked, explained, and priced by the plan command its explanation prints."""

from __future__ import annotations

import os
from unittest import mock

import pytest
import yaml

from dsbench.configs.accelerate_megatron import check, explain, megatron_layout

BASE = {"compute_environment": "LOCAL_MACHINE", "distributed_type": "MEGATRON_LM", "mixed_precision": "bf16",
        "num_machines": 1, "num_processes": 8}
SECTIONS = [
    {"megatron_lm_tp_degree": 2, "megatron_lm_pp_degree": 2, "megatron_lm_num_micro_batches": 4,
     "megatron_lm_sequence_parallelism": True, "megatron_lm_recompute_activations": True,
     "megatron_lm_use_distributed_optimizer": True, "megatron_lm_gradient_clipping": 0.5},
    {},  # every default
    # strings and the key without its prefix, as a hand-written YAML may have them
    {"tp_degree": "4", "megatron_lm_pp_degree": "1", "megatron_lm_sequence_parallelism": "yes",
     "megatron_lm_recompute_activations": "True", "megatron_lm_recompute_granularity": "selective"},
    {"megatron_lm_pp_degree": 8, "megatron_lm_num_micro_batches": 16, "megatron_lm_use_distributed_optimizer": False},
]


def _plugin(config: dict, tmp_path) -> object:
    """accelerate's MegatronLMPlugin in the environment `accelerate launch --config_file` gives the processes."""
    from accelerate.utils import MegatronLMPlugin

    from tests.accelerate_oracle import accelerate_env

    path = tmp_path / "megatron.yaml"
    path.write_text(yaml.safe_dump(config))
    env = accelerate_env(["--config_file", str(path), "train.py"], prefixes=("ACCELERATE_", "MEGATRON_LM_"))
    assert env["ACCELERATE_USE_MEGATRON_LM"] == "true"
    with mock.patch.dict(os.environ, env):
        return MegatronLMPlugin()


@pytest.mark.parametrize("section", SECTIONS)
def test_the_layout_is_accelerates_plugins(tmp_path, section):
    config = {**BASE, "megatron_lm_config": section}
    theirs, ours = _plugin(config, tmp_path), megatron_layout(config)
    assert (ours.tp, ours.pp, ours.micro_batches, ours.sequence_parallel, ours.distributed_optimizer, ours.clip) == (
        theirs.tp_degree, theirs.pp_degree, theirs.num_micro_batches, theirs.sequence_parallelism,
        theirs.use_distributed_optimizer, theirs.gradient_clipping)
    assert ours.recompute == (theirs.recompute_granularity if theirs.recompute_activations else None)


def test_degrees_that_do_not_lay_out_the_processes_are_an_error():
    config = {**BASE, "num_processes": 12, "megatron_lm_config": {"megatron_lm_tp_degree": 4,
                                                                  "megatron_lm_pp_degree": 2}}
    [finding] = check(config)
    assert (finding.severity, finding.code) == ("error", "degree-not-dividing")
    assert "4 x pipeline 2 = 8 does not divide the 12 processes" in finding.message and "multiple of 8" in finding.fix
    assert check({**config, "num_processes": 16}) == []


@pytest.mark.parametrize("key, value", [("megatron_lm_tp_degree", 0), ("megatron_lm_pp_degree", "two"),
                                        ("megatron_lm_num_micro_batches", -1),
                                        ("megatron_lm_sequence_parallelism", "maybe"),
                                        ("megatron_lm_gradient_clipping", "one")])
def test_a_value_the_plugin_cannot_read_is_named(tmp_path, key, value):
    config = {**BASE, "megatron_lm_config": {"megatron_lm_tp_degree": 2, key: value}}
    assert [(f.code, f.path) for f in check(config)] == [("bad-value", f"megatron_lm_config.{key}")]
    if value in ("two", "maybe", "one"):  # accelerate's plugin stops on them in the training process
        with pytest.raises(ValueError):
            _plugin(config, tmp_path)


def test_sequence_parallelism_without_tensor_parallelism_is_ignored():
    config = {**BASE, "megatron_lm_config": {"megatron_lm_sequence_parallelism": True}}
    [finding] = check(config)
    assert (finding.severity, finding.code) == ("warning", "ignored")
    assert not any("sequence parallelism" in line for line in explain(config))


def test_other_types_are_not_read_as_megatron():
    assert check({**BASE, "distributed_type": "MULTI_GPU", "megatron_lm_config": {"megatron_lm_tp_degree": 3}}) == []


def test_explain_says_the_layout_and_its_plan_prices_it(cli_run):
    config = {**BASE, "megatron_lm_config": SECTIONS[0]}
    lines = explain(config)
    assert "tensor parallel 2 x pipeline 2 x data parallel 2 over 8 processes" in lines[0]
    # the 1F1B bubble, (p - 1) / (m + p - 1) of the step (Narayanan et al. 2021): 1/5 with 2 stages and 4 micro-batches
    assert any("4 micro-batch(es) a step through 2 stages" in line and "idle 20% of the step" in line for line in lines)
    assert any(line.startswith("optimizer states sharded") and "global norm 0.5" in line for line in lines)
    [command] = [line.split("priced on GPUs: ")[1] for line in lines if "priced on GPUs" in line]
    words = command.replace("--model MODEL", "--model llama-7b").split()
    assert words[:2] == ["dsbench", "plan"]
    priced = cli_run(*words[1:])
    assert priced.exit_code == 0, priced.output
    assert "layout zero1: tp 2 x pp 2 (1f1b) x cp 1 x dp 2; micro-batch 1 x 4 per step" in priced.output
    assert "recompute full, sequence parallel, bf16" in priced.output


def test_validate_and_explain_read_a_megatron_yaml(cli_run, tmp_path):
    path = tmp_path / "megatron.yaml"
    path.write_text(yaml.safe_dump({**BASE, "megatron_lm_config": SECTIONS[0]}))
    assert cli_run("validate", str(path)).exit_code == 0
    explained = cli_run("explain", str(path))
    assert explained.exit_code == 0 and "Megatron-LM through accelerate's MegatronLMPlugin" in explained.output
    assert "fp32 main weights in Megatron's optimizer" in explained.output
