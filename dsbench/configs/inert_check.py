"""Sections DeepSpeed accepts that nothing in its engine applies.

``activation_checkpointing`` (partition_activations, cpu_checkpointing, contiguous_memory_optimization, ...) is read
only by ``deepspeed.checkpointing.configure(mpu, deepspeed_config=...)`` (runtime/activation_checkpointing/
checkpointing.py), which a script calls itself, as Megatron-DeepSpeed does. DeepSpeed's engine, its pipeline engine,
the HF Trainer and accelerate never call it (none of their sources does, in the pinned versions), so under them, and
under dsbench's worker, the section changes nothing: what recomputes is the model's own gradient checkpointing, or
the pipeline's ``activation_checkpoint_interval`` with DeepSpeed's checkpoint function at its defaults.
"""

from __future__ import annotations

from typing import Any

from dsbench.configs.findings import Finding


def check_inert(config: dict[str, Any]) -> list[Finding]:
    """A warning for an ``activation_checkpointing`` section that asks for something."""
    section = config.get("activation_checkpointing")
    if not isinstance(section, dict) or not any(value not in (None, False, 0) for value in section.values()):
        return []
    return [Finding(severity="warning", code="inert-section", path="activation_checkpointing",
                    message="read only by deepspeed.checkpointing.configure, which a script calls itself (Megatron-"
                            "DeepSpeed); DeepSpeed's engine, the HF Trainer, accelerate and dsbench's worker never do, "
                            "so here it changes nothing",
                    fix="delete it, and recompute with the model's gradient checkpointing (dsbench launch "
                        "--recompute full) or pipeline.activation_checkpoint_interval")]
