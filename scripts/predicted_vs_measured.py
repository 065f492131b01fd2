"""The planner's prediction beside each measured compare cell: tokens/s, MFU and peak memory per rank.

Reads run folders (``dsbench compare`` output, or the stored ones in tests/data/runs), plans the same model,
micro-batch, sequence, precision and ranks with ``dsbench plan``'s estimator, and prints a Markdown table
with the signed error of each prediction ((predicted - measured) / measured). Measured throughput is the
wall-clock figure; measured peak memory is what the run recorded (torch.cuda.max_memory_allocated on GPU).

    python scripts/predicted_vs_measured.py tests/data/runs/gpu-h100/compare-gpt2 --gpu h100
    python scripts/predicted_vs_measured.py runs/compare-x --gpu-mem 12 --profile cpu2.json   # measured machine
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dsbench.plan.estimate import Candidate, estimate

# compare strategy -> the planner's candidate (world size 1: single and DDP hold the same states)
CANDIDATES = {"single": Candidate(strategy="ddp"), "ddp": Candidate(strategy="ddp"), "fsdp": Candidate(strategy="fsdp"),
              "zero0": Candidate(strategy="ddp"), "zero1": Candidate(strategy="zero1"),
              "zero2": Candidate(strategy="zero2"), "zero3": Candidate(strategy="zero3"),
              "zero2_offload": Candidate(strategy="zero2", offload="cpu"),
              "zero3_offload": Candidate(strategy="zero3", offload="cpu", offload_param="cpu")}


def predict(row: dict, gpu: str, efficiency: float, profile: str | None = None) -> dict:
    from dsbench.plan.api import PlanRequest, build

    header = row["runs"][0]["header"]
    request = PlanRequest(model=row["model"], params=None, config=None, gpus=row["world_size"], nodes=1,
                          gpus_per_node=None, gpu=gpu, gpu_mem=None, peak_tflops=header.get("peak_tflops"),
                          efficiency=efficiency, interconnect="infiniband", intra=None, bandwidth=None, latency=None,
                          seq_len=header["seq_len"], micro_batch=row["micro_batch"], grad_accum=header["grad_accum"],
                          precision=header["precision"], accounting=None, host_mem=1000, profile=profile)
    workload, cluster, _ = build(request)
    e = estimate(CANDIDATES[row["strategy"]], workload, cluster)
    return {"tokens_per_s": e.tokens_per_s, "mfu": e.mfu, "peak_mib": e.device_total / 2**20,
            "dominant": e.dominant}


def error(predicted: float, measured: float | None) -> str:
    return "-" if not measured else f"{(predicted - measured) / measured:+.0%}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("roots", nargs="+", type=Path, help="run folders (compare outputs)")
    p.add_argument("--gpu", default="h100", help="the planner's GPU kind (peak and memory)")
    p.add_argument("--efficiency", type=float, default=0.5, help="the planner's achievable fraction of peak")
    p.add_argument("--profile", help="a machine profile from `dsbench calibrate` (measured rates and links)")
    args = p.parse_args()
    from dsbench.report.collect import collect

    print("| model | strategy | tokens/s measured (wall) | predicted | error | MFU measured | predicted | "
          "peak MiB measured | predicted | error | predicted dominant term |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for row in collect(args.roots):
        if row["status"] != "ok" or row["strategy"] not in CANDIDATES:
            continue
        guess = predict(row, args.gpu, args.efficiency, args.profile)
        print(f"| {row['model']} | {row['strategy']} | {row['tokens_per_s']:,.0f} | {guess['tokens_per_s']:,.0f} | "
              f"{error(guess['tokens_per_s'], row['tokens_per_s'])} | {row['mfu']:.1%} | {guess['mfu']:.1%} | "
              f"{row['peak_memory_mib']:,.0f} | {guess['peak_mib']:,.0f} | "
              f"{error(guess['peak_mib'], row['peak_memory_mib'])} | {guess['dominant']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
