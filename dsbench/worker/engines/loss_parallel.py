"""The vocabulary-parallel LM head and loss (``--loss-parallel``, torch_tp and torch_3d): the head's logits stay split
by vocabulary over the TP ranks into the cross-entropy (torch's ``loss_parallel``), so no rank holds the full logits."""

from __future__ import annotations

from typing import Any

import torch


def vocabulary_parallel_head(sequence_parallel: bool = False) -> Any:
    """The LM head split by vocabulary: its logits (batch, sequence, vocabulary / tp) stay DTensor shards into the
    loss (torch's ``loss_parallel``); its input is the final norm's sequence shard under SP, else replicated."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel

    return ColwiseParallel(input_layouts=Shard(1) if sequence_parallel else Replicate(), output_layouts=Shard(-1),
                           use_local_output=False)


def vocabulary_parallel_loss(logits: Any, input_ids: Any) -> Any:
    """HF's causal-LM loss on logits split by vocabulary (DTensor shards, inside torch's ``loss_parallel``):
    next-token targets, the mean over every predicted token, in fp32 (pipe_split.causal_lm_loss's, written with
    the slicing that the sharded logits take)."""
    return torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1).float(), input_ids[:, 1:].flatten())
