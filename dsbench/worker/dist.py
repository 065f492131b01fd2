"""Process-group set-up: rank/world from any launcher's environment, gloo on CPU, NCCL on GPU."""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass

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
    """``cpu`` or ``cuda:N``."""
    backend: str

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def env_rank() -> tuple[int, int, int]:
    """(rank, world_size, local_rank) from the environment (1 process when unset)."""
    values = {}
    for name, aliases in _ALIASES.items():
        raw = next((os.environ[k] for k in (name, *aliases) if k in os.environ), None)
        values[name] = int(raw) if raw is not None else (1 if name == "WORLD_SIZE" else 0)
    for name, value in values.items():
        os.environ.setdefault(name, str(value))
    return values["RANK"], values["WORLD_SIZE"], values["LOCAL_RANK"]


def use_cpu() -> bool:
    """CPU ranks when asked (DSBENCH_DEVICE / DS_ACCELERATOR=cpu) or when CUDA is absent."""
    import torch

    forced = os.environ.get("DSBENCH_DEVICE") == "cpu" or os.environ.get("DS_ACCELERATOR") == "cpu"
    return forced or not torch.cuda.is_available()


def init(strategy: str, timeout_s: float = 600.0) -> DistInfo:
    """Join the process group (none for a single process) and pick this rank's device."""
    import torch
    import torch.distributed as dist

    rank, world, local_rank = env_rank()
    cpu = use_cpu()
    device = "cpu" if cpu else f"cuda:{local_rank}"
    backend = "gloo" if cpu else "nccl"
    if not cpu:
        torch.cuda.set_device(local_rank)
    if world > 1 and not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29500")
        timeout = datetime.timedelta(seconds=timeout_s)
        if strategy == "deepspeed":
            import deepspeed

            deepspeed.init_distributed(dist_backend=backend, timeout=timeout)
        else:
            dist.init_process_group(backend=backend, timeout=timeout)
    return DistInfo(rank=rank, world_size=world, local_rank=local_rank, device=device, backend=backend)


def all_gather_object(value: object, world_size: int) -> list[object]:
    """Gather one picklable value from every rank (a synchronisation point)."""
    import torch.distributed as dist

    if world_size == 1 or not dist.is_initialized():
        return [value]
    out: list[object] = [None] * world_size
    dist.all_gather_object(out, value)
    return out


def mean_across_ranks(value: float, world_size: int) -> float:
    """Average a float over all ranks (all-reduce: a synchronisation point)."""
    import torch
    import torch.distributed as dist

    if world_size == 1 or not dist.is_initialized():
        return value
    tensor = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(tensor)
    return float(tensor.item()) / world_size


def shutdown() -> None:
    """Leave the process group cleanly."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
