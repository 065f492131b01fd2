"""Every strategy dsbench knows, defined once (stdlib only; ``tests/unit/test_strategies.py`` fails when another
module holds its own table of these names). Three vocabularies:

- the worker's engines (``dsbench launch --strategy``): who trains on each rank;
- the planner's data-parallel strategies (``dsbench plan``): what each shards, after the ZeRO paper (Rajbhandari
  et al. 2020, section 5: P_os, P_os+g, P_os+g+p) and FSDP's full sharding (Zhao et al. 2023);
- compare's strategies (``compare --strategies``, ``tune``, ``whatif``, ``plan --verify``, report labels): one
  frozen :class:`Strategy` each; names with a degree are parameterised (``torch_tp{N}``, ``pipe{P}``, ...), and
  the planner prints its candidates in the same vocabulary.

A strategy's launch flags, speed options, ranks per batch and planner candidate derive from its fields. Adding a
strategy touches this file and, if its engine is new, the worker.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from dsbench.parallel import ParallelDims

# --- the worker's engines -------------------------------------------------------------------------------------------
ENGINES = ("deepspeed", "ddp", "fsdp", "single", "torch_pp", "torch_tp", "torch_3d")
"""``dsbench launch --strategy``: the engine each rank trains with (``auto`` picks ddp or single by world size)."""
LAUNCH_STRATEGIES = ("auto", *ENGINES)
RENDERED_ENGINES = ("deepspeed", "ddp", "fsdp")
"""Engines ``dsbench render`` writes a config for, and the kinds of accelerate YAML dsbench launches."""
ACCELERATE_TYPES = {"DEEPSPEED": "deepspeed", "FSDP": "fsdp", "MULTI_GPU": "ddp", "NO": "single"}
"""accelerate's ``distributed_type`` -> the engine that trains it on each rank."""
SPLIT_ENGINES = {"torch_pp": ("pp",), "torch_tp": ("tp",), "torch_3d": ("tp", "pp")}
"""The torch engines that split the model, and the degrees each splits it by (their ``dsbench launch`` flags)."""
SHARD_GROUPED = ("fsdp", "torch_3d")
"""The engines whose FSDP2 shard group ``--dp-shard`` sizes (fewer ranks than data parallelism: HSDP)."""
TORCH_TP_ONLY = {"sequence_parallel": "--sequence-parallel", "loss_parallel": "--loss-parallel"}
"""dsbench launch's flags of DTensor tensor parallelism (torch_tp), by run-description field."""


# --- the planner's data-parallel strategies ------------------------------------------------------------------------
_ALL_STATES = ("params", "grads", "optimizer", "master")


@dataclass(frozen=True, slots=True)
class Sharding:
    """One of the planner's data-parallel strategies: which model states it shards over the data-parallel ranks."""

    name: str
    zero: int | None
    """The ZeRO stage (``None`` for DDP and FSDP, which are not DeepSpeed)."""
    sharded: tuple[str, ...]
    """Model states split over data parallelism (ZeRO paper section 5; FSDP FULL_SHARD shards all, like stage 3)."""
    hybrid: bool = False
    """Sharded within a node, replicated across nodes (FSDP HYBRID_SHARD)."""


PLANNER: dict[str, Sharding] = {sharding.name: sharding for sharding in (
    Sharding("ddp", None, ()),
    Sharding("zero0", 0, ()),
    Sharding("zero1", 1, ("optimizer", "master")),
    Sharding("zero2", 2, ("grads", "optimizer", "master")),
    Sharding("zero3", 3, _ALL_STATES),
    Sharding("fsdp", None, _ALL_STATES),
    Sharding("fsdp_hybrid", None, _ALL_STATES, hybrid=True),
)}
GPU_DATA_PARALLEL = (*(name for name in PLANNER if name != "zero0"), "fsdp_no_reshard")
"""The data-parallel strategies the GPU time model prices (the oracle schema's ``strategy``): the planner's, and
FSDP2 without resharding after the forward (torchtitan's choice under pipeline parallelism)."""
THREE_D_SHARDING = {0: "fsdp", 1: "ddp"}
"""An FSDP2 engine's ``dp_shard`` (torch_3d's, fsdp's) -> the planner's strategy: every data-parallel rank in one
group (0) is FSDP, 1 (replicas only) DDP, a group in between ``fsdp_hybrid``."""
SIMPLICITY = ("ddp", "zero1", "zero2", "fsdp", "zero3", "fsdp_hybrid")
"""On a near tie the planner ranks the simpler strategy higher, in this order."""


