"""Users' accelerate YAMLs through `validate` and `explain`: planted faults, the corpus verdicts, and accelerate's
own code as the oracle for what it refuses (ClusterConfig.from_yaml_file, DeepSpeedPlugin's file check)."""

from __future__ import annotations

import json
import os
import sys

import pytest
import yaml

from dsbench.configs import accelerate, accelerate_explain, accelerate_worker
from dsbench.configs.api import validate_file
from tests.conftest import CORPUS, DATA, ROOT

BAD = DATA / "bad"
YAMLS = sorted((CORPUS / "accelerate").iterdir())
PLANTED = sorted((BAD / "accelerate").glob("*.yaml"))


@pytest.fixture
def in_bad(monkeypatch):
    monkeypatch.chdir(BAD)  # the planted YAMLs name their DeepSpeed files from here, as the catalogue runs them


def _errors(path):
    _, findings = validate_file(str(path), None, allow_auto=False, deepspeed_check=False)
    return {(f.code, f.path) for f in findings if f.severity == "error"}


@pytest.mark.parametrize("name, code, path", [
    ("plugin_typo", "unknown-key", "deepspeed_config.zero_stagee"),
    ("file_and_inline", "ds-file-conflict", "deepspeed_config.gradient_accumulation_steps"),
    ("file_and_precision", "ds-file-conflict", "mixed_precision"),
    ("processes_machines", "process-count", "num_processes"),
    ("fsdp_v1_key", "fsdp-version", "fsdp_config.fsdp_sharding_strategy"),
    ("fsdp_wrap_name", "bad-value", "fsdp_config.fsdp_auto_wrap_policy"),
    ("top_typo", "unknown-key", "mixed_precison"),
    ("type_typo", "bad-value", "distributed_type"),
    ("placeholder_ip", "placeholder", "main_process_ip"),
    ("missing_ds_file", "missing-file", "deepspeed_config.deepspeed_config_file"),
    ("ds_file_findings", "unknown-key", "typo.json:train_batch_sizee"),
    ("ds_file_findings", "missing-key", "typo.json:zero_optimization"),
    ("duplicate", "malformed-yaml", ""),
    ("malformed", "malformed-yaml", ""),
    ("list", "not-a-mapping", ""),
])
def test_each_planted_fault_is_one_error_at_its_key(in_bad, name, code, path):
    assert (code, path) in _errors(BAD / "accelerate" / f"{name}.yaml")


def test_planted_faults_exit_1_naming_the_key(cli_run):
    result = cli_run("validate", str(BAD / "accelerate" / "plugin_typo.yaml"), "--no-deepspeed-check")
    assert result.exit_code == 1
    assert "deepspeed_config.zero_stagee" in result.output and "did you mean 'zero_stage'?" in result.output
    refused = cli_run("explain", str(BAD / "accelerate" / "fsdp_v1_key.yaml"))
    assert refused.exit_code == 2 and "fsdp_config.fsdp_sharding_strategy" in refused.output


def test_a_good_yaml_and_its_file_are_valid(in_bad):
    assert _errors(BAD / "accelerate" / "good_file.yaml") == set()


@pytest.mark.parametrize("path", YAMLS, ids=lambda p: p.name[:60])
def test_corpus_verdict_matches_the_reviewed_one(path):
    expected = json.loads((CORPUS / "expected" / "accelerate" / f"{path.name}.json").read_text())
    _, findings = validate_file(str(path), None, allow_auto=False, deepspeed_check=False)
    got = sorted([list(t) for t in {(f.severity, f.code, f.path) for f in findings}])
    assert {"valid": not any(f.severity == "error" for f in findings), "findings": got} == {
        k: expected[k] for k in ("valid", "findings")}
    assert expected["review"]  # the hand-written reason for the verdict


def _accelerate_refuses_top_level(path) -> bool:
    from accelerate.commands.config.config_args import ClusterConfig

    try:
        ClusterConfig.from_yaml_file(str(path))
    except ValueError as exc:
        return "unknown keys" in str(exc)
    except (TypeError, KeyError):  # a bad value, not an unknown key
        return False
    return False


@pytest.mark.parametrize("path", YAMLS + [p for p in PLANTED if p.stem not in ("duplicate", "malformed", "list")],
                         ids=lambda p: p.name[:60])
def test_unknown_top_level_keys_are_what_accelerate_refuses(path):
    ours = any(code == "unknown-key" and "." not in where for code, where in _errors(path))
    assert ours == _accelerate_refuses_top_level(path)


