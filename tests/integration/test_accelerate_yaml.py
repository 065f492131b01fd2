"""Users' own accelerate YAMLs, run for real: ``dsbench launch --accelerate-config F --num-processes 2``.

Every single-node YAML of the corpus (DeepSpeed inline, DeepSpeed with a file, FSDP, multi-GPU) trains on 2 CPU
ranks through ``accelerate launch`` and must give the losses of the strategy dsbench renders for it, launched the
usual way. The equivalents below are read by hand from each YAML (the oracle is not dsbench's own conversion):
fp32 (``--precision fp32``, i.e. ``--mixed_precision no``), the same global batch, the same seed.
"""

from __future__ import annotations

import pytest

from tests.conftest import ROOT
from tests.integration.conftest import dsbench, load_run

pytestmark = pytest.mark.dist
CORPUS = ROOT / "tests" / "data" / "corpus" / "accelerate"
WORKER = ["--steps", "3", "--warmup", "1", "--quiet"]
ZERO2, ZERO3 = ("--zero", "2"), ("--zero", "3")
FSDP, DDP = ("--strategy", "fsdp", "--launcher", "torchrun"), ("--strategy", "ddp", "--launcher", "torchrun")

# YAML -> the dsbench launch flags that train the same thing, and the engine settings its header must show.
EQUIVALENT = {
    # named zero3, but it sets no zero_stage: accelerate's default, ZeRO-2 (its zero3_* keys do nothing)
    "Damin3927__llm2025compet__training_open-r1_recipes_accelerate_configs_zero3_copy.yaml": (ZERO2, {"stage": 2}),
    # zero_stage 2, optimizer offloaded to the CPU, 16 micro-steps per step (its offload_param is ignored at stage 2)
    "HKUST-LongGroup__DyME__default_config.yaml": (("--zero", "2", "--offload", "cpu", "--grad-accum", "16"),
                                                   {"stage": 2, "offload": "cpu", "accum": 16}),
    # gradient_clipping 1.0 is dsbench's default too
    "OpenLMLab__MOSS-RLHF__accelerate_config.yaml": (ZERO2, {"stage": 2, "clip": 1.0}),
    "OptimalScale__LMFlow__configs_accelerate_dsz3_config.yaml": (ZERO3, {"stage": 3}),
    # FSDP1 FULL_SHARD: the worker's FSDP2 with reshard_after_forward
    "OptimalScale__LMFlow__configs_accelerate_fsdp_config.yaml": (FSDP, {"reshard": True}),
    "huggingface__alignment-handbook__recipes_accelerate_configs_fsdp.yaml": (FSDP, {"reshard": True}),
    "huggingface__alignment-handbook__recipes_accelerate_configs_zero3.yaml": (ZERO3, {"stage": 3}),
    "huggingface__open-r1__recipes_accelerate_configs_zero2.yaml": (ZERO2, {"stage": 2}),
    "huggingface__trl__examples_accelerate_configs_deepspeed_zero2.yaml": (ZERO2, {"stage": 2}),
    "huggingface__trl__examples_accelerate_configs_deepspeed_zero3.yaml": (ZERO3, {"stage": 3}),
    "huggingface__trl__examples_accelerate_configs_multi_gpu.yaml": (DDP, {}),
    "huggingface__trl__tests_distributed_data_accelerate_configs_zero2.yaml": (ZERO2, {"stage": 2}),
}
# DeepSpeed with a file: dsbench's shipped YAML, which names ds_configs/zero2.json (read from the checkout)
WITH_FILE = ROOT / "ds_configs" / "accelerate" / "deepspeed_zero2.yaml"
# What dsbench refuses before anything starts, and the key each refusal names.
REFUSED = {
    "huggingface__trl__examples_accelerate_configs_alst_ulysses_4gpu.yaml": "seq_parallel_communication_data_type",
    "huggingface__accelerate__examples_alst_ulysses_sequence_parallelism_sp-alst.accelerate-config.yml":
        "deepspeed_config_file",
    "modelscope__ms-swift__examples_train_multi-node_accelerate_multi_node.yaml": "main_process_ip",
}

_equivalent_runs: dict[tuple[str, ...], list[float]] = {}


def _losses(folder) -> list[float]:
    return [step["loss"] for step in load_run(folder)["steps"]]


def _equivalent(flags: tuple[str, ...], tmp_path) -> list[float]:
    """The dsbench-rendered strategy's losses (each equivalent runs once per session)."""
    if flags not in _equivalent_runs:
        folder = tmp_path / "equivalent"
        result = dsbench("launch", *flags, "--num-gpus", "2", "--run-dir", str(folder), "--", *WORKER, cwd=ROOT)
        assert result.returncode == 0, result.stderr[-3000:]
        _equivalent_runs[flags] = _losses(folder)
    return _equivalent_runs[flags]


def test_every_corpus_yaml_is_classified():
    assert {p.name for p in CORPUS.iterdir()} == set(EQUIVALENT) | set(REFUSED)


@pytest.mark.parametrize("name", [*EQUIVALENT, "with-file"])
def test_a_users_yaml_trains_like_its_dsbench_equivalent(tmp_path, name):
    path, (flags, expect) = (WITH_FILE, (ZERO2, {"stage": 2})) if name == "with-file" else (CORPUS / name,
                                                                                             EQUIVALENT[name])
    folder = tmp_path / "yaml"
    result = dsbench("launch", "--accelerate-config", str(path), "--num-processes", "2", "--precision", "fp32",
                     "--run-dir", str(folder), "--", *WORKER, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    header = load_run(folder)["header"][0]
    assert header["world_size"] == 2 and header["precision"] == "fp32"
    assert header["launcher_env"]["ACCELERATE_MIXED_PRECISION"] == "no"
    ds = header["ds_config"]
    if "stage" in expect:
        assert header["strategy"] == "deepspeed" and ds["zero_optimization"]["stage"] == expect["stage"]
        offload = ds["zero_optimization"].get("offload_optimizer", {}).get("device", "none")
        assert offload == expect.get("offload", "none")
        assert ds["gradient_accumulation_steps"] == expect.get("accum", 1)
        assert ds["bf16"]["enabled"] is False and ds["optimizer"]["type"] == "AdamW"
    elif "reshard" in expect:
        assert header["strategy"] == "fsdp" and header["fsdp"]["reshard"] is expect["reshard"]
        assert header["fsdp"]["accelerate"]["fsdp_version"] == 1
    else:
        assert header["strategy"] == "ddp"
    losses, reference = _losses(folder), _equivalent(flags, tmp_path)
    assert len(losses) == len(reference) == 3
    for got, want in zip(losses, reference, strict=True):
        assert abs(got - want) <= 1e-4 * abs(want), (losses, reference)


@pytest.mark.parametrize("name", list(REFUSED))
def test_what_the_worker_cannot_run_is_refused_before_it_starts(tmp_path, name):
    result = dsbench("launch", "--accelerate-config", str(CORPUS / name), "--num-processes", "2",
                     "--run-dir", str(tmp_path / "r"), cwd=ROOT, timeout=120)
    assert result.returncode == 1 and REFUSED[name] in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "r" / "metrics.jsonl").exists()