# --- compare's strategies -------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Strategy:
    """One compare strategy: what runs on each rank and how it is launched."""

    name: str
    engine: str
    """The worker's engine (``dsbench launch --strategy``)."""
    launcher: str
    zero: int | None = None
    """The ZeRO stage of a DeepSpeed strategy."""
    offload: str = "none"
    """ZeRO's optimizer offload (``--offload``)."""
    offload_param: str = "none"
    """ZeRO-3's parameter offload (``--offload-param``)."""
    tp: int = 1
    pp: int = 1
    reshard: bool = True
    """FSDP frees the gathered parameters after forward (``--no-fsdp-reshard`` keeps them)."""
    sequence_parallel: bool = False
    """torch_tp's ``--sequence-parallel`` (names ending ``_sp``)."""
    loss_parallel: bool = False
    """torch_tp's ``--loss-parallel`` (names ending ``_lp``)."""
    virtual_stages: int = 1
    """torch_pp's interleaved 1F1B with this many chunks per rank (names ending ``_interleaved{V}``)."""
    zero_bubble: bool = False
    """...under torch's ScheduleInterleavedZeroBubble instead (names ending ``_zb{V}``)."""
    ulysses: int = 1
    """DeepSpeed Ulysses' sequence-parallel degree (``--ulysses``; ``ulysses{N}``, ``zero3_ulysses{N}``)."""
    dp_shard: int = 0
    """FSDP2's shard group (``--dp-shard``): 0 all data-parallel ranks (FSDP), between HSDP; torch_3d's names end
    ``_shard{S}`` (1 is DDP there), FSDP's is ``fsdp_shard{S}``."""
    planned: bool = True
    """The planner has a model of it (``plan --verify``, ``tune`` and report predictions use it)."""

    @property
    def model_parallel(self) -> int:
        """Ranks that share one batch (tp x pp x Ulysses' degree): a cell accumulates that many micro-batches, so
        every strategy trains the global batch of pure data parallelism (micro-batch x world size) and the same
        losses."""
        return self.tp * self.pp * self.ulysses

    @property
    def rank_multiple(self) -> int:
        """Its world sizes are multiples of this: model-parallel ranks x FSDP2's shard group (whole groups)."""
        return self.model_parallel * (self.dp_shard or 1)

    def dims(self, world: int) -> ParallelDims:
        """Its layout on ``world`` ranks."""
        return ParallelDims(world=world, tp=self.tp, pp=self.pp, sp=self.ulysses, dp_shard=self.dp_shard)

    @property
    def compiles(self) -> bool:
        """The worker applies ``--compile``: not to pipeline stages or DTensor/AutoTP layers."""
        return self.model_parallel == 1

    @property
    def steps_torch_adamw(self) -> bool:
        """It steps torch AdamW, so ``--fused-optimizer`` applies (DeepSpeed steps its config's optimizer)."""
        return self.engine != "deepspeed"

    @property
    def family(self) -> str:
        """The engine family ``calibrate --check`` scales as one (plan/selfcheck.py; each family's code path is in
        docs/planner.md, "calibrate --check"): one per form of parallelism and per ZeRO optimizer (ZeRO-1 reduces
        at the accumulation boundary, ZeRO-2's hooks every micro-step, the offloaded ZeRO-1/2 step on the host);
        ``single`` runs DDP's loop on one rank."""
        if self.ulysses > 1:
            return "ulysses"
        if self.engine == "torch_3d":
            return "torch_3d"
        if self.pp > 1:
            return "pipeline" if self.engine == "torch_pp" else "pipe_engine"
        if self.tp > 1:
            return "tensor" if self.engine == "torch_tp" else "autotp"
        if self.engine == "deepspeed":
            if self.offload != "none" and (self.zero or 0) in (1, 2):
                return "zero_offload"
            return {0: "deepspeed", 1: "zero1", 3: "zero3"}.get(self.zero or 0, "zero")
        return "ddp" if self.engine == "single" else self.engine

    @property
    def launch_flags(self) -> tuple[str, ...]:
        """The ``dsbench launch`` flags beyond ``--strategy`` and ``--launcher``."""
        flags = [] if self.zero is None else ["--zero", str(self.zero)]
        for flag, where in (("--offload", self.offload), ("--offload-param", self.offload_param)):
            flags += [flag, where] if where != "none" else []
        for flag, degree in (("--tp", self.tp), ("--pipeline-stages", self.pp), ("--ulysses", self.ulysses)):
            flags += [flag, str(degree)] if degree > 1 else []
        if self.virtual_stages > 1:
            flags += ["--pipeline-schedule", "interleaved-zb" if self.zero_bubble else "interleaved",
                      "--virtual-stages", str(self.virtual_stages)]
        if self.dp_shard:
            flags += ["--dp-shard", str(self.dp_shard)]
        flags += ["--sequence-parallel"] * self.sequence_parallel + ["--loss-parallel"] * self.loss_parallel
        return tuple(flags)

    @property
    def worker_flags(self) -> tuple[str, ...]:
        """The worker flags (after ``--``) the strategy needs."""
        return () if self.reshard else ("--no-fsdp-reshard",)

    @property
    def planner_fields(self) -> dict[str, object]:
        """The planner's candidate that models it (strategy, offloads, tp, pp, and who implements tp/pp); ``single``
        is DDP on one rank. Whether the planner's model is used for it is :attr:`planned`."""
        sharding = (f"zero{self.zero}" if self.zero is not None else
                    THREE_D_SHARDING.get(self.dp_shard, "fsdp_hybrid") if self.engine in SHARD_GROUPED else "ddp")
        return {"strategy": sharding, "dp_shard": self.dp_shard if sharding == "fsdp_hybrid" else 0,
                "offload": self.offload, "offload_param": self.offload_param, "tp": self.tp, "pp": self.pp,
                "engine": "torch" if self.engine in SPLIT_ENGINES else "deepspeed",
                "virtual_stages": self.virtual_stages, "ulysses": self.ulysses,
                "sequence_parallel": self.sequence_parallel, "loss_parallel": self.loss_parallel,
                "zero_bubble": self.zero_bubble}


