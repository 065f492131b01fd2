"""Launch commands: a frozen :class:`LaunchSpec` in, a :class:`LaunchCommand` (argv, env, files) out.

Each launcher module exposes one pure ``build(spec) -> LaunchCommand``: no port probing, no
``os.environ`` reads, no file writes. :mod:`dsbench.runner` is the only module that executes.
"""

from __future__ import annotations

from collections.abc import Callable

from dsbench.errors import UserError
from dsbench.launchers.base import (
    BACKENDS,
    LOCAL_HOSTS,
    LaunchCommand,
    LaunchSpec,
    SlurmJob,
    Strategy,
    cpu_env,
    worker_args,
)

__all__ = ["BACKENDS", "LOCAL_HOSTS", "LaunchCommand", "LaunchSpec", "SlurmJob", "Strategy", "build", "cpu_env",
           "worker_args"]


def _registry() -> dict[str, Callable[[LaunchSpec], LaunchCommand]]:
    from dsbench.launchers import accelerate, deepspeed, slurm, torchrun

    return {"deepspeed": deepspeed.build, "torchrun": torchrun.build, "accelerate": accelerate.build,
            "slurm": slurm.build}


def build(spec: LaunchSpec) -> LaunchCommand:
    """Build the command for ``spec.launcher``."""
    builders = _registry()
    if spec.launcher not in builders:
        raise UserError(f"--launcher must be one of {', '.join(builders)}, got {spec.launcher!r}")
    return builders[spec.launcher](spec)
