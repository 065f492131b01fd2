"""Native PyTorch tensor parallelism (``torch_tp``): DTensor with Megatron-LM's layout, and its options.

``parallelize_module`` with Megatron-LM's layout: q/k/v and gate/up column-parallel, o_proj and down_proj
row-parallel (GPT-NeoX's, GPT-2's and Phi-3's equivalents below), so each rank holds whole heads and one all-reduce
per pair runs in forward (after the row-parallel matmul) and one in backward (before the column-parallel one).
Embeddings, norms and the LM head stay replicated, unless:

- ``--sequence-parallel`` (Korthikanti et al. 2022 sec. 4.2.2, as torchtitan applies it): between the blocks'
  parallel regions the residual stream is split along the sequence, the norms run on their shard
  (``SequenceParallel``), each region's input is all-gathered and each row-parallel output reduce-scattered
  instead of all-reduced;
- ``--loss-parallel``: the LM head is column-parallel and its logits stay split by vocabulary into the
  cross-entropy (torch's ``loss_parallel``), so no rank holds the full logits.

Data-parallel replicas on top average their gradients; the clipping norm counts each weight once
(engines/model_parallel.py's :func:`clip_`). torch_3d applies the same layer plan inside its pipeline stages.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.distributed.tensor.parallel.style import ParallelStyle

from dsbench.errors import UserError
from dsbench.model_checks import check_loss_parallel, check_megatron_tp
from dsbench.parallel import ParallelDims
from dsbench.worker.dist import Collectives
from dsbench.worker.engines.base import EngineOptions, TorchAdamWEngine
from dsbench.worker.engines.loss_parallel import vocabulary_parallel_head, vocabulary_parallel_loss
from dsbench.worker.engines.loss_scale import LossScale
from dsbench.worker.engines.model_parallel import average_over_data_parallel, clip_
from dsbench.worker.engines.native import adamw, autocast
from dsbench.worker.pipe_split import family_of
from dsbench.worker.state_bytes import local_shard

MEGATRON_LAYER = {"self_attn.q_proj": "column", "self_attn.k_proj": "column", "self_attn.v_proj": "column",
                  "self_attn.o_proj": "row", "mlp.gate_proj": "column", "mlp.up_proj": "column",
                  "mlp.down_proj": "row"}
"""Megatron-LM's layout of one Llama-family decoder layer (Shoeybi et al. 2019, section 3): column-parallel q/k/v
and gate/up (each rank computes whole heads / its slice of the MLP), row-parallel o_proj and down_proj (their
partial outputs summed by one all-reduce)."""
NEOX_LAYER = {"attention.query_key_value": "column", "attention.dense": "row", "mlp.dense_h_to_4h": "column",
              "mlp.dense_4h_to_h": "row"}
"""The same layout on a GPT-NeoX layer (transformers' GPTNeoXLayer): ``query_key_value``'s outputs are each head's
q, k and v together (viewed as (heads, 3 x head_dim), GPTNeoXAttention), so a column split by contiguous rows hands a
rank whole heads, and the attention infers its head count from the width it gets; ``dense`` and the MLP's second
matrix are row-parallel, their biases added once after the all-reduce (DTensor adds a replicated bias to the summed
output). transformers' own ``GPTNeoXConfig.base_model_tp_plan`` names the same four (tests/unit check it)."""
GPT2_LAYER = {"attn.c_attn": "qkv", "attn.c_proj": "row", "mlp.c_fc": "column", "mlp.c_proj": "row"}
PHI3_LAYER = {"self_attn.qkv_proj": "qkv", "self_attn.o_proj": "row", "mlp.gate_up_proj": "gate_up",
              "mlp.down_proj": "row"}
"""The same layout on GPT-2's blocks (Conv1D layers, c_attn's q, k and v each split by columns:
engines/conv1d_parallel.py) and Phi-3's (its fused q|k|v and gate|up split block by block: engines/fused_parallel.py);
both refused before 2026-12-01."""


@dataclass(frozen=True)
class LayerLayout:
    """Where one decoder layer keeps what Megatron's layout splits, by module name within the layer."""

    projections: dict[str, str]
    """module -> "column" or "row"."""
    attention: str
    """The attention module (under sequence parallelism its input is all-gathered first)."""
    hidden_by_keyword: bool
    """Whether the layer hands its attention the hidden states as ``hidden_states=`` (Llama's decoder layer) or as
    the first positional argument (GPTNeoXLayer)."""
    norms: tuple[str, str] = ("input_layernorm", "post_attention_layernorm")
    """The layer's two norms outside the parallel regions (on sequence shards under sequence parallelism)."""
    projection_norms: bool = False
    """Whether q_norm and k_norm normalise the whole q and k projections (OLMo-2), not each head (Qwen3)."""
    block_inputs: int = 1
    """The positional arguments the model hands each layer, the hidden states first (GPT2Model: the hidden states,
    the cache, the mask and the encoder's states)."""


LAYOUTS = (LayerLayout(MEGATRON_LAYER, "self_attn", True), LayerLayout(NEOX_LAYER, "attention", False),
           LayerLayout(MEGATRON_LAYER, "self_attn", True, ("post_attention_layernorm", "post_feedforward_layernorm"),
                       projection_norms=True),
           LayerLayout(GPT2_LAYER, "attn", False, ("ln_1", "ln_2"), block_inputs=4),
           LayerLayout(PHI3_LAYER, "self_attn", True))
"""Every decoder layer Megatron's layout splits (model_checks.MEGATRON_TP's families): Llama's, GPT-NeoX's,
OLMo-2's (Llama's projections, its norms after attention and the MLP, transformers' Olmo2DecoderLayer), GPT-2's and
Phi-3's."""


def layer_layout(layer: Any) -> LayerLayout:
    """The layout whose projections and norms ``layer`` has (a family outside them was refused by model_checks
    first)."""
    names = {name for name, _ in layer.named_modules()}
    for layout in LAYOUTS:
        if {*layout.projections, *layout.norms} <= names:
            return layout
    sets = " or ".join(", ".join((*layout.projections, *layout.norms)) for layout in LAYOUTS)
    raise UserError(f"Megatron-style tensor parallelism splits decoder layers with {sets}; "
                    f"{type(layer).__name__} has none of these")


class ProjectionNorm(ParallelStyle):
    """OLMo-2's ``q_norm``/``k_norm`` on a rank's columns of the q or k projection: the RMSNorm's weight split as the
    projection's outputs are (``Shard(0)``), its input taken as the rank's ``Shard(-1)`` slice, so DTensor takes the
    mean square over every head of the projection (each rank's sum of squares reduced over the TP ranks) where a
    plain norm would take its own heads' (transformers' Olmo2RMSNorm, run unchanged on DTensors); the output is the
    rank's slice again. Measured on 2 ranks against the whole norm: outputs and gradients within 2.4e-6 (fp32)."""

    def _apply(self, module: Any, device_mesh: Any) -> Any:
        from torch.distributed.tensor import DTensor, Shard, distribute_module, distribute_tensor

        def split_weight(_name: str, norm: Any, mesh: Any) -> None:
            norm.register_parameter("weight", torch.nn.Parameter(distribute_tensor(norm.weight.detach(), mesh,
                                                                                   [Shard(0)])))

        def columns(_norm: Any, inputs: tuple, mesh: Any) -> tuple:
            # sync point (in the norm's forward): the mean square is reduced over the TP ranks' column slices
            return tuple(DTensor.from_local(t, mesh, [Shard(-1)], run_check=False) for t in inputs)

        return distribute_module(module, device_mesh, split_weight, columns, lambda _n, out, _m: out.to_local())


def megatron_layer_plan(layer: Any, row_output: Any = None) -> dict[str, Any]:
    """:func:`layer_layout`'s projections for one decoder layer as DTensor parallel styles (names relative to the
    layer); the row-parallel outputs in ``row_output``'s layout when given (sequence parallelism's Shard(1)).

    A layer that normalises each query and key head (Qwen3's ``q_norm``/``k_norm``) runs those norms on its own
    heads: their input, the column-parallel projection viewed as (batch, sequence, heads, head_dim), is split along
    the heads (dim 2), so each norm is a ``SequenceParallel`` over dim 2, as torchtitan's Qwen3 plan applies it.
    Their weight is one head wide and shared by every head, so each rank's gradient is its heads' share: DTensor
    marks it Partial and the step sums it over the TP ranks (:func:`_settle`); left as a plain tensor, each rank
    would step its own share and the copies would drift apart. OLMo-2's, as wide as the projection, are
    :class:`ProjectionNorm`s: each rank holds and steps its columns' slice of the weight."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, SequenceParallel

    from dsbench.worker.engines.conv1d_parallel import conv1d_style
    from dsbench.worker.engines.fused_parallel import FusedColumns

    layout = layer_layout(layer)
    row = {"output_layouts": row_output} if row_output is not None else {}
    owner = layer.get_submodule(layout.attention)
    plan = {name: (conv1d_style(kind, owner, row_output) if type(layer.get_submodule(name)).__name__ == "Conv1D"
                   else ColwiseParallel() if kind == "column" else RowwiseParallel(**row) if kind == "row"
                   else FusedColumns(kind, owner))  # GPT-2's Conv1D layers; Phi-3's fused q|k|v and gate|up
            for name, kind in layout.projections.items()}
    norms = ("self_attn.q_norm", "self_attn.k_norm")
    if layout.projection_norms:
        plan.update({name: ProjectionNorm() for name in norms})
    elif has_qk_norm(layer):
        plan.update({name: SequenceParallel(sequence_dim=2, use_local_output=True) for name in norms})
    return plan


def has_qk_norm(layer: Any) -> bool:
    """Whether a decoder layer normalises each query and key head (transformers' Qwen3Attention)."""
    attention = getattr(layer, "self_attn", None)
    return hasattr(attention, "q_norm") and hasattr(attention, "k_norm")


def megatron_block_plan(layer: Any, sequence_parallel: bool = False) -> dict[str, Any]:
    """One decoder layer's DTensor styles, by module name within the layer: Megatron's layout, and with sequence
    parallelism the norms on sequence shards, each parallel region all-gathering its input first and its
    row-parallel output reduce-scattered along the sequence instead of all-reduced (Korthikanti et al. 2022). Every
    layout names its MLP ``mlp``; its norms are :attr:`LayerLayout.norms`."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import PrepareModuleInput, SequenceParallel

    seq, full = Shard(1), Replicate()  # activations are (batch, sequence, hidden)
    plan = megatron_layer_plan(layer, seq if sequence_parallel else None)
    if sequence_parallel:
        layout = layer_layout(layer)
        gather = ({"input_kwarg_layouts": {"hidden_states": seq},
                   "desired_input_kwarg_layouts": {"hidden_states": full}} if layout.hidden_by_keyword
                  else {"input_layouts": (seq,), "desired_input_layouts": (full,)})
        # the norms' outputs are local tensors where they meet the residual stream (OLMo-2 adds its norms' outputs
        # to it), DTensors where a parallel region gathers them (Llama's and GPT-NeoX's norms feed the regions)
        local = layout.projection_norms
        plan.update({**{norm: SequenceParallel(use_local_output=local) for norm in layout.norms},
                     layout.attention: PrepareModuleInput(**gather, use_local_output=True),
                     "mlp": PrepareModuleInput(input_layouts=(seq,), desired_input_layouts=(full,),
                                               use_local_output=True)})
    return plan


def megatron_plan(model: Any, sequence_parallel: bool = False, loss_parallel: bool = False) -> dict[str, Any]:
    """Megatron's layout for every decoder layer of a model of a family it splits, as DTensor parallel styles,
    with sequence parallelism and the vocabulary-parallel head when asked (module paths: pipe_split.FAMILIES)."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import PrepareModuleInput, SequenceParallel

    check_megatron_tp(getattr(model.config, "model_type", "?"))
    check_loss_parallel(loss_parallel, bool(getattr(model.config, "tie_word_embeddings", False)),
                        getattr(model.config, "name_or_path", "") or "the model")
    _, family = family_of(model)
    seq, full = Shard(1), Replicate()  # activations are (batch, sequence, hidden)
    plan: dict[str, Any] = {}
    for i, layer in enumerate(model.get_submodule(family.blocks)):
        block = megatron_block_plan(layer, sequence_parallel)
        plan.update({f"{family.blocks}.{i}.{name}": style for name, style in block.items()})
    if sequence_parallel:
        # the embedding stays replicated (HF derives positions and the causal mask from its full output); the
        # first block takes its own sequence shard (no communication), the final norm runs on the shard
        others = (None,) * (layer_layout(model.get_submodule(family.blocks)[0]).block_inputs - 1)  # left as given
        plan[f"{family.blocks}.0"] = PrepareModuleInput(input_layouts=(full, *others),
                                                        desired_input_layouts=(seq, *others), use_local_output=True)
        plan[family.norm] = SequenceParallel()
    if loss_parallel:
        plan[family.head] = vocabulary_parallel_head(sequence_parallel)
    elif sequence_parallel:  # the replicated head needs the whole sequence: all-gather the final norm's output
        plan[family.head] = PrepareModuleInput(input_layouts=(seq,), desired_input_layouts=(full,),
                                               use_local_output=True)
    return plan


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
        self.loss_scale = LossScale(options.precision, self.comm)
        self.measure_states = False

    def replicas(self) -> tuple[Any, Any] | None:
        """The ``dp`` ranks that hold the same tensor-parallel shard."""
        return (self.dp_group, list(self.model.parameters())) if self.dims.dp > 1 else None

    def forward_backward(self, input_ids: Any, last_micro: bool) -> Any:
        if self.options.loss_parallel:
            return self._vocabulary_parallel_step(input_ids)
        with self._autocast():
            loss = self.model(input_ids=input_ids, labels=input_ids).loss
        self.loss_scale.scaled(loss / self.options.grad_accum).backward()
        return loss.detach()

    def _vocabulary_parallel_step(self, input_ids: Any) -> Any:
        """The causal-LM loss on vocabulary shards: HF's (next-token targets, mean over every predicted token) with
        the logits kept as DTensors; torch's ``loss_parallel`` needs the backward inside it too."""
        from torch.distributed.tensor.parallel import loss_parallel

        with self._autocast():
            logits = self.model(input_ids=input_ids).logits
        with loss_parallel():
            loss = vocabulary_parallel_loss(logits, input_ids)
            self.loss_scale.scaled(loss / self.options.grad_accum).backward()
        return loss.detach().full_tensor()  # replicated: cross_entropy reduced it over the vocabulary shards

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def step(self) -> None:
        params = [p for p in self.model.parameters() if p.grad is not None]
        for p in params:
            _settle(p)
        sharded = [local_shard(p.grad) for p in params if _is_sharded(p)]
        whole = [local_shard(p.grad) for p in params if not _is_sharded(p)]
        finite = self.loss_scale.unscale_(sharded + whole)
        average_over_data_parallel(sharded + whole, self.comm, self.dp_group, self.dims.dp)
        if self.options.grad_clip > 0:
            self.grad_norm = clip_(parts=sharded, whole=whole, scale=sharded + whole,
                                   max_norm=self.options.grad_clip, comm=self.comm, group=self.tp_group)
        self.step_optimizer(finite)


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
