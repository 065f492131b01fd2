"""dsbench export writes the weights as the model the checkpoint's hf/config.json builds (worker/export_model.py).
The oracle is transformers itself: a GPT-2 built from the config trains nothing here; its own state_dict is the
checkpoint's weights, and a config edited after the save must be refused, never exported beside them."""

from __future__ import annotations

import json

import pytest

from dsbench.errors import UserError

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

SIZES = {"vocab_size": 256, "n_positions": 32, "n_embd": 16, "n_layer": 2, "n_head": 2}


def _saved(tmp_path, **edit):
    """A 2-layer GPT-2's weights (transformers' own state_dict), and its config saved with ``edit`` applied."""
    from dsbench.worker.export_model import meta_model

    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**SIZES))
    transformers.GPT2Config(**{**SIZES, **edit}).save_pretrained(tmp_path)
    weights = [(name, lambda t=t: t) for name, t in model.state_dict().items()]
    return weights, meta_model(tmp_path), tmp_path / "config.json"


def _export(weights, model, config):
    from dsbench.worker.export_model import matching, tied_names

    skip = tied_names(model)
    return [name for name, load in matching(iter(weights), model, config) if name not in skip and load() is not None]


def test_the_saved_config_takes_every_weight_and_drops_the_tied_head(tmp_path):
    written = _export(*_saved(tmp_path))
    assert "lm_head.weight" not in written and "transformer.wte.weight" in written  # tied: written once
    assert len(written) == len({n for n, _ in transformers.GPT2LMHeadModel(
        transformers.GPT2Config(**SIZES)).named_parameters()})


@pytest.mark.parametrize("edit, needle", [
    ({"n_layer": 1}, "holds transformer.h.1.ln_1.weight, a weight the model this config builds has not"),
    ({"n_layer": 3}, "has 12 parameter(s) the checkpoint lacks (transformer.h.2."),
    ({"n_embd": 32}, "the checkpoint's transformer.wte.weight is [256, 16], the model this config builds has "
                     "[256, 32]"),
])
def test_a_config_edited_after_the_save_is_refused(tmp_path, edit, needle):
    with pytest.raises(UserError) as refused:
        _export(*_saved(tmp_path, **edit))
    assert needle in str(refused.value) and str(tmp_path / "config.json") in str(refused.value)


def test_a_field_transformers_refuses_is_one_line_naming_the_file(tmp_path):
    from dsbench.worker.export_model import meta_model

    transformers.GPT2Config(**SIZES).save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "scale_attn_by_inverse_layer_idx": -1}))
    with pytest.raises(UserError, match=r"config.json: transformers cannot build a model from it \(.*"
                                        r"scale_attn_by_inverse_layer_idx.* expected bool"):
        meta_model(tmp_path)
