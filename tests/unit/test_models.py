import json
import re

import pytest

from dsbench.errors import UserError
from dsbench.model_config import resolve_model, shape_from_config
from dsbench.models import PRESETS
from tests.conftest import DATA

# Published parameter counts (HF model cards / papers).
PUBLISHED = {"gpt2": 124_439_808, "gpt2-medium": 354_823_168, "gpt2-xl": 1_557_611_200,
             "llama-1b": 1_100_048_384, "llama-7b": 6_738_415_616, "llama-13b": 13_015_864_320,
             "llama-70b": 68_976_648_192}


@pytest.mark.parametrize("name, count", PUBLISHED.items())
def test_parameter_counts_match_published(name, count):
    assert PRESETS[name].num_params() == count


def test_local_directory_and_file(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "vocab_size": 100, "hidden_size": 32,
                                                      "num_hidden_layers": 2, "num_attention_heads": 4,
                                                      "intermediate_size": 64, "rope_theta": 5e5}))
    shape = resolve_model(str(tmp_path))
    assert (shape.arch, shape.hidden, shape.kv_heads, shape.source) == ("llama", 32, 4, "local")
    assert shape.hf_config()["rope_theta"] == 5e5
    assert resolve_model(str(tmp_path / "config.json")).hidden == 32


def test_hub_cache_without_download(tmp_path, monkeypatch):
    snap = tmp_path / "models--org--tiny" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps({"model_type": "gpt2", "vocab_size": 50, "n_embd": 16,
                                                  "n_layer": 1, "n_head": 2}))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    shape = resolve_model("org/tiny")
    assert (shape.source, shape.hidden, shape.intermediate) == ("hub-cache", 16, 64)


@pytest.mark.parametrize("content, needle", [("{", "malformed JSON"), ('{"model_type": "llama"}', "lacks a usable")])
def test_bad_local_configs(tmp_path, content, needle):
    (tmp_path / "config.json").write_text(content)
    with pytest.raises(UserError, match=needle):
        resolve_model(str(tmp_path))


def test_unknown_model_lists_presets(tmp_path):
    with pytest.raises(UserError, match="gpt2-tiny"):
        resolve_model("no-such-model")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="no config.json"):
        resolve_model(str(tmp_path / "empty"))


