"""Native PyTorch model parallelism, each with data parallelism on top where the world allows.

- ``torch_pp``: ``torch.distributed.pipelining`` stages cut by module from the HF model (tracing fails on
  HF rotary models), GPipe, 1F1B or interleaved 1F1B schedule, micro-batches = gradient-accumulation steps.
  Interleaved, the model is cut into P x V chunks and rank r runs chunks r, r + P, ..., r + (V-1)P
  (Narayanan et al. 2021 sec. 2.2): the embedding stays on rank 0's first chunk, the head on rank P-1's last.
- ``torch_tp``: DTensor ``parallelize_module`` with Megatron-LM's layout on Llama-family models: q/k/v and
  gate/up column-parallel, o_proj and down_proj row-parallel, so each rank holds whole heads and one
  all-reduce per pair runs in forward (after the row-parallel matmul) and one in backward (before the
  column-parallel one). Embeddings, norms and the LM head stay replicated, unless:
  - ``--sequence-parallel`` (Korthikanti et al. 2022 sec. 4.2.2, as torchtitan applies it): between the blocks'
    parallel regions the residual stream is split along the sequence, the norms run on their shard
    (``SequenceParallel``), each region's input is all-gathered and each row-parallel output reduce-scattered
    instead of all-reduced;
  - ``--loss-parallel``: the LM head is column-parallel and its logits stay split by vocabulary into the
    cross-entropy (torch's ``loss_parallel``), so no rank holds the full logits.

Both step with torch AdamW and the same warm-up schedule as the other native strategies; gradient clipping
uses the norm over the whole model (every stage / every shard, each weight once), as clip_grad_norm_ on an
unsplit model does.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from dsbench.models import check_loss_parallel, check_megatron_tp
from dsbench.parallel import ParallelDims
from dsbench.trainspec import INTERLEAVED
from dsbench.worker.dist import Collectives
from dsbench.worker.engines.base import EngineOptions, TorchAdamWEngine
from dsbench.worker.engines.busy import BusyClock
from dsbench.worker.engines.native import adamw, autocast
from dsbench.worker.pipe_split import Split, TokenEmbedding, causal_lm_loss, split_model, tied_head


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
    """One pipeline stage: its layers in order, under autocast when training in bf16/fp16 on GPU."""

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
        parts = self.parallelize([Stage(stage_layers(split, i, dims.pp * chunks),
                                        autocast(options, dist_info.device)).to(device) for i in indices])
        self.module = parts[0] if chunks == 1 else nn.ModuleList(parts)
        self.tied: tuple[Any, Any] | None = None
        if split.tied and dims.pp > 1:  # the first and last stage of each column hold the embedding matrix
            groups = [dist.new_group([int(columns[0, c]), int(columns[-1, c])]) for c in range(columns.shape[1])]
            if self.stage in (0, dims.pp - 1):
                self.tied = (split.embed.embedding.weight, groups[column])
        kind = schedule_class(schedule)
        stages = [PipelineStage(part, i, dims.pp * chunks, device, group=self.pp_group)
                  for part, i in zip(parts, indices, strict=True)]
        self.busy = BusyClock(dist_info.device)  # compute time of this stage, for the bubble (CPU)
        for pipe_stage in stages:
            pipe_stage.forward_one_chunk = self.busy.wrap(pipe_stage.forward_one_chunk)
            pipe_stage.backward_one_chunk = self.busy.wrap(pipe_stage.backward_one_chunk)
            # zero-bubble schedules run each weight-gradient half on its own (never inside backward_one_chunk)
            pipe_stage.backward_weight_one_chunk = self.busy.wrap(pipe_stage.backward_weight_one_chunk)
        self.schedule = kind(stages if chunks > 1 else stages[0], n_microbatches=options.grad_accum,
                             loss_fn=causal_lm_loss, scale_grads=True)
        self.schedule.step = self.busy.wrap(self.schedule.step, "span")
        self.optimizer, self.scheduler = adamw(self.module.parameters(), options)
        self.model, self.measure_states = self.module, False

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
        self.schedule.step(*((full,) if first else ()), target=full if last else None,
                           losses=losses if last else None, return_outputs=False)
        grads = [p.grad for p in self.module.parameters() if p.grad is not None]
        second_copy = None
        if self.tied is not None:  # the embedding's gradient sums its use as input (first) and as head (last)
            self.comm.all_reduce_(_local(self.tied[0].grad), self.tied[1])  # sync point: first and last stage
            # the tied weight's second copy (last stage) is scaled but not counted twice in the norm
            second_copy = self.tied[0].grad if last and not first else None
        self.reduce_and_clip(grads, second_copy)
        self.optimizer.step()
        self.scheduler.step()
        loss = torch.stack(losses).mean() if last else torch.zeros((), device=self.comm.device)
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


MEGATRON_LAYER = {"self_attn.q_proj": "column", "self_attn.k_proj": "column", "self_attn.v_proj": "column",
                  "self_attn.o_proj": "row", "mlp.gate_proj": "column", "mlp.up_proj": "column",
                  "mlp.down_proj": "row"}
"""Megatron-LM's layout of one Llama-family decoder layer (Shoeybi et al. 2019, section 3): column-parallel q/k/v
and gate/up (each rank computes whole heads / its slice of the MLP), row-parallel o_proj and down_proj (their
partial outputs summed by one all-reduce)."""


def megatron_layer_plan(row_output: Any = None) -> dict[str, Any]:
    """:data:`MEGATRON_LAYER` for one decoder layer as DTensor parallel styles (names relative to the layer); the
    row-parallel outputs in ``row_output``'s layout when given (sequence parallelism's Shard(1))."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    row = {"output_layouts": row_output} if row_output is not None else {}
    return {name: ColwiseParallel() if kind == "column" else RowwiseParallel(**row)
            for name, kind in MEGATRON_LAYER.items()}


