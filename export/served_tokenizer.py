"""The model's tokenizer.json as the tokenizer stage runs it (on texts, or on (query, document)
pairs for a reranker), and batches padded as the server pads them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
from tokenizers import Encoding, Tokenizer

IntArray = npt.NDArray[np.int64]


def load_tokenizer(model_dir: Path, max_seq_length: int) -> Tokenizer:
    """Loads tokenizer.json configured as the serving side uses it: truncating, never padding.
    model_dir is the Transformer module's folder (the model's root for published models).
    Pairs truncate longest_first, as sentence-transformers' CrossEncoder tokenizes them: the
    longer of the two loses a token at a time."""
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


def pad_inputs(encodings: Sequence[Encoding], names: Sequence[str]) -> dict[str, IntArray]:
    """The graph's named inputs for encodings padded on the right: input_ids, attention_mask
    and, where named, token_type_ids (padded with type 0)."""
    input_ids, attention_mask = pad_batch(encodings)
    inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
    if "token_type_ids" in names:
        token_type_ids = np.zeros_like(input_ids)
        for row, encoding in enumerate(encodings):
            token_type_ids[row, : len(encoding.type_ids)] = encoding.type_ids
        inputs["token_type_ids"] = token_type_ids
    return {name: inputs[name] for name in names}
