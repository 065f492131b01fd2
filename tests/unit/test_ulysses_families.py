"""What the worker bridges between DeepSpeed 0.19.8's Ulysses and transformers 5 for GPT-2 and GPT-NeoX (in-process;
their parity with one process: tests/integration/engine_ranks.py)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


@pytest.mark.parametrize("config", [transformers.GPT2Config(n_head=4), transformers.GPTNeoXConfig(
    num_attention_heads=4)])
def test_a_multi_head_config_states_its_key_value_heads_only_while_deepspeed_reads_them(config):
    from dsbench.worker.engines.deepspeed import stated_kv_heads

    assert not hasattr(config, "num_key_value_heads")
    with stated_kv_heads(config):
        assert config.get_text_config().num_key_value_heads == 4  # multi-head: a key and a value per head
    assert not hasattr(config, "num_key_value_heads") and "num_key_value_heads" not in config.to_dict()


def test_a_config_that_names_its_key_value_heads_is_left_as_it_is():
    from dsbench.worker.engines.deepspeed import stated_kv_heads

    config = transformers.LlamaConfig(num_attention_heads=4, num_key_value_heads=2)
    with stated_kv_heads(config):
        assert config.num_key_value_heads == 2
    assert config.num_key_value_heads == 2


def test_the_wrapped_attention_returns_the_heads_apart_as_transformers_does():
    """DeepSpeed's wrapper returns (batch, sequence, heads x width); transformers' SDPA (batch, sequence, heads,
    width), which GPT2Attention's reshape(*shape[:-2], -1) needs."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    from dsbench.worker.engines.deepspeed import heads_apart

    query = key = value = torch.randn(2, 4, 8, 16)  # (batch, heads, sequence, width), as the attention hands them
    module = torch.nn.Module()
    module.is_causal = True
    expected, _ = sdpa_attention_forward(module, query, key, value, None)
    sdpa = ALL_ATTENTION_FUNCTIONS["sdpa"]

    def merged(module, query, key, value, mask, **kwargs):  # DeepSpeed's output layout
        out, weights = sdpa(module, query, key, value, mask, **kwargs)
        return out.reshape(*out.shape[:2], -1), weights

    ALL_ATTENTION_FUNCTIONS["sdpa"] = merged
    try:
        heads_apart("sdpa")
        out, _ = ALL_ATTENTION_FUNCTIONS["sdpa"](module, query, key, value, None)
    finally:
        ALL_ATTENTION_FUNCTIONS["sdpa"] = sdpa
    assert out.shape == expected.shape == (2, 8, 4, 16) and torch.equal(out, expected)
