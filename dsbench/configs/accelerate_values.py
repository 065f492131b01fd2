"""The numbers an accelerate YAML sets inline under ``deepspeed_config``, which accelerate copies into the DeepSpeed
config it builds (accelerate 1.15 utils/dataclasses.py ``DeepSpeedPlugin.__post_init__``), checked as DeepSpeed's
JSON path would type them, and as DeepSpeed then reads them."""

from __future__ import annotations

import json
import math
from typing import Any

from dsbench.configs.autofill import CLIP_DEFAULT
from dsbench.configs.findings import Finding

MAX_COUNT = 1_000_000
"""Largest process or machine count taken as meant (beyond any cluster)."""
# accelerate copies these inline values into the DeepSpeed config it builds, where DeepSpeed's JSON path would type
# them: (kind, lowest, highest or None, the fix)
_DS_VALUES = {"zero_stage": ("int", 0, 3, "use 0, 1, 2 or 3"),
              "gradient_accumulation_steps": ("int", 1, MAX_COUNT, "use a whole number >= 1"),
              "gradient_clipping": ("float", 0.0, None, "use a number >= 0")}


def inline_values(ds: dict[str, Any]) -> list[Finding]:
    """The inline DeepSpeed numbers typed and ranged as the JSON validator types them: ``zero_stage: true``,
    ``gradient_accumulation_steps: 0`` and ``gradient_clipping: -1`` fail in accelerate at start-up, or silently;
    then a clipping of 0, which accelerate drops (:func:`_clipping_off`)."""
    out = []
    for key, (kind, low, high, fix) in _DS_VALUES.items():
        value = ds.get(key)
        if value is None:
            continue
        number = isinstance(value, int | float) and not isinstance(value, bool)
        ok = number and (kind == "float" or isinstance(value, int)) and math.isfinite(value) and low <= value and (
            high is None or value <= high)
        if not ok:
            shown = (json.dumps(value)[:40] if isinstance(value, str | bool | int | float | type(None)) else
                type(value).__name__)
            out.append(Finding(severity="error", code="bad-value", path=f"deepspeed_config.{key}",
                               message=f"{shown} is not {'a ZeRO stage' if key == 'zero_stage' else 'a valid ' + key}",
                               fix=fix))
    return out + _clipping_off(ds)


def _clipping_off(ds: dict[str, Any]) -> list[Finding]:
    """A warning for ``gradient_clipping: 0`` meant as "no clipping": accelerate writes the key only when it is
    truthy (``if self.gradient_clipping:``), and DeepSpeed clips a config without it at its default (deepspeed 0.19.8
    ``GRADIENT_CLIPPING_DEFAULT = 1.0``), so the gradients are clipped at 1.0."""
    value = ds.get("gradient_clipping")
    if ds.get("deepspeed_config_file") or isinstance(value, bool) or value != 0:
        return []
    return [Finding(severity="warning", code="dropped", path="deepspeed_config.gradient_clipping",
                    message=f"0, which accelerate drops from the config it builds, so DeepSpeed clips at its default, "
                            f"{CLIP_DEFAULT}: clipping stays on",
                    fix='to turn it off, name a DeepSpeed JSON with "gradient_clipping": 0 in deepspeed_config_file '
                        "(`dsbench render --from-accelerate` writes the rest)")]
