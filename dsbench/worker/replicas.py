"""Whether the data-parallel replicas hold the same model after the last step.

Every strategy that keeps copies of the parameters (DDP, ZeRO-0/1/2, the data-parallel ranks of a pipeline stage or a
tensor-parallel shard, HSDP's replicas) must end each step with bit-identical copies: the ranks average the same
gradients and step the same optimizer. A copy that differs is a bug no loss curve shows until it diverges (Megatron-LM
checks the same, ``check_param_hashes_across_dp_replicas``). Each engine names the process group its copy is
replicated over and the tensors it holds (``replicas()``; None where nothing is replicated: one rank, ZeRO-3, FSDP);
each rank hashes its tensors' bytes, and rank 0 compares the hashes group by group.
"""

from __future__ import annotations

import hashlib
from typing import Any

from dsbench.worker.state_bytes import local_shard


def digest(tensors: Any) -> str:
    """SHA-256 of the tensors' bytes in order (a DTensor's local shard; any dtype, read as raw bytes)."""
    import torch

    sha = hashlib.sha256()
    for tensor in tensors:
        sha.update(local_shard(tensor).detach().to("cpu").contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return sha.hexdigest()


def verdict(pairs: list[tuple[tuple[int, ...] | None, str | None]]) -> dict[str, Any] | None:
    """The ``replicas`` record from every rank's (replica group as its global ranks, digest), in rank order; None
    when no group holds more than one copy. Pure: the comparison only."""
    groups: dict[tuple[int, ...], list[tuple[int, str]]] = {}
    for rank, (key, value) in enumerate(pairs):
        if key is not None and value is not None and len(key) > 1:
            groups.setdefault(key, []).append((rank, value))
    if not groups:
        return None
    differ = sorted(rank for members in groups.values() for rank, value in members if value != members[0][1])
    return {"type": "replicas", "groups": len(groups), "ranks_per_group": max(len(key) for key in groups),
            "agree": not differ, "differing_ranks": differ}


def replica_record(engine: Any, comm: Any) -> dict[str, Any] | None:
    """Every rank calls this once after its last step (outside the measured window); rank 0's answer is the run's
    ``replicas`` record."""
    import torch.distributed as dist

    if not dist.is_initialized() or comm.world_size == 1:
        return None
    found = engine.replicas() if hasattr(engine, "replicas") else None
    key, value = None, None
    if found is not None:
        group, tensors = found
        key = tuple(dist.get_process_group_ranks(group if group is not None else dist.group.WORLD))
        value = digest(tensors)
    # sync point: every rank's replica group and digest, gathered over the whole world
    return verdict(comm.all_gather_object((key, value)))
