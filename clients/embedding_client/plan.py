"""The embedding calls (call.py), shared by the sync and asyncio clients:
the entry point, how to split the input for a given max batch size, the
options, and the rows decoded in their dtype.

Each model the server serves has two entry points: its name takes texts,
and `{name}_tokens` takes token ids (`embed` and `embed_tokens`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from embedding_client.batching import (
    Request,
    checked_texts,
    checked_token_arrays,
    checked_token_rows,
    split_texts,
    split_token_arrays,
    split_token_rows,
)
from embedding_client.call import Call
from embedding_client.decode import assemble
from embedding_client.errors import InvalidInputError, ServerError
from embedding_client.options import EmbedOptions
from embedding_client.tokenization import ClientTokenizer
from embedding_client.transport import OUTPUT

TOKENS_SUFFIX = "_tokens"


def tokens_model_name(model: str) -> str:
    """The token-id entry point of the model called `model`."""
    return model + TOKENS_SUFFIX


def embedding_call(
    model: str, split: Callable[[int], list[Request]], options: EmbedOptions
) -> Call[np.ndarray]:
    """Rows of the options' dtype from `model`, [N, k]."""
    return Call.of_output(
        model, options.parameters(), OUTPUT, split, partial(assemble, dtype=options.dtype)
    )


@dataclass(frozen=True)
class Planner:
    text_model: str
    tokenizer: ClientTokenizer | None

    @property
    def tokens_model(self) -> str:
        return tokens_model_name(self.text_model)

    def texts(self, texts: str | Sequence[str], options: EmbedOptions) -> Call[np.ndarray]:
        """Texts go to the text entry point when the call sets a text option
        (a prompt, the truncation), which only the server's tokenizer applies."""
        items = checked_texts(texts)
        if self.tokenizer is not None and not options.text_options:
            return self.token_rows(self.tokenizer.encode(items), options)
        return embedding_call(self.text_model, partial(split_texts, items), options)

    def token_rows(self, rows: Sequence[Sequence[int]], options: EmbedOptions) -> Call[np.ndarray]:
        _no_text_options(options)
        split = partial(split_token_rows, checked_token_rows(rows))
        return embedding_call(self.tokens_model, split, options)

    def token_arrays(
        self, input_ids: object, attention_mask: object, options: EmbedOptions
    ) -> Call[np.ndarray]:
        _no_text_options(options)
        ids, mask = checked_token_arrays(input_ids, attention_mask)
        return embedding_call(self.tokens_model, partial(split_token_arrays, ids, mask), options)


def _no_text_options(options: EmbedOptions) -> None:
    if options.text_options:
        raise InvalidInputError(
            f"invalid_parameter '{options.text_options[0]}': applies to texts only; "
            "token ids go to the model as given, without a prompt or truncation"
        )


def planner(text_model: str, tokenizer: str | Path | ClientTokenizer | None) -> Planner:
    if tokenizer is None or isinstance(tokenizer, ClientTokenizer):
        return Planner(text_model, tokenizer)
    return Planner(text_model, ClientTokenizer.from_file(tokenizer))


def batch_limit(model: str, config: dict[str, Any]) -> int:
    """The max batch size from a model config as Triton reports it in JSON."""
    limit = int(config.get("max_batch_size", 0))
    if limit < 1:
        raise ServerError(
            f"model {model!r} does not batch (max_batch_size {limit}); it cannot serve this client"
        )
    return limit
