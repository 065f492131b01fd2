"""Every pipeline rank's peak of saved activations on runs the planner's pass order (plan/pipeline_peak.py) was not
written on (issue 28): 3 stages, and a 16k-token vocabulary that makes the last stage the busiest under 1F1B too.

Measured as scripts/bench_pipeline_memory.py measures (each rank's ``saved_activations_peak``, torch_pp, fp32, CPU
ranks); predicted by its ``rank_peaks``: saved.py's inventory of each chunk, the head and loss on the last, held in
the order torch's schedule runs the passes. Nothing fitted.

    python scripts/bench_pipeline_peak.py --json tests/data/activations/pipeline_peak_held_out.json   # 6 runs, ~1 min
    python scripts/bench_pipeline_peak.py --from tests/data/activations/pipeline_peak_held_out.json  # the table only
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench_activation_memory import measured_or_stored  # scripts/ is the script's own folder on sys.path
from bench_pipeline_memory import launch, rank_table

HELD_OUT = (  # (stages, layers, vocabulary, micro-batches, schedule, chunks per rank)
    (3, 6, 4096, 6, "interleaved", 2), (3, 6, 4096, 6, "interleaved-zb", 2), (3, 6, 4096, 6, "1f1b", 1),
    (2, 4, 16384, 4, "1f1b", 1), (2, 4, 16384, 4, "interleaved-zb", 2), (2, 4, 16384, 6, "interleaved", 2),
)


def measure(out: Path) -> list[dict[str, Any]]:
    return [launch(out, *case) for case in HELD_OUT]


def main() -> None:
    print(rank_table(measured_or_stored(__doc__, "pipeline-peak", measure)))


if __name__ == "__main__":
    main()