@pytest.mark.parametrize("name", ["", " "])
def test_an_empty_model_is_named_empty_not_read_as_the_working_folder(tmp_path, monkeypatch, name):
    """``-- --model ''``: Path('') is the working folder; until 2026-12-04 a folder with a config.json there was
    read as the model, and one without said '--model : directory has no config.json'."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config.json").write_text('{"model_type": "gpt2"}')
    with pytest.raises(UserError, match=r"--model '\s*': empty; give a preset \(gpt2-tiny"):
        resolve_model(name)


# config.json files as users' models write them (small dimensions, each family's own keys), and what transformers
# builds from them is the oracle: dsbench's shape must count exactly its parameters, or refuse the config by name.
def _config(model_type: str, hidden: int, heads: int, kv: int, ffn: int, **more: object) -> dict:
    """A 2-layer config.json of a Llama-layout family, with a 1000-word vocabulary."""
    return {"model_type": model_type, "vocab_size": 1000, "hidden_size": hidden, "num_hidden_layers": 2,
            "num_attention_heads": heads, "num_key_value_heads": kv, "intermediate_size": ffn, **more}


ACCEPTED = {
    "llama-gqa": _config("llama", 64, 8, 2, 176, tie_word_embeddings=False),
    "mistral-head-dim-stated": _config("mistral", 64, 4, 2, 128, head_dim=16, sliding_window=None),
    # Mistral-Nemo's layout: 32 heads of 128 on a hidden size of 5120 (here 4 of 32 on 96), and a narrower one
    "mistral-wide-heads": _config("mistral", 96, 4, 2, 128, head_dim=32),
    "mistral-narrow-heads": _config("mistral", 100, 6, 3, 128, head_dim=8),
    "llama-wide-heads": _config("llama", 96, 4, 2, 128, head_dim=32),
    "qwen2-wide-heads-tied": _config("qwen2", 64, 4, 2, 96, head_dim=24, tie_word_embeddings=True),
    # Qwen3: q_norm and k_norm over each head; Qwen3-8B's heads are 128 wide on 4096 / 32, Qwen3-0.6B's on
    # 1024 / 16, and a config without head_dim gets Qwen3Config's default of 128, not hidden / heads
    "qwen3-wide-heads": _config("qwen3", 64, 4, 2, 128, head_dim=32),
    "qwen3-default-head-dim-tied": _config("qwen3", 64, 2, 1, 96, tie_word_embeddings=True),
    "qwen2-tied": _config("qwen2", 64, 4, 4, 96, tie_word_embeddings=True),
    # Gemma: GemmaConfig's head_dim defaults to 256 and ties the head (Gemma-2B: 8 heads of 256 on 2048, one
    # key/value head); stated narrower and untied
    "gemma-default-head-dim-tied": _config("gemma", 64, 2, 1, 96),
    "gemma-head-dim-stated-untied": _config("gemma", 64, 4, 2, 96, head_dim=16, tie_word_embeddings=False),
    # Phi-3: q|k|v fused in one qkv_proj and gate|up in one gate_up_proj (o_proj registered first); its config
    # states a padding id inside the vocabulary (Phi3Config's default, 32000, is outside this one), grouped-query
    # as Phi-4's, partial RoPE as Phi-4-mini's, a window as Phi-3-mini-4k's
    "phi3-gqa-window": _config("phi3", 64, 4, 2, 176, pad_token_id=999, sliding_window=31),
    "phi3-partial-rope": _config("phi3", 64, 4, 4, 96, pad_token_id=0, partial_rotary_factor=0.75,
                                 tie_word_embeddings=True),
    # Phi-3-mini-128k's LongRoPE: a factor per rotary frequency (head width 16: 8 each) over a 4096-token original
    "phi3-longrope": _config("phi3", 64, 4, 4, 96, pad_token_id=0, max_position_embeddings=131072,
                             original_max_position_embeddings=4096,
                             rope_scaling={"type": "longrope", "short_factor": [1.0] * 8,
                                           "long_factor": [1.0 + i / 4 for i in range(8)]}),
    # OLMo-2: q_norm and k_norm over the whole projections (q, k wide), norms after attention and the MLP
    "olmo2-gqa": _config("olmo2", 64, 4, 2, 176),
    "olmo2-wide-heads-tied": _config("olmo2", 64, 4, 4, 96, head_dim=32, tie_word_embeddings=True),
    # GPT-NeoX (Pythia's layout): biased LayerNorms and matrices, each head's q, k and v together, a quarter of each
    # head rotated, the parallel residual; with the attention's biases off, tied, and sequential residuals
    "gpt_neox": {"model_type": "gpt_neox", "vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 2,
                 "num_attention_heads": 4, "intermediate_size": 256, "rotary_pct": 0.25, "use_parallel_residual": True},
    "gpt_neox-unbiased-tied-sequential": {"model_type": "gpt_neox", "vocab_size": 1000, "hidden_size": 64,
                                          "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128,
                                          "attention_bias": False, "tie_word_embeddings": True,
                                          "use_parallel_residual": False, "rotary_pct": 0.5},
    "gpt2": {"model_type": "gpt2", "vocab_size": 1000, "n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 128},
}
REFUSED = {
    # transformers' LlamaConfig refuses heads that do not divide the hidden size even with a head_dim
    "llama-narrow-heads": ({"model_type": "llama", "vocab_size": 1000, "hidden_size": 100, "num_hidden_layers": 2,
                            "num_attention_heads": 6, "num_key_value_heads": 3, "head_dim": 8,
                            "intermediate_size": 128}, "the 6 heads do not divide the hidden size 100"),
    "llama-attention-bias": ({"model_type": "llama", "vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 2,
                              "num_attention_heads": 4, "intermediate_size": 128, "attention_bias": True},
                             "attention_bias true"),
    "qwen2-kv-not-dividing": ({"model_type": "qwen2", "vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 2,
                               "num_attention_heads": 4, "num_key_value_heads": 3, "intermediate_size": 96},
                              "the 3 key/value heads do not divide the 4 heads"),
    # Qwen3Config and GemmaConfig have a head_dim of their own and refuse a null one (transformers 5's strict
    # config fields), where Llama's and Qwen2's fall back to hidden / heads
    "gemma-head-dim-null": ({**_config("gemma", 64, 4, 2, 96), "head_dim": None}, "head_dim null must be a positive"),
    "qwen3-head-dim-null": ({**_config("qwen3", 64, 4, 2, 96), "head_dim": None}, "head_dim null must be a positive"),
    # transformers' embedding refuses a padding row outside the vocabulary (Phi3Config's default pad id, 32000,
    # stated beside a smaller vocabulary; a Llama's likewise)
    "phi3-pad-outside": (_config("phi3", 64, 4, 2, 96, pad_token_id=32000), "pad_token_id 32000 is outside the 1000"),
    "llama-pad-outside": (_config("llama", 64, 4, 2, 96, pad_token_id=1000), "pad_token_id 1000 is outside the 1000"),
    "mixtral": ({"model_type": "mixtral", "vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 2,
                 "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
                 "num_local_experts": 4, "num_experts_per_tok": 2}, "model_type 'mixtral'"),
    "qwen3-moe": ({"model_type": "qwen3_moe", "vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 2,
                   "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "intermediate_size": 128,
                   "moe_intermediate_size": 32, "num_experts": 4, "num_experts_per_tok": 2},
                  "model_type 'qwen3_moe'"),
}


BAD_FIELDS = {  # kept config.json fields the ranks' transformers would stop on, refused before any launch
    "pad-string": ({"pad_token_id": "x"}, 'pad_token_id "x" must be an integer or null'),
    "pad-float": ({"pad_token_id": 5.0}, "pad_token_id 5.0 must be an integer or null"),
    "rotary-share-above-one": ({"partial_rotary_factor": 5}, "partial_rotary_factor 5 must be a number above 0"),
    "rotary-share-negative": ({"partial_rotary_factor": -1}, "partial_rotary_factor -1 must be a number above 0"),
    "neox-rotary-string": ({"model_type": "gpt_neox", "rotary_pct": "x"}, 'rotary_pct "x" must be a number above 0'),
    "neox-residual-string": ({"model_type": "gpt_neox", "use_parallel_residual": "yes"},
                             'use_parallel_residual "yes" must be true or false'),
    # since 2026-12-03 every kept field (model_fields.RULES): until then each of these passed, and every rank stopped
    "rope-theta-string": ({"rope_theta": "x"}, 'rope_theta "x" must be a number above 0'),
    "neox-rotary-base-string": ({"model_type": "gpt_neox", "rotary_emb_base": "x"}, 'rotary_emb_base "x" must be a'),
    "epsilon-string": ({"rms_norm_eps": "x"}, 'rms_norm_eps "x" must be a decimal number of at least 0'),
    "epsilon-integer": ({"rms_norm_eps": 0}, "rms_norm_eps 0 must be a decimal number"),
    "activation-unknown": ({"hidden_act": "nosuch"}, 'hidden_act "nosuch" must be one of transformers\' activations'),
    "gpt2-activation-unknown": ({"model_type": "gpt2", "vocab_size": 100, "n_embd": 16, "n_layer": 1, "n_head": 2,
                                 "activation_function": "nosuch"}, 'activation_function "nosuch" must be one of'),
    "bos-string": ({"bos_token_id": "x"}, 'bos_token_id "x" must be a token id, a list of them, or null'),
    "eos-strings": ({"eos_token_id": ["a"]}, 'eos_token_id ["a"] must be a token id'),
    "rope-type-unknown": ({"rope_scaling": {"rope_type": "nosuch", "factor": 2.0}},
                          'rope_scaling {"rope_type": "nosuch", "factor": 2.0} must be null or an object whose '
                          "rope_type is one of default, dynamic, linear, llama3, longrope, proportional, yarn"),
    "rope-scaling-list": ({"rope_scaling": [1]}, "rope_scaling [1] must be null or an object"),
    "window-negative": ({"model_type": "qwen2", "sliding_window": -5, "use_sliding_window": True,
                         "max_window_layers": 0}, "sliding_window -5 must be a whole number of at least 1, or null"),
    "window-layers-string": ({"model_type": "qwen2", "sliding_window": 4, "use_sliding_window": True,
                              "max_window_layers": "x"}, 'max_window_layers "x" must be a whole number of at least 0'),
    "use-window-string": ({"model_type": "qwen2", "use_sliding_window": "yes"}, 'use_sliding_window "yes" must be'),
    "layer-types-short": ({"model_type": "qwen2", "layer_types": ["full_attention"]},
                          'layer_types ["full_attention"] must list 2 entries (one a layer)'),
    "layer-types-chunked": ({"model_type": "qwen2", "layer_types": ["chunked_attention", "full_attention"]},
                            "each full_attention or sliding_attention, or be null"),
    "layer-types-string": ({"model_type": "qwen2", "layer_types": "full_attention"}, 'layer_types "full_attention"'),
}


@pytest.mark.parametrize("name", BAD_FIELDS)
def test_a_kept_field_transformers_would_stop_on_is_refused_by_name(name):
    """Oracle: transformers itself, which refuses the config or fails its first forward (until 2026-11-30 each
    stopped every rank: a strict field's validation error, an int() of a string, a shape mismatch, an arange error)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    fields, message = BAD_FIELDS[name]
    config = fields if "n_embd" in fields else {**_config("phi3", 64, 4, 4, 96, pad_token_id=0), **fields}
    if config["model_type"] == "gpt_neox":
        config = {k: v for k, v in config.items() if k not in ("num_key_value_heads", "pad_token_id")}
    with pytest.raises(UserError, match=re.escape(message)):
        shape_from_config(config, name, "local", None)
    with pytest.raises(Exception):  # noqa: B017 (transformers raises its own kinds: a config error, a runtime one)
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**config))
        model(torch.zeros(1, 8, dtype=torch.long))


