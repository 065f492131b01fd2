"""Communication volume and time per step, and the pipeline bubble (pure).

Ring collectives over N ranks (../shared/seeds/001; Patarasuk & Yuan 2009): an all-reduce of B bytes
moves 2·B·(N−1)/N bytes per rank; reduce-scatter and all-gather each move B·(N−1)/N. Time =
bytes / bandwidth + steps·latency (2(N−1) steps for all-reduce, N−1 otherwise).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dsbench.plan.hardware import Link


@dataclass(frozen=True, slots=True)
class Collective:
    what: str
    kind: str
    """all-reduce, reduce-scatter, all-gather, all-to-all or p2p."""
    bytes_per_rank: float
    """Bytes each rank sends per step."""
    seconds: float
    calls: int = 1
    """Calls per step that carry it."""


def ring_bytes(kind: str, size: float, n: int) -> float:
    """Bytes sent per rank by a ring collective over ``n`` ranks on a ``size``-byte buffer."""
    if n <= 1:
        return 0.0
    factor = 2 if kind == "all-reduce" else 1
    return factor * size * (n - 1) / n


def ring_seconds(kind: str, size: float, n: int, link: Link, calls: int = 1) -> float:
    """Ring time: 2·B·(N−1)/N / bandwidth for all-reduce (seeds/001), B·(N−1)/N for the others, plus the latency
    of every ring step of every call (a buffer sent in ``calls`` pieces pays the latency ``calls`` times)."""
    if n <= 1:
        return 0.0
    steps = 2 * (n - 1) if kind == "all-reduce" else n - 1
    bandwidth, latency = link.figures(kind)
    return ring_bytes(kind, size, n) / (bandwidth * 1e9) + calls * steps * latency * 1e-6


@dataclass(frozen=True, slots=True)
class Calls:
    """How many calls carry each collective's volume per optimizer step (the latency term counts calls): gradient
    reductions (DDP buckets, ZeRO reduce buckets, FSDP units), parameter all-gathers in one forward and in one
    backward (ZeRO-3 modules, FSDP units), and ZeRO-1/2's all-gather of the updated parameters."""

    grads: int = 1
    gather_forward: int = 1
    gather_backward: int = 1
    updated_params: int = 1


def bucket_calls(sizes: list[float], bucket: float) -> int:
    """Reductions DeepSpeed makes for gradients becoming ready in the order of ``sizes`` (elements each), packed
    into buckets of ``bucket`` elements: a gradient that would overflow the bucket flushes it first, and one larger
    than the bucket is reduced on its own (runtime/zero/stage_1_and_2.py
    ``reduce_independent_p_g_buckets_and_remove_grads``; stage3.py packs the same way)."""
    calls, filled = 0, 0.0
    for size in sizes:
        if filled and filled + size > bucket:
            calls += 1
            filled = 0.0
        filled += size
    return calls + (1 if filled else 0)


def _coll(what: str, kind: str, size: float, n: int, link: Link, times: int = 1, calls: int = 1) -> Collective:
    return Collective(what, kind, times * ring_bytes(kind, size, n), times * ring_seconds(kind, size, n, link, calls),
                      calls=times * calls)


def data_parallel_comm(strategy: str, num_params: float, dp: int, link: Link, param_bytes: float,
                       grad_bytes: float, micro_steps: int = 1, calls: Calls = Calls()) -> list[Collective]:
    """Gradient/parameter collectives per optimizer step for one data-parallel group.

    DDP / ZeRO-0: one all-reduce of the gradients. ZeRO-1/2: reduce-scatter of gradients + all-gather
    of the updated parameters (same volume as DDP). ZeRO-3 / FSDP: all-gather of parameters in the
    forward and again in the backward of every micro-step, reduce-scatter of gradients once (DeepSpeed
    ZeRO-3 reduces every micro-step; counted once here, as FSDP2 with gradient sync on the last micro-step).
    ``calls``: into how many calls each volume is cut (:func:`dsbench.plan.calls.collective_calls`).
    """
    grads, params = num_params * grad_bytes, num_params * param_bytes
    if strategy in ("ddp", "zero0"):
        return [_coll("gradients", "all-reduce", grads, dp, link, calls=calls.grads)]
    if strategy in ("zero1", "zero2"):
        return [_coll("gradients", "reduce-scatter", grads, dp, link, calls=calls.grads),
                _coll("updated parameters", "all-gather", params, dp, link, calls=calls.updated_params)]
    return [_coll("parameters (forward)", "all-gather", params, dp, link, micro_steps, calls.gather_forward),
            _coll("parameters (backward)", "all-gather", params, dp, link, micro_steps, calls.gather_backward),
            _coll("gradients", "reduce-scatter", grads, dp, link, calls=calls.grads)]


