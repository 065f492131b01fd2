"""What a machine profile says, in a few lines: printed by ``dsbench calibrate`` after it measures (pure)."""

from __future__ import annotations

from typing import Any

from dsbench.plan.collective_fit import FITS, KINDS
from dsbench.plan.pipeline_time import PASS_RATE, STEP_RATE, timing_name


def summary_lines(profile: dict[str, Any]) -> list[str]:
    """What a profile says, in a few lines (printed by ``dsbench calibrate``)."""
    rates = profile["rates"]
    model = profile["model"]["name"]
    lines = [f"{profile['world_size']} rank(s) on {profile['nodes']} node(s), {profile['backend']} on "
             f"{profile['device'].split(':')[0]}, {profile['precision']}, measured in {profile['seconds']:.0f} s",
             f"compute per rank (slowest rank): {model} forward+backward {rates['model_tflops'] * 1e3:,.2f} GFLOP/s "
             f"at micro-batch {profile['micro_batch']} x seq {profile['seq_len']}; its MLP matmul "
             f"{rates['gemm_tflops'] * 1e3:,.2f}, attention {rates['attention_tflops'] * 1e3:,.2f} GFLOP/s; "
             f"AdamW {rates['adam_params_per_s'] / 1e6:,.1f} M params/s"]
    lines += _engine_lines(profile, rates)
    if profile.get("spread"):
        samples = f"{profile['repeats']} samples each, " if profile.get("repeats") else ""  # since 2026-11-29
        model_samples = ((profile.get("zero_model") or {}).get("zero2_step") or {}).get("samples")
        layer_samples = ((profile.get("tensor_parallel") or {}).get("torch_forward_backward") or {}).get("samples")
        if samples and model_samples and model_samples != profile["repeats"]:  # 3 rounds per repeat since 18:15
            # and the split layers too since 21:05 (calibrate_engines.MODEL_ROUNDS, commit d4f0fda)
            what = "the ZeRO steps and split layers" if layer_samples == model_samples else "the ZeRO steps"
            samples = f"{profile['repeats']} samples each, {what} on the model {model_samples}, "
        lines.append(f"spread over the samples ({samples}half the p10-p90 range / median): " + ", ".join(
            f"{name} ±{width:.0%}" for name, width in profile["spread"].items()))
    return lines + _collective_lines(profile)


TP_NAMES = {"torch_tp_layer_s": "DTensor", "autotp_layer_s": "DeepSpeed AutoTP",
            "torch_tp_sp_layer_s": "DTensor with sequence parallelism"}
"""The tensor-parallel rates a profile may carry, as its summary names them."""


def _offload_line(per_million: float) -> str:
    """The offload's measured cost; on CPU ranks the host's Adam (vectorised) can beat the ranks' own torch AdamW,
    and the figure is then a saving."""
    verb = "costs" if per_million >= 0 else "saves"
    return (f"the optimizer offloaded to the host (ZeRO-2, DeepSpeedCPUAdam) {verb} {abs(per_million):,.2f} ms per "
            "step per million parameters a rank updates, against ZeRO-2 on the device")


