"""The model's tokenizer.json as the tokenizer stage runs it, and batches padded as the server
pads them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
from tokenizers import Encoding, Tokenizer

IntArray = npt.NDArray[np.int64]


def load_tokenizer(model_dir: Path, max_seq_length: int) -> Tokenizer:
    """Loads tokenizer.json configured as the serving side uses it: truncating, never padding.
    model_dir is the Transformer module's folder (the model's root for published models)."""
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.enable_truncation(max_seq_length, strategy="longest_first")
    tokenizer.no_padding()
    return tokenizer


def pad_batch(encodings: Sequence[Encoding], left: bool = False) -> tuple[IntArray, IntArray]:
    """Pads encodings to the longest one, on the right as the server does (or on the left);
    padded positions are masked out."""
    width = max(len(encoding.ids) for encoding in encodings)
    input_ids = np.zeros((len(encodings), width), dtype=np.int64)
    attention_mask = np.zeros((len(encodings), width), dtype=np.int64)
    for row, encoding in enumerate(encodings):
        columns = slice(width - len(encoding.ids), width) if left else slice(0, len(encoding.ids))
        input_ids[row, columns] = encoding.ids
        attention_mask[row, columns] = encoding.attention_mask
    return input_ids, attention_mask
