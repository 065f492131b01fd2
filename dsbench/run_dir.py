"""The run folder a launch writes into: never one holding a run's measurements, nor over a file a user wrote."""

from __future__ import annotations

from pathlib import Path

from dsbench.errors import UserError
from dsbench.io import json_object_with
from dsbench.records import MEASURED

LAUNCH_WRITES = ("ds_config.json", "run.json", "accelerate_config.yaml", "launch_nodes.sh", ".deepspeed_env",
                 "job.sbatch", "launch.log")
"""What a launch writes into its run folder before the ranks start (launch.py, launchers/base.py, the SLURM job's
script and commands/launch.py's log): over an earlier launch's, never over a user's."""


def check_run_dir(folder: Path, config: str | None = None) -> None:
    """A launch writes its config, run.json and log into ``folder``: never into a folder that already holds a
    run's measurements (a second launch, even a dry run, would replace the config those figures came from), nor over
    a file of :data:`LAUNCH_WRITES` that no launch wrote (its run.json names it a dsbench run's), nor over the
    ``--config`` it reads (until 2026-12-03 ``--config D/ds_config.json --run-dir D`` rewrote the user's file)."""
    if folder.exists() and not folder.is_dir():
        raise UserError(f"--run-dir {folder}: exists and is not a folder")
    held = [name for name in MEASURED if (folder / name).exists()]
    if held:
        raise UserError(f"--run-dir {folder} already holds a run's measurements ({held[0]}): give a new --run-dir "
                        "(dsbench never overwrites results)")
    if config is not None and (folder / "ds_config.json").resolve() == Path(config).resolve():
        raise UserError(f"--config {config} is the file the launch writes its checked copy to: give another "
                        "--run-dir (dsbench never writes over a file of yours)")
    present = [name for name in LAUNCH_WRITES if (folder / name).exists()]
    # a launch's run.json: the worker's strategy, output folder and config
    if present and not json_object_with(folder / "run.json", {"strategy", "out", "deepspeed_config"}):
        raise UserError(f"--run-dir {folder} holds {present[0]}, which no dsbench launch wrote there: give a new "
                        "--run-dir (dsbench never writes over a file of yours)")

