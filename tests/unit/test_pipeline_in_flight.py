"""The planner's micro-batches in flight (dsbench.plan.pipeline_peak.in_flight_micro_batches) against torch's own
pipeline schedules: each schedule class computes every rank's list of actions when it is built (no process group,
no model: the schedule reads only the stages' indices), and the first rank's peak of forwards not yet freed by a
backward is the count of activations it holds at once. The oracle is torch's code, not the formula under test."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from dsbench.parallel import interleaved_accepts
from dsbench.plan.pipeline_peak import in_flight_micro_batches, simulated_micro_batches
from tests.conftest import DATA

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


BEYOND = [(p, v, m) for p in (2, 3, 4) for v in (1, 2, 3)
          for m in range(simulated_micro_batches(p, 10**9, v) + 1, simulated_micro_batches(p, 10**9, v) + 2 * p + 1)
          if v == 1 or interleaved_accepts(m, p)]  # torch's interleaved schedules take equal rounds only


@pytest.mark.parametrize("ranks, chunks, micro_batches", BEYOND)
def test_beyond_the_walked_micro_batches_torch_holds_no_more(ranks, chunks, micro_batches):
    """The planner walks at most P·max(P, 2V + 4) micro-batches (a --grad-accum of 10^12 walked in full filled the
    memory): torch's own schedules, ordered in full at the counts just past that bound, hold what the bounded walk
    predicts."""
    if chunks == 1:
        assert _peak(_order(schedules.Schedule1F1B, ranks, 1, micro_batches), 1) == in_flight_micro_batches(
            ranks, micro_batches)
        return
    interleaved = _peak(_order(schedules.ScheduleInterleaved1F1B, ranks, chunks, micro_batches), chunks)
    zero_bubble = _peak(_order(schedules.ScheduleInterleavedZeroBubble, ranks, chunks, micro_batches), chunks)
    assert interleaved == pytest.approx(in_flight_micro_batches(ranks, micro_batches, chunks))
    assert zero_bubble == pytest.approx(in_flight_micro_batches(ranks, micro_batches, chunks, zero_bubble=True))


def test_a_trillion_micro_batches_are_priced_at_once():
    """GPipe by its closed form (every micro-batch held), the 1F1B family by the bounded walk."""
    assert in_flight_micro_batches(4, 10**12, gpipe=True) == 10**12
    assert in_flight_micro_batches(4, 10**12) == 4
    assert in_flight_micro_batches(4, 10**12, 2) == in_flight_micro_batches(4, 4 * 10**6, 2)


def test_the_closed_forms_at_a_multiple_of_the_stages():
    """With M a multiple of P: P·(1 + (P - 1)/(P·V)) interleaved (Korthikanti et al. 2022 sec. 4.2.3) and P under
    zero bubble, 1F1B's memory (Qi et al. 2024, ZB-H1)."""
    assert in_flight_micro_batches(4, 16, 2) == pytest.approx(4 * (1 + 3 / 8))
    assert in_flight_micro_batches(4, 16, 2, zero_bubble=True) == pytest.approx(4)


STORED = DATA / "activations" / "pipeline_in_flight.json"
"""Rank 0's peak of saved-tensor bytes in the first step of real torch_pp runs on CPU ranks (a 4- and an 8-layer
Llama, fp32), written by ``python scripts/bench_pipeline_memory.py --json ...``."""


def _measured() -> list[tuple[dict, float, float]]:
    """Each stored run with its micro-batches in flight on rank 0, measured (its peak over one micro-batch's bytes,
    GPipe's peak on the same stages over M: GPipe holds every micro-batch at once) and predicted."""
    rows = json.loads(STORED.read_text())["rows"]
    one = {(r["stages"], r["micro_batches"]): r["peak_bytes_per_rank"][0] / r["micro_batches"]
           for r in rows if r["schedule"] == "gpipe"}
    return [(r, r["peak_bytes_per_rank"][0] / one[r["stages"], r["micro_batches"]],
             in_flight_micro_batches(r["stages"], r["micro_batches"], r["virtual_stages"],
                                     gpipe=r["schedule"] == "gpipe", zero_bubble=r["schedule"] == "interleaved-zb"))
            for r in rows]


def test_gpipe_s_peak_is_linear_in_the_micro_batches():
    """The reference itself: GPipe's peak over M is one micro-batch's bytes, the same at every M on the same stages
    (no constant beside it)."""
    per = [r["peak_bytes_per_rank"][0] / r["micro_batches"] for r, _, _ in _measured()
           if r["schedule"] == "gpipe" and r["stages"] == 2]
    assert len(per) >= 3 and max(per) / min(per) - 1 < 0.001, per


def test_every_schedule_holds_what_torch_orders():
    """Measured on real runs: 1F1B holds P micro-batches, interleaved 1F1B its warm-up's count (3 at M = 3, where
    Korthikanti et al.'s closed form for M a multiple of P says 2.5) and the zero-bubble schedule 1F1B's P at M a
    multiple of P (Qi et al.'s ZB-H1), at every M measured."""
    rows = [(r, m, p) for r, m, p in _measured() if r["schedule"] != "gpipe"]
    assert {r["schedule"] for r, _, _ in rows} == {"1f1b", "interleaved", "interleaved-zb"} and len(rows) >= 15
    assert all(m == pytest.approx(p, rel=0.01) for _, m, p in rows), [
        (r["stages"], r["micro_batches"], r["schedule"], m, p) for r, m, p in rows]


