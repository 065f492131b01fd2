#!/usr/bin/env bash
# Time `make demo` as a new user meets it: a fresh clone, a new venv, empty pip and JIT caches (issue 29).
# Prints the split: pip (make venv), DeepSpeed's JIT builds (each op from its build.ninja to its .so, as the cells
# that first need them build them), the cells (everything else in `dsbench compare`), and the whole.
#   scripts/time_demo.sh [DIR]    # DIR: where the clone and caches go [a new temporary folder]; kept afterwards
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
work=${1:-$(mktemp -d)}
mkdir -p "$work"
git clone -q "$src" "$work/repo"
export PIP_CACHE_DIR="$work/pip-cache" TORCH_EXTENSIONS_DIR="$work/torch_extensions"
cd "$work/repo"
start=$(date +%s.%N)
make venv >"$work/venv.log" 2>&1
installed=$(date +%s.%N)
make demo >"$work/demo.log" 2>&1
done_at=$(date +%s.%N)
python3 - "$start" "$installed" "$done_at" "$TORCH_EXTENSIONS_DIR" <<'EOF'
import sys
from pathlib import Path

start, installed, done_at = map(float, sys.argv[1:4])
builds = {}
for ninja in Path(sys.argv[4]).glob("*/build.ninja"):
    libraries = list(ninja.parent.glob("*.so"))
    if libraries:  # from the build file torch writes first to the library it links last
        builds[ninja.parent.name] = max(p.stat().st_mtime for p in libraries) - ninja.stat().st_mtime
first = min((p.stat().st_mtime for p in Path(sys.argv[4]).glob("*/build.ninja")), default=None)
last = max((p.stat().st_mtime for p in Path(sys.argv[4]).glob("*/*.so")), default=None)
jit_span = (last - first) if first and last else 0.0
demo = done_at - installed
print(f"pip (make venv)            {installed - start:7.1f} s")
print(f"JIT builds (sum of ops)    {sum(builds.values()):7.1f} s  "
      + ", ".join(f"{k} {v:.0f} s" for k, v in sorted(builds.items())))
print(f"JIT span (first to last)   {jit_span:7.1f} s")
print(f"cells (compare - JIT sum)  {demo - sum(builds.values()):7.1f} s")
print(f"make demo after the venv   {demo:7.1f} s")
print(f"whole                      {done_at - start:7.1f} s")
EOF
