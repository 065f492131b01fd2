"""The one module that runs processes: execute a LaunchCommand, tee its output, return its exit code.

``shell=False`` always: argv goes straight to ``exec``, so no hostname, path or value is ever
interpreted by a shell. SIGINT/SIGTERM are forwarded to the launcher's process group, which
stops every rank it started.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TextIO

from dsbench.errors import DsbenchError, UserError
from dsbench.launchers import LOCAL_HOSTS, LaunchCommand, LaunchSpec


class Interrupted(DsbenchError):
    """dsbench was told to stop (Ctrl-C, SIGTERM) while a launch ran: the launch's processes were stopped;
    exit 128 + the signal number, the shell's convention."""

    def __init__(self, signum: int) -> None:
        self.signal = signal.Signals(signum).name
        self.exit_code = 128 + signum
        super().__init__(f"interrupted by {self.signal}: the processes this launch started were stopped")


def resolve_executable(name: str) -> str:
    """Find a launcher next to the running Python first (an unactivated venv), then on PATH."""
    here = os.path.dirname(sys.executable)
    found = shutil.which(name, path=os.pathsep.join([here, os.environ.get("PATH", "")]))
    if found is None:
        raise UserError(f"launcher {name!r} not found next to {sys.executable} or on PATH: install it "
                        "(pip install deepspeed / accelerate / torch)")
    return found


def run(command: LaunchCommand, log_path: Path | None = None, echo: TextIO | None = sys.stdout,
        timeout: float | None = None, cwd: str | None = None, errors: TextIO | None = None) -> int:
    """Run ``command`` to completion; returns its exit code (124 on timeout, 128+N on signal N). Its stderr is
    merged into its stdout (a launch's log holds both, in order), or, with ``errors``, written there as it comes
    (``dsbench export``'s one error line on stderr, as every command's)."""
    env = {**os.environ, **command.env}
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    argv = [resolve_executable(command.argv[0]), *command.argv[1:]]  # a missing launcher: one line, no log opened
    if log_path:
        log_path.parent.mkdir(parents=True, exist_ok=True)
    log = open(log_path, "a", encoding="utf-8") if log_path else None  # noqa: SIM115 (closed below)
    proc = _start(argv, env, cwd, merge=errors is None)
    received: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        received.append(signum)
        if command.stop is not None:  # ranks on other nodes: stopped by their recorded pids, never by pattern
            threading.Thread(target=_stop_nodes, args=(command, proc, env, cwd), daemon=True).start()
        else:
            _signal_group(proc.pid, signum)  # the launcher's whole process group: it and every rank it started

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)} if _main_thread() else {}
    timed_out = threading.Event()
    timer = threading.Timer(timeout, _terminate, (proc, timed_out, command, env, cwd)) if timeout else None
    if timer:
        timer.start()
    try:
        _drain(proc, (echo, log), errors)
        return _finish(proc, received, timed_out)
    finally:
        if timer:
            timer.cancel()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if log:
            log.close()


def _finish(proc: subprocess.Popen, received: list[int], timed_out: threading.Event) -> int:
    """The launcher's exit code once its output has ended (124 after ``--timeout``), its group cleared; an
    :class:`Interrupted` when a signal was forwarded."""
    code = proc.wait()
    if received:  # the ranks are in their stop hooks (rank 0 writes the end record and summary.json): let them
        # finish, as the launcher may exit before they do; a second Ctrl-C ends the wait
        _wait_group(proc.pid, STOP_GRACE_S, lambda: len(received) > 1)
    _signal_group(proc.pid, signal.SIGKILL)  # whatever the launcher left behind in its group
    if received:
        raise Interrupted(received[0])
    return 124 if timed_out.is_set() else code


def _start(argv: list[str], env: dict[str, str], cwd: str | None, merge: bool = True) -> subprocess.Popen:
    """The launcher, in a session (and process group) of its own that a signal reaches whole, its stderr merged
    into its stdout (or a pipe of its own), line-buffered for the tee."""
    return subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT if merge else subprocess.PIPE, text=True, bufsize=1,
                            start_new_session=True)


