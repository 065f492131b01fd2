"""``dsbench plan --verify``: run the top candidates for a few steps and put predicted beside measured.

Each candidate that ``dsbench launch`` can run (DDP, ZeRO 0-3 with offload, FSDP2) runs as a compare cell on
this machine with the planned model, micro-batch and ranks; :mod:`dsbench.plan.verify` compares.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from dsbench.model_config import resolve_model
from dsbench.plan.candidate import Candidate
from dsbench.plan.verify import VerifyRow, compare_row, compare_strategy


def verify(result: dict[str, Any], opts: dict[str, Any], count: int = 3, steps: int = 6) -> list[VerifyRow]:
    """Run up to ``count`` top-ranked runnable candidates (``opts["model"]``: a model the worker can build; the
    command refuses --verify without one); return predicted vs measured rows."""
    from dsbench.bench.compare import run_cell
    from dsbench.bench.matrix import Cell, fused_by_default
    from dsbench.envinfo import default_ranks, local_gpu_count

    ranks = result["cluster"]["gpus_per_node"] if result["cluster"]["nodes"] == 1 else default_ranks()
    precision = "fp32" if local_gpu_count() == 0 else result["workload"]["precision"]
    shape = resolve_model(opts["model"])
    chosen = [c for c in result["candidates"] if c["rank"] and compare_strategy(Candidate.from_dict(c))]
    out_dir = Path(f"runs/plan-verify-{time.strftime('%Y%m%d-%H%M%S')}")
    rows = []
    for cand in chosen[:count]:
        name = compare_strategy(Candidate.from_dict(cand))
        # the plan's accumulation is per data-parallel replica, as the cell's is (the cell multiplies it by tp x pp)
        cell = Cell(strategy=name, world_size=ranks, micro_batch=result["workload"]["micro_batch"],
                    grad_accum=result["workload"]["grad_accum"], checkpointing=cand["activation_checkpointing"],
                    model=opts["model"], steps=steps, warmup=2, seq_len=result["workload"]["seq_len"],
                    precision=precision, fused_optimizer=fused_by_default(name))
        run = run_cell(cell, out_dir / cell.id, timeout=900, nvme_path=None)
        rows.append(compare_row(cand, run.folder, shape, ranks, precision, run.status))
    return rows
