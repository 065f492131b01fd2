import json
import subprocess
import sys

import pytest

from tests.conftest import CORPUS, ROOT

HEAVY = ("torch", "deepspeed", "transformers", "accelerate", "datasets")

LAZY_CHECK = """
import sys
from click.testing import CliRunner
from dsbench.cli import cli
runner = CliRunner()
for args in {commands!r}:
    result = runner.invoke(cli, args)
    assert result.exit_code == 0, (args, result.output)
heavy = sorted(m for m in sys.modules if m.split('.')[0] in {heavy!r})
print(heavy)
"""


@pytest.mark.parametrize("commands", [
    [["--help"]] + [[c, "--help"] for c in ("render", "validate", "explain", "launch", "presets", "hostfile")]
    + [["hostfile", "check", "--help"]],
    [["render", "--preset", "zero3_offload", "--model", "gpt2"], ["presets"],
     ["hostfile", "check", str(ROOT / "hostfiles" / "a100")],
     ["validate", "--no-deepspeed-check", str(ROOT / "ds_configs" / "zero3.json"), "--allow-auto"],
     ["explain", str(ROOT / "ds_configs" / "zero2_offload.json")]],
], ids=["help", "pure-commands"])
def test_cli_does_not_import_heavy_modules(commands):
    out = subprocess.run([sys.executable, "-c", LAZY_CHECK.format(commands=commands, heavy=HEAVY)],
                         capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_render_to_file_is_atomic_and_valid(cli_run, tmp_path):
    result = cli_run("render", "--preset", "zero3_offload", "--world-size", "2", "--micro-batch", "2",
                     "--model", "gpt2-tiny", "-o", "out/ds.json")
    assert result.exit_code == 0, result.output
    written = json.loads((tmp_path / "out" / "ds.json").read_text())
    assert written["zero_optimization"]["offload_param"]["device"] == "cpu"
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["ds.json"]  # no temp files left
    assert cli_run("validate", "out/ds.json", "--world-size", "2").exit_code == 0


def test_render_never_writes_over_a_file_that_holds_something_else(cli_run, tmp_path):
    """A user's own file at -o or --to-accelerate stays as it was (until 2026-12-03 render replaced it); the same
    render again is taken (it changes nothing), another one is refused in one line."""
    (tmp_path / "mine.json").write_text('{"train_batch_size": 8}')
    refused = cli_run("render", "--zero", "2", "-o", "mine.json")
    assert refused.exit_code == 2 and "mine.json exists and holds something else: give -o a new file" in refused.output
    assert (tmp_path / "mine.json").read_text() == '{"train_batch_size": 8}'
    assert cli_run("render", "--zero", "2", "-o", "ds.json").exit_code == 0
    assert cli_run("render", "--zero", "2", "-o", "ds.json").exit_code == 0
    assert cli_run("render", "--zero", "3", "-o", "ds.json").exit_code == 2
    (tmp_path / "mine.yaml").write_text("compute_environment: LOCAL_MACHINE\n")
    refused = cli_run("render", "--zero", "2", "-o", "new.json", "--to-accelerate", "mine.yaml", "--world-size", "2")
    assert refused.exit_code == 2 and "give --to-accelerate a new file" in refused.output
    assert not (tmp_path / "new.json").exists()  # checked before either file is written
    assert (tmp_path / "mine.yaml").read_text() == "compute_environment: LOCAL_MACHINE\n"


def test_a_launch_never_writes_over_a_users_file_in_its_run_folder(cli_run, tmp_path):
    """--run-dir holding a user's ds_config.json, or --config naming the file the launch writes its checked copy to,
    is refused and the file stays as it was (until 2026-12-03 both were rewritten); a dry run's folder is launched
    into again."""
    mine = '{"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 2}}  // my notes\n'
    (tmp_path / "own").mkdir()
    (tmp_path / "own" / "ds_config.json").write_text(mine)
    refused = cli_run("launch", "--run-dir", "own", "--dry-run")
    assert refused.exit_code == 2
    assert "--run-dir own holds ds_config.json, which no dsbench launch wrote" in refused.output
    refused = cli_run("launch", "--config", "own/ds_config.json", "--run-dir", "own", "--dry-run")
    assert refused.exit_code == 2 and "--config own/ds_config.json is the file the launch writes" in refused.output
    assert (tmp_path / "own" / "ds_config.json").read_text() == mine
    assert cli_run("launch", "--run-dir", "dry", "--dry-run").exit_code == 0
    assert cli_run("launch", "--run-dir", "dry", "--dry-run").exit_code == 0  # its own run.json: a launch's folder


def test_render_with_hostfile_counts_slots(cli_run):
    result = cli_run("render", "--hostfile", str(ROOT / "hostfiles" / "a100"), "--micro-batch", "2",
                     "--exclude", "node2")
    assert json.loads(result.stdout)["train_batch_size"] == 16


def test_validate_json_output(cli_run, tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "fp16": {"enabled": True, "bogus": 1}}))
    result = cli_run("validate", str(path), "--json", "--world-size", "4")
    payload = json.loads(result.stdout)
    assert result.exit_code == 1 and payload["valid"] is False and payload["world_size"] == 4
    assert payload["findings"][0] == {"severity": "error", "code": "unknown-key", "path": "fp16.bogus",
                                      "message": "DeepSpeed 0.19.8 has no key 'bogus' at 'fp16'",
                                      "fix": "delete it or check the DeepSpeed config docs"}