FIXED = {strategy.name: strategy for strategy in (
    Strategy("single", "single", "torchrun"),
    Strategy("ddp", "ddp", "torchrun"),
    Strategy("fsdp", "fsdp", "torchrun"),
    Strategy("fsdp_no_reshard", "fsdp", "torchrun", reshard=False, planned=False),
    *(Strategy(f"zero{stage}", "deepspeed", "deepspeed", zero=stage) for stage in range(4)),
    Strategy("zero2_offload", "deepspeed", "deepspeed", zero=2, offload="cpu"),
    Strategy("zero3_offload", "deepspeed", "deepspeed", zero=3, offload="cpu", offload_param="cpu"),
    # NVMe needs a swap folder (--nvme-path): compare gives each cell its own; plan --verify and tune leave it out
    Strategy("zero3_nvme", "deepspeed", "deepspeed", zero=3, offload="nvme", offload_param="nvme", planned=False),
)}

# Parameterised families: the name's digits are the degree (>= 2).
FAMILIES: dict[str, tuple[str, Strategy]] = {
    # DeepSpeed AutoTP with ZeRO-1 (Llama-family and GPT-NeoX models; GPT-2's Conv1D is not split)
    "zero1_tp": ("tp", Strategy("zero1_tp{N}", "deepspeed", "deepspeed", zero=1)),
    # and with ZeRO-3 (since 2026-12-01: the config leaves train_batch_size to DeepSpeed, configs/batch.checked_twice)
    "zero3_tp": ("tp", Strategy("zero3_tp{N}", "deepspeed", "deepspeed", zero=3)),
    # DeepSpeed's pipeline engine with ZeRO-1
    "pipe": ("pp", Strategy("pipe{P}", "deepspeed", "deepspeed", zero=1)),
    # torch.distributed.pipelining, 1F1B
    "torch_pipe": ("pp", Strategy("torch_pipe{P}", "torch_pp", "torchrun")),
    # DTensor Megatron-style tensor parallel (Llama-family and GPT-NeoX models)
    "torch_tp": ("tp", Strategy("torch_tp{N}", "torch_tp", "torchrun")),
    # FSDP2 as HSDP: shard groups of S ranks (a node's, as the planner's fsdp_hybrid), replicated across them
    "fsdp_shard": ("dp_shard", Strategy("fsdp_shard{S}", "fsdp", "torchrun")),
    # DeepSpeed Ulysses sequence parallelism (its ALST integration for HF attention) with ZeRO-1 and ZeRO-3
    "ulysses": ("ulysses", Strategy("ulysses{N}", "deepspeed", "deepspeed", zero=1)),
    "zero3_ulysses": ("ulysses", Strategy("zero3_ulysses{N}", "deepspeed", "deepspeed", zero=3)),
}
ULYSSES_SHARDINGS = tuple(f"zero{template.zero}" for degree, template in FAMILIES.values() if degree == "ulysses")
"""The planner's strategies that dsbench runs with DeepSpeed Ulysses (its families' ZeRO stages)."""
_FAMILY_NAME = re.compile(f"({'|'.join(FAMILIES)})" r"([0-9]{1,4})((?:_sp)?(?:_lp)?|_(?:interleaved|zb)[0-9]{1,2})")
TP_OPTIONS = {"_sp": "sequence_parallel", "_lp": "loss_parallel"}
"""torch_tp's option suffixes (``torch_tp2_sp_lp``); torch_pipe's are ``_interleaved{V}`` and ``_zb{V}``."""
LISTED = (*FIXED, "zero1_tp2", "pipe2", "torch_pipe2", "torch_tp2", "torch_3d_tp2_pp2", "ulysses2")
"""Compare's strategies as listed to users and searched by ``tune`` (each family at degree 2)."""
DEFAULT_COMPARE = ("single", "ddp", "fsdp", "zero1", "zero2", "zero3", "zero2_offload")
CHECKED = ("single", "ddp", "fsdp", "zero1", "zero2", "zero3", "torch_tp2", "zero1_tp2", "torch_pipe2", "pipe2",
           "ulysses2")
