"""Mixed precision on the native engines' ranks (worker/engines/native.autocast) as accelerate gives it: bf16 autocast
on CPU ranks too (they trained fp32 under --precision bf16 until 2026-11-30, their header saying bf16), fp16
refused on CPU ranks (DeepSpeed's CPU accelerator has none; accelerate trains fp32 for it there)."""

import pytest

torch = pytest.importorskip("torch")

from dsbench.errors import UserError  # noqa: E402
from dsbench.worker.engines.base import EngineOptions  # noqa: E402
from dsbench.worker.engines.native import autocast  # noqa: E402


def _options(precision: str) -> EngineOptions:
    return EngineOptions(lr=1e-3, weight_decay=0.0, betas=(0.9, 0.95), eps=1e-8, grad_clip=1.0, warmup_steps=0,
                         grad_accum=1, precision=precision)


def test_bf16_autocasts_a_cpu_rank_s_matmuls_as_accelerate_does():
    """The oracle: accelerate's own context for bf16 on a CPU device (get_mixed_precision_context_manager with
    native_amp, which its Accelerator sets for bf16 on CPU), applied to the same matmul."""
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    with autocast(_options("bf16"), "cpu")():
        ours = a @ b
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):  # accelerate/utils/modeling.py, bf16 branch
        theirs = a @ b
    assert ours.dtype == theirs.dtype == torch.bfloat16 and torch.equal(ours, theirs)
    with autocast(_options("fp32"), "cpu")():
        assert (a @ b).dtype == torch.float32


def test_fp16_on_a_cpu_rank_is_refused():
    with pytest.raises(UserError, match="fp16 on CPU ranks"):
        autocast(_options("fp16"), "cpu")


def test_a_config_s_fp16_is_an_error_for_cpu_ranks_only():
    """Validation for a launch on CPU ranks (ValidateContext.cpu_ranks) finds the config's fp16, which each rank
    would stop at; the same file validated for a GPU cluster is fine."""
    from dsbench.configs.validate import ValidateContext, validate

    config = {"train_micro_batch_size_per_gpu": 1, "fp16": {"enabled": True}}
    on_cpu = [f for f in validate(config, ValidateContext(world_size=2, cpu_ranks=True), deepspeed_check=False)
              if f.severity == "error"]
    assert [(f.code, f.path) for f in on_cpu] == [("fp16-on-cpu", "fp16.enabled")]
    assert not [f for f in validate(config, ValidateContext(world_size=2), deepspeed_check=False)
                if f.severity == "error"]


def test_fsdp2_s_fp16_on_a_cpu_rank_is_refused_before_it_shards():
    """FSDP2 casts through its MixedPrecisionPolicy, not autocast: a rank started by hand with fp16 on a CPU is
    refused there too (until 2026-11-30 it went on to train fp16 on the CPU)."""
    from dsbench.worker.engines.native import wrap_fsdp2

    with pytest.raises(UserError, match="fp16 on CPU ranks"):
        wrap_fsdp2(torch.nn.Linear(2, 2), _options("fp16"), "cpu")