def test_validate_says_a_trainer_configs_auto_values_in_one_line(cli_run, tmp_path):
    """A Trainer config (the corpus' LLaVA ZeRO-3 offload: 16 "auto" values) gave 16 ERROR lines, each repeating one
    explanation and one fix (until 2026-12-03): they are one line now, each key with what TrainingArguments'
    defaults make it (the oracle: transformers' own TrainingArguments), as --json gives each finding."""
    from transformers import TrainingArguments

    trainer = TrainingArguments(output_dir=str(tmp_path / "unused"))
    path = ROOT / "tests" / "data" / "corpus" / "ds_configs" / "haotian-liu__LLaVA__scripts_zero3_offload.json"
    for flags, severity in (((), "ERROR  "), (("--allow-auto",), "WARNING")):
        lines = cli_run("validate", str(path), *flags).stdout.splitlines()
        assert len(lines) == 2 and lines[0].startswith(f"{severity} 16 values are 'auto': fp16.enabled, bf16.enabled, "
                                                       f"optimizer.params.lr ({trainer.learning_rate}), ")
        for key, default in (("optimizer.params.eps", trainer.adam_epsilon),
                             ("gradient_clipping", trainer.max_grad_norm),
                             ("train_micro_batch_size_per_gpu", trainer.per_device_train_batch_size),
                             ("optimizer.params.betas", [trainer.adam_beta1, trainer.adam_beta2])):
            assert f"{key} ({json.dumps(default)})" in lines[0], key
        assert lines[1].endswith(" 16 warnings)" if flags else " 0 warnings)")
    findings = json.loads(cli_run("validate", str(path), "--json").stdout)["findings"]
    assert len(findings) == 16 and {f["path"]: f.get("becomes") for f in findings}["optimizer.params.lr"] == "5e-05"


def test_explain_says_what_is_sharded_and_offloaded(cli_run):
    result = cli_run("explain", str(ROOT / "ds_configs" / "zero3_offload.json"), "--world-size", "8")
    text = result.output
    assert "ZeRO-3: parameters, gradients and optimizer states are all partitioned" in text
    assert "optimizer states offloaded to CPU RAM (pinned host memory)" in text
    assert "parameters offloaded to CPU RAM" in text and "batch: 'auto', the HF Trainer's" in text


