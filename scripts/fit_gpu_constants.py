"""Fit the GPU time model's per-kind constants on the rows that choose them, and print the value to store.

    python scripts/fit_gpu_constants.py [RUNS.csv ...]   # RUNS.csv: your own runs (scripts/runs_to_oracle.py)

Three kinds of constant are fitted (dsbench/plan/gpu_profiles.py), each on the rows named here; every other row is
out of sample for it (`dsbench plan --replay`, docs/planner.md):
- h100-96g-500w's ``clock_fraction`` (GRAND_TETON_CLOCK), on torchtitan-h100-202412 rows 1 and 4 (Llama 3.1 8B,
  FSDP, bf16, eager, on 8 and 128 GPUs), so that their mean signed step-time error is zero;
- ``hf_hbm_fraction`` (HF_HBM), on the GPT-2 ZeRO-1 kernel profile of the lent H100: its non-GEMM kernel time over
  the model's bytes at full HBM bandwidth;
- ``zero_host_us`` (ZERO_HOST_US) per ZeRO stage, on dsbench's GPT-2 H100 runs of 2026-11-25 (dsbench-h100 rows
  10-12): the step time the model leaves over with no host term, per parameter tensor. It is a property of the
  host, so the script also fits it on each measuring session's GPT-2 rows (dsbench-*.csv) and prints that
  session's Llama rows predicted with it;
- ZeRO-Offload's ``offload_adam_params_per_s`` and ``offload_tensor_us`` (OFFLOAD_ADAM, OFFLOAD_TENSOR_US), on
  dsbench's two CPU-offload runs of 2026-11-23 (dsbench-h100 rows 16 and 17, GPT-2 and the 1.1B Llama, each against
  its ZeRO-2 run of that day, rows 3 and 7): the step the offload added, less the host link's time.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import script_args

from dsbench.plan import gpu_profiles
from dsbench.plan.gpu_fit import (
    by_session,
    fit_offload,
    fit_offload_rate,
    fit_zero_host_us,
    offload_pairs,
    predict_with_host,
)
from dsbench.plan.gpu_time import step_time
from dsbench.plan.oracle_csv import read_rows
from dsbench.plan.replay import predict_row, row_layouts

ROOT = Path(__file__).resolve().parents[1]
ORACLE = ROOT / "tests" / "data" / "oracles" / "torchtitan.csv"
CHOOSING = {("torchtitan-h100-202412", 1), ("torchtitan-h100-202412", 4)}
DSBENCH = ROOT / "tests" / "data" / "oracles" / "dsbench-h100.csv"
HOST_ROWS = (10, 11, 12)
"""dsbench-h100 rows (GPT-2 ZeRO-1, 2 and 3, 2026-11-25) that choose ``zero_host_us``."""
PROFILE = ROOT / "tests" / "data" / "runs" / "gpu-h100-20261125" / "profile" / "profile-gpt2-zero1.json"
NON_GEMM = ("elementwise", "loss", "copy", "reduce", "norm", "optimizer")
"""scripts/profile_gpu_step.py's kernel kinds that the model prices as memory-bound."""


def mean_error(clock: float, rows: list) -> float:
    profile = dataclasses.replace(gpu_profiles.KINDS["h100-96g-500w"], clock_fraction=clock)
    errors = [predict_row(row, profile=profile).step_error for row in rows]
    return sum(errors) / len(errors)


def main(files: list[Path]) -> int:
    rows = [row for row in read_rows([ORACLE]) if (row.source, row.row) in CHOOSING]
    low, high = 0.3, 1.0  # the error falls as the clock rises: bisect for zero
    for _ in range(40):
        mid = (low + high) / 2
        low, high = (mid, high) if mean_error(mid, rows) > 0 else (low, mid)
    print(f"h100-96g-500w clock_fraction = {(low + high) / 2:.3f} (chosen on {sorted(CHOOSING)})")
    h100 = gpu_profiles.KINDS["h100-sxm"]
    measured = sum(json.loads(PROFILE.read_text())["profiled"]["by_kind_s"].get(k, 0.0) for k in NON_GEMM)
    full = dataclasses.replace(h100, hf_hbm_fraction=1.0)
    layout = row_layouts(next(r for r in read_rows([DSBENCH]) if r.row == 10).values)[0]
    modelled = sum(step_time(layout, full).terms[k] for k in ("elementwise", "optimizer"))
    modelled += step_time(layout, full).terms["logits"] - step_time(layout, dataclasses.replace(
        full, hbm_tbs=1e9)).terms["logits"]  # the loss's passes: the logits term less its GEMMs
    print(f"h100-sxm hf_hbm_fraction = {modelled / measured:.3f} ({modelled * 1e3:.1f} ms of bytes at full "
          f"bandwidth, {measured * 1e3:.1f} ms measured in {PROFILE.name})")
    chosen = [row for row in read_rows([DSBENCH]) if row.row in HOST_ROWS]
    for stage, us in fit_zero_host_us(chosen, h100).items():
        print(f"zero_host_us[{stage}] = {us:.0f} (dsbench-h100 rows {list(HOST_ROWS)})")
    h100_rows = {row.row: row for row in read_rows([DSBENCH])}
    rate, per_tensor = fit_offload([(h100_rows[16], h100_rows[3]), (h100_rows[17], h100_rows[7])])
    print(f"offload_adam_params_per_s = {rate:.3g}, offload_tensor_us = {per_tensor:.0f} "
          "(dsbench-h100 rows 16/3, 17/7)")
    print("per host: fitted on its GPT-2 rows, checked on its Llama rows (the profile's constant is the 11-25 host's)")
    for name, rows in by_session(read_rows(files or sorted(DSBENCH.parent.glob("dsbench-*.csv")))).items():
        fit = fit_zero_host_us([r for r in rows if r.values["model"] == "gpt2"])
        checked = predict_with_host([r for r in rows if r.values["model"] != "gpt2"], fit)
        errors = ", ".join(f"{r.row.values['strategy']} {r.step_error:+.1%}" for r in checked)
        print(f"  {name}: {', '.join(f'{k}: {v:.0f}' for k, v in fit.items())} µs; Llama rows {errors}")
        pairs = offload_pairs(rows)
        if pairs:  # --cpu-adam-rate for this host, the per-tensor cost held at the shipped one
            rate = fit_offload_rate(pairs, gpu_profiles.OFFLOAD_TENSOR_US)
            print(f"    its CPU Adam rate (--cpu-adam-rate): {rate:.3g} parameters/s, from {len(pairs)} offload "
                  "run(s) against their ZeRO runs")
    return 0


if __name__ == "__main__":
    files = script_args.parse(__doc__, "ORACLE_CSV")
    sys.exit(script_args.run(lambda: main([Path(f) for f in files])))