def _engine_lines(profile: dict[str, Any], rates: dict[str, float]) -> list[str]:
    """The engines' own costs the profile measured: FSDP2's, DeepSpeed's, tensor parallelism's, the pipelines'."""
    lines: list[str] = []
    if "fsdp_unit_s_per_micro_step" in rates:
        lines.append("FSDP2 beyond compute and collectives, per unit: "
                     f"{rates['fsdp_unit_s_per_micro_step'] * 1e3:,.2f} ms per micro-step, "
                     f"{rates['fsdp_unit_s_per_step'] * 1e3:,.2f} ms per optimizer step")
    if "zero1_call_s" in rates:
        lines.append(f"DeepSpeed, small collectives included: {rates['zero1_call_s'] * 1e3:,.2f} ms (ZeRO-1) and "
                     f"{rates['zero2_call_s'] * 1e3:,.2f} ms (ZeRO-2) per gradient reduction, "
                     f"{rates['zero3_tensor_s'] * 1e3:,.2f} ms per parameter tensor under ZeRO-3")
    if "zero2_model_call_s" in rates:
        zero1, zero2 = (rates[f"zero{stage}_model_call_s"] * 1e3 for stage in (1, 2))
        lines.append(f"DeepSpeed on {profile['model']['name']} itself, per gradient reduction: {zero1:,.2f} ms "
                     f"(ZeRO-1) and {zero2:,.2f} ms (ZeRO-2), its collectives' bytes apart")
    if "zero_offload_param_s" in rates:
        lines.append(_offload_line(rates["zero_offload_param_s"] * 1e9))  # ms per million parameters
    # the splits the family's layers were timed under (calibrate_layers.split_kinds: OLMo-2 has no AutoTP figure)
    splits = [f"{rates[rate] * 1e3:,.2f} ms ({name})" for rate, name in TP_NAMES.items() if rate in rates]
    if splits:
        lines.append(f"tensor parallelism over {profile['tensor_parallel']['tp']} ranks, beyond 1/tp of the compute "
                     "and the activation all-reduces, per layer per micro-step: " + ", ".join(splits) +
                     (f"; the loss-parallel head {rates['torch_tp_lp_head_s'] * 1e3:,.2f} ms per micro-step"
                      if "torch_tp_lp_head_s" in rates else ""))
    if "ulysses_layer_s" in rates:
        lines.append(f"DeepSpeed Ulysses over {profile['tensor_parallel']['tp']} ranks, beyond 1/sp of the compute "
                     f"and the all-to-alls, per layer per micro-step: {rates['ulysses_layer_s'] * 1e3:,.2f} ms")
    if "zb_split_layer_s" in rates:
        lines.append("torch's zero-bubble schedules, the backward split into input- and weight-gradient passes, per "
                     f"layer per micro-batch: {rates['zb_split_layer_s'] * 1e3:,.3f} ms")
    if PASS_RATE["1f1b"] in rates:
        lines.append(f"pipeline engines over {profile['pipeline']['stages']} ranks, their own runtime per step + per "
                     "pass (a forward or backward of a chunk, its sends and waits): " + ", ".join(
                         f"{rates.get(STEP_RATE[schedule], 0.0) * 1e3:,.2f} + {rates[key] * 1e3:,.2f} ms "
                         f"({timing_name(schedule)})" for schedule, key in PASS_RATE.items() if key in rates))
    return lines


def _collective_lines(profile: dict[str, Any]) -> list[str]:
    """Each rank group's fitted collectives: bandwidth, latency and how well the line fits."""
    lines: list[str] = []
    for group, data in profile["collectives"].items():
        for kind in KINDS:
            entry = data.get(kind) or {}
            if "bandwidth_gbs" in entry:
                lines.append(f"{group} ({data['size']} ranks) {kind}: {entry['bandwidth_gbs']:.3g} GB/s per rank, "
                             f"{entry['alpha_us']:,.0f} µs per call (fit within {entry['fit_worst_error']:.0%} "
                             f"over {_size_range(entry['points'])}" + _fit_note(entry.get("fit")) + ")")
            elif "unsupported" in entry:
                lines.append(f"{group} {kind}: not supported by {profile['backend']} ({entry['unsupported']})")
    return lines


def _fit_note(how: str | None) -> str:
    """How a noisy machine's line was fitted, when not on relative error (plan/collective_fit.fit_collective)."""
    return {FITS[1]: "; the times did not grow with size on relative error, fitted on absolute",
            FITS[2]: "; the times did not grow with size: the bandwidth is the largest buffer's, a lower bound"
            }.get(how or FITS[0], "")


def _size_range(points: list[dict[str, Any]]) -> str:
    """'4 KiB-16 MiB': the message sizes a fit covers (calibrate stops early on a slow link)."""
    def name(size: int) -> str:
        return f"{size // 2**20} MiB" if size >= 2**20 else f"{size // 2**10} KiB"

    sizes = [point["bytes"] for point in points]
    return f"{name(min(sizes))}-{name(max(sizes))}"

