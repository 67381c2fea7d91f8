"""Client-side tokenization with the server's own tokenizer.json.

Tokenizing where the texts are (the pretokenization Snowflake describes for
its embedding service) takes the tokenizer step off the server: the ids go to
`embed_tokens`. The same file gives the token counts the gateway reports.
A model with a default prompt (sentence-transformers' default_prompt_name)
gets it before each text here too, as the server's tokenizer puts it: the
export record (export.json) beside the tokenizer.json names it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from tokenizers import Tokenizer

RECORD = "export.json"


def default_prompt(tokenizer_json: Path) -> str:
    """The text of the model's default prompt, from the export record beside
    its tokenizer.json; none where there is no record or no default."""
    record = tokenizer_json.parent / RECORD
    if not record.is_file():
        return ""
    fields = json.loads(record.read_text())
    name = fields.get("default_prompt_name")
    return str(fields.get("prompts", {})[name]) if name else ""


class ClientTokenizer:
    def __init__(self, tokenizer: Tokenizer, prompt: str = "") -> None:
        truncation = tokenizer.truncation
        if truncation is None:
            raise ValueError(
                "the tokenizer sets no max length; use the server's tokenizer.json "
                "(model_repository/shared/tokenizer/1/tokenizer.json)"
            )
        self._tokenizer = tokenizer
        self._prompt = prompt
        self.max_length: int = truncation["max_length"]
        self.vocab_size: int = tokenizer.get_vocab_size()

    @classmethod
    def from_file(cls, path: str | Path) -> ClientTokenizer:
        return cls(Tokenizer.from_file(str(path)), default_prompt(Path(path)))

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids with the special tokens, after the default prompt,
        truncated to the max length as the server's tokenizer does."""
        prompted = [self._prompt + text for text in texts]
        return [encoding.ids for encoding in self._tokenizer.encode_batch_fast(prompted)]