def test_the_activations_and_rope_types_are_transformers_own():
    """What model_fields takes is what the installed transformers knows: a new transformers fails this, not a user."""
    from transformers.activations import ACT2FN
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    from dsbench.model_fields import ACTIVATIONS, ROPE_TYPES

    assert ACTIVATIONS == set(ACT2FN)
    assert ROPE_TYPES == {"default", *ROPE_INIT_FUNCTIONS}


GPT2 = {"model_type": "gpt2", "vocab_size": 1000, "n_embd": 64, "n_layer": 2, "n_head": 4}
BAD_SIZES = {  # shape fields that transformers refuses (its strict int fields) or stops on, refused before any launch
    "hidden-float": ({"hidden_size": 64.0}, "hidden_size 64.0 must be a whole number from 1 to 4,194,304"),
    "hidden-half": ({"hidden_size": 64.5}, "hidden_size 64.5 must be a whole number"),
    "hidden-string": ({"hidden_size": "64"}, 'hidden_size "64" must be a whole number'),
    "hidden-bool": ({"hidden_size": True, "num_attention_heads": 1, "num_key_value_heads": 1},
                    "hidden_size true must be a whole number"),
    "hidden-negative": ({"hidden_size": -64}, "hidden_size -64 must be a whole number"),
    "hidden-zero": ({"hidden_size": 0}, "hidden_size 0 must be a whole number"),
    "layers-negative": ({"num_hidden_layers": -1}, "num_hidden_layers -1 must be a whole number from 1 to 10,000"),
    "layers-null": ({"num_hidden_layers": None}, "num_hidden_layers null must be a whole number"),
    "vocab-zero": ({"vocab_size": 0, "pad_token_id": None}, "vocab_size 0 must be a whole number from 1 to 16,777,216"),
    "vocab-negative": ({"vocab_size": -5, "pad_token_id": None}, "vocab_size -5 must be a whole number"),
    "mlp-negative": ({"intermediate_size": -3}, "intermediate_size -3 must be a whole number"),
    "heads-float": ({"num_attention_heads": 4.0}, "num_attention_heads 4.0 must be a whole number from 1 to 65,536"),
    "kv-heads-string": ({"num_key_value_heads": "4"}, 'num_key_value_heads "4" must be a whole number'),
    "positions-float": ({"max_position_embeddings": 4096.0}, "max_position_embeddings 4096.0 must be a whole number"),
    "tie-string": ({"tie_word_embeddings": "false"}, 'tie_word_embeddings "false" must be true or false'),
    "gpt2-mlp-negative": ({**GPT2, "n_inner": -3}, "n_inner -3 must be a whole number"),
    "gpt2-mlp-float": ({**GPT2, "n_inner": 256.0}, "n_inner 256.0 must be a whole number"),
    "gpt2-positions-zero": ({**GPT2, "n_positions": 0}, "n_positions 0 must be a whole number from 1 to 2,147,483,647"),
    "gpt2-positions-float": ({**GPT2, "n_positions": 1024.0}, "n_positions 1024.0 must be a whole number"),
}


