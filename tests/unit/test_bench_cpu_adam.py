"""scripts/bench_cpu_adam.py: the node's CPU Adam rate from its ranks' step times, and its refusals (one line, exit
2, before any rank starts). The run itself is tests/integration/test_bench_cpu_adam.py."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT, load_script

bench = load_script("bench_cpu_adam")


def test_the_node_waits_for_its_slowest_rank_at_each_step():
    """2 ranks of 1e6 parameters: step by step the slowest takes 0.2, 0.2 and 0.1 s, so the node steps 2e6
    parameters at 1e7, 1e7 and 2e7 per second; the median is 1e7."""
    rate = bench.node_rate([[0.1, 0.2, 0.1], [0.2, 0.1, 0.1]], 10**6)
    assert rate["median"] == pytest.approx(1e7) and rate["steps"] == 3
    assert rate["p10"] == pytest.approx(1e7) and rate["p90"] == pytest.approx(1.8e7)
    assert bench.node_rate([[0.5]], 10**6) == {"median": 2e6, "p10": 2e6, "p90": 2e6, "steps": 1}
    for bad in ([], [[]], [[0.1], [0.1, 0.2]]):
        with pytest.raises(ValueError, match="same, non-zero number"):
            bench.node_rate(bad, 10)


@pytest.mark.parametrize("args, message", [
    (["--ranks", "0"], "argument --ranks: '0' must be above 0"),
    (["--params", "nan"], "argument --params: 'nan' is not a number"),
    (["--params", "inf"], "argument --params: 'inf' is not a number"),
    (["--threads", "-2"], "argument --threads: '-2' must be above 0"),
    (["--ranks", "1.5"], "argument --ranks: '1.5' is not a whole number"),  # never rounded to 1
    (["--warmup", "-1"], "--warmup must be 0 or more"),
    (["--ranks", "2", "--params", "1e30"], "need 29802322387695313092608.0 GiB of fp32 states; the host has"),
])
def test_bad_flags_are_one_line_before_any_rank_starts(args, message):
    done = subprocess.run([sys.executable, "scripts/bench_cpu_adam.py", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.splitlines()[-1].startswith("bench_cpu_adam.py: error: ") and message in done.stderr
