"""The CPU time model out of sample, as anyone can rerun it: calibrate first, then compare, then predict.

For each model: ``dsbench calibrate --num-gpus 2 --model M [--check]`` (the profile), then a fresh
``dsbench compare`` of the strategies (2 repeats, compare's default 20 steps with 5 warm-up), then every cell
predicted from the profile as ``dsbench report --profile`` does (plan.verify.predicted_figures). The calibration is
taken before the compare, so nothing in the profile saw the cells it predicts. Printed: the per-cell table (step
time by the wall clock, predicted, signed error; with a checked profile also the prediction before the check's
per-family scale, and which cells chose that scale) and per model the median and worst absolute error and the
Spearman correlation of step times. A dated row per model is added to the table under "Out-of-sample runs" in
docs/planner.md.

    python scripts/bench_time_model.py                        # the three models, --check on (about 45 min)
    python scripts/bench_time_model.py --models gpt2-mini --out runs/tm-1
    python scripts/bench_time_model.py --models llama-tiny --check-repeats 3   # each check cell launched 3 times
    python scripts/bench_time_model.py --models gpt2-mini --calibrate-repeats 9  # calibrate --repeats 9
    python scripts/bench_time_model.py --from runs/tm-1       # the tables again from a finished run, nothing run
    python scripts/bench_time_model.py --agree A.json B.json --cells runs/tm-1/compare-gpt2-mini   # two calibrations
    python scripts/bench_time_model.py --agree A.json B.json --cells runs/tm-2/compare-gpt2-mini \
        --earlier-cells runs/tm-1/compare-gpt2-mini   # and the two compares' own agreement beside
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from dsbench.errors import DsbenchError
from dsbench.plan.machine_profile import read_profile
from dsbench.plan.profile import Profile
from dsbench.plan.rank_correlation import spearman
from dsbench.plan.verify import predicted_figures
from dsbench.report.collect import collect

ROOT = Path(__file__).resolve().parents[1]
BASE = ("ddp", "fsdp", "zero1", "zero2", "zero3", "zero2_offload", "torch_pipe2", "pipe2")
STRATEGIES = {"gpt2-tiny": BASE, "gpt2-mini": (*BASE, "torch_pipe2_interleaved2", "torch_pipe2_zb2"),
              "llama-tiny": (*BASE, "torch_tp2", "zero1_tp2", "torch_tp2_sp", "torch_tp2_lp", "ulysses2")}
"""Issue 27's cells: the data-parallel strategies and both pipelines; llama-tiny also both tensor-parallel ones;
gpt2-mini (4 blocks: 2 stages x 2 chunks) also interleaved 1F1B and, from 2026-11-26 23:20 when the planner
priced it, its zero-bubble form (issue 28);
llama-tiny also torch_tp's sequence parallelism and vocabulary-parallel loss and DeepSpeed Ulysses (issue 28, from
2026-11-26 17:00, when the CPU planner priced the first two and calibrate --check gained Ulysses' cell)."""
DOC_HEADING = "### Out-of-sample runs (scripts/bench_time_model.py)"


def dsbench(*args: str) -> None:
    print("$ dsbench " + " ".join(args), flush=True)
    done = subprocess.run([sys.executable, "-m", "dsbench", *args], cwd=ROOT)
    if done.returncode != 0:
        sys.exit(f"dsbench {args[0]} failed with exit code {done.returncode}")


def measure(model: str, out: Path, check: bool, repeats: int, check_repeats: int = 1,
            calibrate_repeats: int | None = None) -> None:
    """Calibrate, then compare: the profile is taken before the cells it predicts."""
    checking = ["--check", *(["--check-repeats", str(check_repeats)] if check_repeats > 1 else [])] if check else []
    sampling = ["--repeats", str(calibrate_repeats)] if calibrate_repeats else []  # calibrate's default otherwise
    dsbench("calibrate", "--num-gpus", "2", "--model", model, "-o", str(out / f"profile-{model}.json"),
            "--run-dir", str(out / f"calibrate-{model}"), *sampling, *checking)
    dsbench("compare", "--strategies", ",".join(STRATEGIES.get(model, BASE)), "--models", model, "--repeats",
            str(repeats), "--out", str(out / f"compare-{model}"), "--quiet", "--no-report")


