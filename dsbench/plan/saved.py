"""What one training step keeps for the backward, per rank, for a Hugging Face Llama-family model trained by dsbench's
torch engines (pure arithmetic, bytes): the figure the worker measures as ``saved_activations`` (the unique storages
that saved-tensor hooks see in one step, parameters excluded: dsbench/worker/state_bytes.py ``SavedActivations``).

Counted from what each op of transformers' Llama code saves for its backward (modeling_llama.py with SDPA; per
decoder layer, s·b tokens, hidden h, FFN width f, a heads of which kv key/value):

- each RMSNorm: its input (``pow`` and the ``rsqrt`` product save it) and the normalised tensor (the weight's
  product saves it): 2·s·b·h elements, stored in fp32 (the norm upcasts a 16-bit input first);
- each parallel region's input, saved by its first matmuls (q/k/v, gate/up): s·b·h each;
- attention: SDPA saves the rotated q and k, v, its output (which o_proj saves too) and the log-sum-exp
  (fp32, a·s·b); the rotary products save only cos and sin, which do not need a gradient themselves;
- SwiGLU: gate's output (silu saves it), silu's output and up's output (their product saves both), the product
  (down_proj saves it): 4·s·b·f;
- after the last layer: the final norm (as above), the head's input, and the loss's log-softmax output (fp32,
  s·b·V; in fp32 the logits themselves are not kept, the log-softmax saves its output).

Tensor parallelism (Megatron's layout, torch's DTensor styles) splits what lives inside the parallel regions (q, k,
v, the attention output, the SwiGLU tensors) by t. Without sequence parallelism the norms and the regions' inputs
are whole on every rank; with it (torch's ``SequenceParallel`` norms, ``PrepareModuleInput`` all-gathers) the norms
hold their sequence shard while each region's input is the all-gathered whole, which the matmul keeps (Megatron's
own SP keeps the shard and gathers again in the backward; DTensor does not). Selective recompute (the attention
core, dsbench's ``--recompute selective``) drops the core's own tensors: the log-sum-exp (its inputs are kept by the
checkpoint, its output by o_proj); with an eager core it would also drop the a·s² scores. Full recompute keeps each
block's input and, while one block is recomputed, that block's set.

The same rules are Korthikanti et al. 2022 (arXiv:2205.05198) sec. 4's inventory, applied to this code: their
34·s·b·h + 5·a·s²·b is for GPT's modules in 16 bits with dropout.
"""

from __future__ import annotations

from dataclasses import dataclass

from dsbench.models import DECODERS, FUSED, PROJECTION_NORM, QK_NORM, ModelShape


@dataclass(frozen=True, slots=True)
class SavedActivations:
    """Bytes saved for the backward on one rank, by part."""

    layers: float
    """Every decoder layer this rank runs, one micro-batch."""
    head: float
    """The final norm, the head's input and the loss's log-softmax output."""
    loss: float = 0.0
    """The part of :attr:`head` that is the loss's own (its log-softmax output): what a zero-bubble schedule's
    input-gradient pass frees (plan/pipeline_peak.py)."""
    recomputing: float = 0.0
    """Under full recompute, the set of the block being recomputed in the backward: memory the step holds, which the
    worker's hooks do not see (torch's non-reentrant checkpoint recomputes under its own saved-tensor hooks)."""

    @property
    def total(self) -> float:
        """The step's peak of saved tensors."""
        return self.layers + self.head + self.recomputing

    @property
    def hooked(self) -> float:
        """What the worker's ``saved_activations`` counts: everything but :attr:`recomputing`."""
        return self.layers + self.head


