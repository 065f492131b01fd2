"""The rank's metrics writer and the stop watcher: the end record an interrupted run gets names the last step on
disk, whichever thread writes first (dsbench/worker/metrics.JsonlWriter, dsbench/worker/run._interrupted).

Oracle: the file itself, read back line by line. Until 2026-12-01 the training thread wrote a gather and listed it
in a second statement; a Ctrl-C landing between the two gave an end record naming the step before the last one on
disk (`tests/integration/test_failures.py`, the clean clone of 867df0a: last_step 6 after step 7's record)."""

from __future__ import annotations

import json
import threading

from dsbench.records import SUMMARY
from dsbench.worker.metrics import JsonlWriter
from dsbench.worker.run import _interrupted


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_written_records_are_the_files_lines(tmp_path):
    writer = JsonlWriter(tmp_path / "m.jsonl")
    writer.write_many([{"type": "header"}])
    writer.write_many([{"type": "step", "step": 0}, {"type": "step", "step": 1}])
    assert writer.written == _lines(tmp_path / "m.jsonl")
    writer.close()
    writer.write_many([{"type": "step", "step": 2}])  # after close: nothing written, nothing listed
    assert writer.written == _lines(tmp_path / "m.jsonl") and len(writer.written) == 3


def test_a_gather_written_while_the_watcher_closes_lands_before_it_or_not_at_all(tmp_path):
    """The watcher holds the lock from reading what is on disk to closing: the training thread's gather, started
    meanwhile, waits and then finds the file closed; the end record is the file's last line and names its last
    step."""
    writer = JsonlWriter(tmp_path / "m.jsonl")
    writer.write_many([{"type": "header"}, {"type": "step", "step": 0}])
    late = threading.Thread(target=writer.write_many, args=([{"type": "step", "step": 1}],))

    def end(written):
        late.start()  # the training thread's next gather, while the watcher holds the lock
        late.join(timeout=0.2)
        assert late.is_alive()  # it waits for the lock
        return [{"type": "end", "last_step": max(r["step"] for r in written if r["type"] == "step")}]

    assert writer.close_with(end) == [{"type": "header"}, {"type": "step", "step": 0}]
    late.join(timeout=5)
    assert _lines(tmp_path / "m.jsonl") == [{"type": "header"}, {"type": "step", "step": 0},
                                            {"type": "end", "last_step": 0}]


def test_an_interrupted_run_ends_with_its_last_step_and_a_summary(tmp_path):
    writer = JsonlWriter(tmp_path / "metrics.jsonl")
    step = {"type": "step", "warmup": False, "loss": 8.0, "step_time_s": 0.1, "tokens": 64}
    writer.write_many([{"type": "step", "step": n, **{k: v for k, v in step.items() if k != "type"}}
                       for n in range(3)])
    _interrupted(writer, tmp_path, "SIGINT")
    lines = _lines(tmp_path / "metrics.jsonl")
    assert lines[-1] == {"type": "end", "status": "interrupted", "signal": "SIGINT", "last_step": 2}
    summary = json.loads((tmp_path / SUMMARY).read_text())
    assert summary["status"] == "interrupted" and summary["reason"] == "stopped by SIGINT after step 2"
