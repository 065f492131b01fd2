"""Measurements on a rank: peak FLOP/s of the device, memory, and the JSONL writer (rank 0)."""

from __future__ import annotations

import json
import os
import re
import resource
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from dsbench.errors import UserError
from dsbench.gpus import by_device_name
from dsbench.io import write_failed
from dsbench.records import MEMORY_KINDS


def gpu_peak_tflops(name: str, precision: str) -> float | None:
    """Datasheet dense peak for a CUDA device name (dsbench/gpus.py; None when unknown)."""
    gpu = by_device_name(name)
    return gpu.peak_tflops(precision) if gpu is not None else None


def cpu_peak_tflops(threads: int) -> tuple[float | None, str]:
    """fp32 peak of ``threads`` cores: GHz x FLOPs/cycle (AVX-512: 64, AVX2+FMA: 32, else 8), from /proc/cpuinfo."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None, "unknown (no /proc/cpuinfo)"
    flags = set(re.search(r"^flags\s*:\s*(.*)$", info, re.M).group(1).split()) if "flags" in info else set()
    per_cycle = 64 if "avx512f" in flags else 32 if {"avx2", "fma"} <= flags else 8
    named = re.search(r"@\s*([\d.]+)GHz", info)
    mhz = re.search(r"^cpu MHz\s*:\s*([\d.]+)", info, re.M)
    ghz = float(named.group(1)) if named else float(mhz.group(1)) / 1000 if mhz else None
    if ghz is None:
        return None, "unknown (no CPU frequency)"
    value = threads * ghz * per_cycle / 1000
    return value, f"cpu estimate: {threads} thread(s) x {ghz:.2f} GHz x {per_cycle} fp32 FLOPs/cycle"


def device_peak(device: str, precision: str, override: float | None) -> tuple[float | None, str]:
    """Peak TFLOPS per rank and where the figure comes from."""
    if override:
        return override, "--peak-tflops"
    if device.startswith("cuda"):
        import torch

        name = torch.cuda.get_device_name(device)
        value = gpu_peak_tflops(name, precision)
        return value, f"datasheet {name} {precision}" if value else f"unknown GPU {name}"
    return cpu_peak_tflops(int(os.environ.get("OMP_NUM_THREADS", "1")))


def memory_now(device: str) -> tuple[int, int, str]:
    """(current, peak, kind) bytes: CUDA allocated on GPU, resident set size on CPU."""
    if device.startswith("cuda"):
        import torch

        return torch.cuda.memory_allocated(device), torch.cuda.max_memory_allocated(device), MEMORY_KINDS[1]
    page = os.sysconf("SC_PAGE_SIZE")
    with open("/proc/self/statm") as handle:
        rss = int(handle.read().split()[1]) * page
    return rss, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, MEMORY_KINDS[0]


class JsonlWriter:
    """Appends one JSON record per line. Each batch is flushed to the OS, so a killed worker leaves whole lines
    behind; the file is fsynced once, at close (a per-gather fsync would put disk latency in the window).
    A lock serialises the training thread and the stop watcher (:mod:`dsbench.worker.stop`); a write the disk
    refuses (full, quota, file size limit) is a one-line :class:`~dsbench.io.WriteError`, and the lines before it
    stay readable (a torn last line is skipped by ``read_records``)."""

    def __init__(self, path: Path) -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._handle: TextIO = open(path, "x", encoding="utf-8")  # noqa: SIM115 (closed in close())
        except FileExistsError:
            raise UserError(f"{path} exists: a run folder holds one run (give a new --out)") from None
        except OSError as exc:
            raise write_failed(path, exc) from None
        self.path = path
        self._lock = threading.Lock()
        self.written: list[dict[str, Any]] = []
        """Every record on disk so far, in order (read under the lock by :meth:`close_with`)."""

    def write_many(self, records: list[dict[str, Any]]) -> None:
        with self._lock:
            self._write(records)

    def _write(self, records: list[dict[str, Any]]) -> None:
        if self._handle.closed:
            return
        try:
            self._handle.write("".join(json.dumps(record) + "\n" for record in records))
            self._handle.flush()
        except OSError as exc:
            raise write_failed(self.path, exc) from None
        self.written.extend(records)

    def close_with(self, last: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]) -> list[dict[str, Any]]:
        """Write ``last(records on disk)`` and close, in one hold of the lock: the stop watcher's end record names the
        last step written, even when the training thread is writing a gather meanwhile (it waits, then finds the
        file closed). Returns the records on disk before the closing ones."""
        with self._lock:
            before = list(self.written)
            self._write(last(before))
            self._close()
        return before

    def close(self) -> None:
        with self._lock:
            self._close()

    def _close(self) -> None:
        """Flush, fsync and close (the caller holds the lock)."""
        if self._handle.closed:
            return
        try:
            self._handle.flush()
            os.fsync(self._handle.fileno())
        except OSError as exc:
            raise write_failed(self.path, exc) from None
        finally:
            try:
                self._handle.close()
            except OSError:
                pass
