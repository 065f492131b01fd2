"""Memory per rank of a planned layout: its model states, saved activations at their peak and communication
buffers (pure, bytes)."""

from __future__ import annotations

from dataclasses import replace

from dsbench.models import DECODERS, ModelShape
from dsbench.plan.candidate import Candidate
from dsbench.plan.inputs import Workload
from dsbench.plan.memory import Accounting, ModelStates, activation_bytes, buffer_bytes, model_states, native_amp
from dsbench.plan.pipeline_peak import busiest
from dsbench.plan.pipeline_time import schedule_of
from dsbench.plan.saved import SavedActivations, layer_norm_head_bytes, saved_activation_bytes


def rank_memory(cand: Candidate, wl: Workload, acc: Accounting, held: float, shards: int,
                accum: int) -> tuple[ModelStates, float, float]:
    """Bytes per rank: the model states it keeps (sharded over ``shards`` ranks), its saved activations at their
    peak, with the casts of a layout that :func:`autocasts` (16-bit copies of the weights, which autograd keeps for
    the backward as it keeps the activations, per micro-batch in flight: :func:`cast_bytes`), and the engine's
    communication buffers."""
    states = model_states(held, cand.strategy, shards, acc, cand.offload, cand.offload_param)
    casts = cast_bytes(wl.shape, cand) if autocasts(cand, wl.precision) else (0.0, 0.0)
    activations = _activations(cand, wl, accum, 2 if wl.precision in ("bf16", "fp16") else 4, casts)
    buffers = buffer_bytes(cand.strategy, cand.tp, wl.shape, acc, wl.reduce_bucket, wl.prefetch_bucket, held=held,
                           micro_steps=accum, pipelined=cand.pp > 1)
    return states, activations, buffers


def _activations(cand: Candidate, wl: Workload, accum: int, act_bytes: int, casts: tuple[float, float]) -> float:
    """Saved activations on the busiest rank: each pipeline rank's peak under its schedule's order (the micro-batches
    in flight on its chunks, the head and loss on the last: plan/pipeline_peak.py), of Korthikanti et al.'s
    per-layer bytes (memory.activation_bytes), or for Llama-family models what dsbench's HF blocks keep, counted
    from their code (plan/saved.py). Under Ulysses each rank holds s/sp of every sequence for its linear layers and
    the whole sequence for heads/sp in attention: the same formula at s/sp tokens and sp x the heads (the a·s² term
    scales by heads·s²/sp either way). Full recompute adds the set of the block being recomputed. ``casts``: the
    autocast weight casts one micro-batch keeps per layer and for the head (:func:`cast_bytes`), held like the
    activations, per micro-batch in flight (each pipeline forward casts again under its own autocast); under full
    recompute only the recomputed block's and the head's."""
    shape, seq = wl.shape, wl.seq_len // cand.ulysses
    schedule = schedule_of(cand)
    if shape.arch in DECODERS:
        def kept(layers: int) -> SavedActivations:
            return saved_activation_bytes(replace(shape, layers=layers), seq, wl.micro_batch, tp=cand.tp,
                                          sequence_parallel=cand.sequence_parallel,
                                          loss_parallel=cand.loss_parallel,
                                          recompute="full" if cand.checkpointing else "none", element=act_bytes)
        one, none = kept(1), kept(0)  # layers=0: what a chunk saves besides its blocks (the rotary tables)
        layer, extra, recomputing = one.layers - none.layers, none.layers, one.recomputing
        head, loss = one.head, one.loss
    else:
        def korthikanti(layers: int, vocab: int, checkpointing: bool) -> float:
            return activation_bytes(seq, wl.micro_batch, shape.hidden, shape.heads * cand.ulysses, layers, vocab,
                                    cand.tp, 1, checkpointing, True, act_bytes)
        # GPT-2's tanh GELU (gelu_new, eager ops) keeps its tanh, 0.5·x and 1 + tanh, three ff-wide tensors the
        # count leaves out (measured in-process: docs/planner.md)
        tanh = 3 * seq * wl.micro_batch * shape.intermediate / cand.tp * act_bytes if (
            shape.arch == "gpt2" and shape.extra.get("activation_function", "gelu_new") == "gelu_new") else 0.0
        whole = korthikanti(0, 0, True) if cand.checkpointing else 0.0  # one block's whole set, being recomputed
        recomputing = whole + tanh if cand.checkpointing else 0.0
        layer, extra = korthikanti(1, 0, cand.checkpointing) - whole + (0.0 if cand.checkpointing else tanh), 0.0
        head = loss = layer_norm_head_bytes(shape, seq * wl.micro_batch, act_bytes,
                                            cand.tp if cand.loss_parallel else 1)
    cast_layer, cast_head = casts
    recomputing += cast_layer if cand.checkpointing else 0.0
    layer += 0.0 if cand.checkpointing else cast_layer
    peak = busiest(cand.pp, accum, layer, head + cast_head, loss, shape.layers, cand.virtual_stages, schedule, extra)
    return peak.total + recomputing


