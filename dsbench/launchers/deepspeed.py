"""argv for DeepSpeed's ``deepspeed`` launcher (deepspeed/launcher/runner.py)."""

from __future__ import annotations

from dsbench.launchers import LaunchCommand, LaunchSpec, cpu_env, worker_args


def build(spec: LaunchSpec) -> LaunchCommand:
    """``deepspeed [--hostfile F --include/--exclude --num_nodes N | --num_gpus N] ... --module M args``.

    Locally DeepSpeed builds its own ``localhost slots=N`` pool from ``--num_gpus``; on CPU with
    ``DS_ACCELERATOR=cpu`` it counts CPU ranks as slots. The worker receives ``--local_rank``.
    """
    argv = ["deepspeed"]
    if spec.hosts:
        assert spec.hostfile is not None
        argv += ["--hostfile", spec.hostfile]
        if spec.include:
            argv += ["--include", spec.include]
        if spec.exclude:
            argv += ["--exclude", spec.exclude]
        if spec.num_nodes:
            argv += ["--num_nodes", str(spec.num_nodes)]
        argv += ["--master_addr", spec.first_host()]
    else:
        argv += ["--num_gpus", str(spec.nproc_per_node), "--master_addr", spec.master_addr]
    argv += ["--master_port", str(spec.master_port), "--module", spec.module, *worker_args(spec)]
    return LaunchCommand(argv=argv, env=cpu_env(spec))
