"""The parallel layout of a job: data x sequence x tensor x pipeline ranks, and the batch arithmetic on it (pure,
stdlib).

The only place this arithmetic lives: render, validate, the worker and the planner all ask
:class:`ParallelDims`. Ranks are laid out as DeepSpeed's pipeline grid (``PipeModelDataParallelTopology``,
axes pipe, data, model) and Megatron-LM's default order: the ``tp`` ranks of a tensor-parallel group are
consecutive, then data-parallel replicas, then pipeline stages: rank = stage·dp·tp + dp_rank·tp + tp_rank.
DeepSpeed's Ulysses groups ``sp`` consecutive ranks into one sequence-parallel group
(runtime/sequence_parallel/parallel_state_sp.py ``initialize_sequence_parallel``), so with it rank = dp_rank·sp +
sp_rank (dsbench runs Ulysses with tp = pp = 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dsbench.errors import UserError


@dataclass(frozen=True, kw_only=True, slots=True)
class ParallelDims:
    """How ``world`` ranks are split: ``dp`` data-parallel replicas x ``sp`` sequence x ``tp`` tensor x ``pp``
    pipeline ranks."""

    world: int
    """Total ranks (``--world-size``, a hostfile's slots, or the launcher's WORLD_SIZE)."""
    tp: int = 1
    """Tensor-parallel degree (``--tp``): ranks that split every layer's matrices and share one batch."""
    pp: int = 1
    """Pipeline stages (``--pipeline-stages``): ranks that each hold a slice of the layers."""
    sp: int = 1
    """Ulysses sequence-parallel degree (``--ulysses``, DeepSpeed's ``sequence_parallel_size``): ranks that each
    hold a contiguous slice of every sequence and exchange attention heads by all-to-all."""
    dp_shard: int = 0
    """FSDP2's shard group under torch_3d (``--dp-shard``): the data-parallel ranks one copy of the model states is
    split over; 0 means all of them. 1 is DDP (replicas only), anything between is HSDP: ``dp / dp_shard`` replicas
    of a ``dp_shard``-way sharded model (torchtitan's dp_replicate x dp_shard)."""

    def __post_init__(self) -> None:
        for value, flag in ((self.world, "the world size"), (self.tp, "--tp"), (self.pp, "--pipeline-stages"),
                            (self.sp, "--ulysses")):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise UserError(f"{flag} must be an integer >= 1, got {value!r}")
        if self.sp > 1 and self.tp * self.pp > 1:
            raise UserError(f"--ulysses {self.sp} runs with data parallelism only in dsbench: drop --tp/"
                            "--pipeline-stages (DeepSpeed's Ulysses for HF models has no pipeline or AutoTP path)")
        if self.world % (self.tp * self.pp * self.sp):
            what = f"--ulysses {self.sp}" if self.sp > 1 else f"--pipeline-stages {self.pp} x --tp {self.tp}"
            raise UserError(f"world size {self.world} is not divisible by {what} = {self.model_parallel} (change "
                            "the ranks or the degrees)")
        if not isinstance(self.dp_shard, int) or isinstance(self.dp_shard, bool) or self.dp_shard < 0:
            raise UserError(f"--dp-shard must be an integer >= 1, got {self.dp_shard!r}")
        if self.dp_shard and self.dp % self.dp_shard:
            raise UserError(f"--dp-shard {self.dp_shard} must divide the {self.dp} data-parallel ranks (world "
                            f"{self.world} / {self.model_parallel} model-parallel ranks)")

    @property
    def dp(self) -> int:
        """Data-parallel replicas: world / (sp x tp x pp)."""
        return self.world // self.model_parallel

    @property
    def shard(self) -> int:
        """Data-parallel ranks that split one copy of the model states (FSDP2's shard group): ``dp_shard``, or all
        of dp."""
        return self.dp_shard or self.dp

    @property
    def replicate(self) -> int:
        """Copies of the sharded model states across data parallelism: dp / shard (1 under plain FSDP)."""
        return self.dp // self.shard

    @property
    def model_parallel(self) -> int:
        """Ranks that share one batch: sp x tp x pp (a sequence-parallel group splits each sequence, a
        tensor-parallel group each matrix, a pipeline passes the batch along)."""
        return self.sp * self.tp * self.pp

    def accumulation_for(self, pure_dp_accum: int) -> int:
        """Micro-batches each replica accumulates so that the global batch equals pure data parallelism's on the
        same ranks (micro x ``pure_dp_accum`` x world): with dp = world / (sp x tp x pp) replicas, that many times
        more."""
        return pure_dp_accum * self.model_parallel

    def pure_dp_accumulation(self, accum: int) -> int:
        """The inverse of :meth:`accumulation_for`: the accumulation pure data parallelism would use for the global
        batch this layout trains with ``accum`` (at least 1)."""
        return max(1, accum // self.model_parallel)

    def rank_share(self, samples: float) -> float:
        """One rank's share of the work on ``samples`` samples (or tokens) of its replica: a sequence-parallel group
        splits each sample's tokens sp ways, a tensor-parallel group its matrices tp ways, a pipeline's stages its
        layers pp ways."""
        return samples / self.model_parallel

    def dp_rank(self, rank: int) -> int:
        """The data-parallel replica ``rank`` belongs to (which part of each global batch it reads)."""
        return (rank // (self.tp * self.sp)) % self.dp

    def sp_rank(self, rank: int) -> int:
        """Which slice of each sequence ``rank`` holds in its Ulysses group (0 without one)."""
        return rank % self.sp

    def samples_per_step(self, micro_batch: int, grad_accum: int) -> int:
        """Distinct samples per optimizer step (the global batch): micro x accumulation x dp.

        A tensor-parallel group shares one batch and a pipeline's stages pass one batch along, so only
        data-parallel replicas multiply it.
        """
        return micro_batch * grad_accum * self.dp

    def deepspeed_batch_ranks(self) -> int:
        """The rank count in DeepSpeed 0.19.8's ``train_batch_size`` assertion: world / pipeline stages.

        The pipeline engine passes its grid, so DeepSpeed divides by the stages; with AutoTP
        ``DeepSpeedConfig`` gets no mpu and counts the ranks of a TP group as if each had its own data
        (runtime/config.py ``_batch_assertion``). So with AutoTP train_batch_size = micro x accum x world/pp,
        tp times the samples actually trained. With Ulysses DeepSpeed divides by the sequence-parallel degree
        (runtime/config.py: world / ``mpu.get_sequence_parallel_world_size()``).
        """
        return self.world // (self.pp * self.sp)

    def check_model(self, *, name: str, heads: int, kv_heads: int, layers: int) -> None:
        """The model can be split this way: tp divides the attention and key/value heads; pp <= layers; Ulysses'
        degree divides the heads, and the key/value heads or they it (DeepSpeed's UlyssesSPAttentionHF replicates
        key/value heads when there are fewer than ranks)."""
        if heads % self.sp or (kv_heads % self.sp and self.sp % kv_heads):
            raise UserError(f"--ulysses {self.sp} must divide {name}'s {heads} attention heads, and its {kv_heads} "
                            "key/value heads or be divisible by them (the all-to-all gives each rank whole heads)")
        if heads % self.tp or kv_heads % self.tp:
            raise UserError(f"--tp {self.tp} must divide {name}'s {heads} attention heads and {kv_heads} key/value "
                            "heads (each rank holds whole heads)")
        if self.pp > layers:
            raise UserError(f"--pipeline-stages {self.pp} exceeds {name}'s {layers} decoder layers (each stage "
                            "needs at least one)")


def divisors(n: int) -> list[int]:
    """The divisors of ``n`` >= 1, ascending, found in O(sqrt n) (each d <= sqrt n with its pair n / d): the
    micro-batches that split a rank's share of a global batch, which a user may give as 10^12."""
    low = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return low + [n // d for d in reversed(low) if d * d != n]


def widest_tp(ranks: int, heads: int, kv_heads: int) -> int:
    """The largest tensor-parallel degree that ``ranks`` ranks (one node's) can form and the model can split: a
    divisor of the ranks that divides the attention and key/value heads, as :meth:`ParallelDims.check_model`
    requires (each rank holds whole heads); 1 when none above 1 does (llama-tiny's 2 key/value heads on 4 ranks: 2)."""
    return max(d for d in divisors(ranks) if heads % d == 0 and kv_heads % d == 0)


def interleaved_accepts(micro_batches: int, stages: int) -> bool:
    """Whether torch's interleaved 1F1B takes this many micro-batches: it runs max(1, M // P) rounds of equal size
    (torch.distributed.pipelining.schedules.ScheduleInterleaved1F1B), so they must split M evenly."""
    return micro_batches % max(1, micro_batches // stages) == 0


def bubble_fraction(stages: int, micro_batches: int, virtual_stages: int = 1) -> float:
    """Idle share of each stage in a GPipe/1F1B pipeline step: (P - 1) / (M + P - 1) for P stages and M
    micro-batches (GPipe, Huang et al. 2019; ../shared/seeds/000 and 004); with interleaved 1F1B over V chunks per
    stage, (P - 1) / (V·M + P - 1) (Narayanan et al. 2021 sec. 2.2). 0 without a pipeline."""
    return (stages - 1) / (virtual_stages * micro_batches + stages - 1) if stages > 1 else 0.0


def pipeline_notes(stages: int, micro_batches: int) -> list[str]:
    """What a launch says of its pipeline before any rank starts: the idle share when fewer micro-batches than stages
    leave most of each step idle (GPipe runs it)."""
    if micro_batches < stages:
        return [f"warning: {micro_batches} micro-batch(es) for {stages} pipeline stages: each stage idles "
                f"(P-1)/(M+P-1) = {bubble_fraction(stages, micro_batches):.0%} of a step; raise --grad-accum to at "
                f"least {stages}"]
    return []


ZERO_BUBBLE_SHARE = (1 + 1 - 1) / (1 + 1 + 1)
"""The zero-bubble schedule's fill and drain over 1F1B's: (F+B-W)/(F+B+W) at F = B = W (Qi et al. 2024 sec. 2)."""


def warmup_forwards(rank: int, stages: int, micro_batches: int, virtual_stages: int = 1,
                    zero_bubble: bool = False) -> int:
    """Chunk forwards a pipeline rank runs before its first backward. One chunk per rank (1F1B, torch's
    Schedule1F1B and DeepSpeed's TrainSchedule): P - 1 - rank. Interleaved over V chunks: (V - 1)·R + h·(P - 1 -
    rank), R = M // max(1, M // P) micro-batches per round, h = 2 under 1F1B (a forward and a backward per hop back)
    and 1 under zero bubble, capped at M·V (torch.distributed.pipelining.schedules._get_warmup_ops; Megatron-LM's
    interleaved schedule counts the same)."""
    if virtual_stages <= 1:
        return min(stages - 1 - rank, micro_batches)
    per_round = micro_batches // max(1, micro_batches // stages)
    hops = 1 if zero_bubble else 2
    return min((virtual_stages - 1) * per_round + hops * (stages - 1 - rank), micro_batches * virtual_stages)
