"""Users' own accelerate YAMLs, run for real: ``dsbench launch --accelerate-config F --num-processes 2``.

Every single-node YAML of the corpus (DeepSpeed inline, DeepSpeed with a file, FSDP, multi-GPU) trains on 2 CPU
ranks through ``accelerate launch`` and must give the losses of the strategy dsbench renders for it, launched the
usual way. The equivalents below are read by hand from each YAML (the oracle is not dsbench's own conversion):
fp32 (``--precision fp32``, i.e. ``--mixed_precision no``), the same global batch, the same seed.

YAMLs that ask the ranks for the same run share one launch (since 2026-12-02 also where they differ only in what
a saved checkpoint reads, or write the value the worker fills an "auto" with: :func:`_as_run`). What a rank
receives from ``accelerate launch`` is its environment, computed here with accelerate's own launcher functions
(``_validate_launch_command`` and the ``prepare_*_env`` that ``launch_command`` calls) from the command dsbench
prints; the worker turns that environment into its engine settings. YAMLs whose environments give the same settings
run the same thing, so the first of them is launched and every one of them is checked against that run: its own
hand-read settings and equivalent, the settings its environment resolves to, and the launched header against
accelerate's environment.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from unittest import mock

import pytest

from tests.accelerate_oracle import accelerate_env as launched_env
from tests.conftest import ROOT
from tests.integration.conftest import DDP, FSDP, LLAMA, MB, STEPS, ZERO2, ZERO3, dsbench, load_run

pytestmark = pytest.mark.dist
CORPUS = ROOT / "tests" / "data" / "corpus" / "accelerate"
# ZERO2, ZERO3, FSDP, DDP: the session's single-node cells (conftest; test_launch_strategies.py's too, shared through
# the run cache)

# YAML -> the dsbench launch flags that train the same thing, and the engine settings its header must show.
EQUIVALENT = {
    # named zero3, but it sets no zero_stage: accelerate's default, ZeRO-2 (its zero3_* keys do nothing)
    "Damin3927__llm2025compet__training_open-r1_recipes_accelerate_configs_zero3_copy.yaml": (ZERO2, {"stage": 2}),
    # zero_stage 2, optimizer offloaded to the CPU, 16 micro-steps per step (its offload_param is ignored at stage 2);
    # 6 steps (STEPS_OF), as its 16 micro-steps a step make each one as long as 8 of the others'
    "HKUST-LongGroup__DyME__default_config.yaml": (["--zero", "2", "--offload", "cpu", "--grad-accum", "16", *MB],
                                                   {"stage": 2, "offload": "cpu", "accum": 16}),
    # gradient_clipping 1.0 is dsbench's default too, which the others' "auto" becomes (every DeepSpeed run clips at 1)
    "OpenLMLab__MOSS-RLHF__accelerate_config.yaml": (ZERO2, {"stage": 2}),
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
STEPS_OF = {"HKUST-LongGroup__DyME__default_config.yaml": 6}
"""Steps of a YAML's run and its equivalent, where not the session's (6: the warm-up's first two steps run at LR 0,
so four update the weights)."""
# DeepSpeed with a file: dsbench's shipped YAML, which names ds_configs/zero2.json (read from the checkout)
WITH_FILE = ROOT / "ds_configs" / "accelerate" / "deepspeed_zero2.yaml"
# What dsbench refuses before anything starts, and the key each refusal names.
REFUSED = {
    "huggingface__trl__examples_accelerate_configs_alst_ulysses_4gpu.yaml": "seq_parallel_communication_data_type",
    "huggingface__accelerate__examples_alst_ulysses_sequence_parallelism_sp-alst.accelerate-config.yml":
        "deepspeed_config_file",
    "modelscope__ms-swift__examples_train_multi-node_accelerate_multi_node.yaml": "main_process_ip",
}
NAMES = [*EQUIVALENT, "with-file"]


def _path(name: str) -> Path:
    return WITH_FILE if name == "with-file" else CORPUS / name


def _expected(name: str) -> tuple[list[str], dict]:
    return (ZERO2, {"stage": 2}) if name == "with-file" else EQUIVALENT[name]


def _launch_args(name: str) -> list[str]:
    return ["--accelerate-config", str(_path(name)), "--num-processes", "2", "--precision", "fp32", *MB]


def _accelerate_env(name: str, tmp: Path) -> dict[str, str]:
    """The ACCELERATE_*/FSDP_* variables ``accelerate launch`` gives the ranks for the command dsbench prints."""
    dry = dsbench("launch", *_launch_args(name), "--run-dir", str(tmp / "dry"), "--dry-run", cwd=ROOT, timeout=120)
    assert dry.returncode == 0, dry.stderr[-2000:]
    words = shlex.split(next(line for line in dry.stdout.splitlines() if " accelerate launch " in line))
    with mock.patch.dict(os.environ, {"DS_ACCELERATOR": "cpu"}):
        return launched_env(words[words.index("accelerate") + 2:])


def _settings(env: dict[str, str]) -> dict:
    """The engine settings the worker makes of that environment (what the rank would run)."""
    from dsbench.worker import accelerate_env

    with mock.patch.dict(os.environ, env):
        if accelerate_env.inline_deepspeed(os.environ):
            return {"deepspeed": accelerate_env.deepspeed_config(0)[0]}
        if env.get("ACCELERATE_DEEPSPEED_CONFIG_FILE"):
            return {"deepspeed_file": json.loads((ROOT / env["ACCELERATE_DEEPSPEED_CONFIG_FILE"]).read_text())}
        return {"fsdp": accelerate_env.fsdp_settings(False, False, False)}


RUN_FILLS = {"gradient_accumulation_steps": 1, "gradient_clipping": 1.0}
"""What the worker's flags fill a YAML's "auto" with in these runs (no --grad-accum, no --grad-clip: TrainSpec's
defaults, which the equivalents train with too), so that a YAML writing those values runs what one writing "auto"
runs."""
SAVE_ONLY = ("stage3_gather_16bit_weights_on_model_save", "state_dict_type")
"""Settings read only when a checkpoint is saved (DeepSpeed's ZeRO-3 16-bit gather on save; accelerate's FSDP state
dict type): these runs save none, so YAMLs that differ only there run the same steps."""


def _as_run(settings: dict) -> dict:
    """The settings as these runs use them: the save-only keys dropped, the worker's fills of "auto" made."""
    if isinstance(settings, dict):
        return {key: RUN_FILLS[key] if value == "auto" and key in RUN_FILLS else _as_run(value)
                for key, value in settings.items() if key not in SAVE_ONLY}
    return settings


