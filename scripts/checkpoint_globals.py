"""List the globals (classes, functions) that the pickles of checkpoint folders name, beyond torch's weights-only
allow-list, read from their opcodes (nothing is loaded): how dsbench.worker.safe_load.CHECKPOINT_GLOBALS was made.

    python scripts/checkpoint_globals.py CHECKPOINT_DIR [CHECKPOINT_DIR ...]

Prints each global with the files naming it; exit 1 when one is not in CHECKPOINT_GLOBALS.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import script_args

from dsbench.worker import safe_load


def main(folders: list[str]) -> int:
    from torch import _weights_only_unpickler as wou

    torch_allowed = set(wou._get_allowed_globals())
    found: dict[str, list[str]] = defaultdict(list)
    for folder in folders:
        for path in safe_load.checkpoint_files(Path(folder)):
            if path.name.endswith(".metadata"):
                continue  # DCP metadata: its own unpickler (safe_load.DCP_METADATA_GLOBALS)
            for name in safe_load.pickle_globals(path) - torch_allowed:
                found[name].append(str(path))
    missing = 0
    for name, paths in sorted(found.items()):
        listed = name in safe_load.CHECKPOINT_GLOBALS
        missing += not listed
        print(f"{'listed ' if listed else 'MISSING'} {name}  ({len(paths)} files, e.g. {paths[0]})")
    return 1 if missing else 0


if __name__ == "__main__":
    folders = script_args.parse(__doc__, "CHECKPOINT_FOLDER", required=True)
    sys.exit(script_args.run(lambda: main(folders)))
