"""Worker set-up checks that need no process group."""

from __future__ import annotations

import re

import pytest

from dsbench.errors import UserError
from dsbench.worker.setup import check_cuda_arch_list


def deepspeed_accepts(monkeypatch, value: str) -> bool:
    """The oracle: DeepSpeed 0.19.8's own CUDA JIT builder parsing the arch list (no GPU needed when it is set)."""
    from deepspeed.ops.op_builder.fused_adam import FusedAdamBuilder

    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", value)
    builder = FusedAdamBuilder()
    builder.jit_mode = True
    try:
        builder.compute_capability_args()
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("value", ["9.0", "8.0;9.0+PTX", "7.5 8.6", "9.0a", "8.0;9.0a", "sm_90"])
def test_arch_lists_are_refused_exactly_when_deepspeed_cannot_parse_them(monkeypatch, value):
    accepted = deepspeed_accepts(monkeypatch, value)
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", value)
    if accepted:
        check_cuda_arch_list()
    else:
        with pytest.raises(UserError, match="JIT builder cannot parse"):
            check_cuda_arch_list()
    assert accepted == (value in ("9.0", "8.0;9.0+PTX", "7.5 8.6"))


@pytest.mark.parametrize("value", ["9.0;" * 5000 + "9.0a", "$(touch pwned)", "9.0\n8.0a", "é" * 300])
def test_a_hostile_arch_list_is_one_short_line(monkeypatch, tmp_path, value):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", value)
    with pytest.raises(UserError) as refused:
        check_cuda_arch_list()
    line = str(refused.value)
    assert "\n" not in line.replace("\\n", "") and len(line) < 300 and "JIT builder cannot parse" in line
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("value", ["9.0", "9.0a", "8.0;9.0a"])
def test_a_launch_onto_gpu_ranks_here_refuses_the_arch_list_deepspeed_cannot_parse(cli_run, monkeypatch, tmp_path,
                                                                                   value):
    """The ranks of a launch on this machine inherit its TORCH_CUDA_ARCH_LIST: where DeepSpeed's builder cannot parse
    it, `dsbench launch` onto GPU ranks (two GPUs here, as test_cli does) refuses it before they start, exit 2, for
    DeepSpeed and for an accelerate YAML under DeepSpeed; DDP and ranks on other nodes are not its to refuse."""
    import dsbench.envinfo

    accepted = deepspeed_accepts(monkeypatch, value)
    monkeypatch.setattr(dsbench.envinfo, "local_gpu_count", lambda: 2)
    (tmp_path / "ds.yaml").write_text("distributed_type: DEEPSPEED\nnum_processes: 2\ndeepspeed_config:\n"
                                      "  zero_stage: 2\n")
    (tmp_path / "hosts").write_text("node1 slots=2\nnode2 slots=2\n")
    for name, how in (("ds", ["--zero", "2"]), ("yaml", ["--accelerate-config", "ds.yaml"]),
                      ("ddp", ["--strategy", "ddp", "--launcher", "torchrun"]),
                      ("nodes", ["--zero", "2", "--hostfile", "hosts"])):
        result = cli_run("launch", *how, "--run-dir", f"r-{name}", "--dry-run")
        refused = not accepted and name in ("ds", "yaml")
        assert result.exit_code == (2 if refused else 0), (name, result.output)
        assert ("JIT builder cannot parse" in result.output) == refused, (name, result.output)


def test_a_configs_own_accumulation_sizes_the_auto_batch():
    """accelerate's Accelerator._prepare_deepspeed sets train_batch_size = micro x the plugin's accumulation x
    processes: the config's 16 accumulation steps win over the worker's --grad-accum 1 there too."""
    from dsbench.configs.autofill import AutoInputs
    from dsbench.worker.setup import complete_ds_config

    raw = {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": 16,
           "zero_optimization": {"stage": 2}, "optimizer": {"type": "AdamW", "params": {"lr": "auto"}}}
    inputs = AutoInputs(micro_batch=2, grad_accum=1, data_parallel_size=2, grad_clip=1.0, lr=3e-4, weight_decay=0.0,
                        warmup_steps=0, train_steps=10, precision="fp32", hidden_size=64)
    config, dims = complete_ds_config(raw, "plugin", inputs, world_size=2)
    assert (dims.dp, dims.tp, dims.pp) == (2, 1, 1)
    assert (config["train_batch_size"], config["train_micro_batch_size_per_gpu"]) == (2 * 16 * 2, 2)
    with pytest.raises(UserError, match="plugin: "):
        complete_ds_config({**raw, "train_batch_size": 5}, "plugin", inputs, world_size=2)


