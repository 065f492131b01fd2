"""The answer first: a compare report's verdict, a few sentences computed from its rows (pure).

For each group of cells that ran the same model on the same device and ranks: the fastest strategy by the wall
clock and its margin over the next; the strategies within noise of it; the one that holds the least memory within
``--max-slowdown`` of the fastest's step time; then what failed, and, with ``--profile``, how far the planner's
predictions were from the measurements. Every figure is one the table beside it shows; nothing is said that the rows
do not hold (a group of one cell gets no margin, a row without memory figures no memory sentence).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import Any

from dsbench.rows import Row

MAX_SLOWDOWN = 1.25
"""``--max-slowdown``'s default: how much slower than the fastest a memory-frugal choice may step."""


def group_of(row: Row) -> tuple[Any, ...]:
    """The cells a row is compared with: the same model, device and ranks."""
    return row.model, row.device, row.world_size


def noise_rule(rows: list[Row]) -> tuple[str, str, str, str]:
    """(low field, high field, the range in words, its caveat or "") that decides "within noise": the min-max of the
    wall-clock tokens/s over repeats where every row ran 2 or more, else each run's timed p10-p90 over its steps."""
    if all(row.ok >= 2 for row in rows):
        return "tokens_per_s_min", "tokens_per_s_max", "min-max tokens/s over repeats", ""
    return ("timed_tokens_per_s_p10", "timed_tokens_per_s_p90", "timed p10-p90 tokens/s over the steps",
            "one repeat, so no spread across runs")


def memory_of(row: Row) -> tuple[float | None, str]:
    """The memory a row is judged by: the device's peak on a GPU (torch.cuda.max_memory_allocated), the model
    states counted from the tensors on CPU (a CPU rank's resident set holds the whole runtime)."""
    if row.memory_kind == "cuda_max_allocated":
        return row.peak_memory_mib, "peak device memory per rank"
    return row.model_states_mib, "model states per rank"


def _group_lines(rows: list[Row], max_slowdown: float) -> list[str]:
    ok = sorted((row for row in rows if row.status == "ok" and row.tokens_per_s), key=lambda row: -row.tokens_per_s)
    if not ok:
        return []
    head = ok[0]
    where = f"{head.model} on {head.world_size} {head.device} rank{'s' if head.world_size != 1 else ''}"
    if len(ok) == 1 and head.scaling_efficiency is not None and head.world_size > 1:  # N-rank / (N x 1-rank)
        return [f"{where}: only {head.strategy} ran ({head.tokens_per_s:,.0f} tokens/s), "
                f"{head.scaling_efficiency * head.world_size:.2f}x {head.scaling_baseline} on 1 rank: a scaling "
                f"efficiency of {head.scaling_efficiency:.0%}."]
    if len(ok) == 1:
        return [f"{where}: only {head.strategy} ran ({head.tokens_per_s:,.0f} tokens/s); nothing to compare."]
    second = ok[1]
    runs = f"{head.ok} run{'s' if head.ok != 1 else ''}"
    lines = [f"{where}: {head.strategy} is fastest at {head.tokens_per_s:,.0f} tokens/s (wall clock, median "
             f"of {runs}), {head.tokens_per_s / second.tokens_per_s:.2f}x the next, {second.strategy}."]
    low, high, what, caveat = noise_rule(ok)
    if head.figure(low) is not None:
        tied = [row.strategy for row in ok[1:]
                if row.figure(high) is not None and row.figure(high) >= head.figure(low)]
        but = f"; {caveat}" if caveat else ""
        lines.append(f"  Within noise of it (their {what} overlap{but}): {', '.join(tied)}." if tied else
                     f"  No other strategy is within noise of it (their {what} would overlap{but}).")
    lines += _frugal_line(ok, max_slowdown)
    return lines


def _frugal_line(ok: list[Row], max_slowdown: float) -> list[str]:
    head = ok[0]
    memory, what = memory_of(head)
    if memory is None:
        return []
    allowed = [head] + [row for row in ok[1:] if memory_of(row)[0] is not None
                        and head.tokens_per_s / row.tokens_per_s <= max_slowdown]
    frugal = min(allowed, key=lambda row: memory_of(row)[0])
    if frugal is head and len(allowed) == 1:  # no other within the slowdown: what less memory would cost
        leaner = [row for row in ok[1:] if (held := memory_of(row)[0]) is not None and held < memory]
        if not leaner:
            return [f"  It also holds the least {what} of them all ({memory:,.1f} MiB)."]
        best = leaner[0]  # ok is fastest first
        return [f"  Less memory costs more than {max_slowdown:.2f}x its step time (--max-slowdown): the fastest that "
                f"holds less, {best.strategy}, {memory_of(best)[0]:,.1f} MiB of {what} against {memory:,.1f} MiB, "
                f"at {head.tokens_per_s / best.tokens_per_s:.2f}x the step time."]
    if frugal is head:
        return [f"  It also holds the least {what} ({memory:,.1f} MiB) of those within {max_slowdown:.2f}x its "
                "step time."]
    return [f"  Least memory within {max_slowdown:.2f}x its step time (--max-slowdown): {frugal.strategy}, "
            f"{memory_of(frugal)[0]:,.1f} MiB of {what} against {memory:,.1f} MiB, at "
            f"{head.tokens_per_s / frugal.tokens_per_s:.2f}x the step time."]


def _prediction_line(rows: Iterable[Row]) -> list[str]:
    """With --profile: the planner's step-time error over the cells it predicted."""
    errors = [(abs(row.step_error), row.strategy) for row in rows if row.step_error is not None]
    if not errors:
        return []
    worst = max(errors)
    return [f"The planner (--profile) predicted {len(errors)} cell{'s' if len(errors) != 1 else ''}' step time with a "
            f"median error of {statistics.median(e for e, _ in errors):.0%}, the worst {worst[0]:.0%} "
            f"({worst[1]})."]


def verdict(rows: list[Row], max_slowdown: float = MAX_SLOWDOWN) -> list[str]:
    """The verdict's lines, groups in the table's order: fastest, within noise, least memory; then failures and the
    planner's error."""
    groups: dict[tuple[Any, ...], list[Row]] = {}
    for row in rows:
        groups.setdefault(group_of(row), []).append(row)
    # a lone cell (compare's 1-rank baseline beside the strategies it scales) says nothing when others compare, nor
    # when the lone cells it scales say their scaling against it
    scaled = {(row.model, row.device) for row in rows  # a 1-rank row's own efficiency (1.0, itself) scales nothing
              if row.scaling_efficiency is not None and row.world_size > 1}
    compared = ([group for group in groups.values() if len(group) > 1]
                or [group for group in groups.values()  # every group a lone cell here
                    if group[0].world_size != 1 or (group[0].model, group[0].device) not in scaled]
                or list(groups.values()))
    lines = [line for group in compared for line in _group_lines(group, max_slowdown)]
    lines += [f"Failed: {_named(row)}: " + (f"{row.status}: " if row.status != "failed" else "") + f"{row.reason}"
              for row in rows if row.status != "ok"]  # the status said where it is not "failed" (timeout, corrupt)
    return lines + _prediction_line(rows)


def _named(row: Row) -> str:
    """A failed cell by its strategy, ranks and model; by its folder where its files never said them (a run stopped
    before its header, a corrupt folder: until 2026-12-02 printed as "? xNone (None)")."""
    if row.strategy == "?" and row.runs:
        return row.runs[0].folder
    return f"{row.strategy} x{row.world_size} ({row.model})"
