"""DeepSpeed's ``torch_autocast`` section: the precision dsbench records, explains and plans for it, and what
validate says of a dtype that autocasts to nothing or to the device's default.

Oracle: DeepSpeed 0.19.8's own engine, one CPU rank under ZeRO-2 (gloo) stepping torch's AdamW, three steps of a
two-layer MLP per dtype: the forward's output dtype says what autocast computed in, the losses whether the
model learned, and the bytes per parameter of the model states DeepSpeed holds what the planner prices; and with
bf16 weights at each ZeRO stage, the dtype DeepSpeed keeps gradients in with and without fp32 accumulation.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from dsbench.configs.explain import explain
from dsbench.configs.precision import autocast_findings, config_precision, run_precision
from dsbench.envinfo import free_port
from dsbench.plan.config_row import config_candidate, unpriced
from dsbench.plan.memory import accounting_for
from tests.bounded import GUARDED_BATON, communicate_bounded

_ENGINE = GUARDED_BATON + r"""
import json, os, sys, warnings
os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1])
import torch, deepspeed
warnings.simplefilter("ignore")
out = {}
for dtype in sys.argv[2:]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    section = {"enabled": True, **({"dtype": dtype} if dtype != "unset" else {})}
    config = {"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 2}, "torch_autocast": section}
    # torch's AdamW, not the config's: DeepSpeed's CPU fused Adam is a JIT op, minutes to build in a fresh venv
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    x, y = torch.randn(4, 16), torch.randn(4, 1)
    losses = []
    zero, n = engine.optimizer, sum(p.numel() for p in model.parameters())
    size = lambda tensors: sum(t.numel() * t.element_size() for t in tensors) / n  # bytes per parameter
    for _ in range(3):
        pred = engine(x)
        loss = torch.nn.functional.mse_loss(pred.float(), y)
        engine.backward(loss)
        grads = size(t for group in zero.averaged_gradients.values() for t in group)  # ZeRO's reduced partition
        engine.step()
        losses.append(float(loss))
    moments = [t for state in zero.optimizer.state.values() for t in state.values() if torch.is_tensor(t) and t.dim()]
    states = {"params": size(engine.module.parameters()), "grads": grads,
              "master": size(zero.single_partition_of_fp32_groups), "optimizer": size(moments)}
    out[dtype] = {"output": str(pred.dtype).removeprefix("torch."), "losses": losses, "states": states}
# the casts autograd keeps for the backward under torch_autocast: the bytes of the 16-bit tensors the forward saves
# that have a weight's shape (one sequence of 40 tokens: no activation is), per model and ZeRO stage; ZeRO-3 last,
# since it swaps torch.nn.functional.linear for the rest of the process (DeepSpeed says so)
from dsbench.model_config import resolve_model
from dsbench.worker.model import build_model
for stage, name in ((0, "llama-tiny"), (2, "llama-tiny"), (2, "gpt2-tiny"), (3, "llama-tiny"), (3, "gpt2-tiny")):
    model = build_model(resolve_model(name), seed=0)
    shapes = {tuple(p.shape) for p in model.parameters() if p.dim() == 2}
    config = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": stage},
              "torch_autocast": {"enabled": True, "dtype": "bfloat16"}}
    engine, *_ = deepspeed.initialize(model=model, optimizer=torch.optim.AdamW(model.parameters(), lr=1e-3),
                                      config=config)
    kept = {}
    def pack(t):
        if t.dtype == torch.bfloat16 and {tuple(t.shape), tuple(t.shape[::-1])} & shapes:
            kept[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t
    ids = torch.randint(0, 4096, (1, 40))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = engine(input_ids=ids, labels=ids).loss
    engine.backward(loss)
    out[f"casts {name} zero{stage}"] = sum(kept.values())
# bf16 weights, gradients accumulated as data_types.grad_accum_dtype says (unset: the weights' dtype): the bytes of
# each element DeepSpeed keeps gradients in after a backward, at each ZeRO stage
for stage in (1, 2, 3):
    for accum in ("fp32", "unset"):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
        config = {"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": stage}, "bf16": {"enabled": True},
                  **({"data_types": {"grad_accum_dtype": accum}} if accum != "unset" else {})}
        engine, *_ = deepspeed.initialize(model=model, optimizer=torch.optim.AdamW(model.parameters(), lr=1e-2),
                                          config=config)
        engine.backward(torch.nn.functional.mse_loss(engine(x.bfloat16()).float(), torch.randn(4, 1)))
        zero = engine.optimizer  # BF16_Optimizer (ZeRO-1 with fp32 accumulation), ZeRO-1/2's, ZeRO-3's
        held = [*getattr(zero, "fp32_groups_gradients_flat", []), getattr(zero, "grad_partitions_flat_buffer", None),
                *(t for group in getattr(zero, "averaged_gradients", {}).values() for t in group)]
        out[f"grads zero{stage} {accum}"] = sorted({t.element_size() for t in held if t is not None})
