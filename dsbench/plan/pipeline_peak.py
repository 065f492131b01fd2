"""Every pipeline rank's peak of saved activations, from the order its schedule runs the passes in (pure, stdlib).

A forward adds its chunk's saved bytes; the pass that frees them takes them away. Under GPipe, 1F1B and interleaved
1F1B that is the chunk's backward. Under the zero-bubble schedule the input-gradient pass runs with
``retain_graph=True`` and frees only the part of the graph above the chunk's last weight: on the last stage, the
loss's own tensors (its fp32 log-softmax output); the weight-gradient pass frees the rest. Measured on CPU ranks, the
last stage of a zero-bubble run holds exactly that (docs/benchmarks.md, "Micro-batches in flight").

The order is torch's (torch.distributed.pipelining.schedules): ScheduleGPipe runs every forward, then every
backward; Schedule1F1B (and DeepSpeed's TrainSchedule) P - 1 - rank forwards, then a forward and a backward in
turn; the interleaved schedules ``_get_1f1b_rank_ops``, with ``_get_warmup_ops``'s warm-up
(:func:`dsbench.parallel.warmup_forwards`), forward chunks in rounds of R micro-batches, backward chunks in the
reverse order, and under zero bubble each weight-gradient pass deferred behind ``rank`` input-gradient passes.
tests/unit/test_pipeline_in_flight.py checks the order against torch's own action lists and the peaks against
runs measured on CPU ranks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from dsbench.parallel import warmup_forwards

FORWARD, BACKWARD, INPUT_GRAD, WEIGHT_GRAD = "F", "B", "I", "W"


@dataclass(frozen=True, slots=True)
class RankPeak:
    """One rank's most saved bytes at once, and how much of that was the loss's (the logits' tensors)."""

    total: float
    loss: float
    rank: int = 0
    """The pipeline rank (stage) it is: 0 the first."""


def rank_passes(rank: int, stages: int, micro_batches: int, virtual_stages: int = 1,
                schedule: str = "1f1b") -> list[tuple[str, int]]:
    """The passes ``rank`` runs in one step, in order: (kind, local chunk), kind F, B (the whole backward), I (input
    gradient) or W (weight gradient); local chunk k is virtual stage k·P + rank."""
    m = micro_batches
    if schedule == "gpipe":
        return [(FORWARD, 0)] * m + [(BACKWARD, 0)] * m
    chunks = virtual_stages if schedule in ("interleaved", "interleaved-zb") else 1
    zero_bubble = schedule == "interleaved-zb" and chunks > 1
    warm = warmup_forwards(rank, stages, m, chunks, zero_bubble)
    total = chunks * m
    per_round = m // max(1, m // stages)

    def forward_chunk(op: int) -> int:
        return (op // per_round) % chunks if chunks > 1 else 0

    def backward_chunk(op: int) -> int:
        return chunks - 1 - ((op - warm) // per_round) % chunks if chunks > 1 else 0

    passes = [(FORWARD, forward_chunk(op)) for op in range(warm)]
    deferred: list[int] = []  # zero bubble: chunks whose weight gradient waits, oldest first
    for op in range(warm, total + warm):  # steady state (a forward, then a backward), then the cool-down
        if op < total:
            passes.append((FORWARD, forward_chunk(op)))
        passes.append((INPUT_GRAD if zero_bubble else BACKWARD, backward_chunk(op)))
        if zero_bubble:
            deferred.append(backward_chunk(op))
            if op - warm >= rank:  # torch's num_1f1b_microbatches = rank: the first `rank` wait for the drain
                passes.append((WEIGHT_GRAD, deferred.pop(0)))
    return passes + [(WEIGHT_GRAD, chunk) for chunk in deferred]


def rank_peak(passes: list[tuple[str, int]], rank: int, stages: int, chunk_bytes: Sequence[float],
              loss_bytes: Sequence[float]) -> RankPeak:
    """The most bytes ``passes`` hold at once; ``chunk_bytes[v]`` is what virtual stage v saves for one micro-batch,
    ``loss_bytes[v]`` the part of it the loss's tensors are (freed by the input-gradient pass)."""
    held = loss = 0.0
    peak = RankPeak(0.0, 0.0)
    for kind, chunk in passes:
        v = chunk * stages + rank
        sign = 1 if kind == FORWARD else -1
        part = {FORWARD: chunk_bytes[v], BACKWARD: chunk_bytes[v], INPUT_GRAD: loss_bytes[v],
                WEIGHT_GRAD: chunk_bytes[v] - loss_bytes[v]}[kind]
        held += sign * part
        loss += sign * loss_bytes[v] if kind in (FORWARD, BACKWARD, INPUT_GRAD) else 0.0
        if held > peak.total:
            peak = RankPeak(held, loss)
    return peak


def simulated_micro_batches(stages: int, micro_batches: int, virtual_stages: int = 1) -> int:
    """As many micro-batches as the peak needs walked: past P·max(P, 2V + 4) no schedule of the 1F1B family holds
    more. For M >= P², M // max(1, M // P) is P (the round size), so after the warm-up, which is then the same for
    every M, the steady state repeats with period V·P ops, each period's forwards saving what its backwards free;
    the cool-down only frees. Checked for P 2-8, V 1-4 and every M up to 6P² beyond the bound
    (tests/unit/test_pipeline_in_flight.py). A --grad-accum of 10^12 walked pass by pass filled 24 GiB."""
    return min(micro_batches, stages * max(stages, 2 * virtual_stages + 4))


def peaks(stages: int, micro_batches: int, chunk_bytes: Sequence[float], loss_bytes: Sequence[float] | None = None,
          virtual_stages: int = 1, schedule: str = "1f1b") -> list[RankPeak]:
    """Every rank's peak (rank 0 first), for chunks of ``chunk_bytes`` per virtual stage (P·V of them, or P)."""
    loss = loss_bytes if loss_bytes is not None else [0.0] * len(chunk_bytes)
    if schedule == "gpipe":  # every forward before any backward: all M micro-batches' chunks held at once
        return [RankPeak(micro_batches * chunk_bytes[rank], micro_batches * loss[rank], rank)
                for rank in range(stages)]
    walked = simulated_micro_batches(stages, micro_batches, virtual_stages)
    return [replace(rank_peak(rank_passes(rank, stages, walked, virtual_stages, schedule), rank, stages,
                              chunk_bytes, loss), rank=rank) for rank in range(stages)]


def chunk_layers(layers: int, chunks: int) -> list[int]:
    """Decoder layers per chunk, in order: equal shares, the earlier chunks taking the remainder (dsbench's torch_pp
    split and DeepSpeed's ``type:BlockPipe`` partition; memory.held_params splits stages the same way)."""
    base, extra = divmod(layers, chunks)
    return [base + (1 if k < extra else 0) for k in range(chunks)]


def busiest(stages: int, micro_batches: int, layer_bytes: float, head_bytes: float, loss_bytes: float,
            layers: int, virtual_stages: int = 1, schedule: str = "1f1b", chunk_extra: float = 0.0) -> RankPeak:
    """The busiest rank of a pipeline whose chunks save ``layer_bytes`` per decoder layer (plus ``chunk_extra``
    each, e.g. the rotary tables a chunk computes) and whose last chunk adds the head's ``head_bytes``, of which
    ``loss_bytes`` are the loss's. Without a pipeline: one micro-batch of the whole model. Of ranks holding the
    same, the first."""
    chunks = stages * (virtual_stages if schedule in ("interleaved", "interleaved-zb") else 1)
    sizes = [n * layer_bytes + chunk_extra for n in chunk_layers(layers, max(1, chunks))]
    sizes[-1] += head_bytes
    loss = [0.0] * (len(sizes) - 1) + [loss_bytes]
    if stages <= 1:
        return RankPeak(sum(sizes), loss_bytes)
    return max(peaks(stages, micro_batches, sizes, loss, virtual_stages, schedule), key=lambda peak: peak.total)


def in_flight_micro_batches(stages: int, micro_batches: int, virtual_stages: int = 1, gpipe: bool = False,
                            zero_bubble: bool = False) -> float:
    """Micro-batches whose activations the first stage holds at its peak: rank 0's :func:`peaks` with every chunk
    1/V of a micro-batch. All M under GPipe (every forward before any backward); min(P, M) under 1F1B; 1 without a
    pipeline. Interleaved, the first stage's warm-up forwards (:func:`dsbench.parallel.warmup_forwards`) and one more
    come before its first backward; with M a multiple of P that is P·(1 + (P - 1)/(P·V)) micro-batches under
    interleaved 1F1B (Korthikanti et al. 2022 sec. 4.2.3, after Narayanan et al. 2021) and P under zero bubble (Qi
    et al. 2024: ZB-H1 holds 1F1B's activations). tests/unit/test_pipeline_in_flight.py checks it against torch's
    own schedules' action lists and the closed forms."""
    if stages <= 1:
        return 1
    schedule = ("gpipe" if gpipe else "interleaved-zb" if zero_bubble else "interleaved" if virtual_stages > 1
                else "1f1b")
    chunks = stages * (virtual_stages if schedule.startswith("interleaved") else 1)
    share = 1 / (chunks // stages)
    return peaks(stages, micro_batches, [share] * chunks, None, virtual_stages, schedule)[0].total
