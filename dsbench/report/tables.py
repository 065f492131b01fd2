"""Terminal tables of ``dsbench plan``, ``plan --verify`` and ``tune`` (rich), from the results their JSON holds."""

from __future__ import annotations

from typing import Any


def print_plan(result: dict[str, Any], top_n: int) -> None:
    """Readable tables (rich)."""
    from rich.table import Table

    from dsbench.console import table_console

    console = table_console()
    m, c, w = result["model"], result["cluster"], result["workload"]
    console.print(f"model {m['name']}: {m['params'] / 1e9:,.2f}B params, {m['layers']} layers x {m['hidden']} hidden"
                  f" ({m['source']}); cluster {c['nodes']} node(s) x {c['gpus_per_node']} GPUs, "
                  f"{c['gpu_mem_gb']:g} GB each, "
                  + (f"{c['compute_tflops']:.3g} TFLOPS per rank measured (profile {c['profile']}"
                     + (", step times scaled by its calibrate --check: " + ", ".join(
                         f"{family} x{scale:.2f}" for family, scale in c["step_scale"].items())
                        if c.get("step_scale") else "") + ");"
                     if c.get("compute_tflops") else
                     f"{c['peak_tflops']:g} TFLOPS peak, the GPU time model's {c['gpu_model']} profile;"
                     if c.get("gpu_model") else
                     f"{c['peak_tflops']:g} TFLOPS peak x {c['efficiency']:.0%} achievable;") +
                  f" seq {w['seq_len']}, micro-batch {w['micro_batch']} x {w['grad_accum']} accumulation, "
                  f"{w['precision']}")
    table = Table(caption="GiB per GPU (2^30 bytes); step time = compute (at the measured rate with --profile; by the "
                          "GPU time model's terms on a GPU it profiles; else peak x efficiency) / (1 - bubble) + "
                          "exposed communication + offload + the optimizer and the engines' own work measured by a "
                          "profile (formulas and sources: docs/planner.md); ± is the half-width the profile's "
                          "timing spreads allow (dsbench/plan/interval.py)",
                  caption_justify="left")
    for col in ("#", "strategy", "params", "grads", "optim+master", "activations", "buffers", "total", "host/node",
                "step ms", "exposed comm ms", "dominant", "MFU", "reason"):
        table.add_column(col, justify="left" if col in ("strategy", "reason") else "right")
    for row in result["candidates"][:top_n]:
        mem = row["memory_gib"]
        device = lambda v: f"{v:,.1f}"  # noqa: E731
        table.add_row(str(row["rank"] or "-"), row["name"], device(mem["params"]), device(mem["grads"]),
                      device(mem["optimizer_states"] + mem["master_weights"]), device(mem["activations"]),
                      device(mem["buffers"]), device(mem["device_total"]), device(row["host_gib_per_node"]),
                      step_text(row), f"{row['exposed_comm_s'] * 1e3:,.1f}", row["dominant"],
                      f"{row['mfu']:.0%}",
                      row["reason"], style=None if row["fits"] else "dim")
    console.print(table)
    rec = result["recommendation"]
    if rec is None:
        console.print("nothing fits: add GPUs, use offload, or shorten the sequence")
    else:
        console.print(f"recommended: {rec['name']}\n  " + (rec["command"] or "dsbench cannot launch it yet (its "
                                                                         "strategy is planned, not run)"))
        ranked = {row["rank"]: row for row in result["candidates"] if row["rank"] in (1, 2)}
        if 1 in ranked:  # why, in the ranking's own words, and what comes next
            console.print(f"  why: {ranked[1]['reason']}", highlight=False)
        if 2 in ranked:
            console.print(f"runner-up: {ranked[2]['name']} ({ranked[2]['reason']})", highlight=False)


def step_text(row: dict[str, Any]) -> str:
    """A planned step in ms, with the half-width the profile's timing spreads allow where it stores them
    (dsbench/plan/interval.py)."""
    text = f"{row['step_s'] * 1e3:,.1f}"
    if row.get("step_range_s"):
        text += f" ±{(row['step_range_s'][1] - row['step_s']) / row['step_s']:.0%}"
    return text


