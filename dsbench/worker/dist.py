"""Process-group set-up and the worker's only collectives: gloo on CPU, NCCL on GPU.

Every tensor handed to a collective lives on this rank's device (:class:`Collectives` checks it):
NCCL process groups have no CPU backend, so a CPU tensor there fails at the first collective. Under
a launcher the process group is initialised at every world size, 1 included, so a single-GPU run goes
through the same NCCL code as a multi-GPU one; only a bare ``python -m dsbench.train`` has no group.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Launchers that do not export torch's names: Open MPI and SLURM (mapped to RANK/WORLD_SIZE/LOCAL_RANK).
_ALIASES = {
    "RANK": ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"),
    "WORLD_SIZE": ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"),
    "LOCAL_RANK": ("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"),
}


@dataclass(frozen=True)
class DistInfo:
    """This process's place in the job."""

    rank: int
    world_size: int
    local_rank: int
    device: str
    """``cpu`` or ``cuda:N``: where this rank's tensors, and every collective's tensors, live."""
    backend: str
    process_group: bool = False
    """True when a torch.distributed process group is initialised (always under a launcher)."""

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def launched() -> bool:
    """True when a launcher started this process: torchrun, deepspeed, accelerate, Open MPI and SLURM all
    export a rank (a MASTER_ADDR left in a user's shell is not enough)."""
    return any(name in os.environ for name in ("RANK", *_ALIASES["RANK"]))


def env_rank() -> tuple[int, int, int]:
    """(rank, world_size, local_rank) from the environment (1 process when unset)."""
    values = {}
    for name, aliases in _ALIASES.items():
        raw = next((os.environ[k] for k in (name, *aliases) if k in os.environ), None)
        values[name] = int(raw) if raw is not None else (1 if name == "WORLD_SIZE" else 0)
    return values["RANK"], values["WORLD_SIZE"], values["LOCAL_RANK"]


def use_cpu() -> bool:
    """CPU ranks when asked (DSBENCH_DEVICE / DS_ACCELERATOR=cpu) or when CUDA is absent."""
    import torch

    forced = os.environ.get("DSBENCH_DEVICE") == "cpu" or os.environ.get("DS_ACCELERATOR") == "cpu"
    return forced or not torch.cuda.is_available()


def quiet_renamed_collectives() -> None:
    """Silence torch's FutureWarning for the collectives' old names (``all_gather_into_tensor``,
    ``reduce_scatter_tensor``, ...). DeepSpeed 0.19 and FSDP2 (torch 2.13) still call them; the warning names a
    call the user cannot change, once per call site and rank (every step under calibrate's loops)."""
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning, message=r".*is deprecated\. Please use `torch\.distri")


def init(strategy: str, timeout_s: float = 600.0) -> DistInfo:
    """Pick this rank's device and, under a launcher, join the process group (world size 1 included)."""
    import torch
    import torch.distributed as dist

    quiet_renamed_collectives()
    group = launched()
    rank, world, local_rank = env_rank()
    for name, value in (("RANK", rank), ("WORLD_SIZE", world), ("LOCAL_RANK", local_rank)):
        os.environ.setdefault(name, str(value))  # SLURM/MPI names mapped for torch's env:// rendezvous
    cpu = use_cpu()
    device = "cpu" if cpu else f"cuda:{local_rank}"
    backend = "gloo" if cpu else "nccl"
    if not cpu:
        torch.cuda.set_device(local_rank)  # NCCL and all_gather_object use the current device
    if (group or world > 1) and not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29500")
        timeout = datetime.timedelta(seconds=timeout_s)
        if strategy == "deepspeed":
            import deepspeed

            deepspeed.init_distributed(dist_backend=backend, timeout=timeout)
            if cpu:
                release_deepspeed_shm(rank)
        else:
            extra = {} if cpu else {"device_id": torch.device(device)}  # binds NCCL to this rank's GPU
            dist.init_process_group(backend=backend, timeout=timeout, **extra)
    elif strategy not in ("single", "deepspeed") and not dist.is_initialized():
        # `python -m dsbench.train --strategy ddp` without a launcher: DDP, FSDP2 and the torch pipelines need a
        # process group even of one rank; an in-process store needs no port (DeepSpeed makes its own)
        dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1)
    return DistInfo(rank=rank, world_size=world, local_rank=local_rank, device=device, backend=backend,
                    process_group=dist.is_initialized())


SHM_DIR = Path("/dev/shm")


def deepspeed_shm_name(rank: int) -> str:
    """The shared-memory workspace DeepSpeed's CPU comm op makes for ``rank`` (DeepSpeed 0.19.8,
    csrc/cpu/comm/shm.cpp ``shm_initialize``: ``deepspeed_allreduce_buffer_{uid}_{MASTER_ADDR}_{MASTER_PORT}_{rank}``,
    2 x 1 MiB + 2 x 32 MiB; made only when every rank is local, LOCAL_SIZE == world size)."""
    return (f"deepspeed_allreduce_buffer_{os.getuid()}_{os.environ.get('MASTER_ADDR', '')}_"
            f"{os.environ.get('MASTER_PORT', '')}_{rank}")


