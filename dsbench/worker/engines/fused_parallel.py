"""Phi-3's fused projections under Megatron's layout (torch_tp, torch_3d): a DTensor parallel style for an
``nn.Linear`` whose outputs are blocks side by side, which torch's ``ColwiseParallel`` would split contiguously
(rank 0 would get all of q and part of k, or all of gate).

- ``qkv_proj`` (transformers' Phi3Attention: q, then k, then v, with ``num_key_value_heads`` k and v heads and
  ``G = heads / kv_heads`` query heads sharing each) is held as (kv_heads, G + 2, head_dim, in): for each key/value
  head, its G query heads (HF's ``repeat_kv`` gives query head h the key/value head h // G, so they are contiguous
  in q), its k head and its v head. Split over the key/value heads (``Shard(0)``), a rank holds whole query groups
  with their own k and v: Megatron's whole heads per rank (Shoeybi et al. 2019, section 3) under grouped-query
  attention as under multi-head attention (G = 1). Its attention module gets the rank's head counts.
- ``gate_up_proj`` (Phi3MLP: gate, then up) is held as (2, intermediate, in), each block split by its rows
  (``Shard(1)``), so a rank's gate and up columns are the same ones.

The held shapes do not depend on the tensor-parallel degree, so a checkpoint resumes on any ``--tp`` of 2 or more;
``dsbench export`` puts the rows back in transformers' order (worker/export.as_transformers_holds).
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch.distributed.tensor.parallel.style import ParallelStyle

from dsbench.errors import UserError


def held_qkv(weight: Any, kv_heads: int, head_dim: int) -> Any:
    """qkv_proj's (q + 2·kv, in) weight as (kv_heads, G + 2, head_dim, in): each key/value head's query heads, then
    its k and its v (the inverse: :func:`transformers_qkv`)."""
    inputs = weight.shape[-1]
    q, k, v = weight.split([weight.shape[0] - 2 * kv_heads * head_dim, kv_heads * head_dim, kv_heads * head_dim])
    groups = q.view(kv_heads, -1, head_dim, inputs)  # query head h in group h // G
    return torch.cat([groups, k.view(kv_heads, 1, head_dim, inputs), v.view(kv_heads, 1, head_dim, inputs)], dim=1)


def transformers_qkv(held: Any) -> Any:
    """:func:`held_qkv`'s layout back to transformers' (q, then k, then v; the same numbers)."""
    inputs, per = held.shape[-1], held.shape[1] - 2
    return torch.cat([held[:, :per].reshape(-1, inputs), held[:, per].reshape(-1, inputs),
                      held[:, per + 1].reshape(-1, inputs)])


class FusedColumns(ParallelStyle):
    """An ``nn.Linear`` (no bias: Phi-3's) whose output blocks are each split by rows over the TP ranks; its input is
    every rank's whole activation, its output the rank's rows of each block, side by side in the block order the
    module expects. ``kind``: "qkv" (``owner``: the attention, which gets the rank's head counts) or "gate_up"."""

    def __init__(self, kind: str, owner: Any = None) -> None:
        super().__init__()
        self.kind, self.owner = kind, owner

    def _apply(self, module: Any, device_mesh: Any) -> Any:
        from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_module, distribute_tensor

        qkv = self.kind == "qkv"
        kv, head_dim = (self.owner.num_key_value_heads, self.owner.head_dim) if qkv else (0, 0)

        def split(_name: str, linear: Any, mesh: Any) -> None:
            if linear.bias is not None:  # transformers' Phi-3 has none; the forward below would leave it out
                raise UserError(f"--tp (torch_tp, torch_3d) splits Phi-3's fused {self.kind} projection without a "
                                "bias; this model's has one: drop --tp")
            weight = linear.weight.detach()
            held, dim = ((held_qkv(weight, kv, head_dim), 0) if qkv
                         else (weight.view(2, weight.shape[0] // 2, weight.shape[1]), 1))
            linear.register_parameter("weight", torch.nn.Parameter(distribute_tensor(held, mesh, [Shard(dim)])))

        def forward(x: Any) -> Any:
            # sync point (in the backward, Megatron's f): the input's gradient, a partial sum on each TP rank, is
            # all-reduced where the replicated DTensor returns to the local tensor it was made from
            whole = DTensor.from_local(x, device_mesh, [Replicate()], run_check=False)
            w = module.weight
            blocks = ([w[:, :-2].flatten(0, 2), w[:, -2].flatten(0, 1), w[:, -1].flatten(0, 1)] if qkv
                      else [w[0], w[1]])
            return torch.cat([torch.nn.functional.linear(whole, block).to_local() for block in blocks], dim=-1)

        distribute_module(module, device_mesh, split)
        module.forward = forward
        if qkv:
            _rank_heads(self.owner, device_mesh.size())
        return module


def _rank_heads(attention: Any, tp: int) -> None:
    """Phi3Attention slices its qkv output by head counts read from its config (q ends at ``num_attention_heads x
    head_dim``): it gets a config of its own with the rank's counts, and the rank's key/value head count."""
    attention.config = copy.copy(attention.config)
    attention.config.num_attention_heads //= tp
    attention.config.num_key_value_heads //= tp
    attention.num_key_value_heads //= tp
