"""Stale JIT build locks: the file torch's own FileBaton leaves is found once its folder has gone idle."""

from __future__ import annotations

import os
import time

import pytest

from dsbench.jitlocks import STALE_S, stale_lock_message, stale_locks


def _interrupted_build(folder, age_s: float):
    """A build folder as a killed build leaves it: torch's FileBaton lock and a half-written object file."""
    from torch.utils.file_baton import FileBaton

    folder.mkdir(parents=True)
    (folder / "shm.o").write_bytes(b"\0")
    assert FileBaton(str(folder / "lock")).try_acquire()  # what torch's _jit_compile takes before building
    old = time.time() - age_s
    for path in folder.iterdir():
        os.utime(path, (old, old))
    return folder / "lock"


def test_lock_in_idle_folder_is_stale_under_both_layouts(tmp_path):
    default = _interrupted_build(tmp_path / "py311_cpu" / "deepspeed_shm_comm", STALE_S + 60)
    flat = _interrupted_build(tmp_path / "cpu_adam", STALE_S + 60)  # TORCH_EXTENSIONS_DIR layout
    assert stale_locks(tmp_path, time.time()) == sorted([flat, default])


def test_lock_of_a_build_still_writing_is_not_stale(tmp_path):
    lock = _interrupted_build(tmp_path / "py311_cpu" / "async_io", STALE_S + 60)
    (lock.parent / "deepspeed_aio.o").write_bytes(b"\0")  # ninja just wrote an object: the build is alive
    assert stale_locks(tmp_path, time.time()) == []


def test_lock_of_a_build_compiling_without_writing_is_not_stale(tmp_path):
    """A compiler at work in the folder for longer than STALE_S without writing a file (on 2026-12-02 async_io's
    first object took 11.5 minutes on a loaded machine, and a rank refused the live lock): a process whose current
    directory is the folder, as torch's ninja and its compilers have, keeps the lock live; once it has gone, the
    idle folder's lock is left over again."""
    import subprocess
    import sys

    lock = _interrupted_build(tmp_path / "py311_cpu" / "async_io", STALE_S + 60)
    compiler = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], cwd=lock.parent)
    try:
        assert stale_locks(tmp_path, time.time()) == []
    finally:
        compiler.kill()
        compiler.wait()
    assert stale_locks(tmp_path, time.time()) == [lock]


def test_lock_released_while_looked_at_is_not_stale(tmp_path, monkeypatch):
    """Ranks loading an op together take and release the lock in turn: one released between the glob and the
    folder listing left only old files to read, and a live build was called interrupted (CI, 2026-11-26)."""
    from pathlib import Path

    lock = _interrupted_build(tmp_path / "deepspeed_shm_comm", STALE_S + 60)
    os.utime(lock)  # a rank just took it: the rest of the folder is as old as the last real build
    listing = Path.iterdir

    def released_meanwhile(self):
        if self == lock.parent and lock.exists():
            lock.unlink()  # the holder's FileBaton.release() between our glob and our listing
        return listing(self)

    monkeypatch.setattr(Path, "iterdir", released_meanwhile)
    assert stale_locks(tmp_path, time.time()) == []


def test_finished_build_has_no_lock(tmp_path):
    from torch.utils.file_baton import FileBaton

    folder = tmp_path / "py311_cpu" / "fused_adam"
    folder.mkdir(parents=True)
    baton = FileBaton(str(folder / "lock"))
    assert baton.try_acquire()
    baton.release()  # what a build that completes does
    assert stale_locks(tmp_path, time.time() + 10 * STALE_S) == []
    assert stale_locks(tmp_path / "missing", time.time()) == []


def test_message_names_the_file_and_the_fix(tmp_path):
    locks = [tmp_path / "a" / "lock", tmp_path / "b" / "lock"]
    message = stale_lock_message(locks)
    assert str(locks[0]) in message and f"rm {locks[0]}" in message and "1 more" in message
    assert "\n" not in message


def _guarded_baton():
    """A subclass of torch's FileBaton wrapped by dsbench.worker.jitbaton (torch's own class stays as it is here)."""
    from torch.utils.file_baton import FileBaton

    from dsbench.worker import jitbaton

    class Baton(FileBaton):
        pass

    jitbaton.guard(None, Baton)
    return Baton


