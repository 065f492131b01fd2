"""The oracle for what ``accelerate launch`` hands a training process: accelerate's own ``launch_command``, run up
to the point where it would start processes (its launchers are replaced by a recorder of the environment that
accelerate 1.15's utils/launch.py ``prepare_*_env`` builds). Shared by the unit and integration tests."""

from __future__ import annotations

import os
from unittest import mock

from tests.conftest import ROOT

PREFIXES = ("ACCELERATE_", "FSDP_", "PARALLELISM_CONFIG_")
"""accelerate's variables for the training process: its own, its FSDP plugin's, its ParallelismConfig's."""


def accelerate_env(argv: list[str], prefixes: tuple[str, ...] = PREFIXES) -> dict[str, str]:
    """The ACCELERATE_*/FSDP_*/PARALLELISM_CONFIG_* variables ``accelerate launch ARGV`` gives the training
    processes (``prefixes``: the names kept; MEGATRON_LM_ for the Megatron-LM plugin). Run in the checkout (a
    relative deepspeed_config_file is read from the folder accelerate is launched in) with no such variable
    inherited; the environment and the folder are restored after."""
    from accelerate.commands import launch
    from accelerate.utils.launch import (
        prepare_deepspeed_cmd_env,
        prepare_multi_gpu_env,
        prepare_simple_launcher_cmd_env,
    )

    seen: dict[str, str] = {}
    clean = {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}
    cwd = os.getcwd()
    with (mock.patch.dict(os.environ, clean, clear=True),
          mock.patch.object(launch, "deepspeed_launcher", lambda a: seen.update(prepare_deepspeed_cmd_env(a)[1])),
          mock.patch.object(launch, "multi_gpu_launcher", lambda a: seen.update(prepare_multi_gpu_env(a))),
          mock.patch.object(launch, "simple_launcher", lambda a: seen.update(prepare_simple_launcher_cmd_env(a)[1]))):
        os.chdir(ROOT)
        try:
            launch.launch_command(launch.launch_command_parser().parse_args(argv))
        finally:
            os.chdir(cwd)
    return {k: v for k, v in seen.items() if k.startswith(prefixes)}


def accelerate_launcher(argv: list[str]) -> tuple[str, int]:
    """Which of its launchers ``accelerate launch ARGV`` runs (``deepspeed``, ``multi_gpu`` or ``simple``) and how
    many processes that starts: torchrun's and DeepSpeed's the YAML's count; the simple launcher's mpirun's count
    with an mpirun hostfile, else one (accelerate 1.15 utils/launch.py ``prepare_simple_launcher_cmd_env``)."""
    from accelerate.commands import launch

    picked: list[tuple[str, int]] = []
    with (mock.patch.object(launch, "deepspeed_launcher", lambda a: picked.append(("deepspeed", a.num_processes))),
          mock.patch.object(launch, "multi_gpu_launcher", lambda a: picked.append(("multi_gpu", a.num_processes))),
          mock.patch.object(launch, "simple_launcher", lambda a: picked.append(
              ("simple", a.num_processes if a.mpirun_hostfile is not None else 1)))):
        launch.launch_command(launch.launch_command_parser().parse_args(argv))
    [choice] = picked
    return choice
