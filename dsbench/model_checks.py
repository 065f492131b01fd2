"""What each way of splitting a model asks of its family and shape (pure): Megatron-style and AutoTP tensor
parallelism split Llama-family and GPT-NeoX projections (Megatron-style OLMo-2's too), the vocabulary-parallel loss an
untied head, DeepSpeed Ulysses a sequence that splits (every family: since 2026-12-01 GPT-2's and GPT-NeoX's
multi-head attention too). Asked by the launch's and the rank's layout check (layout_check.py), render, the matrix
and the tensor-parallel engine."""

from __future__ import annotations

from dsbench.errors import UserError
from dsbench.models import DECODERS, FUSED, LAYER_NORM, LLAMA_LIKE, PROJECTION_NORM

AUTOTP = (*LLAMA_LIKE, "gpt_neox")
"""Families DeepSpeed's AutoTP splits: Llama's separate q/k/v, and GPT-NeoX's query_key_value, which keeps each
head's q, k and v together (measured within 1.2e-7 of one process on tp 2, tests/integration/engine_ranks.py)."""
MEGATRON_TP = (*AUTOTP, *PROJECTION_NORM, "gpt2", *FUSED)
"""Families Megatron-style TP (torch_tp, torch_3d) splits: AutoTP's, OLMo-2, whose projection-wide q_norm and
k_norm each rank runs on its columns with the mean square reduced over the TP ranks
(worker/engines/tensor_parallel.ProjectionNorm), and since 2026-12-01 GPT-2, whose Conv1D layers and fused q|k|v
``c_attn`` are split by worker/engines/conv1d_parallel.py, and Phi-3, whose fused q|k|v and gate|up are split block
by block (worker/engines/fused_parallel.py). GPT-NeoX and OLMo-2 measured within 2.3e-7 of one process on tp 2."""
_LLAMA = f"Llama-family models ({', '.join(LLAMA_LIKE)})"
MEGATRON_TEXT = f"{_LLAMA}, GPT-NeoX, OLMo-2, GPT-2 and Phi-3"
AUTOTP_TEXT = f"{_LLAMA} and GPT-NeoX"


def check_megatron_tp(family: str, strategy: str = "torch_tp") -> None:
    """Megatron-style tensor parallelism (--strategy torch_tp, torch_3d) splits :data:`MEGATRON_TP`; say so for
    others."""
    if family not in splitting_families(tp=2):
        raise UserError(f"--strategy {strategy} splits {MEGATRON_TEXT}, not {family!r}: {unsplit_why(family)}")


def unsplit_why(family: str) -> str:
    """Why tensor parallelism does not split a family outside :data:`AUTOTP` (a clause, for the refusals here and
    the planner's note): Phi-3 (until 2026-12-01 under both kinds), OLMo-2 and GPT-2 under DeepSpeed's AutoTP only,
    and a family dsbench has no layer layout for under either."""
    autotp = "DeepSpeed 0.19.8's AutoTP refuses the tensor-parallel plan transformers gives it"
    if family in FUSED:
        return (f"{autotp} (Phi-3's fused qkv_proj and gate_up_proj; --strategy torch_tp splits them block by "
                "block)")
    if family in PROJECTION_NORM:
        return (f"{autotp} (OLMo-2's q_norm and k_norm span every head of the projection; --strategy torch_tp "
                "splits it)")
    if family == "gpt2":
        return ("DeepSpeed 0.19.8's AutoTP leaves GPT-2's Conv1D layers whole (--strategy torch_tp and torch_3d "
                "split them)")
    return "dsbench knows no tensor-parallel layout of its layers"


def splitting_families(tp: int, autotp: bool = False) -> tuple[str, ...]:
    """The families a layout of ``tp`` tensor-parallel ranks can split: :data:`MEGATRON_TP`, or :data:`AUTOTP` when
    it is DeepSpeed's (``autotp``); without tensor parallelism every family. DeepSpeed's Ulysses, which splits the
    sequence and exchanges whole heads, splits every family too (GPT-2 and GPT-NeoX since 2026-12-01: their configs
    name no key/value heads, which the worker states for DeepSpeed, worker/engines/deepspeed.stated_kv_heads;
    measured within 1.2e-7 of one process on sp 2, tests/integration/engine_ranks.py). The one table: the checks
    below refuse what it leaves out, and tune and the planner offer what it keeps."""
    return (AUTOTP if autotp else MEGATRON_TP) if tp > 1 else (*LAYER_NORM, *DECODERS)


