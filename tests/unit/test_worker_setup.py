"""Worker set-up checks that need no process group."""

from __future__ import annotations

import pytest

from dsbench.errors import UserError
from dsbench.worker.setup import check_cuda_arch_list


def deepspeed_accepts(monkeypatch, value: str) -> bool:
    """The oracle: DeepSpeed 0.19.8's own CUDA JIT builder parsing the arch list (no GPU needed when it is set)."""
    from deepspeed.ops.op_builder.fused_adam import FusedAdamBuilder

    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", value)
    builder = FusedAdamBuilder()
    builder.jit_mode = True
    try:
        builder.compute_capability_args()
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("value", ["9.0", "8.0;9.0+PTX", "7.5 8.6", "9.0a", "8.0;9.0a", "sm_90"])
def test_arch_lists_are_refused_exactly_when_deepspeed_cannot_parse_them(monkeypatch, value):
    accepted = deepspeed_accepts(monkeypatch, value)
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", value)
    if accepted:
        check_cuda_arch_list()
    else:
        with pytest.raises(UserError, match="JIT builder cannot parse"):
            check_cuda_arch_list()
    assert accepted == (value in ("9.0", "8.0;9.0+PTX", "7.5 8.6"))
