"""Terminal tables of ``dsbench plan``, ``plan --verify``, ``tune`` and ``doctor`` (grids), from the results their JSON
holds."""

from __future__ import annotations

from typing import Any

from dsbench.report.grid import Col, Grid
from dsbench.rows import VerifyRow
from dsbench.units import gib_text, params_text


def _header(result: dict[str, Any]) -> str:
    m, c, w = result["model"], result["cluster"], result["workload"]
    if c.get("compute_tflops"):
        added = c.get("step_residual_ms") or {}  # the pipeline families' correction: added to each step
        rate = (f"{c['compute_tflops']:.3g} TFLOPS per rank measured (profile {c['profile']}"
                + (", step times corrected by its calibrate --check: " + ", ".join(
                    f"{family} {_correction(c['step_scale'], added, family, 2)}" for family in c["step_scale"])
                   + "; other families as predicted" if c.get("step_scale") else "") + ");")
    elif c.get("gpu_model"):
        rate = f"{c['peak_tflops']:g} TFLOPS peak, the GPU time model's {c['gpu_model']} profile;"
    else:
        rate = f"{c['peak_tflops']:g} TFLOPS peak x {c['efficiency']:.0%} achievable;"
    return (f"model {m['name']}: {params_text(m['params'])} params, {m['layers']} layers x {m['hidden']} hidden "
            f"({m['source']}); cluster {c['nodes']} node(s) x {c['gpus_per_node']} GPUs, {c['gpu_mem_gib']:g} GiB "
            f"each, {rate} seq {w['seq_len']}, micro-batch {w['micro_batch']} x {w['grad_accum']} accumulation, "
            f"{w['precision']}")


def layout_text(row: dict[str, Any], micro_batch: int) -> str:
    """tp/pp/dp, Ulysses' sequence-parallel degree, micro-batch and pipeline schedule: ``1/2/8 mb1 1F1B``,
    ``1/1/4 sp2 mb1`` (8 GPUs: dp 4 x sp 2)."""
    text = f"{row['tp']}/{row['pp']}/{row['dp']}" + (f" sp{row['ulysses']}" if row.get("ulysses", 1) > 1 else "")
    text += f" mb{micro_batch}"
    if row["pp"] > 1:
        text += f" int{row['virtual_stages']}" if row.get("virtual_stages", 1) > 1 else " 1F1B"
    return text


def plan_grid(result: dict[str, Any], top_n: int) -> Grid:
    grid = Grid([Col("#", 80), Col("strategy", 80, left=True), Col("tp/pp/dp mb", 100, left=True), Col("fits", 80),
                 Col("GiB/GPU", 80), Col("step ms", 80), Col("tok/s/GPU", 80), Col("MFU", 100),
                 Col("dominant", 100, left=True), Col("note", 80, left=True), Col("params", 0), Col("grads", 0),
                 Col("optim+master", 0), Col("activations", 0), Col("buffers", 0), Col("host/node", 0),
                 Col("exposed comm ms", 0)])
    gpus = result["cluster"]["nodes"] * result["cluster"]["gpus_per_node"]
    for row in result["candidates"][:top_n]:
        mem = row["memory_gib"]
        place = "cfg" if row.get("given") else str(row["rank"] or "-")  # plan --config's file: beside the ranking
        grid.add(place, row["name"], layout_text(row, result["workload"]["micro_batch"]),
                 "yes" if row["fits"] else "no", gib_text(mem["device_total"]), step_text(row),
                 f"{row['tokens_per_s'] / gpus:,.0f}", f"{row['mfu']:.0%}", row["dominant"], grid.note(row["reason"]),
                 *map(gib_text, (mem["params"], mem["grads"], mem["optimizer_states"] + mem["master_weights"],
                                 mem["activations"], mem["buffers"], row["host_gib_per_node"])),
                 f"{row['exposed_comm_s'] * 1e3:,.1f}", style=None if row["fits"] else "dim")
    grid.notes.append("GiB per GPU (2^30 bytes); tp/pp/dp: tensor x pipeline x data parallel, sp Ulysses' sequence "
                      "parallel (its ranks x tp x pp x dp = the GPUs), mb the micro-batch, "
                      "1F1B or int(erleaved) V the pipeline schedule; step time = compute (at the measured rate with "
                      "--profile; by the GPU time model's terms on a GPU it profiles; else peak x efficiency) / "
                      "(1 - bubble) + exposed communication + offload + the optimizer and the engines' own work "
                      "measured by a profile (formulas and sources: docs/planner.md)"
                      # the ± only where a row shows one: a profile that stores its timing spreads
                      + ("; ± is the half-width the profile's timing spreads allow (dsbench/plan/interval.py)"
                         if any(row.get("step_range_s") for row in result["candidates"][:top_n]) else ""))
    return grid


