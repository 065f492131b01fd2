"""torch_3d: tensor x pipeline x data parallelism in one run, composed as torchtitan composes them.

The ranks form a (pp, dp_replicate, dp_shard, tp) DeviceMesh in :class:`~dsbench.parallel.ParallelDims`' order
(tensor-parallel ranks consecutive, so a TP group stays inside a node; pipeline stages outermost), as torchtitan's
``ParallelDims.build_mesh`` orders [pp, dp_replicate, dp_shard, tp]. Each rank holds one pipeline stage
(torch_pp's split and schedules, :class:`TorchPipelineEngine`), and within it:

1. every decoder block's projections are split over ``tp`` with Megatron-LM's layout (:data:`MEGATRON_LAYER`:
   column-parallel q/k/v and gate/up, row-parallel o_proj and down_proj); embeddings, norms and the head stay whole;
2. then FSDP2 shards each block and the stage over the data-parallel ranks (``fully_shard`` after TP, so each
   parameter becomes a DTensor over (dp, tp), as in torchtitan's ``apply_fsdp``): ``--dp-shard S`` ranks split
   one copy and dp / S replicas keep copies (HSDP, a 2-D FSDP mesh); S = 1 is DDP. The pipeline schedule drives
   FSDP2 itself (torch's ``PipelineStage`` turns gradient sync on for the last micro-batch only).

The gradient norm for clipping counts each weight once: a local shard's squares are summed over the ranks that hold
other shards of it (tp for split weights, dp_shard for every FSDP-sharded one, pp for the stages), never over
ranks that hold copies (dp_replicate, or tp for the whole norms and embeddings).
"""

from __future__ import annotations

from typing import Any

import torch

from dsbench.worker.engines.model_parallel import TorchPipelineEngine, scale_to_norm_
from dsbench.worker.engines.tensor_parallel import megatron_layer_plan
from dsbench.worker.state_bytes import local_shard


class Torch3DEngine(TorchPipelineEngine):
    """torch_pp's stages, tensor-parallel inside, FSDP2/HSDP/DDP across replicas (``--dp-shard``)."""

    name = "torch_3d"

    def replicas(self) -> tuple[Any, Any] | None:
        """HSDP's (and DDP's, ``--dp-shard 1``) replicas: the ``dp_replicate`` ranks that hold the same shard of the
        same stage's tensor-parallel slice; fully sharded, none."""
        if self.dims.replicate == 1:
            return None
        return self.mesh.get_group("dp_replicate"), list(self.module.parameters())

    def make_mesh(self, device_type: str) -> Any:
        from torch.distributed.device_mesh import init_device_mesh

        dims = self.dims
        return init_device_mesh(device_type, (dims.pp, dims.replicate, dims.shard, dims.tp),
                                mesh_dim_names=("pp", "dp_replicate", "dp_shard", "tp"))

    def parallelize(self, parts: list[Any]) -> list[Any]:
        from torch.distributed.fsdp import fully_shard
        from torch.distributed.tensor.parallel import parallelize_module

        from dsbench.worker.pipe_split import BlockPipe

        blocks = [layer for part in parts for layer in part.layers if isinstance(layer, BlockPipe)]
        if self.dims.tp > 1:  # the model's family was checked when the run was resolved (layout_check.py)
            for block in blocks:
                parallelize_module(block.block, self.mesh["tp"], megatron_layer_plan(block.block))
        if self.dims.dp == 1:
            return parts
        # HSDP's mesh is 2-D (replicas, shards); a shard group of every dp rank is plain FSDP on one dimension
        dp_mesh = self.mesh["dp_shard"] if self.dims.replicate == 1 else self.mesh["dp_replicate", "dp_shard"]
        for block in blocks:
            fully_shard(block, mesh=dp_mesh, reshard_after_forward=self.options.fsdp_reshard)
        return [fully_shard(part, mesh=dp_mesh, reshard_after_forward=self.options.fsdp_reshard) for part in parts]

    def reduce_and_clip(self, grads: list[Any], second_copy: Any) -> None:
        """FSDP2 reduced the gradients over dp inside the schedule; clip by the norm that counts each weight once."""
        if self.options.grad_clip <= 0:
            return
        split = torch.zeros((), dtype=torch.float32, device=self.comm.device)
        whole = torch.zeros((), dtype=torch.float32, device=self.comm.device)
        for grad in grads:
            if grad is second_copy:
                continue
            squares = local_shard(grad).float().pow(2).sum()
            if _sharded_on(grad, "tp"):
                split += squares
            else:
                whole += squares
        if self.dims.tp > 1:
            self.comm.all_reduce_(split, self.mesh.get_group("tp"))  # sync point: the tp shards of split weights
        total = split + whole
        if self.dims.dp > 1 and self.dims.shard > 1:
            self.comm.all_reduce_(total, self.mesh.get_group("dp_shard"))  # sync point: FSDP's shards
        self.comm.all_reduce_(total, self.pp_group)  # sync point: every stage's weights
        self.grad_norm = scale_to_norm_(total, [local_shard(grad) for grad in grads], self.options.grad_clip)


def _sharded_on(tensor: Any, dim: str) -> bool:
    """A DTensor whose mesh dimension ``dim`` holds a Shard placement (different elements on each of its ranks)."""
    mesh = getattr(tensor, "device_mesh", None)
    names = getattr(mesh, "mesh_dim_names", None) or ()
    return dim in names and tensor.placements[names.index(dim)].is_shard()
