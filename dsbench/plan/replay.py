"""``dsbench plan --replay``: predict published GPU training runs and compare (pure, stdlib only).

Rows come in the oracle schema of ``../shared/oracles`` (tests/data/oracles/README.md). A row's inputs that the
source does not give are filled by the documented rules below and reported in ``assumed``; a row the model cannot
price is listed as skipped with the reason. Statistics are given for complete rows and for all rows.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from dsbench.errors import UserError
from dsbench.model_config import heads_problem
from dsbench.plan.gpu_layout import OFFLOADED, PRICED, Layout, Shape
from dsbench.plan.gpu_memory import peak_memory
from dsbench.plan.gpu_profiles import ALIASES, GpuProfile, profile_for
from dsbench.plan.gpu_time import StepTime, step_time
from dsbench.plan.oracle_csv import OracleRow, read_rows
from dsbench.plan.rank_correlation import spearman

MICRO_BATCHES = (1, 2, 4, 8)
"""Rule for a missing micro-batch (Megatron 2021 Table 1 gives none): the fastest of these that fits, as the paper
tuned its runs; for a missing interleaving factor, the fastest that divides the layers per stage (at most 8)."""
OP_SAC = ("per-op SAC", "selective per-op", "selective op")
"""Notes that say torchtitan's per-op selective checkpointing: priced as recompute ``op`` (gpu_layout.RECOMPUTE)."""
LAYER_SAC = ("layer-level SAC", "selective layer")
"""Notes that say torchtitan's per-layer selective checkpointing (every n-th block checkpointed, n not stated):
priced as attention-only recompute."""
ASYNC_TP = ("Async TP", "AsyncTP on", "+ AsyncTP")
"""Notes that say torchtitan's Async TP: TP collectives overlapped with the matmuls."""
HF_MODULES = ("dsbench run", "Hugging Face modules")
"""Notes that say the run trained transformers' modules (eagerly, one kernel per torch op): priced as dsbench's."""
AUTOCAST = ("autocast",)
"""Notes that say the forward ran under torch.autocast over fp32 weights (dsbench's native engines write it)."""


@dataclass(frozen=True)
class RowResult:
    row: OracleRow
    layout: Layout | None = None
    time: StepTime | None = None
    predicted_peak_mem_gib: float | None = None
    step_error: float | None = None
    mem_error: float | None = None
    assumed: dict[str, str] = field(default_factory=dict)
    skipped: str | None = None

    @property
    def predicted_step_s(self) -> float | None:
        return self.time.seconds if self.time else None

    @property
    def complete(self) -> bool:
        return not self.assumed


def _layout(v: dict[str, Any], micro_batch: int, virtual: int) -> Layout:
    note = v.get("note") or ""
    recompute = "op" if v["recompute"] == "selective" and any(m in note for m in OP_SAC) else v["recompute"]
    shape = Shape(v["arch"], v["layers"], v["hidden"], v["heads"], v["kv_heads"], v["ffn"], v["vocab"],
                  v.get("head_dim") or 0, qk_norm=bool(v.get("qk_norm")))
    # the heads as a config.json's are checked (model_config.heads_problem)
    if problem := heads_problem(v["hidden"], v["heads"], v["kv_heads"], v.get("head_dim")):
        raise UserError(problem)
    if v["strategy"] not in PRICED:
        raise UserError(f"strategy {v['strategy']!r}: use one of {', '.join(PRICED)}")
    strategy, offload_param = OFFLOADED.get(v["strategy"], (v["strategy"], False))
    return Layout(shape, v["seq_len"], v["gpu"], v["gpus"], v["gpus_per_node"], strategy, v["tp"], v["pp"],
                  v["cp"], v["schedule"] or "1f1b", virtual, micro_batch, v["global_batch"], recompute,
                  bool(v["sequence_parallel"]), v["precision"], bool(v["compile"]),
                  _kernels(v), "eager" if _megatron(v) else "flash",
                  v["intra_gbs"], v["inter_gbs"],
                  async_tp=any(marker in note for marker in ASYNC_TP),
                  autocast=any(marker in note for marker in AUTOCAST), offload=v["strategy"] in OFFLOADED,
                  offload_param=offload_param)


