"""An accelerate YAML's ``megatron_lm_config`` (``distributed_type: MEGATRON_LM``), read as accelerate's
``MegatronLMPlugin`` reads it, checked for what Megatron-LM refuses or ignores at start-up, and said in plain words
with the planner's command that prices the same layout. Pure. dsbench's worker does not run Megatron-LM (a GPU
library); ``dsbench launch`` refuses the YAML, ``explain`` and ``validate`` read it.

``accelerate launch`` exports the section as ``MEGATRON_LM_*`` variables (accelerate 1.15 utils/launch.py
``prepare_multi_gpu_env``) and the plugin reads them back with its defaults (utils/dataclasses.py
``MegatronLMPlugin.__post_init__``): degrees 1, one micro-batch, clipping 1.0, every switch off, recompute granularity
"full"; the integers through ``int()``, the switches through ``str_to_bool``. tests/unit/test_accelerate_megatron.py
checks this reading against that plugin.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dsbench.configs.accelerate import as_int, machine_count, section_keys, world_size
from dsbench.configs.findings import Finding

SECTION = "megatron_lm_config"
_INTEGERS = ("megatron_lm_tp_degree", "megatron_lm_pp_degree", "megatron_lm_num_micro_batches")
_TRUE, _FALSE = ("y", "yes", "t", "true", "on", "1"), ("n", "no", "f", "false", "off", "0")
"""accelerate's ``str_to_bool`` (utils/environment.py), which the plugin applies to each switch's variable."""


@dataclass(frozen=True, slots=True)
class MegatronLayout:
    """What a Megatron-LM run of the YAML lays out and switches on."""

    tp: int = 1
    pp: int = 1
    micro_batches: int = 1
    sequence_parallel: bool = False
    recompute: str | None = None
    """The recompute granularity ("full" or "selective") when ``megatron_lm_recompute_activations`` is on."""
    distributed_optimizer: bool = False
    clip: float = 1.0


def _integer(value: Any) -> int | None:
    """The value as the plugin's ``int(os.environ[...])`` reads it (the launch writes ``str(value)``), or None."""
    text = str(value).strip()
    return int(text) if as_int(value) is not None or (isinstance(value, str) and text.isdigit()) else None


def _switch(value: Any) -> bool | None:
    text = str(value).lower()
    return True if text in _TRUE else False if text in _FALSE else None


def _clip(value: Any) -> float | None:
    """The clipping norm as the plugin's ``float(os.environ[...])`` reads it, or None."""
    try:
        return float(str(value))
    except ValueError:
        return None


def megatron_layout(config: dict[str, Any]) -> MegatronLayout:
    """The plugin's reading of the section (an unreadable value as its default: :func:`check` names it)."""
    keys = section_keys(config, SECTION)

    def number(key: str, default: int) -> int:
        value = _integer(keys[key]) if key in keys else None
        return value if value and value > 0 else default

    def on(key: str) -> bool:
        return bool(_switch(keys.get(key, False)))

    clip = _clip(keys.get("megatron_lm_gradient_clipping", 1.0))
    return MegatronLayout(
        tp=number("megatron_lm_tp_degree", 1), pp=number("megatron_lm_pp_degree", 1),
        micro_batches=number("megatron_lm_num_micro_batches", 1),
        sequence_parallel=on("megatron_lm_sequence_parallelism"),
        recompute=(str(keys.get("megatron_lm_recompute_granularity", "full"))
                   if on("megatron_lm_recompute_activations") else None),
        distributed_optimizer=on("megatron_lm_use_distributed_optimizer"), clip=1.0 if clip is None else clip)


def check(config: dict[str, Any]) -> list[Finding]:
    """A value the plugin cannot read (it raises in the training process), degrees that do not lay out the
    processes (Megatron-LM's ``initialize_model_parallel`` raises: the world must be a multiple of tp x pp,
    megatron/core/parallel_state.py), and sequence parallelism without tensor parallelism (Megatron-LM's
    ``validate_args`` turns it off)."""
    if config.get("distributed_type") != "MEGATRON_LM":
        return []
    out = _unreadable(section_keys(config, SECTION))
    layout, processes = megatron_layout(config), world_size(config)
    if processes and processes % (layout.tp * layout.pp):
        out.append(Finding(severity="error", code="degree-not-dividing", path=f"{SECTION}.megatron_lm_tp_degree",
                           message=f"tensor parallel {layout.tp} x pipeline {layout.pp} = {layout.tp * layout.pp} "
                                   f"does not divide the {processes} processes: Megatron-LM's "
                                   "initialize_model_parallel raises at start-up",
                           fix=f"use a multiple of {layout.tp * layout.pp} processes, or change the degrees"))
    if layout.sequence_parallel and layout.tp == 1:
        out.append(Finding(severity="warning", code="ignored", path=f"{SECTION}.megatron_lm_sequence_parallelism",
                           message="ignored: Megatron-LM turns sequence parallelism off without tensor parallelism "
                                   "(it splits what the tensor-parallel ranks would otherwise each hold whole)",
                           fix="set megatron_lm_tp_degree to 2 or more, or delete it"))
    return out


