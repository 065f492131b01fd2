"""A user's accelerate YAML as a launch, a compare strategy and a render target (no process starts here).

Oracles: accelerate's own ``launch_command`` (run up to the point where it would start processes) for the
environment a YAML gives the training process; accelerate's ``ClusterConfig`` for what a written YAML means;
dsbench's shipped zero2.json for the optimizer section a rendered config carries.
"""

from __future__ import annotations

import json
import os
import shlex

import pytest
import yaml

from dsbench.bench.matrix import cell_launch_args, expand
from dsbench.configs import accelerate_check, accelerate_explain, accelerate_worker
from dsbench.errors import UserError
from dsbench.launch_request import strategy_and_launcher
from dsbench.launchers.accelerate import check_to_accelerate
from tests.accelerate_oracle import accelerate_env as launched_env
from tests.conftest import DATA, ROOT

CORPUS = DATA / "corpus" / "accelerate"
BAD = DATA / "bad" / "accelerate"
TRL_ZERO2 = CORPUS / "huggingface__trl__examples_accelerate_configs_deepspeed_zero2.yaml"
DYME = CORPUS / "HKUST-LongGroup__DyME__default_config.yaml"
FSDP1 = CORPUS / "OptimalScale__LMFlow__configs_accelerate_fsdp_config.yaml"


def _command(output: str) -> list[str]:
    line = next(line for line in output.splitlines() if "accelerate launch" in line or "bash " in line)
    return shlex.split(line)


def test_the_yaml_picks_engine_and_launcher():
    assert strategy_and_launcher(None, None, None) == ("deepspeed", "deepspeed")
    assert strategy_and_launcher("ddp", "torchrun", None) == ("ddp", "torchrun")
    assert strategy_and_launcher(None, "accelerate", "a.yaml") == ("auto", "accelerate")
    with pytest.raises(UserError, match="--strategy ddp would be ignored"):
        strategy_and_launcher("ddp", None, "a.yaml")
    with pytest.raises(UserError, match="drop --launcher torchrun"):
        strategy_and_launcher(None, "torchrun", "a.yaml")


def test_dry_run_prints_accelerate_launch_on_the_users_file(cli_run, tmp_path):
    result = cli_run("launch", "--accelerate-config", str(TRL_ZERO2), "--num-processes", "2", "--precision", "fp32",
                     "--run-dir", "r", "--dry-run", "--", "--steps", "3")
    assert result.exit_code == 0, result.output
    argv = _command(result.output)
    start = argv.index("accelerate")
    assert argv[start:start + 12] == ["accelerate", "launch", "--config_file", str(TRL_ZERO2), "--num_processes",
                                      "2", "--mixed_precision", "no", "--main_process_port", "29500", "--module",
                                      "dsbench.train"]
    assert "DS_ACCELERATOR=cpu" in result.output.splitlines()[-1]
    run = json.loads((tmp_path / "r" / "run.json").read_text())
    assert run["strategy"] == "auto" and run["precision"] == "fp32" and run["steps"] == 3
    # the YAML as it was is kept beside the run; the user's file is never written
    assert (tmp_path / "r" / "accelerate_config.yaml").read_text() == TRL_ZERO2.read_text()


def test_the_yamls_own_port_and_count_are_kept_when_not_overridden(cli_run):
    moss = CORPUS / "OpenLMLab__MOSS-RLHF__accelerate_config.yaml"  # main_process_port 10532, num_processes 7
    result = cli_run("launch", "--accelerate-config", str(moss), "--run-dir", "r", "--dry-run")
    assert result.exit_code == 0, result.output
    argv = _command(result.output)
    assert "--main_process_port" not in argv and "--num_processes" not in argv