def _kernels(v: dict[str, Any]) -> str:
    """Megatron's fused kernels for its runs, the HF modules for dsbench's own runs and rows whose note says them
    (:data:`HF_MODULES`), torchtitan's otherwise."""
    if _megatron(v):
        return "megatron"
    note = v.get("note") or ""
    return "hf" if v["source"].startswith("dsbench") or any(m in note for m in HF_MODULES) else "eager"


def _megatron(v: dict[str, Any]) -> bool:
    """A Megatron-LM run (its papers' tables, or a note that says so): fused kernels and the materialised-score
    softmax of 2021-22; every other row runs the HF/torchtitan modules with a flash kernel (SDPA)."""
    return v["source"].startswith(("megatron", "korthikanti")) or "Megatron" in (v.get("note") or "")


def _assumed(v: dict[str, Any]) -> dict[str, str]:
    note, out = v.get("note") or "", {}
    if v["micro_batch"] is None:
        out["micro_batch"] = f"the fastest of {', '.join(map(str, MICRO_BATCHES))} that fits (the source tuned it)"
    if v["schedule"] == "interleaved" and v["virtual_stages"] is None:
        out["virtual_stages"] = "the fastest that divides the layers per stage (at most 8)"
    if v["gpus"] > 1 and (v["intra_gbs"] is None or v["inter_gbs"] is None):
        out["interconnect"] = "not given: the GPU's usual NVLink and network (one NIC per GPU)"
    if any(marker in note for marker in OP_SAC):
        out["recompute"] = "torchtitan's per-op selective checkpointing (the note): recompute op"
    elif any(marker in note for marker in LAYER_SAC):
        out["recompute"] = "torchtitan's per-layer checkpointing, frequency not stated: attention-only recompute"
    if "recompute assum" in note:
        out["recompute"] = "full recompute, as the source assumes"
    if "not stated" in note and v["pp"] > 1:
        out["micro_batch"] = "the framework's default pipeline micro-batching (the source does not state it)"
    return out


def row_layouts(v: dict[str, Any]) -> list[Layout]:
    """The layouts an oracle row may have run: its micro-batch (or each of :data:`MICRO_BATCHES` when the source
    does not give it) and, for an interleaved schedule, the virtual stages that divide its layers per stage."""
    batches = [v["micro_batch"]] if v["micro_batch"] else list(MICRO_BATCHES)
    per_stage = v["layers"] // v["pp"]
    if (v["virtual_stages"] or 1) > 1 and v["schedule"] != "interleaved":  # else silently priced as one chunk
        raise UserError(f"virtual_stages {v['virtual_stages']} goes with schedule interleaved, not "
                        f"{v['schedule'] or '(empty)'!r}: give one or the other")
    if v["schedule"] != "interleaved" or v["pp"] == 1:
        virtuals = [1]
    elif v["virtual_stages"]:
        virtuals = [v["virtual_stages"]]
    else:
        virtuals = [n for n in range(1, 9) if per_stage and per_stage % n == 0] or [1]  # [1]: the check says why
    layouts, refusals = [], {}
    for mb in batches:
        for virtual in virtuals:
            try:
                layouts.append(_layout(v, mb, virtual).check())
            except UserError as exc:
                if len(batches) == len(virtuals) == 1:
                    raise
                refusals.setdefault(str(exc), (mb, virtual))
    if not layouts and refusals:  # every choice refused: the reason itself, once when the shape's (the same for all)
        (first, (mb, virtual)), *others = refusals.items()
        raise UserError(first if not others else f"no micro-batch or interleaving the layout allows (micro-batch "
                                                 f"{mb}, {virtual} virtual stages: {first})")
    return layouts


