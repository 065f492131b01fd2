"""What ``dsbench plan`` is asked (stdlib only, so that the command's options read its defaults without importing
the planner)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dsbench.plan.profile import Profile


@dataclass(frozen=True, kw_only=True)
class PlanRequest:
    """What ``dsbench plan`` is asked, with its defaults: the click options read them from here (``DEFAULTS``), and
    tune, ``plan --verify`` and the report's predictions give only what differs."""

    model: str | None = None
    params: float | None = None
    config: str | None = None
    gpus: int | None = None
    nodes: int = 1
    gpus_per_node: int | None = None
    gpu: str = "h100"
    gpu_mem: float | None = None
    peak_tflops: float | None = None
    efficiency: float = 0.5
    """Achievable fraction of the dense peak without a profile (a round figure: seeds/001 measured 0.4-0.55 MFU)."""
    interconnect: str = "infiniband"
    intra: str | None = None
    bandwidth: float | None = None
    latency: float | None = None
    seq_len: int | None = None
    micro_batch: int = 1
    grad_accum: int = 8
    precision: str = "bf16"
    accounting: str | None = None
    host_mem: float = 1000
    """CPU RAM per node, GB."""
    profile: Profile | None = None
    """A machine profile from ``dsbench calibrate``: measured compute rate and links replace datasheet figures."""


DEFAULTS = PlanRequest()