def tensor_parallel_comm(layers: float, seq: int, micro: int, hidden: int, tp: int, link: Link, act_bytes: float,
                         micro_steps: int) -> list[Collective]:
    """Megatron TP: 2 all-reduces of s·b·h activations per layer in the forward, 2 in the backward."""
    size = seq * micro * hidden * act_bytes
    return [_coll("activations (TP, 4 per layer)", "all-reduce", size, tp, link, int(4 * layers * micro_steps))]


def projection_norm_comm(layers: float, seq: int, micro: int, tp: int, link: Link,
                         micro_steps: int) -> list[Collective]:
    """OLMo-2's q_norm and k_norm under Megatron-style TP (dsbench.worker.engines.tensor_parallel.ProjectionNorm):
    each norm's mean square spans every TP rank's columns, so per layer and micro-step its s·b fp32 sums of squares
    are all-reduced twice in the forward (q and k) and reduce-scattered twice in the backward (counted with torch's
    CommDebugMode on 2 ranks, 2026-12-01: one all-reduce forward, one reduce-scatter backward per norm). Latency,
    not bytes: s·b·4 each."""
    size = seq * micro * 4
    return [_coll("projection norms (OLMo-2 TP, 2 per layer)", "all-reduce", size, tp, link,
                  int(2 * layers * micro_steps)),
            _coll("projection norms' gradients (2 per layer)", "reduce-scatter", size, tp, link,
                  int(2 * layers * micro_steps))]


def sequence_parallel_comm(layers: float, seq: int, micro: int, hidden: int, tp: int, link: Link,
                           act_bytes: float, micro_steps: int) -> list[Collective]:
    """Megatron TP with sequence parallelism (Korthikanti et al. 2022 sec. 4.2.2; dsbench's plan is torch's
    SequenceParallel norms and PrepareModuleInput regions, dsbench.worker.engines.tensor_parallel.megatron_plan):
    each of a layer's two forward all-reduces becomes a reduce-scatter of the row-parallel output along the sequence
    and an all-gather of the next region's input, and the backward runs the reverse, so 4 all-gathers and 4
    reduce-scatters of the s·b·h tensor per layer per micro-step, the same bytes as TP's 4 all-reduces. Beyond the
    layers: the LM head all-gathers the final norm's output (its gradient reduce-scattered), and the first block's
    shard of the embedding's output is gathered back in the backward."""
    size = seq * micro * hidden * act_bytes
    return [_coll("activations (TP+SP, 4 per layer, 2 at the ends)", "all-gather", size, tp, link,
                  int((4 * layers + 2) * micro_steps)),
            _coll("activations (TP+SP, 4 per layer, 1 at the head)", "reduce-scatter", size, tp, link,
                  int((4 * layers + 1) * micro_steps))]


def loss_parallel_comm(seq: int, micro: int, hidden: int, tp: int, link: Link, act_bytes: float, micro_steps: int,
                       sequence_parallel: bool) -> list[Collective]:
    """The vocabulary-parallel LM head and loss (torch's ``loss_parallel``; Megatron's vocab-parallel cross-entropy,
    Shoeybi et al. 2019 sec. 3): the logits stay split, so no rank gathers its s·b·V of them; the loss all-reduces
    three s·b figures per micro-step (each token's maximum logit, its sum of exponentials, its target's logit,
    torch.distributed.tensor._ops._math_ops), and without SP the column-parallel head's input gradient is
    all-reduced (s·b·h) in the backward (with SP that is the reduce-scatter sequence_parallel_comm counts)."""
    tokens = seq * micro
    comm = [_coll("loss over vocabulary shards (3 per micro-step)", "all-reduce", tokens * 4, tp, link,
                  3 * micro_steps)]
    if not sequence_parallel:
        comm.append(_coll("LM head input gradient (TP)", "all-reduce", tokens * hidden * act_bytes, tp, link,
                          micro_steps))
    return comm


