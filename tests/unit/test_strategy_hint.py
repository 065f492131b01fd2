"""compare's and tune's refusal of a strategy name the registry does not know carries a hint, and every name a
hint suggests is one the registry knows (dsbench/strategy_match.did_you_mean)."""

from __future__ import annotations

import re

import pytest

from dsbench.strategies import known
from dsbench.strategy_match import did_you_mean


@pytest.mark.parametrize(("typed", "hint"), [
    ("PIPE2", " (did you mean 'pipe2'?)"),
    ("Zero3", " (did you mean 'zero3'?)"),
    ("zeor3", " (did you mean 'zero3'?)"),
    ("zero2offload", " (did you mean 'zero2_offload'?)"),
    ("torch_tp02", " (did you mean 'torch_tp2'?)"),
    ("pipe2_sp", " (did you mean 'pipe2'?)"),
    ("torch_tp0", " (torch_tp0: a degree is at least 2, as in torch_tp2)"),
    ("torch_pipe1_zb2", " (torch_pipe1: a degree is at least 2, as in torch_pipe2_zb2)"),
    ("torch_3d_tp2_pp1", " (torch_3d_tp2_pp1: a degree is at least 2, as in torch_3d_tp2_pp2)"),
    ("fsdp_shard1", " (fsdp_shard1: a degree is at least 2, as in fsdp_shard2)"),
    ("banana", ""),
    ("zero9", ""),  # a stage that does not exist: not a typo of zero0
    ("torch_tp" + "9" * 5000, ""),  # no degree (until the day it was written, an internal error: int() of 5000 digits)
])
def test_an_unknown_name_gets_a_hint_that_names_a_known_strategy(typed, hint):
    assert not known(typed)
    assert did_you_mean(typed) == hint
    named = re.search(r"did you mean '([^']+)'|as in (\S+)\)", hint)
    if named:
        assert known(named[1] or named[2]), hint


def test_compare_and_tune_say_the_hint(cli_run):
    said = cli_run("compare", "--strategies", "ddp,PIPE2", "--out", "c", "--dry-run")
    assert said.exit_code == 2 and "unknown strategy 'PIPE2' (did you mean 'pipe2'?); choose from:" in said.output
    said = cli_run("tune", "--model", "gpt2-tiny", "--num-gpus", "2", "--strategies", "torch_tp1", "--out", "t",
                   "--dry-run")
    assert said.exit_code == 2 and "(torch_tp1: a degree is at least 2, as in torch_tp2)" in said.output
