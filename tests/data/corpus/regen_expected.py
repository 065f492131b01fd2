"""Regenerate expected/<file>.json: dsbench's verdict on each corpus DeepSpeed config. Review the diff!"""

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from dsbench.configs.api import validate_file  # noqa: E402


def verdict(path: Path) -> dict:
    _, findings = validate_file(str(path), None, allow_auto=False)
    return {"valid": not any(f.severity == "error" for f in findings),
            "findings": sorted({(f.severity, f.code, f.path) for f in findings})}


def main() -> None:
    out = HERE / "expected"
    out.mkdir(exist_ok=True)
    for path in sorted((HERE / "ds_configs").iterdir()):
        (out / f"{path.name}.json").write_text(json.dumps(verdict(path), indent=1) + "\n")


if __name__ == "__main__":
    main()
