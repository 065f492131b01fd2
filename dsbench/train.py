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

from dsbench.trainflags import from_argv, worker_run
from dsbench.trainspec import TrainSpec


def parse_args(argv: list[str] | None = None) -> TrainSpec:
    """The run description from the worker's flags (``--run-json FILE`` and/or flags; see dsbench.trainspec)."""
    return from_argv(sys.argv[1:] if argv is None else argv)


def main(argv: list[str] | None = None) -> int:
    from dsbench.worker.dist import env_rank  # stdlib only: every launcher's name for the rank (SLURM, Open MPI)

    # the host is named so that a failure is traceable under launchers that do not prefix output with it (mpirun)
    where = f"[rank {env_rank()[0]} on {socket.gethostname()}]"
    from dsbench.worker import stop
    from dsbench.worker.guard import leave, run_rank

    stop.install(where)
    from dsbench.launchstop import forget_pid, record_pid

    pid_record = record_pid()  # a rank of a multi-node launch: what its stop command ends, by pid (dsbench.launchstop)
    stop.on_stop(lambda _signal: forget_pid(pid_record))  # a rank told to stop leaves no record behind

    # Every rank says it started, and (below) how it ended: a rank that started and never said either was
    # killed outright (SIGKILL, the OOM killer) or crashed in native code; dsbench launch names it from this.
    def body() -> int:
        # the spec, and the flags typed on this command line (beside --run-json or a --deepspeed_config), which the
        # rank checks against its config: one parse
        spec, typed = worker_run(sys.argv[1:] if argv is None else argv)
        stop.say(f"started (pid {os.getpid()})")
        from dsbench.worker.run import run

        return run(spec, typed)

    code = run_rank(body, stop.say)
    if code == 0:
        stop.say("finished")
    forget_pid(pid_record)
    leave(code)
    return code


if __name__ == "__main__":
    from dsbench.paths import leave_working_folder_off_path

    leave_working_folder_off_path()
    sys.exit(main())
