"""torch's JIT build lock in a dsbench process: never left behind by a rank told to stop, never waited on forever.

torch builds an op under its ``FileBaton`` (torch/utils/cpp_extension.py ``_jit_compile``): the builder creates
``<op>/lock``, builds, and removes it in a ``finally``; every other process polls until the file is gone, with no
limit. A rank told to stop leaves through :mod:`dsbench.worker.stop`'s ``os._exit``, where no ``finally`` runs, so
Ctrl-C during a first run's build left the lock, and the next DeepSpeed run waited on it without a word (seen
2026-11-28: ``dsbench launch --zero 1`` interrupted 3 s into building the shm comm op, the lock stayed; a launch a
minute later hung in ``FileBaton.wait``). :func:`guard` wraps the baton of this process:

- the locks it takes are remembered, and :func:`drop_held` (a stop hook) removes them before the rank leaves;
- a wait ends in one line once the lock's folder has been idle for :data:`dsbench.jitlocks.STALE_S` (a builder
  killed outright, SIGKILL or the OOM killer, whose rank ran no hook), and says once, after :data:`NOTICE_S`, what
  it waits on.

A half-built op is rebuilt by the next build: ninja rebuilds any output its log does not record as finished.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dsbench.errors import UserError
from dsbench.jitlocks import STALE_S, is_stale, stale_lock_message

NOTICE_S = 30.0
"""A wait this long says what it waits on (a first build of an op takes 0.5-2 minutes on 2 cores)."""

_held: set[str] = set()
_mutex = threading.Lock()  # sync point: a stop hook (watcher thread) against a build taking the lock (main thread)
_stopping = threading.Event()
_guarded: set[type] = set()


def guard(say: Callable[[str], None] | None = None, baton: type | None = None) -> None:
    """Wrap ``baton`` (torch's ``FileBaton`` class by default) for this process; once per class."""
    if baton is None:
        from torch.utils.file_baton import FileBaton

        baton = FileBaton
    if baton in _guarded:
        return
    acquire, release = baton.try_acquire, baton.release

    def try_acquire(self: Any) -> bool:
        with _mutex:
            if not _stopping.is_set():
                got = bool(acquire(self))
                if got:
                    _held.add(self.lock_file_path)
                return got
        threading.Event().wait()  # told to stop: the stop watcher ends the process; no new build starts
        return False

    def release_and_forget(self: Any) -> None:
        with _mutex:
            if _stopping.is_set():  # drop_held removed it already: the build's `finally` after the stop hook
                return
            _held.discard(self.lock_file_path)
            release(self)

    def wait(self: Any) -> None:
        wait_for(Path(self.lock_file_path), self.wait_seconds, say)

    baton.try_acquire, baton.release, baton.wait = try_acquire, release_and_forget, wait
    _guarded.add(baton)


def drop_held(_signal: str = "") -> None:
    """Remove the build locks this process holds (it is leaving; its build is abandoned), and take no more."""
    with _mutex:
        _stopping.set()
        for path in sorted(_held):
            try:
                os.remove(path)
            except OSError:
                pass  # gone already
        _held.clear()


def wait_for(lock: Path, poll_s: float, say: Callable[[str], None] | None, stale_s: float = STALE_S,
             notice_s: float = NOTICE_S, clock: Callable[[], float] = time.time,
             sleep: Callable[[float], None] = time.sleep) -> None:
    """Wait until ``lock`` is gone, as torch does; refuse it in one line once its folder is idle for ``stale_s``."""
    started, told = clock(), False
    while lock.exists():
        now = clock()
        if is_stale(lock, now, stale_s):
            raise UserError(stale_lock_message([lock]))
        if say is not None and not told and now - started >= notice_s:
            say(f"waiting for {lock}: another process is building this op (a lock left over is refused once its "
                f"folder has been idle {stale_s / 60:g} minutes)")
            told = True
        sleep(poll_s)