def test_explain_names_zero_plus_plus_in_its_papers_words(cli_run, tmp_path):
    """The ZeRO++ tutorial's three switches (deepspeed.ai/tutorials/zeropp), keys DeepSpeed's own config classes
    accept (validate runs them), said as the paper's qwZ, hpZ and qgZ; none of them, no line."""
    config = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
              "zero_optimization": {"stage": 3, "zero_quantized_weights": True, "zero_hpz_partition_size": 8,
                                    "zero_quantized_gradients": True}}
    path = tmp_path / "zeropp.json"
    path.write_text(json.dumps(config))
    assert cli_run("validate", str(path), "--world-size", "16").exit_code == 0
    text = " ".join(cli_run("explain", str(path)).output.split())
    assert ("ZeRO++: qwZ: the weights all-gathered in int8, quantized block by block (zero_quantized_weights); hpZ: a "
            "second copy of the parameters partitioned over groups of 8 ranks") in text
    assert "qgZ: the gradients reduce-scattered in int4 by all-to-all" in text
    config["zero_optimization"] = {"stage": 3, "zero_hpz_partition_size": 1}
    path.write_text(json.dumps(config))
    assert "ZeRO++" not in cli_run("explain", str(path)).output


def test_launch_dry_run_prints_a_runnable_command(cli_run, tmp_path):
    result = cli_run("launch", "--zero", "3", "--offload", "cpu", "--dry-run", "--run-dir", "r")
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert lines[-1].startswith("DSBENCH_DEVICE=cpu DS_ACCELERATOR=cpu OMP_NUM_THREADS=1 deepspeed --num_gpus 2")
    assert lines[-1].endswith(f"--module dsbench.train --run-json {tmp_path}/r/run.json")
    config = json.loads((tmp_path / "r" / "ds_config.json").read_text())
    # the optimizer on the host, the parameters on the ranks (--offload-param is another flag): the ZeRO-3 engine
    # tests/integration/engine_ranks.py trains against one process (OFFLOADED)
    zero = config["zero_optimization"]
    assert zero["offload_optimizer"] == {"device": "cpu", "pin_memory": True} and "offload_param" not in zero
    assert config["optimizer"]["type"] == "AdamW"  # built by DeepSpeed as DeepSpeedCPUAdam on offloaded states
    run = json.loads((tmp_path / "r" / "run.json").read_text())  # the worker's typed input
    assert (run["strategy"], run["deepspeed_config"], run["out"]) == ("deepspeed", "r/ds_config.json", "r")


def test_launch_dry_run_accelerate_writes_and_shows_yaml(cli_run, tmp_path):
    result = cli_run("launch", "--launcher", "accelerate", "--preset", "zero2", "--dry-run", "--run-dir", "r",
                     "--", "--steps", "3")
    assert "distributed_type: DEEPSPEED" in result.output
    assert (tmp_path / "r" / "accelerate_config.yaml").is_file()
    assert result.output.strip().splitlines()[-1].endswith(f"--module dsbench.train --run-json {tmp_path}/r/run.json")
    assert json.loads((tmp_path / "r" / "run.json").read_text())["steps"] == 3


def test_launch_hostfile_dry_run_quotes_paths(cli_run, tmp_path):
    hostfile = tmp_path / "my hosts"
    hostfile.write_text("node1 slots=2\nnode2 slots=2\n")
    result = cli_run("launch", "--hostfile", str(hostfile), "--dry-run", "--run-dir", "r d")
    assert f"--hostfile '{hostfile}'" in result.output and f"'{tmp_path}/r d/run.json'" in result.output