_SETTINGS: dict[str, tuple[dict[str, str], str]] = {}


def _resolved(name: str, tmp_path_factory) -> tuple[dict[str, str], str]:
    """A YAML's accelerate environment and its settings (as canonical JSON), once per session."""
    if name not in _SETTINGS:
        env = _accelerate_env(name, tmp_path_factory.mktemp("dry"))
        _SETTINGS[name] = env, json.dumps(_as_run(_settings(env)), sort_keys=True)
    return _SETTINGS[name]


def test_every_corpus_yaml_is_classified():
    assert {p.name for p in CORPUS.iterdir()} == set(EQUIVALENT) | set(REFUSED)


@pytest.mark.parametrize("name", NAMES)
def test_a_users_yaml_trains_like_its_dsbench_equivalent(runs, tmp_path_factory, name):
    flags, expect = _expected(name)
    env, settings = _resolved(name, tmp_path_factory)
    # the first YAML (in this order) whose environment gives the same settings is the one launched
    launched = next(other for other in NAMES if _resolved(other, tmp_path_factory)[1] == settings)
    launched_env = _resolved(launched, tmp_path_factory)[0]
    # YAMLs merged into one launch were read by hand as the same thing: one equivalent, one set of settings
    assert _expected(launched) == (flags, expect), (name, launched)
    steps = STEPS_OF.get(launched, STEPS)
    result, folder = runs.get(f"yaml-{Path(_path(launched)).stem}", _launch_args(launched), steps=steps)
    assert result.returncode == 0, result.stderr[-3000:]
    header = load_run(folder)["header"][0]
    assert header["launcher_env"] == launched_env  # accelerate's own functions predicted what reached the ranks
    assert env["ACCELERATE_MIXED_PRECISION"] == "no"
    assert header["world_size"] == 2 and header["precision"] == "fp32"
    assert header["launcher_env"]["ACCELERATE_MIXED_PRECISION"] == "no"
    ds = header["ds_config"]
    if "stage" in expect:
        assert header["strategy"] == "deepspeed" and ds["zero_optimization"]["stage"] == expect["stage"]
        offload = ds["zero_optimization"].get("offload_optimizer", {}).get("device", "none")
        assert offload == expect.get("offload", "none")
        assert ds["gradient_accumulation_steps"] == expect.get("accum", 1)
        assert ds["bf16"]["enabled"] is False and ds["optimizer"]["type"] == "AdamW"
        assert ds["gradient_clipping"] == 1.0
    elif "reshard" in expect:
        assert header["strategy"] == "fsdp" and header["fsdp"]["reshard"] is expect["reshard"]
        assert header["fsdp"]["accelerate"]["fsdp_version"] == 1
    else:
        assert header["strategy"] == "ddp"
    reference, reference_folder = runs.get("equivalent-" + "_".join(f.strip("-") for f in flags), flags, steps=steps)
    assert reference.returncode == 0, reference.stderr[-3000:]
    losses = [s["loss"] for s in load_run(folder)["steps"]]
    expected = [s["loss"] for s in load_run(reference_folder)["steps"]]
    assert len(losses) == len(expected) == steps
    for got, want in zip(losses, expected, strict=True):
        assert abs(got - want) <= 1e-4 * abs(want), (losses, expected)


