"""Request tensors as tritonclient inputs, built as the product client builds
them (embedding_client.batching), for `module` tritonclient.grpc or
tritonclient.http (tritonclient.grpc's also serve tritonclient.grpc.aio)."""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import Any

import numpy as np
from embedding_client.batching import text_request, token_request
from embedding_client.transport import infer_inputs


def text_inputs(module: ModuleType, texts: Sequence[str]) -> list[Any]:
    """The input of `embed`: TEXT, UTF-8 BYTES [N, 1]."""
    return infer_inputs(module, text_request(texts))


def token_inputs(
    module: ModuleType, input_ids: np.ndarray, attention_mask: np.ndarray
) -> list[Any]:
    """The inputs of `embed_tokens`: INT64 INPUT_IDS and ATTENTION_MASK, [N, L]."""
    return infer_inputs(module, token_request(input_ids, attention_mask))
