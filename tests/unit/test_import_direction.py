"""Imports run one way: cli -> commands -> pure core; torch only in the worker; no sideways imports.

Each dsbench unit (a top-level module or a subpackage) may import only the units listed for it. The core is
stdlib-only (plus PyYAML/click where a command needs them); torch, deepspeed, transformers and datasets are
imported only under dsbench/worker (and dsbench/train.py reaches the worker lazily).
"""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

from tests.conftest import ROOT

CORE = {"errors", "io", "paths", "spec", "parallel", "records", "run_record", "models", "hostfile", "trainspec",
        "trainflags", "envinfo", "console", "jitlocks", "launchstop", "strategies", "gpus", "rows", "checkpoints",
        "layout_check", "strategy_match", "zero_section", "model_checks", "model_config", "model_fields",
        "ds_schema_file", "run_dir", "cell_record", "record_fields", "local_ranks", "dataset_files", "header_fields",
        "ssh_fix", "units", "checkpoint_files", "__init__"}
ALLOWED: dict[str, set[str]] = {
    **{unit: CORE for unit in CORE},
    "configs": CORE,
    "launchers": CORE,
    "report": CORE,
    "plan": CORE | {"configs"},
    "runner": CORE | {"launchers"},
    "launch_log": CORE,
    "testbed": CORE | {"runner"},
    "doctor": CORE | {"launchers", "runner"},
    "launch_checks": CORE | {"configs"},
    "launch_request": CORE | {"launchers", "configs"},  # a config's precision, read as DeepSpeed reads it
    "launch": CORE | {"configs", "launchers", "launch_checks", "launch_request"},
    # bench runs and measures; printing and plotting are the report's and the commands' (bench imports no report)
    "bench": CORE | {"configs", "launchers", "runner", "launch_log", "plan", "launch", "testbed"},
    "worker": CORE | {"configs"},
    "train": CORE | {"worker"},
    "commands": CORE | {"configs", "launchers", "report", "plan", "runner", "launch_log", "launch", "bench", "testbed",
                        "doctor", "launch_checks", "launch_request"},
    "cli": CORE | {"commands"},
    "__main__": {"cli"},
}
HEAVY = {"torch", "deepspeed", "transformers", "datasets", "accelerate"}
# `validate` runs DeepSpeed's own config parser, imported lazily inside the check (`--no-deepspeed-check` skips it)
HEAVY_EXCEPTIONS = {Path("configs/deepspeed_check.py"): {"deepspeed"}}


def _imports(path: Path) -> set[str]:
    """Top-level names imported by ``path``: dsbench units as 'dsbench.X', others by their package."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            parts = node.module.split(".")
            if parts[0] == "dsbench" and len(parts) == 1:
                found |= {f"dsbench.{alias.name}" for alias in node.names}
            else:
                found.add(".".join(parts[:2]) if parts[0] == "dsbench" else parts[0])
        elif isinstance(node, ast.Import):
            found |= {".".join(a.name.split(".")[:2]) if a.name.startswith("dsbench.") else a.name.split(".")[0]
                      for a in node.names}
    return found


def test_units_import_only_what_they_may():
    problems = []
    for path in sorted((ROOT / "dsbench").rglob("*.py")):
        rel = path.relative_to(ROOT / "dsbench")
        unit = rel.parts[0] if len(rel.parts) > 1 else rel.stem
        for name in _imports(path):
            if name.startswith("dsbench."):
                other = name.split(".")[1]
                if other not in (unit, "__version__") and other not in ALLOWED[unit]:
                    problems.append(f"{rel} imports dsbench.{other}")
            elif name in HEAVY and unit != "worker" and name not in HEAVY_EXCEPTIONS.get(rel, set()):
                problems.append(f"{rel} imports {name} (only dsbench/worker may)")
    assert problems == []


def test_every_unit_has_a_rule():
    units = {p.relative_to(ROOT / "dsbench").parts[0].removesuffix(".py") for p in (ROOT / "dsbench").glob("*")
             if p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").exists())}
    assert units <= set(ALLOWED), units - set(ALLOWED)


PROCESS_STARTERS = ("subprocess", "os.system", "os.popen", "os.exec", "os.spawn", "os.fork", "os.posix_spawn",
                    "pty.spawn", "multiprocessing")


def test_only_the_runner_starts_processes():
    """dsbench.runner is the one module that starts processes (the worker's ranks are started by launchers)."""
    found = []
    for path in sorted((ROOT / "dsbench").rglob("*.py")):
        if path == ROOT / "dsbench" / "runner.py":
            continue
        text = path.read_text()
        imported = {name.split(".")[0] for name in _imports(path)}
        found += [f"{path.relative_to(ROOT)}: {word}" for word in PROCESS_STARTERS
                  if (word in imported if "." not in word else f"{word}(" in text or f"{word}" in text)]
    assert found == []



def _module_graph() -> dict[str, set[str]]:
    """dsbench module -> the dsbench modules it imports (at the top or inside functions)."""
    modules = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
               for p in (ROOT / "dsbench").rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("dsbench"):
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    deps.add(full if full in modules else node.module)
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name.startswith("dsbench")}
        graph[name] = {d for d in deps if d in modules and d != name}
    return graph


def test_no_import_cycle():
    """No module imports, directly or through others, one that imports it back (registries import their entries;
    the entries import the shared base beside them, never the registry)."""
    graph = _module_graph()
    cycles = []
    for start in graph:
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for nxt in graph[node]:
                if nxt == start:
                    cycles.append(" -> ".join([*path, nxt]))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*path, nxt]))
    assert cycles == []


MAX_MODULE_LINES = 300
MAX_FUNCTION_LINES = 40


def test_modules_and_functions_stay_small():
    """No module over 300 lines and no function over 40 (issue 25's aim; its limit was 400 and 60): one job each."""
    problems = []
    for path in sorted((ROOT / "dsbench").rglob("*.py")):
        text = path.read_text()
        rel = path.relative_to(ROOT)
        if len(text.splitlines()) > MAX_MODULE_LINES:
            problems.append(f"{rel}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                    and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES):
                problems.append(f"{rel}:{node.lineno} {node.name}: {node.end_lineno - node.lineno + 1} lines")
    assert problems == []


def test_no_backslash_continuations():
    """Long expressions break inside brackets, not after a backslash (PEP 8): the package, its tests and scripts
    (a backslash ending a line of a docstring's shell example is text, not a continuation: tokenize tells)."""
    problems = []
    for path in sorted(p for folder in ("dsbench", "tests", "scripts") for p in (ROOT / folder).rglob("*.py")):
        text = path.read_text()
        inside = {line for token in tokenize.generate_tokens(io.StringIO(text).readline)
                  if token.type == tokenize.STRING for line in range(token.start[0], token.end[0])}
        problems += [f"{path.relative_to(ROOT)}:{number}" for number, line in enumerate(text.splitlines(), 1)
                     if line.rstrip().endswith("\\") and number not in inside and not line.lstrip().startswith("#")]
    assert problems == []