@pytest.mark.parametrize("name, flag, message", [
    ("inline_accum.yaml", "--grad-accum", "--grad-accum 2: the DeepSpeed config sets gradient_accumulation_steps to 4,"
     " which the ranks would use; change deepspeed_config.gradient_accumulation_steps in "),
    ("inline_accum.yaml", "--zero", "the YAML decides what --zero would set"),
    ("inline_accum.yaml", "--offload", "the YAML decides what --offload would set"),
    ("inline_accum.yaml", "--pipeline-schedule", "the YAML decides what --pipeline-schedule would set"),
    ("inline_accum.yaml", "--virtual-stages", "the YAML decides what --virtual-stages would set"),
])
def test_flags_the_yaml_would_override_are_refused(cli_run, name, flag, message):
    value = {"--grad-accum": "2", "--zero": "3", "--offload": "cpu", "--pipeline-schedule": "gpipe",
             "--virtual-stages": "2"}[flag]
    result = cli_run("launch", "--accelerate-config", str(BAD / name), flag, value, "--run-dir", "r", "--dry-run")
    assert result.exit_code == 2 and message in result.output


def test_worker_flags_fill_what_the_yaml_leaves_to_the_script(cli_run, tmp_path):
    result = cli_run("launch", "--accelerate-config", str(TRL_ZERO2), "--num-processes", "2", "--grad-accum", "4",
                     "--micro-batch", "3", "--run-dir", "r", "--dry-run")
    assert result.exit_code == 0, result.output
    run = json.loads((tmp_path / "r" / "run.json").read_text())
    assert (run["grad_accum"], run["micro_batch"]) == (4, 3)


def test_a_deepspeed_file_with_its_own_accumulation_refuses_the_flag(cli_run, tmp_path):
    (tmp_path / "ds.json").write_text(json.dumps({"gradient_accumulation_steps": 8, "train_micro_batch_size_per_gpu":
                                                  "auto", "zero_optimization": {"stage": 2}}))
    (tmp_path / "a.yaml").write_text("distributed_type: DEEPSPEED\nnum_processes: 2\ndeepspeed_config:\n"
                                     "  deepspeed_config_file: ds.json\n")
    result = cli_run("launch", "--accelerate-config", "a.yaml", "--grad-accum", "2", "--run-dir", "r", "--dry-run")
    assert result.exit_code == 2 and "change gradient_accumulation_steps in ds.json" in result.output
    assert cli_run("launch", "--accelerate-config", "a.yaml", "--micro-batch", "2", "--run-dir", "r2",
                   "--dry-run").exit_code == 0


@pytest.mark.parametrize("flag, value, key", [("--warmup-steps", "5", "scheduler.params.warmup_num_steps to 0"),
                                              ("--lr", "0.01", "optimizer.params.lr to 0.001")])
def test_a_launch_flag_the_deepspeed_file_decides_is_refused(cli_run, tmp_path, flag, value, key):
    """dsbench launch's own flags reach the worker as its fields (launch.launch_fields), so a DeepSpeed file that
    decides them is asked as for the flags after --. Until 2026-11-30 13:20 `--warmup-steps 5` beside a file that
    names its optimizer and no scheduler was accepted and trained at a constant LR, and `--lr` beside a file's own
    lr was accepted and ignored; a file that leaves lr "auto" and names no optimizer takes both."""
    (tmp_path / "ds.json").write_text(json.dumps({"train_micro_batch_size_per_gpu": "auto", "zero_optimization":
                                                  {"stage": 2}, "optimizer": {"type": "AdamW",
                                                                              "params": {"lr": 0.001}}}))
    (tmp_path / "open.json").write_text(json.dumps({"train_micro_batch_size_per_gpu": "auto",
                                                    "zero_optimization": {"stage": 2}}))
    for name, file in (("a.yaml", "ds.json"), ("open.yaml", "open.json")):
        (tmp_path / name).write_text("distributed_type: DEEPSPEED\nnum_processes: 2\ndeepspeed_config:\n"
                                     f"  deepspeed_config_file: {file}\n")
    result = cli_run("launch", "--accelerate-config", "a.yaml", flag, value, "--run-dir", "r", "--dry-run")
    assert result.exit_code == 2 and f"{flag} {value}: the DeepSpeed config sets {key}" in result.output
    assert "change" in result.output and "in ds.json" in result.output
    result = cli_run("launch", "--accelerate-config", "open.yaml", flag, value, "--run-dir", "r2", "--dry-run")
    assert result.exit_code == 0, result.output


