"""``--launcher slurm``: an sbatch script that starts one task per rank with ``srun`` (pure).

The script asks for ``nodes`` x ``ranks per node`` tasks (one GPU each on GPU nodes), exports what every
rank needs, points torch's env:// rendezvous at the job's first node, and runs ``srun`` once: each task is a
rank, and the worker reads its rank, world size and local rank from SLURM_PROCID / SLURM_NTASKS /
SLURM_LOCALID (dsbench/worker/dist.py), whatever the strategy (DeepSpeed, DDP, FSDP2, pipelines). Output goes
to ``slurm-<job id>.out`` in the run folder. ``sbatch --wait`` returns the job's exit code. The job is not
requeued (``--no-requeue``): a run folder holds one run, and a job whose start failed on a node ends (SLURM 22.05
cancels it, and ``sbatch --wait`` returns 0: the launch checks for the run's summary) instead of waiting, held.

The output file and the working folder go to sbatch as arguments, not ``#SBATCH`` lines: sbatch splits an
``#SBATCH`` line at spaces, and reads ``%`` in ``--output`` as a pattern (``%u``, ``%j``), so a run folder named
``my runs`` or ``100%`` would send the output where dsbench never looks. In ``--output`` a literal ``%`` is
written ``%%`` (sbatch's filename patterns); only the ``%j`` dsbench asks for stays a pattern.
"""

from __future__ import annotations

import shlex

from dsbench.errors import UserError
from dsbench.launchers.base import LaunchCommand, LaunchSpec, SlurmJob, cpu_env, worker_args


def sbatch_script(spec: LaunchSpec, job: SlurmJob) -> str:
    """The batch script's text: #SBATCH lines, the ranks' environment, the rendezvous, one srun."""
    per_node = spec.nproc_per_node
    lines = ["#!/usr/bin/env bash",
             "# Written by `dsbench launch --launcher slurm`: one srun task per rank; rank, world size and local",
             "# rank come from SLURM_PROCID, SLURM_NTASKS and SLURM_LOCALID. The output file and working folder are",
             "# sbatch arguments (see the command dsbench printed).",
             f"#SBATCH --job-name=dsbench-{spec.strategy}", f"#SBATCH --nodes={job.nodes}",
             f"#SBATCH --ntasks-per-node={per_node}",
             # a job SLURM cannot start on a node fails instead of being requeued and held (where `sbatch --wait`
             # would wait for good), and a job is never run again into the same run folder, over its metrics
             "#SBATCH --no-requeue"]
    if not spec.cpu:
        lines.append(f"#SBATCH --gpus-per-node={per_node}")
    lines += [f"#SBATCH --{flag}={value}" for flag, value in
              (("partition", job.partition), ("time", job.time), ("account", job.account)) if value]
    lines += ["set -euo pipefail"]
    lines += [f"export {key}={shlex.quote(value)}" for key, value in sorted(cpu_env(spec).items())]
    lines += ["# torch's env:// rendezvous on the job's first node",
              'MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
              f"export MASTER_ADDR MASTER_PORT={spec.master_port}",
              "# --kill-on-bad-exit: one failing rank ends every task (no rank left waiting in a collective)",
              shlex.join(["srun", "--kill-on-bad-exit=1", "--label", spec.python, "-m", spec.module,
                          *worker_args(spec)])]
    return "\n".join(lines) + "\n"


def build(spec: LaunchSpec) -> LaunchCommand:
    """``sbatch [--wait] job.sbatch`` with the script to write first."""
    job = spec.slurm
    assert job is not None
    for what, value in (("the run folder", job.output), ("the working folder", spec.cwd)):
        if any(c in value for c in "\n\r\0"):
            raise UserError(f"{what} {value!r} holds a line break or NUL, which sbatch cannot take: rename it")
    argv = ["sbatch", f"--output={output_pattern(job.output)}", f"--chdir={spec.cwd}",
            *(["--wait"] if job.wait else []), job.script]
    return LaunchCommand(argv=argv, files={job.script: sbatch_script(spec, job)})


def output_pattern(path: str) -> str:
    """``--output`` for sbatch: every ``%`` of the path literal (``%%``) but the trailing ``slurm-%j.out``'s."""
    folder, sep, name = path.rpartition("/")
    return folder.replace("%", "%%") + sep + name.replace("%", "%%").replace("%%j", "%j")
