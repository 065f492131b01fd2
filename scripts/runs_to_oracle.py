"""dsbench run folders (GPU runs) as rows of the oracle schema, so that `dsbench plan --replay` predicts them.

    python scripts/runs_to_oracle.py tests/data/runs/gpu-h100/compare-*/cells/* \
        tests/data/runs/gpu-h100-20261125/compare-*/cells/* > tests/data/oracles/dsbench-h100.csv

Step time is the wall clock over the measured window divided by its steps; peak memory is the run's
``torch.cuda.max_memory_allocated`` (the replay compares dsbench's rows with the model's allocated peak). Runs the
schema cannot describe (CPU offload, CPU runs, a GPU the profiles do not know) are left out, each named on stderr.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import script_args

from dsbench.plan.oracle_csv import COLUMNS, OPTIONAL
from dsbench.plan.run_rows import run_row


def main(folders: list[str]) -> int:
    gpu_name = ""
    writer = csv.DictWriter(sys.stdout, fieldnames=[*COLUMNS, *OPTIONAL], lineterminator="\n")
    writer.writeheader()
    index = 0
    for name in folders:
        folder = Path(name)
        machine = next((p / "gpu.csv" for p in folder.parents if (p / "gpu.csv").exists()), None)
        if machine is not None:  # nvidia-smi's name, kept above the runs
            gpu_name = machine.read_text().splitlines()[1].split(",")[0]
        row = run_row(folder, gpu_name, index + 1)
        if isinstance(row, str):
            print(f"{folder}: left out: {row}", file=sys.stderr)
            continue
        index += 1
        writer.writerow(row)
    return 0


if __name__ == "__main__":
    folders = script_args.parse(__doc__, "RUN_FOLDER", required=True)
    sys.exit(script_args.run(lambda: main(folders)))