def test_overrides_are_checked_like_the_yaml(cli_run, tmp_path):
    (tmp_path / "two.yaml").write_text("distributed_type: MULTI_GPU\nnum_machines: 2\nnum_processes: 4\n"
                                       "machine_rank: 0\nmain_process_ip: 10.0.0.1\n")
    result = cli_run("launch", "--accelerate-config", "two.yaml", "--num-processes", "3", "--run-dir", "r",
                     "--dry-run")
    assert result.exit_code == 1 and "3 processes do not split over 2 machines" in result.output
    result = cli_run("launch", "--accelerate-config", "two.yaml", "--run-dir", "r2", "--dry-run")
    assert result.exit_code == 0, result.output  # this machine's part: accelerate reads rank and address from it
    assert "--machine_rank" not in _command(result.output)


def test_a_hostfile_spreads_the_yaml_over_its_machines(cli_run, tmp_path):
    (tmp_path / "hosts").write_text("node1 slots=2\nnode2 slots=2\n")
    result = cli_run("launch", "--accelerate-config", str(TRL_ZERO2), "--hostfile", "hosts", "--run-dir", "r",
                     "--dry-run")
    assert result.exit_code == 0, result.output
    script = (tmp_path / "r" / "launch_nodes.sh").read_text()
    for rank in (0, 1):
        assert f"--machine_rank {rank}" in script
    assert "--num_processes 4 --num_machines 2 --main_process_ip node1" in script
    bad = cli_run("launch", "--accelerate-config", str(TRL_ZERO2), "--hostfile", "hosts", "--num-processes", "2",
                  "--run-dir", "r2", "--dry-run")
    assert bad.exit_code == 2 and "--num-processes 2 disagrees with hosts (4)" in bad.output


@pytest.mark.parametrize("args, message", [
    (["--num-processes", "2"], "--num-processes goes with --accelerate-config"),
    (["--accelerate-config", str(TRL_ZERO2), "--num-gpus", "2"], "drop --num-gpus"),
    (["--accelerate-config", str(BAD / "no_processes.yaml")], "has no num_processes: give --num-processes N"),
])
def test_launch_misuse_is_one_line(cli_run, args, message):
    result = cli_run("launch", *args, "--run-dir", "r", "--dry-run")
    assert result.exit_code == 2 and message in result.output


@pytest.mark.parametrize("name, key", [
    ("sequence_parallel_fsdp.yaml", "parallelism_config.parallelism_config_sp_size 2: accelerate's context/tensor "
                                    "parallelism, sequence parallelism outside DeepSpeed"),
    ("sequence_parallel_uneven.yaml", "parallelism_config_sp_size 2 does not divide the 3 processes"),
    ("multi_cpu.yaml", "distributed_type MULTI_CPU")])
def test_what_the_worker_cannot_honour_is_named(name, key):
    config = yaml.safe_load((BAD / name).read_text())
    assert key in accelerate_worker.worker_refusal(config, config["num_processes"])


def test_every_single_node_corpus_yaml_is_runnable():
    for path in CORPUS.iterdir():
        config = yaml.safe_load(path.read_text())
        if all(finding.severity != "error" for finding in accelerate_check.check(config)):
            assert accelerate_worker.worker_refusal(config, 2) is None, path.name


def test_notes_say_what_the_worker_does_differently():
    notes = accelerate_worker.worker_notes(yaml.safe_load((CORPUS / "huggingface__trl__examples_accelerate_configs_"
                                                              "deepspeed_zero3.yaml").read_text()))
    assert any("zero3_init_flag" in note for note in notes)
    assert any("SIZE_BASED_WRAP" in note for note in accelerate_worker.worker_notes(
        {"distributed_type": "FSDP", "fsdp_config": {"fsdp_auto_wrap_policy": "SIZE_BASED_WRAP"}}))