"""``calibrate --check``'s cell for each engine family (:attr:`Strategy.family`), in this order, where the model and
ranks allow (one rank: single alone; TP and Ulysses where the family splits: model_checks.splitting_families)."""
GPU_ONE_RANK = ("single", "zero1", "zero2", "zero3")
"""``calibrate --check``'s cells on one CUDA GPU: the plain loop and ZeRO-1/2/3 (gpu_fit.py fits zero_host_us)."""
WHATIF_DEFAULT = ("ddp", "zero2", "zero3", "fsdp", "pipe2")
"""Named in whatif's error when --strategies is empty."""

_THREE_D_NAME = re.compile(r"torch_3d_tp([1-9][0-9]{0,3})_pp([1-9][0-9]{0,3})(?:_(interleaved|zb)([1-9][0-9]?))?"
                           r"(?:_shard([1-9][0-9]{0,3}))?")
"""torch_3d's names: ``torch_3d_tp{T}_pp{P}`` (FSDP2 over every dp rank), ``..._interleaved{V}`` or ``..._zb{V}`` (V
chunks per stage, as torch_pipe's), ``..._shard{S}`` (1 is DDP, between HSDP). P >= 2 (else torch_tp), V >= 2."""


def _chunks(virtual_stages: int, zero_bubble: bool) -> str:
    """A pipeline's suffix for its chunks per rank: ``_interleaved{V}`` or ``_zb{V}`` (none for one chunk)."""
    return f"_{'zb' if zero_bubble else 'interleaved'}{virtual_stages}" if virtual_stages > 1 else ""


