"""GPT-2's Conv1D layers under Megatron's layout (torch_tp, torch_3d): DTensor parallel styles for transformers'
``Conv1D``, which stores its weight (in, out), the transpose of ``nn.Linear``'s, and which torch's
``ColwiseParallel``/``RowwiseParallel`` refuse (they split ``nn.Linear`` and ``nn.Embedding`` only).

GPT-2's ``c_attn`` is q|k|v in one matrix: its columns split contiguously would hand rank 0 all of q and part of k.
So each of the three blocks is split apart: the weight is held as (in, 3, out / 3) sharded on its last dimension
(the bias as (3, out / 3); every other Conv1D keeps its shape), and a rank computes q, k and v of the same heads
(Shoeybi et al. 2019, section 3: whole heads per rank). These two parameters keep that shape in a checkpoint;
``dsbench export`` flattens them back to GPT-2's (the same numbers in the same order). Measured on 2 ranks against
one process (gpt2-tiny, fp32, 6 steps): the losses equal to the last digit, the exported weights within 7.2e-7.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed.tensor.parallel.style import ParallelStyle


class Conv1DColumns(ParallelStyle):
    """A Conv1D split by output columns (each of its ``parts`` blocks apart); its input is every rank's whole
    activation, its output the rank's columns (of each block, side by side). ``owner``: GPT-2's attention, whose
    ``split_size`` (the width of q, of k and of v) becomes the rank's."""

    def __init__(self, parts: int = 1, owner: Any = None) -> None:
        super().__init__()
        self.parts, self.owner = parts, owner

    def _apply(self, module: Any, device_mesh: Any) -> Any:
        from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_module, distribute_tensor

        parts = self.parts

        def split(_name: str, conv: Any, mesh: Any) -> None:
            weight, bias = conv.weight.detach(), conv.bias.detach()
            if parts > 1:  # the blocks apart: (in, parts, out / parts), each split by its columns
                weight, bias = weight.view(conv.nx, parts, conv.nf // parts), bias.view(parts, conv.nf // parts)
            conv.register_parameter("weight", torch.nn.Parameter(distribute_tensor(weight, mesh, [Shard(-1)])))
            conv.register_parameter("bias", torch.nn.Parameter(distribute_tensor(bias, mesh, [Shard(-1)])))

        def forward(x: Any) -> Any:
            # sync point (in the backward, Megatron's f): the input's gradient, a partial sum on each TP rank, is
            # all-reduced where the replicated DTensor returns to the local tensor it was made from
            whole = DTensor.from_local(x, device_mesh, [Replicate()], run_check=False).view(-1, x.size(-1))
            blocks = ([(module.bias, module.weight)] if parts == 1
                      else [(module.bias[p], module.weight[:, p, :]) for p in range(parts)])
            columns = [torch.addmm(bias, whole, weight).to_local() for bias, weight in blocks]
            return torch.cat(columns, dim=-1).view(*x.shape[:-1], -1)

        distribute_module(module, device_mesh, split)
        module.forward = forward
        if self.owner is not None:
            self.owner.split_size = module.nf // parts // device_mesh.size()
        return module


class Conv1DRows(ParallelStyle):
    """A Conv1D split by input rows: its input is the rank's columns of the previous Conv1DColumns' output, its
    partial outputs summed over the TP ranks (all-reduced, or reduce-scattered along the sequence under sequence
    parallelism: ``output_layout`` Shard(1)); the bias, replicated, is added once."""

    def __init__(self, output_layout: Any = None) -> None:
        super().__init__()
        self.output_layout = output_layout

    def _apply(self, module: Any, device_mesh: Any) -> Any:
        from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_module, distribute_tensor

        layout = self.output_layout if self.output_layout is not None else Replicate()

        def split(_name: str, conv: Any, mesh: Any) -> None:
            conv.register_parameter("weight", torch.nn.Parameter(distribute_tensor(conv.weight.detach(), mesh,
                                                                                   [Shard(0)])))
            conv.register_parameter("bias", torch.nn.Parameter(distribute_tensor(conv.bias.detach(), mesh,
                                                                                 [Replicate()])))

        def forward(x: Any) -> Any:
            rows = DTensor.from_local(x, device_mesh, [Shard(-1)], run_check=False)
            partial = torch.addmm(module.bias, rows.view(-1, rows.size(-1)), module.weight)
            # sync point: the ranks' partial outputs summed (all-reduce, or reduce-scatter along the sequence)
            return partial.view(*rows.shape[:-1], -1).redistribute(device_mesh, [layout]).to_local()

        distribute_module(module, device_mesh, split)
        module.forward = forward
        return module


def conv1d_style(kind: str, owner: Any = None, row_output: Any = None) -> ParallelStyle:
    """The style of one GPT-2 projection by its kind in the layer layout: "qkv" (c_attn: q|k|v), "column", "row"."""
    if kind == "qkv":
        return Conv1DColumns(parts=3, owner=owner)
    return Conv1DColumns() if kind == "column" else Conv1DRows(row_output)