@pytest.mark.parametrize("name", BAD_SIZES)
def test_a_shape_field_transformers_refuses_is_refused_by_name(name):
    """Oracle: transformers 5 itself, which refuses the config (its strict int and bool fields) or fails to build or
    run the model. Until 2026-12-03 dsbench took int() of each: 64.5 and "64" trained and priced as 64, true as 1, and
    a negative or zero width, an infinite one or a 0-token vocabulary stopped `plan` with an internal error."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    fields, message = BAD_SIZES[name]
    config = fields if "n_embd" in fields else {**_config("phi3", 64, 4, 4, 96, pad_token_id=0), **fields}
    with pytest.raises(UserError, match=re.escape(message)):
        shape_from_config(config, name, "local", None)
    with pytest.raises(Exception):  # noqa: B017 (transformers raises its own kinds: a config error, a runtime one)
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**config))
        model(torch.zeros(1, 8, dtype=torch.long))


# dsbench's own floor and ceilings (model_config._CEILINGS), where transformers would build something: a decoder with
# no layer or no MLP, or one the planner would price layer by layer for minutes
OUT_OF_RANGE = [("num_hidden_layers", 0), ("num_hidden_layers", 10_001), ("intermediate_size", 0),
                ("intermediate_size", 2**22 + 1), ("max_position_embeddings", 0), ("max_position_embeddings", 2**31),
                ("hidden_size", 2**22 + 1), ("vocab_size", 2**24 + 1), ("num_attention_heads", 2**16 + 1)]
AT_THE_CEILING = {"num_hidden_layers": 10_000, "intermediate_size": 2**22, "max_position_embeddings": 2**31 - 1,
                  "hidden_size": 2**22, "vocab_size": 2**24, "num_attention_heads": 2**16}


@pytest.mark.parametrize("key, value", OUT_OF_RANGE)
def test_a_shape_field_out_of_range_is_refused_by_name(key, value):
    with pytest.raises(UserError, match=f"{key} {value} must be a whole number from 1 to "):
        shape_from_config({**_config("llama", 64, 4, 4, 96), key: value}, "m", "local", None)


@pytest.mark.parametrize("key", AT_THE_CEILING)
def test_a_shape_field_at_its_ceiling_is_taken(key):
    config = {**_config("llama", 64, 4, 4, 96), key: AT_THE_CEILING[key]}
    if key == "num_attention_heads":  # heads that divide the hidden size, one key/value head for all
        config.update(hidden_size=2**16, num_key_value_heads=1)
    shape = shape_from_config(config, "m", "local", None)
    assert AT_THE_CEILING[key] in (shape.layers, shape.intermediate, shape.max_positions, shape.hidden,
                                   shape.vocab_size, shape.heads)


def _transformers_tensors(config: dict) -> list[int]:
    """The element counts of the parameters transformers' own model of this config.json holds, in order (built on
    the meta device: no memory)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.for_model(**config)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    return [p.numel() for p in model.parameters()]