def test_a_rank_refuses_an_optimizer_deepspeed_would_not_build_before_initialize():
    """`dsbench launch --config` of a config naming OneBitAdam (removed from DeepSpeed 0.19.8) started its ranks,
    which stopped in deepspeed.initialize on the engine's assertion with a traceback; the rank now says it in one
    line first, by DeepSpeed's own test (``DeepSpeedEngine._is_supported_optimizer``), before its engine or the
    shared-memory op are built."""
    from dsbench.configs.autofill import AutoInputs
    from dsbench.worker.setup import complete_ds_config

    inputs = AutoInputs(micro_batch=2, grad_accum=1, data_parallel_size=2, grad_clip=1.0, lr=3e-4, weight_decay=0.0,
                        warmup_steps=0, train_steps=10, precision="fp32", hidden_size=64)
    raw = {"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 0}}
    for name, refused in (("OneBitAdam", True), ("ZeroOneAdam", True), ("AdamW", False), ("SGD", False)):
        config = {**raw, "optimizer": {"type": name, "params": {"lr": 1e-4}}}
        if refused:
            with pytest.raises(UserError, match=f"ob.json: ERROR   optimizer.type: .* builds no optimizer '{name}'"):
                complete_ds_config(config, "ob.json", inputs, world_size=2)
        else:
            complete_ds_config(config, "ob.json", inputs, world_size=2)


def test_a_rank_works_out_its_config_s_layout_once(monkeypatch):
    """Issue 25: the rank's config completion builds one ParallelDims, which its validation reads; a config whose
    degrees do not divide the world is one line naming the file."""
    from dsbench import parallel
    from dsbench.configs.autofill import AutoInputs
    from dsbench.worker.setup import complete_ds_config

    built = []
    init = parallel.ParallelDims.__init__
    monkeypatch.setattr(parallel.ParallelDims, "__init__", lambda self, *a, **k: built.append(1) or init(self, *a, **k))
    raw = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 2, "pipeline": {"stages": 2},
           "zero_optimization": {"stage": 1}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}
    inputs = AutoInputs(micro_batch=1, grad_accum=2, data_parallel_size=2, grad_clip=1.0, lr=3e-4, weight_decay=0.0,
                        warmup_steps=0, train_steps=10, precision="fp32", hidden_size=64)
    _, dims = complete_ds_config(raw, "ds.json", inputs, world_size=4)
    assert (dims.dp, dims.pp, len(built)) == (2, 2, 1)
    with pytest.raises(UserError, match="^ds.json: .*pipeline.stages 2"):
        complete_ds_config(raw, "ds.json", inputs, world_size=3)


def test_git_revision_is_what_git_says_without_starting_git():
    import shutil
    import subprocess

    from dsbench.worker.setup import git_revision
    from tests.conftest import ROOT

    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    oracle = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert git_revision() == oracle.strip()


@pytest.mark.parametrize("batch, world", [
    ({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2}, 2),  # accumulation derived: 2
    ({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2}, 8),  # 4
    ({"train_batch_size": 8}, 2),  # micro-batch derived: 4, accumulation 1
    ({"train_batch_size": 32, "gradient_accumulation_steps": 4}, 4),  # micro-batch derived: 2
    ({"train_micro_batch_size_per_gpu": 3}, 2),  # train derived: 6
    ({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 3}, 2),
])
def test_a_rank_runs_the_batch_deepspeed_derives(monkeypatch, batch, world):
    """The keys a config leaves out are filled as DeepSpeed's own DeepSpeedConfig derives them (the oracle, at the
    same world size), so the worker's loop takes the micro-steps the engine accumulates. Until 2026-11-30 a config
    of train_batch_size and micro-batch ran 1 micro-step a step (the header said global batch 4 where DeepSpeed
    trained 8), and one of train_batch_size alone failed with KeyError."""
    from deepspeed.runtime import config as ds_config

    from dsbench.configs.autofill import AutoInputs
    from dsbench.configs.batch import BATCH_KEYS
    from dsbench.worker.setup import complete_ds_config

    raw = {**batch, "zero_optimization": {"stage": 1}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}
    inputs = AutoInputs(micro_batch=1, grad_accum=1, data_parallel_size=world, grad_clip=1.0, lr=1e-3,
                        weight_decay=0.0, warmup_steps=0, train_steps=10, precision="fp32", hidden_size=64)
    config, _ = complete_ds_config(raw, "ds.json", inputs, world_size=world)
    monkeypatch.setattr(ds_config.dist, "get_world_size", lambda *a, **k: world)
    monkeypatch.setattr(ds_config.dist, "get_rank", lambda *a, **k: 0)
    theirs = ds_config.DeepSpeedConfig(dict(raw))
    assert [config[key] for key in BATCH_KEYS] == [theirs.train_batch_size, theirs.train_micro_batch_size_per_gpu,
                                                    theirs.gradient_accumulation_steps]