def tied_embedding_comm(params: float, grad_bytes: float, link: Link) -> list[Collective]:
    """A pipeline whose first and last stage both hold a tied embedding (GPT-2's input embedding and LM head) sums
    its two gradients once per step, after the flush: an all-reduce between those two ranks (DeepSpeed's
    ``ReduceTiedGrads``; dsbench's torch_pp does the same by hand)."""
    return [_coll("tied embedding gradients (first and last stage)", "all-reduce", params * grad_bytes, 2, link)]


def pipeline_comm(seq: int, micro: int, hidden: int, stages: int, link: Link, act_bytes: float,
                  micro_steps: int, latency: bool = True) -> list[Collective]:
    """Pipeline: each stage boundary sends s·b·h activations forward and their gradients back per micro-batch;
    without ``latency`` their bytes only (a measured schedule runtime holds the calls: plan/pipeline_time.py)."""
    if stages <= 1:
        return []
    size = seq * micro * hidden * act_bytes * 2 * micro_steps
    bandwidth, per_call = link.figures("p2p")
    return [Collective("activations (PP, point-to-point)", "p2p", size,
                       size / (bandwidth * 1e9) + 2 * micro_steps * per_call * 1e-6 * latency)]




ULYSSES_CALLS = 8
"""All-to-alls per layer per micro-step under DeepSpeed Ulysses: query, key, value and output, forward and backward."""


def ulysses_layer_bytes(head_dim: float, heads: int, kv_heads: int, tokens: float, sp: int, act_bytes: float
                        ) -> float:
    """Bytes one rank sends per decoder layer per micro-step under DeepSpeed Ulysses (Jacobs et al. 2023 sec. 3.1):
    around every layer's attention, an all-to-all of the query, key and value and one of the output in the forward,
    the same four in the backward. Each rank's buffer is its ``tokens`` (s/sp of each sequence x the micro-batch)
    of the tensor (key and value at the key/value heads, replicated up to sp heads when there are fewer:
    UlyssesSPAttentionHF), of which it sends (sp - 1)/sp. Query and output are ``heads`` x ``head_dim`` wide (the
    hidden size, unless the model states another head_dim)."""
    forward = tokens * act_bytes * (2 * heads * head_dim + 2 * head_dim * max(kv_heads, sp))
    return 2 * forward * (sp - 1) / sp  # forward and backward


def all_to_all_seconds(sent: float, calls: float, sp: int, link: Link) -> float:
    """Seconds of ``calls`` all-to-alls over ``sp`` ranks sending ``sent`` bytes per rank in all: priced as sp - 1
    sends at the link's all-gather figures (calibrate does not measure all-to-all; an all-gather moves the same bytes
    per rank over the same steps; gloo's all_to_all_single measured 0.45-0.79x of it, docs/parallelism.md)."""
    bandwidth, latency = link.figures("all-gather")
    return sent / (bandwidth * 1e9) + calls * (sp - 1) * latency * 1e-6


def ulysses_comm(shape: Any, seq: int, micro: int, sp: int, link: Link, act_bytes: float,
                 micro_steps: int) -> list[Collective]:
    """DeepSpeed Ulysses' all-to-alls of a step (:func:`ulysses_layer_bytes` per layer per micro-step)."""
    sent = ulysses_layer_bytes(shape.head_width, shape.heads, shape.kv_heads, seq / sp * micro, sp, act_bytes) * (
        shape.layers * micro_steps)
    calls = ULYSSES_CALLS * shape.layers * micro_steps
    return [Collective("attention heads (Ulysses all-to-all, 8 per layer)", "all-to-all", sent,
                       all_to_all_seconds(sent, calls, sp, link), calls=calls)]
