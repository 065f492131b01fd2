"""``dsbench whatif``: the same strategies across test-bed nodes at several link rates, measured, beside the
planner's communication time for each link (../shared/seeds/003's network study, on real links).

For each link: `dsbench testbed up` shaped to that rate (tc tbf both ways), one compare cell per strategy
launched across the nodes with the test bed's hostfile, `testbed down` (also on failure). The result per
strategy and link: wall-clock tokens/s and seconds per step, the extra seconds per step over the unshaped
link, the rank among strategies on that link, and `dsbench plan`'s ring-model communication seconds per step
at that rate (dsbench/plan/comm.py). Written as whatif.json, whatif.md, whatif.csv and whatif.png.
"""

from __future__ import annotations

import csv
import shlex
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from dsbench import strategies as registry
from dsbench.bench.compare import check_out, prepare_out, run_matrix
from dsbench.bench.matrix import Cell, cell_launch_args, expand
from dsbench.errors import UserError
from dsbench.io import atomic_write_json, atomic_write_text
from dsbench.run_record import RunSummary, read_summary

UNSHAPED = "unshaped"


@dataclass(frozen=True, slots=True)
class Row:
    link: str
    strategy: str
    status: str
    tokens_per_s: float | None
    step_s: float | None
    """Wall-clock seconds per measured step (window / steps)."""
    extra_step_s: float | None
    """Seconds per step above the same strategy on the unshaped link."""
    rank: int | None
    """1 = fastest strategy on this link."""
    predicted_comm_s: float | None
    """The planner's communication seconds per step at this link's rate (None for the unshaped link)."""


def check_links(links: list[str]) -> list[str]:
    """Links in order, the unshaped baseline first; each a tc rate or ``unshaped``."""
    from dsbench.testbed.layout import rate_bits

    rates: dict[int | None, str] = {}
    for link in links:
        rate = None if link == UNSHAPED else rate_bits(link, "--links")  # a one-line error for a bad rate
        if rate in rates:  # 1gbit and 1000mbit: the same runs twice
            raise UserError(f"--links names one rate twice ({rates[rate]} and {link}): name it once")
        rates[rate] = link
    return [UNSHAPED, *[link for link in links if link != UNSHAPED]]