def _transformers_count(config: dict) -> int:
    return sum(_transformers_tensors(config))


@pytest.mark.parametrize("name", ACCEPTED)
def test_a_users_config_json_counts_what_transformers_builds(tmp_path, name):
    (tmp_path / "config.json").write_text(json.dumps(ACCEPTED[name]))
    shape = resolve_model(str(tmp_path))
    assert shape.num_params() == _transformers_count(ACCEPTED[name])
    assert shape.tensors() == _transformers_tensors(ACCEPTED[name])  # each tensor, in model.parameters() order
    # the shape's own config builds the same model (the worker's random init: ModelShape.hf_config)
    own = shape.hf_config()
    assert _transformers_tensors({**own, "model_type": own.pop("model_type")}) == shape.tensors()


@pytest.mark.parametrize("name", REFUSED)
def test_a_config_json_the_shape_would_miscount_is_refused_by_name(tmp_path, name):
    from dsbench.model_config import _shape_from_config

    config, message = REFUSED[name]
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(UserError, match=re.escape(message)):
        resolve_model(str(tmp_path))
    if name == "llama-narrow-heads":  # transformers refuses it too
        with pytest.raises(Exception, match="not a multiple of the number of attention heads"):
            _transformers_count(config)
    elif name.endswith("-head-dim-null"):  # transformers refuses it too
        with pytest.raises(Exception, match="head_dim"):
            _transformers_count(config)
    elif name.endswith("-pad-outside"):  # transformers refuses it too
        with pytest.raises(AssertionError, match="Padding_idx must be within num_embeddings"):
            _transformers_count(config)
    elif name == "qwen2-kv-not-dividing":  # transformers builds it, and its first forward fails
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM

        with pytest.raises(RuntimeError, match="must match"):
            AutoModelForCausalLM.from_config(AutoConfig.for_model(**config))(torch.zeros(1, 8, dtype=torch.long))
    else:  # transformers builds a model whose parameters the shape, had it been read, would have miscounted
        assert _shape_from_config(config, name, "local", None).num_params() != _transformers_count(config)