@pytest.mark.parametrize("flags, rank_says", [
    ((), False),  # every rank here: the launch prints the figures as its last line, after the launcher's log lines
    (("--launcher", "torchrun", "--strategy", "ddp"), False),
    (("--hostfile", "{tmp}/hosts"), True),  # rank 0 on node1: its line reaches this terminal, its summary.json may not
    (("--launcher", "slurm"), True),  # submitted, not waited on: nothing here prints the figures
    (("--launcher", "slurm", "--wait"), False),  # the job's output is a file; the launch prints them when it ends
    (("--hostfile", "{tmp}/hosts", "--", "--quiet"), True),  # but a --quiet rank prints none: the launch does
])
def test_a_launch_says_its_figures_once(cli_run, tmp_path, flags, rank_says):
    """Rank 0's ``run:`` line and the launch's ``dsbench: finished`` line carried the same figures one after the
    other (until 2026-12-03): run.json's summary_line says which of the two prints them (the launch's line:
    tests/unit/test_records.py)."""
    (tmp_path / "hosts").write_text("node1 slots=2\nnode2 slots=2\n")
    from dsbench.trainspec import from_dict

    result = cli_run("launch", "--dry-run", "--run-dir", "r", *(flag.format(tmp=tmp_path) for flag in flags))
    assert result.exit_code == 0, result.output
    run = json.loads((tmp_path / "r" / "run.json").read_text())
    assert run["summary_line"] is rank_says
    assert from_dict(run, "run.json").prints_summary is (rank_says and "--quiet" not in flags)


def test_corpus_hostfile_check_exit_codes(cli_run):
    good = cli_run("hostfile", "check", str(CORPUS / "hostfiles" / "Gezy777__distributed_train__hostfile"))
    assert good.exit_code == 0 and "2 hosts, 2 slots" in good.output
    bad = cli_run("hostfile", "check", str(CORPUS / "hostfiles" / "BAfsharmanesh__Metis__hostfile"))
    assert bad.exit_code == 1 and "write 'IP1 slots=4'" in bad.output


def _all_commands(group, prefix=()):
    """Every (sub)command path of a click group."""
    import click

    for name, command in group.commands.items():
        yield (*prefix, name)
        if isinstance(command, click.Group):
            yield from _all_commands(command, (*prefix, name))


def test_every_command_help_exits_0_without_traceback(cli_run):
    from dsbench.cli import cli

    paths = list(_all_commands(cli))
    assert {"render", "launch", "compare", "report", "plan", "hostfile"} <= {p[0] for p in paths}
    for path in [(), *paths]:
        result = cli_run(*path, "--help")
        assert result.exit_code == 0 and "Usage:" in result.output and "Traceback" not in result.output, path


@pytest.mark.parametrize("argv, code, needle", [
    (["-m", "dsbench", "--version"], 0, "dsbench, version"),
    (["-m", "dsbench", "--help"], 0, "Usage:"),
    (["-m", "dsbench.train", "--help"], 0, "usage: python -m dsbench.train"),
    (["-m", "dsbench.train", "--version"], 0, "dsbench "),
    (["-m", "dsbench.train", "--steps", "x"], 2, "argument --steps: invalid int value"),
    (["-m", "dsbench.train", "--gather-every", "0"], 2, "--gather-every must be >= 1"),
    (["scripts/bench_harness_overhead.py", "--help"], 0, "usage:"),
    (["scripts/bench_pipeline_memory.py", "--from", "nowhere.json"], 1, "--from nowhere.json: not a stored rows file"),
    (["scripts/noise_budget.py", "nowhere"], 1, "nowhere: no compare/cells/"),
    (["scripts/noise_budget.py", "--families", "0", "nowhere"], 2, "--families must be 1 or more"),
    (["scripts/bench_time_model.py", "--earlier-cells", "nowhere"], 1, "--earlier-cells goes with --agree"),
    # an earlier folder whose cells kept no run header (the stored tune's): nothing to set beside, no traceback
    (["scripts/bench_time_model.py", "--agree", *(f"tests/data/runs/cpu-calibrated/oos-{run}-gpt2-mini/profile.json"
                                                  for run in ("20261129-2352", "20261130-0052")),
      "--cells", "tests/data/runs/cpu-calibrated/oos-20261130-0052-gpt2-mini/compare",
      "--earlier-cells", "tests/data/runs/cpu-calibrated/tune-gpt2-mini"], 0, "the compares themselves: no cell"),
], ids=["version", "help", "worker-help", "worker-version", "worker-bad-int", "worker-gather", "script-help",
        "script-missing-rows", "noise-missing-run", "noise-families", "agree-earlier-alone",
        "agree-earlier-without-headers"])
