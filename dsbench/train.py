"""``python -m dsbench.train``: the training worker every launcher starts on each rank.

Start it through dsbench (``dsbench launch``) or directly with the files dsbench renders:

    deepspeed --num_gpus 2 --module dsbench.train --deepspeed_config ds_configs/zero2.json --steps 20
    torchrun --nproc-per-node 2 -m dsbench.train --strategy fsdp --steps 20
    accelerate launch --config_file accelerate/deepspeed_zero2.yaml -m dsbench.train --steps 20
    torchrun --nproc-per-node 2 -m dsbench.train --run-json runs/launch-x/run.json    # what `dsbench launch` wrote

On a machine without GPUs set ``DS_ACCELERATOR=cpu`` (dsbench launch does): ranks use gloo.
"""

from __future__ import annotations

import os
import socket
import sys
import traceback

from dsbench.errors import UserError
from dsbench.trainspec import TrainSpec, from_argv


def parse_args(argv: list[str] | None = None) -> TrainSpec:
    """The run description from the worker's flags (``--run-json FILE`` and/or flags; see dsbench.trainspec)."""
    return from_argv(sys.argv[1:] if argv is None else argv)


def main(argv: list[str] | None = None) -> int:
    from dsbench.worker.dist import env_rank  # stdlib only: every launcher's name for the rank (SLURM, Open MPI)

    # the host is named so that a failure is traceable under launchers that do not prefix output with it (mpirun)
    where = f"[rank {env_rank()[0]} on {socket.gethostname()}]"
    try:
        from dsbench.worker.run import run

        code = run(parse_args(argv))
    except SystemExit as exc:  # argparse's --help/--version: printed, exit 0
        code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 2
    except UserError as exc:
        print(f"{where} dsbench.train: error: {exc}", file=sys.stderr, flush=True)
        code = 2
    except BaseException as exc:  # a failing rank must end the job, not hang the others
        traceback.print_exc()
        print(f"{where} dsbench.train: error: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    # Leave without interpreter teardown: on failure it would block on ranks still in a collective, and on
    # success native threads (gloo, DeepSpeed ops) can abort in static destructors ("terminate called
    # without an active exception"), turning a finished run into a failed launch. Results are on disk.
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
