"""The terminal tables of ``dsbench plan --replay`` (rich), from the JSON it can print instead."""

from __future__ import annotations

from typing import Any


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1%}"


def _layout(row: dict[str, Any]) -> str:
    """tp/pp/cp/dp, micro-batch and interleaving as the replay priced them (a chosen value marked *)."""
    dp = row["gpus"] // (row["tp"] * row["pp"] * row["cp"])
    mb = row.get("micro_batch") or f"{row.get('chosen_micro_batch', '?')}*"
    text = f"{row['tp']}/{row['pp']}/{row['cp']}/{dp} mb{mb}"
    if row.get("schedule") == "interleaved":
        text += f" v{row.get('virtual_stages') or str(row.get('chosen_virtual_stages', '?')) + '*'}"
    return text


def print_replay(result: dict[str, Any]) -> None:
    """One line per published run (predicted vs measured, signed errors), then the statistics per source."""
    from rich.table import Table

    from dsbench.console import table_console

    console = table_console()
    rows = Table(caption="step: seconds per optimizer step; error = predicted / measured - 1; layout tp/pp/cp/dp; "
                         "* = filled by a rule (see `assumed` in --json); memory: GiB per GPU, reserved for torchtitan "
                         "rows, allocated otherwise", caption_justify="left")
    for col in ("source", "row", "model", "layout", "strategy", "recompute", "step", "measured", "error", "mem",
                "measured", "error"):
        rows.add_column(col, justify="left" if col in ("source", "model", "layout", "strategy", "recompute")
                        else "right")
    for row in result["rows"]:
        if row["skipped"]:
            rows.add_row(row["source"], str(row["row"]), row["model"] or "", "", "", "", f"skipped: {row['skipped']}",
                         style="dim")
            continue
        measured_mem = row["measured_peak_mem_gib"]
        rows.add_row(row["source"], str(row["row"]), row["model"] or "", _layout(row), row["strategy"],
                     row["recompute"] + (" (SP)" if row["sequence_parallel"] else "") + ("*" if row["assumed"] else ""),
                     f"{row['predicted_step_s']:,.2f}", f"{row['measured_step_s']:,.2f}"
                     if row["measured_step_s"] else "-", _pct(row["step_error"]),
                     f"{row['predicted_peak_mem_gib']:,.1f}", f"{measured_mem:,.1f}" if measured_mem else "-",
                     _pct(row["mem_error"]))
    console.print(rows)
    stats = Table(caption="absolute step-time error over the rows with a measured step; complete = no input filled "
                          "by a rule; spearman_efficiency ranks step time per model FLOP (1/MFU)",
                  caption_justify="left")
    for col in ("source", "rows", "skipped", "rows used", "median", "mean", "max", "spearman step",
                "spearman efficiency"):
        stats.add_column(col, justify="left" if col in ("source", "rows used") else "right")
    for source, s in result["sources"].items():
        for which in ("complete", "all"):
            e = s[which]
            if not e["rows"]:
                continue
            rho = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
            stats.add_row(source, str(s["rows"]), str(s["skipped"]), f"{which} ({e['rows']})",
                          f"{e['median_abs_step_error']:.1%}", f"{e['mean_abs_step_error']:.1%}",
                          f"{e['max_abs_step_error']:.1%}", rho(e["spearman_step"]), rho(e["spearman_efficiency"]))
    console.print(stats)