def test_a_process_told_to_stop_removes_the_lock_it_holds_and_only_that(tmp_path, monkeypatch):
    """torch removes the lock in a `finally`, which a rank leaving through os._exit never runs: the stop hook
    removes what this process took, and leaves another builder's lock alone."""
    import threading

    from dsbench.worker import jitbaton

    monkeypatch.setattr(jitbaton, "_held", set())
    monkeypatch.setattr(jitbaton, "_stopping", threading.Event())
    baton = _guarded_baton()
    ours, theirs = tmp_path / "cpu_adam", tmp_path / "fused_adam"
    ours.mkdir()
    theirs.mkdir()
    (theirs / "lock").touch()  # another process's build
    assert not baton(str(theirs / "lock")).try_acquire()
    done = baton(str(tmp_path / "shm" / "lock"))
    (tmp_path / "shm").mkdir()
    assert done.try_acquire()
    done.release()  # a build that finished: released as torch releases it, and forgotten
    building = baton(str(ours / "lock"))
    assert building.try_acquire()  # what _jit_compile takes before building, held when the stop comes
    jitbaton.drop_held("SIGTERM")
    assert not (ours / "lock").exists() and (theirs / "lock").exists()
    assert jitbaton._stopping.is_set() and jitbaton._held == set()
    building.release()  # torch's `finally` after the hook (the build's compiler died of the same signal): no error
    assert (theirs / "lock").exists()


def test_a_wait_on_a_lock_left_over_ends_in_one_line(tmp_path):
    """A builder killed outright (SIGKILL) runs no hook: the wait refuses the lock once its folder is idle."""
    from dsbench.errors import UserError
    from dsbench.worker import jitbaton

    lock = _interrupted_build(tmp_path / "deepspeed_shm_comm", STALE_S + 60)
    with pytest.raises(UserError) as refused:
        _guarded_baton()(str(lock)).wait()
    assert str(refused.value) == stale_lock_message([lock])
    said = []
    fresh = _interrupted_build(tmp_path / "cpu_adam", 0)
    base, readings = time.time(), iter([0.0, 0.0, 29.0, 31.0])  # the start, then one reading per poll

    def build_ends(_seconds: float) -> None:
        if len(said) == 1:
            fresh.unlink()  # the builder releases it after the notice

    jitbaton.wait_for(fresh, 0.1, said.append, clock=lambda: base + next(readings),
                      sleep=build_ends)
    assert len(said) == 1 and str(fresh) in said[0] and "10 minutes" in said[0]


def test_a_lock_left_in_another_op_s_folder_stops_no_run_that_does_not_load_it(tmp_path, monkeypatch):
    """async_io's lock left by an NVMe run stopped mid-build: a ZeRO-2 rank, which never loads async_io, starts
    (until 2026-12-02 the rank checked every op's folder first and refused it); the op it does load, with a lock left
    in its folder too, is refused at its first wait, in the line ``dsbench doctor`` and the wait give."""
    from dsbench.errors import UserError
    from dsbench.worker import jitbaton, setup, stop

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    guarded, wrap = [], jitbaton.guard

    def guard(say, baton=None):  # torch's own FileBaton left alone in this process; a subclass wrapped below
        return guarded.append(say) if baton is None else wrap(say, baton)

    monkeypatch.setattr(jitbaton, "guard", guard)
    monkeypatch.setattr(stop, "on_stop", lambda hook: None)
    left = _interrupted_build(tmp_path / "async_io", STALE_S + 60)
    setup.guard_jit_builds()
    assert guarded == [stop.say] and stale_locks(tmp_path, time.time()) == [left]  # doctor still lists it
    loaded = _interrupted_build(tmp_path / "deepspeed_shm_comm", STALE_S + 60)
    with pytest.raises(UserError) as refused:
        _guarded_baton()(str(loaded)).wait()  # torch's FileBaton.wait on the op the run loads, as jitbaton wraps it
    assert str(refused.value) == stale_lock_message([loaded])


def test_a_test_s_bound_stops_its_child_without_leaving_the_lock_it_holds(tmp_path):
    """tests/bounded.py, which every test's child that may build a DeepSpeed op runs under: past the bound the
    child gets SIGTERM and removes its lock; what `subprocess.run(timeout=...)` did, SIGKILL, leaves it (the
    shared cache's lock that failed a clean clone's `dsbench doctor` test, 2026-12-04)."""
    import subprocess
    import sys

    from tests.bounded import GUARDED_BATON, communicate_bounded

    building = GUARDED_BATON + (
        "import sys, time\nfrom torch.utils.file_baton import FileBaton\n"
        "assert FileBaton(sys.argv[1]).try_acquire()\nprint('building', flush=True)\ntime.sleep(120)\n")
    for name, stop in (("killed", "kill"), ("bounded", "bound")):
        lock = tmp_path / name / "lock"
        lock.parent.mkdir()
        child = subprocess.Popen([sys.executable, "-c", building, str(lock)], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        assert child.stdout.readline() == "building\n" and lock.exists()
        if stop == "kill":
            child.kill()
            child.communicate()
            assert lock.exists()  # what a SIGKILL leaves
        else:
            _, err, timed_out = communicate_bounded(child, timeout=0.5, grace=30)
            assert timed_out and child.returncode == 143 and not lock.exists(), err[-2000:]


@pytest.mark.parametrize("explicit", [True, False])
def test_the_launch_looks_for_the_lock_where_torch_builds_the_op(tmp_path, monkeypatch, explicit):
    """Oracle: torch's own build folder for the op (torch/utils/cpp_extension.py ``_get_build_directory``), under
    TORCH_EXTENSIONS_DIR and under torch's default root in XDG_CACHE_HOME."""
    from torch.utils.cpp_extension import _get_build_directory

    from dsbench.jitlocks import SHM_COMM_OP, op_locks

    monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
    if explicit:
        monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "ext"))
    else:
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    folder = _get_build_directory(SHM_COMM_OP, verbose=False)  # torch makes the folder
    assert op_locks(SHM_COMM_OP, os.environ, str(tmp_path)) == []
    lock = _interrupted_build(tmp_path / "elsewhere", STALE_S + 60)
    os.rename(lock, os.path.join(folder, "lock"))
    found = op_locks(SHM_COMM_OP, os.environ, str(tmp_path))
    assert [os.path.realpath(path) for path in found] == [os.path.realpath(os.path.join(folder, "lock"))]
    assert op_locks("cpu_adam", os.environ, str(tmp_path)) == []  # another op's folder


