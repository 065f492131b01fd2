"""Build dsbench/data/tokenizer.json: a 4096-token byte-level BPE trained on the embedded corpus.

The corpus is CPython's own ``pydoc_data.topics`` (the language reference topics, ~465k characters),
which ships with every Python, so the default data and tokenizer need no download. Byte-level BPE
encodes any text, so the shipped tokenizer also works on other corpora and Python versions.
Run: python scripts/build_tokenizer.py
"""

from pathlib import Path

import script_args
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from dsbench.worker.corpus import embedded_text

OUT = Path(__file__).resolve().parents[1] / "dsbench" / "data" / "tokenizer.json"


def main() -> None:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=4096, special_tokens=["<|endoftext|>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator([embedded_text()], trainer=trainer)
    tokenizer.save(str(OUT))
    print(f"wrote {OUT}: vocab {tokenizer.get_vocab_size()}, {len(tokenizer.encode(embedded_text()).ids)} tokens")


if __name__ == "__main__":
    script_args.parse(__doc__)
    main()