def print_verify(rows: list[dict[str, Any]]) -> None:
    from rich.table import Table

    from dsbench.console import table_console

    console = table_console()

    table = Table(title="predicted vs measured (model states per rank, bytes counted from tensors; step time by the "
                        "wall clock)")
    for col in ("candidate", "status", "accounting", "predicted MiB", "measured MiB", "error", "peak MiB (kind)",
                "predicted peak MiB", "peak error", "predicted step ms", "measured step ms", "step error"):
        table.add_column(col)
    for row in rows:
        if "error" in row:
            console.print(row["error"])
            continue
        ok = row["status"] == "ok"
        table.add_row(row["candidate"], row["status"], row.get("accounting", "-"),
                      f"{row['predicted_model_state_bytes'] / 2**20:,.2f}" if ok else "-",
                      f"{row['measured_model_state_bytes'] / 2**20:,.2f}" if ok else "-",
                      f"{row['model_state_error']:+.1%}" if ok else "-",
                      f"{row['measured_peak_memory_bytes'] / 2**20:,.0f} ({row['memory_kind']})" if ok else "-",
                      f"{row['predicted_peak_memory_bytes'] / 2**20:,.0f}" if "predicted_peak_memory_bytes" in row
                      else "-",
                      f"{row['peak_memory_error']:+.1%}" if "peak_memory_error" in row else "-",
                      f"{row['predicted_step_s'] * 1e3:,.1f}" if ok else "-",
                      f"{row['measured_step_s'] * 1e3:,.1f}" if ok else "-",
                      f"{row['step_error']:+.0%}" if ok else "-")
    console.print(table)


def print_tune(result: dict[str, Any], top: int = 12) -> None:
    """The ranking table and the winner."""
    from rich.table import Table

    from dsbench.console import table_console

    console = table_console()
    table = Table(caption="tokens/s, global. predicted: the planner; corrected: after the runs (measured/predicted "
                          "of the same strategy, else the median ratio); measured: the wall clock over the run's "
                          "measured window", caption_justify="left")
    for col in ("layout", "fits", "predicted", "corrected", "measured", "status"):
        table.add_column(col, justify="left" if col in ("layout", "status") else "right")
    number = lambda v: "-" if v is None else f"{v:,.0f}"  # noqa: E731
    for row in result["layouts"][:top]:
        table.add_row(row["layout"], "yes" if row["fits"] else "no", number(row["predicted_tokens_per_s"]),
                      number(row["corrected_tokens_per_s"]), number(row["measured_tokens_per_s"]), row["status"])
    console.print(table)
    if result.get("speed"):
        speed = Table(caption="the winning layout again, uncompiled and compiled, one run after the other; tokens/s "
                              "by the wall clock", caption_justify="left")
        for col in ("layout", "measured", "vs without"):
            speed.add_column(col, justify="left" if col == "layout" else "right")
        plain = result["speed"][0]["tokens_per_s"]
        for row in result["speed"]:
            ratio = row["tokens_per_s"] / plain if row["tokens_per_s"] and plain else None
            speed.add_row(row["layout"], number(row["tokens_per_s"]), "-" if ratio is None else f"{ratio:.2f}x")
        console.print(speed)
    winner = result["winner"]
    if winner:
        console.print(f"winner after {result['runs_used']} run(s): {winner['layout']}"
                      + "".join(f" {label}" for name, label in (("compile", "+compile"), ("fused_optimizer", "+fused"))
                              if winner.get(name)) + ", "
                      f"{winner['tokens_per_s']:,.0f} tokens/s measured\n  {winner['command']}")
        measured = sorted((row for row in result["layouts"] if row["measured_tokens_per_s"]),
                          key=lambda row: -row["measured_tokens_per_s"])
        best = measured[0] if measured else None
        if best is not None:  # why: the wall clock decided, and what the planner had said of it
            predicted = best["predicted_tokens_per_s"]
            console.print(f"  why: the fastest of the {len(measured)} layout(s) measured by the wall clock"
                          + (f"; the planner predicted {predicted:,.0f} tokens/s for it" if predicted else ""),
                          highlight=False)
        if len(measured) > 1:
            second = measured[1]
            console.print(f"runner-up: {second['layout']}, {second['measured_tokens_per_s']:,.0f} tokens/s measured "
                          f"({second['measured_tokens_per_s'] / best['measured_tokens_per_s']:.2f}x the fastest's)",
                          highlight=False)
    else:
        console.print(f"no run succeeded in {result['runs_used']} attempt(s): see the cells' compare.log")
