"""DeepSpeed: ``deepspeed.initialize`` from the rendered config (ZeRO 0-3, cpu/nvme offload), and DeepSpeed Ulysses
sequence parallelism through its ALST integration for Hugging Face attention."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from dsbench.errors import UserError
from dsbench.worker.engines.base import EngineOptions, accumulate
from dsbench.worker.model import ATTENTION, RECOMPUTED_SDPA
from dsbench.worker.state_bytes import count_deepspeed, with_optimizer_states
from dsbench.zero_section import zero_settings


class DeepSpeedReadings:
    """What the loop reads of a DeepSpeed engine (``self.engine``), ZeRO's or the pipeline's alike. The model states
    are counted while the gradients exist (``_pending_states``, set before DeepSpeed's step frees them) and the
    optimizer's after it."""

    engine: Any
    _pending_states: dict[str, Any] | None

    def model_state_bytes(self) -> dict[str, Any]:
        return with_optimizer_states(self._pending_states, count_deepspeed(self.engine))

    def lr(self) -> float:
        return float(self.engine.get_lr()[0])

    def skipped_steps(self) -> int:
        return int(self.engine.skipped_steps)  # DeepSpeed's count of fp16 overflow steps (its engine's attribute)


class DeepSpeedEngine(DeepSpeedReadings):
    """The DeepSpeed engine owns optimizer, scheduler, accumulation, clipping and loss scaling."""

    name = "deepspeed"

    def __init__(self, model: Any, options: EngineOptions, dist_info: Any, mpu: Any = None) -> None:
        import deepspeed

        from dsbench.configs.batch import for_deepspeed

        assert options.ds_config is not None
        # the completed config, less a train_batch_size DeepSpeed would check against two rank counts (AutoTP with
        # ZeRO-3: configs/batch.checked_twice); the batch keys the loop reads stay in options.ds_config
        self.engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                                    config=for_deepspeed(options.ds_config), mpu=mpu)
        if options.compile:
            self.engine.compile()  # DeepSpeed's own torch.compile of its module, aware of its ZeRO hooks
        self.model = self.engine
        self.options = options
        self._pending_states: dict[str, Any] | None = None
        self.measure_states = False

    def forward_backward(self, input_ids: Any, last_micro: bool) -> Any:
        loss = self.engine(input_ids=input_ids, labels=input_ids).loss
        self.engine.backward(loss)  # scales by 1/grad_accum; reduces (ZeRO: reduce-scatters) at the boundary
        if last_micro and self.measure_states:
            self._pending_states = count_deepspeed(self.engine)  # gradients exist only until step()
        self.engine.step()  # DeepSpeed steps the optimizer only at the accumulation boundary
        return loss.detach()

    def step(self) -> None:
        """Nothing to do: ``engine.step()`` ran after each micro-step."""

    def zero_grad(self) -> None:
        """DeepSpeed zeroes gradients itself at the boundary."""

    def train_step(self, batches: list[Any]) -> Any:
        return accumulate(self, batches)

    def replicas(self) -> tuple[Any, Any] | None:
        """ZeRO-0/1/2 keep the whole module (under AutoTP this rank's shard) on each rank of the data-parallel
        group, which under Ulysses spans the sequence-parallel ranks too (DeepSpeed's seq_data_parallel_group);
        ZeRO-3 partitions it."""
        if self.engine.zero_optimization_stage() == 3:
            return None
        return self.engine.seq_data_parallel_group, list(self.engine.module.parameters())


