"""fp16's loss scale on the torch engines across ranks (worker/engines/loss_scale.py): one torchrun of 4 CPU ranks
(tests/integration/loss_scale_ranks.py) trains ddp, fsdp, torch_tp, torch_pp and torch_3d with the scale off, on,
and on with an inf in one gradient of the last rank only.

The oracle for "on" is "off" (the single-process parity of the brief, here the same engine unscaled): the scale is
a power of two, so in fp32 it changes no bit. A CPU rank cannot run fp16 (refused), so the scale is switched on
in fp32; the rule itself is checked against torch's GradScaler in tests/unit/test_loss_scale.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.integration.conftest import bin_path, run_command

STRATEGIES = ("ddp", "fsdp", "torch_tp", "torch_pp", "torch_3d")


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("loss-scale")
    result = run_command([bin_path("torchrun"), "--standalone", "--nproc-per-node", "4",
                          str(Path(__file__).with_name("loss_scale_ranks.py")), str(out)], cwd=ROOT, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(4)]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_the_scale_changes_no_loss_and_no_weight(ranks, strategy):
    for rank in ranks:
        off, on = rank[strategy]["off"], rank[strategy]["on"]
        assert on["losses"] == off["losses"] and on["weight_sums"] == off["weight_sums"]
        assert (on["scale"], on["skipped"]) == (2.0**16, 0)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_an_overflow_on_one_rank_skips_the_step_on_every_rank(ranks, strategy):
    """Step 1's inf is on rank 3 only; every rank skips step 1 (its weights stay as after step 0), halves the
    scale, and steps again at step 2, where the weights move."""
    for rank in ranks:
        spoiled, off = rank[strategy]["spoiled"], rank[strategy]["off"]
        assert (spoiled["scale"], spoiled["skipped"]) == (2.0**15, 1)
        sums = spoiled["weight_sums"]
        assert sums[0] == off["weight_sums"][0] and sums[1] == sums[0] and sums[2] != sums[1]
