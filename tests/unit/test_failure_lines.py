"""Which line names why a launch failed (pure: a log in, one line out)."""

from __future__ import annotations

from dsbench.launch_log import first_error, silent_ranks

LOST = ("[rank 0 on n1] dsbench.train: error: lost the connection to another rank, which stopped first "
        "(RuntimeError: Connection reset by peer)")


def _log(tmp_path, *lines):
    path = tmp_path / "launch.log"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_rank_that_never_said_how_it_ended_is_named_before_the_ranks_that_lost_it(tmp_path):
    log = _log(tmp_path, "[rank 0 on n1] dsbench.train: started (pid 10)",
               "[rank 1 on n2] dsbench.train: started (pid 11)", LOST, "[launch.py] exits with return code = 1")
    assert silent_ranks(log.read_text().splitlines()) == [(1, "n2")]
    assert first_error(log).startswith("rank 1 on n2 stopped without a word (no error line): killed by a signal")


def test_a_real_error_wins_over_silence_and_symptoms(tmp_path):
    log = _log(tmp_path, "n2: [rank 1 on n2] dsbench.train: started (pid 11)", LOST,
               "n1: [rank 2 on n1] dsbench.train: error: ValueError: bad batch",
               "[rank 0 on n1] dsbench.train: started (pid 10)")
    assert first_error(log) == "n1: [rank 2 on n1] dsbench.train: error: ValueError: bad batch"


def test_ranks_stopped_by_a_signal_or_finished_are_not_silent(tmp_path):
    lines = ["[rank 0 on a] dsbench.train: started (pid 1)", "[rank 1 on a] dsbench.train: started (pid 2)",
             "[rank 0 on a] dsbench.train: finished", "[rank 1 on a] dsbench.train: stopped by SIGTERM"]
    assert silent_ranks(lines) == []
    assert first_error(_log(tmp_path, *lines, "Traceback ... Error: x")) == "Traceback ... Error: x"


def test_only_symptoms_fall_back_to_the_first_of_them(tmp_path):
    log = _log(tmp_path, "[rank 0 on n1] dsbench.train: started (pid 10)", LOST)
    assert first_error(log) == LOST


def test_two_ranks_lines_written_into_one_line_are_read_as_two(tmp_path):
    # seen under DeepSpeed's launcher (ranks run with python -u): rank 1's "started" was glued to rank 0's line,
    # and the rank killed with SIGKILL went unnamed
    log = _log(tmp_path, "[rank 0 on n1] dsbench.train: started (pid 10)[rank 1 on n1] dsbench.train: started (pid 11)",
               "", LOST)
    assert first_error(log).startswith("rank 1 on n1 stopped without a word")
    glued = _log(tmp_path, "[rank 1 on n1] dsbench.train: started (pid 11)",
                 "[rank 0 on n1] dsbench.train: started (pid 10)[rank 1 on n1] dsbench.train: error: ValueError: x")
    assert first_error(glued) == "[rank 1 on n1] dsbench.train: error: ValueError: x"


def test_a_rank_line_is_one_write_of_one_line(monkeypatch):
    import os

    from dsbench.worker import stop

    writes = []
    monkeypatch.setattr(os, "write", lambda fd, data: writes.append(data) or len(data))
    monkeypatch.setattr(stop, "_where", "[rank 3 on h]")
    stop.say("error: ValueError: two\nlines")
    stop.say("x" * 10_000)
    assert writes[0] == b"[rank 3 on h] dsbench.train: error: ValueError: two lines\n"
    assert len(writes) == 2 and len(writes[1]) == 4096 and writes[1].endswith(b"x\n")  # atomic on a pipe: <= PIPE_BUF


def test_a_lost_peer_is_one_line_without_the_traceback_of_where_it_waited(capsys, monkeypatch):
    """Resuming a checkpoint with one rank's ZeRO partition gone: rank 0 said why in one line, and rank 1, waiting in
    a barrier, printed 20 lines of traceback through dist.barrier into gloo's pair.cc before its own line (found
    2026-12-04). A lost peer is a symptom; its traceback only shows where this rank waited. Any other error keeps
    its traceback, and DSBENCH_DEBUG=1 prints a lost peer's too."""
    from dsbench.worker.guard import run_rank

    said: list[str] = []

    def lost() -> int:
        raise RuntimeError("[gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:410")

    def broken() -> int:
        raise ValueError("a bug")

    monkeypatch.delenv("DSBENCH_DEBUG", raising=False)
    assert run_rank(lost, said.append) == 1 and "Traceback" not in capsys.readouterr().err
    assert said[-1].startswith("error: lost the connection to another rank, which stopped first (RuntimeError:")
    assert run_rank(broken, said.append) == 1 and "Traceback" in capsys.readouterr().err
    monkeypatch.setenv("DSBENCH_DEBUG", "1")
    assert run_rank(lost, said.append) == 1 and "Traceback" in capsys.readouterr().err


