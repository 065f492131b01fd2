"""What CPU ranks cannot run, and a monitor whose package is missing, refused by the launch before any rank starts
(configs/device_ops.py), by the rule each rank applies (worker/setup.check_on_device, check_monitors).

Oracles: DeepSpeed's own CPU accelerator (``get_op_builder`` gives its NotImplementedBuilder for an op it lacks)
and DeepSpeed's monitors' availability checks; the rank's check, which asks them, for the configs the launch sees.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from dsbench.configs.device_ops import FUSED_OPS
from dsbench.configs.validate import ValidateContext, validate
from dsbench.ds_schema_file import raw_schema
from dsbench.errors import UserError


def _builder_names() -> set[str]:
    """Every op builder class DeepSpeed defines, for any accelerator, read from its source (no import)."""
    import deepspeed

    root = Path(deepspeed.__file__).parent / "ops" / "op_builder"
    return {name for path in root.rglob("*.py") for name in re.findall(r"^class (\w+Builder)\(", path.read_text(),
                                                                         re.MULTILINE)}


def test_the_schema_lists_the_ops_deepspeeds_cpu_accelerator_has():
    """The launch's list (dsbench/data/ds_schema.json, written by scripts/gen_ds_schema.py) against DeepSpeed's CPU
    accelerator asked about every builder DeepSpeed defines, the ops dsbench refuses by name among them."""
    from deepspeed.accelerator.cpu_accelerator import CPU_Accelerator

    cpu = CPU_Accelerator()
    names = _builder_names() - {"OpBuilder", "CUDAOpBuilder", "TorchCPUOpBuilder", "CPUOpBuilder", "SYCLOpBuilder",
                                "NotImplementedBuilder"}
    assert {*FUSED_OPS.values(), "QuantizerBuilder", "CPUAdamBuilder"} <= names and len(names) > 30
    listed = set(raw_schema()["cpu_accelerator_ops"])
    has = {name for name in names if cpu.get_op_builder(name).__name__ != "NotImplementedBuilder"}
    assert listed == has


_Z3 = {"stage": 3, "zero_hpz_partition_size": 2}
CONFIGS = [
    {"optimizer": {"type": "Lamb"}},
    {"optimizer": {"type": "LAMB", "params": {"lr": 1e-3}}, "zero_optimization": {"stage": 2}},
    {"optimizer": {"type": "Lion"}},
    {"optimizer": {"type": "Lion"}, "zero_optimization": {"stage": 1, "offload_optimizer": {"device": "cpu"}}},
    {"optimizer": {"type": "Lion"}, "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme"}}},
    {"optimizer": {"type": "AdamW"}},
    {"optimizer": {"type": "Adagrad"}, "zero_optimization": {**_Z3, "zero_quantized_weights": True}},
    {"zero_optimization": {**_Z3, "zero_quantized_nontrainable_weights": True}},
    {"zero_optimization": {**_Z3, "zero_quantized_gradients": True}},  # one node: no quantizer (below)
    {"zero_optimization": {"stage": 2, "zero_quantized_weights": True}},  # no zero.Init, no quantizer
    {"zero_optimization": {**_Z3, "zero_quantized_weights": False}},
]


@pytest.mark.parametrize("config", CONFIGS, ids=[str(i) for i in range(len(CONFIGS))])
def test_the_launch_refuses_for_cpu_ranks_what_each_rank_would(monkeypatch, config):
    """A launch onto CPU ranks on one node (LOCAL_SIZE = the ranks, as the deepspeed launcher sets it) refuses
    exactly the configs the rank's own check refuses, at the key it names; a launch onto GPUs leaves it to them."""
    from dsbench.worker.setup import check_on_device

    monkeypatch.setenv("LOCAL_SIZE", "2")
    try:
        check_on_device(config, 2)
        rank = None
    except UserError as exc:
        rank = str(exc)
    config = {"train_micro_batch_size_per_gpu": 1, **config}
    errors = [f for f in validate(config, ValidateContext(world_size=2, cpu_ranks=True), deepspeed_check=False)
              if f.code == "op-on-cpu"]
    assert bool(errors) == (rank is not None), (errors, rank)
    if errors:
        (error,) = errors
        value, _, reason = error.message.partition(" on CPU ranks: ")
        assert error.severity == "error" and reason in rank and error.fix in rank
        if value == "true":  # a ZeRO++ key, which the rank names
            assert error.path in rank
        else:  # the optimizer, which the rank names by optimizer.type's value
            assert error.path == "optimizer.type" and rank.startswith(f"optimizer {json.loads(value).lower()}:")
    assert not [f for f in validate(config, ValidateContext(world_size=2), deepspeed_check=False)
                if f.code == "op-on-cpu"]  # ranks on GPUs: each asks its own accelerator


def test_a_config_the_cpu_ranks_cannot_run_writes_nothing(cli_run, tmp_path):
    """`dsbench launch --config` of Lion without offload on this machine's CPU ranks: one error naming the file and
    the key, exit 1, no run folder (the ranks used to refuse it about 6 s in, after the folder was written)."""
    config = tmp_path / "lion.json"
    config.write_text('{"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "Lion", "params": {"lr": 1e-4}}}')
    result = cli_run("launch", "--config", str(config), "--run-dir", str(tmp_path / "run"), "--", "--steps", "2")
    assert result.exit_code == 1, result.output
    assert f"{config} is invalid for this launch:" in result.output
    assert 'optimizer.type: "Lion" on CPU ranks: DeepSpeed runs it with its FusedLionBuilder op' in result.output
    assert not (tmp_path / "run").exists()


def test_an_accelerate_yamls_deepspeed_file_is_refused_as_a_config_is(cli_run, tmp_path):
    """`dsbench launch --accelerate-config` of a YAML whose DeepSpeed file enables a monitor this environment lacks
    the package of, or steps Lamb on CPU ranks: refused under the file's name before accelerate starts a process
    (each rank reads the file through the same check: worker/resolve.py); on another machine's ranks
    (--hostfile), the monitor is theirs to check."""
    from dsbench.configs.device_ops import MONITOR_PACKAGES, installed

    (tmp_path / "lamb.json").write_text('{"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 0},'
                                        ' "optimizer": {"type": "Lamb", "params": {"lr": 1e-3}}}')
    missing = next(section for section, package in MONITOR_PACKAGES.items() if not installed(package))
    (tmp_path / "monitor.json").write_text('{"train_micro_batch_size_per_gpu": "auto", "zero_optimization": '
                                           f'{{"stage": 2}}, "{missing}": {{"enabled": true}}}}')
    for name in ("lamb", "monitor"):
        (tmp_path / f"{name}.yaml").write_text("distributed_type: DEEPSPEED\nnum_processes: 2\ndeepspeed_config:\n"
                                               f"  deepspeed_config_file: {name}.json\n")
    result = cli_run("launch", "--accelerate-config", "lamb.yaml", "--run-dir", "r1", "--dry-run")
    assert result.exit_code == 1 and "lamb.json is invalid for this launch:" in result.output, result.output
    assert 'optimizer.type: "Lamb" on CPU ranks: DeepSpeed runs it with its FusedLambBuilder op' in result.output
    result = cli_run("launch", "--accelerate-config", "monitor.yaml", "--run-dir", "r2", "--dry-run")
    assert result.exit_code == 1 and f"{missing}.enabled: true, but DeepSpeed's {missing} monitor" in result.output
    assert not (tmp_path / "r1").exists() and not (tmp_path / "r2").exists()