def _drain(proc: subprocess.Popen, outputs: tuple[TextIO | None, ...], errors: TextIO | None) -> None:
    """The command's output to ``outputs`` until it ends; a separate stderr to ``errors`` beside it (a thread: either
    pipe may fill while the other is read)."""
    assert proc.stdout is not None
    side = threading.Thread(target=_tee, args=(proc.stderr, errors), daemon=True) if proc.stderr else None
    if side:
        side.start()
    _tee(proc.stdout, *outputs)
    if side:
        side.join()


def _tee(lines: Iterable[str], *outputs: TextIO | None) -> None:
    """Each line to every output there is, flushed as it comes (the launch's log and the console)."""
    for line in lines:
        for out in outputs:
            if out is not None:
                out.write(line)
                out.flush()


def check(argv: list[str], what: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run a short command to completion (no shell), output captured; a failure is a one-line error naming
    ``what`` and the command's last error line."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise UserError(f"{what}: {argv[0]} not found (install it)") from None
    except subprocess.TimeoutExpired:
        raise UserError(f"{what}: {argv[0]} did not finish within {timeout:g} s") from None
    if done.returncode != 0:
        last = (done.stderr.strip() or done.stdout.strip() or f"exit code {done.returncode}").splitlines()[-1]
        raise UserError(f"{what}: {last}")
    return done


def ssh_problems(hosts: list[str], timeout: float = 10) -> dict[str, str]:
    """Hosts that ``ssh -o BatchMode=yes HOST true`` cannot reach without a password, with ssh's last line
    (checked in parallel)."""
    from concurrent.futures import ThreadPoolExecutor

    def probe(host: str) -> str | None:
        argv = ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={int(timeout)}", host, "true"]
        try:
            check(argv, f"ssh {host}", timeout=timeout + 5)
        except UserError as exc:
            return str(exc).split(": ", 1)[-1]
        return None

    with ThreadPoolExecutor(max_workers=min(32, len(hosts) or 1)) as pool:
        answers = dict(zip(hosts, pool.map(probe, hosts), strict=True))
    return {host: problem for host, problem in answers.items() if problem}


def probe_host(host: str | None, python: str, cwd: str, port: int | None, timeout: float = 120) -> dict | str:
    """``python -m dsbench.worker.probe`` here (``host`` None) or on ``host`` over ssh: its facts (only the
    versions when ``port`` is None), or one line saying why none came back (``ssh: ...``: host unreachable)."""
    import json
    import shlex

    probe = [python, "-m", "dsbench.worker.probe", *(["--port", str(port)] if port else ["--versions"])]
    argv = probe if host is None else ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", host,
                                       f"cd {shlex.quote(cwd)} && exec {shlex.join(probe)}"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=cwd if host is None else None)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"probe did not run: {exc}"
    last = (done.stderr.strip() or done.stdout.strip() or f"exit code {done.returncode}").splitlines()[-1]
    if done.returncode == 255 and host is not None:
        return f"ssh: {last}"
    if done.returncode != 0:
        return f"{shlex.join(probe)} failed: {last}"
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])  # DeepSpeed may print before the JSON line
    except (ValueError, IndexError):
        return f"{shlex.join(probe)} printed no facts"


