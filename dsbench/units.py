"""Numbers as a reader takes them in at a glance: a parameter count with its unit, GiB to the digits that show."""

from __future__ import annotations


def params_text(count: float) -> str:
    """``6.74B``, ``1.55M``, ``12.3K``: a planned 7B model and a 1.5M-parameter test model both read as numbers
    (``0.00B`` said nothing of the second)."""
    for scale, unit in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if count >= scale:
            return f"{count / scale:,.2f}{unit}" if unit != "K" else f"{count / scale:,.1f}{unit}"
    return f"{count:,.0f}"


def gib_text(gib: float) -> str:
    """GiB with one decimal, or two significant digits below 0.1 GiB (a tiny model's 0.012 GiB is not 0.0)."""
    return f"{gib:,.1f}" if gib == 0 or abs(gib) >= 0.095 else f"{gib:#.2g}"
