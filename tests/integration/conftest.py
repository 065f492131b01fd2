"""Real multi-process launches on 2 CPU ranks (gloo). Runs are cached per session: several tests read one run."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bounded import communicate_bounded
from tests.conftest import DATA, ROOT

STEPS = 12
LR_WARMUP = ["--warmup-steps", "8"]
"""Every session run ramps its LR over 8 steps (DeepSpeed's WarmupLR, the native engines' LambdaLR after it), so
the parity of every strategy with one process also checks the warm-up, and a checkpoint saved at SAVE_AT is resumed
mid-ramp (test_checkpoint.py)."""
WORKER = ["--steps", str(STEPS), "--warmup", "2", "--quiet"]
"""The session runs' worker flags; a launch made outside the cache that must match them uses these and LR_WARMUP."""
SAVE_AT = STEPS // 2
MB = ["--micro-batch", "2"]
LLAMA = ["--lr", "1e-3", "--grad-clip", "0.3"]
"""Every Llama-family run's flags (theirs and their references'): a larger LR, and a clip below their gradient
norms (0.78-0.9 in the first steps of llama-tiny), so each layout's clipping is checked against one process's."""
# The single-node cells other modules' runs are checked against (accelerate YAMLs, SLURM, multi-node), launched once
# through the session's cache (Runs).
ZERO2, ZERO3 = ["--zero", "2", *MB], ["--zero", "3", *MB]
DDP, FSDP = ["--strategy", "ddp", "--launcher", "torchrun", *MB], ["--strategy", "fsdp", "--launcher", "torchrun", *MB]
# DeepSpeed's pipeline engine: 2 stages x 2 micro-batches, the same global batch (4) as the 2-rank cells above
PIPE = ["--zero", "0", "--pipeline-stages", "2", "--grad-accum", "2", *MB]
# DTensor tensor parallelism (tp 2 x dp 2, with sequence parallelism, the vocabulary-parallel loss and, since
# 2026-12-01, torch's selective activation checkpointing) on llama-tiny: test_model_parallel.py's torch_tp2_dp2_llama
# (its parity with one process), launched once
TORCH_TP = ["--strategy", "torch_tp", "--tp", "2", "--launcher", "torchrun", "--model", "llama-tiny", "--micro-batch",
            "2", "--num-gpus", "4", "--sequence-parallel", "--loss-parallel", "--recompute", "selective-op"]
# torch's pipelining (since 2026-12-01 they save too): GPipe over 2 stages of gpt2-tiny, whose tied embedding the first
# and last stage both hold; torch_3d on 8 ranks (tp 2 x pp 2 x FSDP over 2 replicas) on a Qwen3 with a tied head,
# under the interleaved schedule (each rank's two chunks in a list). test_model_parallel.py's torch_pipe2_gpt2 and
# torch_3d_tp2_pp2_dp2_interleaved2_qwen3_tied (their parity with one process), launched once
TORCH_PP = ["--strategy", "torch_pp", "--pipeline-stages", "2", "--launcher", "torchrun", "--model", "gpt2-tiny",
            "--micro-batch", "1", "--grad-accum", "4", "--num-gpus", "2", "--pipeline-schedule", "gpipe"]
QWEN3_TIED = DATA / "models" / "qwen3-tied-tiny"  # tied embeddings, q/k norms, wide heads (tests/data/models/README.md)
TORCH_3D = ["--strategy", "torch_3d", "--tp", "2", "--pipeline-stages", "2", "--launcher", "torchrun", "--model",
            str(QWEN3_TIED), "--micro-batch", "1", "--grad-accum", "2", "--num-gpus", "8", "--pipeline-schedule",
            "interleaved", "--virtual-stages", "2"]
SAVED = (ZERO2, ZERO3, DDP, FSDP, PIPE, [*TORCH_TP, *LLAMA], TORCH_PP, [*TORCH_3D, *LLAMA])
"""Cells whose session run also saves a checkpoint at SAVE_AT and at the end, into RUN/checkpoints: the straight
runs test_checkpoint.py resumes and exports. Saving changes nothing in the run (it reads the state), which their
parity with one process checks too."""
sys.path.insert(0, str(ROOT / "scripts"))
try:
    import prebuild_ops  # the launches' environment and DeepSpeed's ops, built ahead (scripts/prebuild_ops.py)
finally:
    sys.path.pop(0)
launch_env = prebuild_ops.launch_env
"""Every launch's environment: the CPU accelerator, one thread per rank, the venv's JIT folder and bin."""


