"""The GPUs dsbench knows, one table (stdlib only): dense peak TFLOPS from the vendors' datasheets and memory.

The planner names them by key (``dsbench plan --gpu h100``); the worker finds its device by CUDA name
(``torch.cuda.get_device_name``: "NVIDIA H100 80GB HBM3") for the MFU of a run. Peaks are dense (no sparsity):
16-bit tensor core, and fp32 without TF32.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Gpu:
    key: str
    """The planner's name for it (--gpu)."""
    name: str
    """What its CUDA device name contains (matched case-insensitively, most specific first)."""
    bf16_tflops: float
    fp32_tflops: float
    memory_gib: float
    """The datasheet's memory ("80GB"), which is binary: the lent H200 (141 GB on its datasheet) reported
    150,109,880,320 bytes, 139.8 GiB (``torch.cuda.get_device_properties().total_memory``, 2026-11-27:
    tests/data/runs/gpu-h200-calibrated-20261127/b/measured.json), where 141e9 bytes would be 6% short."""
    intra: str = "nvlink"
    """The link between a node's GPUs (dsbench.plan.hardware.INTERCONNECTS): NVLink on SXM parts, PCIe on the
    cards that have none or pair them only by bridge (a ring over 8 then runs at PCIe's rate)."""

    def peak_tflops(self, precision: str) -> float:
        return self.bf16_tflops if precision in ("bf16", "fp16") else self.fp32_tflops


# NVIDIA datasheets: H100/H200 (SXM5), A100, L40S, L4, A10, V100 (SXM2), T4, GeForce RTX 4090. The link within a
# node: NVLink 4 on H100/H200 SXM, NVLink 3 on A100 SXM, NVLink 2 on V100 SXM2; H100 NVL and PCIe pair by NVLink
# bridge only (PCIe 5.0 between pairs); L40S, L4, A10 and RTX 4090 have no NVLink (PCIe 4.0), T4 neither (PCIe 3.0).
TABLE = (
    Gpu("h200", "H200", 989.0, 67.0, 141, "nvlink4"),
    Gpu("h100-nvl", "H100 NVL", 835.0, 60.0, 94, "pcie5"),
    Gpu("h100-pcie", "H100 PCIe", 756.0, 51.0, 80, "pcie5"),
    Gpu("h100", "H100", 989.0, 67.0, 80, "nvlink4"),
    Gpu("a100", "A100", 312.0, 19.5, 80, "nvlink"),
    Gpu("a100-40g", "A100", 312.0, 19.5, 40, "nvlink"),
    Gpu("l40s", "L40S", 362.0, 91.6, 48, "pcie4"),
    Gpu("l4", "L4", 121.0, 30.3, 24, "pcie4"),
    Gpu("a10", "A10", 125.0, 31.2, 24, "pcie4"),
    Gpu("v100", "V100", 125.0, 15.7, 32, "nvlink2"),
    Gpu("rtx4090", "RTX 4090", 165.0, 82.6, 24, "pcie4"),
    Gpu("t4", "T4", 65.0, 8.1, 16, "pcie3"),
)
BY_KEY = {gpu.key: gpu for gpu in TABLE}


def by_device_name(name: str) -> Gpu | None:
    """The GPU a CUDA device name denotes (the first entry whose name it contains; None when unknown)."""
    return next((gpu for gpu in TABLE if gpu.name.lower() in name.lower()), None)