@pytest.mark.parametrize("name", [name for name in ACCEPTED if name != "gpt2"])
def test_the_attention_flops_term_is_what_torch_counts(name):
    """records.flops_per_token's attention term, 12·L·H·Q·s per token (PaLM appendix B: heads x head width, not the
    hidden size), against torch's FlopCounterMode over a forward and backward of transformers' own model on the meta
    device (shapes only): what it counts beyond 6 x the linear layers' weights per token is exactly that term, for
    heads of hidden / heads and for heads wider or narrower."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import AutoConfig, AutoModelForCausalLM

    from dsbench.records import flops_per_token

    config = ACCEPTED[name]
    shape = shape_from_config(config, name, "local", None)
    batch, seq = 2, 64
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**config), attn_implementation="sdpa")
        ids = torch.zeros(batch, seq, dtype=torch.long)
        with FlopCounterMode(display=False) as counter:
            model(input_ids=ids, labels=ids).loss.backward()
    linear = sum(module.weight.numel() for module in model.modules() if isinstance(module, torch.nn.Linear))
    attention = counter.get_total_flops() - 6 * linear * batch * seq
    assert attention == flops_per_token(0, shape.layers, shape.q_width, seq) * batch * seq
    if shape.head_dim:  # the hidden size in its place would miscount these
        assert attention != flops_per_token(0, shape.layers, shape.hidden, seq) * batch * seq


# Qwen3's model cards (huggingface.co/Qwen/Qwen3-8B and Qwen3-0.6B, "Number of Parameters" and "(Non-Embedding)"):
# the published shape fields of their config.json are in tests/data/models (tests/data/models/README.md)
QWEN3_CARDS = {"qwen3-8b": (8.2e9, 6.95e9), "qwen3-0.6b": (0.6e9, 0.44e9)}


@pytest.mark.parametrize("name", QWEN3_CARDS)
def test_qwen3_counts_its_model_card_and_what_transformers_builds(name):
    """Heads of 128 on 4096 / 32 and 1024 / 16, q_norm and k_norm in every block, 0.6B's embedding tied."""
    folder = DATA / "models" / name
    shape = resolve_model(str(folder))
    total, non_embedding = QWEN3_CARDS[name]
    parts = shape.parts()
    assert (shape.arch, shape.head_width) == ("qwen3", 128)
    # the cards' figures, rounded as they print them (8.19B as 8.2B, 0.596B as 0.6B; 6.946B as 6.95B)
    assert round(shape.num_params() / 1e9, 1) == total / 1e9
    assert round((shape.num_params() - parts["embedding"] - parts["head"]) / 1e9, 2) == non_embedding / 1e9
    assert shape.num_params() == _transformers_count(json.loads((folder / "config.json").read_text()))