@pytest.mark.parametrize("dynamo", [{"dynamo_config": {"dynamo_backend": "INDUCTOR", "dynamo_mode": "default"}},
                                    {"dynamo_backend": "INDUCTOR"}, {"dynamo_backend": "NO"}, {"dynamo_config": {}},
                                    {}])
def test_a_yamls_dynamo_backend_is_noted_in_either_spelling_accelerate_reads(tmp_path, dynamo):
    """The oracle: accelerate's own loading of the file (ClusterConfig.from_yaml_file moves a top-level
    dynamo_backend into dynamo_config), whose backend the launch exports to the script. The note names it unless
    the worker's own --compile was given."""
    from accelerate.commands.config.config_args import ClusterConfig

    config = {"compute_environment": "LOCAL_MACHINE", "distributed_type": "MULTI_GPU", "num_processes": 2,
              "mixed_precision": "no", **dynamo}
    path = tmp_path / "acc.yaml"
    path.write_text(yaml.safe_dump(config))
    backend = (ClusterConfig.from_yaml_file(str(path)).dynamo_config or {}).get("dynamo_backend", "NO")
    noted = [note for note in accelerate_worker.worker_notes(config) if "dynamo_backend" in note]
    assert bool(noted) == (backend != "NO") and all(backend in note for note in noted)
    assert not [note for note in accelerate_worker.worker_notes(config, compiled=True) if "dynamo" in note]
    said = [line for line in accelerate_explain.explain(config) if line.startswith("compilation:")]
    assert said == ([f"compilation: accelerate torch.compiles the model (dynamo backend {backend}, mode default) as it "
                     "prepares it"] if backend != "NO" else [])


def test_the_script_brings_the_optimizer_dsbench_renders():
    shipped = json.loads((ROOT / "ds_configs" / "zero2.json").read_text())
    config, added = accelerate_worker.with_script_optimizer({"zero_optimization": {"stage": 2}}, warmup_steps=0)
    assert added == ["optimizer"] and config["optimizer"] == shipped["optimizer"] and "scheduler" not in config
    config, added = accelerate_worker.with_script_optimizer({"optimizer": {"type": "Adam"}}, warmup_steps=10)
    assert added == ["scheduler"] and config["optimizer"] == {"type": "Adam"}
    assert config["scheduler"] == shipped["scheduler"]


def _accelerate_env(path, *extra: str) -> dict[str, str]:
    """The environment accelerate's own launch_command gives the training process for ``path``."""
    return launched_env(["--config_file", str(path), "--num_processes", "2", *extra, "-m", "dsbench.train"])


@pytest.mark.parametrize("path", [TRL_ZERO2, DYME, CORPUS / "OpenLMLab__MOSS-RLHF__accelerate_config.yaml"])
def test_the_worker_reads_the_deepspeed_config_accelerate_builds(path, monkeypatch):
    from dsbench.worker import accelerate_env

    env = _accelerate_env(path, "--mixed_precision", "no")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert accelerate_env.inline_deepspeed(os.environ)
    config, added = accelerate_env.deepspeed_config(warmup_steps=0)
    expected = accelerate_worker.to_deepspeed({**yaml.safe_load(path.read_text()), "mixed_precision": "no"})
    assert added == ["optimizer"] and {k: v for k, v in config.items() if k != "optimizer"} == expected
    assert accelerate_env.launcher_env(os.environ)["ACCELERATE_USE_DEEPSPEED"] == "true"


