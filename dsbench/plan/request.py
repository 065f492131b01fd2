"""What ``dsbench plan`` is asked (stdlib only, so that the command's options read its defaults without importing
the planner)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from dsbench.errors import UserError

if TYPE_CHECKING:
    from dsbench.plan.profile import Profile


@dataclass(frozen=True, kw_only=True)
class MachineRequest:
    """What every plan is asked, with its defaults stated once: the model, the GPUs and their links, the batch's
    shape and precision, the host's measured constants, and the training's length and price. ``plan`` ranks
    strategies on it (:class:`PlanRequest`); ``plan --layout`` prices one (:class:`LayoutRequest`)."""

    model: str | None = None
    params: float | None = None
    gpus: int | None = None
    nodes: int = 1
    gpus_per_node: int | None = None
    gpu: str = "h100"
    gpu_mem: float | None = None
    """GiB per GPU (a datasheet's "80GB" is 80) [the GPU kind's]; with ``--gpu custom`` (and the next two) the
    figures of a GPU no profile describes."""
    peak_tflops: float | None = None
    hbm_tbs: float | None = None
    """With ``--gpu custom``: HBM bandwidth, TB/s (gpu_profiles.custom_profile)."""
    intra: str | None = None
    """Within a node, a named link (plan.hardware.INTERCONNECTS) [the GPU profile's NVLink]."""
    interconnect: str | None = None
    """Across nodes, a named link [on a GPU the GPU model prices: its profile's usual network; else infiniband];
    ``bandwidth`` overrides it."""
    bandwidth: float | None = None
    """Across nodes, GB/s per GPU."""
    latency: float | None = None
    """Per collective ring step, µs."""
    seq_len: int | None = None
    micro_batch: int = 1
    precision: str = "bf16"
    tokens: float | None = None
    """Tokens to train: days, GPU-hours (and the cost at ``price_per_gpu_hour``) of the answer."""
    price_per_gpu_hour: float | None = None
    zero_host_us: tuple[float, float, float] | None = None
    """The GPU model's DeepSpeed ZeRO host time per parameter tensor, µs, for ZeRO-1, 2, 3: the user's host's
    (scripts/fit_gpu_constants.py) instead of the fastest host measured (gpu_profiles.ZERO_HOST_US)."""
    cpu_adam_rate: float | None = None
    """The GPU model's ZeRO-Offload CPU Adam rate, parameters per second shared by a node's ranks: the user's
    host's instead of the lent H100 host's (gpu_profiles.OFFLOAD_ADAM)."""
    profile: Profile | None = None
    """A machine profile from ``dsbench calibrate``: measured compute rate and links replace datasheet figures
    (``--layout`` takes one written on a CUDA GPU: plan/gpu_calibration.py)."""

    def per_node(self) -> int:
        """GPUs per node: ``--gpus-per-node``, else ``--gpus`` spread evenly over ``--nodes`` (the total, as torchrun
        and SLURM count ``--gpus``; until 2026-12-01 ``--gpus 8 --nodes 2`` was refused as 8 per node), else 8. A
        total that does not divide over the nodes, or that contradicts ``--gpus-per-node``, is one line."""
        if self.gpus is None:
            return self.gpus_per_node or 8
        if self.gpus_per_node is None and self.gpus % self.nodes == 0:
            return self.gpus // self.nodes
        if self.gpus_per_node is None:
            raise UserError(f"--gpus {self.gpus} do not divide evenly over --nodes {self.nodes}: give "
                            "--gpus-per-node, or a total that divides")
        if self.gpus != self.nodes * self.gpus_per_node:
            raise UserError(f"--gpus {self.gpus} != --nodes {self.nodes} x --gpus-per-node {self.gpus_per_node}")
        return self.gpus_per_node


@dataclass(frozen=True, kw_only=True)
class PlanRequest(MachineRequest):
    """What ``dsbench plan`` is asked, with its defaults: the click options read them from here (``DEFAULTS``), and
    tune, ``plan --verify`` and the report's predictions give only what differs."""

    config: str | None = None
    efficiency: float = 0.5
    """Achievable fraction of the dense peak without a profile (a round figure: seeds/001 measured 0.4-0.55 MFU)."""
    grad_accum: int = 8
    accounting: str | None = None
    host_mem: float = 1000
    """CPU RAM per node, GiB."""


DEFAULTS = PlanRequest()


@dataclass(frozen=True, kw_only=True)
class LayoutRequest(MachineRequest):
    """``dsbench plan --layout``: one explicit layout on GPUs, spelled as ``dsbench launch`` and ``compare`` spell
    it, priced with the GPU time and memory model (docs/planner.md)."""

    layout: str
    """A data-parallel strategy as compare spells it (ddp, zero1-3, fsdp, fsdp_no_reshard, fsdp_hybrid)."""
    arch: str | None = None
    layers: int | None = None
    hidden: int | None = None
    heads: int | None = None
    kv_heads: int | None = None
    head_dim: int | None = None
    ffn: int | None = None
    vocab: int | None = None
    intra_bandwidth: float | None = None
    """Within a node, GB/s per GPU [the profile's NVLink]."""
    tp: int = 1
    pipeline_stages: int = 1
    pipeline_schedule: str = "1f1b"
    virtual_stages: int = 1
    cp: int = 1
    ulysses: int = 1
    """DeepSpeed Ulysses' degree (``--ulysses``, as ``dsbench launch`` spells it): context parallelism over
    all-to-alls instead of the ring (the GPU layout's ``cp`` with ``cp_comm="a2a"``)."""
    grad_accum: int | None = None
    global_batch: int | None = None
    recompute: str = "none"
    sequence_parallel: bool = False
    compile: bool = False
    kernels: str = "hf"
    attention: str = "flash"


LAYOUT_DEFAULTS = LayoutRequest(layout="fsdp")