def test_programs_answer_help_version_and_bad_flags_in_one_piece(argv, code, needle):
    """--help and --version exit 0; a bad flag exits 2 with argparse's message; never a traceback."""
    out = subprocess.run([sys.executable, *argv], capture_output=True, text=True, cwd=ROOT, timeout=120)
    text = out.stdout + out.stderr
    assert out.returncode == code and needle in text and "Traceback" not in text and "SystemExit" not in text, text


def test_one_default_batch_whatever_the_strategy(cli_run, tmp_path):
    """`dsbench launch` with only the strategy changed trains the same global batch (and so the same losses)."""
    import shlex

    from dsbench.spec import DEFAULT_MICRO_BATCH
    from dsbench.train import parse_args

    batches = {}
    for name, args in {"zero2": ["--zero", "2"], "zero3-accelerate": ["--zero", "3", "--launcher", "accelerate"],
                       "ddp": ["--strategy", "ddp", "--launcher", "torchrun"],
                       "fsdp": ["--strategy", "fsdp", "--launcher", "torchrun"]}.items():
        result = cli_run("launch", *args, "--dry-run", "--run-dir", name)
        argv = shlex.split(result.output.strip().splitlines()[-1])
        worker = parse_args(argv[argv.index("dsbench.train") + 1:])
        micro, accum = worker.micro_batch, worker.grad_accum
        if worker.deepspeed_config:  # the rendered config's values are what DeepSpeed trains
            config = json.loads((tmp_path / worker.deepspeed_config).read_text())
            micro, accum = config["train_micro_batch_size_per_gpu"], config["gradient_accumulation_steps"]
        batches[name] = (micro, accum)
    assert set(batches.values()) == {(DEFAULT_MICRO_BATCH, 1)}, batches


def test_multinode_launch_passes_the_jit_cache_folder_on(cli_run, tmp_path, monkeypatch):
    """TORCH_EXTENSIONS_DIR set here reaches the other nodes' ranks (they would otherwise build every op anew);
    an --env value wins; a one-node launch needs nothing (its ranks inherit this environment)."""
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", "/cache/ext")
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node1 slots=2\nnode2 slots=2\n")
    result = cli_run("launch", "--hostfile", str(hostfile), "--dry-run", "--run-dir", "multi")
    assert "#   TORCH_EXTENSIONS_DIR=/cache/ext" in result.output  # the .deepspeed_env DeepSpeed ships to nodes
    given = cli_run("launch", "--hostfile", str(hostfile), "--dry-run", "--run-dir", "given",
                    "--env", "TORCH_EXTENSIONS_DIR=/elsewhere")
    assert "#   TORCH_EXTENSIONS_DIR=/elsewhere" in given.output and "/cache/ext" not in given.output
    torchrun = cli_run("launch", "--hostfile", str(hostfile), "--launcher", "torchrun", "--strategy", "ddp",
                       "--dry-run", "--run-dir", "tr")
    assert "export TORCH_EXTENSIONS_DIR=/cache/ext" in torchrun.output
    single = cli_run("launch", "--dry-run", "--run-dir", "one")
    assert "TORCH_EXTENSIONS_DIR" not in single.output


def test_remote_ranks_get_this_pythons_bin_folder_first_on_path():
    """An ssh login's PATH lacks the venv: torch would build DeepSpeed's ops with a system ninja instead."""
    from dsbench.launch_request import inherited_env

    env = dict(inherited_env({"PATH": "/usr/bin:/venv/bin:/bin"}, "/venv/bin/python"))
    assert env == {"PATH": "/venv/bin:/usr/bin:/bin"}
    assert dict(inherited_env({"TORCH_EXTENSIONS_DIR": "/x"}, "/v/bin/python")) == {"PATH": "/v/bin",
                                                                                   "TORCH_EXTENSIONS_DIR": "/x"}
    given = {"PYTHONPATH": "/src", "GLOO_SOCKET_IFNAME": "eth0", "NCCL_SOCKET_IFNAME": "ib0", "HOME": "/root"}
    assert dict(inherited_env(given, "/v/bin/python")) == {"PATH": "/v/bin", "PYTHONPATH": "/src",
                                                          "GLOO_SOCKET_IFNAME": "eth0", "NCCL_SOCKET_IFNAME": "ib0"}


