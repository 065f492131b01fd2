"""Predicted beside measured for ``dsbench plan --verify`` (pure; the runs are made by dsbench.bench.verify).

The planner's per-rank model-state bytes for a run (its precision and accounting) are compared with the
bytes the worker counted from its tensors, and predicted vs measured peak memory where the device is a GPU
(CUDA max allocated).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from dsbench import strategies as registry
from dsbench.models import ModelShape
from dsbench.plan.candidate import Candidate
from dsbench.plan.memory import ModelStates, accounting_for, held_params, model_states
from dsbench.plan.profile import Profile
from dsbench.rows import Row, VerifyRow
from dsbench.run_record import read_summary
from dsbench.strategy_match import name_for


def compare_strategy(cand: Candidate) -> str | None:
    """The compare strategy that runs a planner candidate (``None`` when compare has none, or the planner's model is
    not used for it: NVMe offload); activation checkpointing is the cell's own switch."""
    name = name_for(**cand.planner_fields)
    return name if name is not None and registry.get(name).planned else None


def predicted_states(shape: ModelShape, cand: Candidate, world: int, precision: str) -> ModelStates:
    """The planner's model states on a run's busiest rank, in the run's precision and accounting; the head is
    split by vocabulary under AutoTP and torch_tp's ``--loss-parallel``."""
    dims = cand.dims(world)
    held = held_params(shape, cand.tp, cand.pp, vocab_parallel_head=cand.vocab_parallel_head)
    # ZeRO partitions over the sequence-data-parallel group under Ulysses: all dp x sp ranks
    return model_states(held, cand.strategy, dims.dp * dims.sp, accounting_for(precision, cand.strategy),
                        offload=cand.offload, offload_param=cand.offload_param)


def comparable_bytes(strategy: str, counted: dict[str, Any], states: ModelStates) -> tuple[float, float]:
    """(measured, predicted) model-state bytes per rank, compared like for like.

    The worker counts ZeRO-1 after the boundary reduction, when DeepSpeed keeps only its gradient
    partition, while the planner counts the full gradient held during backward (the ZeRO paper's P_os):
    for ZeRO-1 the gradients are left out of both sides.
    """
    if strategy == "zero1":
        return counted["total"] - counted["grads"], states.total - states.grads
    return counted["total"], states.total


def compare_row(planned: dict[str, Any], folder: Path, shape: ModelShape, ranks: int, precision: str,
                status: str) -> VerifyRow:
    """Predicted vs measured for one candidate's run (``planned``: its row of the plan result): model states on the
    busiest rank, and peak memory on GPU."""
    cand = Candidate.from_dict(planned)
    row = VerifyRow(candidate=planned["name"], folder=str(folder), status=status)
    summary = read_summary(folder) if status == "ok" else None
    if summary is None or summary.throughput is None or not summary.model_state_bytes_per_rank:
        return row
    counted = max(summary.model_state_bytes_per_rank, key=lambda r: r["total"])  # a stage may hold more
    states = predicted_states(shape, cand, ranks, precision)
    measured, predicted = comparable_bytes(cand.strategy, counted, states)
    peak = max(summary.peak_memory_bytes_per_rank)
    wall_step = summary.throughput.step_s  # by the wall clock: the measured window over its steps
    device: dict[str, float] = {}
    if summary.memory_kind == "cuda_max_allocated":
        # On a GPU the planner's device total (states + activations + buffers) is comparable with
        # torch.cuda.max_memory_allocated; on CPU the RSS includes the whole runtime, so no comparison.
        predicted_peak = planned["memory_gib"]["device_total"] * 2**30
        device = {"predicted_peak_memory_bytes": predicted_peak, "peak_memory_error": (predicted_peak - peak) / peak}
    return replace(
        row, note="gradients excluded (counted at different moments, see docs/planner.md)"
        if cand.strategy == "zero1" else None,
        predicted_model_state_bytes=predicted, measured_model_state_bytes=measured,
        model_state_error=(predicted - measured) / measured, accounting=accounting_for(precision, cand.strategy).name,
        measured_peak_memory_bytes=peak, memory_kind=summary.memory_kind, tokens_per_s=summary.throughput.tokens_per_s,
        measured_step_s=wall_step, predicted_step_s=planned["step_s"],
        step_error=(planned["step_s"] - wall_step) / wall_step, **device)


def candidate_for(strategy: str) -> Any:
    """The planner's candidate for a compare strategy (``single`` is DDP on one rank); None when the planner's model
    is not used for it, or the name is not a compare strategy."""
    from dsbench.plan.candidate import Candidate

    how = registry.lookup(strategy)
    return Candidate(**how.planner_fields) if how is not None and how.planned else None


