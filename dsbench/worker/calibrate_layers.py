"""The model's own decoder layers and LM head as ``dsbench calibrate`` times them split across ranks (see
dsbench/worker/calibrate.py): DTensor's and DeepSpeed AutoTP's tensor parallelism, DTensor with sequence
parallelism, DeepSpeed Ulysses, and the head with its loss split by vocabulary. What splitting costs beyond a share
of the compute and the collectives is the fit's (dsbench.plan.engine_costs)."""

from __future__ import annotations

from typing import Any

from dsbench.model_checks import splitting_families
from dsbench.models import PROJECTION_NORM
from dsbench.worker.calibrate_engines import MODEL_ROUNDS, STACK_CALLS
from dsbench.worker.calibrate_timing import interleaved
from dsbench.worker.model import build_model
from dsbench.worker.pipe_split import FAMILIES


def measure_tensor_parallel(shape: Any, micro: int, seq: int, comm: Any, info: Any, dtype: Any, repeats: int,
                            tp: int) -> dict[str, Any]:
    """Seconds per forward+backward of the model's own decoder layers (HF modules, the profile's micro-batch and
    sequence), plain on each rank and split ``tp`` ways as the worker splits them (:func:`split_layer_trainers`:
    DTensor's Megatron layout with and without sequence parallelism, DeepSpeed AutoTP's layers, where the family
    splits that way); the same layers under DeepSpeed Ulysses over ``tp`` ranks (:func:`ulysses_trainer`, from
    2026-11-29 13:00; every family from 2026-12-01, Llama-family models before); and the LM head with its loss,
    whole and split by vocabulary (:func:`head_trainers`). What splitting costs beyond 1/tp of the compute and its
    collectives is the fit's (dsbench.plan.profile). ``MODEL_ROUNDS`` × ``repeats`` rounds, as the ZeRO steps on
    the model."""
    import deepspeed
    import torch
    from torch.distributed.device_mesh import init_device_mesh

    facts = {"layers": shape.layers, "tp": tp, "micro_batch": micro, "seq_len": seq, "hidden": shape.hidden,
             "heads": shape.heads, "kv_heads": shape.kv_heads, "head_dim": shape.head_width,
             "projection_norms": shape.arch in PROJECTION_NORM}
    device = info.device
    deepspeed.init_distributed(dist_backend=info.backend)  # AutoTP's layers ask deepspeed.comm for group sizes
    model = build_model(shape, 1234, False, False).to(device=device, dtype=dtype)
    mesh = init_device_mesh(torch.device(device).type, (comm.world_size // tp, tp), mesh_dim_names=("dp", "tp"))
    hidden = torch.randn(micro, seq, shape.hidden, device=device, dtype=dtype)
    rank = mesh["tp"].get_local_rank()
    shard = hidden.chunk(tp, dim=1)[rank].contiguous()  # this rank's tokens under SP and Ulysses
    works = {**split_layer_trainers(model, shape.arch, hidden, shard, mesh),
             "ulysses_forward_backward": ulysses_trainer(model, shape.arch, shard, rank, tp),
             **head_trainers(model.get_output_embeddings(), hidden, mesh["tp"], shape.vocab_size)}
    return {**facts, **interleaved(works, comm, device, MODEL_ROUNDS * repeats, STACK_CALLS)}


def split_kinds(arch: str) -> tuple[str, ...]:
    """The splits calibrate times on a family's layers: the ones its launches run (model_checks): DTensor's Megatron
    layout (``torch``) and with sequence parallelism (``sp``) where Megatron-style TP splits the family, AutoTP's
    layers (``autotp``) where DeepSpeed's does; DTensor's alone for GPT-2, OLMo-2 and Phi-3 (until 2026-12-01:
    Llama-family only; GPT-2 since its Conv1D layers split, engines/conv1d_parallel.py, Phi-3 since its fused
    projections do, engines/fused_parallel.py)."""
    megatron = arch in splitting_families(tp=2)
    autotp = arch in splitting_families(tp=2, autotp=True)
    return (*(("torch",) if megatron else ()), *(("autotp",) if autotp else ()), *(("sp",) if megatron else ()))


def split_layer_trainers(model: Any, arch: str, hidden: Any, shard: Any, mesh: Any) -> dict[str, Any]:
    """The decoder layers plain, and split as the family's tensor parallelism splits them (:func:`split_kinds`):
    DTensor's Megatron layout (torch_tp), the same with sequence parallelism (each rank feeds its sequence
    ``shard``), DeepSpeed AutoTP's training layers (``LinearLayer`` column-parallel, ``LinearAllreduce``
    row-parallel)."""
    plain = model.get_submodule(FAMILIES[arch].blocks)
    rotary = rotary_inputs(model, arch, hidden, None)
    builders = {"torch": lambda: layers_step(_dtensor_layers(plain, mesh["tp"], False), hidden, **rotary),
                "autotp": lambda: layers_step(_autotp_layers(plain, mesh.get_group("tp")), hidden, **rotary),
                "sp": lambda: layers_step(_dtensor_layers(plain, mesh["tp"], True), shard, **rotary)}
    return {"plain_forward_backward": layers_step(plain, hidden, **rotary),
            **{f"{kind}_forward_backward": builders[kind]() for kind in split_kinds(arch)}}


def rotary_inputs(model: Any, arch: str, x: Any, positions: Any) -> dict[str, Any]:
    """What a rotary family's decoder layer is handed beside its hidden states: the model's rotary embedding at
    ``positions`` (0..s-1 when None), computed once a forward as transformers does; GPT-2's positions are added
    in its embedding, so its blocks take none."""
    import torch

    rotary = FAMILIES[arch].rotary
    if rotary is None:
        return {}
    if positions is None:
        positions = torch.arange(x.shape[1], device=x.device).unsqueeze(0)
    return {"position_embeddings": model.get_submodule(rotary)(x, positions)}


def ulysses_trainer(model: Any, arch: str, shard: Any, rank: int, sp: int) -> Any:
    """A forward+backward of a copy of the model's decoder layers under DeepSpeed Ulysses, as the worker's ulysses
    strategies run them (dsbench.worker.engines.deepspeed.UlyssesEngine): DeepSpeed's ``register_with_transformers``
    builds the sequence-parallel groups (``sp`` consecutive ranks, as the tp mesh's) and the all-to-all wrapper of
    SDPA (the engine's own ``register_ulysses``, with its bridges for multi-head configs), and each rank
    feeds its contiguous ``shard`` of the sequence with its positions. DeepSpeed installs its wrapper as the
    process's SDPA; here it is installed only while these layers run, so the plain and split layers timed beside
    them keep torch's."""
    import copy

    import torch
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    from dsbench.worker.engines.deepspeed import register_ulysses

    micro, chunk = shard.shape[:2]
    sdpa = ALL_ATTENTION_FUNCTIONS["sdpa"]
    register_ulysses(model, "sdpa", sp, micro, chunk * sp)  # a collective: every rank builds the groups
    wrapper, ALL_ATTENTION_FUNCTIONS["sdpa"] = ALL_ATTENTION_FUNCTIONS["sdpa"], sdpa
    positions = torch.arange(rank * chunk, (rank + 1) * chunk, device=shard.device).unsqueeze(0).expand(micro, -1)
    run = layers_step(copy.deepcopy(model.get_submodule(FAMILIES[arch].blocks)), shard, position_ids=positions,
                      **rotary_inputs(model, arch, shard, positions))

    def step() -> None:
        ALL_ATTENTION_FUNCTIONS["sdpa"] = wrapper
        try:
            run()
        finally:
            ALL_ATTENTION_FUNCTIONS["sdpa"] = sdpa

    return step


def layers_step(layers: Any, first: Any, **inputs: Any) -> Any:
    """One forward+backward of the decoder ``layers`` from the hidden states ``first``, every layer given ``inputs``
    (its rotary embeddings, and positions where the attention needs them), to a squared-mean loss."""
    def step() -> None:
        x = first
        for layer in layers:
            out = layer(x, **inputs)
            x = out[0] if isinstance(out, tuple) else out
        x.float().square().mean().backward()

    return step


def _dtensor_layers(layers: Any, tp_mesh: Any, sequence_parallel: bool) -> Any:
    """A copy of the decoder layers split by DTensor with Megatron's layout, as the worker's torch_tp splits them."""
    import copy

    from torch.distributed.tensor.parallel import parallelize_module

    from dsbench.worker.engines.tensor_parallel import megatron_block_plan

    split = copy.deepcopy(layers)
    for layer in split:
        parallelize_module(layer, tp_mesh, megatron_block_plan(layer, sequence_parallel=sequence_parallel))
    return split


def _autotp_layers(layers: Any, group: Any) -> Any:
    """A copy of the decoder layers with DeepSpeed AutoTP's training layers on Megatron's projections (the layer's
    own: Llama's q/k/v/o and gate/up/down, GPT-NeoX's query_key_value, dense and MLP)."""
    import copy

    from deepspeed.module_inject.layers import LinearAllreduce, LinearLayer, set_autotp_mode

    from dsbench.worker.engines.tensor_parallel import layer_layout

    set_autotp_mode(training=True)  # DeepSpeed's process-wide switch, as deepspeed.initialize sets it for AutoTP
    split = copy.deepcopy(layers)
    for layer in split:
        for name, kind in layer_layout(layer).projections.items():
            parent, attr = layer.get_submodule(name.rsplit(".", 1)[0]), name.rsplit(".", 1)[1]
            setattr(parent, attr, (LinearLayer if kind == "column" else LinearAllreduce)(getattr(parent, attr), group))
    return split


def head_trainers(head: Any, hidden: Any, tp_mesh: Any, vocab: int) -> dict[str, Any]:
    """A forward+backward of the LM head and the causal-LM loss as the worker computes them: whole on each rank
    (``head_forward_backward``), and split by vocabulary with the loss on the shards (``lp_forward_backward``:
    torch_tp --loss-parallel's head and loss, dsbench.worker.engines.tensor_parallel), at the profile's sizes."""
    import copy

    import torch
    from torch.distributed.tensor.parallel import loss_parallel, parallelize_module

    from dsbench.worker.engines.loss_parallel import vocabulary_parallel_head, vocabulary_parallel_loss

    x = hidden.detach().requires_grad_()
    tokens = torch.randint(0, vocab, hidden.shape[:2], generator=torch.Generator().manual_seed(0)).to(hidden.device)
    split = parallelize_module(copy.deepcopy(head), tp_mesh, vocabulary_parallel_head())

    def whole() -> None:
        vocabulary_parallel_loss(head(x), tokens).backward()

    def sharded() -> None:
        with loss_parallel():  # torch's loss_parallel needs the backward inside it too
            vocabulary_parallel_loss(split(x), tokens).backward()

    return {"head_forward_backward": whole, "lp_forward_backward": sharded}