def test_a_stopped_rank_says_where_its_main_thread_was():
    """The stop and watchdog threads name the main thread's innermost calls, so a run killed while it hangs says
    where (2026-12-04: a GPU launch stopped by its timeout said only 'stopped by SIGTERM')."""
    import threading

    from dsbench.worker import stop

    seen: list[str] = []
    ready, release = threading.Event(), threading.Event()

    def watcher() -> None:
        ready.wait()
        seen.append(stop.main_thread_at())
        release.set()

    def waiting_in_a_known_place() -> None:
        ready.set()
        release.wait(timeout=30)

    threading.Thread(target=watcher).start()
    waiting_in_a_known_place()
    calls = seen[0].split(" <- ")
    assert calls[0].split(":")[0].endswith("/threading.py")  # innermost first: the wait it is blocked in
    assert any(c.startswith("unit/test_failure_lines.py:") and c.endswith(" waiting_in_a_known_place")
               for c in calls), seen


def test_a_source_file_is_named_as_its_package_names_it():
    from dsbench.worker.stop import _short

    assert _short("/w/.venv/lib/python3.12/site-packages/deepspeed/runtime/engine.py") == "deepspeed/runtime/engine.py"
    assert _short("/usr/lib/python3/dist-packages/torch/nn/modules/module.py") == "torch/nn/modules/module.py"
    assert _short("/work/main/dsbench/worker/loop.py") == "dsbench/worker/loop.py"


def test_a_value_deepspeeds_parser_refuses_on_a_rank_is_named_by_its_key(capsys):
    """A config reaching ``deepspeed.initialize`` on a rank started by hand (`deepspeed ... --deepspeed_config`)
    with a value DeepSpeed's pydantic sections refuse said "ValidationError: 1 validation error for
    DeepSpeedZeroConfig" after a traceback; the line names the key, as validate does, and exits 2 (bad input).
    Oracle: the error DeepSpeed's own DeepSpeedZeroConfig raises."""
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    from dsbench.worker.guard import run_rank

    def initialize():
        DeepSpeedZeroConfig(stage=2, zero_quantized_weights=123)
        return 0

    said: list[str] = []
    assert run_rank(initialize, said.append) == 2
    assert said == ["error: zero_optimization.zero_quantized_weights: DeepSpeed's DeepSpeedZeroConfig rejects 123: "
                    "Input should be a valid boolean, unable to interpret input. Fix: correct "
                    "zero_optimization.zero_quantized_weights (see DeepSpeed's config docs)"], said
    assert "Traceback" not in capsys.readouterr().err


def test_parsing_a_config_leaves_no_accelerator_for_the_processes_a_launch_starts(tmp_path):
    """DeepSpeed's parser runs under its CPU accelerator where none is named, and the variable is taken back: a
    launch that parsed a user's accelerate YAML's DeepSpeed file handed DS_ACCELERATOR=cpu to every rank it started,
    on GPUs too (runner.py passes its own environment on), until 2026-12-04."""
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    path = tmp_path / "ds.json"
    path.write_text('{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2}}')
    script = ("import os\nfrom dsbench.configs.api import validate_file\n"
              f"config, findings = validate_file({str(path)!r}, 2, False)\n"
              "assert not [f for f in findings if f.code == 'deepspeed-unavailable'], findings\n"
              "print(os.environ.get('DS_ACCELERATOR'))\n")
    env = {k: v for k, v in os.environ.items() if k != "DS_ACCELERATOR"}
    done = subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "None", done.stdout + done.stderr


def test_another_librarys_validation_error_is_not_called_deepspeeds():
    import pydantic
    import pytest

    from dsbench.configs.deepspeed_check import config_error

    class Settings(pydantic.BaseModel):
        size: int

    with pytest.raises(pydantic.ValidationError) as caught:
        Settings(size="x")
    assert config_error(caught.value) is None