def print_plan(result: dict[str, Any], top_n: int, wide: bool = False) -> None:
    """The cluster in a line, the ranking (reasons as numbered notes), the recommendation, why, and the runner-up."""
    from dsbench.console import table_console

    console = table_console()
    console.print(_header(result), highlight=False)
    for note in (*result["model"].get("notes", ()), *result["cluster"].get("notes", ())):
        console.print(f"note: {note}", highlight=False)
    plan_grid(result, top_n).print(console, wide)
    rec = result["recommendation"]
    if rec is None:
        console.print("nothing fits: add GPUs, use offload, or shorten the sequence")
    else:
        console.print(f"recommended: {rec['name']}", highlight=False)
        console.print("  " + (rec["command"] or "dsbench cannot launch it yet (its strategy is planned, not run)"),
                      highlight=False, soft_wrap=True)  # a command to copy whole, never folded by rich
        ranked = {row["rank"]: row for row in result["candidates"] if row["rank"] in (1, 2)}
        if 1 in ranked:  # why, in the ranking's own words, and what comes next
            console.print(f"  why: {ranked[1]['reason']}", highlight=False)
            _under(console, ranked[1], result["cluster"])
        if 2 in ranked:
            console.print(f"runner-up: {ranked[2]['name']} ({ranked[2]['reason']})", highlight=False)
            _under(console, ranked[2], result["cluster"])


def _under(console: Any, row: dict[str, Any], cluster: dict[str, Any]) -> None:
    """Under a ranked candidate's line: where published runs showed the GPU model missing on it
    (plan/caveats.py), and with ``--tokens`` its days, GPU-hours and cost."""
    for note in row.get("notes", ()):
        console.print(f"  note: {note}", highlight=False)
    cost = row.get("training")
    if cost:
        gpus = cluster["nodes"] * cluster["gpus_per_node"]
        console.print(f"  {cost['tokens']:,.3g} tokens: {cost['days']:,.1f} days on {gpus} GPUs, "
                      f"{cost['gpu_hours']:,.0f} GPU-hours" + (f", {cost['cost']:,.0f} at the given price per "
                                                              "GPU-hour" if "cost" in cost else ""), highlight=False)


def step_text(row: dict[str, Any]) -> str:
    """A planned step in ms, with the half-width the profile's timing spreads allow where it stores them
    (dsbench/plan/interval.py)."""
    text = f"{row['step_s'] * 1e3:,.1f}"
    if row.get("step_range_s"):
        text += f" ±{(row['step_range_s'][1] - row['step_s']) / row['step_s']:.0%}"
    return text


def verify_grid(rows: list[VerifyRow], profile: str | None = None) -> Grid:
    """``profile``: the machine profile the plan used; without one the predicted steps are a GPU's datasheet
    figures, which the table says beside the CPU ranks' measurements."""
    grid = Grid([Col("candidate", 80, left=True), Col("status", 80, left=True), Col("states MiB", 100),
                 Col("measured", 100), Col("error", 80), Col("step ms", 100), Col("measured", 100),
                 Col("step error", 80), Col("accounting", 0, left=True), Col("peak MiB (kind)", 0),
                 Col("predicted peak MiB", 0), Col("peak error", 0)],
                title="predicted vs measured")
    mib = lambda v: "-" if v is None else f"{v / 2**20:,.2f}"  # noqa: E731
    share = lambda v, digits=1: "-" if v is None else f"{v:+.{digits}%}"  # noqa: E731
    ms = lambda v: "-" if v is None else f"{v * 1e3:,.1f}"  # noqa: E731
    for row in rows:
        peak = ("-" if row.measured_peak_memory_bytes is None
                else f"{row.measured_peak_memory_bytes / 2**20:,.0f} ({row.memory_kind})")
        grid.add(row.candidate, row.status, mib(row.predicted_model_state_bytes), mib(row.measured_model_state_bytes),
                 share(row.model_state_error), ms(row.predicted_step_s), ms(row.measured_step_s),
                 share(row.step_error, 0), row.accounting or "-", peak,
                 "-" if row.predicted_peak_memory_bytes is None else f"{row.predicted_peak_memory_bytes / 2**20:,.0f}",
                 share(row.peak_memory_error))
    grid.notes.append("states MiB: model states per rank, predicted then measured (bytes counted from tensors); "
                      "step ms: predicted then measured by the wall clock" + (
                          f", predicted from the machine profile {profile}" if profile else
                          ", predicted from a GPU's datasheet (--gpu), not this machine: pass --profile from "
                          "dsbench calibrate to predict these runs"))
    return grid


def print_verify(rows: list[VerifyRow], profile: str | None, wide: bool = False) -> None:
    from dsbench.console import table_console

    verify_grid(rows, profile).print(table_console(), wide)


