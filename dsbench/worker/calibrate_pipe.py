"""What torch's pipeline schedules cost beyond their stages' work, measured on calibrate's ranks.

Each schedule runs one step over every rank of the world as its pipeline, on stages that compute almost nothing
(one 8x8 linear layer per chunk): what a step takes is then the schedule's own runtime, each forward and backward
pass's call, bookkeeping and point-to-point sends and receives, and the waits that chain them across ranks.
The planner divides it by the passes a rank runs (plan/pipeline_time.py). Interleaved 1F1B was priced from its
smaller bubble alone and measured slower than plain 1F1B on 2 CPU ranks in 3 of 4 gpt2-mini compares
(docs/planner.md); on these stages, at 4 micro-batches, its step took 11.8 ms to 1F1B's 3.3 (2026-11-28, 2 CPU
ranks): more passes, and more per pass.
"""

from __future__ import annotations

from typing import Any

from dsbench.worker.calibrate_timing import interleaved

SCHEDULES = ("1f1b", "interleaved", "interleaved-zb")
"""The schedules torch_pp runs that the planner prices (plan/estimate.py's candidates)."""
VIRTUAL_STAGES = 2
"""Chunks per rank under the interleaved schedules (the fewest they run with)."""
WIDTH = 8
"""Features of each chunk's linear layer and of the micro-batches: small enough that the work is the schedule's."""
CALLS = 3
"""Steps per timed sample."""


def _loss(output: Any, target: Any) -> Any:
    import torch.nn.functional as F

    return F.mse_loss(output, target)


def measure_pipeline_schedules(comm: Any, info: Any, repeats: int) -> dict[str, Any]:
    """Seconds of one step of each of :data:`SCHEDULES` with every rank a pipeline stage and 2·P micro-batches
    (interleaved schedules need a multiple of P), timed in interleaved rounds (calibrate_timing.interleaved: each
    sample starts at a barrier on every rank)."""
    import torch
    from torch.distributed.pipelining import PipelineStage

    from dsbench.worker.engines.model_parallel import schedule_class

    stages, rank, device = info.world_size, info.rank, torch.device(info.device)
    micro_batches = 2 * stages
    torch.manual_seed(1234)
    batch = torch.randn(micro_batches, WIDTH, device=device)
    works = {}
    for schedule in SCHEDULES:
        chunks = VIRTUAL_STAGES if schedule.startswith("interleaved") else 1
        own = [PipelineStage(torch.nn.Linear(WIDTH, WIDTH).to(device), rank + k * stages, stages * chunks, device)
               for k in range(chunks)]
        runner = schedule_class(schedule)(own if chunks > 1 else own[0], n_microbatches=micro_batches,
                                          loss_fn=_loss, scale_grads=True)

        def step(runner: Any = runner) -> None:
            # the first rank feeds the micro-batches, the last computes the loss (its chunk is the last stage)
            runner.step(*((batch,) if rank == 0 else ()), target=batch if rank == stages - 1 else None,
                        return_outputs=False)

        works[schedule] = step
    timed = interleaved(works, comm, info.device, max(repeats, 7), CALLS)
    return {"stages": stages, "micro_batches": micro_batches, "virtual_stages": VIRTUAL_STAGES, "width": WIDTH,
            "schedules": timed}
