"""Cheap facts about this machine (no torch import): accelerators, CPU count, tool versions."""

from __future__ import annotations

import glob
import os
import platform
import random
import re
import socket
from importlib import metadata


def local_gpu_count(dev: str = "/dev") -> int:
    """NVIDIA GPUs visible through /dev (0 on a CPU machine); honours CUDA_VISIBLE_DEVICES where there are GPUs.
    A CUDA_VISIBLE_DEVICES left set on a machine without NVIDIA devices names none: CUDA finds no device whatever it
    lists (torch.cuda.device_count() is 0), and until 2026-12-05 such a launch planned GPU ranks, without
    DS_ACCELERATOR=cpu. WSL2's GPUs have no /dev/nvidiaN, only /dev/dxg: there the variable is taken as it is."""
    devices = len(glob.glob(os.path.join(dev, "nvidia[0-9]*")))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return devices
    if not devices and not os.path.exists(os.path.join(dev, "dxg")):
        return 0
    return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])


_ARCH = re.compile(r"\d+\.\d+(\+PTX)?")


def cuda_arch_list_problem(value: str) -> str | None:
    """DeepSpeed 0.19.8's JIT op builder parses ``TORCH_CUDA_ARCH_LIST`` as numbers only: a Hopper-style entry such
    as ``9.0a`` ends the first ZeRO run on GPUs with "invalid literal for int() with base 10: '0a'" (seen on an H100
    image that exports 9.0a). The line that says so, or None; a launch onto GPU ranks here and each DeepSpeed rank on
    a GPU ask it."""
    bad = [entry for entry in re.split(r"[ ;]+", value.strip()) if entry and not _ARCH.fullmatch(entry)]
    if not bad:
        return None
    shown = value if len(value) <= 80 else value[:60] + f"... ({len(value):,} chars)"  # one line, whatever was set
    return (f"TORCH_CUDA_ARCH_LIST={shown!r}: DeepSpeed 0.19.8's JIT builder cannot parse {bad[0][:40]!r}; use "
            "plain versions such as 9.0 (or unset it)")


def default_ranks() -> int:
    """Ranks per node by default: one per GPU, or 2 CPU ranks on a machine without GPUs."""
    return local_gpu_count() or 2


def memory_available(meminfo_path: str = "/proc/meminfo") -> int | None:
    """Bytes the kernel says new processes can have without swapping (/proc/meminfo's MemAvailable); None where
    there is no such file or line."""
    try:
        with open(meminfo_path, encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024  # the file counts kB (KiB)
    except (OSError, ValueError, IndexError):
        return None
    return None


EPHEMERAL_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
LINUX_EPHEMERAL = (32768, 60999)
"""Linux's default range of local ports for outgoing connections (Documentation/networking/ip-sysctl.rst)."""
LOWEST_PORT = 20000
"""The lowest port :func:`free_port` offers: below it lie the registered services' ports."""


def ephemeral_range(path: str = EPHEMERAL_RANGE_FILE) -> tuple[int, int]:
    """The kernel's range of local ports for outgoing connections (``net.ipv4.ip_local_port_range``), or Linux's
    default where the file cannot be read."""
    try:
        with open(path, encoding="ascii") as text:
            low, high = (int(field) for field in text.read().split())
    except (OSError, ValueError):
        return LINUX_EPHEMERAL
    return low, high


def binds(port: int, host: str = "") -> bool:
    """Whether a TCP socket can bind ``port`` on ``host`` now ("": every address, as a rendezvous listens); the
    socket is closed again."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:  # in use (a listener, or a connection's local port)
            return False
    return True


def free_port(host: str = "127.0.0.1", ephemeral: tuple[int, int] | None = None, tries: int = 64) -> int:
    """A TCP port free on ``host`` right now, for a rendezvous that rank 0 binds seconds later.

    Chosen at random outside the kernel's ephemeral range: a port the kernel picked for a bind to port 0 is one it
    also hands to outgoing connections as their local port, so in the seconds before rank 0 listens on it another
    process's connection (the gloo links of another job's ranks) could take it, and rank 0 would stop with
    EADDRINUSE (a ZeRO-2 launch of the clean clone of 2026-12-02 12:00 did, beside the test bed's launches).
    DeepSpeed's and torchrun's default port, 29500, lies outside the range too. Where no such port binds after
    ``tries``, the kernel's pick."""
    low, high = ephemeral or ephemeral_range()
    outside = [port for port in range(LOWEST_PORT, 65536) if not low <= port <= high]
    for port in random.sample(outside, min(tries, len(outside))):  # at random: two launches at once seldom meet
        if binds(port, host):
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def versions() -> dict[str, str | None]:
    """Installed versions of the stack (``None`` when absent), without importing the packages."""
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in ("dsbench", "torch", "deepspeed", "transformers", "accelerate", "datasets", "click"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


MATCHED = ("python", "dsbench", "torch", "deepspeed", "accelerate")
"""Versions that must match across nodes: ranks exchange pickled objects and tensors, and DeepSpeed's launcher
and ops must agree."""


def version_differences(ours: dict[str, str | None], theirs: dict[str, str | None]) -> list[str]:
    """``name THEIRS (here OURS)`` for each of :data:`MATCHED` that differs."""
    return [f"{name} {theirs.get(name)} (here {ours.get(name)})" for name in MATCHED
            if theirs.get(name) != ours.get(name)]


def machine() -> dict[str, object]:
    """Host facts recorded in every run header."""
    return {"hostname": socket.gethostname(), "platform": platform.platform(), "cpus": os.cpu_count(),
            "gpus": local_gpu_count()}