@pytest.mark.parametrize("path, reshard, version", [
    (FSDP1, True, 1),
    (BAD / "fsdp_v1_key.yaml", None, 2),
])
def test_the_worker_reads_fsdp_as_accelerate_does(path, reshard, version, monkeypatch, tmp_path):
    from dsbench.worker import accelerate_env

    if reshard is None:  # an FSDP2 YAML without the FSDP1 key: reshard_after_forward false
        config = yaml.safe_load(path.read_text())
        config["fsdp_config"] = {"fsdp_version": 2, "fsdp_reshard_after_forward": False}
        path = tmp_path / "fsdp2.yaml"
        path.write_text(yaml.safe_dump(config))
    launched = _accelerate_env(path)
    for key, value in launched.items():
        monkeypatch.setenv(key, value)
    settings = accelerate_env.fsdp_settings(reshard=True, cpu_offload=False, activation_checkpointing=False)
    # accelerate's plugin rewrites FSDP_CPU_RAM_EFFICIENT_LOADING; the header records what accelerate launch set
    assert accelerate_env.launcher_env(os.environ) == launched
    assert settings["reshard"] is (reshard if reshard is not None else False)
    assert settings["accelerate"]["fsdp_version"] == version and settings["cpu_offload"] is False


def test_compare_labels_a_yaml_by_its_file_name(tmp_path):
    cells = expand(["ddp", f"accel:{TRL_ZERO2}"], [2], [2], ["gpt2-tiny"])
    yaml_cell = next(c for c in cells if c.accelerate_config)
    assert yaml_cell.strategy == f"accel:{TRL_ZERO2.name}" and ":" not in yaml_cell.id and "/" not in yaml_cell.id
    args = cell_launch_args(yaml_cell, tmp_path / "cell")
    assert args[:6] == ["--accelerate-config", str(TRL_ZERO2), "--num-processes", "2", "--num-machines", "1"]
    assert args[args.index("--precision") + 1] == "fp32"
    with pytest.raises(UserError, match="twice"):
        expand([f"accel:{TRL_ZERO2}", f"accel:{tmp_path / TRL_ZERO2.name}"], [2], [2], ["gpt2-tiny"])
    with pytest.raises(UserError, match="accel:PATH.yaml"):
        expand(["zero9"], [2], [2], ["gpt2-tiny"])


def test_compare_refuses_a_bad_yaml_before_any_cell(cli_run, tmp_path):
    result = cli_run("compare", "--strategies", f"ddp,accel:{BAD / 'multi_cpu.yaml'}", "--out", "c")
    assert result.exit_code == 2 and "distributed_type MULTI_CPU" in result.output
    result = cli_run("compare", "--strategies", f"ddp,accel:{BAD / 'plugin_typo.yaml'}", "--out", "c")
    assert result.exit_code == 1 and "zero_stagee" in result.output
    assert not (tmp_path / "c").exists()


def test_to_accelerate_writes_what_accelerate_reads(cli_run, tmp_path):
    from accelerate.commands.config.config_args import ClusterConfig

    result = cli_run("render", "--zero", "3", "--offload", "cpu", "--world-size", "4", "-o", "ds.json",
                     "--to-accelerate", "acc.yaml")
    assert result.exit_code == 0, result.output
    loaded = ClusterConfig.from_yaml_file(str(tmp_path / "acc.yaml"))
    assert loaded.distributed_type == "DEEPSPEED" and loaded.num_processes == 4
    assert loaded.deepspeed_config["deepspeed_config_file"] == "ds.json" and loaded.mixed_precision is None
    assert json.loads((tmp_path / "ds.json").read_text())["zero_optimization"]["stage"] == 3
    assert cli_run("validate", "acc.yaml").exit_code == 0
    result = cli_run("render", "--strategy", "fsdp", "--precision", "bf16", "--world-size", "2", "--to-accelerate",
                     "fsdp.yaml")
    assert result.exit_code == 0, result.output
    loaded = ClusterConfig.from_yaml_file(str(tmp_path / "fsdp.yaml"))
    assert loaded.distributed_type == "FSDP" and loaded.mixed_precision == "bf16"
    assert loaded.fsdp_config["fsdp_version"] == 2


