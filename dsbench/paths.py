"""Where dsbench's shipped files live: ``ds_configs/`` and ``hostfiles/``.

In a source checkout or editable install they sit next to the ``dsbench`` package; a wheel
install puts them under ``<prefix>/share/dsbench`` (setup.cfg ``data_files``).
"""

from __future__ import annotations

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
