"""How a rank ends when it is told to stop (SIGTERM from a launcher cleaning up, SIGINT from Ctrl-C).

Python runs signal handlers only in the main thread, between bytecodes: a rank blocked inside a gloo/NCCL
collective would not see SIGTERM until the collective returns, and the launcher then SIGKILLs it silently.
Instead, ``signal.set_wakeup_fd`` makes the C-level handler write the signal number to a socket at once, and
a watcher thread reading it runs the stop hooks (rank 0 records the run as interrupted), prints one line
naming the rank and the signal, and leaves with 128 + the signal number, the shell's convention.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import PurePath

_hooks: list[Callable[[str], None]] = []
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_where = "[rank ?]"
_program = "dsbench.train"


def say(text: str) -> None:
    """One line on stderr, ``[rank N on HOST] dsbench.train: TEXT``, written with a single write(2).

    Launchers run ranks with ``python -u`` (DeepSpeed's launch.py does), where ``print`` issues the text and its
    newline as two writes: the ranks share one pipe, so two ranks' lines could interleave into one and hide a
    rank's ``started``. One write of at most PIPE_BUF (4096) bytes to a pipe is atomic (POSIX write(2)).
    """
    sys.stderr.flush()  # a traceback printed before stays before
    line = f"{_where} {_program}: {text}".replace("\n", " ").encode("utf-8", errors="replace")
    os.write(sys.stderr.fileno(), line[:4095] + b"\n")


def on_stop(hook: Callable[[str], None]) -> None:
    """Run ``hook(signal_name)`` when the rank is told to stop (before it exits)."""
    _hooks.append(hook)


def install(where: str, program: str = "dsbench.train") -> None:
    """Watch for SIGTERM/SIGINT from the main thread (must be called there, before any other thread matters);
    :func:`say` writes ``WHERE PROGRAM: TEXT``."""
    global _where, _program
    _where, _program = where, program
    reader, writer = socket.socketpair()
    writer.setblocking(False)
    signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    for signum in STOP_SIGNALS:
        signal.signal(signum, lambda *_: None)  # the watcher acts; the main thread only gets interrupted syscalls
    threading.Thread(target=_watch, args=(reader, writer), name="dsbench-stop", daemon=True).start()


def _watch(reader: socket.socket, writer: socket.socket) -> None:
    signum = reader.recv(1)[0]
    name = signal.Signals(signum).name
    for hook in _hooks:
        try:
            hook(name)
        except Exception as exc:  # recording is best effort: the rank must still stop
            say(f"could not record the interruption: {exc}")
    say(f"stopped by {name} in {main_thread_at()}")
    os._exit(128 + signum)


def _short(path: str) -> str:
    """A source file as its package names it (``deepspeed/runtime/engine.py``), not the venv's absolute path."""
    parts = PurePath(path).parts
    for root in ("site-packages", "dist-packages"):
        if root in parts:
            return "/".join(parts[len(parts) - parts[::-1].index(root):])
    if "dsbench" in parts[:-1]:
        return "/".join(parts[len(parts) - 1 - parts[::-1].index("dsbench"):])
    return "/".join(parts[-2:])


def main_thread_at(depth: int = 3) -> str:
    """Where the main thread is, innermost call first (``file:line function <- ...``): read by the stop and
    watchdog threads, so that a run stopped while it hangs says where it hung (a frame blocked in a C call, an
    NCCL wait or a JIT build's subprocess, shows the Python line that made the call)."""
    try:  # on the stop path: whatever happens here, the rank must still say its line and exit
        frame = sys._current_frames().get(threading.main_thread().ident)
        stack = [(_short(c.filename), c.lineno, c.name) for c in traceback.extract_stack(frame)][::-1] if frame else []
    except Exception:  # noqa: BLE001
        stack = []
    if not stack:
        return "an unknown place"
    shown = [f"{path}:{line} {name}" for path, line, name in stack[:depth]]
    # and the innermost call of dsbench's own, where the ones above are all a library's (a wait in a collective)
    ours = next((f"... <- {path}:{line} {name}" for path, line, name in stack[depth:] if path.startswith("dsbench/")),
                None)
    if ours and not any(call.startswith("dsbench/") for call in shown):
        shown.append(ours)
    return " <- ".join(shown)


class _Watchdog:
    """Ends the rank when no training step finishes for ``seconds``: a peer hung or died inside a collective.

    The process group's timeout does not cover every backend: DeepSpeed's CPU all-reduce on one node goes through
    its shared-memory op (csrc/cpu/comm/shm.cpp), which spins without a limit, and NCCL's watchdog acts only
    with async error handling. Progress is a timestamp the loop sets after each step, so the check costs nothing
    on the step's path; checkpoint saves are not timed (:func:`unwatched`).
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.last = time.monotonic()
        self.paused = 0
        threading.Thread(target=self._run, name="dsbench-watchdog", daemon=True).start()

    def _run(self) -> None:
        while True:
            time.sleep(min(5.0, self.seconds / 4))
            idle = time.monotonic() - self.last
            if not self.paused and idle > self.seconds:
                say(f"error: no training step finished for {idle:.0f} s (--dist-timeout {self.seconds:g}): a rank "
                    f"hung or died inside a collective (this rank in {main_thread_at()})")
                os._exit(1)


_watchdog: _Watchdog | None = None


def watch(seconds: float) -> None:
    """Start the step watchdog (once the engine is built: JIT builds and model set-up before it are not timed)."""
    global _watchdog
    _watchdog = _Watchdog(seconds)


def beat() -> None:
    """A step finished (or started being waited on for a good reason): the watchdog's clock starts again."""
    if _watchdog is not None:
        _watchdog.last = time.monotonic()


@contextmanager
def unwatched() -> Iterator[None]:
    """A stretch the watchdog does not time (a checkpoint save of any size)."""
    if _watchdog is not None:
        _watchdog.paused += 1
    try:
        yield
    finally:
        if _watchdog is not None:
            _watchdog.paused -= 1
            beat()
