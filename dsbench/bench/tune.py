"""``dsbench tune``: the planner ranks every layout, then at most ``--budget`` real runs find the best one.

Each run is a compare cell (``OUT/cells/<id>/``: cell.json, the launch's files, metrics and summary), so
``dsbench report OUT/cells`` works on a tune folder and ``--resume`` skips the runs already made. ``OUT/tune.json``
holds the whole search: every layout with its prediction, correction and measurement, the runs in order, and the
winner (the best measured layout) with its launch command.

Every layout steps with a fused Adam, as compare's cells do by default: torch's fused AdamW where the worker steps
torch AdamW, DeepSpeed's own for ZeRO. With ``--speed-options`` the winning layout then races against itself
compiled (``--compile``, where it applies): the planner has no term for compilation, so it is measured, never
predicted. The layout runs again uncompiled in the same phase, so the ratio is of runs made side by side.
"""

from __future__ import annotations

import functools
import os
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dsbench import strategies as registry
from dsbench.bench.compare import check_out, prepare_out, read_status, run_cell, set_aside
from dsbench.bench.matrix import Cell, cell_launch_args, check_models, fused_by_default, takes
from dsbench.bench.tune_request import TuneRequest
from dsbench.errors import UserError
from dsbench.io import atomic_write_json
from dsbench.model_checks import splitting_families
from dsbench.model_config import resolve_model
from dsbench.plan import search
from dsbench.plan.profile import Profile
from dsbench.plan.request import PlanRequest
from dsbench.run_record import read_summary
from dsbench.strategy_match import did_you_mean


def default_strategies(model: str, world: int) -> list[str]:
    """Every compare strategy that can run ``model`` on ``world`` ranks."""
    shape = resolve_model(model)
    out = []
    for name in registry.LISTED:
        how = registry.get(name)
        if (name == "single") != (world == 1) or not how.planned:
            continue  # single is the 1-rank layout; the planner has no model of fsdp_no_reshard or NVMe offload
        if shape.arch not in splitting_families(how.tp, autotp=how.engine == "deepspeed"):
            continue  # the family does not split this way (model_checks: GPT-2's Conv1D is not split, for one)
        if world % how.rank_multiple:
            continue
        out.append(name)
    return out


def _nodes(req: TuneRequest) -> tuple[int, int | None]:
    """(nodes, ranks per node) of the job: one node of ``world`` ranks, or a hostfile's nodes x slots (uneven slots
    are planned as one node: the planner's cluster is uniform)."""
    if req.hostfile:
        from dsbench.hostfile import read_hostfile

        slots = {host.slots for host in read_hostfile(req.hostfile)}
        if len(slots) == 1:
            return req.world // next(iter(slots)), next(iter(slots))
    return 1, None


def hybrid_strategies(req: TuneRequest) -> list[str]:
    """HSDP with a node per shard group, where the job spans nodes of 2 or more ranks each (the planner's
    fsdp_hybrid candidate)."""
    nodes, per_node = _nodes(req)
    return [f"fsdp_shard{per_node}"] if nodes > 1 and per_node and per_node > 1 else []


def plan_request(req: TuneRequest) -> PlanRequest:
    """The planner's description of the job (:func:`_nodes`: the planner uses the profile's link across nodes where
    data parallelism crosses them)."""
    nodes, per_node = _nodes(req)
    return PlanRequest(model=req.model, gpus=req.world, nodes=nodes, gpus_per_node=per_node, gpu=req.gpu,
                       gpu_mem=req.gpu_mem, seq_len=req.seq_len, micro_batch=1, grad_accum=1, precision=req.precision)


def cell_of(req: TuneRequest, layout: search.Layout, compile: bool = False, repeat: int = 0) -> Cell:
    """The compare cell that measures a layout: compiled or not, with the fused optimizer wherever it applies."""
    return Cell(strategy=layout.strategy, world_size=req.world, micro_batch=layout.micro_batch, model=req.model,
                steps=req.steps, warmup=req.warmup, seq_len=req.seq_len, precision=req.precision,
                grad_accum=layout.grad_accum, checkpointing=layout.checkpointing, hostfile=req.hostfile,
                compile=compile, fused_optimizer=fused_by_default(layout.strategy), repeat=repeat)


def speed_variants(strategy: str, warmup: int) -> list[bool]:
    """Whether compiled, for each run of a strategy's speed race: uncompiled first, then compiled where the worker
    compiles it and a warm-up step is there to compile in (outside the measured window)."""
    return [False, True] if takes(strategy, "compile") and warmup >= 1 else [False]


