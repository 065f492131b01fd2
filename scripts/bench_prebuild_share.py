"""What DeepSpeed's async_io build in the background costs the launches beside it, at two nice values of the
builder's scheduling group: 0 (the builder's session weighed like each launch's, as before 2026-12-01) and
scripts/prebuild_ops.py's LATE_OPS value.

For each value (in turn, then again for ``--rounds``): a fresh, empty TORCH_EXTENSIONS_DIR; async_io's build
started there as the integration conftest starts it (prebuild_ops.start, a session of its own); ``--launches`` real
2-rank launches one after another beside it (DDP under torchrun on gpt2-tiny, which loads no DeepSpeed op); then the
build's own wall clock to its end. Last, the same launches with no build beside them. Prints per case the median
launch and its spread (min-max), how many of the op's object files were done when the launches ended, and the
build's wall time.

    python scripts/bench_prebuild_share.py [--launches 6] [--rounds 1] [--nices 0,10]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import prebuild_ops  # noqa: E402 (this folder's own module)

ROOT = Path(__file__).resolve().parents[1]
LAUNCH = ["launch", "--strategy", "ddp", "--launcher", "torchrun", "--model", "gpt2-tiny", "--micro-batch", "2"]
WORKER = ["--steps", "6", "--warmup", "2", "--quiet"]
OBJECTS = 13  # async_io's 12 files and pin_memory's 1 (their build.ninja files)


def launch_seconds(folder: Path, env: dict[str, str]) -> float:
    """One launch's wall clock, from the command to its exit."""
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "dsbench", *LAUNCH, "--run-dir", str(folder), "--", *WORKER],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        sys.exit(f"bench_prebuild_share: a launch failed: {done.stderr[-2000:]}")
    return time.monotonic() - began


def case(base: Path, label: str, launches: int, nice: int | None) -> dict:
    """``launches`` launches beside a fresh async_io build at ``nice`` (none when None)."""
    ext = base / f"ext-{label}"
    os.environ["TORCH_EXTENSIONS_DIR"] = str(ext)  # the build's folder and log (prebuild_ops reads this process's)
    env = prebuild_ops.launch_env()
    build, began = None, time.monotonic()
    if nice is not None:
        build = prebuild_ops.start(("AsyncIOBuilder",), late_nice=nice)
    times = [launch_seconds(base / f"run-{label}-{i}", env) for i in range(launches)]
    done = len(list(ext.glob("*/*.o")))
    if build is not None:
        build.wait()
    return {"label": label, "times": times, "objects": done,
            "build_s": time.monotonic() - began if build is not None else None}


def line(row: dict) -> str:
    times = row["times"]
    build = ("no build beside them" if row["build_s"] is None else
             f"{row['objects']}/{OBJECTS} object files done when they ended, the build's wall clock "
             f"{row['build_s']:.0f} s")
    return (f"{row['label']:>16}: launch {statistics.median(times):.1f} s median ({min(times):.1f}-{max(times):.1f}, "
            f"{len(times)} launches); {build}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launches", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--nices", default=f"0,{prebuild_ops.LATE_OPS['AsyncIOBuilder']}")
    args = parser.parse_args()
    nices = [int(n) for n in args.nices.split(",")]
    with tempfile.TemporaryDirectory(prefix="bench-prebuild-") as tmp:
        base = Path(tmp)
        # one launch first, unmeasured: the interpreters' files in the page cache for every case alike
        launch_seconds(base / "run-first", prebuild_ops.launch_env())
        for round_ in range(args.rounds):
            for nice in nices:
                print(line(case(base, f"group nice {nice}" + f" #{round_ + 1}" * (args.rounds > 1),
                                args.launches, nice)), flush=True)
        print(line(case(base, "alone", args.launches, None)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