def _unreadable(keys: dict[str, Any]) -> list[Finding]:
    """The section's degrees, switches and clipping norm that the plugin cannot read (it raises in every process)."""
    out = []
    for key in _INTEGERS:
        if key in keys and (_integer(keys[key]) or 0) < 1:
            out.append(Finding(severity="error", code="bad-value", path=f"{SECTION}.{key}",
                               message=f"{keys[key]!r} is not a whole number of at least 1 (the plugin reads it "
                                       "with int() in every process)", fix=f"set {key} to 1 or more"))
    for key, value in keys.items():
        if key not in _INTEGERS and key.endswith(("_parallelism", "_activations", "_optimizer")) and (
                _switch(value) is None):
            out.append(Finding(severity="error", code="bad-value", path=f"{SECTION}.{key}",
                               message=f"{value!r} is not true or false (accelerate's str_to_bool raises on it)",
                               fix=f"set {key} to true or false"))
    if _clip(keys.get("megatron_lm_gradient_clipping", 1.0)) is None:
        out.append(Finding(severity="error", code="bad-value", path=f"{SECTION}.megatron_lm_gradient_clipping",
                           message=f"{keys['megatron_lm_gradient_clipping']!r} is not a number (the plugin reads it "
                                   "with float() in every process)", fix="set a norm such as 1.0"))
    return out


def explain(config: dict[str, Any]) -> list[str]:
    """Plain sentences for the layout, the schedule and the switches, and the ``dsbench plan`` command that prices
    the same layout on GPUs (``--layout zero1`` for the distributed optimizer, which shards the optimizer states
    over the data-parallel ranks as ZeRO-1 does; ``--kernels megatron`` for Megatron's fused kernels)."""
    layout, processes = megatron_layout(config), world_size(config)
    data = processes // (layout.tp * layout.pp) if processes and not processes % (layout.tp * layout.pp) else None
    lines = [f"engine: Megatron-LM through accelerate's MegatronLMPlugin (GPUs and megatron-core; `dsbench launch` "
             f"refuses it): tensor parallel {layout.tp} x pipeline {layout.pp} x data parallel "
             f"{data if data else '?'}" + (f" over {processes} processes" if processes else "")]
    if layout.pp > 1:
        m, p = layout.micro_batches, layout.pp
        # the 1F1B bubble: (p - 1) / (m + p - 1) of the step (Narayanan et al. 2021, "Efficient Large-Scale Language
        # Model Training on GPU Clusters", section 2.2)
        lines.append(f"pipeline: {m} micro-batch(es) a step through {p} stages; the bubble leaves each stage idle "
                     f"{(p - 1) / (m + p - 1):.0%} of the step")
    if layout.sequence_parallel and layout.tp > 1:
        lines.append(f"sequence parallelism: the norms' and dropouts' activations split along the sequence over the "
                     f"{layout.tp} tensor-parallel ranks")
    if layout.recompute:
        lines.append(f"activation recompute: {layout.recompute}")
    states = ("sharded over the data-parallel ranks (the distributed optimizer, like ZeRO-1)"
              if layout.distributed_optimizer else "whole on every data-parallel rank (no distributed optimizer)")
    lines.append(f"optimizer states {states}; gradient clipping at global norm {layout.clip}")
    return lines + ([f"priced on GPUs: {plan_command(config, layout, processes)}"] if data else [])


def plan_command(config: dict[str, Any], layout: MegatronLayout, processes: int) -> str:
    """``dsbench plan --layout`` for the YAML's layout (a model is the user's to name)."""
    machines = machine_count(config)
    precision = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8"}.get(str(config.get("mixed_precision")), "fp32")
    words = ["dsbench plan --model MODEL", f"--gpus {processes}", *([f"--nodes {machines}"] * (machines > 1)),
             f"--layout {'zero1' if layout.distributed_optimizer else 'ddp'}", f"--tp {layout.tp}",
             f"--pipeline-stages {layout.pp}", f"--grad-accum {layout.micro_batches}",
             *([f"--recompute {layout.recompute}"] * (layout.recompute in ("full", "selective"))),
             *(["--sequence-parallel"] * (layout.sequence_parallel and layout.tp > 1)),
             f"--precision {precision}", "--kernels megatron"]
    return " ".join(words)