@pytest.mark.parametrize("gpus,why", [(0, "context parallelism rings torch's CUDA attention kernels, so it cannot run "
                                          "on CPU ranks"),
                                      (1, "dsbench's worker does not run context parallelism yet")])
def test_launch_refuses_context_parallelism_in_one_line(cli_run, monkeypatch, gpus, why):
    """torch's context parallelism rings the CUDA SDPA kernels only (issue 28): refused on CPU ranks, and on GPUs
    until the worker runs it; `dsbench plan --cp` prices it either way."""
    import dsbench.envinfo

    monkeypatch.setattr(dsbench.envinfo, "local_gpu_count", lambda: gpus)
    result = cli_run("launch", "--strategy", "torch_tp", "--tp", "2", "--cp", "2", "--model", "llama-tiny",
                     "--num-gpus", "2", "--dry-run")
    assert result.exit_code == 2 and f"--cp 2: {why}; `dsbench plan --layout ... --cp N` prices it" in result.output
    no_split = cli_run("launch", "--strategy", "ddp", "--launcher", "torchrun", "--cp", "1", "--run-dir", "r",
                       "--dry-run")  # one rank per sequence: nothing to refuse (the flag once reached the worker)
    assert no_split.exit_code == 0, no_split.output


@pytest.mark.parametrize("how, validations", [
    (["--zero", "1", "--pipeline-stages", "2"], 1),
    (["--zero", "1", "--set", "pipeline.stages=2"], 1),
    (["--config", "pipe.json"], 1),
    (["--strategy", "torch_pp", "--pipeline-stages", "2", "--grad-accum", "2", "--launcher", "torchrun"], 0),
])
def test_a_launch_works_out_its_layout_once_and_checks_the_model_once(cli_run, monkeypatch, how, validations):
    """Issue 25's count for `dsbench launch --zero 1 --pipeline-stages 2 --model llama-tiny` (and its degree given
    by a --set, in a --config file, or to torch's pipeline), in the launch process: one layout (render's batch
    arithmetic, validation and the layout check read the same one, since the render takes a --set's degrees too),
    one model check (layout_check.py, the one each rank makes), one validation of the DeepSpeed config."""
    import json
    from pathlib import Path

    from dsbench import launch, parallel
    from dsbench.configs import api

    Path("pipe.json").write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 2,
                                             "zero_optimization": {"stage": 1}, "pipeline": {"stages": 2}}))

    built, checked, validated = [], [], []
    init, check_model, validate = parallel.ParallelDims.__init__, parallel.ParallelDims.check_model, launch.validate
    monkeypatch.setattr(parallel.ParallelDims, "__init__", lambda self, *a, **k: built.append(1) or init(self, *a, **k))
    monkeypatch.setattr(parallel.ParallelDims, "check_model",
                        lambda self, **k: checked.append(1) or check_model(self, **k))
    for module in (launch, api):  # a --config file is validated in launch.py, a rendered config in configs/api.py
        monkeypatch.setattr(module, "validate", lambda *a, **k: validated.append(1) or validate(*a, **k))
    result = cli_run("launch", *how, "--model", "llama-tiny", "--dry-run", "--run-dir", "r")
    assert result.exit_code == 0, result.output
    assert (len(built), len(checked), len(validated)) == (1, 1, validations)