def tune_grids(result: dict[str, Any], top: int = 12) -> list[Grid]:
    """The ranking of layouts, and the winner raced compiled and uncompiled where --speed-options ran it."""
    number = lambda v: "-" if v is None else f"{v:,.0f}"  # noqa: E731
    ranking = Grid([Col("layout", 80, left=True), Col("fits", 100), Col("predicted", 80), Col("corrected", 100),
                    Col("measured", 80), Col("status", 80, left=True)])
    # the best ``top`` and every layout that ran (a slow or failed run ranks low, and stays in sight)
    shown = [row for i, row in enumerate(result["layouts"]) if i < top or row["status"] != "not run"]
    for row in shown:
        ranking.add(row["layout"], "yes" if row["fits"] else "no", number(row["predicted_tokens_per_s"]),
                    number(row["corrected_tokens_per_s"]), number(row["measured_tokens_per_s"]), row["status"])
    ranking.notes.append("tokens/s, global. predicted: the planner" + (
        f" from the machine profile {result['profile']}" if result.get("profile") else
        " from a GPU's datasheet (--gpu), not this machine: pass --profile from dsbench calibrate") +
        "; corrected: scaled by the runs (measured/predicted of the same strategy, else the median ratio), a measured "
        "layout's by the runs before it, the figure that chose it; measured: the wall clock over the run's measured "
        "window")
    if (left := len(result["layouts"]) - len(shown)):
        ranking.notes.append(f"{left} more layout{'s' * (left != 1)}, not run, ranked below these "
                             "(--json lists every one).")
    grids = [ranking]
    if result.get("speed"):
        speed = Grid([Col("layout", 80, left=True), Col("measured", 80), Col("vs without", 80)],
                     notes=["the winning layout again, uncompiled and compiled, one run after the other; tokens/s by "
                            "the wall clock"])
        plain = result["speed"][0]["tokens_per_s"]
        for row in result["speed"]:
            ratio = row["tokens_per_s"] / plain if row["tokens_per_s"] and plain else None
            speed.add(row["layout"], number(row["tokens_per_s"]), "-" if ratio is None else f"{ratio:.2f}x")
        grids.append(speed)
    return grids


def print_tune(result: dict[str, Any], top: int = 12, wide: bool = False) -> None:
    """The ranking table and the winner, why, and the runner-up."""
    from dsbench.console import table_console

    console = table_console()
    for grid in tune_grids(result, top):
        grid.print(console, wide)
    if result.get("dry_run"):
        _print_tune_dry_run(result, console)
        return
    winner = result["winner"]
    if winner:
        runs = result["runs_used"]
        console.print(f"winner after {runs} run{'s' * (runs != 1)}: {winner['layout']}"
                      + "".join(f" {label}" for name, label in (("compile", "+compile"), ("fused_optimizer", "+fused"))
                              if winner.get(name)) + ", "
                      f"{winner['tokens_per_s']:,.0f} tokens/s measured", highlight=False)
        console.print(f"  {winner['command']}", highlight=False, soft_wrap=True)  # to copy whole, never folded
        measured = sorted((row for row in result["layouts"] if row["measured_tokens_per_s"]),
                          key=lambda row: -row["measured_tokens_per_s"])
        best = measured[0] if measured else None
        if best is not None:  # why: the wall clock decided, and what the planner had said of it
            predicted = best["predicted_tokens_per_s"]
            # without --profile the planner prices a GPU's datasheet (--gpu): say so beside its figure
            source = "" if result.get("profile") else " (from a GPU's datasheet, not this machine)"
            console.print(f"  why: the fastest of the {len(measured)} layout{'s' * (len(measured) != 1)} measured by "
                          "the wall clock"
                          + (f"; the planner predicted {predicted:,.0f} tokens/s for it{source}" if predicted else ""),
                          highlight=False)
        if len(measured) > 1:
            second = measured[1]
            console.print(f"runner-up: {second['layout']}, {second['measured_tokens_per_s']:,.0f} tokens/s measured "
                          f"({second['measured_tokens_per_s'] / best['measured_tokens_per_s']:.2f}x the fastest's)",
                          highlight=False)
    else:
        console.print(f"no run succeeded in {result['runs_used']} attempt(s): see the cells' compare.log")