def finished(folder: Path) -> bool:
    """A cell that ran to its end (ok, failed or timed out); an interrupted one runs again on --resume."""
    status = read_status(folder)
    return status is not None and status.finished


def measured_tokens_per_s(folder: Path) -> float | None:
    """A finished cell's wall-clock tokens/s (None when it failed)."""
    status = read_status(folder)
    if status is None or status.status != "ok":
        return None
    try:
        summary = read_summary(folder)
    except UserError:  # damaged or of another shape: not measured
        return None
    return summary.throughput.tokens_per_s if summary and summary.throughput else None


def checked_strategies(req: TuneRequest) -> list[str]:
    """The strategies to search, each known and able to run the model (as compare checks), before any run."""
    strategies = req.strategies or [*default_strategies(req.model, req.world), *hybrid_strategies(req)]
    unknown = [s for s in strategies if not registry.known(s)]
    if unknown:
        raise UserError(f"unknown strategy {unknown[0]!r}{did_you_mean(unknown[0])}; choose from: {registry.choices()}")
    unplaced = next((s for s in strategies if req.world % registry.get(s).rank_multiple), None)
    if unplaced:
        raise UserError(f"--strategies {unplaced} runs on a multiple of {registry.get(unplaced).rank_multiple} ranks, "
                        f"not the {req.world} tune runs on")
    check_models(strategies, [req.model], req.seq_len)
    return strategies


RESUME_MAY_CHANGE = ("tune.budget",)
"""What ``--resume`` takes changed: the budget counts runs and shapes none, so a larger one continues a search that
spent its runs (until 2026-12-03 it was refused as another tune); the runs made stay counted against it."""


def definition_of(req: TuneRequest) -> dict[str, Any]:
    """What tune.json records of the request, and ``--resume`` checks: every setting that shapes the runs, the
    profile and the hostfile by their absolute paths (until 2026-12-04 as typed: `--profile p.json` refused to
    resume a tune started with `--profile $PWD/p.json`, "a different matrix", the same file)."""
    def value(k: str, v: Any) -> Any:
        if isinstance(v, Profile):
            return os.path.abspath(v.path)
        return str(v) if isinstance(v, Path) else os.path.abspath(v) if k == "hostfile" and v else v

    return {"tune": {k: value(k, v) for k, v in req.__dict__.items()
                     if k not in ("out", "resume", "timeout") and (k != "speed_options" or v)}}


def _scored(req: TuneRequest) -> search.Search:
    """Every layout of the request, predicted by the planner; nothing run yet."""
    layouts = search.layouts(checked_strategies(req), req.world, req.global_batch,
                             lambda s: registry.get(s).model_parallel, req.checkpointing)
    base = plan_request(req)
    return search.start([(layout, *search.predict(layout, base, req.profile)) for layout in layouts], req.budget,
                        req.exhaustive)


def _result(req: TuneRequest, found: search.Search) -> dict[str, Any]:
    """What tune.json holds of the search, its winner not yet added."""
    return {"model": req.model, "world_size": req.world, "global_batch": req.global_batch,
            "profile": req.profile.path if req.profile else None, "budget": req.budget, "exhaustive": req.exhaustive,
            "runs_used": len(found.runs), "runs": found.runs,
            "layouts": [s.to_dict() for s in search.ranked(found.scored)], "winner": None}


def dry_run(req: TuneRequest, reporter: Any = None) -> dict[str, Any]:
    """``tune --dry-run``: the request and its --out checked as a tune checks them, every layout ranked (with
    --resume, the runs already made counted), and the run it would start first, with its launch; nothing written
    or run. Only the first run is known: the next ones follow from what it measures."""
    say = reporter or (lambda text: print(text, file=sys.stderr, flush=True))
    found = _scored(req)
    check_out(req.out, definition_of(req), req.resume, RESUME_MAY_CHANGE)
    if req.resume:
        found = _resumed(req, found, say)
    first = search.next_layout(found.scored, found.runs_allowed() - len(found.runs), found.exhaustive)
    nxt = None
    if first is not None:
        cell = cell_of(req, first.layout)
        nxt = {"layout": first.layout.name, "cell": cell.id, "command": shlex.join(
            ["dsbench", "launch", *cell_launch_args(cell, req.out / "cells" / cell.id)])}
    return {**_result(req, found), "dry_run": True, "next": nxt, "speed_options": req.speed_options}