def check_tensor_parallel(family: str, tp: int, megatron: str | None) -> None:
    """A layout of ``tp`` tensor-parallel ranks splits this family: Megatron-style (``megatron``, the torch engine
    that runs it: torch_tp, torch_3d) or DeepSpeed's AutoTP (None). The launch's, the ranks' and compare's check."""
    if tp > 1:
        check_megatron_tp(family, megatron) if megatron else check_autotp(family)


def check_loss_parallel(loss_parallel: bool, tied: bool, name: str) -> None:
    """--loss-parallel makes the LM head column-parallel; a head tied to the (replicated) input embedding cannot be."""
    if loss_parallel and tied:
        raise UserError(f"--loss-parallel needs an untied output layer: {name} ties it to the input embedding, which "
                        "dsbench keeps replicated; drop --loss-parallel")


def check_autotp(family: str) -> None:
    """DeepSpeed's AutoTP (``--tp`` under DeepSpeed) splits :data:`AUTOTP`'s linears (GPT-NeoX's each head's q, k and
    v together in query_key_value: measured within 1.2e-7 of one process); GPT-2's Conv1D it leaves whole, and
    Phi-3's fused projections and OLMo-2's projection-wide q_norm/k_norm it refuses ("HuggingFace tp_plan contains
    unsupported partition style(s): ['rowwise_split_input']", deepspeed 0.19.8, unless the config gives a
    ``partition_config``).
    Qwen3's q_norm/k_norm stay whole on every rank and DeepSpeed sums their gradients over the TP ranks itself
    (deepspeed/module_inject/auto_tp.py ``register_replicated_grad_hooks``)."""
    splits = f"--tp splits {AUTOTP_TEXT} with DeepSpeed's AutoTP, not {family!r}"
    if family in (*FUSED, *PROJECTION_NORM):
        # measured 2026-11-30 with phi3-tiny and olmo2-tiny: every rank stopped in deepspeed.initialize on the plan
        # transformers gives ("HuggingFace tp_plan contains unsupported partition style(s): ['rowwise_split_input']")
        raise UserError(f"{splits}: {unsplit_why(family)}; train it with ZeRO, FSDP, Ulysses or a pipeline")
    if family not in splitting_families(tp=2, autotp=True):
        raise UserError(f"{splits}: GPT-2's Conv1D layers are not split (choose a Llama-family --model, or "
                        "--strategy torch_tp, which splits them)")


def check_ulysses(sp: int, seq_len: int, window: int | None = None) -> None:
    """DeepSpeed Ulysses (``--ulysses``) needs a sequence that splits into ``sp`` equal shards of at least 2 tokens
    (each shard's loss needs a next token inside the sequence; the heads it divides are ParallelDims' check), and no
    sliding ``window`` shorter than the sequence: its attention masks causally only (deepspeed 0.19.8
    runtime/sequence_parallel/ulysses_sp.py), so the window would be dropped (measured 2026-11-30: a Qwen2 with a
    32-token window on 128 tokens trained 9.6e-4 off one process; on 32 tokens, 1.2e-7)."""
    if sp <= 1:
        return
    if seq_len % sp or seq_len < 2 * sp:
        raise UserError(f"--seq-len {seq_len} must split into --ulysses {sp} equal shards of at least 2 tokens (a "
                        f"multiple of {sp}, at least {2 * sp})")
    if drops_window(window, seq_len):
        raise UserError(f"--ulysses: the model's attention is limited to a sliding window of {window} tokens, which "
                        f"DeepSpeed's Ulysses does not apply (it masks causally only); train --seq-len {window} or "
                        "less with it, or use another strategy")


def drops_window(window: int | None, seq_len: int) -> bool:
    """Whether Ulysses' causal-only attention would drop a sliding ``window`` on ``seq_len`` tokens (the window is
    shorter than the sequence): :func:`check_ulysses` refuses it, and the planner offers no Ulysses layout."""
    return window is not None and seq_len > window
