"""Token data for the worker: the embedded corpus or a local dataset, in a fixed, seeded order.

Every strategy sees the same samples per optimizer step: the global batch of step ``s`` is a
fixed slice of a seeded permutation of all sequences, and each data-parallel rank takes a fixed
part of it. So the same model, data and seed give the same losses under any strategy with the
same global batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsbench.dataset_files import FORMATS, DatasetFiles, dataset_files
from dsbench.errors import UserError
from dsbench.paths import data_file


def load_tokenizer(model_path: str | None = None) -> Any:
    """The model directory's own tokenizer if it has one, else the shipped 4096-token BPE."""
    if model_path and any((Path(model_path) / f).exists() for f in ("tokenizer.json", "tokenizer_config.json")):
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(model_path)
    return ShippedTokenizer()


class ShippedTokenizer:
    """The shipped BPE (dsbench/data/tokenizer.json) through the ``tokenizers`` library that transformers' fast
    tokenizers wrap: the ids ``PreTrainedTokenizerFast`` gives for the same file (tests/unit/test_worker_model.py
    compares them), without importing transformers' tokenization stack on every rank (0.76 s of each rank's start,
    measured 2026-11-26); that wrapper is built only to save the tokenizer beside a checkpoint."""

    EOS = "<|endoftext|>"

    def __init__(self) -> None:
        from tokenizers import Tokenizer

        self.path = str(data_file("tokenizer.json"))
        self._tokenizer = Tokenizer.from_file(self.path)
        self.eos_token_id = self._tokenizer.token_to_id(self.EOS)

    def __call__(self, text: str) -> dict[str, list[int]]:
        return {"input_ids": self._tokenizer.encode(text).ids}

    def save_pretrained(self, folder: Any) -> Any:
        from transformers import PreTrainedTokenizerFast

        return PreTrainedTokenizerFast(tokenizer_file=self.path, eos_token=self.EOS).save_pretrained(folder)


def _dataset_texts(path: str, text_field: str, found: DatasetFiles | None) -> list[str]:
    """Texts of a local file or folder through the ``datasets`` library (no hub access): the files ``found`` when
    the rank has already listed them (:func:`dataset_files`), else listed here."""
    import datasets

    files, kind = found or dataset_files(path)
    try:
        table = datasets.load_dataset(kind, data_files=[str(f) for f in files], split="train")
    except Exception as exc:  # datasets wraps a parse failure in DatasetGenerationError: name the file instead
        raise UserError(f"--dataset {path}: cannot be read as {', '.join(sorted(FORMATS))} data "
                        f"({type(exc).__name__}: {str(exc).splitlines()[0][:150]})") from None
    if text_field not in table.column_names:
        raise UserError(f"--dataset {path}: no column {text_field!r} (columns: {', '.join(table.column_names)}); "
                        "choose one with --text-field")
    return [t for t in table[text_field] if t]


def token_ids(tokenizer: Any, dataset: str | None, text_field: str = "text",
              found: DatasetFiles | None = None) -> list[int]:
    """All token ids of the corpus, documents separated by the end-of-text token; ``found``: the dataset's files as
    the rank listed them before importing torch (one walk of its folder, and the files read are the files checked)."""
    from dsbench.worker.corpus import embedded_text

    texts = _dataset_texts(dataset, text_field, found) if dataset else [embedded_text()]
    eos = tokenizer.eos_token_id
    ids: list[int] = []
    for text in texts:
        ids.extend(tokenizer(text)["input_ids"])
        if eos is not None:
            ids.append(eos)
    return ids


@dataclass(frozen=True)
class BatchPlan:
    """Which sequences each rank reads at each step."""

    sequences: Any
    """LongTensor [N, seq_len] of token ids."""
    seed: int
    micro_batch: int
    grad_accum: int
    dp_size: int
    _orders: dict[int, Any] = field(default_factory=dict, compare=False, repr=False)
    """Seeded permutation per epoch, computed once."""

    @property
    def global_batch(self) -> int:
        return self.micro_batch * self.grad_accum * self.dp_size

    def _order(self, epoch: int) -> Any:
        """The seeded permutation of all sequences used in ``epoch``."""
        if epoch not in self._orders:
            import torch

            generator = torch.Generator().manual_seed(self.seed + epoch)
            self._orders[epoch] = torch.randperm(self.sequences.shape[0], generator=generator)
        return self._orders[epoch]

    def micro_batch_for(self, step: int, micro_step: int, dp_rank: int) -> Any:
        """Rows for ``dp_rank`` at ``micro_step`` of optimizer step ``step``: [micro_batch, seq_len]."""
        n = self.sequences.shape[0]
        start = step * self.global_batch + (micro_step * self.dp_size + dp_rank) * self.micro_batch
        rows = [int(self._order(g // n)[g % n]) for g in range(start, start + self.micro_batch)]
        return self.sequences[rows]


def build_plan(ids: list[int], seq_len: int, seed: int, micro_batch: int, grad_accum: int, dp_size: int) -> BatchPlan:
    """Cut the token stream into ``seq_len`` sequences and plan their order."""
    import torch

    n = len(ids) // seq_len
    if n < micro_batch * grad_accum * dp_size:
        raise UserError(f"corpus has {len(ids)} tokens = {n} sequences of {seq_len}, fewer than one global batch "
                        f"({micro_batch * grad_accum * dp_size}); use a shorter --seq-len or a larger --dataset")
    sequences = torch.tensor(ids[: n * seq_len], dtype=torch.long).view(n, seq_len)
    return BatchPlan(sequences=sequences, seed=seed, micro_batch=micro_batch, grad_accum=grad_accum, dp_size=dp_size)
