"""The metrics schema shared by the training worker and the report (stdlib only).

A run directory holds ``metrics.jsonl`` (one ``header`` record, one ``step`` record per step, one
``model_states`` record, and a closing ``window`` record) and ``summary.json``. Lines are written
whole and flushed at every gather, so a killed run leaves a readable prefix. :func:`summarize` is the
only place warm-up exclusion, throughput and spread are computed.

Two clocks, never mixed (schema 2):

- ``throughput``: the wall clock over the measured window (first measured step's start to the last
  step's end, everything the worker does included). This is the throughput figure: tokens/s,
  samples/s, TFLOPs and MFU.
- ``timed_region``: per step, zero_grad + forward/backward + optimizer step (slowest rank), with its
  spread; a separate, labelled figure. ``outside_timed_fraction`` is the share of the window spent
  outside it (data, metrics gathers, logging).

Schema 1 (before 2026-11-24) had only the timed region, under the names ``tokens_per_s`` etc.;
:func:`dsbench.run_record.upgrade_summary` reads it as such, and :mod:`dsbench.run_record` is where every reader
gets a run's header and summary as typed records.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dsbench.errors import UserError

SCHEMA = 2
METRICS = "metrics.jsonl"
SUMMARY = "summary.json"
MEASURED = (METRICS, SUMMARY)
"""Files that mean a run folder holds a run's results (the worker writes them)."""


def flops_per_token(num_params: int, layers: int, attention_width: int, seq_len: int) -> int:
    """Training FLOPs per token: 6N (forward + backward matmuls) + 12·L·H·Q·s (attention scores and values), where
    H·Q is heads x head width (``ModelShape.q_width``: the hidden size unless a config states another head_dim).

    Source: PaLM (Chowdhery et al. 2022), Appendix B; the same estimate as nanoGPT's ``estimate_mfu``.
    Recomputation under activation checkpointing is not counted (model FLOPs, not hardware FLOPs).
    """
    return 6 * num_params + 12 * layers * attention_width * seq_len


def mfu(tokens_per_s_per_rank: float, flops_token: int, peak_tflops: float | None) -> float | None:
    """Model FLOPs utilisation: achieved FLOP/s per rank over the rank's peak FLOP/s."""
    if not peak_tflops:
        return None
    return tokens_per_s_per_rank * flops_token / (peak_tflops * 1e12)


def scaling_efficiency(throughput_n: float, n: int, throughput_1: float) -> float:
    """N-rank throughput / (N x 1-rank throughput) (1.0 = linear scaling; ../shared/seeds/000)."""
    return throughput_n / (n * throughput_1)


def spread(values: list[float]) -> dict[str, float]:
    """Median, min, max, p10/p90 and the sample count of ``values``."""
    ordered = sorted(values)
    n = len(ordered)

    def quantile(q: float) -> float:
        pos = q * (n - 1)
        lo, hi = int(pos), min(int(pos) + 1, n - 1)
        return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)

    return {"median": statistics.median(ordered), "min": ordered[0], "max": ordered[-1], "p10": quantile(0.1),
            "p90": quantile(0.9), "n": n}


def read_records(path: Path) -> list[dict[str, Any]]:
    """All complete records of a metrics file (a torn last line from a killed run is skipped), read through the
    guarded reader; any other line that is not a JSON object is one line naming it (a corrupt run folder)."""
    from dsbench.io import read_text

    lines = read_text(path, "metrics file").splitlines()
    out = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):  # JSONDecodeError, a number beyond 4300 digits, nesting too deep
            if number == len(lines):
                continue  # the torn last line of a run killed mid-write
            raise UserError(f"{path}:{number}: not a JSON record") from None
        if not isinstance(record, dict):
            raise UserError(f"{path}:{number}: a JSON {type(record).__name__}, not a record (a JSON object)")
        out.append(record)
    return out


