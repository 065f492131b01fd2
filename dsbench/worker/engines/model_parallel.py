"""Native PyTorch pipeline parallelism (``torch_pp``), and the gradient helpers that torch_tp and torch_3d share.

``torch_pp``: ``torch.distributed.pipelining`` stages cut by module from the HF model (tracing fails on HF rotary
models), GPipe, 1F1B or interleaved 1F1B schedule, micro-batches = gradient-accumulation steps, data parallelism
on top where the world allows. Interleaved, the model is cut into P x V chunks and rank r runs chunks r, r + P, ...,
r + (V-1)P (Narayanan et al. 2021 sec. 2.2): the embedding stays on rank 0's first chunk, the head on rank P-1's
last. Tensor parallelism (``torch_tp``) is engines/tensor_parallel.py; both compose in engines/three_d.py.

Every native model-parallel engine steps with torch AdamW and the same warm-up schedule as the other native
strategies; gradient clipping uses the norm over the whole model (every stage / every shard, each weight once), as
clip_grad_norm_ on an unsplit model does (:func:`clip_`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from dsbench.parallel import ParallelDims
from dsbench.trainspec import INTERLEAVED
from dsbench.worker.dcp_state import StageNames
from dsbench.worker.dist import Collectives
from dsbench.worker.engines.base import EngineOptions, TorchAdamWEngine
from dsbench.worker.engines.busy import BusyClock
from dsbench.worker.engines.loss_scale import LossScale
from dsbench.worker.engines.native import adamw, autocast
from dsbench.worker.pipe_split import Split, TokenEmbedding, causal_lm_loss, split_model, tied_head
from dsbench.worker.state_bytes import local_shard


def clip_(*, parts: list[Any], whole: list[Any], scale: list[Any], max_norm: float, comm: Collectives,
          group: Any) -> Any:
    """Scale ``scale`` so that the gradients' global 2-norm is at most ``max_norm``, as torch's clip_grad_norm_
    does (coefficient max_norm / (norm + 1e-6), capped at 1). The norm counts each weight once: ``parts`` are
    this rank's pieces of gradients spread over ``group`` (squares summed over it), ``whole`` are the same on
    every rank of it (counted once)."""
    total = torch.zeros((), dtype=torch.float32, device=comm.device)
    for g in parts:
        total += g.float().pow(2).sum()
    comm.all_reduce_(total, group)  # sync point: every rank's share of the squares
    for g in whole:
        total += g.float().pow(2).sum()
    return scale_to_norm_(total, scale, max_norm)


def scale_to_norm_(squares: Any, scale: list[Any], max_norm: float) -> Any:
    """Given the global sum of squared gradient elements, scale ``scale`` in place by torch's clip_grad_norm_
    coefficient, max_norm / (norm + 1e-6) capped at 1, and return the norm (before clipping)."""
    norm = squares.sqrt()
    coef = (max_norm / (norm + 1e-6)).clamp(max=1.0)
    for g in scale:
        g.mul_(coef.to(g.dtype))
    return norm


def average_over_data_parallel(grads: list[Any], comm: Collectives, group: Any, dp: int) -> None:
    """Average gradients over the data-parallel replicas: one all-reduce of all of them, flattened."""
    from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

    if dp == 1 or not grads:
        return
    flat = _flatten_dense_tensors(grads)
    comm.all_reduce_(flat, group)  # sync point across replicas
    flat.div_(dp)
    for grad, averaged in zip(grads, _unflatten_dense_tensors(flat, grads), strict=True):
        grad.copy_(averaged)


class TiedHead(nn.Module):
    """The LM head of a tied model on the last stage: logits through its copy of the token embedding."""

    def __init__(self, embed: TokenEmbedding) -> None:
        super().__init__()
        self.embed = embed

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return tied_head(self.embed, hidden)


class Stage(nn.Module):
    """One pipeline stage: its layers in order, under autocast when training in bf16/fp16."""

    def __init__(self, layers: list[nn.Module], context: Any) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.context = context

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with self.context():
            for layer in self.layers:
                x = layer(x)
        return x


def stage_layers(split: Split, stage: int, stages: int) -> list[nn.Module]:
    """Stage ``stage`` of ``stages``: an equal share of the decoder blocks (earlier stages take the remainder),
    the embedding on the first stage, the final norm and the head on the last."""
    base, extra = divmod(len(split.blocks), stages)
    start = stage * base + min(stage, extra)
    layers: list[nn.Module] = list(split.blocks[start:start + base + (1 if stage < extra else 0)])
    if stage == 0:
        layers = [split.embed, *([split.positions] if split.positions else []), *layers]
    if stage == stages - 1:
        layers += [split.norm, TiedHead(split.embed) if split.tied else split.head]
    return layers


def _as_one(parts: list[Any]) -> Any:
    """A rank's stage modules as one module: the stage itself, or an interleaved rank's chunks in a list."""
    return parts[0] if len(parts) == 1 else nn.ModuleList(parts)


def schedule_class(schedule: str) -> Any:
    """torch's schedule class for a ``--pipeline-schedule`` value (the engine's, and calibrate's timing of them)."""
    from torch.distributed import pipelining

    return {"1f1b": pipelining.Schedule1F1B, "gpipe": pipelining.ScheduleGPipe,
            "interleaved": pipelining.ScheduleInterleaved1F1B,
            "interleaved-zb": pipelining.ScheduleInterleavedZeroBubble}[schedule]


