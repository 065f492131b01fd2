"""Compute-busy time of a pipeline stage within its schedule, for measuring the pipeline bubble (CPU ranks).

Two clocks per step: ``span``, the stage's time inside the pipeline schedule (forward and backward passes
of every micro-batch with their sends and receives, up to the flush; not the optimizer step), and
``compute``, the time inside its forward and backward computations (torch's ``forward_one_chunk`` /
``backward_one_chunk``, DeepSpeed's ForwardPass / BackwardPass instructions). 1 - compute/span is the
share of the schedule the stage idles: the bubble, plus the time communication takes. CPU ops are
synchronous, so these are compute times; on a GPU the calls only queue kernels and nothing is reported.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any


class BusyClock:
    """Accumulates seconds inside wrapped calls, per named clock, since the last :meth:`take`."""

    def __init__(self, device: str) -> None:
        self.enabled = device == "cpu"
        self._seconds = {"compute": 0.0, "span": 0.0, "excluded": 0.0}

    def wrap(self, fn: Callable[..., Any], clock: str = "compute") -> Callable[..., Any]:
        """``fn`` timed into ``clock`` (``compute``, ``span``, or ``excluded``: time inside ``span`` that is not
        the pipeline's, such as DeepSpeed's optimizer step)."""

        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self._seconds[clock] += time.perf_counter() - start

        return timed

    def take(self) -> tuple[float, float] | None:
        """(compute, span) seconds since the last call; ``None`` on GPU, where host time is not compute time."""
        seconds = self._seconds
        self._seconds = {name: 0.0 for name in seconds}
        if not self.enabled:
            return None
        return seconds["compute"], seconds["span"] - seconds["excluded"]
