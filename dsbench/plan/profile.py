"""Machine profiles: what ``dsbench calibrate`` measured on the real ranks, fitted to the planner's time model (pure).

Collectives follow the ring model of :mod:`dsbench.plan.comm`: one call of ``kind`` on a B-byte buffer over n
ranks takes ``alpha + bytes_per_rank / bandwidth``, bytes_per_rank = 2B(n-1)/n (all-reduce), B(n-1)/n
(all-gather, reduce-scatter; ../shared/seeds/001, Patarasuk & Yuan 2009) or B (point-to-point). alpha and the
bandwidth are fitted per collective by least squares on relative error (every size weighs the same, from 4 KiB
to 16 MiB); the fit's worst relative error over the measured sizes is kept with it, so a profile says how well
the model describes the machine. The planner's per-step latency is alpha divided by the ring's steps.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from dsbench.errors import UserError
from dsbench.models import ModelShape, shape_of_record
from dsbench.plan.calls import NO_LATENCY, collective_calls
from dsbench.plan.candidate import Candidate
from dsbench.plan.comm import (
    ULYSSES_CALLS,
    all_to_all_seconds,
    bucket_calls,
    data_parallel_comm,
    ring_bytes,
    ulysses_layer_bytes,
)
from dsbench.plan.gpu_calibration import gpu_section
from dsbench.plan.hardware import Link
from dsbench.plan.memory import accounting_for, held_params
from dsbench.plan.pipeline_time import pass_costs, timing_name

SCHEMA = "dsbench.profile/2"
"""Version 2 (2026-11-27) adds the optional ``gpu`` section (plan/gpu_calibration.py); version 1 files still load."""
SCHEMAS = ("dsbench.profile/1", SCHEMA)
MEASURED = "dsbench.measured/1"
KINDS = ("all-reduce", "all-gather", "reduce-scatter", "p2p")


def ring_steps(kind: str, n: int) -> int:
    """Latency-bound steps of one call: 2(n-1) for a ring all-reduce, n-1 for all-gather/reduce-scatter, 1 for p2p."""
    if kind == "p2p":
        return 1
    return max(1, 2 * (n - 1) if kind == "all-reduce" else n - 1)


def moved_bytes(kind: str, size: float, n: int) -> float:
    """Bytes each rank sends in one call (the ring model's; the whole buffer for point-to-point)."""
    return size if kind == "p2p" else ring_bytes(kind, size, n)


def fit_line(points: list[tuple[float, float]]) -> tuple[float, float]:
    """``(alpha, beta)`` of ``t = alpha + beta * x`` minimising the sum of squared relative errors
    ``((alpha + beta x - t) / t)^2`` (weighted least squares, weights 1/t^2), with alpha and beta kept >= 0:
    a negative intercept is refitted through the origin."""
    if len(points) < 2:
        raise ValueError("a line needs at least two points")
    weights = [1 / t**2 for _, t in points]
    sw = sum(weights)
    swx = sum(w * x for w, (x, _) in zip(weights, points, strict=True))
    swy = sum(w * t for w, (_, t) in zip(weights, points, strict=True))
    swxx = sum(w * x * x for w, (x, _) in zip(weights, points, strict=True))
    swxy = sum(w * x * t for w, (x, t) in zip(weights, points, strict=True))
    det = sw * swxx - swx**2
    beta = (sw * swxy - swx * swy) / det if det else 0.0
    alpha = (swy - beta * swx) / sw
    if alpha < 0:  # latency cannot be negative: the best line through the origin
        alpha, beta = 0.0, swxy / swxx
    return alpha, max(beta, 0.0)


def fit_collective(kind: str, n: int, points: list[dict[str, Any]]) -> dict[str, Any]:
    """alpha (µs per call), bandwidth (GB/s per rank) and the worst relative error of the fit over ``points``."""
    xy = [(moved_bytes(kind, p["bytes"], n), p["seconds"]) for p in points]
    alpha, beta = fit_line(xy)
    worst = max(abs(alpha + beta * x - t) / t for x, t in xy)
    return {"alpha_us": alpha * 1e6, "bandwidth_gbs": 1 / beta / 1e9 if beta else float("inf"),
            "latency_us_per_step": alpha * 1e6 / ring_steps(kind, n), "fit_worst_error": worst}


def call_seconds(fitted: dict[str, Any], kind: str, size: float, n: int) -> float:
    """One call of ``kind`` on a ``size``-byte buffer over ``n`` ranks, as a fitted collective predicts it."""
    entry = fitted.get(kind) or {}
    if "alpha_us" not in entry:
        return 0.0
    return entry["alpha_us"] * 1e-6 + moved_bytes(kind, size, n) / (entry["bandwidth_gbs"] * 1e9)


def fsdp_unit_costs(fsdp: dict[str, Any], world: dict[str, Any]) -> dict[str, float]:
    """FSDP2's cost per ``fully_shard`` unit beyond compute and communication, from calibrate's stack:

    - per micro-step: (sharded − plain forward+backward) / units, less one unit's collectives as the fitted world
      link predicts them (an all-gather in the forward, another in the backward, a reduce-scatter of its gradients);
    - per optimizer step: the sharded step's time beyond its forward+backward (clipping, AdamW over DTensors) less
      what the plain model's takes for the 1/n of the parameters a rank updates, less the norm's all-reduce, per
      unit.

    Kept at zero when noise makes either negative (the planner then adds nothing)."""
    n, size, units = fsdp["world"], fsdp["unit_bytes"], fsdp["units"]
    unit_comm = 2 * call_seconds(world, "all-gather", size, n) + call_seconds(world, "reduce-scatter", size, n)
    extra_fb = fsdp["sharded_forward_backward"]["seconds"] - fsdp["plain_forward_backward"]["seconds"]
    per_micro = extra_fb / units - unit_comm
    optimizer = ((fsdp["sharded_step"]["seconds"] - fsdp["sharded_forward_backward"]["seconds"])
                 - (fsdp["plain_step"]["seconds"] - fsdp["plain_forward_backward"]["seconds"]) / n  # its 1/n shard
                 - call_seconds(world, "all-reduce", 4, n))
    return {"fsdp_unit_s_per_micro_step": max(0.0, per_micro), "fsdp_unit_s_per_step": max(0.0, optimizer / units)}


def zero_costs(zero: dict[str, Any], fsdp: dict[str, Any]) -> dict[str, float]:
    """DeepSpeed's own costs from calibrate's stack, each stage's training step less the plain model's
    forward+backward and the AdamW step over the 1/n of the parameters a rank updates:

    - ZeRO-1 and ZeRO-2, per gradient reduction: the stack's reductions are its tensors packed into buckets of
      width² elements as DeepSpeed packs them (:func:`dsbench.plan.comm.bucket_calls`; every weight fills a bucket,
      so each tensor is reduced alone);
    - ZeRO-3, per parameter tensor: what remains after its reductions at ZeRO-2's cost, over the stack's tensors.
      Per tensor, not per module: the same stack without biases (half the tensors, as many modules) costs ZeRO-3
      half as much beyond ZeRO-2 (measured: 82 vs 148 ms over 48 Linear(64, 64), 2 CPU ranks), and so do the
      models' own layers, 1.6-1.9 ms per tensor for gpt2-tiny, gpt2-mini and llama-tiny alike, where per gathered
      module GPT-2's cost 2.5x Llama's (docs/planner.md). The persistent biases and norms count: ZeRO-3's hooks
      and its partitioned optimizer visit them too.

    Each includes its small collectives, so the planner counts only their bytes beside it. Kept at zero when noise
    makes one negative."""
    n, linears, width = zero["world"], zero["tensors_per_unit"] // 2, zero["width"]
    calls = bucket_calls([width, width * width] * linears * zero["units"], width * width)
    tensors = zero["tensors_per_unit"] * zero["units"]
    plain_fb = fsdp["plain_forward_backward"]["seconds"]
    base = plain_fb + (fsdp["plain_step"]["seconds"] - plain_fb) / n

    def extra(stage: int) -> float:
        return zero[f"zero{stage}_step"]["seconds"] - base

    per_call = {stage: max(0.0, extra(stage) / calls) for stage in (1, 2)}
    return {"zero1_call_s": per_call[1], "zero2_call_s": per_call[2],
            "zero3_tensor_s": max(0.0, (extra(3) - calls * per_call[2]) / tensors)}


def zero_model_costs(zm: dict[str, Any], link: dict[str, Any], shape: ModelShape, precision: str) -> dict[str, float]:
    """DeepSpeed's own cost per gradient reduction under ZeRO-1 and ZeRO-2 on the profile's own model
    (``zero1_model_call_s``, ``zero2_model_call_s``; profiles from 2026-11-29 14:00 on): each stage's training step
    less the plain model's forward+backward and the AdamW step over the 1/n of the parameters a rank updates, less
    the step's collectives' bytes as the planner prices them (plan/comm.data_parallel_comm: the gradients'
    reduce-scatter and the updated parameters' all-gather, at the fitted link), over the reductions the planner
    counts for the model (plan/calls.collective_calls). Beside :func:`zero_costs`' stack this holds the waiting
    each reduction does for the slower rank's backward. Kept at zero when noise makes one negative."""
    n, element_bytes, params = zm["world"], 2 if precision in ("bf16", "fp16") else 4, held_params(shape)
    plain_fb = zm["plain_forward_backward"]["seconds"]
    base = plain_fb + (zm["plain_step"]["seconds"] - plain_fb) / n
    fitted = fitted_link(link, "calibrated", "the world group's link")
    out = {}
    for stage in (1, 2):
        key = f"zero{stage}_step"
        if key not in zm:
            continue
        strategy = f"zero{stage}"
        bytes_s = sum(c.seconds for c in data_parallel_comm(strategy, params, n, fitted, element_bytes,
                                                           element_bytes, calls=NO_LATENCY)) if fitted else 0.0
        reductions = collective_calls(Candidate(strategy=strategy), shape, params, None,
                                      accounting_for(precision, strategy)).grads
        out[f"{strategy}_model_call_s"] = max(0.0, (zm[key]["seconds"] - base - bytes_s) / reductions)
    return out


TP_LAYER_RATE = {"dtensor": "torch_tp_layer_s", "autotp": "autotp_layer_s", "dtensor_sp": "torch_tp_sp_layer_s"}
"""The rate :func:`tensor_parallel_costs` stores for each kind of split layer (:attr:`Candidate.tp_kind`)."""


def ulysses_layer_cost(tp: dict[str, Any], link: dict[str, Any], element_bytes: int) -> float | None:
    """What DeepSpeed Ulysses costs per decoder layer per micro-step beyond 1/sp of the layer's compute and its
    all-to-alls (``ulysses_layer_s``, profiles from 2026-11-29 13:00 on): (the layers under Ulysses over sp ranks -
    plain / sp) / layers, less the layer's 8 all-to-alls as the planner prices them (plan/comm.ulysses_layer_bytes at
    the fitted link's all-gather figures). What stays is the attention wrapper's own work (its layout copies and
    the all-gather of the position ids) and the rate lost by the linears on s/sp tokens. None without the
    measurement (older profiles, models without key/value heads); kept at zero when noise makes it negative."""
    if "ulysses_forward_backward" not in tp or "heads" not in tp:
        return None
    sp, layers = tp["tp"], tp["layers"]
    fitted = fitted_link(link, "calibrated", "the tensor-parallel group's link")
    sent = ulysses_layer_bytes(tp["hidden"], tp["heads"], tp["kv_heads"], tp["micro_batch"] * tp["seq_len"] / sp,
                               sp, element_bytes)
    comm = all_to_all_seconds(sent, ULYSSES_CALLS, sp, fitted) if fitted else 0.0
    return max(0.0, (tp["ulysses_forward_backward"]["seconds"] - tp["plain_forward_backward"]["seconds"] / sp)
               / layers - comm)


def tensor_parallel_costs(tp: dict[str, Any], link: dict[str, Any], element_bytes: int) -> dict[str, float]:
    """What tensor parallelism costs per decoder layer per micro-step beyond 1/tp of the layer's compute and its
    activation all-reduces, from calibrate's measurement of the model's own layers split ``tp`` ways:
    (split forward+backward - plain forward+backward / tp) / layers, less the 4 all-reduces of micro x seq x hidden
    activations per layer (2 in the forward after the row-parallel projections, 2 in the backward before the
    column-parallel ones; Shoeybi et al. 2019, section 3) as the fitted link predicts them. For DTensor
    (``torch_tp_layer_s``) and for DeepSpeed AutoTP's layers (``autotp_layer_s``): dispatch, hooks, and the rate
    lost by matrix multiplies 1/tp the size. Under DTensor with sequence parallelism (``torch_tp_sp_layer_s``,
    profiles from 2026-11-26 16:00 on) the layer's collectives are 4 all-gathers and 4 reduce-scatters of the same
    activations (Korthikanti et al. 2022 sec. 4.2.2; plan/comm.sequence_parallel_comm), and its own work adds the
    norms' DTensor dispatch and the regions' redistributions. And per micro-step the LM head and loss split by
    vocabulary under torch's ``loss_parallel`` (``torch_tp_lp_head_s``, profiles from 2026-11-26 23:00 on):
    beyond 1/tp of the whole head and loss, the DTensor work of the sharded logits and loss. Kept at zero when noise
    makes one negative."""
    n, layers = tp["tp"], tp["layers"]
    activations = tp["micro_batch"] * tp["seq_len"] * tp["hidden"] * element_bytes
    collectives = {"torch": 4 * call_seconds(link, "all-reduce", activations, n),
                   "sp": 4 * (call_seconds(link, "all-gather", activations, n) +
                              call_seconds(link, "reduce-scatter", activations, n))}
    collectives["autotp"] = collectives["torch"]
    ideal = tp["plain_forward_backward"]["seconds"] / n
    costs = {f"{name}_layer_s": max(0.0, (tp[f"{engine}_forward_backward"]["seconds"] - ideal) / layers -
                                    collectives[engine])
             for name, engine in (("torch_tp", "torch"), ("autotp", "autotp"), ("torch_tp_sp", "sp"))
             if f"{engine}_forward_backward" in tp}
    if "lp_forward_backward" in tp:  # the head split by vocabulary, per micro-step: beyond 1/tp of the whole head
        # and loss, the loss's 3 all-reduces of s·b figures and the head's input-gradient all-reduce
        # (plan/comm.loss_parallel_comm)
        lp_comm = (3 * call_seconds(link, "all-reduce", tp["micro_batch"] * tp["seq_len"] * 4, n) +
                   call_seconds(link, "all-reduce", activations, n))
        costs["torch_tp_lp_head_s"] = max(0.0, tp["lp_forward_backward"]["seconds"] -
                                          tp["head_forward_backward"]["seconds"] / n - lp_comm)
    ulysses = ulysses_layer_cost(tp, link, element_bytes)
    if ulysses is not None:
        costs["ulysses_layer_s"] = ulysses
    return costs


def split_backward_cost(split: dict[str, Any]) -> float:
    """What torch's zero-bubble schedules pay per layer per micro-batch beyond the whole backward the other torch
    schedules run: (forward + input- and weight-gradient passes - forward + whole backward) / layers, from
    calibrate's one-stage measurement (``compute.split_backward``; the slowest rank's is stored). Kept at zero
    when noise makes it negative."""
    return max(0.0, (split["split"]["seconds"] - split["whole"]["seconds"]) / split["layers"])


def fit_profile(measured: dict[str, Any]) -> dict[str, Any]:
    """The machine profile from ``calibrate``'s measurements: every collective fitted, and the compute rates the
    planner uses (the slowest rank's: in a synchronous step every rank waits for it)."""
    if measured.get("schema") != MEASURED:
        raise UserError(f"not dsbench calibrate's measurements (schema {measured.get('schema')!r})")
    collectives = {}
    for group, data in measured["collectives"].items():
        fitted = {key: value for key, value in data.items() if key not in KINDS}
        for kind in KINDS:
            entry = data.get(kind) or {}
            fitted[kind] = ({**entry, **fit_collective(kind, data["size"], entry["points"])} if "points" in entry
                else entry)
        collectives[group] = fitted
    per_rank = measured["compute_per_rank"]
    rates = {f"{name}_tflops": min(rank[name]["tflops"] for rank in per_rank) for name in ("gemm", "attention",
                                                                                             "model")}
    rates["adam_params_per_s"] = min(rank["optimizer"]["params_per_s"] for rank in per_rank)
    sizes = per_rank[0].get("model_by_micro_batch", {})
    rates["model_tflops_by_micro_batch"] = {size: min(rank["model_by_micro_batch"][size]["tflops"] for rank in per_rank)
                                            for size in sizes}
    if measured.get("fsdp") and "world" in collectives:
        rates.update(fsdp_unit_costs(measured["fsdp"], collectives["world"]))
        if measured.get("deepspeed"):
            rates.update(zero_costs(measured["deepspeed"], measured["fsdp"]))
        if measured.get("zero_model"):  # profiles from 2026-11-29 14:00 on
            rates.update(zero_model_costs(measured["zero_model"], collectives["world"],
                                          shape_of_record(measured["model"]), measured.get("precision", "fp32")))
    tp = measured.get("tensor_parallel") or {}
    tp_link = collectives.get("intra") or (collectives.get("world") if measured.get("nodes", 1) == 1 else None)
    if "plain_forward_backward" in tp and tp_link:
        element = 2 if measured.get("precision") in ("bf16", "fp16") else 4
        rates.update(tensor_parallel_costs(tp, tp_link, element))
    if all(rank.get("split_backward") for rank in per_rank):  # profiles from 2026-11-27 05:00 on
        rates["zb_split_layer_s"] = max(split_backward_cost(rank["split_backward"]) for rank in per_rank)
    if measured.get("pipeline"):  # the pipeline engines' own runtime (torch's from 2026-11-28 16:10)
        rates.update(pass_costs(measured["pipeline"]))
    kept = {key: value for key, value in measured.items() if key != "gpu"}
    out = {**kept, "schema": SCHEMA, "collectives": collectives, "rates": rates, "spread": spreads(measured)}
    if measured.get("gpu"):  # measured on a CUDA rank: the GPU model's own constants
        out["gpu"] = gpu_section(measured["gpu"])
    return out


SPREAD_OF = {"forward+backward": ("compute_per_rank", "model"), "AdamW": ("compute_per_rank", "optimizer"),
             "FSDP2 stack step": ("fsdp", "sharded_step"), "ZeRO-1 stack step": ("deepspeed", "zero1_step"),
             "ZeRO-2 stack step": ("deepspeed", "zero2_step"), "ZeRO-3 stack step": ("deepspeed", "zero3_step"),
             "ZeRO-1 model step": ("zero_model", "zero1_step"), "ZeRO-2 model step": ("zero_model", "zero2_step"),
             "DTensor layers": ("tensor_parallel", "torch_forward_backward"),
             "AutoTP layers": ("tensor_parallel", "autotp_forward_backward"),
             "DTensor SP layers": ("tensor_parallel", "sp_forward_backward"),
             "DTensor loss-parallel head": ("tensor_parallel", "lp_forward_backward"),
             "Ulysses layers": ("tensor_parallel", "ulysses_forward_backward")}
"""The timings each stored figure comes from (the rates and engine costs above are fitted from them)."""


def spreads(measured: dict[str, Any]) -> dict[str, float]:
    """Each timing's spread over its samples: half the p10-p90 range over the median, the widest over the ranks
    (``compute_per_rank``) where every rank measured it."""
    out = {}
    for name, (section, key) in SPREAD_OF.items():
        found = measured.get(section)
        entries = [rank.get(key) for rank in found] if isinstance(found, list) else [(found or {}).get(key)]
        widths = [(entry["p90"] - entry["p10"]) / 2 / entry["seconds"] for entry in entries
                  if isinstance(entry, dict) and {"p10", "p90", "seconds"} <= entry.keys() and entry["seconds"] > 0]
        if widths:
            out[name] = max(widths)
    for schedule, timed in ((measured.get("pipeline") or {}).get("schedules") or {}).items():  # the pipeline engines
        widths = [(point["p90"] - point["p10"]) / 2 / point["seconds"] for point in
                  (timed if isinstance(timed, list) else [timed])  # the widest over its micro-batch counts
                  if {"p10", "p90", "seconds"} <= point.keys() and point["seconds"] > 0]
        if widths:
            out[timing_name(schedule)] = max(widths)
    links = [link for link in (measured.get("collectives") or {}).values() if isinstance(link, dict)]
    # a collective's spread: the median over its message sizes (the smallest are the noisiest), the widest op
    by_op = [statistics.median((p["p90"] - p["p10"]) / 2 / p["seconds"] for p in op["points"])
             for link in links for op in link.values()
             if isinstance(op, dict) and op.get("points") and all({"p10", "p90", "seconds"} <= p.keys()
                                                                  and p["seconds"] > 0 for p in op["points"])]
    if by_op:
        out["collectives"] = max(by_op)
    return out


@dataclass(frozen=True, slots=True)
class Profile:
    """A machine profile, read and checked once (:func:`dsbench.plan.api.read_profile`, where ``--profile`` is
    parsed) and then passed: every report row and tune layout plans with the same object, never its path."""

    path: str
    data: dict[str, Any]
    """The checked profile (:func:`dsbench.plan.profile_check.load_profile`)."""


def link_from(profile: dict[str, Any], group: str) -> Link | None:
    """The planner's link for one measured group (``intra``, ``inter`` or ``world``), each collective with its own
    fitted bandwidth and per-step latency; None when the profile did not measure that group."""
    data = profile["collectives"].get(group)
    if not data:
        return None
    return fitted_link(data, f"measured:{group}",
                       f"measured by dsbench calibrate over {data['size']} ranks ({profile.get('backend')}, {group})")


def fitted_link(data: dict[str, Any], name: str, description: str) -> Link | None:
    """A :class:`Link` of one group's fitted collectives; None when none was fitted."""
    figures = tuple((kind, data[kind]["bandwidth_gbs"], data[kind]["latency_us_per_step"]) for kind in KINDS
                    if "bandwidth_gbs" in data.get(kind, {}))
    if not figures:
        return None
    all_reduce = dict((kind, (bw, lat)) for kind, bw, lat in figures).get("all-reduce", figures[0][1:])
    return Link(name, all_reduce[0], all_reduce[1], description, by_kind=figures)


def compute_group(profile: dict[str, Any]) -> tuple[Link | None, Link | None]:
    """(within a node, across nodes) links of a profile: a one-node profile's ``world`` is its intra-node link, and
    with one rank per node ``world`` is the link across nodes (calibrate then measures no separate ``inter``)."""
    nodes = profile.get("nodes", 1)
    intra = link_from(profile, "intra") or (link_from(profile, "world") if nodes == 1 else None)
    one_per_node = nodes > 1 and nodes == profile.get("world_size")
    return intra, link_from(profile, "inter") or (link_from(profile, "world") if one_per_node else None)


def rate_at(by_micro: dict[str, float], micro: int, default: float) -> float:
    """The forward+backward rate at micro-batch ``micro``: measured there, else interpolated linearly in log2 of
    the micro-batch between the measured sizes (the nearest end beyond them); ``default`` when none was measured."""
    points = sorted((int(size), rate) for size, rate in by_micro.items())
    if not points:
        return default
    if micro <= points[0][0]:
        return points[0][1]
    for (low, low_rate), (high, high_rate) in zip(points, points[1:], strict=False):
        if micro <= high:
            share = (math.log2(micro) - math.log2(low)) / (math.log2(high) - math.log2(low))
            return low_rate + share * (high_rate - low_rate)
    return points[-1][1]
