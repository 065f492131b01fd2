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

from dsbench.errors import DsbenchError
from dsbench.trainspec import TrainSpec, from_argv


def parse_args(argv: list[str] | None = None) -> TrainSpec:
    """The run description from the worker's flags (``--run-json FILE`` and/or flags; see dsbench.trainspec)."""
    return from_argv(sys.argv[1:] if argv is None else argv)


PEER_LOST = ("Connection reset by peer", "Connection closed by peer", "Broken pipe", "Connection refused")
"""What gloo says on a rank whose peer died: a symptom of another rank's failure, not a cause."""


def describe(exc: BaseException) -> str:
    """The error line's text: a collective or rendezvous that timed out says which flag sets the limit, and a lost
    peer says that another rank is the cause."""
    text = f"{type(exc).__name__}: {exc}".splitlines()[0]
    if "timed out" in text.lower() or "timeout" in text.lower():
        return (f"a collective or the rendezvous did not complete within --dist-timeout: a rank hung or never "
                f"joined ({text[:300]})")
    if any(marker in text for marker in PEER_LOST):
        return f"lost the connection to another rank, which stopped first ({text[:300]})"
    return text


def main(argv: list[str] | None = None) -> int:
    from dsbench.worker.dist import env_rank  # stdlib only: every launcher's name for the rank (SLURM, Open MPI)

    # the host is named so that a failure is traceable under launchers that do not prefix output with it (mpirun)
    where = f"[rank {env_rank()[0]} on {socket.gethostname()}]"
    from dsbench.worker import stop

    stop.install(where)
    from dsbench.launchstop import forget_pid, record_pid

    pid_record = record_pid()  # a rank of a multi-node launch: what its stop command ends, by pid (dsbench.launchstop)
    stop.on_stop(lambda _signal: forget_pid(pid_record))  # a rank told to stop leaves no record behind
    # Every rank says it started, and (below) how it ended: a rank that started and never said either was
    # killed outright (SIGKILL, the OOM killer) or crashed in native code; dsbench launch names it from this.
    try:
        spec = parse_args(argv)
        stop.say(f"started (pid {os.getpid()})")
        from dsbench.worker.run import run

        code = run(spec)
    except SystemExit as exc:  # argparse's --help/--version: printed, exit 0
        code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 2
    except DsbenchError as exc:  # bad input (2), a full disk (1): one line
        stop.say(f"error: {exc}")
        code = exc.exit_code
    except BaseException as exc:  # a failing rank must end the job, not hang the others
        traceback.print_exc()
        stop.say(f"error: {describe(exc)}")
        code = 1
    if code == 0:
        stop.say("finished")
    sys.stdout.flush()
    sys.stderr.flush()
    # Leave without interpreter teardown: on failure it would block on ranks still in a collective, and on
    # success native threads (gloo, DeepSpeed ops) can abort in static destructors ("terminate called
    # without an active exception"), turning a finished run into a failed launch. Results are on disk.
    forget_pid(pid_record)
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
