"""Where the run-to-run spread of a step time comes from: the steps, the launch, or the hour.

Reads stored runs of issue 27's protocol (folders holding ``compare/cells/<cell>-r<K>/metrics.jsonl``, as
``tests/data/runs/cpu-calibrated/oos-*`` do; each cell launched twice) and splits the spread of a cell's step time,
in log terms (relative), into three parts:

- **steps**: a launch's mean over n measured steps varies by sd(step) / sqrt(n) if the steps were independent;
- **launch**: two launches of the same cell minutes apart differ by more than that; the excess is an offset each
  launch draws (which cores, what memory; sd_launch^2 = sd_observed^2 - sd_steps^2);
- **drift**: the same cell's mean of k launches moves from one run to the next (an hour apart) by more than its
  launches explain (sd_drift^2 = sd_run^2 - sd_observed^2 / k).

Then what that means for issue 27's stability goal (two calibrations an hour apart predict every strategy within
5%): a check-scaled family is predicted from its check cell's median of ``--check-repeats`` launches (k), so two
calibrations' predictions of it differ by about sqrt(2 x (c_k x sd_launch_20^2 / k + sd_drift^2)), where sd_launch_20
is one launch's sd at a check's 20 steps and c_k the median's variance over the mean's (1.35 at k = 3), and
the chance that F families all agree within 5% is P(|N(0, sd)| <= 5%)^F.

    python scripts/noise_budget.py tests/data/runs/cpu-calibrated/oos-20261129-1{5,6,7,8,9}*-gpt2-mini
    python scripts/noise_budget.py --families 10 RUN [RUN ...]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from dsbench.plan.selfcheck import CHECK_STEPS, CHECK_WARMUP

CHECK_MEASURED_STEPS = CHECK_STEPS - CHECK_WARMUP
"""Steps a check launch times."""


def launch_steps(metrics: Path) -> list[float]:
    """A launch's measured (after warm-up) step times, in seconds, from its metrics.jsonl: each step's timed region
    (the wall-clock window over the same steps agrees within 2%, docs/benchmarks.md). A line cut short by an
    interrupted run, or a step time that is not a positive number, is left out; an unreadable file gives none."""
    try:
        lines = metrics.read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return []
    steps = []
    for line in lines:
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(record, dict) or record.get("type") != "step" or record.get("warmup"):
            continue
        seconds = record.get("step_time_s")
        if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) and 0 < seconds < math.inf:
            steps.append(float(seconds))
    return steps


def cell_launches(run: Path) -> dict[str, list[list[float]]]:
    """cell name (its folder without ``-r<K>``) -> each launch's measured step times, for one stored run."""
    cells: dict[str, list[list[float]]] = defaultdict(list)
    for metrics in sorted((run / "compare" / "cells").glob("*/metrics.jsonl")):
        steps = launch_steps(metrics)
        if len(steps) >= 2:
            cells[metrics.parent.name.rsplit("-r", 1)[0]].append(steps)
    return dict(cells)


def _rms(values: list[float]) -> float:
    return math.sqrt(statistics.fmean(value * value for value in values)) if values else float("nan")


def split(runs: list[dict[str, list[list[float]]]]) -> dict[str, dict[str, float]]:
    """Per cell seen twice in at least two runs: the relative sd of a launch's mean from its steps alone
    (``steps``), observed between two launches of one run (``observed``), the launch's own offset (``launch``), of a
    run's mean between runs (``run``) and the drift beyond the launches (``drift``), with ``n_steps``, ``k`` (launches
    a run) and ``runs``."""
    out = {}
    for cell in sorted({cell for run in runs for cell in run}):
        seen = [run[cell] for run in runs if len(run.get(cell, [])) == 2]
        if len(seen) < 2:
            continue
        steps = _rms([statistics.stdev(launch) / statistics.fmean(launch) / math.sqrt(len(launch))
                      for launches in seen for launch in launches])
        # sd of one launch's log-mean from a pair: |log(a / b)| / sqrt(2)
        observed = _rms([abs(math.log(statistics.fmean(a) / statistics.fmean(b))) / math.sqrt(2) for a, b in seen])
        means = [math.log(statistics.fmean([statistics.fmean(launch) for launch in launches])) for launches in seen]
        run = statistics.stdev(means)
        out[cell] = {"steps": steps, "observed": observed, "launch": math.sqrt(max(0.0, observed**2 - steps**2)),
                     "run": run, "drift": math.sqrt(max(0.0, run**2 - observed**2 / 2)),
                     "n_steps": statistics.fmean(len(launch) for launches in seen for launch in launches),
                     "k": 2, "runs": len(seen)}
    return out


