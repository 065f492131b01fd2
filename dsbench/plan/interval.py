"""A predicted step's range from the spread of the timings a machine profile was fitted from (pure).

``dsbench calibrate`` stores, beside each timing's median, its spread over the samples (half the p10-p90 range over
the median, :func:`dsbench.plan.profile.spreads`). Each term of a predicted step comes from one of those timings: the
compute from the forward+backward, the optimizer from AdamW, the exposed communication from the collectives, the
engine's own work from its stack step (FSDP2, ZeRO-1/2/3) and tensor parallelism's from its layers (DTensor, AutoTP).
A term's half-width is the term times its timing's spread; the terms' half-widths add in quadrature, the timings
being measured apart (the law of propagation of uncertainty for uncorrelated inputs, JCGM 100:2008 "GUM" 5.1.2), and
the family's ``calibrate --check`` scale multiplies the whole as it does the step. What was not measured with a
spread (the offload term: the host link's guess, or where it was timed on the model a difference of two steps,
whose spread is not either step's; a profile written before spreads were stored) adds no width, so the range is
the profile's measurement noise carried through the model, not the model's own error: docs/planner.md reports how
often the measured step fell inside it out of sample.
"""

from __future__ import annotations

import math

from dsbench.plan.candidate import Candidate
from dsbench.plan.pipeline_time import engine_schedule, timing_name
from dsbench.plan.profile import SPREAD_OF

TENSOR_TIMING = {"dtensor": "DTensor layers", "autotp": "AutoTP layers", "dtensor_sp": "DTensor SP layers"}
"""Tensor parallelism's own work per layer, by the kind of split layer (:attr:`Candidate.tp_kind`,
:func:`dsbench.plan.engine_costs.tensor_parallel_costs`)."""
TERM_TIMING = {"compute": "forward+backward", "optimizer": "AdamW", "communication": "collectives"}


def framework_timings(cand: Candidate) -> list[str]:
    """The calibrated timings the framework term of a candidate comes from: its engine's stack step (the timing
    :data:`dsbench.plan.profile.SPREAD_OF` names for the stage's or FSDP2's step, which
    :func:`dsbench.plan.engine_costs.zero_costs` and :func:`~dsbench.plan.engine_costs.fsdp_unit_costs` fit from),
    ZeRO-1/2's step on the model itself, tensor parallelism's or Ulysses' layers, and a pipeline engine's
    schedule."""
    strategy = cand.strategy
    source = ("fsdp", "sharded_step") if strategy.startswith("fsdp") else ("deepspeed", f"{strategy}_step")
    engine_timing = [name for name, timing in SPREAD_OF.items() if timing == source]
    if strategy in ("zero1", "zero2") and cand.pp == 1:  # its cost per reduction on the profile's model, if measured
        engine_timing.append(f"ZeRO-{strategy[-1]} model step")
    head = ["DTensor loss-parallel head"] if cand.loss_parallel else []
    pipeline = [timing_name(engine_schedule(cand))] if cand.pp > 1 else []  # its schedule's runtime
    ulysses = ["Ulysses layers"] if cand.ulysses > 1 else []
    return engine_timing + ([TENSOR_TIMING[cand.tp_kind]] if cand.tp > 1 else []) + head + pipeline + ulysses


def step_range(step: float, terms: dict[str, float], framework: list[str], spread: dict[str, float],
               scale: float) -> tuple[float, float] | None:
    """(low, high) seconds of a predicted ``step`` whose unscaled ``terms`` ("compute" with its bubble,
    "communication" exposed, "optimizer", "framework") came from timings with ``spread``; None without spreads (a
    profile written before they were stored, or no profile)."""
    if not spread:
        return None
    widths = {**{term: spread.get(timing, 0.0) for term, timing in TERM_TIMING.items()},
              # the framework term mixes an engine's and tensor parallelism's work: the wider of their spreads
              "framework": max((spread.get(name, 0.0) for name in framework), default=0.0)}
    half = scale * math.sqrt(sum((seconds * widths.get(term, 0.0)) ** 2 for term, seconds in terms.items()))
    return max(0.0, step - half), step + half
