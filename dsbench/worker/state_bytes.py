"""Count the model-state bytes a rank actually holds, from its tensors.

Categories follow the ZeRO paper: parameters, gradients, optimizer states (Adam moments) and
master weights (the fp32 copy DeepSpeed's ZeRO optimizers keep, at stages 1-3 even in fp32
training). A tensor counts the bytes its elements span, and bytes already counted (a view into a
flat buffer counted before, a gradient that aliases a partition) are not counted again: the total
is the size of the union of the byte ranges the state tensors cover. A sharded tensor (DeepSpeed
``ds_tensor``, FSDP2 ``DTensor``) counts only its local shard.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import Any


def local_shard(tensor: Any) -> Any:
    """A DTensor's local shard (a plain tensor as is): what this rank holds, counts and updates (the one helper the
    worker's engines, counters and replica check share)."""
    to_local = getattr(tensor, "to_local", None)
    return to_local() if callable(to_local) else tensor


class StateCounter:
    """Accumulates bytes per category over the union of byte ranges seen so far."""

    def __init__(self) -> None:
        self._covered: list[tuple[int, int]] = []  # merged, sorted [start, end) byte ranges
        self.bytes: dict[str, int] = {"params": 0, "grads": 0, "optimizer_states": 0, "master_weights": 0}
        self.devices: dict[str, dict[str, int]] = {k: {} for k in self.bytes}

    def _claim(self, start: int, end: int) -> int:
        """Add [start, end) to the covered ranges; return how many of its bytes were new."""
        new = end - start
        merged: list[tuple[int, int]] = []
        for lo, hi in self._covered:
            if hi < start or lo > end:
                merged.append((lo, hi))
                continue
            new -= max(0, min(hi, end) - max(lo, start))
            start, end = min(lo, start), max(hi, end)
        merged.append((start, end))
        self._covered = sorted(merged)
        return new

    def add(self, category: str, tensors: Iterable[Any]) -> None:
        """Count tensors under ``category`` (None and empty tensors are skipped)."""
        import torch

        for tensor in tensors:
            if not isinstance(tensor, torch.Tensor):
                continue
            tensor = local_shard(tensor)
            if tensor.numel() == 0 or tensor.data_ptr() == 0:
                continue
            start = tensor.data_ptr()
            size = self._claim(start, start + tensor.numel() * tensor.element_size())
            self.bytes[category] += size
            where = self.devices[category]
            where[tensor.device.type] = where.get(tensor.device.type, 0) + size

    def result(self) -> dict[str, Any]:
        """``{"params": n, ..., "total": n, "devices": {...}}``."""
        return {**self.bytes, "total": sum(self.bytes.values()), "devices": self.devices}


def optimizer_state_tensors(optimizer: Any) -> list[Any]:
    """Tensors in a torch optimizer's ``state`` (moments, step counters)."""
    return [t for state in getattr(optimizer, "state", {}).values() for t in state.values()]


def count_native(model: Any, optimizer: Any) -> dict[str, Any]:
    """Model states of a plain / DDP / FSDP2 model and its torch optimizer."""
    counter = StateCounter()
    params = list(model.parameters())
    counter.add("params", params)
    counter.add("grads", [p.grad for p in params])
    counter.add("optimizer_states", optimizer_state_tensors(optimizer))
    return counter.result()


def _tensor_list(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensor_list(v)]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensor_list(v)]
    return [value]


def count_deepspeed(engine: Any) -> dict[str, Any]:
    """Model states held by a DeepSpeed engine (ZeRO 0-3, offloaded tensors included)."""
    counter = StateCounter()
    params = list(engine.module.parameters())
    # ZeRO-3 keeps each parameter's partition in ds_tensor; p.data is empty unless persistent/gathered.
    counter.add("params", [getattr(p, "ds_tensor", None) for p in params])
    counter.add("params", params)
    zero = engine.optimizer
    masters = _tensor_list([getattr(zero, name, []) for name in
                            ("single_partition_of_fp32_groups", "fp32_partitioned_groups_flat")])
    counter.add("grads", [p.grad for p in params])
    counter.add("grads", _tensor_list(getattr(zero, "averaged_gradients", {})))
    counter.add("grads", [getattr(zero, "grad_partitions_flat_buffer", None)])
    counter.add("grads", [getattr(m, "grad", None) for m in masters])
    counter.add("master_weights", masters)
    inner = getattr(zero, "optimizer", zero)
    counter.add("optimizer_states", optimizer_state_tensors(inner))
    return counter.result()


