"""What ``dsbench tune`` is asked (light: the command's options read its defaults without importing the search)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dsbench.plan.request import PlanRequest

if TYPE_CHECKING:
    from dsbench.plan.profile import Profile


@dataclass(frozen=True, kw_only=True)
class TuneRequest:
    model: str
    world: int
    global_batch: int
    budget: int = 3
    exhaustive: bool = False
    """Run every layout that fits (the budget is ignored): the oracle a search is checked against."""
    speed_options: bool = False
    """After the search, measure the winner compiled and uncompiled, side by side; keep the faster."""
    strategies: list[str] | None = None
    checkpointing: bool = True
    profile: Profile | None = None
    gpu: str = PlanRequest.gpu
    gpu_mem: float | None = None
    precision: str = "fp32"
    seq_len: int = 128
    steps: int = 12
    warmup: int = 4
    hostfile: str | None = None
    out: Path = Path("runs/tune")
    resume: bool = False
    timeout: float = 900
