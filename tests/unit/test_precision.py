"""One reading of a config's precision everywhere (DeepSpeed's own reading is the oracle), and --precision
carried into the accelerate YAML of native-strategy launches."""

from __future__ import annotations

import json

import pytest
import yaml

from dsbench.configs.explain import explain
from dsbench.configs.precision import config_precision
from dsbench.worker.metrics import gpu_peak_tflops
from dsbench.worker.setup import precision_of

CONFIGS = [
    {"bf16": {"enabled": True}},
    {"bfloat16": {"enabled": True}},  # the legacy spelling DeepSpeed still accepts
    {"bf16": {"enabled": False}, "bfloat16": {"enabled": True}},  # DeepSpeed reads bf16 first
    {"bfloat16": {"enabled": False}, "fp16": {"enabled": True}},
    {"fp16": {"enabled": True}},
    {},
]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: json.dumps(c))
def test_precision_is_read_as_deepspeed_reads_it(config):
    from deepspeed.runtime.precision_config import get_bfloat16_config, get_float16_config

    expected = ("bf16" if get_bfloat16_config(config).enabled else "fp16" if get_float16_config(config).enabled
                else "fp32")
    assert config_precision(config) == expected
    assert precision_of(config, "fp32") == expected  # the worker: the config wins over the flag


def test_bfloat16_spelling_reaches_mfu_peak_explain_and_plan(cli_run, tmp_path):
    config = {"train_micro_batch_size_per_gpu": 1, "bfloat16": {"enabled": True}, "zero_optimization": {"stage": 2}}
    precision = precision_of(config, None)
    assert gpu_peak_tflops("NVIDIA H100 80GB HBM3", precision) == 989.0  # bf16 tensor-core peak, not fp32's 67
    assert "precision: bf16 weights and activations, fp32 master weights and optimizer states" in explain(config)
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(config))
    # read as bf16 (misread, the plan would price fp32), and a --precision fp32 typed beside it is refused naming
    # the config's bf16 (since 2026-12-01; the plan ignored the flag before)
    result = cli_run("plan", "--model", "gpt2", "--gpus", "8", "--config", str(path), "--json")
    assert result.exit_code == 0 and json.loads(result.output)["workload"]["precision"] == "bf16"
    typed = cli_run("plan", "--model", "gpt2", "--gpus", "8", "--precision", "fp32", "--config", str(path))
    assert typed.exit_code == 2 and "gives precision bf16" in typed.output, typed.output


def test_worker_precision_falls_back_to_accelerates_mixed_precision(monkeypatch):
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")
    assert precision_of(None, None) == "bf16" and precision_of(None, "fp16") == "fp16"
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "no")
    assert precision_of(None, None) == "fp32"


@pytest.mark.parametrize("strategy, mixed", [("fsdp", "bf16"), ("ddp", "bf16")])
def test_accelerate_yaml_says_the_precision_of_native_strategies(cli_run, tmp_path, strategy, mixed):
    result = cli_run("launch", "--launcher", "accelerate", "--strategy", strategy, "--precision", "bf16",
                     "--dry-run", "--run-dir", "r")
    assert result.exit_code == 0, result.output
    written = yaml.safe_load((tmp_path / "r" / "accelerate_config.yaml").read_text())
    assert written["mixed_precision"] == mixed
    assert json.loads((tmp_path / "r" / "run.json").read_text())["precision"] == "bf16"
    fp32 = cli_run("launch", "--launcher", "accelerate", "--strategy", strategy, "--dry-run", "--run-dir", "r32")
    assert fp32.exit_code == 0 and yaml.safe_load((tmp_path / "r32" / "accelerate_config.yaml").read_text())[
        "mixed_precision"] == "no"
