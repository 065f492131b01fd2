"""py-cpuinfo's answer about this CPU, asked once per machine instead of once per DeepSpeed op load.

DeepSpeed asks py-cpuinfo what CPU this is each time it loads a CPU op: ``OpBuilder.cpu_arch`` and ``simd_width``,
both called from the CPU builders' ``cxx_args`` (deepspeed/ops/op_builder/cpu/builder.py, 0.19.8), and once more
when it makes CPU Adam (deepspeed/ops/adam/cpu_adam.py). Each ``get_cpu_info()`` starts a Python process that runs
CPUID in a forked child and polls it: 1.1-1.3 s of a core on this machine, in every rank of every launch.

The answer is kept for the rest of the process, and in a file beside the JIT builds whose compiler flags it chose
(``TORCH_EXTENSIONS_DIR``), so the next rank on the same CPU reads it instead of asking. The file is named by what
it depends on: the CPU's vendor, model and feature flags as the kernel reports them in /proc/cpuinfo, and the
machine type. Another CPU (a new machine, a VM moved to another host model) gets a file of its own. DeepSpeed only
reads the returned dict, so the flags it derives are those it derives when it asks every time
(tests/unit/test_cpuanswer.py checks this against DeepSpeed's own builder).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
from pathlib import Path
from typing import Any

from dsbench.errors import DsbenchError
from dsbench.io import atomic_write_json, read_text

_PROC_CPUINFO = Path("/proc/cpuinfo")
_KEYS = ("vendor_id", "model name", "flags", "cpu family", "model", "stepping")
_NEEDED = ("arch", "flags")
"""What DeepSpeed's builders read from the answer; a stored answer without them is asked again."""


def cpu_key(cpuinfo_text: str, machine: str) -> str | None:
    """A short name for this CPU: its first processor's identifying lines of /proc/cpuinfo and the machine type.
    None when the kernel does not describe it (not Linux), so nothing is stored."""
    first = cpuinfo_text.split("\n\n", 1)[0]
    fields = {name.strip(): value.strip() for name, value in (line.split(":", 1) for line in first.splitlines()
                                                               if ":" in line)}
    named = [f"{name}:{fields[name]}" for name in _KEYS if name in fields]
    if not named:
        return None
    return hashlib.sha256("\n".join([machine, *named]).encode()).hexdigest()[:16]


def answer_path(folder: Path, key: str) -> Path:
    return folder / f"dsbench-cpuinfo-{key}.json"


def read_answer(path: Path) -> dict[str, Any] | None:
    """The stored answer, or None when there is none or it is not one. Data only: json.loads runs nothing, and
    io.read_text reads regular files only (a FIFO planted there would block)."""
    try:
        answer = json.loads(read_text(path, "py-cpuinfo answer"))
    except (DsbenchError, ValueError):
        return None
    return answer if isinstance(answer, dict) and all(k in answer for k in _NEEDED) else None


def store_answer(path: Path, answer: dict[str, Any]) -> None:
    """Write it whole or not at all (atomic_write_json: two ranks asking at once both write the same answer, and a
    reader never sees half of one)."""
    try:
        atomic_write_json(path, answer)
    except DsbenchError:  # a full disk or a folder that cannot be written: this process keeps it
        pass


def jit_folder() -> Path:
    """Where torch builds DeepSpeed's JIT ops: ``TORCH_EXTENSIONS_DIR``, else torch's default."""
    from torch.utils.cpp_extension import get_default_build_root

    return Path(os.environ.get("TORCH_EXTENSIONS_DIR") or get_default_build_root())


def ask_the_cpu_once(folder: Path | None = None) -> None:
    """From here on, py-cpuinfo's ``get_cpu_info`` answers from this process's first answer, which is the stored
    one for this CPU when there is one."""
    try:
        import cpuinfo
    except ImportError:  # DeepSpeed then reads lscpu, which is quick
        return
    if hasattr(cpuinfo.get_cpu_info, "cache_info"):
        return
    ask = cpuinfo.get_cpu_info
    try:
        key = cpu_key(_PROC_CPUINFO.read_text(), platform.machine())
    except OSError:
        key = None
    path = answer_path(folder or jit_folder(), key) if key else None

    @functools.cache
    def get_cpu_info() -> dict[str, Any]:
        stored = read_answer(path) if path else None
        if stored is not None:
            return stored
        answer = ask()
        if path:
            store_answer(path, answer)
        return answer

    cpuinfo.get_cpu_info = get_cpu_info
