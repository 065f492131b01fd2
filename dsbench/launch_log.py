"""What a launch's log says about how it ended: the line that names why it failed, the ranks that stopped without
a word, a SLURM job's failure (pure: reads the files a launch wrote, starts nothing)."""

from __future__ import annotations

import re
from pathlib import Path


def submitted_job(log_path: Path) -> str | None:
    """The SLURM job id sbatch printed into the launch log ("Submitted batch job N"), if any."""
    try:
        found = re.search(r"Submitted batch job (\d+)", log_path.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return None
    return found.group(1) if found else None


def slurm_failure(log_path: Path, output_template: str, lines: int = 3) -> str | None:
    """For a failed ``sbatch --wait``: the job id (:func:`submitted_job`) and the last lines of the job's output,
    on one line."""
    job = submitted_job(log_path)
    if job is None:
        return None
    output = Path(output_template.replace("%j", job))
    try:
        tail = [line.strip() for line in output.read_text(encoding="utf-8", errors="replace").splitlines()
                if line.strip()][-lines:]
    except OSError:
        tail = ["(no output file)"]
    cause = first_error(output)
    return (f"SLURM job {job} failed{': ' + cause if cause else ''}; last lines of {output}: "
            f"{' | '.join(tail)}")


def slurm_never_trained(log_path: Path, folder: Path) -> str | None:
    """For an ``sbatch --wait`` that returned 0: why the job did not train when no rank wrote the run's summary
    (SLURM cancelled a job whose start failed on its node, and ``sbatch --wait`` returns its exit code, 0), or
    None when it did."""
    if (folder / "summary.json").exists():
        return None
    job = submitted_job(log_path)
    named = f"SLURM job {job}" if job else "the SLURM job"
    return (f"{named} ended without training (no rank wrote {folder / 'summary.json'}): SLURM did not start it on "
            f"its node; `scontrol show job` says how it ended, the node's slurmd log why")


_RANK_LINE = re.compile(r"\[rank (\d+) on ([^\]]+)\] dsbench\.train: (started|finished|error|stopped by)")


def _split_rank_lines(lines: list[str]) -> list[str]:
    """The log's lines, with a line holding several ranks' lines cut before each (a launcher that runs ranks
    unbuffered, or a rank older than this one, can interleave two ranks' writes into one line)."""
    out = []
    for line in lines:
        starts = [found.start() for found in _RANK_LINE.finditer(line)][1:]  # a prefix (pdsh's "host: ") stays
        cuts = [0, *starts, len(line)]
        out.extend(line[a:b].strip() for a, b in zip(cuts, cuts[1:], strict=False) if line[a:b].strip())
    return out


def first_error(log_path: Path) -> str | None:
    """The line that names why a launch failed:

    1. the first rank's ``dsbench.train: error:`` that is a cause (not a lost connection to a peer that died: the
       others fail in collectives after the first);
    2. else the ranks that started and never said how they ended (no error, ``finished`` or ``stopped by``): they
       were killed outright (SIGKILL, the OOM killer) or crashed in native code;
    3. else the first rank error, or the launcher's last error-looking line.
    """
    try:
        text = log_path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    lines = _split_rank_lines(text.splitlines())
    rank_errors = [line for line in lines if "dsbench.train: error:" in line]
    causes = [line for line in rank_errors if "lost the connection to another rank" not in line]
    if causes:
        return causes[0]
    silent = silent_ranks(lines)
    if silent:
        named = ", ".join(f"rank {rank} on {host}" for rank, host in silent)
        return (f"{named} stopped without a word (no error line): killed by a signal such as SIGKILL or the "
                "out-of-memory killer, or crashed in native code")
    if rank_errors:
        return rank_errors[0]
    for marker in ("terminate called", "exits with return code", "Error", "error"):
        found = [line for line in lines if marker in line]
        if found:
            return found[-1]
    return None


def silent_ranks(lines: list[str]) -> list[tuple[int, str]]:
    """Ranks (with their host) that printed ``started`` but no line saying how they ended."""
    started: dict[int, str] = {}
    ended: set[int] = set()
    for line in lines:
        for found in _RANK_LINE.finditer(line):
            rank, host, what = int(found.group(1)), found.group(2), found.group(3)
            if what == "started":
                started[rank] = host
            else:
                ended.add(rank)
    return sorted((rank, host) for rank, host in started.items() if rank not in ended)
