"""argv for DeepSpeed's ``deepspeed`` launcher (deepspeed/launcher/runner.py)."""

from __future__ import annotations

import re

from dsbench.errors import UserError
from dsbench.launchers import LaunchCommand, LaunchSpec, cpu_env, worker_args

_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# DeepSpeed's multinode runners export each value as-is, or wrapped in double quotes when it holds other
# characters (multinode_runner.py add_export) -- inside double quotes the remote shell still expands
# $, ` and \, and " ends the quote. Values with those, or with line breaks, cannot be passed safely.
_UNSAFE = re.compile(r'[$`"\\\n\r]')
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")


def format_deepspeed_env(env: dict[str, str]) -> str:
    """``.deepspeed_env`` text: one ``KEY=VALUE`` per line, never a blank or comment line (DeepSpeed's parser
    splits every line on ``=``), values that survive DeepSpeed's quoting on the remote shell unchanged."""
    lines = []
    for key, value in sorted(env.items()):
        if not _KEY.match(key):
            raise UserError(f"--env {key}=...: not a valid environment variable name")
        if _UNSAFE.search(value) or value != value.strip() or not value:
            raise UserError(f"--env {key}: the value cannot be passed to remote ranks safely through DeepSpeed "
                            "(empty, surrounding spaces, or one of $ ` \" \\ or a line break)")
        lines.append(f"{key}={value}\n")
    return "".join(lines)


def is_multinode(spec: LaunchSpec) -> bool:
    """True when DeepSpeed will start ranks over ssh/pdsh (any selected host is not this machine)."""
    hosts = list(spec.selection())
    return bool(spec.hosts) and (len(hosts) > 1 or hosts[0] not in LOCAL_HOSTS)


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
    env = cpu_env(spec)
    if not is_multinode(spec):
        return LaunchCommand(argv=argv, env=env)
    # Remote ranks get only PYTHON*/MLFLOW*/MV2*/UCX* from this environment; the rest goes in the env file.
    return LaunchCommand(argv=argv, env={**env, "DS_ENV_FILE": spec.deepspeed_env_file},
                         files={spec.deepspeed_env_file: format_deepspeed_env(env)})