def _launch_env(tmp_path, monkeypatch, age_s: float):
    import dsbench.envinfo

    monkeypatch.setattr(dsbench.envinfo, "local_gpu_count", lambda: 0)  # CPU ranks, on any machine
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "ext"))
    return _interrupted_build(tmp_path / "ext" / "deepspeed_shm_comm", age_s)


def test_a_deepspeed_launch_onto_cpu_ranks_here_refuses_a_stale_comm_op_lock(cli_run, tmp_path, monkeypatch):
    """Refused before any rank starts (each rank refused it about 6 s later, worker/jitbaton.py), in the rank's line;
    not for a launch whose ranks load no DeepSpeed, nor onto another machine's ranks, nor while a build is alive."""
    lock = _launch_env(tmp_path, monkeypatch, STALE_S + 60)
    result = cli_run("launch", "--zero", "1", "--run-dir", "r1", "--dry-run")
    assert result.exit_code == 2 and f"{lock}: a JIT build lock left by an interrupted build" in result.output
    assert not (tmp_path / "r1").exists()
    (tmp_path / "ds.json").write_text('{"train_micro_batch_size_per_gpu": "auto", "zero_optimization": '
                                      '{"stage": 2}}')
    (tmp_path / "ds.yaml").write_text("distributed_type: DEEPSPEED\nnum_processes: 2\ndeepspeed_config:\n"
                                      "  deepspeed_config_file: ds.json\n")
    result = cli_run("launch", "--accelerate-config", "ds.yaml", "--run-dir", "r2", "--dry-run")
    assert result.exit_code == 2 and f"{lock}: a JIT build lock" in result.output, result.output
    for args in (("--strategy", "ddp", "--launcher", "torchrun"), ("--hostfile", str(_hostfile(tmp_path)))):
        result = cli_run("launch", *args, "--run-dir", f"r-{args[0]}", "--dry-run")
        assert result.exit_code == 0, result.output
    os.utime(lock)  # written just now: a build at work
    assert cli_run("launch", "--zero", "1", "--run-dir", "r3", "--dry-run").exit_code == 0


def _hostfile(tmp_path):
    path = tmp_path / "hostfile"
    path.write_text("node1 slots=1\nnode2 slots=1\n")
    return path


@pytest.mark.parametrize("name, value", [
    ("TORCH_EXTENSIONS_DIR", "x" * 20_000), ("XDG_CACHE_HOME", "y" * 20_000), ("TORCH_EXTENSIONS_DIR", "/proc/1/root"),
    ("TORCH_EXTENSIONS_DIR", "a\0b"), ("TORCH_EXTENSIONS_DIR", "/etc/passwd"), ("TORCH_EXTENSIONS_DIR", "$(touch p)"),
])
def test_a_hostile_extensions_folder_finds_no_lock_and_stops_no_launch(cli_run, tmp_path, monkeypatch, name, value):
    """Every launch looks for the lock, so a variable this process cannot follow (too long for a path, a folder not
    its to list, a NUL byte) must not stop one: it finds no lock (until 2026-12-05 06:00, before a commit, an
    OSError); the ranks meet the variable in torch's own words."""
    import dsbench.envinfo
    from dsbench.jitlocks import SHM_COMM_OP, op_locks

    monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
    assert op_locks(SHM_COMM_OP, {name: value}, str(tmp_path)) == []
    monkeypatch.setattr(dsbench.envinfo, "local_gpu_count", lambda: 0)
    if "\0" not in value:  # the environment itself takes no NUL byte
        monkeypatch.setenv(name, value)
    result = cli_run("launch", "--zero", "1", "--run-dir", "r", "--dry-run")
    assert result.exit_code == 0 and not (tmp_path / "p").exists(), result.output

