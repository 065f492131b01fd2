"""The parallel layout of a job: data x tensor x pipeline ranks, and the batch arithmetic on it (pure, stdlib).

The only place this arithmetic lives: render, validate, the worker and the planner all ask
:class:`ParallelDims`. Ranks are laid out as DeepSpeed's pipeline grid (``PipeModelDataParallelTopology``,
axes pipe, data, model) and Megatron-LM's default order: the ``tp`` ranks of a tensor-parallel group are
consecutive, then data-parallel replicas, then pipeline stages: rank = stage·dp·tp + dp_rank·tp + tp_rank.
"""

from __future__ import annotations

from dataclasses import dataclass

from dsbench.errors import UserError


@dataclass(frozen=True, kw_only=True, slots=True)
class ParallelDims:
    """How ``world`` ranks are split: ``dp`` data-parallel replicas x ``tp`` tensor x ``pp`` pipeline ranks."""

    world: int
    """Total ranks (``--world-size``, a hostfile's slots, or the launcher's WORLD_SIZE)."""
    tp: int = 1
    """Tensor-parallel degree (``--tp``): ranks that split every layer's matrices and share one batch."""
    pp: int = 1
    """Pipeline stages (``--pipeline-stages``): ranks that each hold a slice of the layers."""

    def __post_init__(self) -> None:
        for value, flag in ((self.world, "the world size"), (self.tp, "--tp"), (self.pp, "--pipeline-stages")):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise UserError(f"{flag} must be an integer >= 1, got {value!r}")
        if self.world % (self.tp * self.pp):
            raise UserError(f"world size {self.world} is not divisible by --pipeline-stages {self.pp} x --tp "
                            f"{self.tp} = {self.tp * self.pp} (change the ranks or the degrees)")

    @property
    def dp(self) -> int:
        """Data-parallel replicas: world / (tp x pp)."""
        return self.world // (self.tp * self.pp)

    @property
    def model_parallel(self) -> int:
        """Ranks that share one batch: tp x pp (a tensor-parallel group splits it, a pipeline passes it along)."""
        return self.tp * self.pp

    def accumulation_for(self, pure_dp_accum: int) -> int:
        """Micro-batches each replica accumulates so that the global batch equals pure data parallelism's on the
        same ranks (micro x ``pure_dp_accum`` x world): with dp = world / (tp x pp) replicas, tp x pp times more."""
        return pure_dp_accum * self.model_parallel

    def pure_dp_accumulation(self, accum: int) -> int:
        """The inverse of :meth:`accumulation_for`: the accumulation pure data parallelism would use for the global
        batch this layout trains with ``accum`` (at least 1)."""
        return max(1, accum // self.model_parallel)

    def rank_share(self, samples: float) -> float:
        """One rank's share of the work on ``samples`` samples (or tokens) of its replica: a tensor-parallel group
        splits each sample's matrices tp ways, a pipeline's stages split its layers pp ways."""
        return samples / self.model_parallel

    def dp_rank(self, rank: int) -> int:
        """The data-parallel replica ``rank`` belongs to (which part of each global batch it reads)."""
        return (rank // self.tp) % self.dp

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
        tp times the samples actually trained.
        """
        return self.world // self.pp

    def check_model(self, *, name: str, heads: int, kv_heads: int, layers: int) -> None:
        """The model can be split this way: tp divides the attention and key/value heads; pp <= layers."""
        if heads % self.tp or kv_heads % self.tp:
            raise UserError(f"--tp {self.tp} must divide {name}'s {heads} attention heads and {kv_heads} key/value "
                            "heads (each rank holds whole heads)")
        if self.pp > layers:
            raise UserError(f"--pipeline-stages {self.pp} exceeds {name}'s {layers} decoder layers (each stage "
                            "needs at least one)")


def interleaved_accepts(micro_batches: int, stages: int) -> bool:
    """Whether torch's interleaved 1F1B takes this many micro-batches: it runs max(1, M // P) rounds of equal size
    (torch.distributed.pipelining.schedules.ScheduleInterleaved1F1B), so they must split M evenly."""
    return micro_batches % max(1, micro_batches // stages) == 0


def bubble_fraction(stages: int, micro_batches: int, virtual_stages: int = 1) -> float:
    """Idle share of each stage in a GPipe/1F1B pipeline step: (P - 1) / (M + P - 1) for P stages and M
    micro-batches (GPipe, Huang et al. 2019; ../shared/seeds/000 and 004); with interleaved 1F1B over V chunks per
    stage, (P - 1) / (V·M + P - 1) (Narayanan et al. 2021 sec. 2.2). 0 without a pipeline."""
    return (stages - 1) / (virtual_stages * micro_batches + stages - 1) if stages > 1 else 0.0


def in_flight_micro_batches(stages: int, micro_batches: int, virtual_stages: int = 1, gpipe: bool = False) -> float:
    """Micro-batches whose activations the first stage holds at its peak: all M under GPipe (every forward before
    any backward); min(P, M) under 1F1B; P·(1 + (P - 1)/(P·V)) under interleaved 1F1B, capped at M (Korthikanti et
    al. 2022 sec. 4.2.3, after Narayanan et al. 2021). 1 without a pipeline."""
    if stages <= 1:
        return 1
    if gpipe:
        return micro_batches
    held = stages * (1 + (stages - 1) / (stages * virtual_stages)) if virtual_stages > 1 else stages
    return min(held, micro_batches)