NVME_TEST = "test_zero3_nvme_offload"


@pytest.fixture(scope="session", autouse=True)
def _prebuild_ops(request):
    """DeepSpeed's JIT ops (shm comm, FusedAdam, CPU Adam, async_io) built from the session's start in the
    background by scripts/prebuild_ops.py, in the order the tests first need them, when the session holds the NVMe
    test (the whole suite, or its file): the builds run beside the first launches (torch's own engines,
    :data:`FIRST_FILES`), and a launch that needs an op meanwhile waits on torch's build lock for what is left.
    `make test` starts the same build before the unit tests; this one then finds the ops built, or waits on that
    build's locks. A narrower selection builds each op in the first launch that needs it, as DeepSpeed does. The
    session waits for the build at its end (killing it leaves a lock)."""
    if not any(item.name == NVME_TEST for item in request.session.items):
        yield
        return
    build = prebuild_ops.start(prebuild_ops.OPS)  # into the launches' own TORCH_EXTENSIONS_DIR (launch_env)
    yield
    build.wait()


TESTBED_FILES = {"test_multinode.py", "test_multinode_flow.py", "test_slurm.py"}
"""Files that bring up the network-namespace test bed or a SLURM cluster: one machine-wide resource, so they run
one after another on one pytest-xdist worker."""


def group_of(nodeid: str) -> str:
    """The test's group under ``--dist loadgroup`` (below): its file, the test bed's, or the NVMe test's own."""
    file, _, name = nodeid.partition("::")
    if name.split("[")[0] == NVME_TEST:
        return "nvme"
    return "testbed" if Path(file).name in TESTBED_FILES else file


@pytest.hookimpl(optionalhook=True)  # an xdist hook: absent when the suite runs in one process
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup`` with the groups of :func:`group_of`. xdist 3.8 reads a test's ``xdist_group`` mark into
    its node id, which pytest 9 no longer lets it change (``Node.nodeid`` is derived from ``_id``), so every test
    would be a group of its own; its scope scheduler with the group as the scope keeps a group on one worker."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ByGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    # the groups in the order pytest_collection_modifyitems gives them: the scope scheduler's default reorders them
    # by their number of tests, which ran test_engine_ranks.py first and test_calibrate.py (one test, 3 minutes)
    # among the last, one worker idle for 1-2 minutes at the end (the clean clones of 2026-12-02)
    config.option.loadscopereorder = False
    return ByGroup(config, log)


FIRST_FILES = ("test_model_parallel.py",)
"""Integration files run before the others: their first launches are torch's own engines, which load no DeepSpeed
op, so the ops' background build (:func:`_prebuild_ops`) runs beside them before the first DeepSpeed launch needs
it."""


GROUP_SECONDS = {"testbed": 730, "test_launch_strategies.py": 560, "test_checkpoint.py": 250, "test_calibrate.py": 183,
                 "test_accelerate_yaml.py": 147, "test_failures.py": 134}
"""The longest groups' seconds in the clean clone of 4449cb3 (2026-12-02 16:21, `--durations=0` summed per file),
for their order only: the longest start first (after :data:`FIRST_FILES`), so that the last to finish is a short
one and the two workers end together (a greedy schedule of that clone's groups: 1,281 s for the busier worker,
against 1,313 s in the order by number of tests). A group not listed (0 s) keeps its collection order after them."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """:data:`FIRST_FILES` run first, then the longest groups (:data:`GROUP_SECONDS`), and the NVMe test last; the
    other tests keep their order. The NVMe test's async_io op is the background build's last (about 8 minutes after
    the others); run where it falls alphabetically, the test waited about 3 minutes for what was left of the build
    (203 s at f30bc8b), at the end it finds the op built.

    Under ``make test`` two pytest-xdist workers run the files side by side (``--dist loadgroup``): a launch spends
    much of its wall clock with a core idle (interpreters importing one after another, the launcher chain, ranks
    waiting in collectives, ssh and SLURM start-up), and the other worker's launch uses it. Each file is one group
    (:func:`group_of`, :func:`pytest_xdist_make_scheduler`), so its module fixtures and shared runs stay on one
    worker; the test-bed files share one group; the NVMe test is a group of its own, scheduled last."""
    def rank(item: pytest.Item) -> tuple[bool, bool, float]:
        group = group_of(item.nodeid)
        return group == "nvme", item.path.name not in FIRST_FILES, -GROUP_SECONDS.get(Path(group).name, 0)

    items.sort(key=rank)  # stable: within a rank, collection order


def bin_path(name: str) -> str:
    """A console script of this venv (deepspeed, accelerate, torchrun)."""
    return str(Path(sys.executable).parent / name)


_TIMEOUTS: list[str] = []
"""Commands that ran past their limit this session: after two, a hang is systemic (e.g. a stale JIT build lock
that every DeepSpeed run waits on), and failing the remaining launches at once keeps the suite's output and
its 90-minute CI budget."""


LAUNCHES: dict[str, int] = {}
"""Real launches per test (its node id; a shared run counts for the test that launched it first): jobs whose ranks
trained or measured (a compare, tune or whatif counts each cell)."""
_LAUNCHERS = {"deepspeed", "torchrun", "accelerate", "sbatch", "srun", "mpirun"}
_TEMP: list[Path] = []
"""The session's pytest temporary folder, where the tests' run folders are."""


@pytest.fixture(scope="session", autouse=True)
def _session_temp(tmp_path_factory) -> None:
    _TEMP.append(tmp_path_factory.getbasetemp())


def _launch_logs() -> set[str]:
    """Every launch.log under the session's temporary folder (every real `dsbench launch` writes one in its run
    folder, a compare cell's too; dsbench never reuses a run folder)."""
    found = set()
    for root in _TEMP:
        for folder, _, files in os.walk(root):
            if "launch.log" in files:
                found.add(folder)
    return found