def cells(model: str, out: Path) -> list[dict[str, Any]]:
    """Each ok compare row with the profile's prediction, and the prediction before the check's scale."""
    path = out / f"profile-{model}.json"
    data = json.loads(path.read_text())
    unscaled = {key: value for key, value in data.items() if key != "check"}
    checked = {row["strategy"] for row in (data.get("check") or {}).get("cells", [])}
    rows = []
    for row in collect([out / f"compare-{model}" / "cells"]):
        figures = predicted_figures(row, Profile(str(path), data))
        if not figures:
            continue
        before = predicted_figures(row, Profile(str(path), unscaled))
        rows.append({"strategy": row.strategy, "measured_ms": figures["wall_step_ms"],
                     "predicted_ms": figures["predicted_step_ms"], "error": figures["step_error"],
                     "unscaled_ms": before["predicted_step_ms"], "unscaled_error": before["step_error"],
                     "chose_scale": row.base_strategy in checked,
                     # inside the range the profile's timing spreads allow (dsbench/plan/interval.py); None without
                     "in_range": (figures["predicted_low_ms"] <= figures["wall_step_ms"] <= figures["predicted_high_ms"]
                                  if "predicted_low_ms" in figures else None)})
    return rows


def stats(rows: list[dict[str, Any]], key: str = "error") -> dict[str, Any]:
    errors = [abs(row[key]) for row in rows]
    worst = max(rows, key=lambda row: abs(row[key]))
    predicted = "predicted_ms" if key == "error" else "unscaled_ms"
    rho = spearman([row["measured_ms"] for row in rows], [row[predicted] for row in rows])
    return {"median": statistics.median(errors), "worst": abs(worst[key]), "worst_cell": worst["strategy"],
            "spearman": rho}


def table(model: str, rows: list[dict[str, Any]]) -> str:
    lines = [f"#### {model}", "", "| strategy | measured ms (wall) | predicted ms | error | before the check's scale "
             "| error | chose the scale | in the predicted range |", "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['strategy']} | {row['measured_ms']:.1f} | {row['predicted_ms']:.1f} | "
                     f"{row['error']:+.1%} | {row['unscaled_ms']:.1f} | {row['unscaled_error']:+.1%} | "
                     f"{'yes' if row['chose_scale'] else ''} | {_yes_no(row['in_range'])} |")
    return "\n".join(lines)


def _yes_no(flag: bool | None) -> str:
    return "-" if flag is None else "yes" if flag else "no"


def in_range(rows: list[dict[str, Any]]) -> str:
    """How many cells fell inside their predicted range ("-" from a profile without spreads)."""
    known = [row["in_range"] for row in rows if row["in_range"] is not None]
    return f"{sum(known)} of {len(known)}" if known else "-"


def summary(model: str, rows: list[dict[str, Any]], when: str) -> str:
    """One dated row for docs/planner.md: the figures with the check's scale, then without it."""
    scaled, plain = stats(rows), stats(rows, "unscaled_error")
    held = [row for row in rows if not row["chose_scale"]]
    held_part = (f"{stats(held)['median']:.1%} / {stats(held)['worst']:.1%}" if held else "-")
    rho = f"{scaled['spearman']:.2f}" if scaled["spearman"] is not None else "-"
    rho_plain = f"{plain['spearman']:.2f}" if plain["spearman"] is not None else "-"
    return (f"| {when} | {model} | {len(rows)} | {scaled['median']:.1%} | {scaled['worst']:.1%} "
            f"({scaled['worst_cell']}) | {rho} | {held_part} | {plain['median']:.1%} | {plain['worst']:.1%} | "
            f"{rho_plain} | {in_range(rows)} |")


def agreement(first: Path, second: Path, folder: Path, earlier: Path | None = None) -> str:
    """Two calibrations' predictions of the same cells (a compare's rows say which), side by side: issue 27's
    stability goal is every strategy within 5%. With ``earlier`` (the compare that followed the first calibration),
    also what the machine itself did: the later compare's step time over the earlier's, cell by cell, the
    agreement two measurements an hour apart reach."""
    try:  # each checked field by field, as plan --profile reads it: a bad file is one line
        profiles = [read_profile(str(path)) for path in (first, second)]
    except DsbenchError as error:
        sys.exit(f"--agree: {error}")
    names = [f"{path.parent.name}/{path.name}" for path in (first, second)]
    # the earlier compare's measured steps, as the first calibration's prediction of it reports them (a cell it
    # cannot predict, a failed one or one without its run header, has none)
    before = {row.base_strategy: figures["wall_step_ms"] for row in (collect([earlier]) if earlier else [])
              if (figures := predicted_figures(row, profiles[0]))}
    lines = [f"| strategy | {names[0]} ms | {names[1]} ms | ratio |" + (" measured ratio |" if earlier else ""),
             "|---|---|---|---|" + ("---|" if earlier else "")]
    ratios, measured = [], []
    for row in collect([folder]):
        first_figures, second_figures = (predicted_figures(row, profile) for profile in profiles)
        a, b = first_figures.get("predicted_step_ms"), second_figures.get("predicted_step_ms")
        if a and b:
            ratios.append(b / a)
            line = f"| {row.strategy} | {a:.1f} | {b:.1f} | {b / a:.3f} |"
            if row.base_strategy in before:
                measured.append(second_figures["wall_step_ms"] / before[row.base_strategy])
                line += f" {measured[-1]:.3f} |"
            elif earlier:
                line += " - |"
            lines.append(line)
    lines += ["", f"predictions: {_spread(ratios)} (goal: every strategy within 5%)"]
    if earlier:
        lines.append(f"the compares themselves: {_spread(measured)}")
    return "\n".join(lines)


