"""The launch description and what every launcher builds from it: :class:`LaunchSpec` in, :class:`LaunchCommand`
(argv, env, files) out, with the environment and worker arguments every launcher shares. Pure."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from dsbench.errors import UserError
from dsbench.hostfile import Host, select_slots, world_size_of
from dsbench.launchstop import ENV as STOP_ENV
from dsbench.launchstop import new_id
from dsbench.spec import Launcher

Strategy = str  # "deepspeed" | "ddp" | "fsdp" | "single" | "torch_pp" | "torch_tp"
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")
BACKENDS = ("pdsh", "ssh", "openmpi")


# fullmatch, ASCII digits: "$" would pass a final newline, and \d any script's digits
_TIME = re.compile(r"([0-9]+-)?[0-9]+(:[0-9]{1,2}){0,2}")  # sbatch --time: minutes, MM:SS, HH:MM:SS, D-HH[:MM[:SS]]
_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_NAMES = re.compile(r"[A-Za-z0-9_.-]+(,[A-Za-z0-9_.-]+)*")  # --partition gpu,debug: the first that can run it


@dataclass(frozen=True, kw_only=True, slots=True)
class SlurmJob:
    """What ``sbatch`` is asked for (``--nodes``, ``--gpus-per-node`` is the spec's ranks per node)."""

    nodes: int = 1
    partition: str | None = None
    time: str | None = None
    account: str | None = None
    wait: bool = False
    """``--wait``: block until the job ends and return its exit code."""
    script: str = "job.sbatch"
    """Where the batch script is written (the run folder)."""
    output: str = "slurm-%j.out"
    """The job's output file (``%j``: the job id)."""

    def __post_init__(self) -> None:
        if self.nodes < 1:
            raise UserError(f"--nodes must be >= 1, got {self.nodes}")
        if self.time is not None and not _TIME.fullmatch(self.time):
            raise UserError(f"--time {self.time!r}: give minutes, HH:MM:SS or D-HH:MM:SS as sbatch reads it")
        if self.partition is not None and not _NAMES.fullmatch(self.partition):
            raise UserError(f"--partition {self.partition!r}: partition names (letters, digits, '_', '.', '-'), "
                            "comma-separated")
        if self.account is not None and not _NAME.fullmatch(self.account):
            raise UserError(f"--account {self.account!r}: letters, digits, '_', '.' and '-' only")


@dataclass(frozen=True, kw_only=True, slots=True)
class LaunchSpec:
    """Where and how to start the training worker."""

    launcher: Launcher = "deepspeed"
    """``deepspeed``, ``torchrun`` or ``accelerate`` (``--launcher``)."""
    strategy: Strategy = "deepspeed"
    """What the worker runs: deepspeed, ddp, fsdp or single."""
    module: str = "dsbench.train"
    """Python module the launcher starts on every rank."""
    script_args: tuple[str, ...] = ()
    """Arguments passed to the module."""
    run_file: str | None = None
    """The run description (run.json) the worker reads instead of flags, when ``dsbench launch`` wrote one."""
    ds_config: str | None = None
    """Path of the rendered DeepSpeed config (deepspeed strategy)."""
    nproc_per_node: int = 1
    """Ranks per node when no hostfile is given (``--num-gpus``)."""
    hostfile: str | None = None
    """Hostfile path (``--hostfile``), already parsed into ``hosts``."""
    hosts: tuple[Host, ...] = ()
    include: str = ""
    exclude: str = ""
    num_nodes: int | None = None
    """Use only the first N hosts (``--num-nodes``)."""
    master_addr: str = "127.0.0.1"
    master_port: int = 29500
    cpu: bool = True
    """CPU ranks: DS_ACCELERATOR=cpu, gloo, one OpenMP thread per rank."""
    omp_threads: int = 1
    accelerate_config: str = "accelerate_config.yaml"
    """Path where the accelerate launcher's YAML is written."""
    user_accelerate_config: str | None = None
    """The user's own accelerate YAML (``--accelerate-config``): passed to ``accelerate launch`` as is, never
    written; ``accelerate_args`` are the command-line overrides that go with it."""
    accelerate_args: tuple[str, ...] = ()
    deepspeed_env_file: str = ".deepspeed_env"
    """Absolute path of the ``.deepspeed_env`` written for multi-node deepspeed launches (``DS_ENV_FILE``)."""
    extra_env: tuple[tuple[str, str], ...] = ()
    """``--env KEY=VALUE`` pairs for every rank (also remote ones)."""
    mixed_precision: str = "no"
    """accelerate's mixed_precision for the native strategies (no, fp16, bf16)."""
    dp_shard: int = 0
    """FSDP's shard group (``--dp-shard``), which accelerate's YAML spells as its ``parallelism_config`` (HSDP)."""
    python: str = "python3"
    """The Python other nodes run (the launching one's path: the project is at the same path everywhere)."""
    cwd: str = "."
    """The folder other nodes run in (relative paths in the command resolve from it)."""
    launcher_backend: str = "pdsh"
    """How the deepspeed launcher reaches other nodes: ``pdsh`` (its default), ``openmpi``, or ``ssh`` (dsbench
    starts DeepSpeed's per-node --no_ssh mode on each node over ssh)."""
    launch_script: str = "launch_nodes.sh"
    """Where the per-node ssh script is written when torchrun/accelerate span several nodes."""
    slurm: SlurmJob | None = None
    """The job to submit (``--launcher slurm``): ``slurm.nodes`` x ``nproc_per_node`` ranks."""
    as_root: bool = False
    """The launching user is root: Open MPI's mpirun refuses to start then unless told it may."""
    launch_id: str = field(default_factory=new_id)
    """Random hex naming this launch's processes on every node (``DSBENCH_LAUNCH_ID``): what a multi-node stop
    matches, exactly (:mod:`dsbench.launchstop`)."""

    def __post_init__(self) -> None:
        if self.nproc_per_node < 1:
            raise UserError(f"--num-gpus must be >= 1, got {self.nproc_per_node}")
        if self.num_nodes is not None and self.num_nodes < 1:
            raise UserError(f"--num-nodes must be >= 1, got {self.num_nodes}")
        if not 1 <= self.master_port <= 65535:
            raise UserError(f"--master-port must be in 1..65535, got {self.master_port}")
        if (self.include or self.exclude) and not self.hosts:
            raise UserError("--include/--exclude need --hostfile")
        if self.num_nodes is not None and not self.hosts:
            raise UserError(f"--num-nodes {self.num_nodes} needs --hostfile (the nodes to take the first "
                            f"{self.num_nodes} of); on this machine alone, drop it")
        if self.launcher_backend not in BACKENDS:
            raise UserError(f"--launcher-backend must be one of {', '.join(BACKENDS)}, got {self.launcher_backend!r}")
        if self.launcher_backend == "openmpi" and (self.include or self.exclude or self.num_nodes):
            # DeepSpeed's OpenMPIRunner.validate_args raises ValueError for these: mpirun runs every slot
            raise UserError("--launcher-backend openmpi runs every slot of the hostfile (DeepSpeed's openmpi runner "
                            "has no --include/--exclude/--num-nodes): write a hostfile of the slots to use")
        if self.num_nodes is not None and self.hosts and self.num_nodes > len(self.hosts):
            raise UserError(f"--num-nodes {self.num_nodes} exceeds the {len(self.hosts)} hosts in {self.hostfile}")

    def selection(self) -> dict[str, list[int]]:
        """host -> slot indices in use (after --num-nodes, --include/--exclude)."""
        if not self.hosts:
            return {"localhost": list(range(self.nproc_per_node))}
        hosts = list(self.hosts[: self.num_nodes] if self.num_nodes else self.hosts)
        return select_slots(hosts, self.include, self.exclude)

    def nodes(self) -> int:
        """Number of nodes used."""
        return self.slurm.nodes if self.slurm else len(self.selection())

    def world_size(self) -> int:
        """Total ranks."""
        if self.slurm:
            return self.slurm.nodes * self.nproc_per_node
        return world_size_of(self.selection())

    def ranks_per_node(self) -> int:
        """Ranks per node; torchrun and accelerate need the same count on every node."""
        counts = {len(slots) for slots in self.selection().values()}
        if len(counts) != 1:
            raise UserError(f"hosts have different slot counts {sorted(counts)}: torchrun/accelerate need the same "
                            "number of ranks on every node (use --include or the deepspeed launcher)")
        return counts.pop()

    def even_world(self) -> int:
        """Every rank of a launcher that starts the same count on each node (torchrun's --nproc-per-node; accelerate
        starts num_processes // num_machines a machine, accelerate/utils/launch.py): slots that differ are refused."""
        return self.ranks_per_node() * self.nodes()

    def multinode(self) -> bool:
        """True when ranks run on other machines (a selected host that is not this one)."""
        hosts = list(self.selection())
        return bool(self.hosts) and (len(hosts) > 1 or hosts[0] not in LOCAL_HOSTS)

    def rank_prints_summary(self) -> bool:
        """Whether rank 0 prints the run's figures itself (``TrainSpec.summary_line``): where its lines reach this
        terminal but its summary.json may be on another machine (ranks on other nodes), or where nothing here waits
        for it (a SLURM job not waited on). Otherwise ``dsbench launch`` prints them as its last line, after the
        launcher's own log lines, and the rank does not, so that they are said once."""
        return self.multinode() or (self.slurm is not None and not self.slurm.wait)

    def first_host(self) -> str:
        """Rendezvous host: the first selected host, or ``master_addr`` on one node."""
        return next(iter(self.selection())) if self.hosts else self.master_addr


@dataclass(frozen=True, slots=True)
class LaunchCommand:
    """A command ready to execute: argv (never through a shell), environment delta, files to write first."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    remote: dict[str, list[str]] = field(default_factory=dict)
    """For launches the command fans out over ssh: the argv each node runs (what the script's commands exec)."""
    stop: LaunchCommand | None = None
    """For multi-node launches: the command that stops exactly this launch's processes on every node, which the
    runner uses instead of signalling the launcher (DeepSpeed's pdsh runner answers a signal with ``pkill -f``)."""

    def shell_line(self) -> str:
        """The exact command as one copy-pasteable, shell-quoted line (env assignments first)."""
        assignments = [f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items())]
        return " ".join([*assignments, shlex.join(self.argv)])


def cpu_env(spec: LaunchSpec) -> dict[str, str]:
    """Environment every rank needs on a CPU machine (empty on GPU), plus ``--env`` pairs; on several nodes, the
    launch id its processes record themselves under (:mod:`dsbench.launchstop`)."""
    extra = dict(spec.extra_env)
    if spec.multinode():
        extra[STOP_ENV] = spec.launch_id
    if not spec.cpu:
        return extra
    return {"DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": str(spec.omp_threads), "DSBENCH_DEVICE": "cpu", **extra}


def worker_args(spec: LaunchSpec) -> list[str]:
    """Arguments for the worker module: its run description, or the strategy, the config and the user's flags
    (another module, such as ``dsbench calibrate``'s, gets its own arguments only)."""
    if spec.module != "dsbench.train":
        return list(spec.script_args)
    if spec.run_file:
        return ["--run-json", spec.run_file]
    args = ["--strategy", spec.strategy]
    if spec.strategy == "deepspeed" and spec.ds_config:
        args += ["--deepspeed_config", spec.ds_config]
    return args + list(spec.script_args)