def _count_launches(argv: list[str], before: set[str]) -> None:
    """A dsbench command counts the launch logs that appeared while it ran (a dry run or a refusal writes none);
    calibrate's ranks, or a launcher started directly, count once when they wrote none."""
    words = [Path(a).name for a in argv[:4]]
    command = argv[3] if words[1:3] == ["-m", "dsbench"] and len(argv) > 3 else None
    trains = command == "calibrate" or bool(_LAUNCHERS & set(words[:1]))
    note_launch(len(_launch_logs() - before) or int(trains))


def note_launch(count: int = 1) -> None:
    """Count ``count`` real launches for the running test (for processes started without run_command)."""
    if count:
        test = os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" (", 1)[0]  # without " (setup)", " (call)"
        LAUNCHES[test] = LAUNCHES.get(test, 0) + count


def run_command(argv: list[str], cwd: Path, env: dict[str, str] | None = None,
                timeout: int = 900) -> subprocess.CompletedProcess:
    """Run a command with the CPU environment; output captured as text. On timeout the command gets SIGTERM
    (dsbench forwards it to the launcher's process group, which stops every rank), then SIGKILL.

    A timeout guards against a hang; it is not a speed check. A command that trains keeps the default: machines here
    differ up to 3x per launch (the 4-rank test-bed calibration took 280 s on 2026-12-02 at 01:23 and ran past 300 s
    in CI on 2026-12-02). A shorter one only for what trains nothing (the test bed's up/down, doctor, a dry run)."""
    before = _launch_logs()
    try:
        return _run(argv, cwd, env, timeout)
    finally:
        _count_launches(argv, before)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """On a pytest-xdist worker: hand this worker's launch counts to the controller (pytest_testnodedown)."""
    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        output["launches"] = dict(LAUNCHES)


@pytest.hookimpl(optionalhook=True)  # an xdist hook: absent when the suite runs in one process
def pytest_testnodedown(node, error) -> None:
    for test, count in getattr(node, "workeroutput", {}).get("launches", {}).items():
        LAUNCHES[test] = LAUNCHES.get(test, 0) + count


def pytest_terminal_summary(terminalreporter) -> None:
    """The launch count per file in one line (docs/testing.md lists it), then a line per file: which test made
    each launch."""
    per_file: dict[str, dict[str, int]] = {}
    for test, count in sorted(LAUNCHES.items()):
        path, _, name = test.partition("::")
        per_file.setdefault(Path(path).name, {})[name] = count
    if per_file:
        terminalreporter.write_line(f"real launches: {sum(LAUNCHES.values())} ("
                                    + ", ".join(f"{file} {sum(tests.values())}" for file, tests in per_file.items())
                                    + ")")
        for file, tests in per_file.items():
            terminalreporter.write_line(f"  {file}: " + ", ".join(f"{name} {count}" for name, count in tests.items()))