# The Gemma report (Gemma Team, arXiv:2403.08295, Table 2: embedding and non-embedding parameters of both sizes, on
# its 256,128-token vocabulary) and the models' published config.json fields (Table 1's d_model, layers, heads,
# head size and feedforward width; Gemma-2B's one key/value head)
GEMMA_REPORT = {
    "gemma-2b": ({"hidden_size": 2048, "num_hidden_layers": 18, "num_attention_heads": 8, "num_key_value_heads": 1,
                  "head_dim": 256, "intermediate_size": 16384}, 524_550_144, 1_981_884_416),
    "gemma-7b": ({"hidden_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 16,
                  "head_dim": 256, "intermediate_size": 24576}, 786_825_216, 7_751_248_896),
}


@pytest.mark.parametrize("name", GEMMA_REPORT)
def test_gemma_counts_its_report_s_table(name):
    fields, embedding, non_embedding = GEMMA_REPORT[name]
    shape = shape_from_config({"model_type": "gemma", "vocab_size": 256_128, **fields}, name, "local", None)
    parts = shape.parts()
    assert (parts["embedding"], parts["head"], shape.tied_embeddings) == (embedding, 0, True)
    assert shape.num_params() - parts["embedding"] == non_embedding


# Model pages (huggingface.co): microsoft/Phi-3-mini-4k-instruct "3.82B params" (the Phi-3 report, arXiv:2404.14219,
# "3.8 billion"), microsoft/phi-4 "14.7B params", allenai/OLMo-2-1124-7B and -13B "7.3B params", "13.7B params"; their
# published config.json fields are in tests/data/models (tests/data/models/README.md)
PAGES = {"phi-3-mini-4k": ("phi3", 3.82e9, 2), "phi-4": ("phi3", 14.7e9, 1), "olmo-2-7b": ("olmo2", 7.3e9, 1),
         "olmo-2-13b": ("olmo2", 13.7e9, 1)}


@pytest.mark.parametrize("name", PAGES)
def test_a_published_model_counts_its_page_and_what_transformers_builds(name):
    """Phi-3's fused q|k|v and gate|up hold Llama's parameters in fewer tensors (4 matrices a block, not 7); OLMo-2's
    q_norm and k_norm are as wide as the projections they normalise."""
    folder = DATA / "models" / name
    config = json.loads((folder / "config.json").read_text())
    shape = resolve_model(str(folder))
    arch, total, digits = PAGES[name]
    assert round(shape.num_params() / 1e9, digits) == total / 1e9
    assert shape.tensors() == _transformers_tensors(config)
    if arch == "phi3":
        assert (shape.arch, shape.block_matrices, len(shape.block_tensors())) == ("phi3", 4, 6)
        assert shape.sliding_window() == config["sliding_window"]
    else:
        assert (shape.arch, shape.qk_norm_widths()) == ("olmo2", (shape.q_width, shape.kv_width))


