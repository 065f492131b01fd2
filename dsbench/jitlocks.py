"""Stale build locks in torch's JIT extension cache: the files' times and the processes at work in their folders.

torch builds DeepSpeed's ops (shm comm, CPU Adam, FusedAdam, async_io) on first use under
``TORCH_EXTENSIONS_DIR`` or ``~/.cache/torch_extensions/<pyXY>_<cpu|cuXYZ>/<op>``. The process that builds
holds a ``lock`` file there (torch.utils.file_baton.FileBaton); every other process waits for it to go, with
no timeout. A build killed part-way leaves the file behind, and every later DeepSpeed run then waits forever
without a word. A rank told to stop removes the lock it holds (dsbench.worker.jitbaton); a builder killed outright
cannot. A lock is live while a process works in its folder: torch runs ninja there (``cwd=build_directory``,
torch/utils/cpp_extension.py ``_run_ninja_build``) and the compilers inherit it. Where no process on this machine
does (a build on another node of a shared home folder), ninja keeps writing into the folder while it runs, so a
lock in a folder where nothing changed for ``stale_s`` seconds is left over.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

STALE_S = 600.0
"""No build of a DeepSpeed op on 2 cores goes 10 minutes without writing a file (async_io, the longest,
takes 4-5 minutes in all: ../shared/FINDINGS.md)."""


SHM_COMM_OP = "deepspeed_shm_comm"
"""The op every DeepSpeed run on CPU ranks loads first: its CPU accelerator's shared-memory comm, built as the
ranks join (../shared/FINDINGS.md). A launch onto CPU ranks here refuses a stale lock of it before any rank starts;
the other ops' locks stay the ranks' to refuse (which ops a run loads follows DeepSpeed's optimizer choice)."""


def op_locks(op: str, environ: Mapping[str, str], cwd: str) -> list[Path]:
    """The ``lock`` files of ``op``'s JIT build that ranks started here with ``environ`` would wait on, as torch
    places the build (torch/utils/cpp_extension.py ``_get_build_directory``): ``$TORCH_EXTENSIONS_DIR/<op>``, else
    ``<cache>/torch_extensions/py<XY><abiflags>_<accelerator>/<op>`` with the cache ``$XDG_CACHE_HOME`` or
    ``~/.cache`` (torch/_appdirs.py ``user_cache_dir``). torch's accelerator tag (cpu, cuXYZ, rocmXYZ) is known only
    by importing torch, so every tag of this Python is read; a relative path is the ranks' folder's (``cwd``). A path
    this process cannot read (too long, not its to list) finds none: the ranks meet it in their own words."""
    explicit = environ.get("TORCH_EXTENSIONS_DIR")
    try:
        if explicit is not None:  # set, even to "" (torch tests it against None)
            return [lock for lock in [Path(cwd, explicit, op, "lock")] if lock.exists()]
        cache = environ.get("XDG_CACHE_HOME", os.path.join(environ.get("HOME") or os.path.expanduser("~"), ".cache"))
        version = f"py{sys.version_info.major}{sys.version_info.minor}{getattr(sys, 'abiflags', '')}"
        return sorted(Path(cwd, cache, "torch_extensions").glob(f"{version}_*/{op}/lock"))
    except (OSError, ValueError):  # ValueError: a NUL byte in the variable
        return []


def stale_locks(root: Path, now: float, stale_s: float = STALE_S) -> list[Path]:
    """``lock`` files under ``root`` (``<op>/lock`` or ``<pyXY_dev>/<op>/lock``) in folders idle for ``stale_s``."""
    return [lock for lock in sorted([*root.glob("*/lock"), *root.glob("*/*/lock")]) if is_stale(lock, now, stale_s)]


def is_stale(lock: Path, now: float, stale_s: float = STALE_S) -> bool:
    """Whether ``lock`` is there and its folder has been idle for ``stale_s`` (no file written, the lock included)."""
    # The lock's own time first: ranks of one launch load an op together, each taking and releasing the lock in
    # turn, so a live lock can go between a glob and the listing below; the folder's other files are then as old as
    # the last real build, and a lock read only through the listing looked stale (a CI run saw it).
    try:
        created = lock.stat().st_mtime
        newest = max([created, *(path.stat().st_mtime for path in lock.parent.iterdir())])
    except OSError:
        return False  # the build finished (or the folder went) while we looked
    # a compile can write nothing for longer than stale_s on a loaded machine (2026-12-02: async_io's first object
    # took 11.5 minutes beside two files' launches, and a rank refused the live lock), so a builder at work wins
    return now - newest > stale_s and lock.exists() and not building_in(lock.parent)


def building_in(folder: Path) -> bool:
    """Whether a process on this machine works in ``folder`` (its current directory is there), as ninja and the
    compilers of a torch JIT build do."""
    target = os.path.realpath(folder)
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if os.readlink(entry / "cwd") == target:
                return True
        except OSError:
            continue  # gone meanwhile, or not ours to read
    return False


def stale_lock_message(locks: list[Path]) -> str:
    """One line naming the first stale lock and what to do."""
    more = f" (and {len(locks) - 1} more)" if len(locks) > 1 else ""
    return (f"{locks[0]}{more}: a JIT build lock left by an interrupted build; every DeepSpeed run that "
            f"loads this op would wait on it forever. Remove it (rm {locks[0]}) if no build is running")
