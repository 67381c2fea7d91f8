"""Client-side tokenization with the server's own tokenizer.json.

Tokenizing where the texts are (the pretokenization Snowflake describes for
its embedding service) takes the tokenizer step off the server: the ids go to
`embed_tokens`. The same file gives the token counts the gateway reports.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tokenizers import Tokenizer


class ClientTokenizer:
    def __init__(self, tokenizer: Tokenizer) -> None:
        truncation = tokenizer.truncation
        if truncation is None:
            raise ValueError(
                "the tokenizer sets no max length; use the server's tokenizer.json "
                "(model_repository/shared/tokenizer/1/tokenizer.json)"
            )
        self._tokenizer = tokenizer
        self.max_length: int = truncation["max_length"]
        self.vocab_size: int = tokenizer.get_vocab_size()

    @classmethod
    def from_file(cls, path: str | Path) -> ClientTokenizer:
        return cls(Tokenizer.from_file(str(path)))

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids with the special tokens, truncated to the max length as
        the server's tokenizer does."""
        return [encoding.ids for encoding in self._tokenizer.encode_batch_fast(list(texts))]
