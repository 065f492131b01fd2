"""The planner's micro-batches in flight (dsbench.parallel.in_flight_micro_batches) against torch's own pipeline
schedules: each schedule class computes every rank's list of actions when it is built (no process group, no model:
the schedule reads only the stages' indices), and the first rank's peak of forwards not yet freed by a backward is
the count of activations it holds at once. The oracle is torch's code, not the formula under test."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from dsbench.parallel import in_flight_micro_batches, interleaved_accepts

schedules = pytest.importorskip("torch.distributed.pipelining.schedules")


def _stage(stages: int, index: int) -> SimpleNamespace:
    """What a schedule reads of a stage on rank 0 while it orders its actions."""
    return SimpleNamespace(num_stages=stages, group_size=None, group_rank=0, stage_index=index, is_first=index == 0,
                           is_last=False, submod=None, stage_index_to_group_rank=None)


def _order(cls, ranks: int, chunks: int, micro_batches: int) -> list:
    """Rank 0's actions under ``cls`` with ``chunks`` model chunks per rank (rank 0 holds chunks 0, P, 2P, ...)."""
    stages = [_stage(ranks * chunks, ranks * k) for k in range(chunks)]
    for stage in stages:
        stage.group_size = ranks
    held = stages if issubclass(cls, schedules.PipelineScheduleMulti) else stages[0]
    return cls(held, micro_batches).pipeline_order[0]


def _peak(actions: list, chunks: int) -> float:
    """Rank 0's most chunk activations held at once, in micro-batches of its whole stage: a forward adds one, the
    pass that frees a chunk's saved tensors removes it (the full backward, or under zero bubble the weight-gradient
    pass, which needs the layer inputs the input-gradient pass leaves)."""
    split = any(a is not None and a.computation_type.name == "BACKWARD_WEIGHT" for a in actions)
    frees = "BACKWARD_WEIGHT" if split else "FULL_BACKWARD"
    held = peak = 0
    for action in filter(None, actions):
        kind = action.computation_type.name
        held += 1 if kind == "FORWARD" else -1 if kind == frees else 0
        peak = max(peak, held)
    return peak / chunks


CASES = [(p, m) for p in (2, 3, 4) for m in range(p, 4 * p + 1)]


@pytest.mark.parametrize("ranks, micro_batches", CASES)
def test_one_chunk_per_rank(ranks, micro_batches):
    """1F1B holds min(P, M), GPipe all M (torch's Schedule1F1B and ScheduleGPipe)."""
    assert _peak(_order(schedules.Schedule1F1B, ranks, 1, micro_batches), 1) == in_flight_micro_batches(
        ranks, micro_batches)
    assert _peak(_order(schedules.ScheduleGPipe, ranks, 1, micro_batches), 1) == in_flight_micro_batches(
        ranks, micro_batches, gpipe=True)


@pytest.mark.parametrize("chunks", [2, 3, 4])
@pytest.mark.parametrize("ranks, micro_batches", [c for c in CASES if interleaved_accepts(c[1], c[0])])
def test_interleaved_and_zero_bubble(ranks, micro_batches, chunks):
    """Every micro-batch count dsbench accepts for the interleaved schedules (parallel.interleaved_accepts), not only
    multiples of P, where Korthikanti et al.'s closed form holds."""
    interleaved = _peak(_order(schedules.ScheduleInterleaved1F1B, ranks, chunks, micro_batches), chunks)
    zero_bubble = _peak(_order(schedules.ScheduleInterleavedZeroBubble, ranks, chunks, micro_batches), chunks)
    assert interleaved == pytest.approx(in_flight_micro_batches(ranks, micro_batches, chunks))
    assert zero_bubble == pytest.approx(in_flight_micro_batches(ranks, micro_batches, chunks, zero_bubble=True))


def test_the_closed_forms_at_a_multiple_of_the_stages():
    """With M a multiple of P: P·(1 + (P - 1)/(P·V)) interleaved (Korthikanti et al. 2022 sec. 4.2.3) and P under
    zero bubble, 1F1B's memory (Qi et al. 2024, ZB-H1)."""
    assert in_flight_micro_batches(4, 16, 2) == pytest.approx(4 * (1 + 3 / 8))
    assert in_flight_micro_batches(4, 16, 2, zero_bubble=True) == pytest.approx(4)