def test_a_preset_s_flag_is_named_as_the_preset_s_in_a_launch_s_layout_error(cli_run):
    result = cli_run("launch", "--preset", "tp", "--model", "gpt2-tiny", "--dry-run", "--run-dir", "r")
    assert result.exit_code == 2
    assert "--tp (from --preset tp) splits Llama-family models" in result.output, result.output


@pytest.mark.parametrize("source, message", [
    ("config", "tp.json: tensor_parallel.autotp_size splits Llama-family models"),
    ("set", "--set tensor_parallel.autotp_size=2: tensor_parallel.autotp_size splits Llama-family models"),
    ("flag", "error: --tp splits Llama-family models"),
])
def test_a_launch_s_layout_error_names_the_degree_as_it_was_given(cli_run, tmp_path, source, message):
    """AutoTP on GPT-2, its degree given in a --config file, by a --set, or by --tp: the error names what the user
    typed (a key of the file, prefixed by its path; the --set), never a flag that is not on the command line."""
    import json

    config = tmp_path / "tp.json"
    config.write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
                                  "zero_optimization": {"stage": 1}, "tensor_parallel": {"autotp_size": 2}}))
    given = {"config": ["--config", str(config)], "set": ["--zero", "1", "--set", "tensor_parallel.autotp_size=2"],
             "flag": ["--zero", "1", "--tp", "2"]}[source]
    result = cli_run("launch", *given, "--model", "gpt2-tiny", "--dry-run", "--run-dir", "r")
    assert result.exit_code == 2 and message in result.output, result.output
    assert "Traceback" not in result.output


def test_output_into_a_closed_pipe_stops_quietly_as_sigpipe_would():
    """`dsbench explain x | head -1` where head has gone: no "error: Broken pipe" line, exit 141 (128 + SIGPIPE).
    The pipe's read end is closed before dsbench writes, so every write fails, as after head exits."""
    import os

    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run([sys.executable, "-m", "dsbench", "explain", str(ROOT / "ds_configs" / "zero2.json")],
                              stdout=write, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (141, "")


def test_a_launch_of_a_config_says_its_warnings(cli_run, tmp_path):
    """What `dsbench validate` warns of (a deprecated key DeepSpeed reads as another, a section nothing applies) is
    said by `dsbench launch --config` too, as a note naming the file and key, and the launch goes on."""
    config = tmp_path / "ds.json"
    config.write_text(json.dumps({"train_micro_batch_size_per_gpu": 2,
                                  "zero_optimization": {"stage": 2, "cpu_offload": True},
                                  "activation_checkpointing": {"partition_activations": True}}))
    result = cli_run("launch", "--config", str(config), "--dry-run", "--run-dir", str(tmp_path / "run"))
    assert result.exit_code == 0, result.output
    assert f"note: {config}: zero_optimization.cpu_offload: deprecated in DeepSpeed" in result.output
    assert f"note: {config}: activation_checkpointing: read only by deepspeed.checkpointing.configure" in result.output
    # and its fix, as validate gives it
    assert "Fix: write zero_optimization.offload_optimizer instead" in result.output


@pytest.mark.parametrize(("typed", "said"), [
    ("openmpi", "--launcher deepspeed --launcher-backend openmpi"),
    ("PDSH", "--launcher deepspeed --launcher-backend pdsh"),
    ("mpich", "through pdsh, ssh or openmpi (--launcher deepspeed --launcher-backend ...), not mpich"),
    ("torch", "torch's launcher is --launcher torchrun"),
    ("bogus", "'bogus' is not one of 'deepspeed', 'torchrun', 'accelerate', 'slurm'."),
])
def test_deepspeeds_spelling_of_a_launcher_is_answered_with_dsbenchs(cli_run, typed, said):
    """`deepspeed --launcher openmpi` is DeepSpeed's runner flag; dsbench's --launcher names the program that starts
    the ranks, so the refusal says how dsbench spells it (anything else keeps click's own message)."""
    result = cli_run("launch", "--launcher", typed, "--dry-run")
    assert result.exit_code == 2 and said in " ".join(result.output.split())