print("RESULT " + json.dumps(out))
"""


@pytest.fixture(scope="module")
def deepspeed_runs():
    """Each dtype's output dtype and losses under DeepSpeed's engine, in one process (one process group)."""
    pytest.importorskip("deepspeed")
    env = {**os.environ, "DS_ACCELERATOR": "cpu"}
    child = subprocess.Popen([sys.executable, "-c", _ENGINE, str(free_port()), "bfloat16", "half", "fp32", "int8",
                              "unset"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err, timed_out = communicate_bounded(child, timeout=300)  # SIGTERM first: no JIT lock left behind
    line = next((x for x in out.splitlines() if x.startswith("RESULT ")), None)
    assert line and not timed_out, out[-2000:] + err[-2000:]
    return json.loads(line.removeprefix("RESULT "))


def _config(**section) -> dict:
    return {"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 2},
            "torch_autocast": {"enabled": True, **section}}


def test_a_16_bit_autocast_is_the_run_s_precision_over_fp32_weights(deepspeed_runs):
    assert deepspeed_runs["bfloat16"]["output"] == "bfloat16"  # DeepSpeed autocast the forward
    for spelled in ("bfloat16", "bf16", "torch.bfloat16"):
        config = _config(dtype=spelled)
        assert run_precision(config) == "bf16" and config_precision(config) == "fp32"  # weights stay fp32
        assert autocast_findings(config) == []
    assert run_precision(_config(dtype="half")) == "fp16" and autocast_findings(_config(dtype="half")) == []
    assert run_precision({**_config(dtype="bf16"), "fp16": {"enabled": True}}) == "fp16"  # 16-bit weights first
    assert run_precision({"torch_autocast": {"enabled": False, "dtype": "bf16"}}) == "fp32"
    line = next(x for x in explain(_config(dtype="bfloat16")) if x.startswith("precision"))
    assert "bf16 autocast" in line and "fp32 weights" in line


def test_the_planner_prices_an_autocast_config_s_fp32_model_states(deepspeed_runs):
    """Until 2026-12-04 a torch_autocast config's row in `dsbench plan --config` was priced as bf16 weights
    (mixed16: 2 + 2 + 4 + 8 bytes per parameter); DeepSpeed holds fp32 weights and gradients beside ZeRO's fp32 copy
    of the partition and the moments (measured: 4 + 4 + 4 + 8, padding aside)."""
    measured = deepspeed_runs["bfloat16"]["states"]
    cand = config_candidate(_config(dtype="bfloat16"))
    assert cand.autocast and cand.name == "zero2 + autocast" and cand.config_accounting == "fp32_deepspeed"
    priced = accounting_for("bf16", cand.strategy, cand.config_accounting)
    for part in ("params", "grads", "master", "optimizer"):
        assert getattr(priced, part) == pytest.approx(measured[part], rel=0.02), part
    assert accounting_for("bf16", cand.strategy).params == 2  # what it was priced as: half the weights' bytes
    plain = config_candidate({"zero_optimization": {"stage": 2}, "bf16": {"enabled": True}})
    assert not plain.autocast and plain.config_accounting is None
    assert unpriced(_config(dtype="bfloat16")) == []  # its casts too, since 2026-12-04 (below)


@pytest.mark.parametrize("name, stage", [("llama-tiny", 0), ("llama-tiny", 2), ("gpt2-tiny", 2), ("llama-tiny", 3),
                                         ("gpt2-tiny", 3)])
def test_the_planner_prices_the_casts_autograd_keeps_under_autocast(deepspeed_runs, name, stage):
    """Under torch_autocast autograd keeps a 16-bit copy of each matmul's weight from the forward to the backward
    (2 bytes per parameter of the blocks' matrices and the head); until 2026-12-04 a config's row left them out.
    Under ZeRO-3 DeepSpeed's memory-efficient linear saves the fp32 parameter instead (no copy for Llama's
    nn.Linear), but GPT-2's Conv1D calls torch.addmm and keeps its casts. Oracle: the bytes autograd saved in
    DeepSpeed's engine (one rank; their biases are not kept, 0.3% of GPT-2's priced bytes)."""
    from dsbench.model_config import resolve_model
    from dsbench.plan.rank_memory import autocast_cast_params

    measured = deepspeed_runs[f"casts {name} zero{stage}"]
    priced = 2 * autocast_cast_params(resolve_model(name), f"zero{stage}")
    assert measured == pytest.approx(priced, rel=0.01, abs=0), (measured, priced)
    assert (measured == 0) is (stage == 3 and name == "llama-tiny")
    off = {**_config(dtype="bf16"), "zero_optimization": {"stage": 3, "memory_efficient_linear": False}}
    assert unpriced(off) == ["torch_autocast's 16-bit weight casts with memory_efficient_linear off"]


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_fp32_gradient_accumulation_beside_bf16_weights_is_priced_at_every_stage(deepspeed_runs, stage):
    """``data_types.grad_accum_dtype: fp32`` beside bf16 weights: DeepSpeed keeps the gradients in fp32 at every ZeRO
    stage (BF16_Optimizer at ZeRO-1, the ZeRO optimizers' own buffers at 2 and 3), bf16 without it; until
    2026-12-04 `dsbench plan --config` priced both at 2 bytes."""
    assert deepspeed_runs[f"grads zero{stage} fp32"] == [4] and deepspeed_runs[f"grads zero{stage} unset"] == [2]
    config = {"zero_optimization": {"stage": stage}, "bf16": {"enabled": True},
              "data_types": {"grad_accum_dtype": "float32"}}
    priced = accounting_for("bf16", f"zero{stage}", config_candidate(config).config_accounting)
    assert (priced.params, priced.grads) == (2, 4)
    assert "fp32 gradients" in next(line for line in explain(config) if line.startswith("precision"))
    assert config_candidate({**config, "data_types": {"grad_accum_dtype": "bf16"}}).config_accounting is None


def test_validate_names_a_dtype_that_autocasts_nothing_or_the_device_default(deepspeed_runs):
    fp32, int8, unset = (deepspeed_runs[k] for k in ("fp32", "int8", "unset"))
    # fp32: torch disables autocast, the model trains in fp32: a warning
    assert fp32["output"] == "float32" and fp32["losses"][2] < fp32["losses"][0]
    assert [(f.severity, f.path) for f in autocast_findings(_config(dtype="fp32"))] == [
        ("warning", "torch_autocast.dtype")]
    # int8: no autocast, and the model learns nothing (the gradients reduced as int8; AdamW's weight decay alone
    # moves the loss, by 4e-5 here where fp32's fell by 0.47): an error
    learned = fp32["losses"][0] - fp32["losses"][2]
    assert int8["output"] == "float32" and abs(int8["losses"][2] - int8["losses"][0]) < 0.01 * learned
    assert [f.severity for f in autocast_findings(_config(dtype="int8"))] == ["error"]
    # unset: torch's default for the device (bfloat16 on this CPU rank; float16 on CUDA): a warning
    assert unset["output"] == "bfloat16"
    assert [(f.severity, f.path) for f in autocast_findings(_config())] == [("warning", "torch_autocast.dtype")]
