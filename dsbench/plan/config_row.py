"""The given ``--config``'s own row in ``dsbench plan``: the layout it describes, the model states its dtypes
hold, and what it asks for that the plan does not price (pure)."""

from __future__ import annotations

from typing import Any

from dsbench.configs.layout import in_config_keys, parallel_degrees, ulysses_degree
from dsbench.errors import UserError
from dsbench.layout_check import check_run_layout
from dsbench.plan.candidate import Candidate
from dsbench.plan.estimate import Estimate, estimate
from dsbench.plan.inputs import Cluster, Workload
from dsbench.trainspec import TrainSpec
from dsbench.zero_section import zero_settings


def config_candidate(config: dict[str, Any]) -> Candidate:
    """The strategy an existing DeepSpeed config describes (its Ulysses degree included: until 2026-11-30 a config
    with ``sequence_parallel_size`` was priced as plain data parallelism). No recompute: the config's
    ``activation_checkpointing`` section changes nothing under DeepSpeed's engine (configs/inert_check.py, as
    validate and explain say); until 2026-12-01 ``partition_activations`` priced it as recomputing."""
    zero = zero_settings(config)
    pp, tp = parallel_degrees(config)  # the degrees as validation read them (the config was refused otherwise)
    return Candidate(strategy=f"zero{zero.stage}", offload=zero.offload if zero.stage else "none",
                     offload_param=zero.offload_param if zero.stage == 3 else "none", tp=tp, pp=pp,
                     ulysses=ulysses_degree(config), autocast=_autocasts(config),
                     config_accounting=config_accounting(config))


def _autocasts(config: dict[str, Any]) -> bool:
    """The config trains fp32 weights under DeepSpeed's torch_autocast."""
    from dsbench.configs.precision import autocast_dtype, config_precision

    return config_precision(config) == "fp32" and autocast_dtype(config) is not None


def config_accounting(config: dict[str, Any]) -> str | None:
    """The model states a DeepSpeed run under this config holds, where its precision alone names others (until
    2026-12-04 both were priced as bf16's ``mixed16``): torch_autocast's fp32 weights and gradients beside ZeRO's
    fp32 copy (``fp32_deepspeed``), and 16-bit weights with ``data_types.grad_accum_dtype`` fp32, whose gradients
    are fp32 at every ZeRO stage (``mixed16_fp32_grads``; without ZeRO DeepSpeed refuses the mix). Measured with
    DeepSpeed 0.19.8's engine on a CPU rank (tests/unit/test_autocast_config.py)."""
    from dsbench.configs.precision import config_precision, data_type

    if _autocasts(config):
        return "fp32_deepspeed"
    if config_precision(config) in ("bf16", "fp16") and data_type(config, "grad_accum_dtype") == "fp32":
        return "mixed16_fp32_grads" if zero_settings(config).stage else None
    return None


def unpriced(config: dict[str, Any]) -> list[str]:
    """What the config asks for that the plan prices as if it did not: ZeRO++'s switches and ZeRO-3's partial
    optimizer offload (its whole optimizer is priced on the host)."""
    zero = zero_settings(config)
    partial = zero.offload != "none" and zero.offload_ratio < 1
    # autocast's 16-bit weight casts, kept for the backward, are priced with the activations
    # (plan/rank_memory.autocast_cast_params), but under ZeRO-3 as DeepSpeed's memory-efficient linear keeps none
    plain = zero.stage == 3 and (config.get("zero_optimization") or {}).get("memory_efficient_linear") is False
    casts = ["torch_autocast's 16-bit weight casts with memory_efficient_linear off"] if (
        plain and _autocasts(config)) else []
    return [*zero.zeropp, *([f"offload_optimizer.ratio {zero.offload_ratio:g}"] if partial else []), *casts]


def config_estimate(config: dict[str, Any], wl: Workload, cl: Cluster, path: str | None) -> Estimate:
    """The config's own layout, priced, once the model splits as it asks (the launch's and the ranks' check,
    layout_check.check_run_layout, for a DeepSpeed run of the plan's sequence); otherwise one line naming the
    config."""
    cand = config_candidate(config)
    try:
        check_run_layout(TrainSpec(strategy="deepspeed", seq_len=wl.seq_len), "deepspeed", wl.shape,
                         cand.dims(cl.world))
    except UserError as exc:
        raise UserError(f"--config {path}: {in_config_keys(str(exc))}") from None
    return estimate(cand, wl, cl)
