"""Where the CPU time model misses: each strategy's step split into a part per micro-step and a part per step.

Every strategy runs at two or more gradient-accumulation counts (the same micro-batch, compare's 20 steps with 5
warm-up, ``--repeats`` launches each, the counts interleaved launch by launch), and its step time by the wall clock
is fitted as a line in the micro-steps (plan.pipeline_time.fit_runtime, least squares): the slope is what each
micro-step costs (forward, backward, the pipeline's passes), the intercept what the step pays once (the gradient
reduction, clipping, the optimizer, the loss's collectives). The profile's predictions of the same cells are split
the same way, so a miss shows up in the part that holds it. A pipeline cell's accumulation is per replica, as in
compare (2 stages x 1 = 2 micro-batches).

    python scripts/bench_accum_split.py --profile P.json --model gpt2-mini --strategies ddp,torch_pipe2,pipe2
    python scripts/bench_accum_split.py --profile P.json --from runs/accum-split-X   # the table again, nothing run
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import script_args

from dsbench.bench.compare import run_matrix
from dsbench.bench.matrix import Cell, fused_by_default
from dsbench.errors import UserError
from dsbench.plan.machine_profile import read_profile
from dsbench.plan.pipeline_time import fit_runtime
from dsbench.plan.verify import measured_step_s, predict_cell
from dsbench.report.collect import collect


class _Quiet:
    """run_matrix's progress reporter, silent: the script prints one line per launch itself."""

    def __getattr__(self, name: str):
        return lambda *args, **kwargs: None


def measure(out: Path, model: str, strategies: list[str], accums: list[int], repeats: int) -> None:
    """Each (repeat, accumulation) as its own matrix folder, so every cell keeps its accumulation."""
    for repeat in range(repeats):
        for accum in accums:
            cells = [Cell(strategy=name, world_size=2, micro_batch=2, model=model, steps=20, warmup=5, seq_len=128,
                          precision="fp32", grad_accum=accum, fused_optimizer=fused_by_default(name), repeat=repeat)
                     for name in strategies]
            print(f"repeat {repeat}, accumulation {accum}: {', '.join(strategies)}", flush=True)
            run_matrix(cells, out / f"ga{accum}", resume=True, retry_failed=False, timeout=900, nvme_path=None,
                       reporter=_Quiet())


def steps_by_accum(out: Path, profile_path: str) -> dict[str, dict[int, tuple[float, float]]]:
    """strategy -> accumulation -> (measured step s, predicted step s)."""
    profile = read_profile(profile_path)
    found: dict[str, dict[int, tuple[float, float]]] = {}
    for folder in sorted(out.glob("ga*"), key=lambda path: int(path.name[2:])):
        for row in collect([folder]):
            estimate = predict_cell(row, profile) if row.status == "ok" and row.tokens_per_s else None
            if estimate is not None:  # the row's tokens/s: the median over its launches (report.collect)
                found.setdefault(row.base_strategy, {})[int(folder.name[2:])] = (measured_step_s(row), estimate.step_s)
    return found


def split(by_accum: dict[int, tuple[float, float]]) -> dict[str, tuple[float, float]]:
    """``{"micro-step": (measured, predicted), "step": (measured, predicted)}`` seconds, from the line through the
    accumulation counts."""
    counts = sorted(by_accum)
    measured = fit_runtime(counts, [by_accum[c][0] for c in counts])
    predicted = fit_runtime(counts, [by_accum[c][1] for c in counts])
    return {"micro-step": (measured[1], predicted[1]), "step": (measured[0], predicted[0])}


def table(found: dict[str, dict[int, tuple[float, float]]]) -> str:
    lines = ["| strategy | accumulations | per micro-step: measured | predicted | error | per step: measured | "
             "predicted | error |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for name, by_accum in found.items():
        if len(by_accum) < 2:
            continue
        parts = split(by_accum)
        cells = []
        for part in ("micro-step", "step"):
            measured, predicted = parts[part]
            error = f"{predicted / measured - 1:+.1%}" if measured > 0 else "-"
            cells += [f"{measured * 1e3:.1f} ms", f"{predicted * 1e3:.1f} ms", error]
        lines.append(f"| {name} | {', '.join(map(str, sorted(by_accum)))} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--profile", required=True, help="a dsbench calibrate profile (taken before the launches)")
    p.add_argument("--model", default="gpt2-mini")
    p.add_argument("--strategies", default="ddp,fsdp,zero2,torch_pipe2,pipe2", help="comma list")
    p.add_argument("--accums", default="1,4", help="comma list of accumulation counts per replica (two or more)")
    p.add_argument("--repeats", type=int, default=2, help="launches per cell")
    p.add_argument("--out", type=Path, help="results folder [runs/accum-split-TIME]")
    p.add_argument("--from", dest="done", type=Path, help="a finished run's folder: the table only, nothing run")
    args = p.parse_args()
    if not Path(args.profile).is_file():
        raise UserError(f"--profile not found: {args.profile}")
    accums = sorted({int(a) for a in args.accums.split(",") if a.strip().isdigit()})
    if len(accums) < 2 or accums[0] < 1 or len(accums) != len({a for a in args.accums.split(",") if a.strip()}):
        raise UserError(f"--accums needs two or more counts of 1 or more, got {args.accums!r}")
    out = args.done or args.out or Path("runs") / time.strftime("accum-split-%Y%m%d-%H%M%S")
    if args.done is None:
        measure(out, args.model, [s for s in args.strategies.split(",") if s], accums, args.repeats)
    elif not out.is_dir():
        raise UserError(f"--from not found: {out}")
    print(table(steps_by_accum(out, args.profile)))
    return 0


if __name__ == "__main__":
    sys.exit(script_args.run(main))
