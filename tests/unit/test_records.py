"""Arithmetic against hand-computed values and the seed articles' tables."""

import pytest

from dsbench.models import PRESETS
from dsbench.records import flops_per_token, mfu, scaling_efficiency, spread, summarize


def test_flops_per_token_gpt2_124m():
    gpt2 = PRESETS["gpt2"]
    # 6 x 124,439,808 + 12 x 12 layers x 768 x 1024 tokens
    assert flops_per_token(gpt2.num_params(), gpt2.layers, gpt2.hidden, 1024) == 746_638_848 + 113_246_208


def test_mfu_against_hand_computed_value():
    # 129k tokens/s x 0.86 GFLOP/token = 110.9 TFLOP/s on a 989 TFLOPS H100 -> 11.2 % (GPU.md's reference row)
    value = mfu(129_000, flops_per_token(124_439_808, 12, 768, 1024), 989.0)
    assert value == pytest.approx(129_000 * 859_885_056 / 989e12) and round(value, 3) == 0.112
    assert mfu(1000.0, 10, None) is None


@pytest.mark.parametrize("gpus, throughput, expected", [(2, 1190, 0.96), (4, 2280, 0.92), (8, 4340, 0.875)])
def test_scaling_efficiency_reproduces_seed_000_ddp_table(gpus, throughput, expected):
    """ResNet-50 DDP: 620 img/s on 1 GPU; 0.96 / 0.92 / 0.87 (the article rounds 0.875 down)."""
    assert scaling_efficiency(throughput, gpus, 620) == pytest.approx(expected, abs=0.005)


def test_spread_quantiles():
    s = spread([4.0, 1.0, 3.0, 2.0, 5.0])
    assert (s["median"], s["min"], s["max"], s["n"]) == (3.0, 1.0, 5.0, 5)
    assert s["p10"] == pytest.approx(1.4) and s["p90"] == pytest.approx(4.6)


def _step(i, warmup, t):
    return {"type": "step", "step": i, "warmup": warmup, "loss": 10.0 - i, "step_time_s": t, "tokens_per_s": 100 / t,
            "tokens_per_s_per_rank": 50 / t, "samples_per_s": 1 / t, "tflops_per_rank": 1.0, "mfu": 0.1,
            "peak_memory_bytes": [10 + i, 20], "memory_kind": "rss"}


def test_summarize_excludes_warmup():
    records = [{"type": "header", "strategy": "ddp", "world_size": 2}, _step(0, True, 9.0), _step(1, True, 9.0),
               _step(2, False, 1.0), _step(3, False, 2.0), _step(4, False, 3.0)]
    summary = summarize(records)
    assert summary["measured_steps"] == 3 and summary["warmup_steps"] == 2
    assert summary["step_time_s"]["median"] == 2.0 and summary["step_time_s"]["max"] == 3.0
    assert summary["first_loss"] == 10.0 and summary["final_loss"] == 6.0
    assert summary["peak_memory_bytes_per_rank"] == [14, 20]
    assert summarize(records[:3])["status"] == "no-measured-steps"
