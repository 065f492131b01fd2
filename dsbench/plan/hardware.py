"""Named interconnects and GPUs for the planner (figures from vendor datasheets and the seed articles)."""

from __future__ import annotations

from dataclasses import dataclass

from dsbench.errors import UserError


@dataclass(frozen=True, slots=True)
class Link:
    name: str
    bandwidth_gbs: float
    """Per-rank unidirectional bandwidth in GB/s (1e9 bytes/s)."""
    latency_us: float
    """Per ring step."""
    note: str
    by_kind: tuple[tuple[str, float, float], ...] = ()
    """Measured links (``dsbench calibrate``): (collective, bandwidth GB/s, latency µs per step) for each kind."""

    def figures(self, kind: str) -> tuple[float, float]:
        """(bandwidth GB/s, latency µs per step) for one collective: its measured figures, else the link's."""
        for name, bandwidth, latency in self.by_kind:
            if name == kind:
                return bandwidth, latency
        return self.bandwidth_gbs, self.latency_us


INTERCONNECTS = {
    "nvlink2": Link("nvlink2", 150.0, 3.0, "NVLink 2 (V100 SXM2): 300 GB/s bidirectional per GPU, 150 GB/s each way"),
    "nvlink": Link("nvlink", 300.0, 3.0, "NVLink 3 (A100): 600 GB/s bidirectional per GPU, 300 GB/s each way"),
    "nvlink4": Link("nvlink4", 450.0, 3.0, "NVLink 4 (H100 SXM): 900 GB/s bidirectional, 450 GB/s each way"),
    "infiniband": Link("infiniband", 25.0, 5.0, "InfiniBand HDR 200 Gb/s, one NIC per GPU (seeds/001)"),
    "infiniband-ndr": Link("infiniband-ndr", 50.0, 5.0, "InfiniBand NDR 400 Gb/s, one NIC per GPU"),
    "ethernet-100g": Link("ethernet-100g", 12.5, 20.0, "100 Gb/s Ethernet (seeds/003)"),
    "pcie3": Link("pcie3", 12.5, 10.0, "PCIe 3.0 x16, ~12.5 GB/s achievable each way"),
    "pcie4": Link("pcie4", 25.0, 10.0, "PCIe 4.0 x16, ~25 GB/s achievable each way"),
    "pcie5": Link("pcie5", 50.0, 10.0, "PCIe 5.0 x16, ~50 GB/s achievable each way"),
}


def link(name: str | None, bandwidth: float | None = None, latency: float | None = None,
         flag: str = "--interconnect") -> Link:
    """A named link, or a custom one from ``--bandwidth`` (GB/s) and ``--latency`` (µs); an unknown name is one
    line naming ``flag``, the option that gave it."""
    if bandwidth is not None:
        return Link("custom", bandwidth, latency if latency is not None else 5.0, "--bandwidth/--latency")
    if name not in INTERCONNECTS:
        more = " or give --bandwidth GB/s" if flag == "--interconnect" else ""
        raise UserError(f"{flag} {name!r} is unknown; choose one of {', '.join(INTERCONNECTS)}{more}")
    base = INTERCONNECTS[name]
    return base if latency is None else Link(base.name, base.bandwidth_gbs, latency, base.note)