def probe_hosts(hosts: list[str], python: str, cwd: str, port: int | None) -> dict[str, dict | str]:
    """:func:`probe_host` on every host in parallel (host -> facts, or why none came back)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(32, len(hosts) or 1)) as pool:
        return dict(zip(hosts, pool.map(lambda h: probe_host(h, python, cwd, port), hosts), strict=True))


def preflight_nodes(spec: LaunchSpec) -> None:
    """Before a multi-node launch: the tools it needs, and every node reachable by ssh without a password."""
    if spec.launcher == "deepspeed" and spec.launcher_backend == "pdsh" and shutil.which("pdsh") is None:
        raise UserError("pdsh is missing (DeepSpeed reaches other nodes with it): apt-get install pdsh, or "
                        "--launcher-backend ssh")
    if spec.launcher == "deepspeed" and spec.launcher_backend == "openmpi" and shutil.which("mpirun") is None:
        raise UserError("mpirun is missing for --launcher-backend openmpi: apt-get install openmpi-bin")
    problems = ssh_problems(list(spec.selection()))
    if problems:
        host, why = next(iter(problems.items()))
        from dsbench.ssh_fix import ssh_fix

        raise UserError(f"host {host} is not reachable by ssh ({why}): {ssh_fix(host, why)}; "
                        f"`dsbench doctor --hostfile {spec.hostfile}` checks every host")
    from dsbench.envinfo import version_differences, versions

    remote = [h for h in spec.selection() if h not in LOCAL_HOSTS]
    for host, facts in probe_hosts(remote, spec.python, spec.cwd, None).items():
        if isinstance(facts, str):
            raise UserError(f"host {host}: {facts}; install the project at {spec.cwd} there, with {spec.python}")
        differ = version_differences(versions(), facts["versions"])
        if differ:
            raise UserError(f"host {host} runs {'; '.join(differ)}: install the same versions on every node "
                            f"(`dsbench doctor --hostfile {spec.hostfile}` lists them)")


def preflight_slurm() -> None:
    """``--launcher slurm`` needs sbatch (and scontrol/srun inside the job) on this host."""
    if shutil.which("sbatch") is None:
        raise UserError("sbatch is missing: run on the cluster's login node, or apt-get install slurm-client")


STOP_GRACE_S = 10.0
"""After an interrupted launcher exits, how long the ranks left in its group get to finish their stop hooks before
the group is SIGKILLed: rank 0's (worker/stop.py) writes the end record and summary.json in well under a second, but
DeepSpeed's runner can exit while its ranks are still in them (a SIGINT launch lost its summary that way,
2026-11-30)."""


def group_alive(pgid: int, proc: Path = Path("/proc")) -> bool:
    """Whether a process of the group is still running: its /proc/PID/stat names the group and a state other than
    zombie (an exited orphan counts for kill(2) until its new parent reaps it)."""
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()  # after "pid (comm)": state ppid pgrp
        except (OSError, IndexError):  # gone meanwhile
            continue
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z":
            return True
    return False


def _wait_group(pgid: int, seconds: float, enough: Callable[[], bool]) -> None:
    """Wait until no process of the group runs, ``seconds`` pass, or ``enough()``."""
    deadline = time.monotonic() + seconds
    while group_alive(pgid) and time.monotonic() < deadline and not enough():
        time.sleep(0.05)


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):  # the group is gone already
        pass


def _stop_nodes(command: LaunchCommand, proc: subprocess.Popen, env: dict[str, str], cwd: str | None) -> None:
    """Stop a multi-node launch: its stop command ends this launch's processes on every node (each rank's exit
    ends the launchers), then the launcher's local group is SIGKILLed: a signal it could catch would make
    DeepSpeed's pdsh runner kill by pattern."""
    assert command.stop is not None
    try:
        stopper = [resolve_executable(command.stop.argv[0]), *command.stop.argv[1:]]
        subprocess.run(stopper, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30,
                       check=False)
    except (OSError, subprocess.TimeoutExpired, UserError):
        pass  # the group is still killed below; a node that could not be reached keeps its ranks until they time out
    try:
        proc.wait(timeout=30)  # the launchers see their ranks end
    except subprocess.TimeoutExpired:
        pass
    _signal_group(proc.pid, signal.SIGKILL)


def _terminate(proc: subprocess.Popen, timed_out: threading.Event, command: LaunchCommand | None = None,
               env: dict[str, str] | None = None, cwd: str | None = None) -> None:
    """Timeout: SIGTERM the launcher's process group (launchers stop their ranks), SIGKILL after 30 s; a multi-node
    launch is stopped by its stop command (:func:`_stop_nodes`)."""
    timed_out.set()
    if command is not None and command.stop is not None:
        _stop_nodes(command, proc, env or {}, cwd)
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()
