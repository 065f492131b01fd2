"""What ``dsbench launch`` was asked, as one typed request, and the checks it passes before anything is
prepared: flags that contradict each other or that the chosen strategy would ignore, ``--env`` pairs, and what
remote ranks inherit from this shell (pure)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsbench import trainspec
from dsbench.configs.device_ops import rank_findings
from dsbench.configs.findings import has_errors, refused_for_launch
from dsbench.configs.precision import check_precision
from dsbench.dataset_files import dataset_files
from dsbench.envinfo import cuda_arch_list_problem
from dsbench.errors import InvalidConfig, UserError
from dsbench.hostfile import is_valid_hostname
from dsbench.jitlocks import stale_lock_message
from dsbench.launchers import SlurmJob
from dsbench.local_ranks import check_local_ranks
from dsbench.strategies import TORCH_TP_ONLY


@dataclass(frozen=True, kw_only=True, slots=True)
class LaunchRequest:
    """Everything the launch command was given."""

    launcher: str
    strategy: str
    render_flags: dict[str, Any]
    preset: str | None
    model: str | None
    sets: tuple[str, ...]
    config: str | None
    hostfile: str | None
    include: str
    exclude: str
    num_nodes: int | None
    num_gpus: int
    master_addr: str
    master_port: int
    run_dir: Path
    script_args: tuple[str, ...]
    cpu: bool
    extra_env: tuple[tuple[str, str], ...] = ()
    python: str = "python3"
    """The Python every node runs (this one's path)."""
    launcher_backend: str = "pdsh"
    cwd: str = "."
    """This launch's folder (other nodes cd to it)."""
    slurm: SlurmJob | None = None
    """The job for ``--launcher slurm``."""
    as_root: bool = False
    """Launched by root (Open MPI's mpirun needs an explicit opt-in then)."""
    inherited_env: tuple[tuple[str, str], ...] = ()
    """Variables of the launching shell that remote ranks need too (:func:`inherited_env`); local ranks inherit
    them anyway."""
    accelerate_config: str | None = None
    """The user's own accelerate YAML (``--accelerate-config``): it decides the engine and its settings."""
    num_processes: int | None = None
    """``--num-processes``: replaces the YAML's num_processes (as ``accelerate launch --num_processes`` does)."""
    num_machines: int | None = None
    port_given: bool = False
    """``--master-port`` was typed (else ``master_port`` is dsbench's pick)."""
    local_gpus: int = 0
    """GPUs on this machine (envinfo.local_gpu_count): a launch on it starts at most one rank per GPU."""
    memory_available: int | None = None
    """This machine's available memory in bytes (envinfo.memory_available; None: unknown): what CPU ranks it can
    hold (local_ranks.check_local_ranks)."""
    cuda_arch_list: str = ""
    """This shell's TORCH_CUDA_ARCH_LIST, which ranks here inherit (envinfo.cuda_arch_list_problem)."""
    stale_shm_locks: tuple[str, ...] = ()
    """Stale build locks of DeepSpeed's CPU comm op where ranks here would build it (jitlocks.SHM_COMM_OP)."""

    @property
    def ranks_here(self) -> bool:
        """Every rank runs on this machine, in this environment (no hostfile, no SLURM job)."""
        return not self.hostfile and self.slurm is None


def inherited_env(environ: Mapping[str, str], python: str) -> tuple[tuple[str, str], ...]:
    """What ranks on other nodes need from this shell (an ssh command gets a login's bare environment):

    - ``PATH`` with this Python's bin folder first, as an activated venv has it: torch JIT-builds DeepSpeed's
      ops with the first ``ninja`` on PATH, and a system ninja of another version (Debian's 1.11 beside the
      venv's 1.13) hashes build commands differently, so each sees the other's build as changed and rebuilds
      it: a minute of compiling per op on every launch (seen here);
    - when set: ``TORCH_EXTENSIONS_DIR`` (where those ops are cached), ``PYTHONPATH``, and the interface
      gloo/NCCL should use (``GLOO_SOCKET_IFNAME``, ``NCCL_SOCKET_IFNAME``).
    """
    bin_dir = os.path.dirname(python)
    rest = [part for part in environ.get("PATH", "").split(os.pathsep) if part and part != bin_dir]
    pairs = [("PATH", os.pathsep.join([bin_dir, *rest]))]
    return tuple(pairs + [(name, environ[name]) for name in INHERITED if environ.get(name)])


INHERITED = ("TORCH_EXTENSIONS_DIR", "PYTHONPATH", "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")


_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def parse_env(pairs: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """``--env KEY=VALUE`` items as pairs. KEY must be a POSIX variable name on every path (one node or many):
    the printed command puts it before ``=`` unquoted, so a key such as ``A;B`` would be shell syntax there."""
    out = []
    for item in pairs:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UserError(f"--env {item!r}: expected KEY=VALUE")
        if not _ENV_KEY.match(key):
            raise UserError(f"--env {key!r}: a variable name is letters, digits and '_', not starting with a digit")
        if "\0" in value:
            raise UserError(f"--env {key}: the value holds a NUL byte, which no environment can carry")
        out.append((key, value))
    return tuple(out)


# Flags that shape a DeepSpeed config: the native strategies have no config to put them in.
DEEPSPEED_ONLY = {"zero": "--zero", "offload": "--offload", "offload_param": "--offload-param",
                  "nvme_path": "--nvme-path", "global_batch": "--global-batch", "train_steps": "--train-steps",
                  "ulysses": "--ulysses"}


def check_request(req: LaunchRequest) -> None:
    """Flags that contradict each other, or that the chosen strategy would silently ignore, stop the launch."""
    given = [flag for name, flag in {**_RENDER_FLAG_NAMES, **DEEPSPEED_ONLY}.items()
             if req.render_flags.get(name) is not None]
    if req.config:
        shaping = given + (["--preset"] if req.preset else []) + (["--set"] if req.sets else [])
        if shaping:
            raise UserError(f"--config uses {req.config} as is, so {shaping[0]} would be ignored: drop it, or drop "
                            "--config and let dsbench render the config from the flags (a value the config leaves "
                            "\"auto\" comes from the worker's flags after --)")
    if req.strategy != "deepspeed":
        ds_only = [flag for name, flag in DEEPSPEED_ONLY.items() if req.render_flags.get(name) is not None]
        ds_only += ["--config"] * bool(req.config) + ["--preset"] * bool(req.preset) + ["--set"] * bool(req.sets)
        if ds_only:
            raise UserError(f"{ds_only[0]} shapes a DeepSpeed config; --strategy {req.strategy} has none: use "
                            "--strategy deepspeed, or drop it")
    tp_only = [flag for name, flag in TORCH_TP_ONLY.items() if req.render_flags.get(name)]
    if tp_only and req.strategy != "torch_tp":
        raise UserError(f"{tp_only[0]} shards what DTensor tensor parallelism splits: it needs --strategy torch_tp "
                        f"--tp N; --strategy {req.strategy} would ignore it")
    schedule = [name for name in ("pipeline_schedule", "virtual_stages") if req.render_flags.get(name)]
    if schedule and req.strategy not in trainspec.PIPELINED:
        own = " (DeepSpeed's pipeline engine runs its own 1F1B)" if req.strategy == "deepspeed" else ""
        raise UserError(f"--{schedule[0].replace('_', '-')} orders torch's pipeline stages: it needs --strategy "
                        f"{' or '.join(trainspec.PIPELINED)}; --strategy {req.strategy} would ignore it{own}")
    if req.ranks_here:
        check_local_ranks(req.num_gpus, "--num-gpus", gpus=req.local_gpus, memory_available=req.memory_available)
        _check_jit_arch(req, req.strategy == "deepspeed")
        _check_jit_lock(req, req.strategy == "deepspeed")
    if not req.config:  # a config's own fp16 is a finding of its validation (ValidateContext.cpu_ranks)
        check_precision(req.render_flags.get("precision") or "fp32", cpu=req.cpu)
    if not is_valid_hostname(req.master_addr):
        raise UserError(f"--master-addr {req.master_addr!r}: give a hostname or an IP address")
    # worker flags that would replace what the launch decides (the config rendered, validated and recorded)
    for arg in req.script_args:
        flag = arg.split("=", 1)[0]
        if flag in _LAUNCH_DECIDES:
            raise UserError(f"-- {flag}: {_LAUNCH_DECIDES[flag]}")


WORKER_ONLY = (*TORCH_TP_ONLY, "recompute", "dp_shard", "pipeline_schedule", "virtual_stages")
"""dsbench launch flags that are run-description fields only (no DeepSpeed config key)."""
_RENDERS = ("dsbench launch renders and validates the DeepSpeed config itself; launch your own with --config FILE "
            "instead")
_LAUNCH_DECIDES = {
    "--deepspeed_config": _RENDERS, "--deepspeed-config": _RENDERS,
    "--strategy": "give --strategy before --, to dsbench launch",
    "--run-json": "dsbench launch writes the run description itself",
}


# The render flags launch takes, by option name (the deepspeed-only ones are in DEEPSPEED_ONLY).
_RENDER_FLAG_NAMES = {"precision": "--precision", "micro_batch": "--micro-batch", "grad_accum": "--grad-accum",
                      "pipeline_stages": "--pipeline-stages", "tp": "--tp", "grad_clip": "--grad-clip", "lr": "--lr",
                      "warmup_steps": "--warmup-steps"}


def nvme_folders(config: Mapping[str, Any] | None, named_in: str = "", typed: str | None = None
                 ) -> list[tuple[str, str]]:
    """The folders a DeepSpeed config's NVMe offload swaps to, each with the key that names it (after
    ``named_in``, the file that holds the config, where that is not the file the user gave), or, for the path the
    launch rendered from ``--nvme-path`` (``typed``), that flag, once for both sections."""
    folders: dict[tuple[str, str], None] = {}
    for section in ("offload_optimizer", "offload_param"):
        offload = ((config or {}).get("zero_optimization") or {}).get(section)
        path = offload.get("nvme_path") if isinstance(offload, dict) and offload.get("device") == "nvme" else None
        if isinstance(path, str) and path:
            key = "--nvme-path" if path == typed else f"{named_in}zero_optimization.{section}.nvme_path"
            folders[key, path] = None
    return list(folders)


def check_paths_here(dataset: str | None, nvme: list[tuple[str, str]], cwd: str, local: bool) -> list[str]:
    """The paths the ranks read or write, where every rank runs on this machine (``local``; across nodes they are
    the nodes' paths, checked there): a --dataset that no rank could read (missing, a FIFO, no data file, empty) is
    refused before the ranks start, and so is an NVMe offload folder (``nvme``: key, path) at or under a file,
    where DeepSpeed's ranks would fail to create it; one that does not exist gets a note, since the ranks create it
    (deepspeed 0.19.8 swap_tensor: os.makedirs of nvme_path/zero_stage_3, as root where they run as root) and swap
    on the disk that holds its nearest existing parent, which may be no NVMe (a cluster config's /local_nvme on a
    workstation: the root disk)."""
    if not local:
        return []
    if dataset:
        dataset_files(dataset, cwd)
    notes = []
    for key, path in nvme:
        held, where = _nearest_existing(key, path, cwd)
        if not where.is_dir():  # a regular file, or a device or FIFO (/dev/null/x)
            what = "a file" if where.is_file() else "a device or FIFO"
            raise UserError(f"{key} {path}: {held} is {what}, not a folder, so DeepSpeed's ranks cannot make their "
                            "swap folder there: give a folder")
        if held != Path(path):
            notes.append(f"{key} {path} does not exist on this machine: the ranks will create it and swap on the "
                         f"disk that holds {held}")
    return notes


def _nearest_existing(key: str, path: str, cwd: str) -> tuple[Path, Path]:
    """The nearest existing place at or above ``path``, as the user spelled it and as the ranks will find it (a
    relative path is their cwd's); a path no system can hold is refused by ``key``."""
    if "\0" in path:
        raise UserError(f"{key}: {path!r} holds a NUL byte, which no path can: give a folder")
    spelled, absolute = (Path(path), *Path(path).parents), (Path(cwd, path), *Path(cwd, path).parents)
    try:
        return next((given, place) for given, place in zip(spelled, absolute, strict=False) if place.exists())
    except OSError as exc:  # a name longer than the file system allows, a path that loops
        raise UserError(f"{key} {path[:60]}{'...' if len(path) > 60 else ''}: {exc.strerror}: give a folder") from None


def check_yaml_here(req: LaunchRequest, config: Mapping[str, Any], processes: int, machines: int,
                    ds_file: tuple[str | None, Any]) -> None:
    """A user's accelerate YAML against this machine: fp16 (its mixed_precision, unless --precision replaces it) on
    CPU ranks, and, on one machine, its processes against what the machine holds; the DeepSpeed file it names
    (``ds_file``: its path and contents) as a ``--config`` is, for what the ranks would stop at (device_ops.py)."""
    typed = req.render_flags.get("precision")
    check_precision(str(typed or config.get("mixed_precision") or "fp32"), cpu=req.cpu,
                    what="--precision fp16" if typed else f"{req.accelerate_config}: mixed_precision fp16")
    if not req.hostfile and machines == 1:  # every process on this machine
        check_local_ranks(processes, "--num-processes" if req.num_processes else f"{req.accelerate_config}: "
                          "num_processes", gpus=req.local_gpus, memory_available=req.memory_available)
    _check_jit_arch(req, req.ranks_here and config.get("distributed_type") == "DEEPSPEED")
    _check_jit_lock(req, req.ranks_here and config.get("distributed_type") == "DEEPSPEED")
    path, ds_config = ds_file
    findings = rank_findings(ds_config, req.cpu, req.ranks_here) if path and isinstance(ds_config, dict) else []
    if has_errors(findings):
        raise InvalidConfig(refused_for_launch(str(path), findings))


def _check_jit_arch(req: LaunchRequest, deepspeed_here: bool) -> None:
    """GPU ranks of DeepSpeed on this machine inherit this shell's TORCH_CUDA_ARCH_LIST, which DeepSpeed's JIT
    builder must parse: refused before they start, as each would refuse it (worker/setup.check_cuda_arch_list)."""
    problem = cuda_arch_list_problem(req.cuda_arch_list) if deepspeed_here and not req.cpu else None
    if problem:
        raise UserError(problem)


def _check_jit_lock(req: LaunchRequest, deepspeed_here: bool) -> None:
    """DeepSpeed's CPU ranks here would each wait forever on a stale build lock of its comm op: refused before they
    start, in the line a rank refuses it with (worker/jitbaton.py)."""
    if deepspeed_here and req.cpu and req.stale_shm_locks:
        raise UserError(stale_lock_message([Path(lock) for lock in req.stale_shm_locks]))


def strategy_and_launcher(strategy: str | None, launcher: str | None, accelerate_config: str | None) -> tuple[str, str]:
    """The worker strategy and the launcher as typed, or their defaults. ``--accelerate-config``: the YAML picks the
    engine and ``accelerate launch`` runs it, so a typed --strategy or another --launcher is refused."""
    if not accelerate_config:
        return strategy or "deepspeed", launcher or "deepspeed"
    if strategy:
        raise UserError(f"--accelerate-config: the YAML's distributed_type picks the engine, so --strategy {strategy} "
                        "would be ignored: drop it")
    if launcher not in (None, "accelerate"):
        raise UserError(f"--accelerate-config runs `accelerate launch`; drop --launcher {launcher}")
    return "auto", "accelerate"