@pytest.mark.parametrize("name", list(REFUSED))
def test_what_the_worker_cannot_run_is_refused_before_it_starts(tmp_path, name):
    result = dsbench("launch", "--accelerate-config", str(CORPUS / name), "--num-processes", "2",
                     "--run-dir", str(tmp_path / "r"), cwd=ROOT, timeout=120)
    assert result.returncode == 1 and REFUSED[name] in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "r" / "metrics.jsonl").exists()


ALST = "huggingface__trl__examples_accelerate_configs_alst_ulysses_4gpu.yaml"
SINGLE_LLAMA_4 = ["--strategy", "single", "--launcher", "torchrun", "--num-gpus", "1", "--model", "llama-tiny",
                  "--micro-batch", "4", *LLAMA]
"""One process at the ALST run's global batch (2 per rank x 2 Ulysses groups): test_model_parallel.py's reference,
shared through the run cache."""


def test_trls_alst_yaml_trains_deepspeed_ulysses_like_one_process(runs, tmp_path_factory):
    """TRL's ALST example (ZeRO-3 with parallelism_config sp_size 2, sp_backend deepspeed, on its 4 processes), with
    the one key validation refuses deleted as its fix says: DeepSpeed Ulysses over 2 ranks x 2 data-parallel
    groups, run through `accelerate launch` as typed, and one process's losses (measured 2026-12-03: within 2e-7)."""
    fixed = tmp_path_factory.mktemp("alst") / "alst_ulysses_4gpu.yaml"
    fixed.write_text("".join(line for line in (CORPUS / ALST).read_text().splitlines(keepends=True)
                             if REFUSED[ALST] not in line))
    result, folder = runs.get("yaml-alst-ulysses", ["--accelerate-config", str(fixed), "--precision", "fp32",
                                                    "--model", "llama-tiny", *MB, *LLAMA])
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    run = load_run(folder)
    header = run["header"][0]
    assert header["launcher_env"]["PARALLELISM_CONFIG_SP_SIZE"] == "2"  # what accelerate handed the ranks
    assert (header["strategy"], header["ulysses"], header["dp_size"], header["world_size"]) == ("deepspeed", 2, 2, 4)
    ds = header["ds_config"]
    assert ds["sequence_parallel_size"] == 2 and ds["zero_optimization"]["stage"] == 3
    assert ds["train_batch_size"] == 4 and header["global_batch"] == 4  # 2 per rank x 2 groups, as accelerate sets it
    reference, reference_folder = runs.get("single_llama_4", SINGLE_LLAMA_4)
    assert reference.returncode == 0, reference.stderr[-3000:]
    losses = [s["loss"] for s in run["steps"]]
    expected = [s["loss"] for s in load_run(reference_folder)["steps"]]
    assert len(losses) == len(expected) == STEPS
    worst = max(abs(got - want) / abs(want) for got, want in zip(losses, expected, strict=True))
    assert worst < 1e-4, (losses, expected)