def predict_row(row: OracleRow, profile: GpuProfile | None = None) -> RowResult:
    """Predict one published run (the fastest allowed layout where the source leaves a choice open)."""
    v = row.values
    assumed = _assumed(v)
    try:
        hw = profile or profile_for(v["gpu"])
        if v["precision"] not in hw.peak_tflops:
            return RowResult(row, assumed=assumed, skipped=f"no {v['precision']} peak in the {hw.kind} profile")
        layouts = row_layouts(v)
    except UserError as exc:
        return RowResult(row, assumed=assumed, skipped=str(exc))
    if not layouts:
        return RowResult(row, assumed=assumed, skipped="no micro-batch or interleaving the layout allows")
    priced = [(step_time(lay, hw), peak_memory(lay), lay) for lay in layouts]
    fitting = [p for p in priced if p[1].reserved_gib <= hw.memory_gib] or priced
    time, memory, layout = min(fitting, key=lambda p: p[0].seconds)
    peak = memory.reserved_gib if v["source"].startswith("torchtitan") else memory.allocated_gib
    measured_step, measured_mem = v["measured_step_s"], v["measured_peak_mem_gib"]
    return RowResult(row, layout, time, peak,
                     time.seconds / measured_step - 1 if measured_step else None,
                     peak / measured_mem - 1 if measured_mem else None, assumed)


def error_stats(results: list[RowResult]) -> dict[str, Any]:
    """Absolute step-time errors (median, mean, max), spearman_step, and spearman_efficiency: predicted vs measured
    step time per model FLOP (1/MFU), over the rows with a prediction and a measured step."""
    done = [r for r in results if r.step_error is not None and r.time is not None]
    if not done:
        return {"rows": 0}
    errors = [abs(r.step_error) for r in done]
    measured = [r.row.values["measured_step_s"] for r in done]
    predicted = [r.predicted_step_s for r in done]
    per_flop = [(p / r.time.model_flops, m / r.time.model_flops) for r, p, m in zip(done, predicted, measured,
                                                                                     strict=True)]
    return {"rows": len(done), "median_abs_step_error": statistics.median(errors),
            "mean_abs_step_error": statistics.fmean(errors), "max_abs_step_error": max(errors),
            "spearman_step": spearman(predicted, measured),
            "spearman_efficiency": spearman([p for p, _ in per_flop], [m for _, m in per_flop])}


def source_stats(results: list[RowResult]) -> dict[str, dict[str, Any]]:
    """Per source: the statistics over its complete rows and over all its rows, and its row and skip counts."""
    out: dict[str, dict[str, Any]] = {}
    for source in dict.fromkeys(r.row.source for r in results):
        mine = [r for r in results if r.row.source == source]
        out[source] = {"rows": len(mine), "skipped": sum(r.skipped is not None for r in mine),
                       "complete": error_stats([r for r in mine if r.complete]), "all": error_stats(mine)}
    return out


def replay(paths: list[str], calibrated: GpuProfile | None = None) -> list[RowResult]:
    """Predict every row of the files; rows on ``calibrated``'s GPU kind with its measured constants (a profile
    ``dsbench calibrate`` wrote on that GPU), the others with the shipped profiles."""
    kind = calibrated.kind if calibrated is not None else None
    return [predict_row(row, calibrated if ALIASES.get(row.values["gpu"], row.values["gpu"]) == kind else None)
            for row in read_rows([Path(p) for p in paths])]


def as_json(results: list[RowResult]) -> dict[str, Any]:
    """``rows`` (inputs, predictions, signed errors, assumptions, skips) and ``sources`` (statistics)."""
    return {"rows": [row_record(r) for r in results], "sources": source_stats(results)}


def row_record(r: RowResult) -> dict[str, Any]:
    """One row for --json: its input columns, the predictions and errors, the assumptions and any skip."""
    record = {k: v for k, v in r.row.values.items() if k != "note"}
    chosen = {"micro_batch": r.layout.micro_batch, "virtual_stages": r.layout.virtual_stages} if r.layout else {}
    return {**record, **{f"chosen_{k}": v for k, v in chosen.items() if record.get(k) is None},
            "predicted_step_s": r.predicted_step_s, "predicted_peak_mem_gib": r.predicted_peak_mem_gib,
            "step_error": r.step_error, "mem_error": r.mem_error,
            "terms_s": dict(r.time.terms) if r.time else None, "assumed": r.assumed, "skipped": r.skipped}


def with_columns(row: OracleRow, **overrides: Any) -> OracleRow:
    """The row with some columns replaced (sensitivity checks: another interconnect, another micro-batch)."""
    return replace(row, values={**row.values, **overrides})
