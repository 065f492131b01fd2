"""The engine-agnostic training loop: fixed data order, warm-up excluded, no host stall per step.

Two clocks, reported as two labelled figures (see :mod:`dsbench.records`):

- **wall clock** (the throughput figure): rank 0's ``perf_counter`` from the start of the first measured
  step to the end of the last one, including everything the loop does in between (data, the metrics
  gathers, the JSONL writes). Both ends follow a synchronisation of all ranks and of the device.
- **timed region** (per step): ``zero_grad`` + forward/backward of every micro-batch + optimizer step,
  timed with CUDA events on GPU (read later, no host sync) or ``perf_counter`` on CPU.

Per-step values (loss, timings, memory) stay on the rank until a gather every ``gather_every`` steps:
one all-gather of a small tensor on the rank's device. A plain training loop pays no per-step
``.item()``, ``all_gather_object`` or ``cuda.synchronize``, and neither does this one.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dsbench.parallel import ParallelDims
from dsbench.records import StepRecord, WindowRecord
from dsbench.worker import stop
from dsbench.worker.dist import Collectives
from dsbench.worker.metrics import memory_now
from dsbench.worker.state_bytes import SavedActivations


@dataclass(frozen=True)
class LoopSettings:
    steps: int
    warmup: int
    seq_len: int
    dims: ParallelDims
    """The layout: which part of each global batch this rank reads; each rank does 1/(tp x pp) of its
    replica's FLOPs."""
    gather_every: int = 10
    """Steps between gathers of per-step metrics (each gather is one host-device synchronisation)."""
    start: int = 0
    """The first step index: a resumed run continues at the checkpoint's step; its warm-up steps are the first
    ``warmup`` ones this process runs (caches and JIT warm per process)."""
    save_every: int = 0
    """Save a checkpoint after every N-th step (0: never), and after the last step when saving at all."""
    save_last: bool = False


@dataclass
class _Pending:
    """One step's values on this rank, not yet gathered."""

    step: int
    loss: Any
    """0-d tensor on the rank's device: the mean loss of this rank's micro-batches."""
    clock: Any
    memory: int
    peak_memory: int
    lr: float
    states: dict[str, Any] | None
    busy: tuple[float, float] | None
    """A pipeline stage's (compute, schedule span) seconds in the step (CPU), else None."""
    grad_norm: Any = None
    """0-d tensor: the gradients' global 2-norm before clipping, from engines that clip it themselves, else None."""
    skipped: bool = False
    """fp16's loss scale skipped the optimizer step (a host-side count: the engine read its overflow flag)."""


class StepClock:
    """Times a step's region: a pair of CUDA events on GPU (elapsed time read at the next gather, so the
    host never waits), ``perf_counter`` on CPU (CPU ops are synchronous)."""

    def __init__(self, device: str) -> None:
        self.cuda = device.startswith("cuda")

    def start(self) -> Any:
        if not self.cuda:
            return time.perf_counter()
        import torch

        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def stop(self, started: Any) -> Any:
        if not self.cuda:
            return time.perf_counter() - started
        import torch

        end = torch.cuda.Event(enable_timing=True)
        end.record()
        return started, end

    def seconds(self, handle: Any) -> float:
        """The region's duration; on GPU waits for its end event (call at a gather, never per step)."""
        if not self.cuda:
            return handle
        start, end = handle
        end.synchronize()
        return start.elapsed_time(end) / 1e3


def _sync(device: str) -> None:
    """Wait for queued GPU work so a host clock reading includes it (CPU ops are already synchronous)."""
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize(device)


def _to_device(batch: Any, device: str) -> Any:
    """Copy a batch to the device without blocking the host (pinned memory, asynchronous copy on GPU)."""
    if not device.startswith("cuda"):
        return batch.to(device)
    return batch.pin_memory().to(device, non_blocking=True)


def _fault(rank: int, step: int | str) -> None:
    """Fault injection for tests of failure handling: DSBENCH_FAULT="RANK:STEP" fails that rank at that step,
    "RANK:STEP:hang" makes it hang there (the others wait in the step's collective), "RANK:join:hang" makes it
    hang before joining the process group."""
    import os
    import time

    fault = os.environ.get("DSBENCH_FAULT", "")
    if fault == f"{rank}:{step}":
        raise RuntimeError(f"injected fault at step {step} (DSBENCH_FAULT)")
    if fault == f"{rank}:{step}:hang":
        while True:  # until a signal ends the rank
            time.sleep(1)


def fault_before_join(rank: int) -> None:
    """DSBENCH_FAULT="RANK:join:hang": this rank never joins the process group."""
    _fault(rank, "join")


def to_host(tensor: Any) -> list[Any]:
    """Copy a gathered tensor to the host as nested lists (the gather's one host-device synchronisation)."""
    return tensor.cpu().tolist()