def three_d(tp: int, pp: int, dp_shard: int = 0, virtual_stages: int = 1, zero_bubble: bool = False) -> Strategy:
    """torch_3d at these degrees (its name from them)."""
    name = f"torch_3d_tp{tp}_pp{pp}{_chunks(virtual_stages, zero_bubble)}" + (f"_shard{dp_shard}" if dp_shard else "")
    return Strategy(name, "torch_3d", "torchrun", tp=tp, pp=pp, dp_shard=dp_shard, virtual_stages=virtual_stages,
                    zero_bubble=zero_bubble and virtual_stages > 1)


def lookup(name: str) -> Strategy | None:
    """The strategy a compare name denotes (``None`` for an unknown name or a degree below 2)."""
    if name in FIXED:
        return FIXED[name]
    if (three := _THREE_D_NAME.fullmatch(name)) is not None:
        chunks = int(three[4] or 1)
        valid = int(three[2]) >= 2 and (three[4] is None or chunks >= 2)
        return three_d(int(three[1]), int(three[2]), int(three[5] or 0), chunks, three[3] == "zb") if valid else None
    if (match := _FAMILY_NAME.fullmatch(name)) is None or int(match[2]) < 2 or match[2].startswith("0"):
        return None
    options: dict[str, Any] = {field: True for part, field in TP_OPTIONS.items() if part in (suffix := match[3])}
    if suffix.startswith(("_interleaved", "_zb")):
        zero_bubble = suffix.startswith("_zb")
        options = {"virtual_stages": int(suffix.removeprefix("_zb" if zero_bubble else "_interleaved")),
                   "zero_bubble": zero_bubble}
        if options["virtual_stages"] < 2 or match[1] != "torch_pipe":
            return None
    elif suffix and match[1] != "torch_tp":
        return None
    degree_of, template = FAMILIES[match[1]]
    return replace(template, name=name, **{degree_of: int(match[2])}, **options)


def known(name: str) -> bool:
    return lookup(name) is not None


def get(name: str) -> Strategy:
    """The strategy of a name already checked by :func:`known` (a KeyError names a programming error)."""
    if (strategy := lookup(name)) is None:
        raise KeyError(name)
    return strategy


def choices() -> str:
    """The names a user may give, for error messages."""
    return ", ".join((*FIXED, "fsdp_shard{S}", "zero1_tp{N}", "zero3_tp{N}", "pipe{P}",
                      "torch_pipe{P}[_interleaved{V}|_zb{V}]", "torch_tp{N}[_sp][_lp]", "ulysses{N}",
                      "zero3_ulysses{N}", "torch_3d_tp{T}_pp{P}[_interleaved{V}|_zb{V}][_shard{S}]"))


def with_options(name: str, sequence_parallel: bool = False, loss_parallel: bool = False,
                 virtual_stages: int = 1, zero_bubble: bool = False) -> str:
    """A torch_tp / torch_pipe family name with its option suffixes (:data:`TP_OPTIONS`, :func:`_chunks`)."""
    return name + "_sp" * sequence_parallel + "_lp" * loss_parallel + _chunks(virtual_stages, zero_bubble)
