"""Build DeepSpeed's JIT ops for this venv ahead of the tests that load them, in the order the suite needs them.

On the CPU accelerator a fresh venv builds four ops on first use (torch.utils.cpp_extension.load, one folder each
under TORCH_EXTENSIONS_DIR): the shared-memory comm op that every DeepSpeed rank loads in init_distributed,
FusedAdam for a DeepSpeed run stepping Adam on the ranks, CPU Adam for optimizer offload, and async_io (with
pin_memory) for NVMe offload. Measured in the clean clone of 2026-11-27 (c866de2): 81, 124, 133 and about 540 s of
wall clock, the first three in the foreground of the first launches that needed them while the tests waited.

`make test` starts this in the background before the system packages and the unit tests, and the integration
conftest starts it again (it then finds each op built, or waits on the first builder's lock, and builds async_io),
so the builds run beside the unit tests and torch's own engines' launches, which load no DeepSpeed op, instead of
in front of the first DeepSpeed launches. In the clean clone at 0ea5b9c the three were built 2:49, 3:55 and 6:17
after `make test` started, and the suite took 47:29 against 53:39 (docs/testing.md). A rank that needs an op
meanwhile waits on torch's build lock (FileBaton) for what is left, exactly as a second rank of one launch does.

The environment is the launches' own (:func:`launch_env`, which the integration conftest gives every launch): torch
builds with the first ``ninja`` on PATH, and a build left by another ninja reads as "command line changed" to
the next and is compiled again from scratch.

    python scripts/prebuild_ops.py [--detach] [--no-async-io]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from dsbench.errors import UserError

OPS = ("ShareMemCommBuilder", "FusedAdamBuilder", "CPUAdamBuilder", "AsyncIOBuilder")
"""In the order the suite first needs them: every DeepSpeed launch, then the first non-offload one, the first
offload one, and the NVMe test (scheduled last by the integration conftest)."""
NICE = 5
"""Below the tests' processes where the kernel schedules by process. Not 19: starved, one compile could leave its
folder unchanged for the 10 minutes after which dsbench calls a build lock stale (dsbench/jitlocks.py STALE_S).
Where the kernel groups processes by session (autogroup, on on this machine), the builder's own session is a
group of its own and takes about an equal share of the cores while it builds: nice orders it only within it. A
smaller share for async_io's build (the group at nice 10) was tried and undone on 2026-12-01: docs/testing.md."""


def extensions_dir() -> Path:
    """DeepSpeed's JIT-built ops in the venv's own folder, unless TORCH_EXTENSIONS_DIR is set: a fresh venv (CI's
    clone) rebuilds them anyway (its sources are newer than any cached object), and a lock that an interrupted build
    left in ~/.cache cannot stall the suite."""
    return Path(os.environ.get("TORCH_EXTENSIONS_DIR") or Path(sys.prefix) / "torch_extensions")


LAUNCH_VARS = {"DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1", "DSBENCH_DEVICE": "cpu", "PYTHONUNBUFFERED": "1"}
"""What every test launch sets: the CPU accelerator, one thread per rank (2 cores), dsbench on CPU, unbuffered logs."""


def launch_env() -> dict[str, str]:
    """The environment of every test launch and of these builds, one rule for both: this process's, with
    :data:`LAUNCH_VARS`, the JIT folder (:func:`extensions_dir`) and the venv's bin first on PATH."""
    return {**os.environ, **LAUNCH_VARS, "TORCH_EXTENSIONS_DIR": str(extensions_dir()),
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}


def build(ops: tuple[str, ...]) -> None:
    """Load each op through the accelerator, as DeepSpeed does: built when missing, waited for when another
    process holds its build lock, read from the folder otherwise. Prints each op's wall-clock seconds."""
    os.environ.update(launch_env())  # before DeepSpeed picks its accelerator
    import signal

    from deepspeed.accelerator import get_accelerator

    from dsbench.worker import jitbaton
    from dsbench.worker.cpuanswer import ask_the_cpu_once

    # SIGTERM leaves as an exception does, so torch's `finally` removes the build lock (the default action would
    # leave it), and a wait on a lock left over ends in one line (dsbench.worker.jitbaton)
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    jitbaton.guard(lambda text: print(f"prebuild_ops: {text}", flush=True))

    ask_the_cpu_once()  # one py-cpuinfo process for every op's flags, stored for the launches' ranks to read
    for name in ops:
        began = time.monotonic()
        get_accelerator().create_op_builder(name).load(verbose=False)
        print(f"prebuild_ops: {name} ready after {time.monotonic() - began:.0f} s", flush=True)


def log_path() -> Path:
    """Where the background build writes what it did: ``prebuild.log`` beside the ops."""
    return extensions_dir() / "prebuild.log"


def start(ops: tuple[str, ...]) -> subprocess.Popen:
    """This script in a process of its own at nice 5, in its own session (a Ctrl-C to `make` does not stop the build
    the launches will need; stopped by a signal, it removes its build lock, killed outright it cannot), its output
    appended to :func:`log_path`."""
    log_path().parent.mkdir(parents=True, exist_ok=True)
    with open(log_path(), "ab") as out:
        return subprocess.Popen([sys.executable, __file__, "--ops", ",".join(ops)], env=launch_env(),
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, preexec_fn=lambda: os.nice(NICE))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--detach", action="store_true", help="start the build in the background and return")
    parser.add_argument("--no-async-io", action="store_true", help="leave out async_io (NVMe offload)")
    parser.add_argument("--ops", help=argparse.SUPPRESS)
    args = parser.parse_args()
    ops = tuple(args.ops.split(",")) if args.ops else OPS[:-1] if args.no_async_io else OPS
    if args.detach:
        proc = start(ops)
        print(f"prebuild_ops: building {', '.join(ops)} in the background (pid {proc.pid}, log {log_path()})")
        return 0
    try:
        build(ops)
    except UserError as exc:  # a lock left over (dsbench.worker.jitbaton): one line in the log, as a rank says it
        print(f"prebuild_ops: {exc}", flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
