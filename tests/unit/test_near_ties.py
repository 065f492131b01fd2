"""The planner's order on near ties (plan/recommend.near_tie_order): the simpler layout wins a tie of step times
within 5 % of the fastest, wherever the times fall, and no layout is placed above one more than 5 % faster."""

import random
from types import SimpleNamespace

from dsbench.plan.candidate import Candidate
from dsbench.plan.recommend import NEAR_TIE, near_tie_order, simplicity
from dsbench.strategies import SIMPLICITY


def _est(strategy: str, step_s: float, tp: int = 1, pp: int = 1, ckpt: bool = False) -> SimpleNamespace:
    return SimpleNamespace(candidate=Candidate(strategy=strategy, tp=tp, pp=pp, checkpointing=ckpt), step_s=step_s)


def test_a_tie_across_what_were_fixed_bucket_edges_goes_to_the_simpler():
    """1.0499 and 1.0501 s lay either side of a 5 % bucket edge (1.05 = 1.05^1): ranked by buckets, FSDP was
    placed above ZeRO-1, 0.02 % slower; measured from the fastest they tie and ZeRO-1, the simpler, wins."""
    order = near_tie_order([_est("fsdp", 1.0499), _est("zero1", 1.0501)])
    assert [e.candidate.strategy for e in order] == ["zero1", "fsdp"]


def test_beyond_the_tie_the_faster_wins_however_simple_the_other():
    order = near_tie_order([_est("ddp", 1.0), _est("zero3", 0.90, tp=2)])
    assert [e.candidate.strategy for e in order] == ["zero3", "ddp"]  # 11 % faster


def test_random_sets_keep_the_two_promises():
    rng = random.Random(20261130)
    for _ in range(300):
        items = [_est(rng.choice(SIMPLICITY), rng.uniform(1.0, 1.3), tp=rng.choice((1, 2)), ckpt=rng.random() < .5)
                 for _ in range(rng.randint(1, 12))]
        order = near_tie_order(items)
        assert sorted(map(id, order)) == sorted(map(id, items))  # each placed once
        for i, above in enumerate(order):  # never above one more than 5 % faster
            assert all(above.step_s <= below.step_s * (1 + NEAR_TIE) + 1e-12 for below in order[i + 1:])
        fastest = min(e.step_s for e in items)
        tied = [e for e in items if e.step_s <= fastest * (1 + NEAR_TIE)]
        assert simplicity(order[0]) == min(map(simplicity, tied))  # the first is the simplest of the tie