def _spread(ratios: list[float]) -> str:
    """How far a list of ratios is from 1: the largest difference, the share within 5% and the median."""
    if not ratios:
        return "no cell in common"
    worst = max(ratios, key=lambda ratio: abs(ratio - 1))
    within = sum(abs(ratio - 1) <= 0.05 for ratio in ratios)
    return (f"largest difference {worst - 1:+.1%}, {within} of {len(ratios)} within 5%, median "
            f"{statistics.median(abs(ratio - 1) for ratio in ratios):.1%}")


def record(doc: Path, lines: list[str]) -> None:
    """Insert the rows at the end of the table under the doc's heading (docs/planner.md has it)."""
    text = doc.read_text().split("\n")
    if DOC_HEADING not in text:
        sys.exit(f"{doc}: no line {DOC_HEADING!r} to put the rows under (--no-doc prints only)")
    at = text.index(DOC_HEADING) + 1
    while at < len(text) and not text[at].startswith("|"):
        at += 1  # the table's head
    while at < len(text) and text[at].startswith("|"):
        at += 1  # past its last row
    doc.write_text("\n".join([*text[:at], *lines, *text[at:]]))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="gpt2-tiny,gpt2-mini,llama-tiny", help="comma list")
    p.add_argument("--out", type=Path, help="results folder [runs/time-model-TIME]")
    p.add_argument("--from", dest="done", type=Path, help="a finished run's folder: tables only, nothing run")
    p.add_argument("--no-check", action="store_true", help="calibrate without --check")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--check-repeats", type=int, default=1, help="calibrate --check-repeats (launches per check cell)")
    p.add_argument("--calibrate-repeats", type=int, help="calibrate --repeats (timed samples per figure) [its default]")
    p.add_argument("--doc", type=Path, default=ROOT / "docs" / "planner.md", help="where the dated rows go")
    p.add_argument("--no-doc", action="store_true", help="print only")
    p.add_argument("--agree", nargs=2, type=Path, metavar="PROFILE", help="two calibrations' predictions compared")
    p.add_argument("--cells", type=Path, help="with --agree: the compare folder whose cells both predict")
    p.add_argument("--earlier-cells", type=Path,
                   help="with --agree: the compare after the first calibration (the machine's own agreement beside)")
    args = p.parse_args()
    if args.earlier_cells and not args.agree:
        sys.exit("--earlier-cells goes with --agree (the compare after the first of its two calibrations)")
    if args.agree:
        if not args.cells:
            sys.exit("--agree needs --cells COMPARE_FOLDER (the cells both profiles predict)")
        for flag, folder in (("--cells", args.cells), ("--earlier-cells", args.earlier_cells)):
            if folder and not any(folder.rglob("summary.json")):
                sys.exit(f"{flag} {folder}: no finished cell in it (a dsbench compare --out folder)")
        print(agreement(*args.agree, args.cells, args.earlier_cells))
        return 0
    out = args.done or args.out or Path(f"runs/time-model-{time.strftime('%Y%m%d-%H%M%S')}")
    models = args.models.split(",")
    if args.done:
        missing = [name for model in models for name in (f"profile-{model}.json", f"compare-{model}")
                   if not (args.done / name).exists()]
        if missing:
            sys.exit(f"{args.done}: no {missing[0]} (a folder this script wrote, with the models in --models)")
    for model in models:
        if not args.done:
            measure(model, out.resolve(), check=not args.no_check, repeats=args.repeats,
                    check_repeats=args.check_repeats, calibrate_repeats=args.calibrate_repeats)
    lines = []
    for model in models:
        rows = cells(model, out)
        print(table(model, rows) + "\n")
        # when the compare started: its matrix.json is the first file it writes
        started = (out / f"compare-{model}" / "matrix.json").stat().st_mtime
        lines.append(summary(model, rows, time.strftime("%Y-%m-%d %H:%M", time.localtime(started))))
    print("\n".join(lines))
    if not args.no_doc:
        record(args.doc, lines)
        print(f"appended to {args.doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
