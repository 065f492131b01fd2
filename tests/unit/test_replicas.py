"""The replica check's two pure halves (dsbench/worker/replicas.py): the digest of a rank's tensors, and the verdict
over every rank's (group, digest). The check itself runs on every integration run (tests/integration/conftest.py
``load_run``) and its groups are asserted per layout in test_model_parallel.py."""

import pytest

from dsbench.worker.replicas import digest, verdict


def test_the_digest_sees_one_bit_in_any_dtype():
    import torch

    weights = [torch.randn(4, 3), torch.randn(5)]
    assert digest(weights) == digest([w.clone() for w in weights])
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        moved = [w.to(dtype) for w in weights]
        nudged = [moved[0].clone(), torch.nextafter(moved[1], torch.tensor(float("inf"), dtype=dtype))]
        assert digest(moved) != digest(nudged), dtype
    assert digest(weights) != digest(list(reversed(weights)))  # the order is the parameters'


@pytest.mark.parametrize("pairs, expected", [
    ([((0, 1), "a"), ((0, 1), "a")], {"groups": 1, "ranks_per_group": 2, "agree": True, "differing_ranks": []}),
    ([((0, 1), "a"), ((0, 1), "b")], {"groups": 1, "ranks_per_group": 2, "agree": False, "differing_ranks": [1]}),
    # pp 2 x dp 2 (columns 0,2 and 1,3): a difference in one stage's pair names its rank
    ([((0, 2), "s0"), ((1, 3), "s1"), ((0, 2), "s0"), ((1, 3), "x")],
     {"groups": 2, "ranks_per_group": 2, "agree": False, "differing_ranks": [3]}),
    ([((0, 2), "s0"), ((1, 3), "s1"), ((0, 2), "s0"), ((1, 3), "s1")],
     {"groups": 2, "ranks_per_group": 2, "agree": True, "differing_ranks": []}),
    ([(None, None), (None, None)], None),  # ZeRO-3, FSDP: no copies
    ([((0,), "a"), ((1,), "b")], None),  # a group of one rank holds no copy to compare
])
def test_the_verdict_compares_each_group_with_its_first_rank(pairs, expected):
    found = verdict(pairs)
    assert (found and {k: v for k, v in found.items() if k != "type"}) == expected
