import json

import pytest

from dsbench.errors import UserError
from dsbench.models import PRESETS, resolve_model

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
