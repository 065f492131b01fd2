"""Rank the strategies that fit, with the reason for each place, and the command for the top one (pure)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, replace

from dsbench.errors import UserError
from dsbench.model_checks import drops_window, splitting_families, unsplit_why
from dsbench.models import ModelShape
from dsbench.plan.candidate import Candidate, hybrid
from dsbench.plan.estimate import Estimate, estimate
from dsbench.plan.inputs import Cluster, Workload
from dsbench.strategies import PLANNER, SIMPLICITY, ULYSSES_SHARDINGS, Strategy
from dsbench.units import gib_text


def candidates(cl: Cluster, shape: ModelShape, seq_len: int = 0) -> list[Candidate]:
    """Strategies worth estimating on this cluster, each with and without activation checkpointing: data
    parallelism (DDP, ZeRO, FSDP, offload), tensor and pipeline parallelism by DeepSpeed (AutoTP, the pipeline
    engine, both with ZeRO-1) and by torch (torch_tp, torch_pp; torch_3d across nodes), and DeepSpeed Ulysses under
    ZeRO-1 and ZeRO-3, where the model splits that way (Ulysses not over a sliding window shorter than ``seq_len``,
    which it would drop: model_checks.check_ulysses)."""
    # every data-parallel strategy but ZeRO-0 (DDP's memory and traffic under DeepSpeed); hybrid FSDP across nodes
    base = [Candidate(strategy=s) for s, how in PLANNER.items() if s != "zero0" and not how.hybrid]
    base += [hybrid(cl.gpus_per_node)] if cl.nodes > 1 else []
    base += [Candidate(strategy="zero2", offload="cpu"), Candidate(strategy="zero3", offload="cpu",
                                                                   offload_param="cpu"),
             Candidate(strategy="zero3", offload="nvme", offload_param="nvme")]
    degrees = [d for d in (2, 4, 8) if d <= cl.gpus_per_node and cl.gpus_per_node % d == 0]
    autotp = shape.arch in splitting_families(tp=2, autotp=True)  # the rule launch, compare and tune ask
    if autotp:  # DeepSpeed's AutoTP: Llama-family projections and GPT-NeoX's
        base += [Candidate(strategy="zero1", tp=t) for t in degrees]
    if shape.arch in splitting_families(tp=2):  # torch_tp: those and OLMo-2's
        base += [Candidate(strategy="ddp", tp=t, engine="torch") for t in degrees]
    # DeepSpeed Ulysses, every family: the sequence split within a node
    if not drops_window(shape.sliding_window(), seq_len):
        base += [Candidate(strategy=s, ulysses=n) for s in ULYSSES_SHARDINGS for n in degrees]
    base += [Candidate(strategy="zero1", pp=p) for p in degrees]
    base += [Candidate(strategy="ddp", pp=p, engine="torch") for p in degrees]
    if cl.nodes > 1 and degrees and shape.arch in splitting_families(tp=2):
        # tensor parallelism within a node, a pipeline stage per node: torch_3d (FSDP2 over any replicas). Until
        # 2026-12-01 DeepSpeed's AutoTP inside its pipeline engine (zero1 + tp + pp), which stops every rank: AutoTP
        # finds no model policy in a PipelineModule (configs/validate.py, pipeline-autotp)
        base.append(Candidate(strategy="fsdp", tp=degrees[-1], pp=cl.nodes, engine="torch"))
    base = [c for c in base if _splits(c, cl, shape)]
    return [variant for cand in base for variant in (cand, replace(cand, checkpointing=True))]


def family_notes(shape: ModelShape) -> list[str]:
    """Why the ranking has no tensor-parallel (or AutoTP) candidate for this model's family, a line each (the
    refusals of model_checks.py, in their words, which a launch of one would meet)."""
    notes = []
    if shape.arch not in splitting_families(tp=2):
        notes.append(f"no tensor-parallel candidates for {shape.arch}: {unsplit_why(shape.arch)}")
    elif shape.arch not in splitting_families(tp=2, autotp=True):
        notes.append(f"no AutoTP candidates for {shape.arch}: {unsplit_why(shape.arch)}")
    return notes


@dataclass(frozen=True, slots=True)
class Ranked:
    estimate: Estimate
    rank: int | None
    reason: str
    given: bool = False
    """The layout of ``plan --config``'s file: shown first beside the ranking, never ranked or recommended."""


def reason(e: Estimate, cl: Cluster, best: Estimate | None, ranked: bool = True,
           above: tuple[Estimate, ...] = ()) -> str:
    """Why a candidate stands where it does: its memory, its step, and its step against the top choice's. Ranked
    below slower ones (``above``: the candidates placed before it), it lost a near tie, and says to which places;
    ``ranked=False``, plan --config's row, is only compared."""
    need, have = e.device_total / 2**30, cl.gpu_mem_gib  # GiB, as the table's GiB/GPU column
    if not e.fits:
        host = e.host_per_node / 2**30
        if host > cl.host_mem_gib:
            return f"needs {host:,.0f} GiB of host RAM per node > {cl.host_mem_gib:,.0f} GiB"
        return f"needs {gib_text(need)} GiB per GPU > 90% of {have:g} GiB"
    parts = [f"{gib_text(need)} of {have:g} GiB per GPU", f"step ≈ {e.step_s * 1e3:,.0f} ms ({e.dominant}-bound)"]
    if best is not None and e is not best:
        parts.append(f"{e.step_s / best.step_s:.2f}x the top choice's step time")
    slower = [place for place, other in enumerate(above, 1) if other.step_s > e.step_s] if ranked else []
    if slower:  # faster than these: the ties it lost (near_tie_order never places one above a >5 % faster one)
        most = max(above[place - 1].step_s for place in slower) / e.step_s - 1
        places = " and ".join(filter(None, (", ".join(f"#{p}" for p in slower[:-1]), f"#{slower[-1]}")))
        parts[-1] += (f", placed below {places} (up to {most:.1%} slower) as a near tie "
                      f"(within {NEAR_TIE:.0%}) that the simpler layout wins")
    if e.bubble:
        parts.append(f"pipeline bubble {e.bubble:.0%}")
    if e.offload_s:
        parts.append(f"offload adds ≈ {e.offload_s * 1e3:,.0f} ms")
    return "; ".join(parts)


