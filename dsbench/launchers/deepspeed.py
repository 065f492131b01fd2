"""argv for DeepSpeed's ``deepspeed`` launcher (deepspeed/launcher/runner.py)."""

from __future__ import annotations

import re

from dsbench.errors import UserError
from dsbench.launchers.base import LaunchCommand, LaunchSpec, cpu_env, worker_args
from dsbench.launchers.remote import fan_out, stop_command

_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# DeepSpeed's multinode runners export each value as-is, or wrapped in double quotes when it holds other
# characters (multinode_runner.py add_export) -- inside double quotes the remote shell still expands
# $, ` and \, and " ends the quote. Values with those, or with line breaks, cannot be passed safely.
_UNSAFE = re.compile(r'[$`"\\\n\r]')
# DeepSpeed's pdsh runner joins the remote command into one shell line: the working folder (`cd {cwd};`), the Python
# and the worker's arguments go in unquoted (multinode_runner.py PDSHRunner.get_cmd; parse_user_args only wraps an
# argument holding a space in double quotes, inside which $, ` and \ still expand). What the remote shell would read
# as syntax is refused; DeepSpeed's own set of characters it exports unquoted is what passes (add_export), and a space
# in an argument, which DeepSpeed's double quotes keep.
_PDSH_SAFE = re.compile(r"[\w@%+=:,./-]+")
_PDSH_SAFE_ARG = re.compile(r"[\w@%+=:,./ -]+")


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


def check_pdsh_words(spec: LaunchSpec) -> None:
    """Refuse what DeepSpeed's pdsh runner would hand the remote shell unquoted (a run folder named ``a;b`` would run
    ``b`` on every node)."""
    for what, word, safe in (("the working folder", spec.cwd, _PDSH_SAFE), ("the Python", spec.python, _PDSH_SAFE),
                             *(("a worker argument", arg, _PDSH_SAFE_ARG) for arg in worker_args(spec))):
        if not safe.fullmatch(word):
            raise UserError(f"{what} {word!r}: DeepSpeed's pdsh runner passes it to each node's shell unquoted, which "
                            "would read it as shell syntax; use letters, digits and _@%+=:,./- only (a plain "
                            "--run-dir), or --launcher-backend ssh")


def _resource_options(spec: LaunchSpec) -> list[str]:
    """Which slots DeepSpeed's runner uses: a hostfile with its filters and node count, or ``--num_gpus`` here; and
    the rendezvous host (the first host of the selection)."""
    if not spec.hosts:
        return ["--num_gpus", str(spec.nproc_per_node), "--master_addr", spec.master_addr]
    assert spec.hostfile is not None
    options = ["--hostfile", spec.hostfile]
    for flag, value in (("--include", spec.include), ("--exclude", spec.exclude),
                        ("--num_nodes", str(spec.num_nodes or ""))):
        options += [flag, value] if value else []
    return [*options, "--master_addr", spec.first_host()]


def _backend_env(spec: LaunchSpec, env: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """The ranks' environment (the env file's) and the launcher's own additions, for pdsh or openmpi."""
    if spec.launcher_backend != "openmpi":
        return env, {}
    # mpirun starts the worker itself, not deepspeed.launcher.launch, so nothing sets the rendezvous
    # address (DeepSpeed would ask mpi4py; the worker maps OMPI_COMM_WORLD_* to RANK/WORLD_SIZE):
    # it goes to every rank as an -x export from the env file (runner.py reads DS_ENV_FILE).
    remote = {**env, "MASTER_ADDR": spec.first_host(), "MASTER_PORT": str(spec.master_port)}
    # Open MPI's documented opt-in for root (mpirun's "attempt to run as root" message); read by
    # mpirun only, never exported to the ranks (DeepSpeed exports PYTHON*/MLFLOW*/MV2*/UCX* and the file)
    as_root = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"} if spec.as_root else {}
    return remote, as_root


def build(spec: LaunchSpec) -> LaunchCommand:
    """``deepspeed [--hostfile F --include/--exclude --num_nodes N | --num_gpus N] ... --module M args``.

    Locally DeepSpeed builds its own ``localhost slots=N`` pool from ``--num_gpus``; on CPU with
    ``DS_ACCELERATOR=cpu`` it counts CPU ranks as slots. The worker receives ``--local_rank``.
    """
    options = _resource_options(spec)
    tail = ["--master_port", str(spec.master_port), "--module", spec.module, *worker_args(spec)]
    env = cpu_env(spec)
    if not spec.multinode():
        return LaunchCommand(argv=["deepspeed", *options, *tail], env=env)
    if spec.launcher_backend == "ssh":
        # DeepSpeed's per-node mode (--no_ssh --node_rank, DeepSpeed#5728), started on each node by dsbench
        return fan_out(spec, {host: [spec.python, "-m", "deepspeed.launcher.runner", *options, "--no_ssh",
                                     "--node_rank", str(rank), *tail]
                              for rank, host in enumerate(spec.selection())})
    if spec.launcher_backend == "pdsh":
        check_pdsh_words(spec)
    # pdsh (DeepSpeed's default) or openmpi: DeepSpeed reaches the nodes itself. Remote ranks get only
    # PYTHON*/MLFLOW*/MV2*/UCX* from this environment; the rest goes in the env file.
    backend = [] if spec.launcher_backend == "pdsh" else ["--launcher", spec.launcher_backend]
    # DeepSpeed runs a selection of one host here, whatever its name (runner.py: multi_node_exec =
    # force_multi or len(active_resources) > 1): --force_multi sends it to that host.
    force = ["--force_multi"] if len(spec.selection()) == 1 else []
    remote, launcher_env = _backend_env(spec, env)
    # DeepSpeed's runner answers SIGINT/SIGTERM on pdsh with `pkill -f <python> -u -m deepspeed.launcher.launch` on
    # every node (multinode_runner.py PDSHRunner.get_cmd), which would kill every DeepSpeed job there: the runner
    # stops this launch with its own stop command instead, and only then SIGKILLs the launcher
    stop = stop_command(spec)
    return LaunchCommand(argv=["deepspeed", *options, *backend, *force, *tail],
                         env={**env, **launcher_env, "DS_ENV_FILE": spec.deepspeed_env_file},
                         files={spec.deepspeed_env_file: format_deepspeed_env(remote), **stop.files}, stop=stop)