def _run(argv: list[str], cwd: Path, env: dict[str, str] | None, timeout: int) -> subprocess.CompletedProcess:
    if len(_TIMEOUTS) >= 2:
        pytest.fail(f"not started: {len(_TIMEOUTS)} commands already timed out this session ({_TIMEOUTS[0]})")
    full_env = {**launch_env(), **(env or {})}
    proc = subprocess.Popen(argv, cwd=cwd, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    out, err, timed_out = communicate_bounded(proc, timeout)  # SIGTERM to its group first: the ranks stop cleanly
    if timed_out:
        _TIMEOUTS.append(" ".join(argv[2:6]))
        pytest.fail(f"timed out after {timeout} s: {' '.join(argv)}\n{out[-3000:]}\n{err[-3000:]}")
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def dsbench(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: int = 900):
    return run_command([sys.executable, "-m", "dsbench", *args], cwd=cwd, env=env, timeout=timeout)


def start_dsbench(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """A dsbench command started in the background, in a session of its own (a test signals it, or its process
    group), counted as one launch; ``env`` is laid over the launches' environment."""
    note_launch()
    return subprocess.Popen([sys.executable, "-m", "dsbench", *args], cwd=cwd, env={**launch_env(), **(env or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def load_run(folder: Path) -> dict:
    """metrics.jsonl records by type, and summary.json."""
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    summary = json.loads((folder / "summary.json").read_text())
    # every finished run the suite reads: its data-parallel copies were bit-identical after the last step, wherever
    # it kept any (worker/replicas.py)
    assert (summary.get("replicas") or {}).get("agree", True), (folder, summary["replicas"])
    return {"header": [r for r in records if r["type"] == "header"],
            "steps": [r for r in records if r["type"] == "step"],
            "states": [r for r in records if r["type"] == "model_states"],
            "window": [r for r in records if r["type"] == "window"],
            "summary": summary}


class Runs:
    """Launch each configuration once per test run and keep the result. A run is known by its arguments, not its
    name: tests in different files that launch the same command share one launch (the name only names the folder
    of the first), across pytest-xdist's workers too: the first worker to lock a command's record launches it,
    and a worker that needs it meanwhile waits on the lock and reads the record."""

    def __init__(self, base: Path, index: Path) -> None:
        self.base = base  # this process's run folders (its launch counter looks only here)
        self.index = index  # one record per command, shared by the workers
        self.cache: dict[tuple[str, ...], tuple[subprocess.CompletedProcess, Path]] = {}

    def get(self, name: str, launch_args: list[str], worker_args: list[str] | None = None, steps: int = STEPS):
        worker = WORKER if steps == STEPS else ["--steps", str(steps), *WORKER[2:]]
        key = (*launch_args, *LR_WARMUP, "--", *worker, *(worker_args or []))
        if key not in self.cache:
            saves = list(launch_args) in SAVED and not worker_args and steps == STEPS
            self.cache[key] = self._launch_once(name, key, saves=saves)
        return self.cache[key]

    def _launch_once(self, name: str, key: tuple[str, ...], saves: bool) -> tuple[subprocess.CompletedProcess, Path]:
        digest = hashlib.sha256("\0".join(key).encode()).hexdigest()[:16]
        record = self.index / f"{digest}.json"
        with open(self.index / f"{digest}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # sync point: another worker launching the same command
            if record.exists():
                saved = json.loads(record.read_text())
                return (subprocess.CompletedProcess(saved["args"], saved["returncode"], saved["stdout"],
                                                    saved["stderr"]), Path(saved["folder"]))
            claim = self.index / f"{name}.name"  # a name is one command's, whichever worker used it first
            with open(claim, "a+") as named:
                fcntl.flock(named, fcntl.LOCK_EX)  # sync point: the name's first user
                named.seek(0)
                owner = named.read() or digest
                named.seek(0)
                named.truncate()
                named.write(owner)
            assert owner == digest, f"run name {name} used for two different commands"
            folder = self.base / name
            save = ["--checkpoint-dir", str(folder / "checkpoints"), "--save-every", str(SAVE_AT)] if saves else []
            result = dsbench("launch", *key[:key.index("--")], "--run-dir", str(folder), "--",
                             *key[key.index("--") + 1:], *save, cwd=ROOT)
            record.write_text(json.dumps({"args": result.args, "returncode": result.returncode,
                                          "stdout": result.stdout, "stderr": result.stderr, "folder": str(folder)}))
            return result, folder


@pytest.fixture(scope="session")
def runs(tmp_path_factory) -> Runs:
    base = tmp_path_factory.getbasetemp()
    # under pytest-xdist each worker's basetemp is a folder of the run's own (popen-gw0, ...): the index beside them
    index = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "run-index"
    index.mkdir(exist_ok=True)
    return Runs(tmp_path_factory.mktemp("runs"), index)
