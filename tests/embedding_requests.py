"""Texts and request helpers shared by the test modules."""

from __future__ import annotations

from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from harness.requests import text_inputs

LONG_TEXT = " ".join(
    f"Sentence number {index} describes how an embedding server batches its work."
    for index in range(60)
)

# Texts the tests embed and compare against sentence-transformers.
SAMPLE_TEXTS = [
    "Triton serves text embeddings as raw little-endian bytes.",
    "A quick brown fox jumps over the lazy dog.",
    "埋め込みベクトルはテキストの意味を表します。",
    "向量嵌入用于语义搜索。",
    "Emoji are text too 🚀🔥👍🏽",
    "النص العربي يكتب من اليمين إلى اليسار",
    "",
    LONG_TEXT,
]


Client = grpcclient.InferenceServerClient | httpclient.InferenceServerClient


def embed_raw(
    client: Client, texts: list[str], model: str = "embed", **parameters: Any
) -> np.ndarray:
    """Sends texts to `model`'s text entry point; returns the [N, bytes] uint8 rows."""
    module = grpcclient if isinstance(client, grpcclient.InferenceServerClient) else httpclient
    result = client.infer(model, text_inputs(module, texts), parameters=parameters or None)
    return result.as_numpy("EMBEDDING")


def embed_float32(
    client: Client, texts: list[str], model: str = "embed", **parameters: Any
) -> np.ndarray:
    rows = embed_raw(client, texts, model, **parameters)
    return np.frombuffer(rows.tobytes(), dtype="<f4").reshape(len(texts), -1)
