"""A collective's time as calibrate fits it and the planner reads it back (pure).

Collectives follow the ring model of :mod:`dsbench.plan.comm`: one call of ``kind`` on a B-byte buffer over n
ranks takes ``alpha + bytes_per_rank / bandwidth``, bytes_per_rank = 2B(n-1)/n (all-reduce), B(n-1)/n
(all-gather, reduce-scatter; ../shared/seeds/001, Patarasuk & Yuan 2009) or B (point-to-point). alpha and the
bandwidth are fitted per collective by least squares on relative error (every size weighs the same, from 4 KiB
to 16 MiB); the fit's worst relative error over the measured sizes is kept with it, so a profile says how well
the model describes the machine. The planner's per-step latency is alpha divided by the ring's steps.

On a noisy machine the relative fit can find no growth with size (a fast sample at a small time weighs most), which
would leave no bandwidth. Then the fit is on absolute error, which the largest buffers lead, and if the times still
do not grow, the bandwidth is the largest buffer's bytes over its whole time, a lower bound; the entry's ``fit``
says which (:data:`FITS`; profiles written from 2026-11-29 18:46 on). A profile's bandwidth is always finite.
"""

from __future__ import annotations

from typing import Any

from dsbench.plan.comm import ring_bytes
from dsbench.plan.hardware import Link

KINDS = ("all-reduce", "all-gather", "reduce-scatter", "p2p")
FITS = ("relative error", "absolute error", "largest buffer")
"""How :func:`fit_collective` fitted a line, in the order it tries them."""


def ring_steps(kind: str, n: int) -> int:
    """Latency-bound steps of one call: 2(n-1) for a ring all-reduce, n-1 for all-gather/reduce-scatter, 1 for p2p."""
    if kind == "p2p":
        return 1
    return max(1, 2 * (n - 1) if kind == "all-reduce" else n - 1)


def moved_bytes(kind: str, size: float, n: int) -> float:
    """Bytes each rank sends in one call (the ring model's; the whole buffer for point-to-point)."""
    return size if kind == "p2p" else ring_bytes(kind, size, n)


def fit_line(points: list[tuple[float, float]], relative: bool = True) -> tuple[float, float]:
    """``(alpha, beta)`` of ``t = alpha + beta * x`` minimising the sum of squared relative errors
    ``((alpha + beta x - t) / t)^2`` (weighted least squares, weights 1/t^2), or of absolute errors with
    ``relative=False`` (weights 1), with alpha and beta kept >= 0: a negative intercept is refitted through the
    origin."""
    if len(points) < 2:
        raise ValueError("a line needs at least two points")
    weights = [1 / t**2 if relative else 1.0 for _, t in points]
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
    how = FITS[0]
    if beta <= 0:  # no growth under relative weights (2026-11-29 18:41: all-reduce's 4 MiB at 1.2 ms, 4 KiB at 2.6)
        alpha, beta = fit_line(xy, relative=False)
        how = FITS[1]
    if beta <= 0:  # the times fall with size throughout: the largest buffer moved its bytes within its whole time
        largest, its_time = max(xy)
        alpha, beta = min(t for _, t in xy), its_time / largest
        how = FITS[2]
    worst = max(abs(alpha + beta * x - t) / t for x, t in xy)
    return {"alpha_us": alpha * 1e6, "bandwidth_gbs": 1 / beta / 1e9,
            "latency_us_per_step": alpha * 1e6 / ring_steps(kind, n), "fit_worst_error": worst, "fit": how}


def call_seconds(fitted: dict[str, Any], kind: str, size: float, n: int) -> float:
    """One call of ``kind`` on a ``size``-byte buffer over ``n`` ranks, as a fitted collective predicts it."""
    entry = fitted.get(kind) or {}
    if "alpha_us" not in entry:
        return 0.0
    return entry["alpha_us"] * 1e-6 + moved_bytes(kind, size, n) / (entry["bandwidth_gbs"] * 1e9)


def fitted_link(data: dict[str, Any], name: str, description: str) -> Link | None:
    """A :class:`Link` of one group's fitted collectives; None when none was fitted."""
    figures = tuple((kind, data[kind]["bandwidth_gbs"], data[kind]["latency_us_per_step"]) for kind in KINDS
                    if "bandwidth_gbs" in data.get(kind, {}))
    if not figures:
        return None
    all_reduce = dict((kind, (bw, lat)) for kind, bw, lat in figures).get("all-reduce", figures[0][1:])
    return Link(name, all_reduce[0], all_reduce[1], description, by_kind=figures)