class TorchPipelineEngine(TorchAdamWEngine):
    """One pipeline stage per rank (mesh pp x dp: DeepSpeed's rank layout). ``schedule.step`` runs every
    micro-batch; the tied embedding and data-parallel replicas are synchronised by hand; then AdamW steps.
    torch_3d (engines/three_d.py) is this engine on a (pp, dp, tp) mesh with its stages split by DTensor and
    sharded by FSDP2: it overrides :meth:`make_mesh`, :meth:`parallelize` and :meth:`reduce_and_clip`."""

    name = "torch_pp"

    def __init__(self, model: Any, options: EngineOptions, dist_info: Any, dims: ParallelDims,
                 schedule: str) -> None:
        import torch.distributed as dist
        from torch.distributed.pipelining import PipelineStage

        device = torch.device(dist_info.device)
        self.comm, self.options, self.dims = Collectives(dist_info), options, dims
        self.mesh = self.make_mesh(device.type)
        self.stage = self.mesh.get_local_rank("pp")
        self.pp_group = self.mesh.get_group("pp")
        # every other mesh coordinate as one column: the ranks that hold the same slice of each stage
        columns = self.mesh.mesh.reshape(dims.pp, -1)
        column = int((columns[self.stage] == dist.get_rank()).nonzero()[0])
        self.last_rank = int(columns[-1, column])  # the global rank whose stage computes this rank's loss
        split = split_model(model)
        chunks = options.virtual_stages if schedule in INTERLEAVED else 1  # they divide the layers: layout_check.py
        indices = [self.stage + k * dims.pp for k in range(chunks)]  # this rank's chunks, non-adjacent
        parts = [Stage(stage_layers(split, i, dims.pp * chunks), autocast(options, dist_info.device)).to(device)
                 for i in indices]
        # the checkpoint names each tensor as the model does (worker/dcp_state.py): matched before parallelize
        # swaps the parameters for DTensors (the stages' own keys stay)
        self.stage_names = StageNames.of(model, _as_one(parts))
        parts = self.parallelize(parts)
        self.module = _as_one(parts)
        self.tied = self._tied_copies(split, columns, column)
        kind = schedule_class(schedule)
        stages = [PipelineStage(part, i, dims.pp * chunks, device, group=self.pp_group)
                  for part, i in zip(parts, indices, strict=True)]
        self.busy = BusyClock(dist_info.device)  # compute time of this stage, for the bubble (CPU)
        for pipe_stage in stages:
            pipe_stage.forward_one_chunk = self.busy.wrap(pipe_stage.forward_one_chunk)
            pipe_stage.backward_one_chunk = self.busy.wrap(pipe_stage.backward_one_chunk)
            # zero-bubble schedules run each weight-gradient half on its own (never inside backward_one_chunk)
            pipe_stage.backward_weight_one_chunk = self.busy.wrap(pipe_stage.backward_weight_one_chunk)
        self.loss_scale = LossScale(options.precision, self.comm)
        self.schedule = kind(stages if chunks > 1 else stages[0], n_microbatches=options.grad_accum,
                             loss_fn=self._scaled_loss, scale_grads=True)
        self.schedule.step = self.busy.wrap(self.schedule.step, "span")
        self.optimizer, self.scheduler = adamw(self.module.parameters(), options)
        self.model, self.measure_states = self.module, False

    def _tied_copies(self, split: Split, columns: Any, column: int) -> tuple[Any, Any] | None:
        """The tied embedding matrix and the group of its two copies, on the first and last stage of each column
        (None elsewhere, and for an untied model or one stage). Collective: every rank makes every group."""
        import torch.distributed as dist

        if not split.tied or self.dims.pp == 1:
            return None
        groups = [dist.new_group([int(columns[0, c]), int(columns[-1, c])]) for c in range(columns.shape[1])]
        return (split.embed.embedding.weight, groups[column]) if self.stage in (0, self.dims.pp - 1) else None

    def _scaled_loss(self, output: Any, target: Any) -> Any:
        """The last stage's loss as its backward starts from it: times the fp16 loss scale (train_step divides the
        losses it reports by the same scale)."""
        return self.loss_scale.scaled(causal_lm_loss(output, target))

    def replicas(self) -> tuple[Any, Any] | None:
        """The ``dp`` ranks that hold the same pipeline stage."""
        return (self.mesh.get_group("dp"), list(self.module.parameters())) if self.dims.dp > 1 else None

    def make_mesh(self, device_type: str) -> Any:
        """The ranks as (pp, dp): rank = stage x dp + replica (:class:`ParallelDims`' order)."""
        from torch.distributed.device_mesh import init_device_mesh

        return init_device_mesh(device_type, (self.dims.pp, self.dims.dp), mesh_dim_names=("pp", "dp"))

    def parallelize(self, parts: list[Any]) -> list[Any]:
        """This rank's stage modules as they train (torch_pp: as built)."""
        return parts

    def train_step(self, batches: list[Any]) -> Any:
        full = torch.cat(batches)  # the schedule cuts it back into the same micro-batches
        first, last = self.stage == 0, self.stage == self.dims.pp - 1
        self.optimizer.zero_grad(set_to_none=True)
        losses: list[Any] = []
        scale = self.loss_scale.scale  # the losses below carry it
        self.schedule.step(*((full,) if first else ()), target=full if last else None,
                           losses=losses if last else None, return_outputs=False)
        grads = [p.grad for p in self.module.parameters() if p.grad is not None]
        second_copy = None
        if self.tied is not None:  # the embedding's gradient sums its use as input (first) and as head (last)
            self.comm.all_reduce_(local_shard(self.tied[0].grad), self.tied[1])  # sync point: first and last stage
            # the tied weight's second copy (last stage) is scaled but not counted twice in the norm
            second_copy = self.tied[0].grad if last and not first else None
        finite = self.loss_scale.unscale_(grads)
        self.reduce_and_clip(grads, second_copy)
        self.step_optimizer(finite)
        loss = torch.stack(losses).mean() / scale if last else torch.zeros((), device=self.comm.device)
        return self.comm.broadcast_(loss.detach(), src=self.last_rank, group=self.pp_group)

    def reduce_and_clip(self, grads: list[Any], second_copy: Any) -> None:
        """Average the gradients over the data-parallel replicas, then clip them by the norm over every stage."""
        average_over_data_parallel(grads, self.comm, self.mesh.get_group("dp"), self.dims.dp)
        if self.options.grad_clip > 0:
            self.grad_norm = clip_(parts=[g for g in grads if g is not second_copy], whole=[], scale=grads,
                                   max_norm=self.options.grad_clip, comm=self.comm, group=self.pp_group)

    def busy_seconds(self) -> tuple[float, float] | None:
        """This stage's (compute, schedule span) seconds in the last step (CPU), for the measured bubble."""
        return self.busy.take()