@pytest.mark.parametrize("config, needle", [
    ({"fp16": {"enabled": True}}, "fp16: DeepSpeed's cpu accelerator trains no fp16"),
    ({"optimizer": {"type": "Lamb"}}, "optimizer lamb: DeepSpeed runs it with its FusedLambBuilder op"),
    ({"optimizer": {"type": "Lion"}}, "or offload the optimizer, where Lion runs on the CPU"),
    ({"optimizer": {"type": "Lion"}, "zero_optimization": {"stage": 1, "offload_optimizer": {"device": "cpu"}}}, None),
    ({"optimizer": {"type": "AdamW"}, "bf16": {"enabled": True}}, None),
])
def test_what_the_cpu_accelerator_cannot_run_is_said_before_deepspeed_starts(config, needle):
    """On DeepSpeed's CPU accelerator (DS_ACCELERATOR=cpu, as every test here): its own answers are the oracle,
    is_fp16_supported() and the stand-in builder it returns for an op it lacks."""
    from deepspeed.accelerator import get_accelerator

    from dsbench.worker.setup import check_on_device

    assert get_accelerator().device_name() == "cpu" and not get_accelerator().is_fp16_supported()
    if needle is None:
        check_on_device(config)
    else:
        with pytest.raises(UserError, match=re.escape(needle)):
            check_on_device(config)


_Z3 = {"stage": 3, "zero_hpz_partition_size": 2}


@pytest.mark.parametrize("zero, world, local_size, needle", [
    ({**_Z3, "zero_quantized_weights": True}, 1, "1", "zero_optimization.zero_quantized_weights: ZeRO++ quantizes"),
    ({**_Z3, "zero_quantized_nontrainable_weights": True}, 2, "2", "zero_quantized_nontrainable_weights: ZeRO++"),
    ({**_Z3, "zero_quantized_gradients": True}, 4, "2", "zero_optimization.zero_quantized_gradients: ZeRO++"),
    ({**_Z3, "zero_quantized_gradients": True}, 2, None, "zero_optimization.zero_quantized_gradients"),  # torchrun
    ({**_Z3, "zero_quantized_gradients": True}, 2, "2", None),  # one node: DeepSpeed reduce-scatters as usual
    ({"stage": 2, "zero_quantized_weights": True, "zero_quantized_gradients": True}, 4, "2", None),  # no zero.Init
    (_Z3, 4, "2", None),  # hpZ alone needs no op
    ({**_Z3, "zero_quantized_weights": False}, 4, "2", None),
])
def test_zero_plus_plus_quantization_the_cpu_accelerator_cannot_run_is_said_before_deepspeed_starts(
        monkeypatch, zero, world, local_size, needle):
    """Measured with `dsbench launch --config` on 2 ranks (2026-11-30): quantized weights fail at zero.Init and
    quantized gradients under torchrun (LOCAL_SIZE unset) with DeepSpeed's "This op had not been implemented on CPU
    backend"; hpZ alone and quantized gradients under the deepspeed launcher on one node train. The node count is
    DeepSpeed's own: world size // its accelerator's device_count(), which reads LOCAL_SIZE here."""
    from deepspeed.accelerator import get_accelerator

    from dsbench.worker.setup import check_on_device

    if local_size is None:  # torchrun: DeepSpeed counts this machine's NUMA nodes as its devices
        monkeypatch.delenv("LOCAL_SIZE", raising=False)
        needle = needle if world // get_accelerator().device_count() > 1 else None
    else:
        monkeypatch.setenv("LOCAL_SIZE", local_size)
    config = {"optimizer": {"type": "AdamW"}, "zero_optimization": zero}
    if needle is None:
        check_on_device(config, world)
    else:
        with pytest.raises(UserError, match=re.escape(needle)):
            check_on_device(config, world)


@pytest.mark.parametrize("section, availability", [("tensorboard", "check_tb_availability"),
                                                   ("wandb", "check_wandb_availability"),
                                                   ("comet", "check_comet_availability")])
def test_a_monitor_whose_package_is_missing_is_said_before_deepspeed_starts(section, availability, capsys):
    """The oracle: DeepSpeed's own availability check for the monitor (deepspeed/monitor/utils.py), which its
    MonitorMaster calls on rank 0; where it raises ImportError dsbench refuses the config in one line naming the
    key, and where it passes (the package installed) dsbench lets it through. A monitor left disabled is never
    asked about. A launch asks the same (configs/device_ops.rank_findings), where every rank runs here (no
    hostfile, no SLURM job: another node has its own packages, which its rank checks)."""
    from deepspeed.monitor import utils

    from dsbench.configs.device_ops import rank_findings
    from dsbench.worker.setup import check_monitors

    try:
        getattr(utils, availability)()
        available = True
    except ImportError:
        available = False
    capsys.readouterr()
    check_monitors({section: {"enabled": False}})
    check_monitors({section: "on"})  # not an object: validation's to refuse
    if available:
        check_monitors({section: {"enabled": True}})
    else:
        with pytest.raises(UserError, match=re.escape(f"{section}.enabled: DeepSpeed's {section} monitor needs")):
            check_monitors({section: {"enabled": True}})
    enabled = {section: {"enabled": True}}
    here = [f for f in rank_findings(enabled, cpu_ranks=False, ranks_here=True) if f.code == "monitor-package"]
    assert bool(here) != available
    if here:
        assert here[0].path == f"{section}.enabled" and here[0].fix.startswith("pip install ")
    assert rank_findings(enabled, cpu_ranks=False, ranks_here=False) == []
    assert rank_findings({section: {"enabled": False}}, cpu_ranks=True, ranks_here=True) == []
