"""One rank's guard (the training worker's and calibrate's): whatever ends the rank's work becomes one line naming
the rank and an exit code (a bad input keeps its own), and the process leaves without interpreter teardown."""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable

from dsbench.errors import DsbenchError

PEER_LOST = ("Connection reset by peer", "Connection closed by peer", "Broken pipe", "Connection refused")
"""What gloo says on a rank whose peer died: a symptom of another rank's failure, not a cause."""


def peer_lost(exc: BaseException) -> bool:
    """gloo's word that another rank went away: the symptom here of a failure there."""
    return any(marker in f"{type(exc).__name__}: {exc}".splitlines()[0] for marker in PEER_LOST)


def describe(exc: BaseException) -> str:
    """The error line's text: a collective or rendezvous that timed out says which flag sets the limit, and a lost
    peer says that another rank is the cause."""
    text = f"{type(exc).__name__}: {exc}".splitlines()[0]
    if "timed out" in text.lower() or "timeout" in text.lower():
        return (f"a collective or the rendezvous did not complete within --dist-timeout: a rank hung or never "
                f"joined ({text[:300]})")
    if peer_lost(exc):
        return f"lost the connection to another rank, which stopped first ({text[:300]})"
    return text


def run_rank(body: Callable[[], int], say: Callable[[str], None]) -> int:
    """``body()``'s exit code; an error is one line through ``say``: a DsbenchError its message and its exit code
    (bad input 2, a full disk 1), anything else its traceback first (not for a lost peer) and code 1. A failing
    rank must end the job, not hang the others."""
    try:
        return body()
    except SystemExit as exc:  # argparse's --help/--version: printed, exit 0
        return exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 2
    except DsbenchError as exc:
        say(f"error: {exc}")
        return exc.exit_code
    except BaseException as exc:
        from dsbench.configs.deepspeed_check import config_error

        named = config_error(exc)  # a value DeepSpeed's config parser refuses: bad input, by its key
        if named:
            say(f"error: {named}")
            return 2
        # a lost peer's traceback shows only where this rank waited (a barrier, a collective): the cause is the other
        # rank's own error line; DSBENCH_DEBUG=1 prints it anyway
        if not peer_lost(exc) or os.environ.get("DSBENCH_DEBUG", "") not in ("", "0"):
            traceback.print_exc()
        say(f"error: {describe(exc)}")
        return 1


def leave(code: int) -> None:
    """Exit without interpreter teardown: on failure it would block on ranks still in a collective, and on success
    native threads (gloo, DeepSpeed ops) can abort in static destructors ("terminate called without an active
    exception"), turning a finished run into a failed launch. Results are on disk."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