def _print_tune_dry_run(result: dict[str, Any], console: Any) -> None:
    """What ``tune --dry-run`` adds under the ranking: the run it would start first, and how many may follow."""
    nxt, left = result["next"], (len(result["layouts"]) if result["exhaustive"] else result["budget"]) - len(
        result["runs"])
    if nxt is None:
        console.print("would run nothing: " + ("the budget is spent" if left <= 0 else
                      "no layout left to run might beat the best measured one"), highlight=False)
        return
    then = ("every other layout that fits, best predicted first" if result["exhaustive"] else
            f"up to {left - 1} more, each chosen by what the runs before it measured" if left > 1 else "no more")
    race = "; then the winner again, compiled and not (--speed-options)" if result.get("speed_options") else ""
    console.print(f"would run first: {nxt['layout']} ({nxt['cell']}); then {then}{race} (--dry-run: nothing runs)",
                  highlight=False)
    console.print(f"  {nxt['command']}", highlight=False, soft_wrap=True)


def doctor_grid(rows: list[Any]) -> Grid:
    """``dsbench doctor``'s checks (dsbench.doctor.Row): host, check, status; the detail and its fix are prose,
    numbered notes under the table."""
    from rich.text import Text

    grid = Grid([Col("host", 80, left=True), Col("check", 80, left=True), Col("status", 80, left=True),
                 Col("note", 80, left=True)])
    for row in rows:
        style = {"FAIL": "bold red", "note": "yellow"}.get(row.status, "green")
        text = row.detail + (f"; fix: {row.fix}" if row.fix else "")
        grid.add(row.host, row.check, Text(row.status, style=style), grid.note(text) if text else "")
    return grid


def check_grid(check: dict[str, Any]) -> Grid:
    """``calibrate --check``'s cells: predicted vs measured step time (the median over the cell's launches, with their
    range), and the scale each family gets."""
    repeats = check.get("repeats", 1)
    runs = "1 run each" if repeats == 1 else f"median of {repeats} runs each"
    grid = Grid([Col("strategy", 80, left=True), Col("family", 80, left=True), Col("measured ms", 80),
                 Col("range ms", 80), Col("predicted ms", 80), Col("error", 80), Col("correction", 80)],
                title=f"check ({check['steps']} steps, {check['warmup']} warm-up, {runs})")
    for row in check["cells"]:
        spread = row.get("measured_range_ms")  # profiles written before 2026-11-27 20:00 have none
        grid.add(row["strategy"], row["family"], f"{row['measured_step_ms']:,.1f}",
                 f"{spread[0]:,.1f}-{spread[1]:,.1f}" if spread else "-", f"{row['predicted_step_ms']:,.1f}",
                 f"{row['error']:+.1%}", correction(check, row["family"]))
    grid.notes.append("step time by the wall clock, predicted before the family's correction; range: the fastest "
                      "and slowest launch; error = predicted / measured - 1; correction, applied to every prediction "
                      "of the family: x measured / predicted, or for a pipeline + measured - predicted a step")
    return grid


def correction(check: dict[str, Any], family: str) -> str:
    """How the planner corrects a family's predictions from calibrate --check's record (plan/selfcheck.py): a
    pipeline's ``+12.3 ms`` a step, any other's ``x1.150``."""
    return _correction(check["step_scale"], check.get("step_residual_ms") or {}, family, 3)


def _correction(scales: dict[str, float], added_ms: dict[str, float], family: str, digits: int) -> str:
    """A family's correction: milliseconds added to each step (a pipeline's), else the step scale."""
    added = added_ms.get(family)
    return f"+{added:,.1f} ms" if added is not None else f"x{scales[family]:.{digits}f}"


def check_warnings(check: dict[str, Any]) -> list[str]:
    """A warning per check cell predicted further from its measurement than the goal (the cells themselves are
    :func:`check_grid`'s table)."""
    return [f"warning: {row['strategy']} was predicted {row['error']:+.1%} from its measured step (goal within "
            f"{check['goal']:.0%}); the planner corrects {row['family']} predictions by "
            f"{correction(check, row['family'])} from this profile"
            for row in check["cells"] if abs(row["error"]) > check["goal"]]


def whatif_grid(rows: list[Any]) -> Grid:
    """``dsbench whatif``'s rows (dsbench.bench.whatif.Row): per link and strategy, measured and the planner's."""
    fmt = lambda value, spec: "-" if value is None else format(value, spec)  # noqa: E731
    grid = Grid([Col("link", 80, left=True), Col("strategy", 80, left=True), Col("tokens/s", 80), Col("s/step", 80),
                 Col("extra s/step", 80), Col("planner comm s", 100), Col("rank", 80)])
    for r in rows:
        grid.add(r.link, r.strategy, fmt(r.tokens_per_s, ",.0f"), fmt(r.step_s, ".3f"), fmt(r.extra_step_s, ".3f"),
                 fmt(r.predicted_comm_s, ".3f"), str(r.rank or r.status))
    grid.notes.append("extra s/step: above the same strategy on the unshaped link; planner comm s: the planner's "
                      "communication seconds per step at the link's rate; rank 1 = fastest on its link")
    return grid
