"""The terminal tables of ``dsbench plan --replay`` (rich), from the JSON it can print instead."""

from __future__ import annotations

from typing import Any

from dsbench.report.grid import Col, Grid


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1%}"


SHOWN = ("micro_batch", "virtual_stages", "recompute")
"""The filled inputs that a column of the table shows (starred there); any other (the interconnect) stars the row."""


def _starred(text: str, filled: bool) -> str:
    return text + "*" if filled else text


def _layout(row: dict[str, Any]) -> str:
    """tp/pp/cp/dp, micro-batch and interleaving as the replay priced them (a chosen value marked *)."""
    dp = row["gpus"] // (row["tp"] * row["pp"] * row["cp"])
    assumed = row.get("assumed") or {}
    mb = _starred(str(row.get("micro_batch") or row.get("chosen_micro_batch", "?")), "micro_batch" in assumed)
    text = f"{row['tp']}/{row['pp']}/{row['cp']}/{dp} mb{mb}"
    if row.get("schedule") == "interleaved":
        virtual = row.get("virtual_stages") or row.get("chosen_virtual_stages", "?")
        text += f" int{_starred(str(virtual), 'virtual_stages' in assumed)}"  # as plan's table writes it
    return text


def replay_grids(result: dict[str, Any]) -> list[Grid]:
    """One line per published run (predicted vs measured, signed errors), then the statistics per source."""
    rows = Grid([Col("source", 100, left=True), Col("row", 80), Col("model", 80, left=True),
                 Col("layout", 80, left=True), Col("strategy", 100, left=True), Col("recompute", 0, left=True),
                 Col("step s", 80), Col("measured", 80), Col("error", 80), Col("GiB", 100), Col("measured", 100),
                 Col("error", 100)])
    for row in result["rows"]:
        if row["skipped"]:
            rows.add(row["source"], str(row["row"]), row["model"] or "", "", "", "",
                     rows.note(f"skipped: {row['skipped']}"), "", "", "", "", "", style="dim")
            continue
        measured_mem = row["measured_peak_mem_gib"]
        assumed = row["assumed"] or {}
        rows.add(row["source"], _starred(str(row["row"]), any(key not in SHOWN for key in assumed)),
                 row["model"] or "", _layout(row), row["strategy"],
                 _starred(row["recompute"] + (" (SP)" if row["sequence_parallel"] else ""), "recompute" in assumed),
                 f"{row['predicted_step_s']:,.2f}", f"{row['measured_step_s']:,.2f}"
                 if row["measured_step_s"] else "-", _pct(row["step_error"]),
                 f"{row['predicted_peak_mem_gib']:,.1f}", f"{measured_mem:,.1f}" if measured_mem else "-",
                 _pct(row["mem_error"]))
    rows.notes.append("step s: seconds per optimizer step, predicted then measured; error = predicted / measured - "
                      "1; layout tp/pp/cp/dp (tensor x pipeline x context x data parallel), mb the micro-batch, int V "
                      "the interleaved schedule over V chunks per rank; * = filled by a rule (see `assumed` in --json; "
                      "a starred row number: the interconnect); GiB: memory per GPU, reserved for torchtitan rows, "
                      "allocated otherwise")
    stats = Grid([Col("source", 80, left=True), Col("rows", 100), Col("skipped", 100), Col("rows used", 80, left=True),
                  Col("median", 80), Col("mean", 100), Col("max", 80), Col("spearman step", 100),
                  Col("spearman efficiency", 100)],
                 notes=["absolute step-time error over the rows with a measured step; complete = no input filled by a "
                        "rule; spearman efficiency ranks step time per model FLOP (1/MFU)"])
    rho = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
    for source, s in result["sources"].items():
        for which in ("complete", "all"):
            e = s[which]
            if e["rows"]:
                stats.add(source, str(s["rows"]), str(s["skipped"]), f"{which} ({e['rows']})",
                          f"{e['median_abs_step_error']:.1%}", f"{e['mean_abs_step_error']:.1%}",
                          f"{e['max_abs_step_error']:.1%}", rho(e["spearman_step"]), rho(e["spearman_efficiency"]))
    return [rows, stats]


def print_replay(result: dict[str, Any], wide: bool = False) -> None:
    from dsbench.console import table_console

    console = table_console()
    for grid in replay_grids(result):
        grid.print(console, wide)