@pytest.mark.parametrize("path", [BAD / "accelerate" / n for n in ("file_and_inline.yaml", "file_and_precision.yaml",
                                                                   "good_file.yaml")], ids=lambda p: p.stem)
def test_conflicts_with_a_deepspeed_file_are_what_accelerate_refuses(path, monkeypatch):
    """accelerate's launch passes the YAML's deepspeed_config keys (and mixed_precision when the YAML sets it) as
    ACCELERATE_CONFIG_DS_FIELDS (commands/launch.py launch_command); DeepSpeedPlugin checks them."""
    from accelerate.utils.dataclasses import DeepSpeedPlugin

    config = yaml.safe_load(path.read_text())
    fields = list(config["deepspeed_config"]) + (["mixed_precision"] if config.get("mixed_precision") else [])
    monkeypatch.setenv("ACCELERATE_CONFIG_DS_FIELDS", ",".join(fields).lower())
    try:
        DeepSpeedPlugin._deepspeed_config_checks(None)
        refused = False
    except ValueError:
        refused = True
    monkeypatch.chdir(BAD)
    assert any(code == "ds-file-conflict" for code, _ in _errors(path)) == refused


def test_the_shipped_schema_is_the_installed_accelerates():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from gen_accelerate_schema import build
    finally:
        sys.path.pop(0)
    assert build() == accelerate.schema()  # after upgrading accelerate: python scripts/gen_accelerate_schema.py


def test_explain_says_engine_sharding_processes_and_precision():
    fsdp = {"distributed_type": "FSDP", "num_processes": 8, "num_machines": 2, "main_process_ip": "10.0.0.1",
            "mixed_precision": "bf16", "fsdp_config": {"fsdp_version": 2, "reshard_after_forward": False,
                                                        "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP"}}
    lines = accelerate_explain.explain(fsdp)
    assert lines[0] == ("`accelerate launch` starts 8 process(es) on 2 machine(s) (4 per machine); machine 0 at "
                        "10.0.0.1:29500")
    assert "FSDP2" in lines[1] and "like ZeRO-2" in lines[1]  # reshard_after_forward false (prefix added)
    assert lines[-1].startswith("precision: bf16 autocast")
    # FSDP1: accelerate wraps with torch's FullyShardedDataParallel (until 2026-12-01 explain said fully_shard)
    v1 = accelerate_explain.explain({**fsdp, "fsdp_config": {"fsdp_sharding_strategy": "FULL_SHARD"}})[1]
    assert v1.startswith("engine: FSDP1 (torch FullyShardedDataParallel under accelerate") and "ZeRO-3" in v1
    ds = {"distributed_type": "DEEPSPEED", "num_processes": 2,
          "deepspeed_config": {"zero3_init_flag": True, "offload_optimizer_device": "cpu"}}
    text = " ".join(accelerate_explain.explain(ds))
    assert "ZeRO-2" in text and "no zero_stage: accelerate's default" in text and "offloaded to CPU RAM" in text


def test_yaml_is_recognised_and_refused_where_a_deepspeed_json_is_expected():
    from dsbench.configs.loader import load_config_strict
    from dsbench.errors import UserError

    assert accelerate.looks_like_accelerate("x.yml")
    assert accelerate.looks_like_accelerate("cfg.txt", "compute_environment: LOCAL_MACHINE\n")
    assert not accelerate.looks_like_accelerate("ds.json", '{"train_batch_size": 8}')
    with pytest.raises(UserError, match="is an accelerate config, not a DeepSpeed JSON"):
        load_config_strict(str(YAMLS[0]))


def test_every_corpus_yaml_has_a_verdict_file():
    names = {p.name for p in YAMLS}
    verdicts = {p.name.removesuffix(".json") for p in (CORPUS / "expected" / "accelerate").iterdir()}
    assert names == verdicts
    assert os.path.isfile(CORPUS / "SOURCES.tsv")


INLINE = [p for p in YAMLS if (c := yaml.safe_load(p.read_text())).get("distributed_type") == "DEEPSPEED"
          and not c["deepspeed_config"].get("deepspeed_config_file")]