def pooled(cells: dict[str, dict[str, float]]) -> dict[str, float]:
    """The cells' figures pooled: variances averaged over the cells, then the launch offset and the drift taken from
    the pooled variances (clipping each cell's at zero first would bias them up), with the mean number of steps."""
    var = {key: statistics.fmean(figures[key] ** 2 for figures in cells.values())
           for key in ("steps", "observed", "run")}
    return {**{key: math.sqrt(value) for key, value in var.items()},
            "launch": math.sqrt(max(0.0, var["observed"] - var["steps"])),
            "drift": math.sqrt(max(0.0, var["run"] - var["observed"] / 2)),
            "n_steps": statistics.fmean(figures["n_steps"] for figures in cells.values())}


def median_variance(k: int, points: int = 4001) -> float:
    """Var(median of k independent standard normals) / Var(their mean), for odd k: the order statistic's density
    k! / (m!)^2 Phi^m (1 - Phi)^m phi, m = (k - 1) / 2, integrated over [-8, 8] (the trapezoid rule). calibrate
    --check stores each check cell's median over its launches (dsbench.plan.selfcheck.check_record)."""
    if k < 1 or k % 2 == 0:
        raise ValueError(f"k must be odd and >= 1, got {k}")
    m = (k - 1) // 2
    norm = math.factorial(k) / math.factorial(m) ** 2
    step = 16 / (points - 1)
    total = 0.0
    for i in range(points):
        x = -8 + i * step
        cdf = 0.5 * (1 + math.erf(x / math.sqrt(2)))
        weight = 0.5 if i in (0, points - 1) else 1.0
        total += weight * x * x * norm * (cdf * (1 - cdf)) ** m * math.exp(-x * x / 2) / math.sqrt(2 * math.pi)
    return total * step * k


def agreement_sd(budget: dict[str, float], repeats: int, steps: int = CHECK_MEASURED_STEPS) -> float:
    """The relative sd of the ratio of two calibrations' check-scaled predictions of one family an hour apart: each
    check is the median of ``repeats`` (odd) launches of ``steps`` steps (its step noise rescaled from the stored
    runs' n_steps), and the machine drifts between them."""
    one_launch = budget["launch"] ** 2 + budget["steps"] ** 2 * budget["n_steps"] / steps
    return math.sqrt(2 * (median_variance(repeats) * one_launch / repeats + budget["drift"] ** 2))


def all_within(sd: float, families: int, goal: float = 0.05) -> float:
    """The chance that ``families`` independent normal ratios of relative sd ``sd`` all fall within ``goal``."""
    return math.erf(goal / (sd * math.sqrt(2))) ** families


def report(cells: dict[str, dict[str, float]], families: int) -> str:
    lines = ["| cell | runs | steps | sd from steps | sd between launches | launch offset | sd between runs | drift |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    rows = {**cells, "pooled": {**pooled(cells), "runs": float("nan")}}
    for name, f in rows.items():
        runs = "" if math.isnan(f["runs"]) else f"{f['runs']:.0f}"
        lines.append(f"| {name} | {runs} | {f['n_steps']:.0f} | {f['steps']:.1%} | {f['observed']:.1%} | "
                     f"{f['launch']:.1%} | {f['run']:.1%} | {f['drift']:.1%} |")
    budget = rows["pooled"]
    lines += ["", f"two calibrations' check-scaled predictions, {families} families, {CHECK_MEASURED_STEPS} steps a "
              "check launch:"]
    for repeats in (1, 3, 5, 9, 15, 1001):
        sd = agreement_sd(budget, repeats)
        lines.append(f"  --check-repeats {repeats:>4}: sd of the ratio {sd:.1%}, chance all within 5% "
                     f"{all_within(sd, families):.0%}")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", type=Path, help="stored protocol runs (each with compare/cells/)")
    p.add_argument("--families", type=int, default=10, help="checked families a calibration scales [10]")
    args = p.parse_args()
    if args.families < 1:
        p.error(f"--families must be 1 or more, got {args.families}")
    missing = [run for run in args.runs if not (run / "compare" / "cells").is_dir()]
    if missing:
        sys.exit(f"{missing[0]}: no compare/cells/ (a stored protocol run, as tests/data/runs/cpu-calibrated/oos-*)")
    cells = split([cell_launches(run) for run in args.runs])
    if not cells:
        sys.exit("no cell launched twice in at least two of the runs")
    print(report(cells, args.families))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
