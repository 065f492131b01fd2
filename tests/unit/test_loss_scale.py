"""fp16's loss scale on the torch engines (worker/engines/loss_scale.py), against torch.amp.GradScaler: the scaler
accelerate gives DDP and FSDP2 under fp16. The same model, data and injected overflows stepped both ways must give
the same scale after every step, the same skipped steps and the same weights, bit for bit (the scale is a power of
two: scaling and unscaling are exact in fp32). Run on CPU in fp32: the rule does not depend on the dtype, and a CPU
rank refuses fp16."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from dsbench.worker.dist import Collectives, DistInfo  # noqa: E402
from dsbench.worker.engines import loss_scale  # noqa: E402
from dsbench.worker.engines.base import EngineOptions  # noqa: E402
from dsbench.worker.engines.loss_scale import LossScale  # noqa: E402

ONE_RANK = Collectives(DistInfo(rank=0, world_size=1, local_rank=0, device="cpu", backend="gloo"))
OVERFLOWS = {2, 3, 7}
"""Steps whose gradients get an inf (two in a row, then one after the scale has grown back)."""


def _model_and_batches() -> tuple[torch.nn.Module, list[torch.Tensor]]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    return model, [torch.randn(4, 8) for _ in range(10)]


def _spoil(model: torch.nn.Module, step: int) -> None:
    if step in OVERFLOWS:
        model[0].weight.grad[0, 0] = float("inf")


def _with_gradscaler(interval: int) -> tuple[list[float], list[torch.Tensor], list[float]]:
    model, batches = _model_and_batches()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (1 + step))
    scaler = torch.amp.GradScaler("cpu", growth_interval=interval)
    scales, lrs = [], []
    for step, x in enumerate(batches):
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(model(x).pow(2).mean()).backward()
        _spoil(model, step)
        before = scaler.get_scale()
        scaler.step(optimizer)
        scaler.update()
        if scaler.get_scale() >= before:  # accelerate's AcceleratedScheduler: no scheduler step on a skipped one
            scheduler.step()
        scales.append(scaler.get_scale())
        lrs.append(optimizer.param_groups[0]["lr"])
    return scales, [p.detach().clone() for p in model.parameters()], lrs


def _with_loss_scale(interval: int, monkeypatch) -> tuple[list[float], list[torch.Tensor], list[float], int]:
    monkeypatch.setattr(loss_scale, "GROWTH_INTERVAL", interval)
    model, batches = _model_and_batches()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (1 + step))
    scale = LossScale("fp16", ONE_RANK)
    scales, lrs = [], []
    for step, x in enumerate(batches):
        optimizer.zero_grad(set_to_none=True)
        scale.scaled(model(x).pow(2).mean()).backward()
        _spoil(model, step)
        finite = scale.unscale_([p.grad for p in model.parameters()])
        if scale.update(finite):
            optimizer.step()
            scheduler.step()
        scales.append(scale.scale)
        lrs.append(optimizer.param_groups[0]["lr"])
    return scales, [p.detach().clone() for p in model.parameters()], lrs, scale.skipped_steps


def test_the_scale_skips_and_weights_follow_torch_s_gradscaler(monkeypatch):
    theirs, their_weights, their_lrs = _with_gradscaler(interval=3)
    ours, our_weights, our_lrs, skipped = _with_loss_scale(3, monkeypatch)
    assert ours == theirs
    assert theirs[:4] == [2.0**16, 2.0**16, 2.0**15, 2.0**14]  # the rule exercised: halved twice, then grown
    assert max(theirs[4:7]) == 2.0**15 and skipped == len(OVERFLOWS)
    assert our_lrs == their_lrs
    for a, b in zip(our_weights, their_weights, strict=True):
        assert torch.equal(a, b)


def test_disabled_it_is_the_identity_and_reads_nothing():
    """fp32 and bf16: no scale, no flag to agree on (no collective; Collectives is never called)."""
    for precision in ("fp32", "bf16"):
        scale = LossScale(precision, comm=None)
        loss = torch.tensor(3.0)
        assert scale.scaled(loss) is loss
        assert scale.unscale_([torch.tensor([float("inf")])]) is True
        assert scale.update(False) is True and scale.scale == 1.0 and scale.skipped_steps == 0


def test_a_native_engine_trains_the_same_weights_scaled_or_not():
    """The single engine with its loss scale switched on (fp32 on CPU, where the scale changes no bit) against the
    same engine without: the same losses and weights after three steps of two micro-batches, clipped."""
    from dsbench.models import PRESETS
    from dsbench.worker.engines.native import NativeEngine
    from dsbench.worker.model import build_model

    options = EngineOptions(lr=1e-3, weight_decay=0.01, betas=(0.9, 0.95), eps=1e-8, grad_clip=0.5, warmup_steps=2,
                            grad_accum=2, precision="fp32")
    info = DistInfo(rank=0, world_size=1, local_rank=0, device="cpu", backend="gloo")
    torch.manual_seed(1)
    batches = [torch.randint(0, 100, (2, 16)) for _ in range(6)]
    runs = []
    for scaled in (False, True):
        engine = NativeEngine("single", build_model(PRESETS["llama-tiny"], seed=0), options, info)
        engine.loss_scale = LossScale("fp16" if scaled else "fp32", ONE_RANK)
        losses = [engine.train_step(batches[i:i + 2]) for i in range(0, 6, 2)]
        runs.append((losses, [p.detach().clone() for p in engine.model.parameters()], engine.grad_norm))
    (plain_losses, plain_weights, plain_norm), (losses, weights, norm) = runs
    assert [float(x) for x in losses] == [float(x) for x in plain_losses]
    assert float(norm) == float(plain_norm)  # the norm is read after unscaling
    assert all(torch.equal(a, b) for a, b in zip(weights, plain_weights, strict=True))


def test_a_checkpoint_resumes_the_scale_and_refuses_a_bad_one():
    """A resumed fp16 run scales as the run it continues; a state that is not a positive scale with its counts is a
    ValueError, which the checkpoint's reader turns into one line naming the file (checkpoint.damaged)."""
    saved = LossScale("fp16", ONE_RANK)
    saved.update(True)
    saved.update(False)
    resumed = LossScale("fp16", ONE_RANK)
    resumed.load_state_dict(saved.state_dict())
    assert resumed.state_dict() == saved.state_dict() == {"scale": 2.0**15, "finite_in_a_row": 0,
                                                          "skipped_steps": 1}
    for bad in ({"scale": float("nan"), "finite_in_a_row": 0, "skipped_steps": 0}, {"scale": 2.0**15},
                {"scale": -1.0, "finite_in_a_row": 0, "skipped_steps": 0}, {"scale": 1.0, "finite_in_a_row": 10**9,
                                                                           "skipped_steps": 0}):
        with pytest.raises(ValueError, match="loss scale state"):
            LossScale("fp16", ONE_RANK).load_state_dict(bad)
    fp32 = LossScale("fp32", ONE_RANK)
    fp32.load_state_dict(saved.state_dict())  # a run resumed in another precision starts its own scale
    assert fp32.scale == 1.0 and fp32.state_dict() == {}
    from_fp32 = LossScale("fp16", ONE_RANK)
    from_fp32.load_state_dict(fp32.state_dict())
    assert from_fp32.scale == 2.0**16