@pytest.mark.parametrize("path", INLINE, ids=lambda p: p.name[:60])
def test_from_accelerate_writes_the_config_accelerate_builds(path, monkeypatch):
    """Oracle: accelerate's DeepSpeedPlugin given the YAML's inline settings, then set_mixed_precision, as
    `accelerate launch` + Accelerator() do."""
    from accelerate.utils.dataclasses import DeepSpeedPlugin

    for name in list(os.environ):
        if name.startswith("ACCELERATE_"):
            monkeypatch.delenv(name)
    config = yaml.safe_load(path.read_text())
    ds = config["deepspeed_config"]
    keys = ("gradient_accumulation_steps", "gradient_clipping", "zero_stage", "offload_optimizer_device",
            "offload_param_device", "offload_optimizer_nvme_path", "offload_param_nvme_path", "zero3_save_16bit_model")
    plugin = DeepSpeedPlugin(**{k: ds[k] for k in keys if k in ds}, zero3_init_flag=False)
    plugin.set_mixed_precision(config.get("mixed_precision") or "no")
    oracle = dict(plugin.deepspeed_config)
    oracle.pop("steps_per_print")  # inf: not JSON
    for section in ("offload_optimizer", "offload_param"):
        if oracle["zero_optimization"][section].get("nvme_path") is None:
            oracle["zero_optimization"][section].pop("nvme_path")
    assert accelerate_worker.to_deepspeed(config) == oracle


def test_from_accelerate_on_the_command_line(cli_run, tmp_path):
    out = tmp_path / "ds.json"
    result = cli_run("render", "--from-accelerate", str(INLINE[0]), "-o", str(out))
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["zero_optimization"]["stage"] in (2, 3)
    multi_gpu = CORPUS / "accelerate" / "huggingface__trl__examples_accelerate_configs_multi_gpu.yaml"
    refused = cli_run("render", "--from-accelerate", str(multi_gpu))
    assert refused.exit_code == 2 and "not DEEPSPEED" in refused.output


def test_a_bare_no_is_yamls_false_and_the_fix_says_to_quote_it(tmp_path):
    path = tmp_path / "a.yaml"
    path.write_text("distributed_type: NO\nmixed_precision: no\n")
    _, findings = validate_file(str(path), None, allow_auto=False)
    fixes = {f.path: f.fix for f in findings}
    assert fixes["distributed_type"] == "quote it, distributed_type: 'NO' (YAML reads a bare NO as false)"
    assert fixes["mixed_precision"] == "quote it, mixed_precision: 'no' (YAML reads a bare no as false)"
    path.write_text("distributed_type: 'NO'\nmixed_precision: 'no'\n")
    assert validate_file(str(path), None, allow_auto=False)[1] == []


@pytest.mark.parametrize("clip", [0, 0.0, 0.5, 1.0, None])
def test_a_clipping_of_zero_is_said_to_stay_on_where_accelerate_and_deepspeed_keep_it_on(clip, monkeypatch):
    """Oracle: accelerate's DeepSpeedPlugin builds the config (a 0 is dropped: ``if self.gradient_clipping``), and
    DeepSpeed's DeepSpeedConfig parses it to the norm its engine clips at (its default where the key is missing);
    validate warns, and explain says the norm, exactly where that norm is not what the YAML wrote."""
    from accelerate.utils.dataclasses import DeepSpeedPlugin
    from deepspeed.runtime.config import DeepSpeedConfig

    for name in list(os.environ):
        if name.startswith("ACCELERATE_"):
            monkeypatch.delenv(name)
    inline = {"zero_stage": 2, **({"gradient_clipping": clip} if clip is not None else {})}
    built = dict(DeepSpeedPlugin(**inline).deepspeed_config)
    # its clipping as the script completes it ("auto": the Trainer's max_grad_norm, the worker's --grad-clip)
    kept = {"gradient_clipping": 0.7 if built["gradient_clipping"] == "auto" else built["gradient_clipping"]} if (
        "gradient_clipping" in built) else {}
    applied = DeepSpeedConfig({"train_batch_size": 1, "train_micro_batch_size_per_gpu": 1, **kept}).gradient_clipping
    config = {"distributed_type": "DEEPSPEED", "num_processes": 2, "deepspeed_config": inline}
    from dsbench.configs.accelerate_check import check

    warned = [f for f in check(config) if f.path == "deepspeed_config.gradient_clipping"]
    assert bool(warned) is (clip is not None and applied != clip)
    said = [line for line in accelerate_explain.explain(config) if line.startswith("gradients clipped")]
    assert said == ([f"gradients clipped to global norm {applied}" + (": accelerate drops a gradient_clipping of 0, "
                     "and DeepSpeed clips at its default" if warned else "")] if clip is not None else [])
