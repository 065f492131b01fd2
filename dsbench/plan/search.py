"""``dsbench tune``'s search (pure): every runnable layout ranked by the planner, then a few real runs, each one
correcting the predictions of those not yet run.

A layout is a compare strategy (the way dsbench runs it) x micro-batch x accumulation (their product times the
data-parallel ranks is the fixed global batch) x activation checkpointing. The planner predicts each one's
tokens/s and memory; layouts that do not fit are dropped. Measuring then goes greedily: run the best predicted
layout; divide each measured tokens/s by its prediction; scale the other predictions by that ratio (the same
strategy's when it has been run, else the median of all measured ratios) and run the best corrected one, while it
might still beat the best measured layout (within the time model's error) and the budget lasts. The winner is the
best *measured* layout: never a prediction, never a sum of timed phases.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from dsbench.errors import UserError
from dsbench.parallel import divisors


@dataclass(frozen=True, kw_only=True, slots=True)
class Layout:
    """One point of the search space."""

    strategy: str
    """As ``dsbench compare`` spells it (zero2, fsdp, pipe2, ...)."""
    micro_batch: int
    grad_accum: int
    """Micro-steps per optimizer step on each rank of pure data parallelism (model-parallel layouts accumulate
    tp x pp times more, so every layout trains the same global batch)."""
    checkpointing: bool = False

    @property
    def name(self) -> str:
        return (f"{self.strategy} mb{self.micro_batch} x{self.grad_accum}" + (" ckpt" if self.checkpointing else ""))


@dataclass(kw_only=True, slots=True)
class Scored:
    layout: Layout
    predicted: float
    """Predicted tokens/s (global)."""
    fits: bool
    corrected: float | None = None
    """The prediction after correction by what was measured."""
    measured: float | None = None
    """Measured tokens/s by the wall clock (None: not run)."""
    status: str = "not run"

    def to_dict(self) -> dict[str, Any]:
        return {"layout": self.layout.name, "strategy": self.layout.strategy, "micro_batch": self.layout.micro_batch,
                "grad_accum": self.layout.grad_accum, "activation_checkpointing": self.layout.checkpointing,
                "fits": self.fits, "predicted_tokens_per_s": self.predicted,
                "corrected_tokens_per_s": self.corrected, "measured_tokens_per_s": self.measured,
                "status": self.status}


def layouts(strategies: list[str], world: int, global_batch: int, model_parallel: Callable[[str], int],
            checkpointing: bool = True) -> list[Layout]:
    """Every layout of ``strategies`` that trains ``global_batch`` samples per step on ``world`` ranks: micro-batch
    x accumulation x data-parallel ranks = the global batch, with the model-parallel degree dividing the world."""
    if global_batch % world:
        raise UserError(f"--global-batch {global_batch} does not split over {world} ranks: give a multiple of {world}")
    per_rank = global_batch // world  # samples per rank of pure data parallelism per step
    out = []
    for strategy in strategies:
        if world % model_parallel(strategy) or (strategy == "single") != (world == 1):
            continue
        for micro in divisors(per_rank):
            for ckpt in (False, True) if checkpointing else (False,):
                out.append(Layout(strategy=strategy, micro_batch=micro, grad_accum=per_rank // micro,
                                  checkpointing=ckpt))
    if not out:
        raise UserError(f"no strategy of {', '.join(strategies)} runs on {world} rank(s)")
    return out


def ranked(scored: list[Scored]) -> list[Scored]:
    """Best first: measured figures where there are, else the corrected (or plain) prediction."""
    return sorted(scored, key=lambda s: -(s.measured or s.corrected or s.predicted))


def correct(scored: list[Scored]) -> None:
    """Scale every unmeasured prediction by measured/predicted: its strategy's own ratio when that strategy has
    been run (the median over its runs), else the median of every measured ratio."""
    ratios = [(s.layout.strategy, s.measured / s.predicted) for s in scored if s.measured and s.predicted]
    if not ratios:
        return
    overall = statistics.median(r for _, r in ratios)
    for s in scored:
        if s.measured is None:
            own = [r for name, r in ratios if name == s.layout.strategy]
            s.corrected = s.predicted * (statistics.median(own) if own else overall)


UNCERTAINTY = 0.25
"""How far a corrected prediction may fall short of what the layout measures: the time model's worst step-time error
on the stored runs (docs/planner.md, "The time model with a profile"). A layout predicted within it of the best
measured one may still beat it, so it is worth a run."""


def next_layout(scored: list[Scored], runs_left: int, exhaustive: bool = False) -> Scored | None:
    """The layout to run next: the best (corrected) prediction among those that fit and were not run, while it
    might still beat the best measured layout (by the model's own error, :data:`UNCERTAINTY`); None when the
    budget is spent or nothing promises better. Exhaustive: every layout that fits, best predicted first.

    The band matters: after one run every other prediction is scaled by the same measured ratio, so none is ever
    above the measured layout, and a rule of "predicted better" would never spend a second run."""
    if runs_left <= 0:
        return None
    waiting = [s for s in scored if s.fits and s.status == "not run"]
    if not waiting:
        return None
    best = max(waiting, key=lambda s: s.corrected or s.predicted)
    measured = [s.measured for s in scored if s.measured]
    if not exhaustive and measured and (best.corrected or best.predicted) * (1 + UNCERTAINTY) <= max(measured):
        return None
    return best


@dataclass(kw_only=True, slots=True)
class Search:
    """The state of one tune: every layout scored, and the runs made (in order)."""

    scored: list[Scored]
    budget: int
    exhaustive: bool = False
    runs: list[str] = field(default_factory=list)

    def runs_allowed(self) -> int:
        return len(self.scored) if self.exhaustive else self.budget

    def step(self, measure: Callable[[Layout], float | None]) -> Scored | None:
        """Run the next layout (``measure`` returns its tokens/s, or None when the run failed); None when done."""
        chosen = next_layout(self.scored, self.runs_allowed() - len(self.runs), self.exhaustive)
        if chosen is None:
            return None
        self.runs.append(chosen.layout.name)
        value = measure(chosen.layout)
        chosen.measured, chosen.status = value, "ok" if value else "failed"
        correct(self.scored)
        return chosen

    def winner(self) -> Scored | None:
        measured = [s for s in self.scored if s.measured]
        return max(measured, key=lambda s: s.measured or 0.0) if measured else None


def start(candidates: list[tuple[Layout, float, bool]], budget: int, exhaustive: bool = False) -> Search:
    """A search over ``(layout, predicted tokens/s, fits)``; nothing that fits means nothing to run."""
    if budget < 1:
        raise UserError(f"--budget must be >= 1 (real runs), got {budget}")
    scored = [Scored(layout=layout, predicted=predicted, fits=fits) for layout, predicted, fits in candidates]
    if not any(s.fits for s in scored):
        raise UserError("no layout fits the memory given (--gpu-mem): add ranks, or allow offload strategies")
    return Search(scored=scored, budget=budget, exhaustive=exhaustive)


def resumed(search: Search, done: dict[str, float | None]) -> Search:
    """The search with the runs of an earlier tune (layout name -> measured tokens/s, in the order they ran)
    already made. Each is taken as :meth:`Search.step` took it, correcting the others after it, so a run keeps
    the corrected prediction that chose it, as the tune that made it printed it."""
    by_name = {s.layout.name: s for s in search.scored}
    for name, value in done.items():
        s = by_name[name]
        s.measured, s.status = value, "ok" if value else "failed"
        search.runs.append(name)
        correct(search.scored)
    return replace(search)


def predict(layout: Layout, base: Any, profile: Any = None) -> tuple[float, bool]:
    """The planner's (tokens/s, fits) for one layout: ``base`` is the :class:`~dsbench.plan.api.PlanRequest` of the
    job (model, ranks, memory, precision, sequence), the layout sets strategy, batch split and checkpointing."""
    from dsbench.plan.api import build
    from dsbench.plan.estimate import estimate
    from dsbench.plan.verify import candidate_for

    candidate = candidate_for(layout.strategy)
    if candidate is None:
        raise UserError(f"the planner has no model of strategy {layout.strategy!r}; leave it out of --strategies")
    request = replace(base, micro_batch=layout.micro_batch, grad_accum=layout.grad_accum, profile=profile)
    workload, cluster, _ = build(request)
    e = estimate(replace(candidate, checkpointing=layout.checkpointing), workload, cluster)
    return e.tokens_per_s, e.fits