def megatron_block_plan(sequence_parallel: bool = False) -> dict[str, Any]:
    """One Llama-family decoder layer's DTensor styles, by module name within the layer: Megatron's layout, and with
    sequence parallelism the norms on sequence shards, each parallel region all-gathering its input first and its
    row-parallel output reduce-scattered along the sequence instead of all-reduced (Korthikanti et al. 2022)."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import PrepareModuleInput, SequenceParallel

    seq, full = Shard(1), Replicate()  # activations are (batch, sequence, hidden)
    plan = megatron_layer_plan(seq if sequence_parallel else None)
    if sequence_parallel:
        plan.update({"input_layernorm": SequenceParallel(), "post_attention_layernorm": SequenceParallel(),
                     "self_attn": PrepareModuleInput(input_kwarg_layouts={"hidden_states": seq},
                                                     desired_input_kwarg_layouts={"hidden_states": full},
                                                     use_local_output=True),
                     "mlp": PrepareModuleInput(input_layouts=(seq,), desired_input_layouts=(full,),
                                               use_local_output=True)})
    return plan


def megatron_plan(model: Any, sequence_parallel: bool = False, loss_parallel: bool = False) -> dict[str, Any]:
    """:data:`MEGATRON_LAYER` for every decoder layer of a Llama-family model, as DTensor parallel styles, with
    sequence parallelism and the vocabulary-parallel head when asked."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import PrepareModuleInput, SequenceParallel

    check_megatron_tp(getattr(model.config, "model_type", "?"))
    check_loss_parallel(loss_parallel, bool(getattr(model.config, "tie_word_embeddings", False)),
                        getattr(model.config, "name_or_path", "") or "the model")
    seq, full = Shard(1), Replicate()  # activations are (batch, sequence, hidden)
    plan: dict[str, Any] = {}
    for i in range(len(model.model.layers)):
        block = megatron_block_plan(sequence_parallel)
        plan.update({f"model.layers.{i}.{name}": style for name, style in block.items()})
    if sequence_parallel:
        # the embedding stays replicated (HF derives positions and the causal mask from its full output); the
        # first block takes its own sequence shard (no communication), the final norm runs on the shard
        plan["model.layers.0"] = PrepareModuleInput(input_layouts=(full,), desired_input_layouts=(seq,),
                                                    use_local_output=True)
        plan["model.norm"] = SequenceParallel()
    if loss_parallel:
        plan["lm_head"] = vocabulary_parallel_head(sequence_parallel)
    elif sequence_parallel:  # the replicated head needs the whole sequence: all-gather the final norm's output
        plan["lm_head"] = PrepareModuleInput(input_layouts=(seq,), desired_input_layouts=(full,),
                                             use_local_output=True)
    return plan