@dataclass(frozen=True, kw_only=True, slots=True)
class StepRecord:
    """One optimizer step, gathered from every rank (``"type": "step"``)."""

    step: int
    warmup: bool
    """Excluded from the summary (``--warmup``)."""
    loss: float
    """Mean over ranks of each rank's mean micro-batch loss."""
    lr: float
    """The learning rate at the step's end, after the scheduler stepped: the next step's (DeepSpeed's
    ``engine.get_lr()``; under an N-step warm-up, step k records what step k + 1 runs at)."""
    step_time_s: float
    """Timed region of the slowest rank: zero_grad + forward/backward + optimizer step."""
    step_time_per_rank_s: list[float]
    tokens: int
    """Tokens in the global batch of this step."""
    memory_bytes: list[int]
    """Per rank at the step's end: CUDA allocated on GPU, resident set size on CPU."""
    peak_memory_bytes: list[int]
    memory_kind: str
    pipeline_compute_s_per_rank: list[float] | None = None
    """Pipeline stages on CPU: each rank's forward/backward compute seconds in the step."""
    pipeline_span_s_per_rank: list[float] | None = None
    """...and its seconds inside the pipeline schedule (to the flush): 1 - compute/span is its idle share."""
    grad_norm: float | None = None
    """The gradients' global 2-norm before clipping (torch's clip_grad_norm_ total norm), each weight counted once;
    from the torch engines when --grad-clip > 0, else None."""
    skipped: bool = False
    """The optimizer and the LR scheduler did not step: an fp16 gradient overflowed on some rank and the loss scale
    halved (DeepSpeed's engine and the torch engines skip alike; the step's tokens still count in the throughput,
    as in DeepSpeed's own)."""

    def to_dict(self) -> dict[str, Any]:
        rate = self.tokens / self.step_time_s if self.step_time_s > 0 else None
        return {"type": "step", **asdict(self), "timed_tokens_per_s": rate}


MEMORY_KINDS = ("rss", "cuda_max_allocated")
"""What a run's memory figures are (``memory_kind``): the resident set size on CPU ranks, torch's CUDA max
allocated on GPU ones (worker/metrics.py ``memory_now``)."""
WALL_CLOCK = ("wall clock: rank 0's perf_counter from the first measured step's start to the last step's end, all "
              "ranks and the device synchronised at both ends; everything the worker does in between is inside")
TIMED_REGION = "timed region: zero_grad + forward/backward + optimizer step, slowest rank, per step"


@dataclass(frozen=True, kw_only=True, slots=True)
class WindowRecord:
    """The measured window by the wall clock (``"type": "window"``), written once at the end."""

    first_step: int
    last_step: int
    seconds: float
    tokens: int
    """Global tokens trained in the window."""
    samples: int
    rank_tokens: float
    """Tokens' worth of work per rank in the window (a tensor-parallel rank does 1/tp of its group's)."""

    def to_dict(self) -> dict[str, Any]:
        return {"type": "window", **asdict(self), "clock": WALL_CLOCK}


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckpointRecord:
    """A checkpoint written during the run (``"type": "checkpoint"``): inside the wall-clock window when it
    falls there, and timed on its own here."""

    step: int
    """Optimizer steps done when it was saved (a resume starts at this step)."""
    path: str
    seconds: float
    """Rank 0's perf_counter around the save, from the barrier before it to the one after every rank wrote."""
    bytes: int
    """Size of the checkpoint's files on disk."""

    def to_dict(self) -> dict[str, Any]:
        return {"type": "checkpoint", **asdict(self)}


@dataclass(frozen=True, kw_only=True, slots=True)
class EndRecord:
    """How a run that did not finish ended (``"type": "end"``), written by rank 0 when told to stop."""

    status: str
    """``interrupted``."""
    signal: str
    """SIGINT (Ctrl-C) or SIGTERM (a launcher or scheduler ending the job)."""
    last_step: int
    """The last step whose record was written before it (0: none)."""

    def to_dict(self) -> dict[str, Any]:
        return {"type": "end", **asdict(self)}


WARMUP = ("the warm-up steps' timed regions (slowest rank), outside the measured window: first-call work, and "
          "with --compile the compilation")