def with_optimizer_states(before_step: dict[str, Any] | None, after: dict[str, Any]) -> dict[str, Any]:
    """The model states of a step: counted before the optimizer step (``before_step``, while the gradients exist)
    with the optimizer states counted after it (the moments exist only after the first step); ``after`` alone
    when nothing was counted before."""
    if before_step is None:
        return after
    merged = {**before_step, "optimizer_states": after["optimizer_states"],
              "devices": {**before_step["devices"], "optimizer_states": after["devices"]["optimizer_states"]}}
    merged["total"] = sum(merged[k] for k in ("params", "grads", "optimizer_states", "master_weights"))
    return merged


class _Saved:
    """A saved tensor as the autograd graph holds it for the backward: the graph drops this holder when it frees the
    saved tensor (after the backward that reads it, or when the graph itself is dropped)."""

    __slots__ = ("tensor", "__weakref__")

    def __init__(self, tensor: Any) -> None:
        self.tensor = tensor


class SavedActivations:
    """Bytes the autograd graph saves for the backward during one step: the unique storages that saved-tensor hooks
    see (``torch.autograd.graph.saved_tensors_hooks``), parameters excluded (a DTensor counts its local shard).
    Within one step a storage is counted once, so a tensor saved by several ops, or a view of one, is one storage;
    storages are told apart by address, so one that a backward freed and a later micro-batch's storage at the same
    address count once: exact for one micro-batch per step (or GPipe's order), fewer bytes than all otherwise.
    Not seen: what a checkpoint keeps outside the hooks (torch's selective activation checkpointing caches the
    outputs its policy saves; a non-reentrant checkpoint's own inputs are seen).

    :attr:`peak` is the most of those bytes the graph held at once: a storage is live from its first save until the
    graph has dropped every saved reference to it (``weakref.finalize`` on the holder the pack hook returns). Under a
    pipeline schedule it is the micro-batches in flight times one micro-batch's bytes."""

    def __init__(self, model: Any) -> None:
        import torch
        from torch.distributed._functional_collectives import AsyncCollectiveTensor

        self._graph, self._parameter, self._async = torch.autograd.graph, torch.nn.Parameter, AsyncCollectiveTensor
        self._params = {local_shard(p).untyped_storage().data_ptr() for p in model.parameters()}
        self._seen: dict[int, int] = {}
        self._live: dict[int, list[int]] = {}  # storage address -> [holders alive, bytes]
        self._live_bytes = 0
        self.peak = 0
        self._hooks: Any = None

    def _pack(self, tensor: Any) -> Any:
        # a weight saved by its matmul is a parameter (or a view of one): ZeRO-3 gathers it into a fresh buffer
        weight = isinstance(tensor, self._parameter) or isinstance(getattr(tensor, "_base", None), self._parameter)
        storage = self._held(local_shard(tensor)).untyped_storage()
        address = storage.data_ptr()
        if weight or address in self._params:
            return tensor
        self._seen[address] = max(self._seen.get(address, 0), storage.nbytes())
        live = self._live.setdefault(address, [0, storage.nbytes()])
        if live[0] == 0:  # a holder keeps its storage alive, so an address in use names one storage
            self._live_bytes += live[1]
            self.peak = max(self.peak, self._live_bytes)
        live[0] += 1
        # the holder keeps a detached alias (the same storage, no grad_fn): a saved output holding its own grad_fn
        # would close a cycle node -> saved variable -> holder -> tensor -> node that only a backward without
        # retain_graph breaks, and a zero-bubble schedule's input-gradient pass retains the graph
        holder = _Saved(tensor.detach())
        weakref.finalize(holder, self._release, address)
        return holder

    def _held(self, tensor: Any) -> Any:
        """The tensor whose storage holds ``tensor``'s bytes: a collective's output that torch has not waited on yet
        (``AsyncCollectiveTensor``, e.g. a row-parallel all-reduce's that OLMo-2's norm after attention saves) is a
        wrapper without storage around its buffer (``elem``); reading the buffer's address waits on nothing."""
        return tensor.elem if isinstance(tensor, self._async) else tensor

    def _release(self, address: int) -> None:
        live = self._live[address]
        live[0] -= 1
        if live[0] == 0:
            self._live_bytes -= live[1]
            del self._live[address]

    @staticmethod
    def _unpack(packed: Any) -> Any:
        return packed.tensor if isinstance(packed, _Saved) else packed

    def __enter__(self) -> SavedActivations:
        self._hooks = self._graph.saved_tensors_hooks(self._pack, self._unpack)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._hooks.__exit__(*exc)

    @property
    def bytes(self) -> int:
        return sum(self._seen.values())
