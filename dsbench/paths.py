"""Where dsbench's shipped files live: ``ds_configs/`` and ``hostfiles/``.

In a source checkout or editable install they sit next to the ``dsbench`` package; a wheel
install puts them under ``<prefix>/share/dsbench`` (setup.cfg ``data_files``).
"""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def _candidates(name: str) -> list[Path]:
    # source tree / editable install; the install prefix of this very file (<prefix>/lib/pythonX.Y/site-packages/
    # dsbench); the running interpreter's prefix.
    roots = [_PACKAGE.parent, Path(sys.prefix) / "share" / "dsbench",
             Path(sysconfig.get_path("data")) / "share" / "dsbench"]
    if len(_PACKAGE.parents) > 3:
        roots.insert(1, _PACKAGE.parents[3] / "share" / "dsbench")
    return [root / name for root in roots]


def shipped_dir(name: str) -> Path:
    """Return the first existing ``name`` folder (``ds_configs`` or ``hostfiles``)."""
    for candidate in _candidates(name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"dsbench's {name}/ folder is missing; looked in: "
                            + ", ".join(str(c) for c in _candidates(name)))


def data_file(name: str) -> Path:
    """A file shipped inside the package (``dsbench/data``)."""
    return _PACKAGE / "data" / name


def without_working_folder(path: list[str], cwd: str) -> list[str]:
    """``path`` (``sys.path``) without the entry ``python -m`` puts first, the folder the process was started in."""
    return [entry for entry in path if entry not in ("", cwd)]


def leave_working_folder_off_path() -> None:
    """For the modules dsbench starts with ``python -m`` (each rank's worker, calibrate's, export's and doctor's
    probe): a folder of the working directory named like an optional module would be imported in its place (a run
    folder ``z3`` beside the command, and ``--compile``'s check for the z3 solver imported it: "module 'z3' has no
    attribute 'ExprRef'"), as Python's ``-P`` (PYTHONSAFEPATH) prevents. dsbench itself is imported by then, and
    finds its own modules by its package's path."""
    sys.path[:] = without_working_folder(sys.path, os.getcwd())