def test_to_accelerate_with_a_hostfile_names_its_machines(cli_run, tmp_path):
    (tmp_path / "hosts").write_text("node1 slots=2\nnode2 slots=2\n")
    result = cli_run("render", "--strategy", "ddp", "--hostfile", "hosts", "--to-accelerate", "ddp.yaml")
    assert result.exit_code == 0, result.output
    config = yaml.safe_load((tmp_path / "ddp.yaml").read_text())
    assert (config["num_machines"], config["num_processes"], config["main_process_ip"]) == (2, 4, "node1")
    header = (tmp_path / "ddp.yaml").read_text().split("\ncompute_environment")[0]
    assert "--machine_rank R" in header and "main_process_ip below" not in header  # node1 is set, no placeholder


@pytest.mark.parametrize("how", ["render", "launch", "user_yaml"])
def test_a_hostfile_with_uneven_slots_is_refused_for_accelerate_before_anything_is_written(cli_run, tmp_path, how):
    """accelerate starts num_processes // num_machines on every machine (its own launch code, below): slots 2, 2, 1
    would start 1 a node, not 5. Refused in one line, and no file is written (until 2026-12-01 both wrote 5)."""
    from accelerate.commands.launch import launch_command_parser
    from accelerate.utils.launch import prepare_multi_gpu_env

    args = launch_command_parser().parse_args(shlex.split(
        "--num_processes 5 --num_machines 3 --machine_rank 0 --main_process_ip node1 --main_process_port 29500 "
        "--mixed_precision no --dynamo_backend no -m dsbench.train"))
    prepare_multi_gpu_env(args)
    assert (args.nproc_per_node, args.nnodes) == ("1", "3")  # 5 // 3 a machine: the oracle
    (tmp_path / "hosts").write_text("node1 slots=2\nnode2 slots=2\nnode3 slots=1\n")
    if how == "render":
        result = cli_run("render", "--zero", "2", "--hostfile", "hosts", "-o", "ds.json", "--to-accelerate", "a.yaml")
    elif how == "launch":
        result = cli_run("launch", "--launcher", "accelerate", "--zero", "2", "--hostfile", "hosts", "--dry-run",
                         "--run-dir", "run")
    else:  # the user's own YAML, its machines given by the hostfile
        (tmp_path / "u.yaml").write_text(yaml.safe_dump({
            "compute_environment": "LOCAL_MACHINE", "distributed_type": "MULTI_GPU", "num_machines": 3,
            "num_processes": 5, "main_process_ip": "node1", "machine_rank": 0, "mixed_precision": "no",
            "use_cpu": True}))
        result = cli_run("launch", "--accelerate-config", "u.yaml", "--hostfile", "hosts", "--dry-run", "--run-dir",
                         "run")
    assert result.exit_code == 2 and "different slot counts [1, 2]" in result.output, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["hosts", *["u.yaml"] * (how == "user_yaml")])


@pytest.mark.parametrize("kind, given, output, message", [
    ("deepspeed", [], None, "needs -o FILE.json"),
    ("fsdp", ["--zero"], None, "--zero would be lost"),
    ("ddp", ["--micro-batch"], None, "--micro-batch would be lost"),
    ("ddp", [], "x.json", "-o would be lost"),
])
def test_to_accelerate_refusals(kind, given, output, message):
    with pytest.raises(UserError, match=message):
        check_to_accelerate(kind, given, output)
    check_to_accelerate(kind, ["--precision"], "x.json" if kind == "deepspeed" else None)


@pytest.mark.parametrize("mpirun", [{}, {"mpirun_config": {"mpirun_hostfile": "hosts", "mpirun_ccl": 1}}])
def test_explain_says_multi_cpu_starts_one_process_without_mpirun_as_the_launch_refuses_it(mpirun):
    """Measured (../shared/FINDINGS.md): `distributed_type: MULTI_CPU` with `num_processes: 2` and no MPI started a
    single process (accelerate's simple_launcher prepends mpirun only for an mpirun_hostfile). explain says so, and
    the launch refuses it saying why; with a hostfile the launch refuses it for what dsbench does not start."""
    config = {"distributed_type": "MULTI_CPU", "num_processes": 2, "num_machines": 1, "mixed_precision": "no",
              **mpirun}
    first = accelerate_explain.explain(config)[0]
    refused = accelerate_worker.worker_refusal(config, 2)
    assert first.startswith("`accelerate launch` starts one process, not 2") is (not mpirun)
    assert first.startswith("`accelerate launch` starts 2 process(es)") is bool(mpirun)
    assert ("starts one process for it without mpirun" in refused) is (not mpirun)
    assert ("mpirun launches (mpirun_config)" in refused) is bool(mpirun)  # the worker still does not start those


