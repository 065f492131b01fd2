"""A layout the planner prices: one strategy with its degrees and options (pure)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from dsbench.parallel import ParallelDims
from dsbench.strategies import Strategy
from dsbench.strategy_match import for_candidate

_ALWAYS_WRITTEN = ("strategy", "offload", "offload_param", "tp", "pp")
"""The fields every plan result row has carried (:meth:`Candidate.from_dict` requires them)."""
_NOT_PLANNER = ("checkpointing", "autocast", "config_accounting")
"""Fields that say how a layout runs, not which layout it is (no strategy name holds them)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Candidate:
    strategy: str
    """ddp, zero0-3, fsdp, fsdp_hybrid."""
    dp_shard: int = 0
    """fsdp_hybrid's shard group: the data-parallel ranks that split one copy (a node's: :func:`hybrid`); 0 for
    every other strategy. A plan row written before 2026-12-01 has none: its launch command is not rebuilt."""
    offload: str = "none"
    offload_param: str = "none"
    tp: int = 1
    pp: int = 1
    checkpointing: bool = False
    engine: str = "deepspeed"
    """Who implements tp/pp: ``deepspeed`` (AutoTP, the pipeline engine) or ``torch`` (torch_tp, torch_pp)."""
    virtual_stages: int = 1
    """torch_pp's interleaved 1F1B: model chunks per pipeline stage (1: plain 1F1B)."""
    zero_bubble: bool = False
    """...under torch's ScheduleInterleavedZeroBubble: each backward split into its input and weight gradients."""
    ulysses: int = 1
    """DeepSpeed Ulysses' sequence-parallel degree (1: none)."""
    sequence_parallel: bool = False
    """torch_tp's ``--sequence-parallel``: norms on sequence shards, reduce-scatter and all-gather for all-reduce."""
    loss_parallel: bool = False
    """torch_tp's ``--loss-parallel``: the LM head split over the vocabulary, the loss on its shards."""
    autocast: bool = False
    """A DeepSpeed config's ``torch_autocast``: the forward under torch.autocast over fp32 weights (only a given
    --config's row; dsbench's own DDP autocasts whatever this says)."""
    config_accounting: str | None = None
    """The model-state accounting a given --config's dtypes hold where its precision alone would give another
    (plan/config_row.config_accounting); None for every other row."""

    @classmethod
    def from_dict(cls, row: dict[str, Any]) -> Candidate:
        """The candidate of a plan result's row (:meth:`Estimate.to_dict`): the one reader of that JSON. A field a
        row written before it existed lacks takes its default; those every row has had are required."""
        return cls(checkpointing=bool(row.get("activation_checkpointing")),
                   **{f.name: row[f.name] if f.name in _ALWAYS_WRITTEN else row.get(f.name, f.default)
                      for f in fields(cls) if f.name != "checkpointing"})

    def dims(self, world: int) -> ParallelDims:
        """Its layout on ``world`` ranks (the one place a candidate's degrees become dims)."""
        return ParallelDims(world=world, tp=self.tp, pp=self.pp, sp=self.ulysses, dp_shard=self.dp_shard)

    @property
    def vocab_parallel_head(self) -> bool:
        """The LM head's vocabulary is split over the tp ranks: DeepSpeed AutoTP's, and torch_tp's under
        ``--loss-parallel`` (dsbench's torch_tp otherwise keeps the head whole on every rank)."""
        return self.tp > 1 and (self.engine == "deepspeed" or self.loss_parallel)

    @property
    def tp_kind(self) -> str:
        """Which calibrated cost a split layer pays (:data:`dsbench.plan.profile.TP_LAYER_RATE`): DeepSpeed
        AutoTP's (``autotp``), torch_tp's DTensor layers (``dtensor``), or with ``--sequence-parallel``
        (``dtensor_sp``)."""
        if self.engine != "torch":
            return "autotp"
        return "dtensor_sp" if self.sequence_parallel else "dtensor"

    @property
    def planner_fields(self) -> dict[str, Any]:
        """Its fields as :attr:`dsbench.strategies.Strategy.planner_fields` spells them (all but checkpointing)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _NOT_PLANNER}

    @property
    def runs_as(self) -> Strategy:
        """The strategy that runs it, in compare's vocabulary where compare has it (dsbench/strategies.py)."""
        return for_candidate(**self.planner_fields)

    @property
    def name(self) -> str:
        return self.runs_as.name + (" + autocast" if self.autocast else "") + (" + ckpt" if self.checkpointing else "")


def hybrid(gpus_per_node: int, model_parallel: int = 1) -> Candidate:
    """HSDP as the planner offers it: each node's data-parallel ranks shard one copy, the nodes replicate it (FSDP's
    HYBRID_SHARD; ``dsbench launch --strategy fsdp --dp-shard S``)."""
    return Candidate(strategy="fsdp_hybrid", dp_shard=gpus_per_node // model_parallel)
