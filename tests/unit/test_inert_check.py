"""The activation_checkpointing section applies only where a script calls deepspeed.checkpointing.configure
(dsbench/configs/inert_check.py). The oracle: the sources of DeepSpeed's engines, transformers and accelerate as
installed, none of which calls it, and DeepSpeed's own reader of the section, which that function alone reaches."""

import importlib.util
import inspect
import re
from pathlib import Path

import pytest

from dsbench.configs.explain import explain
from dsbench.configs.inert_check import check_inert


def test_nothing_that_trains_a_model_for_dsbench_configures_deepspeeds_checkpointing():
    from deepspeed.runtime.activation_checkpointing import checkpointing

    assert "_configure_using_config_file(deepspeed_config" in inspect.getsource(checkpointing.configure)
    call = re.compile(r"checkpointing\.configure\(|checkpointing(?:\.checkpointing)? import (?:.*, )?configure\b")
    callers = []
    for package in ("deepspeed", "transformers", "accelerate", "dsbench.worker"):
        root = Path(importlib.util.find_spec(package).origin).parent
        for path in root.rglob("*.py"):
            if path.name == "checkpointing.py" and "activation_checkpointing" in path.parts:
                continue  # the function itself
            if call.search(path.read_text(encoding="utf-8", errors="replace")):
                callers.append(str(path))
    assert callers == []
    assert call.search("deepspeed.checkpointing.configure(mpu, deepspeed_config=args.deepspeed_config)")
    assert call.search("from deepspeed.runtime.activation_checkpointing.checkpointing import configure")


@pytest.mark.parametrize("section, said", [
    ({"partition_activations": True, "cpu_checkpointing": True}, True),
    ({"number_checkpoints": 4}, True),
    ({"partition_activations": False, "contiguous_memory_optimization": False, "number_checkpoints": None}, False),
    ({}, False),
])
def test_a_section_that_asks_for_something_is_said_to_do_nothing(section, said):
    config = {"train_micro_batch_size_per_gpu": 1, "activation_checkpointing": section}
    assert bool(check_inert(config)) is said
    assert any(line.startswith("activation_checkpointing: no effect") for line in explain(config)) is said
