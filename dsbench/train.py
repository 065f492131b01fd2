"""``python -m dsbench.train``: the training worker every launcher starts on each rank.

Start it through dsbench (``dsbench launch``) or directly with the files dsbench renders:

    deepspeed --num_gpus 2 --module dsbench.train --deepspeed_config ds_configs/zero2.json --steps 20
    torchrun --nproc-per-node 2 -m dsbench.train --strategy fsdp --steps 20
    accelerate launch --config_file accelerate/deepspeed_zero2.yaml -m dsbench.train --steps 20

On a machine without GPUs set ``DS_ACCELERATOR=cpu`` (dsbench launch does): ranks use gloo.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback

from dsbench import __version__
from dsbench.errors import UserError
from dsbench.spec import DEFAULT_MICRO_BATCH


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m dsbench.train", description=__doc__.split("\n\n")[0])
    p.add_argument("--strategy", choices=["auto", "deepspeed", "ddp", "fsdp", "single"], default="auto",
                   help="auto: deepspeed when a DeepSpeed config is given (or by accelerate), else ddp/single")
    p.add_argument("--deepspeed_config", "--deepspeed-config", dest="deepspeed_config", help="DeepSpeed JSON config")
    p.add_argument("--local_rank", "--local-rank", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--model", default="gpt2-tiny", help="preset, local dir with config.json, or cached hub id")
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--dataset", help="local text/json/jsonl/parquet/csv file or folder (default: embedded corpus)")
    p.add_argument("--text-field", default="text")
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--micro-batch", type=int, default=DEFAULT_MICRO_BATCH,
                   help="per rank (a DeepSpeed config's value wins)")
    p.add_argument("--grad-accum", type=int, default=1, help="(a DeepSpeed config's value wins)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3, help="steps excluded from the summary")
    p.add_argument("--lr", type=float, default=3e-4, help="(a DeepSpeed config's value wins)")
    p.add_argument("--lr-warmup-steps", type=int, default=0)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16"],
                   help="native strategies, and 'auto' in a DeepSpeed config [accelerate's mixed_precision, else fp32]")
    p.add_argument("--activation-checkpointing", action="store_true")
    p.add_argument("--fsdp-reshard", action=argparse.BooleanOptionalAction, default=True,
                   help="FSDP2 reshard_after_forward")
    p.add_argument("--fsdp-cpu-offload", action="store_true")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--peak-tflops", type=float, help="per-rank peak for MFU (default: detected)")
    p.add_argument("--out", help="run directory for metrics.jsonl and summary.json")
    p.add_argument("--gather-every", type=int, default=10,
                   help="steps between gathers of per-step metrics across ranks (each is one host-device sync)")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.add_argument("--version", action="version", version=f"dsbench {__version__}")
    args = p.parse_args(argv)
    for name in ("seq_len", "micro_batch", "grad_accum", "steps", "gather_every"):
        if getattr(args, name) < 1:
            raise UserError(f"--{name.replace('_', '-')} must be >= 1")
    if not 0 <= args.warmup < args.steps:
        raise UserError(f"--warmup must be in 0..{args.steps - 1} (steps excluded from the summary)")
    return args


def main(argv: list[str] | None = None) -> int:
    rank = int(os.environ.get("RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")))
    try:
        from dsbench.worker.run import run

        code = run(parse_args(argv))
    except SystemExit as exc:  # argparse: --help/--version exit 0, a usage error exits 2 (message printed)
        code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 2
    except UserError as exc:
        print(f"[rank {rank}] dsbench.train: error: {exc}", file=sys.stderr, flush=True)
        code = 2
    except BaseException as exc:  # a failing rank must end the job, not hang the others
        traceback.print_exc()
        print(f"[rank {rank}] dsbench.train: error: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    # Leave without interpreter teardown: on failure it would block on ranks still in a collective, and on
    # success native threads (gloo, DeepSpeed ops) can abort in static destructors ("terminate called
    # without an active exception"), turning a finished run into a failed launch. Results are on disk.
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