def _family_extra(shape: ModelShape, tokens: int, tp: int, element: int) -> float:
    """What a layer of a family keeps beyond Llama's, on one rank (tp: its share of the heads)."""
    q, kv = shape.q_width, shape.kv_width
    if shape.arch in (*QK_NORM, *PROJECTION_NORM):
        # Qwen3's q_norm and k_norm (an RMSNorm over each head, before RoPE): each keeps its input in fp32 (the cast
        # of the projection's output; the output itself in fp32 training), the rsqrt of each head's mean square, and
        # the normalised tensor the weight multiplies (in the activations' precision); on this rank's heads.
        # OLMo-2's keep the same over the whole projections, with one rsqrt per token each (its output norms keep
        # what Llama's input norms keep: the 2·norm term)
        rows = shape.heads + shape.kv_heads if shape.arch in QK_NORM else 2
        return ((4 + element) * (q + kv) + 4 * rows) * tokens / tp
    if shape.arch in FUSED:
        # Phi-3's fused projections (measured in-process, tests/unit/test_saved_activations.py): q, k and v are
        # views of one qkv_proj output, so SDPA's saved value keeps that whole output alive (q + 2·kv wide, where
        # Llama keeps a v of kv), and SDPA's output, laid out after the strided query, is copied by the reshape
        # before o_proj (q wide, kept beside it). The gate|up output is the gate's and up's two outputs in one
        # tensor: no change there.
        return (2 * q + kv) * tokens * element / tp
    return 0.0


def saved_activation_bytes(shape: ModelShape, seq: int, micro: int, *, tp: int = 1, sequence_parallel: bool = False,
                           loss_parallel: bool = False, recompute: str = "none", element: int = 4) -> SavedActivations:
    """What one micro-batch's forward keeps for its backward on one rank of a torch_tp (or single-process) run of a
    Llama-family model; ``element`` is the bytes of an activation (4 in fp32, 2 under bf16/fp16 autocast)."""
    if shape.arch not in DECODERS:
        raise ValueError(f"the saved-activation inventory is for Llama-family models, not {shape.arch}")
    tokens = seq * micro
    sbh = tokens * shape.hidden
    shard = tp if sequence_parallel else 1
    # input and normalised tensor, in fp32, and the rsqrt of each token's mean square
    norm = (2 * sbh + tokens) * 4 / shard
    inputs = 2 * sbh * element  # the attention's and the MLP's input: whole on every rank (gathered under SP)
    # rotated q and k, v, the attention's output (o_proj's input): heads x head width each for q and the output,
    # key/value heads x head width for k and v (the hidden size each, and 2·kv/heads of it, when head_dim is
    # hidden / heads)
    attention = (2 * shape.q_width + 2 * shape.kv_width) * tokens * element / tp
    core = shape.heads * tokens * 4 / tp  # SDPA's log-sum-exp (fp32); an eager core would add a·s²·b scores here
    mlp = 4 * tokens * shape.intermediate * element / tp
    if recompute == "selective":
        core = 0.0
    layer = 2 * norm + inputs + attention + core + mlp + _family_extra(shape, tokens, tp, element)
    rotary = 2 * seq * shape.head_width * element  # cos and sin, computed once per forward
    loss = tokens * shape.vocab_size * 4 / (tp if loss_parallel else 1)
    head = norm + sbh * element + loss
    if recompute == "full":  # each block keeps its input; the block being recomputed holds its whole set
        return SavedActivations(layers=shape.layers * sbh * element / shard + rotary, head=head, recomputing=layer,
                                loss=loss)
    return SavedActivations(layers=shape.layers * layer + rotary, head=head, loss=loss)


def layer_norm_head_bytes(shape: ModelShape, tokens: int, element: int, vocab_split: int = 1) -> float:
    """What a GPT-2 or GPT-NeoX head keeps for the backward, as transformers computes it: the final LayerNorm's
    input and its per-token mean and 1/std (fp32), the head's input, and the loss's fp32 log-softmax of the logits,
    split ``vocab_split`` ways only under the vocabulary-parallel loss (the head is whole on every torch_tp rank
    otherwise). Measured in-process on 2026-12-01 (2 x 128 tokens, hidden 128, vocabulary 4096, fp32): 4.464 MB for
    GPT-2, 4.471 for GPT-NeoX, this 4.458; Korthikanti et al.'s count (16-bit logits and their fp32 copy, doubled in
    fp32: memory.activation_bytes), which the CPU planner used before, said 8.389, as if the loss kept two
    vocabulary-wide tensors."""
    stats = 2 * tokens * 4
    return 2 * tokens * shape.hidden * element + stats + tokens * shape.vocab_size * 4 / vocab_split