@pytest.mark.parametrize("name", ["llama-gqa", "qwen3-wide-heads", "phi3-gqa-window", "olmo2-gqa", "gpt2"])
def test_the_block_matrices_are_the_linear_layers_transformers_builds(name):
    """ModelShape.block_matrices (the modules ZeRO-3 gathers one by one: plan/calls.py) against the linear layers
    (GPT-2's Conv1D too) in one block of transformers' own model."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.pytorch_utils import Conv1D

    config = dict(ACCEPTED[name])
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**config))
    block = (model.transformer.h if name == "gpt2" else model.model.layers)[0]
    linear = [m for m in block.modules() if isinstance(m, (torch.nn.Linear, Conv1D))]
    assert len(linear) == shape_from_config(ACCEPTED[name], name, "local", None).block_matrices


# config.json fields that decide what attention and positions compute (published values of the families' configs)
MISTRAL_V03 = {"model_type": "mistral", "vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 2,
               "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128, "sliding_window": None,
               "max_position_embeddings": 32768, "rope_theta": 1e6}
LLAMA_31 = {"model_type": "llama", "vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
            "max_position_embeddings": 131072, "rope_theta": 500000.0,
            "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                             "original_max_position_embeddings": 8192, "rope_type": "llama3"}}
QWEN2_WINDOWS = {"model_type": "qwen2", "vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 4,
                 "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
                 "max_position_embeddings": 32768, "use_sliding_window": True, "sliding_window": 64,
                 "max_window_layers": 2}
DELIBERATE = {"bos_token_id", "eos_token_id", "attention_dropout", "architectures"}
"""What the worker's model sets on purpose: the shipped tokenizer's ids, no dropout (parity across strategies)."""


@pytest.mark.parametrize("config", [*[c for n, c in ACCEPTED.items() if n != "gpt2"], MISTRAL_V03, LLAMA_31,
                                    QWEN2_WINDOWS], ids=[*[n for n in ACCEPTED if n != "gpt2"], "mistral-v0.3",
                                                         "llama-3.1", "qwen2-windows"])
def test_a_model_built_from_a_config_json_is_the_configs_model(config):
    """Without weights the worker builds the model from its shape (ModelShape.hf_config): transformers' config of
    it equals transformers' config of the config.json, field by field, but for :data:`DELIBERATE`. Until 2026-11-30
    a Mistral v0.3 (no window) got its class's 4096-token window and a Llama 3.1 lost its llama3 RoPE scaling."""
    from transformers import AutoConfig

    shape = shape_from_config(config, "m", "local", None)
    own = shape.hf_config()
    built = AutoConfig.for_model(own.pop("model_type"), **own).to_dict()
    users = AutoConfig.for_model(**config).to_dict()
    differ = {key for key in set(built) | set(users) if built.get(key) != users.get(key)} - DELIBERATE
    assert differ == set(), {key: (built.get(key), users.get(key)) for key in differ}


WINDOWED = {
    "mistral-v0.1": ({"model_type": "mistral", "sliding_window": 4096}, 4096),
    "mistral-default": ({"model_type": "mistral"}, 4096),  # MistralConfig's own default
    "mistral-v0.3": ({"model_type": "mistral", "sliding_window": None}, None),
    "qwen2-windows-on": ({"model_type": "qwen2", "use_sliding_window": True, "sliding_window": 64,
                          "max_window_layers": 2}, 64),
    "qwen2-windows-from-layer-4": ({"model_type": "qwen2", "use_sliding_window": True, "sliding_window": 64,
                                    "max_window_layers": 4}, None),  # 4 layers, none from layer 4 on
    "qwen2-windows-off": ({"model_type": "qwen2", "use_sliding_window": False, "sliding_window": 64}, None),
    "qwen3-layer-types": ({"model_type": "qwen3", "use_sliding_window": True, "sliding_window": 32,
                           "layer_types": ["full_attention", "sliding_attention"] * 2}, 32),
    "llama": ({"model_type": "llama"}, None),
    "phi3-window": ({"model_type": "phi3", "sliding_window": 2047, "pad_token_id": 0}, 2047),  # Phi-3-mini-4k's
    "phi3-default": ({"model_type": "phi3", "pad_token_id": 0}, None),  # Phi3Config's own default: none
}


@pytest.mark.parametrize("name", WINDOWED)
def test_the_sliding_window_is_the_one_transformers_applies(name):
    """ModelShape.sliding_window against transformers' config of the same config.json: the window of the layers
    it marks sliding_attention (Qwen2, Qwen3), or Mistral's own (every layer); the test's expected values are
    transformers'."""
    from transformers import AutoConfig

    fields, expected = WINDOWED[name]
    config = {"vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
              "num_key_value_heads": 2, "intermediate_size": 128, **fields}
    built = AutoConfig.for_model(**config)
    types = getattr(built, "layer_types", None)
    # Mistral and Phi-3 window every layer with the config's window (Phi3Model picks the sliding-window mask
    # whenever it is set); Qwen2 and Qwen3 the layers their layer_types name
    applied = built.sliding_window if (config["model_type"] in ("mistral", "phi3") or types and "sliding_attention"
                                       in types) else None
    assert applied == expected
    assert shape_from_config(config, name, "local", None).sliding_window() == expected
