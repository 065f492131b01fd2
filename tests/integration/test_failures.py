"""Failures that must end cleanly, as real 2-rank launches on CPU: a rank killed with SIGKILL under every
launcher, Ctrl-C/SIGTERM to dsbench launch and compare, a rank that hangs or never joins, a full disk while
writing metrics. Each checks the exit code, the one line naming the cause, what stays on disk, and that no
process of the launch remains."""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.integration.conftest import dsbench, launch_env, note_launch, start_dsbench

TINY = ["--model", "gpt2-tiny"]
FOREVER = ["--", "--steps", "100000", "--seq-len", "32", "--gather-every", "1"]


def _descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (from /proc's parent links)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _alive(pids: set[int]) -> set[int]:
    """Those of ``pids`` that still run (zombies count as gone)."""
    out = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z":
            out.add(pid)
    return out


def _wait_for_steps(proc: subprocess.Popen, log: Path, ranks: int, timeout: float = 240) -> dict[int, int]:
    """Wait until every rank said it started and a step record exists; returns rank -> pid."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        text = log.read_text(errors="replace") if log.exists() else ""
        pids = {int(r): int(p) for r, p in re.findall(r"\[rank (\d+) on [^\]]+\] dsbench\.train: started \(pid (\d+)\)",
                                                      text)}
        metrics = log.parent / "metrics.jsonl"
        if len(pids) == ranks and metrics.exists() and '"type": "step"' in metrics.read_text():
            return pids
        time.sleep(0.5)
    proc.kill()
    pytest.fail(f"no training step within {timeout} s: {log.read_text(errors='replace')[-2000:]}")


LAUNCHERS = {
    "deepspeed": ["--zero", "2"],
    "torchrun": ["--strategy", "ddp", "--launcher", "torchrun"],
    "accelerate": ["--strategy", "ddp", "--launcher", "accelerate"],
}


@pytest.mark.parametrize("launcher", list(LAUNCHERS))
def test_a_rank_killed_with_sigkill_ends_the_launch_and_is_named(tmp_path, launcher):
    folder = tmp_path / "run"
    proc = start_dsbench(["launch", *LAUNCHERS[launcher], *TINY, "--run-dir", str(folder), *FOREVER], ROOT)
    pids = _wait_for_steps(proc, folder / "launch.log", ranks=2)
    tree = _descendants(proc.pid)
    assert set(pids.values()) <= tree
    killed = time.monotonic()
    os.kill(pids[1], signal.SIGKILL)
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"{launcher}: the launch was still running 30 s after rank 1 was killed")
    took = time.monotonic() - killed
    assert proc.returncode != 0
    assert re.search(r"rank 1 on \S+ stopped without a word", err), err[-2000:]
    assert "Traceback" not in err.splitlines()[-1]
    assert not _alive(tree), f"left running: {_alive(tree)}"
    print(f"{launcher}: launch exited {took:.1f} s after SIGKILL of rank 1")


def _assert_recorded_as_interrupted(folder: Path, sig: signal.Signals) -> None:
    """The run's own records after dsbench passed ``sig`` on: rank 0 wrote its end record and summary, and the
    report reads the run as interrupted."""
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if r["type"] == "step"]
    # the rank records the signal it got first: dsbench's own (sent to the launcher's process group, ranks
    # included), or the SIGTERM with which DeepSpeed's launcher stops its ranks whatever it received
    assert steps and records[-1] == {"type": "end", "status": "interrupted", "signal": records[-1]["signal"],
                                     "last_step": steps[-1]["step"]}
    assert records[-1]["signal"] in (sig.name, "SIGTERM")
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["steps"] == len(steps)
    from dsbench.report.collect import load_run

    assert load_run(folder).status == "interrupted"


def test_sigterm_to_launch_records_the_run_as_interrupted(tmp_path):
    """`kill` to dsbench launch (DeepSpeed's launcher, 2 ranks). Ctrl-C takes the same path (runner.run forwards
    either signal to the launcher's process group): it reaches a launch through compare below, each cell being a
    `dsbench launch` (since 2026-12-03 not a launch of its own here, 106 -> 105)."""
    sig = signal.SIGTERM
    folder = tmp_path / "run"
    proc = start_dsbench(["launch", "--zero", "2", *TINY, "--run-dir", str(folder), *FOREVER], ROOT)
    _wait_for_steps(proc, folder / "launch.log", ranks=2)
    tree = _descendants(proc.pid)
    proc.send_signal(sig)  # dsbench alone, as `kill` would reach it
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, err[-2000:]
    assert f"interrupted by {sig.name}" in err and str(folder) in err
    _assert_recorded_as_interrupted(folder, sig)
    assert not _alive(tree)


@pytest.fixture(scope="module")
def ctrl_c_to_compare(tmp_path_factory) -> tuple[Path, subprocess.Popen, str, set[int], Path]:
    """dsbench compare of ddp then zero2 on 2 ranks, Ctrl-C once the first cell trains: the compare's folder, its
    process, its stderr, the processes below it just before, and the running cell's folder."""
    out = tmp_path_factory.mktemp("ctrl_c") / "cmp"
    proc = start_dsbench(["compare", "--strategies", "ddp,zero2", "--models", "gpt2-tiny", "--steps", "100000",
                          "--warmup", "1", "--seq-len", "32", "--out", str(out), "--no-report", "--quiet"], ROOT)
    deadline = time.monotonic() + 240
    cell = None
    while time.monotonic() < deadline and cell is None and proc.poll() is None:
        running = [p.parent for p in out.glob("cells/*/metrics.jsonl") if '"type": "step"' in p.read_text()]
        cell = running[0] if running else None
        time.sleep(0.5)
    tree = _descendants(proc.pid)
    if cell is None:
        os.killpg(proc.pid, signal.SIGKILL)
    assert cell is not None, f"no cell started training: {proc.communicate()}"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    return out, proc, err, tree, cell


def test_ctrl_c_to_compare_keeps_finished_cells_and_marks_the_running_one(ctrl_c_to_compare):
    out, proc, err, _, cell = ctrl_c_to_compare
    assert proc.returncode == 130, err[-2000:]
    status = json.loads((cell / "cell.json").read_text())
    assert status["status"] == "interrupted" and status["cell"]["strategy"] == "ddp"
    assert json.loads((cell / "summary.json").read_text())["status"] == "interrupted"
    assert len(list(out.glob("cells/*/cell.json"))) == 1  # the second cell never started
    assert "--resume" in err


def test_ctrl_c_reaches_the_running_launchs_ranks_which_record_it_and_stop(ctrl_c_to_compare):
    """What Ctrl-C to `dsbench launch` did (its own launch until 2026-12-03): compare's SIGINT passes through the
    cell's `dsbench launch` and torchrun to both ranks, which record the run as interrupted; nothing stays."""
    _, proc, err, tree, cell = ctrl_c_to_compare
    assert proc.returncode == 130, err[-2000:]
    _assert_recorded_as_interrupted(cell, signal.SIGINT)
    assert not _alive(tree)


@pytest.mark.parametrize("fault, says", [
    ("1:3:hang", "no training step finished for"),  # hangs inside training: the others wait in a collective
    ("1:join:hang", "did not complete within --dist-timeout: a rank hung or never joined"),  # never joins
])
def test_a_rank_that_hangs_or_never_joins_ends_with_the_timeout(tmp_path, fault, says):
    started = time.monotonic()
    result = dsbench("launch", "--zero", "2", *TINY, "--run-dir", str(tmp_path / "run"), "--env",
                     f"DSBENCH_FAULT={fault}", "--", "--steps", "30", "--seq-len", "32", "--dist-timeout", "10",
                     cwd=ROOT, timeout=240)
    assert result.returncode == 1, result.stderr[-2000:]
    assert says in result.stderr.splitlines()[-1]
    assert time.monotonic() - started < 120
    if fault == "1:3:hang":  # the watchdog names where the rank's main thread was (file:line function, innermost)
        assert re.search(r"\(this rank in [^)]*dsbench/worker/\S+\.py:\d+ \w+\)", result.stderr), result.stderr[-2000:]


def test_a_full_disk_while_writing_metrics_is_one_line_and_keeps_what_was_written(tmp_path):
    """RLIMIT_FSIZE makes the metrics file's write fail as a full disk does (EFBIG, like ENOSPC), as any user."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (40_000, 40_000))

    folder = tmp_path / "run"
    note_launch()
    done = subprocess.run([sys.executable, "-m", "dsbench.train", "--strategy", "single", *TINY, "--steps", "400",
                           "--seq-len", "32", "--gather-every", "1", "--out", str(folder), "--quiet"],
                          env=launch_env(), preexec_fn=limit, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert re.fullmatch(r"\[rank 0 on \S+\] dsbench\.train: error: cannot write .*metrics\.jsonl: File too large "
                        r"\(files written before it are intact\)", last), done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    from dsbench.records import read_records

    records = read_records(folder / "metrics.jsonl")
    assert records[0]["type"] == "header" and sum(r["type"] == "step" for r in records) > 5


def test_a_full_disk_while_writing_a_checkpoint_is_one_line_and_leaves_no_latest(tmp_path):
    """The same limit, above the metrics but below one checkpoint file: the save fails in one line and no
    ``latest`` points at the partial checkpoint."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (1_000_000, 1_000_000))

    checkpoints = tmp_path / "ckpt"
    note_launch()
    done = subprocess.run([sys.executable, "-m", "dsbench.train", "--strategy", "single", *TINY, "--steps", "6",
                           "--seq-len", "32", "--out", str(tmp_path / "run"), "--checkpoint-dir", str(checkpoints),
                           "--save-every", "3", "--quiet"],
                          env=launch_env(), preexec_fn=limit, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert re.fullmatch(r"\[rank 0 on \S+\] dsbench\.train: error: cannot write checkpoint .*global_step3: .* "
                        r"\(latest still names the previous complete checkpoint\)", last), done.stderr[-2000:]
    assert not (checkpoints / "latest").exists()