def header_of(records: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """A run's header record (the first line of metrics.jsonl), empty when the run wrote none: the one place that
    finds it, for the summary and the report."""
    return next((r for r in records if r.get("type") == "header"), {})


def summarize(records: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Summary of a run: wall-clock throughput over the window, and the timed region's spread per step."""
    records = list(records)
    header = header_of(records)
    steps = [r for r in records if r.get("type") == "step"]
    measured = [r for r in steps if not r.get("warmup")]
    states = next((r for r in records if r.get("type") == "model_states"), None)
    window = next((r for r in records if r.get("type") == "window"), None)
    out: dict[str, Any] = {"schema": SCHEMA, "strategy": header.get("strategy"), "world_size": header.get("world_size"),
                           "steps": len(steps), "measured_steps": len(measured),
                           "warmup_steps": len(steps) - len(measured)}
    if not measured:
        return {**out, "status": "no-measured-steps"}
    if window is None or window["seconds"] <= 0:
        return {**out, "status": "incomplete", "reason": "no measured window (the run did not finish)"}
    out.update({
        "status": "ok",
        **_speed(window, measured, header.get("flops_per_token"), header.get("peak_tflops")),
        # Share of rank 0's wall-clock window spent outside its own timed regions (data, gathers, logging);
        # rank 0's regions, not the slowest rank's, so that both figures come from the same clock.
        "outside_timed_fraction": 1 - sum(r["step_time_per_rank_s"][0] for r in measured) / window["seconds"],
        "warmup": {"what": WARMUP, "steps": len(steps) - len(measured),
                   "timed_s": sum(r["step_time_s"] for r in steps if r.get("warmup"))},
        "first_loss": steps[0]["loss"], "final_loss": steps[-1]["loss"],
        # optimizer steps fp16's loss scale skipped, warm-up included (0 in fp32 and bf16)
        "skipped_steps": sum(bool(r.get("skipped")) for r in steps),
        "peak_memory_bytes_per_rank": [max(r["peak_memory_bytes"][i] for r in steps)
                                       for i in range(len(steps[-1]["peak_memory_bytes"]))],
        "memory_kind": steps[-1].get("memory_kind"),
        "model_state_bytes_per_rank": states["per_rank"] if states else None,
        # what the first step's autograd graph saved for its backward, per rank (parameters excluded; not in total)
        "saved_activation_bytes_per_rank": [r.get("saved_activations") for r in states["per_rank"]] if states else None,
        # the most of them its graph held at once (a pipeline's micro-batches in flight), per rank
        "saved_activation_peak_bytes_per_rank": [r.get("saved_activations_peak") for r in states["per_rank"]]
        if states else None,
        "checkpoints": [{"step": r["step"], "seconds": r["seconds"], "bytes": r["bytes"]}
                        for r in records if r.get("type") == "checkpoint"],
        "replicas": _replicas(records),
    })
    return out


def _replicas(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Whether the data-parallel copies of the model were bit-identical after the last step (worker/replicas.py);
    None where nothing is replicated."""
    return next(({k: v for k, v in r.items() if k != "type"} for r in records if r.get("type") == "replicas"), None)


def _speed(window: dict[str, Any], measured: list[dict[str, Any]], flops: float | None,
           peak: float | None) -> dict[str, Any]:
    """Throughput from the wall clock over the measured window, and (a separate, labelled figure) the timed
    regions' spread per step."""
    rank_tps = window["rank_tokens"] / window["seconds"]
    rank_tokens_per_step = window["rank_tokens"] / len(measured)
    times = [r["step_time_s"] for r in measured]
    return {
        "throughput": {
            "clock": WALL_CLOCK, "window_s": window["seconds"], "steps": len(measured),
            "tokens_per_s": window["tokens"] / window["seconds"],
            "samples_per_s": window["samples"] / window["seconds"],
            "tokens_per_s_per_rank": rank_tps, "tflops_per_rank": rank_tps * flops / 1e12 if flops else None,
            "mfu": mfu(rank_tps, flops, peak) if flops else None},
        "timed_region": {
            "what": TIMED_REGION, "step_time_s": spread(times),
            "tokens_per_s": spread([r["tokens"] / r["step_time_s"] for r in measured]),
            "mfu": spread([mfu(rank_tokens_per_step / t, flops, peak) for t in times]) if flops and peak else None,
            "total_s": sum(times), "tokens_per_s_overall": window["tokens"] / sum(times)}}