def release_deepspeed_shm(rank: int) -> None:
    """Remove this rank's DeepSpeed shared-memory workspace name once every rank has mapped it.

    DeepSpeed never unlinks it (``shared_close`` is never called), so each CPU run would leave ~69 MB per
    rank in /dev/shm, which is RAM: a test suite of a hundred runs filled the machine. ``init_distributed``
    returns only after this rank has mapped every peer's workspace; after the barrier every rank has, and
    an unlinked name keeps its mappings valid until the processes exit.
    """
    import torch.distributed as dist

    dist.barrier()  # sync point: every rank has mapped every workspace (shm_initialize ran on all of them)
    (SHM_DIR / deepspeed_shm_name(rank)).unlink(missing_ok=True)


def process_group_facts() -> dict[str, Any]:
    """What the run header records of the process group (backend and size as torch reports them)."""
    import torch.distributed as dist

    if not dist.is_initialized():
        return {"initialized": False}
    return {"initialized": True, "backend": str(dist.get_backend()), "world_size": dist.get_world_size()}


class Collectives:
    """The worker's collectives, each a synchronisation point across ranks.

    Tensors must be on the rank's device: with NCCL a CPU tensor fails ("No backend type associated
    with device type cpu"), so :meth:`check` refuses any other device before torch is called. Without a
    process group (a bare single process) each collective returns what one rank would see.
    """

    def __init__(self, info: DistInfo) -> None:
        import torch

        self.device = torch.device(info.device)
        self.world_size = info.world_size

    def check(self, tensor: Any) -> None:
        if tensor.device != self.device:
            raise RuntimeError(f"collective given a tensor on {tensor.device}, but this rank's device is "
                               f"{self.device} (an NCCL process group has no CPU backend)")

    def all_gather(self, tensor: Any) -> Any:
        """Stack every rank's ``tensor`` (same shape on all ranks) into [world_size, *shape]: a sync point."""
        import torch
        import torch.distributed as dist

        self.check(tensor)
        if not dist.is_initialized():
            return tensor.unsqueeze(0)
        parts = [torch.empty_like(tensor) for _ in range(self.world_size)]
        for part in parts:
            self.check(part)
        dist.all_gather(parts, tensor)
        return torch.stack(parts)

    def barrier(self, group: Any = None) -> None:
        """Wait for every rank of ``group`` (default: all): an all-reduce of one element on the rank's device (a
        sync point)."""
        import torch
        import torch.distributed as dist

        if not dist.is_initialized():
            return
        token = torch.zeros(1, device=self.device)
        self.check(token)
        dist.all_reduce(token, group=group)

    def all_gather_into_(self, out: Any, part: Any, group: Any = None) -> Any:
        """Concatenate every rank's ``part`` into ``out`` (one flat tensor; FSDP's and ZeRO's parameter gather):
        a sync point within ``group``."""
        import torch.distributed as dist

        self.check(out)
        self.check(part)
        # torch 2.13 renamed it all_gather_single (the old name warns on every call)
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        gather(out, part, group=group)
        return out

    def reduce_scatter_(self, out: Any, full: Any, group: Any = None) -> Any:
        """Sum ``full`` over ``group`` and keep this rank's slice in ``out`` (FSDP's and ZeRO's gradient
        reduction): a sync point within ``group``."""
        import torch.distributed as dist

        self.check(out)
        self.check(full)
        reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor  # renamed in 2.13
        reduce_scatter(out, full, group=group)
        return out

    def send(self, tensor: Any, dst: int, group: Any = None) -> None:
        """Send ``tensor`` to global rank ``dst``; returns when it is handed over (pairs with :meth:`recv`)."""
        import torch.distributed as dist

        self.check(tensor)
        dist.send(tensor, dst=dst, group=group)

    def recv(self, tensor: Any, src: int, group: Any = None) -> Any:
        """Receive into ``tensor`` from global rank ``src``: waits until it has arrived (a sync point of the pair)."""
        import torch.distributed as dist

        self.check(tensor)
        dist.recv(tensor, src=src, group=group)
        return tensor

    def all_reduce_(self, tensor: Any, group: Any = None) -> Any:
        """Sum ``tensor`` in place over ``group`` (default: every rank): a sync point within the group."""
        import torch.distributed as dist

        self.check(tensor)
        if dist.is_initialized():
            dist.all_reduce(tensor, group=group)
        return tensor

    def broadcast_(self, tensor: Any, src: int, group: Any = None) -> Any:
        """Overwrite ``tensor`` in place with global rank ``src``'s copy (a sync point within ``group``)."""
        import torch.distributed as dist

        self.check(tensor)
        if dist.is_initialized():
            dist.broadcast(tensor, src=src, group=group)
        return tensor

    def all_gather_object(self, value: object) -> list[object]:
        """Gather one picklable value from every rank (a sync point; torch pickles it into a tensor on the
        current CUDA device under NCCL, which :func:`init` set to this rank's GPU)."""
        import torch.distributed as dist

        if not dist.is_initialized():
            return [value]
        out: list[object] = [None] * self.world_size
        dist.all_gather_object(out, value)
        return out


def shutdown() -> None:
    """Leave the process group cleanly."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