def predicted_comm_s(strategy: str, model: str, world: int, micro: int, seq: int, link: str) -> float | None:
    """Communication seconds per optimizer step by the planner's ring model (fp32 params and grads, no latency:
    the test bed's links add none)."""
    from dsbench.model_config import resolve_model
    from dsbench.plan.comm import data_parallel_comm, pipeline_comm
    from dsbench.plan.hardware import Link
    from dsbench.testbed.layout import rate_bits

    if link == UNSHAPED:
        return None
    shape = resolve_model(model)
    wire = Link(link, rate_bits(link) / 8 / 1e9, 0.0, "test bed link")
    how = registry.get(strategy)
    if how.model_parallel > 1:  # pipe2: activations between the stages, one data-parallel replica
        parts = pipeline_comm(seq, micro, shape.hidden, how.model_parallel, wire, 4, how.model_parallel)
    elif how.dp_shard:  # HSDP: a node's shard group talks on the node; the replicas all-reduce their fp32 shards
        parts = data_parallel_comm("ddp", shape.num_params() / how.dp_shard, world // how.dp_shard, wire, 4, 4)
    else:  # the planner's sharding: FSDP's traffic is ZeRO-3's
        sharding = str(how.planner_fields["strategy"])
        parts = data_parallel_comm("zero3" if sharding == "fsdp" else sharding, shape.num_params(), world, wire, 4, 4)
    return sum(part.seconds for part in parts)


def rows_from(results: dict[str, dict[str, tuple[str, RunSummary | None]]], model: str, world: int,
              micro: int, seq: int) -> list[Row]:
    """``results``: link -> strategy -> (status, summary.json or None) -> table rows (pure)."""
    def step_s(summary: RunSummary | None) -> float | None:
        return summary.throughput.step_s if summary and summary.throughput else None

    base = {s: step_s(summary) for s, (_, summary) in results.get(UNSHAPED, {}).items()}
    rows = []
    for link, by_strategy in results.items():
        speeds = {s: summary.throughput.tokens_per_s if summary and summary.throughput else None
                  for s, (_, summary) in by_strategy.items()}
        order = sorted((s for s, v in speeds.items() if v), key=lambda s: -speeds[s])
        for strategy, (status, summary) in by_strategy.items():
            step, ref = step_s(summary), base.get(strategy)
            rows.append(Row(link=link, strategy=strategy, status=status, tokens_per_s=speeds[strategy],
                            step_s=step, extra_step_s=None if step is None or ref is None or link == UNSHAPED
                            else step - ref, rank=order.index(strategy) + 1 if strategy in order else None,
                            predicted_comm_s=predicted_comm_s(strategy, model, world, micro, seq, link)))
    return rows


def markdown(rows: list[Row]) -> str:
    def fmt(value: float | None, spec: str) -> str:
        return "-" if value is None else format(value, spec)

    lines = ["| link | strategy | tokens/s | s/step | extra s/step vs unshaped | planner comm s/step | rank |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {r.link} | {r.strategy} | {fmt(r.tokens_per_s, ',.0f')} | {fmt(r.step_s, '.3f')} | "
              f"{fmt(r.extra_step_s, '.3f')} | {fmt(r.predicted_comm_s, '.3f')} | {r.rank or r.status} |"
              for r in rows]
    return "\n".join(lines) + "\n"


def write(rows: list[Row], out: Path) -> dict[str, Path]:
    """whatif.json, whatif.md and whatif.csv (the plot is the report's: dsbench.report.plots.by_link)."""
    files = {"json": out / "whatif.json", "markdown": out / "whatif.md", "csv": out / "whatif.csv"}
    atomic_write_json(files["json"], {"rows": [asdict(r) for r in rows]})
    atomic_write_text(files["markdown"], markdown(rows))
    with open(files["csv"], "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(Row.__dataclass_fields__))
        writer.writeheader()
        writer.writerows(asdict(r) for r in rows)
    return files


def whatif_main(links: list[str], strategies: list[str], nodes: int, slots: int, model: str, micro: int,
                steps: int, warmup: int, seq_len: int, out: Path, timeout: float, reporter: Any) -> list[Row]:
    """Bring a shaped test bed up per link, run the strategies across it, take it down; then the table."""
    from dsbench.testbed.layout import Testbed
    from dsbench.testbed.manage import down, testbed_dir, up

    links, cells, matrix = _checked(links, strategies, nodes, slots, model, micro, steps, warmup, seq_len)
    prepare_out(out, matrix, resume=False)
    results: dict[str, dict[str, tuple[str, dict[str, Any] | None]]] = {}
    for link in links:
        bed = up(Testbed(nodes=nodes, slots=slots, bandwidth=None if link == UNSHAPED else link,
                         root=testbed_dir()))
        try:
            across = [replace(cell, hostfile=str(bed.hostfile)) for cell in cells]
            done = run_matrix(across, out / link, resume=False, retry_failed=False, timeout=timeout, nvme_path=None,
                              reporter=reporter)
        finally:
            down(quiet=True)
        results[link] = {r.cell.strategy: (r.status, _summary(r.folder)) for r in done}
    return rows_from(results, model, nodes * slots, micro, seq_len)


def _checked(links: list[str], strategies: list[str], nodes: int, slots: int, model: str, micro: int, steps: int,
             warmup: int, seq_len: int) -> tuple[list[str], list[Cell], dict[str, Any]]:
    """Every check the inputs allow, before a test bed goes up: the links, the test bed's layout, the cells; with
    the matrix that ``OUT/matrix.json`` records."""
    from dsbench.testbed.layout import Testbed
    from dsbench.testbed.manage import testbed_dir

    links = check_links(links)
    Testbed(nodes=nodes, slots=slots, root=testbed_dir())  # --nodes/--slots checked before anything is written
    cells = whatif_cells(strategies, nodes * slots, model, micro, steps, warmup, seq_len)
    return links, cells, {"links": links, "strategies": strategies, "nodes": nodes, "slots": slots, "model": model,
                          "micro_batch": micro, "steps": steps, "warmup": warmup, "seq_len": seq_len}


def dry_run_lines(links: list[str], strategies: list[str], nodes: int, slots: int, model: str, micro: int,
                  steps: int, warmup: int, seq_len: int, out: Path) -> list[str]:
    """``whatif --dry-run``: the checks a run makes before its first test bed goes up, its --out included, then per
    link the test bed it would bring up and each cell's launch; nothing written, no test bed brought up."""
    from dsbench.testbed.layout import Testbed
    from dsbench.testbed.manage import testbed_dir

    links, cells, matrix = _checked(links, strategies, nodes, slots, model, micro, steps, warmup, seq_len)
    check_out(out, matrix, resume=False)
    hostfile = str(Testbed(nodes=nodes, slots=slots, root=testbed_dir()).hostfile)
    lines = [f"{len(links)} link{'s' * (len(links) != 1)} x {len(cells)} cell{'s' * (len(cells) != 1)}, one test "
             f"bed of {nodes} nodes x {slots} slot{'s' * (slots != 1)} at a time, into {out} (--dry-run: nothing "
             "runs, no test bed goes up)"]
    for link in links:
        lines.append(f"{link}: the test bed up " + ("unshaped (the bare bridge)" if link == UNSHAPED else
                                                    f"with each node's link shaped to {link} (tc)"))
        for cell in cells:
            args = cell_launch_args(replace(cell, hostfile=hostfile), out / link / "cells" / cell.id)
            lines.append("  " + shlex.join(["dsbench", "launch", *args]))
    return lines


def whatif_cells(strategies: list[str], world: int, model: str, micro: int, steps: int, warmup: int,
                 seq_len: int) -> list[Cell]:
    """One cell per strategy on ``world`` ranks, as compare expands them (:func:`dsbench.bench.matrix.expand`: its
    checks of the matrix and of the model's layers against each layout, and the fused optimizer wherever it
    applies); the test bed's hostfile is set per link. ``single`` and NVMe offload are refused: a what-if runs
    across the nodes, whose namespaces share one disk."""
    unknown = [s for s in strategies if not registry.known(s) or s == "single" or "nvme" in registry.get(s).offload]
    if unknown:
        raise UserError(f"--strategies {unknown[0]!r}: choose among {', '.join(registry.WHATIF_DEFAULT)} and the other "
                        "compare strategies that run on several ranks")
    # expand checks the model as compare does: it resolves, has positions for seq_len, and splits as each layout asks
    return expand(strategies, [world], [micro], [model], steps=steps, warmup=warmup, seq_len=seq_len,
                  fused_optimizer="auto", ranks_from=f"--nodes x --slots ({world} ranks)")


def _summary(folder: Path) -> RunSummary | None:
    try:
        return read_summary(folder)
    except UserError:  # a cell that failed before writing a whole one
        return None
