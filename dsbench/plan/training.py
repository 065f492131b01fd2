"""What a predicted throughput means for a training run (``--tokens``, ``--price-per-gpu-hour``; pure): the time, the
GPU-hours and the cost, for ``plan --layout`` and for the ranking's recommendation and runner-up."""

from __future__ import annotations

from dsbench.errors import UserError


def check_cost_flags(tokens: float | None, price: float | None) -> None:
    """``--price-per-gpu-hour`` needs ``--tokens``, and the tokens are above 0 (one line each)."""
    if tokens is None and price is not None:
        raise UserError("--price-per-gpu-hour goes with --tokens N (the tokens to train)")
    if tokens is not None and not tokens > 0:
        raise UserError(f"--tokens {tokens:g}: give the tokens to train, above 0 (like 2e12)")


def training_cost(tokens_per_s: float, gpus: int, tokens: float | None, price: float | None) -> dict[str, float] | None:
    """Days and GPU-hours to train ``tokens`` at the predicted throughput (the whole job's tokens per second), and
    the cost at ``price`` per GPU-hour."""
    check_cost_flags(tokens, price)
    if tokens is None:
        return None
    hours = tokens / tokens_per_s / 3600
    out = {"tokens": tokens, "days": hours / 24, "gpu_hours": hours * gpus}
    if price is not None:
        out["cost"] = out["gpu_hours"] * price
    return out