def tune(req: TuneRequest, reporter: Any = None) -> dict[str, Any]:
    """Rank, run, correct, repeat; returns what ``tune.json`` holds."""
    say = reporter or (lambda text: print(text, file=sys.stderr, flush=True))
    found = _scored(req)
    prepare_out(req.out, definition_of(req), req.resume, RESUME_MAY_CHANGE)
    if req.resume:
        found = _resumed(req, found, say)
    say(f"{len(found.scored)} layouts, {sum(s.fits for s in found.scored)} fit; predicted best: "
        f"{search.ranked(found.scored)[0].layout.name}")

    run = functools.partial(_run, req, say=say)

    def measure(layout: search.Layout) -> float | None:
        return run(cell_of(req, layout), f"run {len(found.runs)}/{found.runs_allowed()}: {layout.name}")

    while found.step(measure) is not None:
        pass
    winner = found.winner()
    result = _result(req, found)
    if winner:
        result.update(_winner(req, winner, run))
    atomic_write_json(req.out / "tune.json", result)
    return result


def _run(req: TuneRequest, cell: Cell, what: str, *, say: Callable[[str], None]) -> float | None:
    """One of tune's cells run (or, on --resume, read back when it finished before), its measured tokens/s."""
    folder = req.out / "cells" / cell.id
    if req.resume and finished(folder):
        return measured_tokens_per_s(folder)  # made before the interruption (a failed run stays failed)
    if folder.exists():
        set_aside(folder)  # an interrupted run's files are kept beside, never overwritten
    say(f"{what} ({cell.id})")
    result = run_cell(cell, folder, req.timeout, None)
    value = measured_tokens_per_s(result.folder)
    say(f"  {result.status}: " + (f"{value:,.0f} tokens/s" if value else str(result.reason)))
    return value


def _resumed(req: TuneRequest, found: search.Search, say: Callable[[str], None]) -> search.Search:
    """The search with the runs an interrupted tune finished already counted (their folders are read, not rerun)."""
    folders = {s.layout.name: req.out / "cells" / cell_of(req, s.layout).id for s in found.scored}
    ran = sorted((_started(folder), name) for name, folder in folders.items() if finished(folder))
    done = {name: measured_tokens_per_s(folders[name]) for _, name in ran}  # in the order they ran
    say(f"resumed: {len(done)} run{'s' * (len(done) != 1)} already made")
    return search.resumed(found, done)


def _started(folder: Path) -> float:
    """When a cell started (its cell.json's wall clock), 0 where a hand-edited status holds no time."""
    status = read_status(folder)
    return status.started if status is not None and status.started is not None else 0.0


def _winner(req: TuneRequest, winner: search.Scored, run: Callable[[Cell, str], float | None]) -> dict[str, Any]:
    """The measured best layout (with --speed-options, raced with its speed options) and its launch command."""
    out: dict[str, Any] = {}
    cell, measured = cell_of(req, winner.layout), winner.measured
    if req.speed_options:
        out["speed"] = race_speed_options(req, winner.layout, run)
        best = max((r for r in out["speed"] if r["tokens_per_s"]), key=lambda r: r["tokens_per_s"], default=None)
        if best:
            cell, measured = cell_of(req, winner.layout, best["compile"], repeat=1), best["tokens_per_s"]
    command = ["dsbench", "launch", *cell_launch_args(cell, Path(f"runs/{cell.id}"), for_user=True)]
    out["winner"] = {**winner.to_dict(), "cell": cell.id, "command": shlex.join(command), "compile": cell.compile,
                     "fused_optimizer": cell.fused_optimizer, "tokens_per_s": measured,
                     "throughput": "wall clock over the measured window, every rank (never a sum of phases)"}
    return out


def race_speed_options(req: TuneRequest, layout: search.Layout,
                       run: Callable[[Cell, str], float | None]) -> list[dict[str, Any]]:
    """The layout once more uncompiled and once compiled, one after the other (repeat 1 of the layout's cell, so the
    search's own run stays as it was); tokens/s of each, None when it failed."""
    out = []
    for compiled in speed_variants(layout.strategy, req.warmup):
        cell = cell_of(req, layout, compiled, repeat=1)
        label = layout.name + (" +compile" if compiled else "")
        out.append({"layout": label, "compile": compiled, "fused_optimizer": cell.fused_optimizer, "cell": cell.id,
                    "tokens_per_s": run(cell, f"speed options: {label}")})
    return out
