"""The planner's prediction beside each measured compare cell: tokens/s, MFU and peak memory per rank.

Reads run folders (``dsbench compare`` output, or the stored ones in tests/data/runs), plans the same model,
micro-batch, sequence, precision and ranks with ``dsbench plan``'s estimator, and prints a Markdown table
with the signed error of each prediction ((predicted - measured) / measured). Measured throughput is the
wall-clock figure; measured peak memory is what the run recorded (torch.cuda.max_memory_allocated on GPU).

    python scripts/predicted_vs_measured.py tests/data/runs/gpu-h100/compare-gpt2   # the GPU kind of the run
    python scripts/predicted_vs_measured.py runs/compare-x --profile cpu2.json      # a measured machine
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dsbench.plan.profile import Profile
from dsbench.plan.verify import measured_step_s, predict_cell
from dsbench.rows import Row


def predict(row: Row, profile: Profile | None = None) -> dict | None:
    e = predict_cell(row, profile)
    if e is None:
        return None
    return {"tokens_per_s": e.tokens_per_s, "mfu": e.mfu, "peak_mib": e.device_total / 2**20, "step_s": e.step_s,
            "dominant": e.dominant}


def error(predicted: float, measured: float | None) -> str:
    return "-" if not measured else f"{(predicted - measured) / measured:+.0%}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("roots", nargs="+", type=Path, help="run folders (compare outputs)")
    p.add_argument("--profile", help="a machine profile from `dsbench calibrate` (measured rates and links)")
    args = p.parse_args()
    from dsbench.plan.machine_profile import read_profile
    from dsbench.report.collect import collect

    profile = read_profile(args.profile) if args.profile else None

    print("| model | strategy | step ms measured (wall) | predicted | error | tokens/s measured | predicted | "
          "MFU measured | predicted | peak MiB measured | predicted | error | predicted dominant term |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for row in collect(args.roots):
        guess = predict(row, profile) if row.status == "ok" else None
        if guess is None:
            continue
        step = measured_step_s(row)
        print(f"| {row.model} | {row.strategy} | {step * 1e3:,.1f} | {guess['step_s'] * 1e3:,.1f} | "
              f"{error(guess['step_s'], step)} | {row.tokens_per_s:,.0f} | {guess['tokens_per_s']:,.0f} | "
              f"{row.mfu:.1%} | {guess['mfu']:.1%} | {row.peak_memory_mib:,.0f} | {guess['peak_mib']:,.0f} | "
              f"{error(guess['peak_mib'], row.peak_memory_mib)} | {guess['dominant']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