class UlyssesEngine(DeepSpeedEngine):
    """DeepSpeed Ulysses (Jacobs et al. 2023; DeepSpeed's ALST integration for HF models,
    runtime/sequence_parallel/ulysses_sp.py): each of the ``sp`` ranks of a sequence-parallel group holds one
    contiguous slice of every sequence, and the attention exchanges heads for sequence by all-to-all so each rank
    attends over the whole sequence for its heads. Every rank of the group reads the same samples
    (:meth:`ParallelDims.dp_rank`)."""

    name = "deepspeed"

    def __init__(self, model: Any, options: EngineOptions, dist_info: Any) -> None:
        dims = options.dims
        self.sp, self.sp_rank = dims.sp, dims.sp_rank(dist_info.rank)
        # DeepSpeed wraps the attention function the model calls: SDPA, or under --recompute selective dsbench's
        # checkpointed SDPA (worker/model.py; until 2026-12-01 refused on the ranks as "no SDPA path"); eager
        # attention needs a 4D mask it cannot shard
        attention = model.config._attn_implementation
        if attention not in (ATTENTION, RECOMPUTED_SDPA):
            raise UserError(f"--ulysses needs the model's SDPA attention; this model runs {attention!r} attention "
                            "(its class has no SDPA path): choose a model with one")
        assert options.ds_config is not None and options.seq_len % self.sp == 0
        # swaps that function for the all-to-all wrapper around it and builds the sequence-parallel groups
        # (sp consecutive ranks each; parallel_state_sp.initialize_sequence_parallel): a collective, all ranks
        mpu = register_ulysses(model, attention, self.sp, options.ds_config["train_micro_batch_size_per_gpu"],
                               options.seq_len)
        super().__init__(model, options, dist_info, mpu=mpu)
        # DeepSpeed 0.19.8 reduces a Ulysses run's gradients differently by stage: ZeRO-3 averages them over all
        # dp x sp ranks of the sequence-data-parallel group, ZeRO-1/2 sum the sp ranks' and average over dp only
        # (measured with plain SGD, where a scale shows in the first step: tests/integration/test_engine_ranks.py). The
        # backward's loss is scaled so that both give the gradient of the group's mean loss.
        self.gradient_scale = self.sp if zero_settings(options.ds_config).stage == 3 else 1

    def forward_backward(self, input_ids: Any, last_micro: bool) -> Any:
        import torch

        micro, seq = input_ids.shape
        chunk = seq // self.sp
        shard = slice(self.sp_rank * chunk, (self.sp_rank + 1) * chunk)
        # the next token of every position of the whole sequence (the last has none: -100), cut like the inputs, as
        # DeepSpeed's UlyssesSPDataLoaderAdapter prepares shift_labels: a shard's last label is the next shard's
        # first token
        shifted = torch.nn.functional.pad(input_ids[:, 1:], (0, 1), value=-100)
        positions = torch.arange(seq, device=input_ids.device)[None, shard].expand(micro, -1)
        mine, labels = input_ids[:, shard].contiguous(), shifted[:, shard].contiguous()  # the loss views them flat
        loss = self.engine(input_ids=mine, position_ids=positions, labels=mine, shift_labels=labels).loss
        # the shard's mean loss weighted by its share of the sequence's real tokens: the group's sum is the mean
        # over the whole sequence (what one process computes)
        share = (labels != -100).sum() / (shifted != -100).sum()
        weighted = loss * share
        self.engine.backward(weighted * self.gradient_scale)  # scales by 1/grad_accum; reduces at the boundary
        if last_micro and self.measure_states:
            self._pending_states = count_deepspeed(self.engine)
        self.engine.step()
        # the loop averages every rank's value: times sp, over a group of sp ranks that is the sequence's mean loss
        return (weighted * self.sp).detach()


def register_ulysses(model: Any, attention: str, sp: int, micro: int, seq_len: int) -> Any:
    """DeepSpeed's Ulysses wrapper put around the model's ``attention`` in transformers' table, with the two bridges
    every family needs (:func:`stated_kv_heads`, :func:`heads_apart`), and the sequence-parallel groups built (``sp``
    consecutive ranks; parallel_state_sp.initialize_sequence_parallel, a collective: every rank calls it). Returns
    DeepSpeed's mpu. The engine's and calibrate's one way in."""
    from deepspeed.runtime.sequence_parallel.ulysses_sp import UlyssesSPAttentionHF

    with stated_kv_heads(model.config):
        mpu = UlyssesSPAttentionHF.register_with_transformers(
            model_name_or_path=model, core_attn_implementation=attention, sequence_parallel_size=sp,
            micro_batch_size=micro, seq_length=seq_len, seq_length_is_variable=False)
    heads_apart(attention)
    return mpu


@contextmanager
def stated_kv_heads(config: Any) -> Iterator[None]:
    """The config as DeepSpeed's Ulysses reads it: ``register_with_transformers`` sizes its all-to-all by the text
    config's ``num_key_value_heads`` (deepspeed 0.19.8 runtime/sequence_parallel/ulysses_sp.py), which a GPT-2 or
    GPT-NeoX config does not have: their attention is multi-head, each head its own key and value, so there are as
    many key/value heads as heads. Stated only while DeepSpeed reads it; the model's config (saved with its
    checkpoints and exports) is left as it was."""
    text = config.get_text_config()
    missing = not hasattr(text, "num_key_value_heads")
    if missing:
        text.num_key_value_heads = text.num_attention_heads
    try:
        yield
    finally:
        if missing:
            del text.num_key_value_heads


def heads_apart(attention: str) -> None:
    """Give transformers' attention table the output shape its models expect from DeepSpeed's Ulysses wrapper (just
    registered under the ``attention`` the model calls). Transformers' attention functions return (batch, sequence,
    heads, head width) (integrations/sdpa_attention.py); DeepSpeed 0.19.8's wrapper returns (batch, local sequence,
    heads x head width). Llama's and GPT-NeoX's attention reshape either to (batch, sequence, hidden) by the
    input's shape; GPT-2's merges the output's last two dimensions (GPT2Attention: ``reshape(*shape[:-2], -1)``),
    which on the wrapper's output folds the sequence into the hidden size. Splitting the last dimension back into
    heads fits both."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    ulysses = ALL_ATTENTION_FUNCTIONS[attention]

    def split(module: Any, query: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        out, weights = ulysses(module, query, *args, **kwargs)
        return out.unflatten(-1, (-1, query.shape[-1])), weights

    ALL_ATTENTION_FUNCTIONS[attention] = split
