"""``compute_grad_norm: false`` at ZeRO-1/2: dsbench refuses exactly what DeepSpeed's ZeRO optimizer stops at.

Oracle: DeepSpeed's own ``DeepSpeedZeroOptimizer.__init__`` (deepspeed 0.19.8 runtime/zero/stage_1_and_2.py), given
what the engine passes it from the parsed config (``_configure_zero_optimizer``: ``gradient_clipping()``,
``zero_offload_optimizer()``, ``zero_compute_grad_norm()``, the ZenFlow section); its refusals come first in the
constructor, so a bare object reaches them, and anything else it raises later means it took the setting.
"""

from __future__ import annotations

import itertools

import pytest

from dsbench.configs.grad_norm_check import check_compute_grad_norm


def _optimizer_refuses(config: dict) -> bool | None:
    from deepspeed.runtime.config import DeepSpeedConfig
    from deepspeed.runtime.zero.stage_1_and_2 import DeepSpeedZeroOptimizer

    try:
        parsed = DeepSpeedConfig(config)
    except Exception:  # noqa: BLE001 (the parser's own refusal)
        return None
    bare = DeepSpeedZeroOptimizer.__new__(DeepSpeedZeroOptimizer)
    try:
        DeepSpeedZeroOptimizer.__init__(bare, None, None, None, None, clip_grad=parsed.gradient_clipping,
                                        offload_optimizer_config=parsed.zero_config.offload_optimizer,
                                        zenflow_config=parsed.zero_config.zenflow,
                                        compute_grad_norm=parsed.zero_config.compute_grad_norm)
    except ValueError as error:
        if "compute_grad_norm" in str(error):
            return True
    except Exception:  # noqa: BLE001 (past the checks, on a bare object)
        pass
    return False


@pytest.mark.parametrize("stage", [1, 2])
def test_refused_exactly_where_deepspeeds_zero_optimizer_stops(stage):
    checked = 0
    for grad_norm, clip, offload in itertools.product((None, True, False), (None, 0, 0.0, 1.0, 0.5),
                                                      (None, "none", "cpu", "nvme")):
        zero = {"stage": stage, **({"compute_grad_norm": grad_norm} if grad_norm is not None else {}),
                **({"offload_optimizer": {"device": offload, "nvme_path": "/tmp"}} if offload else {})}
        config = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "zero_optimization": zero,
                  **({"gradient_clipping": clip} if clip is not None else {})}
        oracle = _optimizer_refuses(config)
        if oracle is None:
            continue
        assert bool(check_compute_grad_norm(config)) is oracle, config
        checked += 1
    assert checked == 60
