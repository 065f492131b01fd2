"""A user's accelerate FSDP YAML in bf16 trains as accelerate 1.15 would prepare it: FSDP2's mixed-precision
policy reduces and outputs in bf16 (accelerate's ``FullyShardedDataParallelPlugin.set_mixed_precision``, which its
AcceleratorState calls with the YAML's mixed_precision), and the forward runs under autocast (``Accelerator
.native_amp``); dsbench's own FSDP2 keeps torchtitan's policy, fp32 reduction without autocast. Until 2026-12-04
the YAML trained under dsbench's.

Oracle: accelerate's own plugin and Accelerator, in the environment `accelerate launch` gives the ranks of such a
YAML (on CPU ranks accelerate does not prepare FSDP itself, distributed type NO: ../shared/FINDINGS.md, which is why
the worker builds it); one CPU rank under gloo, in a process of its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from dsbench.envinfo import free_port
from tests.bounded import communicate_bounded

_RANK = r"""
import json, os, sys, warnings
warnings.simplefilter("ignore")
os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                  MASTER_PORT=sys.argv[1], ACCELERATE_USE_FSDP="true", FSDP_VERSION="2")
if sys.argv[2] != "none":
    os.environ["ACCELERATE_MIXED_PRECISION"] = sys.argv[2]
import torch
import torch.distributed as dist
from accelerate import Accelerator
from accelerate.utils import FullyShardedDataParallelPlugin
from transformers import GPT2Config, GPT2LMHeadModel

from dsbench.worker import accelerate_env
from dsbench.worker.dist import DistInfo
from dsbench.worker.engines.base import EngineOptions
from dsbench.worker.engines.native import NativeEngine

dist.init_process_group("gloo")
mixed = os.environ.get("ACCELERATE_MIXED_PRECISION", "no")
plugin = FullyShardedDataParallelPlugin(sync_module_states=False, cpu_ram_efficient_loading=False)
if mixed != "no":
    plugin.set_mixed_precision(mixed)  # accelerate state.py: what AcceleratorState does with the YAML's precision
oracle = plugin.mixed_precision_policy
native_amp = Accelerator().native_amp
settings = accelerate_env.fsdp_settings(True, False, False)
options = EngineOptions(lr=1e-3, weight_decay=0.0, betas=(0.9, 0.999), eps=1e-8, grad_clip=1.0, warmup_steps=0,
                        grad_accum=1, precision="fp32" if mixed == "no" else mixed,
                        fsdp_accelerate_amp=bool(settings.get("accelerate_amp")))
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=16))
engine = NativeEngine("fsdp", model, options, DistInfo(0, 1, 0, "cpu", "gloo", True))
block = engine.model.transformer.h[0]
policy = block._get_fsdp_state()._mp_policy
seen = []
block.register_forward_hook(lambda *_: seen.append(torch.is_autocast_enabled("cpu")))
ids = torch.randint(0, 64, (2, 8))
engine.forward_backward(ids, last_micro=True)
name = lambda dtype: None if dtype is None else str(dtype).removeprefix("torch.")
print("RESULT " + json.dumps({
    "oracle": None if oracle is None else [name(oracle.param_dtype), name(oracle.reduce_dtype)],
    "oracle_output": None if oracle is None else name(getattr(oracle, "output_dtype", None)),
    "native_amp": native_amp, "policy": [name(policy.param_dtype), name(policy.reduce_dtype)],
    "output": name(policy.output_dtype), "autocast": seen[0], "header": settings["accelerate"]["reduce_dtype"]}))
dist.destroy_process_group()
"""


@pytest.mark.parametrize("mixed", ["bf16", "none"])
def test_a_users_fsdp_yaml_trains_under_accelerates_own_mixed_precision(mixed):
    pytest.importorskip("accelerate")
    child = subprocess.Popen([sys.executable, "-c", _RANK, str(free_port()), mixed],
                             env={**os.environ, "DS_ACCELERATOR": "cpu"}, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    out, err, timed_out = communicate_bounded(child, timeout=240)
    line = next((x for x in out.splitlines() if x.startswith("RESULT ")), None)
    assert line and not timed_out, out[-2000:] + err[-3000:]
    got = json.loads(line.removeprefix("RESULT "))
    if mixed == "none":  # fp32: no policy on either side, no autocast
        assert got["oracle"] is None and got["autocast"] is False and got["header"] is None
        return
    assert got["policy"] == got["oracle"] == ["bfloat16", "bfloat16"]  # dsbench's own FSDP2: bfloat16, float32
    assert got["output"] == got["oracle_output"] == "bfloat16"
    assert got["autocast"] is got["native_amp"] is True
    assert got["header"] == "bfloat16"  # the run header's accelerate section says it


def test_explain_says_what_accelerate_s_fsdp_does_in_16_bits():
    from dsbench.configs.accelerate_explain import explain

    config = {"distributed_type": "FSDP", "mixed_precision": "bf16", "num_processes": 2,
              "fsdp_config": {"fsdp_version": 2}}
    line = next(x for x in explain(config) if x.startswith("precision"))
    assert "autocast around the forward" in line and "reduces the gradients in bf16" in line
    fp32 = next(x for x in explain({**config, "mixed_precision": "no"}) if x.startswith("precision"))
    assert fp32 == "precision: fp32"