KINDS = {"FORWARD": "F", "FULL_BACKWARD": "B", "BACKWARD_INPUT": "I", "BACKWARD_WEIGHT": "W"}
"""torch's passes as plan.pipeline_peak names them (its gradient-reduction actions hold no activations)."""
SCHEDULES = {"1f1b": ("Schedule1F1B", (1,)), "gpipe": ("ScheduleGPipe", (1,)),
             "interleaved": ("ScheduleInterleaved1F1B", (2, 3, 4)),
             "interleaved-zb": ("ScheduleInterleavedZeroBubble", (2, 3, 4))}


def _torch_passes(schedule: str, ranks: int, chunks: int, micro_batches: int, rank: int) -> list[tuple[str, int]]:
    """``rank``'s passes as torch orders them: (kind, local chunk), local chunk k being virtual stage k·P + rank."""
    cls = getattr(schedules, SCHEDULES[schedule][0])
    stages = [SimpleNamespace(num_stages=ranks * chunks, group_size=ranks, group_rank=rank,
                              stage_index=rank + ranks * k, is_first=rank + ranks * k == 0, is_last=False,
                              submod=None, stage_index_to_group_rank=None) for k in range(chunks)]
    held = stages if issubclass(cls, schedules.PipelineScheduleMulti) else stages[0]
    order = cls(held, micro_batches).pipeline_order[rank]
    return [(KINDS[a.computation_type.name], a.stage_index // ranks) for a in order
            if a is not None and a.computation_type.name in KINDS]


@pytest.mark.parametrize("schedule", list(SCHEDULES))
@pytest.mark.parametrize("ranks, micro_batches", CASES)
def test_every_rank_runs_its_passes_in_torch_s_order(schedule, ranks, micro_batches):
    """plan.pipeline_peak's order of forwards, backwards and (zero bubble) input- and weight-gradient passes, on
    every rank, is the one torch's schedules compute for themselves."""
    from dsbench.plan.pipeline_peak import rank_passes

    for chunks in SCHEDULES[schedule][1]:
        if chunks > 1 and not interleaved_accepts(micro_batches, ranks):
            continue
        for rank in range(ranks):
            assert rank_passes(rank, ranks, micro_batches, chunks, schedule) == _torch_passes(
                schedule, ranks, chunks, micro_batches, rank), (rank, chunks)


def test_every_rank_s_measured_peak_is_predicted():
    """The stored runs' peak on every rank (not only rank 0) against the planner's: saved.py's inventory of what
    each chunk keeps, the head and loss on the last, held as torch orders the passes (plan/pipeline_peak.py, through
    the bench script's ``rank_peaks``). Nothing fitted; the last stage of a zero-bubble run holds more than the
    first (its weight gradients wait, the loss's tensors do not)."""
    import sys

    from tests.conftest import ROOT

    sys.path.insert(0, str(ROOT / "scripts"))
    from bench_pipeline_memory import rank_peaks

    rows = json.loads(STORED.read_text())["rows"]
    errors = [(abs(p / m - 1), r["schedule"], r["stages"], r["micro_batches"], rank) for r in rows
              for rank, (m, p) in enumerate(zip(r["peak_bytes_per_rank"], rank_peaks(r), strict=True))]
    assert len(errors) == 5 * 4 * 2 + 4 * 4 and max(errors)[0] < 0.02, max(errors)
    assert all(r["peak_bytes_per_rank"][-1] > r["peak_bytes_per_rank"][0] for r in rows
               if r["schedule"] == "interleaved-zb")


def test_a_launch_warns_of_more_stages_than_micro_batches():
    """Before any rank starts: GPipe's idle share with fewer micro-batches than stages, (P-1)/(M+P-1) (Huang et al.
    2019); nothing to say otherwise."""
    from dsbench.parallel import pipeline_notes

    assert "idles (P-1)/(M+P-1) = 50% of a step" in pipeline_notes(2, 1)[0]
    assert "= 75% of a step; raise --grad-accum to at least 4" in pipeline_notes(4, 1)[0]
    assert pipeline_notes(2, 2) == pipeline_notes(4, 8) == []


def test_runs_the_pass_order_was_not_written_on_are_predicted_rank_by_rank():
    """Held out (tests/data/activations/pipeline_peak_held_out.json, measured after plan/pipeline_peak.py was
    written): 3 stages, and a 16k-token vocabulary whose head makes the last stage the busiest under 1F1B and
    interleaved 1F1B too. Every rank within 2%, and the busiest rank is the one measured busiest."""
    import sys

    from tests.conftest import ROOT

    sys.path.insert(0, str(ROOT / "scripts"))
    from bench_pipeline_memory import rank_peaks

    rows = json.loads((DATA / "activations" / "pipeline_peak_held_out.json").read_text())["rows"]
    assert len(rows) == 6 and {r["vocab"] for r in rows} == {4096, 16384} and {r["stages"] for r in rows} == {2, 3}
    for row in rows:
        measured, predicted = row["peak_bytes_per_rank"], rank_peaks(row)
        assert all(abs(p / m - 1) < 0.02 for m, p in zip(measured, predicted, strict=True)), (row, predicted)
        assert measured.index(max(measured)) == predicted.index(max(predicted)), row
    assert sum(r["peak_bytes_per_rank"][-1] > r["peak_bytes_per_rank"][0] for r in rows) == 4  # the last, busiest