TRL_ALST = CORPUS / "huggingface__trl__examples_accelerate_configs_alst_ulysses_4gpu.yaml"


def _alst_as_fixed(tmp_path) -> str:
    """TRL's ALST YAML with the one line validation refuses deleted, as its fix says (the key is a DeepSpeed JSON
    key that accelerate's inline settings never read)."""
    fixed = tmp_path / "alst.yaml"
    fixed.write_text("".join(line for line in TRL_ALST.read_text().splitlines(keepends=True)
                             if "seq_parallel_communication_data_type" not in line))
    return str(fixed)


def test_trls_alst_yaml_runs_as_deepspeed_ulysses_once_its_dead_key_is_deleted(cli_run, tmp_path):
    """TRL's ALST/Ulysses example (ZeRO-3, parallelism_config sp_size 2 with sp_backend deepspeed, 4 processes) was
    refused until 2026-12-03 as "sequence parallelism"; it is DeepSpeed Ulysses, which the worker runs. As typed, one
    key stops it: a DeepSpeed JSON key set inline, where accelerate never reads it (the fix says where it goes).
    The oracle for what reaches the ranks: accelerate's own launch_command, whose environment the worker turns into
    the DeepSpeed config's sequence_parallel_size (worker/accelerate_env.with_ulysses)."""
    from unittest import mock

    from dsbench.worker import accelerate_env

    typed = cli_run("validate", str(TRL_ALST))
    assert typed.exit_code == 1 and "seq_parallel_communication_data_type" in typed.output
    assert "key of DeepSpeed's JSON config" in typed.output and "deepspeed_config_file" in typed.output
    fixed = _alst_as_fixed(tmp_path)
    config = yaml.safe_load(open(fixed).read())
    assert accelerate_worker.worker_refusal(config, 4) is None
    assert any("DeepSpeed Ulysses (ALST) over 2 consecutive processes" in line and "2 such groups" in line
               for line in accelerate_explain.explain(config))
    result = cli_run("launch", "--accelerate-config", fixed, "--precision", "fp32", "--model", "llama-tiny",
                     "--run-dir", "r", "--dry-run")
    assert result.exit_code == 0, result.output
    words = _command(result.output)
    env = launched_env(words[words.index("accelerate") + 2:])
    assert (env["PARALLELISM_CONFIG_SP_SIZE"], env["PARALLELISM_CONFIG_SP_BACKEND"]) == ("2", "deepspeed")
    with mock.patch.dict(os.environ, env):
        inline = accelerate_env.deepspeed_config(0)[0]
    assert "sequence_parallel_size" not in inline  # accelerate hands its degree to DeepSpeed's mpu, not the config
    assert accelerate_env.with_ulysses(inline, "plugin", env)["sequence_parallel_size"] == 2
    assert accelerate_env.with_ulysses(inline, "plugin", {**env, "PARALLELISM_CONFIG_SP_SIZE": "1"}) == inline
    with pytest.raises(UserError, match="ds.json: sequence_parallel_size 4, but accelerate's parallelism_config asks "
                                        "for sp_size 2"):
        accelerate_env.with_ulysses({**inline, "sequence_parallel_size": 4}, "ds.json", env)
    # the model and sequence are checked against the Ulysses groups before anything starts
    short = cli_run("launch", "--accelerate-config", fixed, "--precision", "fp32", "--model", "llama-tiny",
                    "--run-dir", "r2", "--dry-run", "--", "--seq-len", "127")
    named = f"{fixed}: --seq-len 127 must split into parallelism_config sp_size 2 equal shards"  # the YAML's setting
    assert short.exit_code == 2 and named in short.output