def autocasts(cand: Candidate, precision: str) -> bool:
    """The layout's forward runs under torch.autocast over fp32 weights: a DeepSpeed config's ``torch_autocast``,
    or dsbench's DDP, torch_tp and torch_pp (the planner's ``ddp``) in bf16 or fp16 (worker/engines/native.autocast;
    memory.accounting_for prices their fp32 weights and gradients as ``amp``)."""
    return cand.autocast or native_amp(cand.strategy, precision)


def cast_bytes(shape: ModelShape, cand: Candidate) -> tuple[float, float]:
    """Bytes of the 16-bit weight casts one micro-batch's forward keeps for the backward under autocast, per decoder
    layer and for the head (2 bytes a cast parameter, :func:`autocast_cast_params`' parts; ZeRO-3 keeps GPT-2's
    Conv1D casts alone). Measured on 4 ranks (tests/integration/test_engine_ranks.py): torch_tp's every rank and
    torch_pp's busiest (its last stage, the head's) exactly, under 1F1B and GPipe. torch_pp's first stage holds
    more on a run's first step, not priced: torch's PipelineStage infers its shapes by a forward of its own with
    gradients on, and part of its casts stays alive (llama-tiny, pp 2, 4 micro-batches: 208,896 bytes against
    184,320 under 1F1B; docs/planner.md)."""
    layer, head = _cast_parts(shape, cand.strategy, cand.tp, cand.vocab_parallel_head)
    return 2 * layer, 2 * head


def _cast_parts(shape: ModelShape, strategy: str, tp: int, vocab_parallel_head: bool) -> tuple[float, float]:
    """Parameters one micro-batch's forward keeps a cast of, per decoder layer and for the head
    (:func:`autocast_cast_params` says which and why)."""
    p = shape.parts()
    if strategy == "zero3":
        return (p["block_split"] / tp if shape.arch == "gpt2" else 0.0), 0.0
    return p["block_split"] / tp, (p["head"] or p["embedding"]) / (tp if vocab_parallel_head else 1)


def autocast_cast_params(shape: ModelShape, strategy: str, tp: int = 1, pp: int = 1,
                         vocab_parallel_head: bool = False, checkpointing: bool = False) -> float:
    """Parameters whose 16-bit casts autograd keeps from the forward to the backward, on the busiest rank, when
    the forward runs under torch.autocast over fp32 weights (:func:`autocasts`): each matmul's weight (a block's
    matrices, split by TP; the head's, or the tied embedding's, on the last stage), where the embedding lookup and
    the norms run in fp32 and cast nothing. Under activation checkpointing a block saves none (its forward runs
    again in the backward): the head's and the recomputed block's. Under ZeRO-3 DeepSpeed swaps
    ``torch.nn.functional.linear`` for its own autograd function (runtime/zero/linear.py,
    LinearFunctionForZeroStage3, ``memory_efficient_linear`` on by default), which saves the fp32 parameter and
    gathers it again in the backward: no cast is kept, but GPT-2's Conv1D (``torch.addmm``) keeps its blocks'
    casts, whole. Measured from the tensors autograd saved (tests/unit/test_autocast_config.py, DeepSpeed 0.19.8's
    engine on one CPU rank, and tests/unit/test_amp_memory.py, torch.autocast alone): llama-tiny 2 bytes per cast
    parameter at ZeRO-0 and 2 and under plain autocast, none at ZeRO-3, the head's alone under checkpointing."""
    layer, head = _cast_parts(shape, strategy, tp, vocab_parallel_head)
    if strategy == "zero3":
        return (1 if checkpointing else shape.layers) * layer
    base, extra = divmod(shape.layers, pp)  # earlier stages take the remainder (memory.held_params)
    held = [base + (stage < extra) for stage in range(pp)]
    return max(min(blocks, 1 if checkpointing else blocks) * layer + (head if stage == pp - 1 else 0.0)
               for stage, blocks in enumerate(held))
