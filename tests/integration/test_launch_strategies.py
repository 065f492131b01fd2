"""Each strategy x launcher trains for real on 2 CPU ranks; losses match the single-process reference."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.integration.conftest import DDP, FSDP, LLAMA, LR_WARMUP, STEPS, WORKER, ZERO2, ZERO3, dsbench, load_run

pytestmark = pytest.mark.dist

NVME = shutil.which("gcc") is not None and Path("/usr/include/libaio.h").exists()  # DeepSpeed's async_io op

# name -> dsbench launch arguments (micro-batch 2 per rank: global batch 4 on 2 ranks, as every cell here trains)
CELLS = {
    "single": ["--strategy", "single", "--launcher", "torchrun", "--num-gpus", "1", "--micro-batch", "4"],
    # (ZeRO-0 and ZeRO-1: engines of test_engine_ranks.py since 2026-12-02, on 4 ranks against one process, with the
    # model states each rank holds; DeepSpeed's launcher path is the one the zero2 and zero3 cells take). ZeRO-2
    # offloaded: an engine there too since 2026-12-02 (night), DeepSpeed's CPU Adam on the host against one process;
    # launched through `dsbench launch --offload cpu` and through accelerate by test_accelerate_yaml.py (DyME's YAML
    # and its equivalent, which train alike), and its preset rendered in tests/unit/test_render.py)
    "zero2": ZERO2,  # these four (conftest) also save checkpoints: test_checkpoint.py resumes them
    "zero3": ZERO3,
    "zero3_offload": ["--preset", "zero3_offload", "--micro-batch", "2"],
    "ddp": DDP,
    "fsdp": FSDP,
    "accelerate_zero2": ["--launcher", "accelerate", "--zero", "2", "--micro-batch", "2"],
    "accelerate_fsdp": ["--launcher", "accelerate", "--strategy", "fsdp", "--micro-batch", "2"],
    # DeepSpeed AutoTP (tensor parallel 2) on Llama under ZeRO-3: both ranks share one batch of 4. Since 2026-12-01
    # (ZeRO-1 before, which issue 10's zero1_tp2 in test_model_parallel.py trains): DeepSpeed refused every
    # train_batch_size of AutoTP with ZeRO-3, which the config now leaves out (configs/batch.checked_twice)
    "autotp": ["--preset", "tp", "--zero", "3", "--model", "llama-tiny", "--micro-batch", "4", *LLAMA],
    # the Llama reference: test_model_parallel.py's single_llama_4, the same command (one launch for both files)
    "single_llama": ["--strategy", "single", "--launcher", "torchrun", "--num-gpus", "1", "--model", "llama-tiny",
                     "--micro-batch", "4", *LLAMA],
}
# The worker's speed options riding on two cells (flags after --), since 2026-12-01 each in place of a launch of its
# own (FSDP2 under torchrun; ZeRO-3 with its optimizer on the ranks): FSDP2 launched by accelerate with its blocks
# compiled, every block checkpointed inside its compiled graph and torch AdamW's fused kernel; DeepSpeed's
# engine.compile() under ZeRO-3 with the parameters and the optimizer on the host, its parameter gathers from the
# host around the graphs. Eager FSDP2 trains in the session's fsdp cell and under the corpus' accelerate YAMLs, eager
# ZeRO-3 offload in the user's Trainer config below (test_compiled_and_fused_runs_keep_the_single_process_losses).
SPEED = {"accelerate_fsdp": ["--compile", "--fused-optimizer", "--activation-checkpointing"],
         "zero3_offload": ["--compile"]}
GLOBAL_BATCH = 4
PARITY = ["ddp", "fsdp", "zero2", "zero3", "zero3_offload", "accelerate_zero2", "accelerate_fsdp"]
"""Every gpt2-tiny cell at global batch 4 (DeepSpeed's CPU Adam on the host included: within 1.7e-7 of torch AdamW
on 2026-11-30); the NVMe cell is checked in its own test."""


def launched(runs, name):
    """The cell's run (the session's own where another file launches the same command) and its folder."""
    return runs.get(name, CELLS[name], SPEED.get(name))


def finished(runs, name):
    result, folder = launched(runs, name)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return load_run(folder)


@pytest.mark.parametrize("name", list(CELLS))
def test_trains_and_records_complete_metrics(runs, name):
    run = finished(runs, name)
    [header] = run["header"]
    world = 1 if name.startswith("single") else 2
    assert header["world_size"] == world and header["global_batch"] == GLOBAL_BATCH
    expected = {"single": "single", "single_llama": "single", "autotp": "deepspeed"}
    assert header["strategy"] == expected.get(name, "deepspeed" if "zero" in name else name.split("_")[-1])
    assert header["versions"]["torch"] and header["command"] and header["config_hash"]
    assert header["process_group"] == {"initialized": True, "backend": "gloo", "world_size": world}
    tokens = GLOBAL_BATCH * 128
    steps = run["steps"]
    assert [s["step"] for s in steps] == list(range(STEPS))
    assert steps[-1]["loss"] < steps[0]["loss"] - 0.02, [s["loss"] for s in steps]
    for step in steps:
        assert len(step["step_time_per_rank_s"]) == world and len(step["peak_memory_bytes"]) == world
        assert step["step_time_s"] == max(step["step_time_per_rank_s"]) and step["tokens"] == tokens
        assert step["timed_tokens_per_s"] == pytest.approx(tokens / step["step_time_s"])
    [window] = run["window"]
    assert (window["first_step"], window["last_step"], window["tokens"]) == (2, STEPS - 1, (STEPS - 2) * tokens)
    summary = run["summary"]
    assert summary["status"] == "ok" and summary["measured_steps"] == STEPS - 2
    # the throughput figure is the wall clock over the window; the timed region is reported beside it
    assert summary["throughput"]["tokens_per_s"] == pytest.approx(window["tokens"] / window["seconds"])
    assert 0 <= summary["outside_timed_fraction"] < 1
    # the launch's last line says it, after the launcher's own log lines (since 2026-12-01)
    result, folder = launched(runs, name)
    per_step = summary["timed_region"]["tokens_per_s"]  # with its spread over the steps (since 2026-12-03)
    assert result.stdout.strip().splitlines()[-1] == (
        f"dsbench: finished {folder}: {summary['throughput']['tokens_per_s']:,.0f} tokens/s by the wall clock over "
        f"{STEPS - 2} steps after 2 warm-up (each step's timed region: {per_step['min']:,.0f}-{per_step['max']:,.0f} "
        f"tokens/s, median {per_step['median']:,.0f}), final loss {summary['final_loss']:.4f}; tables and plots: "
        f"dsbench report {folder}")
    # and only it: rank 0 printed the same figures as its own last line until 2026-12-03 (run.json's summary_line)
    assert [line for line in (result.stdout + result.stderr).splitlines() if "by the wall clock" in line] == [
        result.stdout.strip().splitlines()[-1]]
    [states] = run["states"]
    assert len(states["per_rank"]) == world and all(r["total"] > 0 for r in states["per_rank"])


def _sharded(run):
    """params + grads + optimizer states on rank 0 (the ZeRO paper's model states, no master copy)."""
    states = run["states"][0]["per_rank"][0]
    return states["params"] + states["grads"] + states["optimizer_states"]


def test_model_state_bytes_follow_zero_stages(runs):
    """ZeRO-2 and ZeRO-3 on 2 ranks (ZeRO-0 and ZeRO-1 on 4: tests/integration/test_engine_ranks.py)."""
    zero2, zero3 = (finished(runs, f"zero{i}") for i in (2, 3))
    n_bytes = zero2["header"][0]["num_params"] * 4
    p2 = zero2["states"][0]["per_rank"][0]
    assert p2["optimizer_states"] == n_bytes and p2["grads"] == n_bytes // 2  # Adam moments and gradients halved
    # ZeRO-3 on 2 ranks holds about half of ZeRO-0's model states (small persistent params stay whole); ZeRO-0's are
    # the parameters, the gradients and both moments whole: 4 x 4 bytes a parameter (FusedAdam keeps its step count
    # as an int)
    assert 0.5 <= _sharded(zero3) / (4 * n_bytes) < 0.56


def test_loss_parity_with_single_process(runs):
    """Same model, data, seed and global batch: every strategy matches the reference within 1e-4 relative."""
    reference = [s["loss"] for s in finished(runs, "single")["steps"]]
    for name in PARITY:
        losses = [s["loss"] for s in finished(runs, name)["steps"]]
        worst = max(abs(a - b) / abs(b) for a, b in zip(losses, reference, strict=True))
        assert worst < 1e-4, (name, worst)
    llama = [s["loss"] for s in finished(runs, "single_llama")["steps"]]
    tensor_parallel = [s["loss"] for s in finished(runs, "autotp")["steps"]]
    assert max(abs(a - b) / abs(b) for a, b in zip(tensor_parallel, llama, strict=True)) < 1e-4


@pytest.mark.skipif(not NVME, reason="libaio-dev is not installed (make test installs it as root)")
def test_zero3_nvme_offload(runs, tmp_path):  # its op is built from the session's start (conftest NVME_TEST)
    name = "zero3_nvme"
    CELLS[name] = ["--preset", "zero3_nvme", "--nvme-path", str(tmp_path), "--micro-batch", "2"]
    run = finished(runs, name)
    assert run["steps"][-1]["loss"] < run["steps"][0]["loss"]
    reference = [s["loss"] for s in finished(runs, "single")["steps"]]  # the states swapped out and back unchanged
    assert max(abs(a - b) / abs(b) for a, b in zip([s["loss"] for s in run["steps"]], reference, strict=True)) < 1e-4
    # DeepSpeed's swapper made its per-rank folders there (it deletes the swap files at exit)
    assert (tmp_path / "zero_stage_3" / "optimizer" / "rank0").is_dir()


# A user's HF Trainer config, as the corpus holds it: every batch, clipping, precision and bucket value "auto", no
# optimizer section (the Trainer brings its AdamW), ZeRO-3 with parameters and optimizer on the host
TRAINER_CONFIG = ROOT / "tests" / "data" / "corpus" / "ds_configs" / (
    "hiyouga__LLaMA-Factory__examples_deepspeed_ds_z3_offload_config.json")


def test_a_trainer_config_launches_as_it_is_and_trains_like_one_process(runs, tmp_path):
    """`dsbench launch --config` of that config, the worker's flags after -- filling its "auto" (the single
    reference's global batch of 4 and warm-up of 8): until 2026-11-30 the launch refused every "auto", and the ranks
    stopped at "zero stage 3 requires an optimizer". Measured that day: within 1.7e-7 of one process."""
    folder = tmp_path / "trainer"
    result = dsbench("launch", "--config", str(TRAINER_CONFIG), "--num-gpus", "2", "--run-dir", str(folder), "--",
                     "--micro-batch", "2", "--lr-warmup-steps", "8", *WORKER, cwd=ROOT)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    run = load_run(folder)
    ds = run["header"][0]["ds_config"]
    assert ds["zero_optimization"]["stage"] == 3 and ds["zero_optimization"]["offload_param"]["device"] == "cpu"
    assert ds["optimizer"]["type"] == "AdamW" and ds["scheduler"]["params"]["warmup_num_steps"] == 8
    assert (ds["train_batch_size"], ds["train_micro_batch_size_per_gpu"], ds["gradient_accumulation_steps"]) == (
        GLOBAL_BATCH, 2, 1)
    losses = [s["loss"] for s in run["steps"]]
    reference = [s["loss"] for s in finished(runs, "single")["steps"]]
    assert max(abs(a - b) / abs(b) for a, b in zip(losses, reference, strict=True)) < 1e-4


PLANNED = {"ddp": "ddp", "fsdp": "fsdp", "zero2": "zero2", "zero3": "zero3"}  # ZeRO-0/1: test_engine_ranks.py


@pytest.mark.parametrize("name", list(PLANNED))
def test_planner_model_states_within_5_percent_of_measured(runs, name):
    """The planner's per-rank model-state bytes vs the bytes the worker counted from its tensors."""
    from dsbench.plan.memory import accounting_for, model_states
    from dsbench.plan.verify import comparable_bytes

    run = finished(runs, name)
    header = run["header"][0]
    predicted = model_states(header["num_params"], PLANNED[name], header["world_size"],
                             accounting_for("fp32", PLANNED[name]))
    measured, expected = comparable_bytes(PLANNED[name], run["states"][0]["per_rank"][0], predicted)
    assert measured == pytest.approx(expected, rel=0.05)


def test_plan_verify_runs_top_candidates(tmp_path):
    import json

    from tests.integration.conftest import dsbench

    result = dsbench("plan", "--model", "gpt2-tiny", "--gpus", "2", "--gpu-mem", "1", "--seq-len", "128",
                     "--micro-batch", "2", "--verify", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    rows = json.loads(result.stdout)["verify"]
    assert rows and all(r["status"] == "ok" for r in rows)
    assert all(abs(r["model_state_error"]) < 0.05 for r in rows), rows


def test_deepspeed_shared_memory_is_released(runs):
    """DeepSpeed's CPU comm op makes a ~69 MB /dev/shm workspace per rank and never removes it; the worker
    removes the names once every rank has mapped them, so runs leave no RAM behind."""
    import os
    import re

    for name in ("zero2", "autotp"):  # AutoTP's all-reduces go through the workspace after its name is gone
        result, _ = launched(runs, name)
        assert result.returncode == 0, result.stderr[-2000:]
        port = re.search(r"--master_port (\d+)", result.stdout).group(1)
        left = [p.name for p in Path("/dev/shm").glob(f"deepspeed_allreduce_buffer_{os.getuid()}_*_{port}_*")]
        assert left == [], left


def test_a_jit_build_lock_is_never_left_behind_nor_waited_on_forever(tmp_path):
    """Ctrl-C while the first DeepSpeed run builds its comm op: the rank that holds torch's build lock removes it
    (dsbench.worker.jitbaton; before, it stayed and the next run waited on it without a word). A lock left by a
    build killed outright is refused in one line once its folder is idle, by the launch."""
    import os
    import signal
    import time

    from tests.conftest import ROOT
    from tests.integration.conftest import dsbench, start_dsbench

    ext = tmp_path / "ext"
    proc = start_dsbench(["launch", "--zero", "1", "--micro-batch", "2", "--run-dir", str(tmp_path / "built"), "--",
                          "--steps", "2", "--warmup", "1", "--quiet"], ROOT, env={"TORCH_EXTENSIONS_DIR": str(ext)})
    try:
        deadline = time.monotonic() + 240
        while not list(ext.glob("*/lock")) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert list(ext.glob("*/lock")), "no build started"  # a rank is building (the op takes 0.5-1 min here)
        time.sleep(2)  # into the compile
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:  # a failed check above: no launch of this test outlives it
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 130, err[-2000:]
    assert list(ext.glob("*/lock")) == [], err[-2000:]

    folder = ext / "deepspeed_shm_comm"  # as a build killed outright leaves it, an hour ago
    lock = folder / "lock"
    lock.touch()
    old = time.time() - 3600
    for path in [*folder.iterdir(), folder]:
        os.utime(path, (old, old))
    result = dsbench("launch", "--zero", "1", "--micro-batch", "2", "--run-dir", str(tmp_path / "run"), "--",
                     "--steps", "2", "--warmup", "1", "--quiet", cwd=ROOT,
                     env={"TORCH_EXTENSIONS_DIR": str(ext)}, timeout=300)
    # refused by the launch before any rank starts (since 2026-12-05; each rank refused it before, about 6 s in:
    # the rank's refusal, for the ops a launch cannot foresee, is tests/unit/test_jitlocks.py's)
    assert result.returncode == 2 and not (tmp_path / "run").exists(), result.stderr[-2000:]
    assert f"{lock}: a JIT build lock left by an interrupted build" in result.stderr


COMPILED = {"ddp": ["--compile", "--fused-optimizer", "--activation-checkpointing"]}
"""The worker's speed options on 2 ranks: blocks compiled (DeepSpeed: engine.compile(), under ZeRO-3 with its
parameter gathers around the graphs; ZeRO-1/2 compile too, checked by hand) and, for the native strategies, torch
AdamW's fused kernel and every block checkpointed inside its compiled graph (single runs the same code as ddp without
the wrapper). DDP's run here; FSDP2's (under accelerate) and ZeRO-3's (offloaded) are cells (:data:`SPEED`)."""
OPTIMIZER = {"ddp": "AdamW (fused)", "accelerate_fsdp": "AdamW (fused)", "zero3_offload": "DeepSpeedCPUAdam"}


@pytest.mark.parametrize("name", [*COMPILED, *SPEED])
def test_compiled_and_fused_runs_keep_the_single_process_losses(runs, tmp_path, name):
    """DDP's launched as a user names a run: ``--run-dir z3`` beside the command. A folder of the working directory
    named like an optional module was imported in its place on the ranks (--compile's check for the z3 solver:
    "module 'z3' has no attribute 'ExprRef'", until 2026-12-01; dsbench/paths.leave_working_folder_off_path)."""
    if name in SPEED:
        run = finished(runs, name)
    else:
        result = dsbench("launch", *CELLS[name], *LR_WARMUP, "--run-dir", "z3", "--", *WORKER, *COMPILED[name],
                         cwd=tmp_path, timeout=900)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        run = load_run(tmp_path / "z3")
    reference = [s["loss"] for s in finished(runs, "single")["steps"]]  # eager, for-loop AdamW, 1 process
    losses = [s["loss"] for s in run["steps"]]
    assert max(abs(a - b) / abs(b) for a, b in zip(losses, reference, strict=True)) < 1e-4
    speed = run["header"][0]["speed"]  # what the report shows of how the run was made fast
    assert speed["compile"] is True and speed["attention"] == "sdpa"
    assert speed["optimizer"] == OPTIMIZER[name]
    # compilation happened in the warm-up steps: the first is the slow one, and the window excludes it
    steps = run["steps"]
    assert steps[0]["step_time_s"] > 2 * max(s["step_time_s"] for s in steps[2:])
    assert run["summary"]["warmup"]["timed_s"] == pytest.approx(sum(s["step_time_s"] for s in steps[:2]))