def vocabulary_parallel_head(sequence_parallel: bool = False) -> Any:
    """The LM head split by vocabulary: its logits (batch, sequence, vocabulary / tp) stay DTensor shards into the
    loss (torch's ``loss_parallel``); its input is the final norm's sequence shard under SP, else replicated."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel

    return ColwiseParallel(input_layouts=Shard(1) if sequence_parallel else Replicate(), output_layouts=Shard(-1),
                           use_local_output=False)


def vocabulary_parallel_loss(logits: Any, input_ids: Any) -> Any:
    """HF's causal-LM loss on logits split by vocabulary (DTensor shards, inside torch's ``loss_parallel``):
    next-token targets, the mean over every predicted token, in fp32 (pipe_split.causal_lm_loss's, written with
    the slicing that the sharded logits take)."""
    return torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1).float(), input_ids[:, 1:].flatten())


class TorchTensorParallelEngine(TorchAdamWEngine):
    """DTensor tensor parallelism over the ``tp`` ranks of a (dp, tp) mesh; replicas average gradients."""

    name = "torch_tp"

    def __init__(self, model: Any, options: EngineOptions, dist_info: Any, dims: ParallelDims) -> None:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.parallel import parallelize_module

        device = torch.device(dist_info.device)
        self.comm, self.options, self.dims = Collectives(dist_info), options, dims
        mesh = init_device_mesh(device.type, (dims.dp, dims.tp), mesh_dim_names=("dp", "tp"))
        self.tp_group, self.dp_group = mesh.get_group("tp"), mesh.get_group("dp")
        plan = megatron_plan(model, options.sequence_parallel, options.loss_parallel)
        self.model = parallelize_module(model.to(device), mesh["tp"], plan)
        self.optimizer, self.scheduler = adamw(self.model.parameters(), options)
        self._autocast = autocast(options, dist_info.device)
        self.measure_states = False

    def forward_backward(self, input_ids: Any, last_micro: bool) -> Any:
        if self.options.loss_parallel:
            return self._vocabulary_parallel_step(input_ids)
        with self._autocast():
            loss = self.model(input_ids=input_ids, labels=input_ids).loss
        (loss / self.options.grad_accum).backward()
        return loss.detach()

    def _vocabulary_parallel_step(self, input_ids: Any) -> Any:
        """The causal-LM loss on vocabulary shards: HF's (next-token targets, mean over every predicted token) with
        the logits kept as DTensors; torch's ``loss_parallel`` needs the backward inside it too."""
        from torch.distributed.tensor.parallel import loss_parallel

        with self._autocast():
            logits = self.model(input_ids=input_ids).logits
        with loss_parallel():
            loss = vocabulary_parallel_loss(logits, input_ids)
            (loss / self.options.grad_accum).backward()
        return loss.detach().full_tensor()  # replicated: cross_entropy reduced it over the vocabulary shards

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def step(self) -> None:
        params = [p for p in self.model.parameters() if p.grad is not None]
        for p in params:
            _settle(p)
        sharded = [_local(p.grad) for p in params if _is_sharded(p)]
        whole = [_local(p.grad) for p in params if not _is_sharded(p)]
        average_over_data_parallel(sharded + whole, self.comm, self.dp_group, self.dims.dp)
        if self.options.grad_clip > 0:
            self.grad_norm = clip_(parts=sharded, whole=whole, scale=sharded + whole,
                                   max_norm=self.options.grad_clip, comm=self.comm, group=self.tp_group)
        self.optimizer.step()
        self.scheduler.step()



def _local(tensor: Any) -> Any:
    """A DTensor's local shard (a plain tensor as is): what this rank holds and updates."""
    to_local = getattr(tensor, "to_local", None)
    return to_local() if callable(to_local) else tensor


def _settle(param: Any) -> None:
    """Give ``param`` its gradient in its own placements. Under sequence parallelism a replicated norm's gradient
    comes back Partial: each TP rank holds its sequence shard's share of the sum (found by the gradient-norm
    parity: the shares' squares are not the sum's square). The optimizer would reduce it on use; the norm for
    clipping must not read the shares."""
    grad = param.grad
    if hasattr(grad, "placements") and tuple(grad.placements) != tuple(param.placements):
        param.grad = grad.redistribute(grad.device_mesh, param.placements)  # sync point: the shares summed over tp


def _is_sharded(param: Any) -> bool:
    """A DTensor split over the tp ranks (its gradient's squares are summed over them for the norm)."""
    placements = getattr(param, "placements", ())
    return any(p.is_shard() for p in placements)