def predict_cell(row: Row, profile: Profile | None = None) -> Any:
    """The planner's estimate for one measured compare row (``dsbench.report.collect``): the same model,
    micro-batch, accumulation, sequence, precision and ranks, with a machine profile's measured figures when
    given; None for a strategy the planner has no candidate for, for a compiled run (the planner has no term for
    compilation) and for a run whose header was not recorded. A row stepping torch AdamW's fused kernel
    (``+fused``) is planned at the profile's optimizer rate, as every other row (calibrate measures the fused
    kernel)."""
    from dsbench.plan.api import build
    from dsbench.plan.estimate import estimate
    from dsbench.plan.request import PlanRequest

    candidate = candidate_for(row.base_strategy) if not row.with_compile else None
    if candidate is None:
        return None
    header = row.runs[0].header
    if header.grad_accum is None or header.seq_len is None:
        return None  # no run header (its metrics.jsonl lost or cut before the first record): nothing to plan from
    # the cell's accumulation is per model-parallel group; the planner's --grad-accum is per pure-DP rank
    accum = candidate.dims(row.world_size).pure_dp_accumulation(header.grad_accum)
    # the nodes the ranks ran on (the run header records every rank's host): data parallelism across them is
    # priced at the profile's link across nodes
    world, nodes = row.world_size, nodes_of(row)
    # a profile calibrated on a GPU prices with the GPU model's measured constants, not the run's datasheet peak
    peak = None if profile is not None and profile.data.get("gpu") else header.peak_tflops
    request = PlanRequest(model=row.model, gpus=world, nodes=nodes, gpus_per_node=world // nodes if nodes > 1
                          else None, peak_tflops=peak,
                          seq_len=header.seq_len, micro_batch=row.micro_batch, grad_accum=accum,
                          precision=header.precision, profile=profile)
    workload, cluster, _ = build(request)
    return estimate(candidate, workload, cluster)


def nodes_of(row: Row) -> int:
    """The nodes a row's ranks ran on (the run header records every rank's host); 1 for an uneven placement, which
    the planner's nodes x slots cannot say (planned as one node)."""
    nodes = len(set(row.runs[0].header.hostnames)) or 1
    return 1 if row.world_size % nodes else nodes


def measured_step_s(row: Row) -> float:
    """A measured row's step time by the wall clock: its global tokens per step over its tokens/s."""
    header = row.runs[0].header
    return header.global_batch * header.seq_len / row.tokens_per_s


def predicted_figures(row: Row, profile: Profile) -> dict[str, Any]:
    """What the planner, from a machine profile, predicts for one measured report row, beside what was measured:
    the step time by the wall clock and, where the peak is the GPU's allocator peak, the device memory. Empty for a
    failed row or a strategy the planner has no candidate for (the report shows "-")."""
    from dsbench.errors import DsbenchError

    if row.status != "ok" or not row.tokens_per_s:
        return {}
    try:
        estimate = predict_cell(row, profile)
    except DsbenchError:  # a model the planner cannot resolve here (a local folder since moved): no prediction
        return {}
    if estimate is None:
        return {}
    measured = measured_step_s(row)
    out = {"wall_step_ms": measured * 1e3, "predicted_step_ms": estimate.step_s * 1e3,
           "step_error": (estimate.step_s - measured) / measured, "predicted_dominant": estimate.dominant}
    if estimate.step_range_s is not None:  # what the profile's timing spreads allow (dsbench/plan/interval.py)
        out.update(predicted_low_ms=estimate.step_range_s[0] * 1e3, predicted_high_ms=estimate.step_range_s[1] * 1e3)
    if row.memory_kind == "cuda_max_allocated" and row.peak_memory_mib:
        # the planner's device total (states + activations + buffers) against torch.cuda.max_memory_allocated;
        # a CPU run's RSS holds the whole runtime and is not compared
        predicted = estimate.device_total / 2**20
        out.update(predicted_peak_mib=predicted,
                   peak_error=(predicted - row.peak_memory_mib) / row.peak_memory_mib)
    return out


def core_notes(rows: list[Row], profile: Profile | None) -> list[str]:
    """One line per rank count of the measured rows that a CPU profile prices beyond what it measured
    (:func:`dsbench.plan.machine_profile.core_note`), for the report's predicted column."""
    from dsbench.plan.machine_profile import core_note

    if profile is None:
        return []
    per_node = {row.world_size // nodes_of(row) for row in rows if row.runs}
    return [note for ranks in sorted(per_node) if (note := core_note(profile.data, ranks))]


def predictor(profile: Profile | None) -> Any:
    """The report's predicted columns from a machine profile (read and checked where --profile was parsed), or None
    without one."""
    if profile is None:
        return None
    from functools import partial

    return partial(predicted_figures, profile=profile)
