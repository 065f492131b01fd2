"""What the pipeline engines cost beyond their stages' work, measured on calibrate's ranks: torch's schedules and
DeepSpeed's pipeline engine.

Each schedule runs one step over every rank of the world as its pipeline, on stages that compute almost nothing
(one 8x8 linear layer per chunk): what a step takes is then the schedule's own runtime, each forward and backward
pass's call, bookkeeping and point-to-point sends and receives, and the waits that chain them across ranks.
DeepSpeed's engine (``train_batch``: its TrainSchedule's 1F1B order, then its gradient reductions and optimizer
step on the stage's 8x8 layer) is timed the same way in the same rounds.
Each is timed at several micro-batch counts, and the planner fits a part per step and a part per pass a rank runs
(plan/pipeline_time.py). Interleaved 1F1B was priced from its
smaller bubble alone and measured slower than plain 1F1B on 2 CPU ranks in 3 of 4 gpt2-mini compares
(docs/planner.md); on these stages, at 4 micro-batches, its step took 11.8 ms to 1F1B's 3.3 (2026-11-28, 2 CPU
ranks): more passes, and more per pass.
"""

from __future__ import annotations

from typing import Any

from dsbench.configs.templates import load_template
from dsbench.trainspec import INTERLEAVED
from dsbench.trainspec import SCHEDULES as RUN_SCHEDULES
from dsbench.worker.calibrate_timing import interleaved

SCHEDULES = tuple(schedule for schedule in RUN_SCHEDULES if schedule != "gpipe")
"""The schedules torch_pp runs that the planner prices (plan/estimate.py's candidates have no GPipe)."""
DEEPSPEED = "deepspeed"
"""The key of DeepSpeed's pipeline engine among the timed schedules (plan/pipeline_time.PASS_RATE)."""
VIRTUAL_STAGES = 2
"""Chunks per rank under the interleaved schedules (the fewest they run with)."""
WIDTH = 8
"""Features of each chunk's linear layer and of the micro-batches: small enough that the work is the schedule's."""
CALLS = 3
"""Steps per timed sample."""
ROUNDS = (1, 2, 4)
"""Micro-batches per step, in multiples of the stages: the step's runtime is fitted as a part per step and a part
per pass (plan/pipeline_time.fit_runtime); timed at 2 x P alone (until 2026-11-28 19:00), its cost per pass moved by
20-30% between 1, 2 and 4 x P (2 CPU ranks)."""


def _loss(output: Any, target: Any) -> Any:
    import torch.nn.functional as F

    return F.mse_loss(output, target)


def measure_pipeline_schedules(comm: Any, info: Any, repeats: int) -> dict[str, Any]:
    """Seconds of one step of each of :data:`SCHEDULES` and of DeepSpeed's engine with every rank a pipeline stage,
    at each of :data:`ROUNDS` x P micro-batches (interleaved schedules need a multiple of P), timed in interleaved
    rounds (calibrate_timing.interleaved: each sample starts at a barrier on every rank). Each schedule's samples
    are listed in the order of ``micro_batches``."""
    import torch

    stages, device = info.world_size, torch.device(info.device)
    counts = [rounds * stages for rounds in ROUNDS]
    torch.manual_seed(1234)
    batch = torch.randn(max(counts), WIDTH, device=device)
    works = {}
    for m in counts:
        for schedule in SCHEDULES:
            works[f"{schedule}@{m}"] = _torch_schedule(schedule, stages, info.rank, m, batch[:m], device)
        works[f"{DEEPSPEED}@{m}"] = _deepspeed_pipeline(stages, m, batch[:m], info.backend)
    timed = interleaved(works, comm, info.device, max(repeats, 7), CALLS)
    return {"stages": stages, "micro_batches": counts, "virtual_stages": VIRTUAL_STAGES, "width": WIDTH,
            "schedules": {schedule: [timed[f"{schedule}@{m}"] for m in counts]
                          for schedule in (*SCHEDULES, DEEPSPEED)}}


def _torch_schedule(schedule: str, stages: int, rank: int, micro_batches: int, batch: Any, device: Any) -> Any:
    """One step of torch's ``schedule`` over every rank, on stages of its own (one 8x8 layer a chunk), as a
    callable."""
    import torch
    from torch.distributed.pipelining import PipelineStage

    from dsbench.worker.engines.model_parallel import schedule_class

    chunks = VIRTUAL_STAGES if schedule in INTERLEAVED else 1
    own = [PipelineStage(torch.nn.Linear(WIDTH, WIDTH).to(device), rank + k * stages, stages * chunks, device)
           for k in range(chunks)]
    runner = schedule_class(schedule)(own if chunks > 1 else own[0], n_microbatches=micro_batches, loss_fn=_loss,
                                      scale_grads=True)

    def step() -> None:
        # sync point: the step's sends and receives chain every rank; the first rank feeds the micro-batches,
        # the last computes the loss (its chunk is the last stage)
        runner.step(*((batch,) if rank == 0 else ()), target=batch if rank == stages - 1 else None,
                    return_outputs=False)

    return step


def _deepspeed_pipeline(stages: int, micro_batches: int, batch: Any, backend: str) -> Any:
    """One step of DeepSpeed's pipeline engine over every rank (``PipelineModule``, one 8x8 layer a stage, ZeRO-1 as
    dsbench's pipe{P} runs it, torch AdamW as the client optimizer so no op is built), as a callable."""
    import deepspeed
    import torch
    from deepspeed.pipe import PipelineModule

    deepspeed.init_distributed(dist_backend=backend)  # DeepSpeed's view of the process group torch already has
    module = PipelineModule(layers=[torch.nn.Linear(WIDTH, WIDTH) for _ in range(stages)], num_stages=stages,
                            loss_fn=_loss, partition_method="uniform")
    config = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": micro_batches,
              "zero_optimization": {"stage": 1}, "steps_per_print": 2**31 - 1,
              "timers": load_template("base")["timers"]}  # the throughput timer as rendered: no device wait
    engine, *_ = deepspeed.initialize(model=module, config=config,
                                      optimizer=torch.optim.AdamW(module.parameters(), lr=1e-4))

    def pairs() -> Any:
        while True:  # the first stage reads the inputs, the last the labels: every micro-batch one row
            for row in batch:
                yield row[None], row[None]

    data = pairs()
    return lambda: engine.train_batch(data_iter=data)  # sync point: its sends, gradient reduction, loss broadcast