def gather_records(pending: list[_Pending], clock: StepClock, comm: Collectives, first_measured: int,
                   tokens: int, memory_kind: str) -> tuple[list[dict[str, Any]], list[Any] | None]:
    """Gather ``pending`` steps from every rank: one all-gather of a [steps, 7] float64 tensor on the rank's
    device (a sync point), plus the model-state counts the first time. Returns step records for rank 0."""
    import torch

    device = comm.device
    local = torch.tensor([[clock.seconds(p.clock), p.memory, p.peak_memory, *(p.busy or (-1.0, -1.0))]
                          for p in pending], dtype=torch.float64, device=device)
    losses = torch.stack([p.loss.detach().reshape(()) for p in pending]).to(device=device, dtype=torch.float64)
    norms = torch.stack([(p.grad_norm if p.grad_norm is not None else torch.tensor(-1.0)).detach().reshape(())
                         .to(device=device, dtype=torch.float64) for p in pending])
    gathered = to_host(comm.all_gather(torch.cat([local, losses[:, None], norms[:, None]], dim=1)))
    # [rank][step][field]: 0 timed region, 1 memory, 2 peak memory, 3-4 pipeline compute and span (-1: not
    # measured), 5 loss, 6 gradient norm before clipping (-1: not reported; the same on every rank)
    states = next((p.states for p in pending if p.states is not None), None)
    per_rank_states = comm.all_gather_object(states) if states is not None else None  # sync point, once
    records = []
    for i, p in enumerate(pending):
        rows = [gathered[r][i] for r in range(len(gathered))]
        times = [row[0] for row in rows]
        measured = min(row[4] for row in rows) >= 0
        records.append(StepRecord(
            step=p.step, warmup=p.step < first_measured, loss=sum(row[5] for row in rows) / len(rows), lr=p.lr,
            step_time_s=max(times), step_time_per_rank_s=times, tokens=tokens,
            memory_bytes=[int(row[1]) for row in rows], peak_memory_bytes=[int(row[2]) for row in rows],
            memory_kind=memory_kind, pipeline_compute_s_per_rank=[row[3] for row in rows] if measured else None,
            pipeline_span_s_per_rank=[row[4] for row in rows] if measured else None,
            grad_norm=rows[0][6] if rows[0][6] >= 0 else None, skipped=p.skipped).to_dict())
    return records, per_rank_states


def saves_after(step: int, settings: LoopSettings) -> bool:
    """True when a checkpoint is due once ``step`` (0-based) is done: every ``save_every`` steps, and the last."""
    done = step + 1
    return (settings.save_every > 0 and done % settings.save_every == 0) or (
        settings.save_last and done == settings.steps)


def _step(engine: Any, batches: list[Any], step: int, first: bool, clock: StepClock, device: str) -> _Pending:
    """One optimizer step over ``batches`` (its micro-batches), timed; the first step also counts the model
    states and what its backward keeps (saved-tensor hooks)."""
    engine.measure_states = first
    saved = SavedActivations(engine.model) if first else None
    skipped_before = engine.skipped_steps()
    started = clock.start()
    with saved or contextlib.nullcontext():
        loss = engine.train_step(batches)
    region = clock.stop(started)
    stop.beat()  # the step's collectives completed: the watchdog's clock restarts
    current, peak, _ = memory_now(device)  # allocator statistics: host-side, no device sync
    return _Pending(step=step, loss=loss, clock=region, memory=current, peak_memory=peak, lr=engine.lr(),
                    states={**engine.model_state_bytes(), "saved_activations": saved.bytes,
                            "saved_activations_peak": saved.peak} if saved else None,
                    busy=engine.busy_seconds() if hasattr(engine, "busy_seconds") else None,
                    grad_norm=getattr(engine, "grad_norm", None), skipped=engine.skipped_steps() > skipped_before)


def window_record(settings: LoopSettings, global_batch: int, first: int, seconds: float,
                  rank_tokens: float) -> dict[str, Any]:
    """The measured window: steps ``first`` .. the last, its wall-clock ``seconds``, and what it trained (the global
    batch's samples and tokens per step, and ``rank_tokens``: one rank's share of the work per step)."""
    measured = settings.steps - first
    return WindowRecord(first_step=first, last_step=settings.steps - 1, seconds=seconds,
                        tokens=measured * global_batch * settings.seq_len, samples=measured * global_batch,
                        rank_tokens=measured * rank_tokens).to_dict()


def train_loop(engine: Any, plan: Any, dist_info: Any, settings: LoopSettings,
               emit: Callable[[list[dict[str, Any]]], None],
               save: Callable[[int], dict[str, Any]] | None = None) -> None:
    """Run optimizer steps ``settings.start`` .. ``settings.steps - 1``; ``emit(records)`` receives each gather's
    records (rank 0 keeps them, the other ranks ignore them); ``save(steps_done)`` writes a checkpoint when one
    is due and returns its record (inside the measured window: the wall clock includes it, and the record
    carries its own seconds)."""
    device, dims = dist_info.device, settings.dims
    comm, clock = Collectives(dist_info), StepClock(device)
    ga, dp_rank = plan.grad_accum, dims.dp_rank(dist_info.rank)
    global_tokens = plan.global_batch * settings.seq_len
    rank_tokens = dims.rank_share(plan.micro_batch * ga * settings.seq_len)  # tokens' worth of work per rank
    pending: list[_Pending] = []
    window_start = 0.0
    first_measured = settings.start + settings.warmup

    def gather() -> None:
        records, states = gather_records(pending, clock, comm, first_measured, global_tokens,
                                         memory_now(device)[2])
        head = [{"type": "model_states", "step": 0, "per_rank": states}] if states is not None else []
        emit(head + records)
        pending.clear()

    for step in range(settings.start, settings.steps):
        if step == first_measured:
            # Window start: every rank and the device idle, warm-up work and its records behind us.
            comm.barrier()  # sync point
            _sync(device)
            window_start = time.perf_counter()
        batches = [_to_device(plan.micro_batch_for(step, m, dp_rank), device) for m in range(ga)]
        _fault(dist_info.rank, step)
        pending.append(_step(engine, batches, step, step == settings.start, clock, device))
        due = save is not None and saves_after(step, settings)
        if len(pending) >= settings.gather_every or step in (first_measured - 1, settings.steps - 1) or due:
            gather()  # all-gather across ranks: sync point; the last one also waits for the slowest rank
        if due and save is not None:
            emit([save(step + 1)])  # collective: every rank saves its part; records up to here are on disk
    _sync(device)  # the window ends when the device has finished its last step
    emit([window_record(settings, plan.global_batch, first_measured, time.perf_counter() - window_start,
                        rank_tokens)])
