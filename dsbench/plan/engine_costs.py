"""What the engines add beyond compute and their collectives, fitted from ``dsbench calibrate``'s measurements
(pure): FSDP2 per unit, DeepSpeed ZeRO per reduction and per tensor (on the calibration stack and on the model
itself), tensor parallelism and Ulysses per layer, the loss-parallel head, torch's zero-bubble split. Each is what a
measured step takes beyond what the planner already prices (compute, the optimizer's shard, the collectives at the
fitted links), kept at zero when noise makes it negative; the one exception is the optimizer's offload to the host,
a difference between two ways of running the same step, which keeps its sign (:func:`zero_offload_cost`)."""

from __future__ import annotations

from typing import Any

from dsbench.models import ModelShape
from dsbench.plan.calls import NO_LATENCY, collective_calls
from dsbench.plan.candidate import Candidate
from dsbench.plan.collective_fit import call_seconds, fitted_link
from dsbench.plan.comm import (
    ULYSSES_CALLS,
    all_to_all_seconds,
    bucket_calls,
    data_parallel_comm,
    ulysses_layer_bytes,
)
from dsbench.plan.memory import accounting_for, held_params


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
    if "zero2_offload_step" in zm and "zero2_step" in zm:  # profiles from 2026-11-29 16:30 on
        out["zero_offload_param_s"] = zero_offload_cost(zm, params)
    return out


def zero_offload_cost(zm: dict[str, Any], params: float) -> float:
    """What offloading the optimizer to the host adds to a ZeRO-1/2 step, per parameter of the rank's shard
    (``zero_offload_param_s``): ZeRO-2's step on the profile's model with the optimizer on the host (DeepSpeedCPUAdam,
    the gradients copied to the host and the updated parameters back) less the same step on the device, timed side
    by side, over the 1/n of the parameters a rank updates. Signed: negative where the host's optimizer steps faster
    than the device's (the CPU ranks of 2026-11-29 15:44, whose ZeRO-2 cells ran 16-17% faster offloaded). One step
    at one micro-step: the planner charges it once per optimizer step, assuming the host's Adam and the step's copies
    dominate it (the per-micro-step part was not measured apart)."""
    return (zm["zero2_offload_step"]["seconds"] - zm["zero2_step"]["seconds"]) / (params / zm["world"])


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
    head_dim = tp.get("head_dim") or tp["hidden"] / tp["heads"]  # stated since 2026-11-30 (older: hidden / heads)
    sent = ulysses_layer_bytes(head_dim, tp["heads"], tp["kv_heads"], tp["micro_batch"] * tp["seq_len"] / sp, sp,
                               element_bytes)
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
    beyond 1/tp of the whole head and loss, the DTensor work of the sharded logits and loss. OLMo-2's layers
    (profiles from 2026-12-01 on) also pay their projection norms' collectives, taken off too. Kept at zero when
    noise makes one negative."""
    n, layers = tp["tp"], tp["layers"]
    activations = tp["micro_batch"] * tp["seq_len"] * tp["hidden"] * element_bytes
    collectives = _layer_collectives(tp, link, activations)
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


def _layer_collectives(tp: dict[str, Any], link: dict[str, Any], activations: float) -> dict[str, float]:
    """A split layer's collectives per micro-step as the planner prices them, by how it was split: 4 all-reduces of
    the ``activations`` (DTensor, AutoTP), 4 all-gathers and 4 reduce-scatters under sequence parallelism; with
    OLMo-2's q_norm and k_norm over the split projections, 2 all-reduces and 2 reduce-scatters of s·b fp32 sums of
    squares more (plan/comm.projection_norm_comm)."""
    n = tp["tp"]
    torch = 4 * call_seconds(link, "all-reduce", activations, n)
    out = {"torch": torch, "autotp": torch, "sp": 4 * (call_seconds(link, "all-gather", activations, n) +
                                                       call_seconds(link, "reduce-scatter", activations, n))}
    if tp.get("projection_norms"):
        norms = tp["micro_batch"] * tp["seq_len"] * 4
        norm_s = 2 * (call_seconds(link, "all-reduce", norms, n) + call_seconds(link, "reduce-scatter", norms, n))
        out = {engine: seconds + norm_s for engine, seconds in out.items()}
    return out


def split_backward_cost(split: dict[str, Any]) -> float:
    """What torch's zero-bubble schedules pay per layer per micro-batch beyond the whole backward the other torch
    schedules run: (forward + input- and weight-gradient passes - forward + whole backward) / layers, from
    calibrate's one-stage measurement (``compute.split_backward``; the slowest rank's is stored). Kept at zero
    when noise makes it negative."""
    return max(0.0, (split["split"]["seconds"] - split["whole"]["seconds"]) / split["layers"])