def _splits(cand: Candidate, cl: Cluster, shape: ModelShape) -> bool:
    """The model splits into this layout: tp divides the heads and KV heads, pp <= layers, degrees divide."""
    try:
        cand.dims(cl.world).check_model(
            name=shape.name, heads=shape.heads, kv_heads=shape.kv_heads, layers=shape.layers)
    except UserError:
        return False
    return True


NEAR_TIE = 0.05
"""Step times within 5 % of the fastest left are a near tie, which the simpler layout wins (docs/planner.md)."""


def simplicity(e: Estimate) -> tuple[bool, int, bool, int]:
    """The simpler layout first: no model parallelism (tensor, pipeline, or Ulysses' sequence split: until
    2026-12-01 Ulysses counted as none, and a Ulysses layout on ZeRO-1 won near ties against plain ZeRO-2 and
    ZeRO-3), then the SIMPLICITY order, no recompute, fewer splits."""
    c = e.candidate
    splits = c.tp * c.pp * c.ulysses
    return (splits > 1, SIMPLICITY.index(c.strategy), c.checkpointing, splits)


def near_tie_order(fitting: list[Estimate]) -> list[Estimate]:
    """Each place goes to the simplest of those within NEAR_TIE of the fastest not yet placed. Measured from the
    fastest, never from fixed buckets: two steps 0.1 % apart are always a tie, and a layout is never placed above
    one more than 5 % faster."""
    left, order = sorted(fitting, key=lambda e: e.step_s), []
    while left:
        near = [e for e in left if e.step_s <= left[0].step_s * (1 + NEAR_TIE)]
        order.append(pick := min(near, key=simplicity))
        left = [e for e in left if e is not pick]
    return order


def rank(wl: Workload, cl: Cluster) -> list[Ranked]:
    """Every candidate estimated; those that fit ranked by step time (simplest first on near ties)."""
    estimates = [estimate(c, wl, cl) for c in candidates(cl, wl.shape, wl.seq_len)]
    fitting = near_tie_order([e for e in estimates if e.fits])
    best = fitting[0] if fitting else None
    ranked = [Ranked(e, i + 1, reason(e, cl, best, above=tuple(fitting[:i]))) for i, e in enumerate(fitting)]
    rest = sorted((e for e in estimates if not e.fits), key=lambda e: e.device_total)
    return ranked + [Ranked(e, None, reason(e, cl, best)) for e in rest]


def launch_command(e: Estimate, shape: ModelShape, wl: Workload, cl: Cluster) -> str:
    """The ``dsbench launch`` command for a candidate."""
    c = e.candidate
    accumulation = c.dims(cl.world).accumulation_for(wl.grad_accum)
    return launch_argv(c.runs_as, shape.name if shape.source != "synthetic" else "PATH_TO_MODEL", wl.precision,
                       wl.micro_batch, accumulation, cl.nodes, cl.gpus_per_node, wl.seq_len, c.checkpointing)


def launch_argv(how: Strategy, model: str, precision: str, micro_batch: int, grad_accum: int, nodes: int,
                gpus_per_node: int, seq_len: int, checkpointing: bool, worker_extra: tuple[str, ...] = ()) -> str:
    """``dsbench launch`` for a strategy on a cluster, as a user types it (one line, shell-quoted)."""
    args = ["dsbench", "launch"]
    if how.engine != "deepspeed":  # DeepSpeed is launch's default strategy and launcher
        args += ["--strategy", how.engine, "--launcher", how.launcher]
    args += how.launch_flags
    if "nvme" in (how.offload, how.offload_param):
        args += ["--nvme-path", "/local_nvme"]
    args += ["--model", model, "--precision", precision, "--micro-batch", str(micro_batch), "--grad-accum",
             str(grad_accum)]
    args += _hosts(nodes, gpus_per_node)
    worker = ["--", "--seq-len", str(seq_len), *how.worker_flags, *worker_extra] + (
        ["--activation-checkpointing"] if checkpointing else [])
    return shlex.join(args + worker)


def config_launch_argv(path: str, model: str, nodes: int, gpus_per_node: int, seq_len: int) -> str:
    """``dsbench launch --config PATH``: the file's own strategy, batch and precision, on the plan's cluster."""
    return shlex.join(["dsbench", "launch", "--config", path, "--model", model, *_hosts(nodes, gpus_per_node), "--",
                       "--seq-len", str(seq_len)])


def _hosts(nodes: int, gpus_per_node: int) -> list[str]:
    """Every node through a hostfile, or one node's GPUs."""
    return ["--hostfile", "hostfiles/YOUR_HOSTS"] if nodes > 1 else ["--num-gpus", str(gpus_per_node)]