def test_render_from_an_alst_yaml_writes_the_ulysses_degree_deepspeed_divides_by(cli_run, tmp_path):
    """`render --from-accelerate` on an ALST YAML writes sp_size as sequence_parallel_size: a `deepspeed` launch of
    the file and transformers' ZeRO-3 zero.Init build DeepSpeed's config with no mpu and divide the world by that key
    (deepspeed runtime/config.py). Oracle for the degree: accelerate's own launch_command environment. The file,
    named by the YAML in place of its inline settings, reaches the ranks unchanged and launches."""
    from dsbench.worker import accelerate_env

    fixed = _alst_as_fixed(tmp_path)
    result = cli_run("render", "--from-accelerate", fixed, "-o", str(tmp_path / "alst.json"))
    assert result.exit_code == 0, result.output
    rendered = json.loads((tmp_path / "alst.json").read_text())
    typed = cli_run("launch", "--accelerate-config", fixed, "--precision", "fp32", "--model", "llama-tiny",
                    "--run-dir", "r", "--dry-run")
    words = _command(typed.output)
    env = launched_env(words[words.index("accelerate") + 2:])
    assert rendered["sequence_parallel_size"] == int(env["PARALLELISM_CONFIG_SP_SIZE"]) == 2
    assert accelerate_env.with_ulysses(rendered, "alst.json", env) == rendered
    config = yaml.safe_load(open(fixed).read())
    config["deepspeed_config"] = {"deepspeed_config_file": "alst.json"}
    del config["mixed_precision"]  # accelerate refuses it beside a file (which says bf16: --precision fp32 below)
    (tmp_path / "named.yaml").write_text(yaml.safe_dump(config))
    named = cli_run("launch", "--accelerate-config", str(tmp_path / "named.yaml"), "--precision", "fp32",
                    "--model", "llama-tiny", "--run-dir", str(tmp_path / "r2"), "--dry-run")
    assert named.exit_code == 0, named.output
    # a YAML without sequence parallelism renders no such key
    plain = cli_run("render", "--from-accelerate", str(CORPUS / "huggingface__trl__examples_accelerate_configs_"
                                                                 "deepspeed_zero3.yaml"))
    assert plain.exit_code == 0 and "sequence_parallel_size" not in plain.output


@pytest.mark.parametrize("config", [
    {"distributed_type": "MULTI_CPU", "num_processes": 2},
    {"distributed_type": "MULTI_CPU", "num_processes": 2, "mpirun_config": {"mpirun_hostfile": "hosts"}},
    {"distributed_type": "MULTI_CPU", "num_processes": 1},
    {"distributed_type": "MULTI_GPU", "num_processes": 2},
    {"distributed_type": "MULTI_GPU", "num_processes": 2, "use_cpu": True},
    {"distributed_type": "NO", "num_processes": 1},
])
def test_validate_warns_where_accelerate_starts_fewer_processes_than_the_yaml_asks(tmp_path, config):
    """Until 2026-12-04 `dsbench validate` called a MULTI_CPU YAML of 2 processes valid without a word while explain
    and the launch said accelerate starts one. Oracle: the launcher accelerate's own launch_command picks for it,
    and the processes that launcher starts."""
    from tests.accelerate_oracle import accelerate_launcher

    full = {"compute_environment": "LOCAL_MACHINE", "num_machines": 1, "machine_rank": 0, "mixed_precision": "no",
            **config}
    path = tmp_path / "a.yaml"
    path.write_text(yaml.safe_dump(full))
    _, started = accelerate_launcher(["--config_file", str(path), "train.py"])
    warned = [f for f in accelerate_check.check(full) if f.path == "num_processes" and f.severity == "warning"]
    assert bool(warned) is (started < full["num_processes"]), (started, warned)
