"""Texts and request helpers shared by the test modules."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

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


def assert_refused_alone(
    good: Callable[[], np.ndarray], bad: Callable[[], object], named: str, rows: int
) -> None:
    """`bad` is refused with INVALID_ARG, its message naming `named`, while three `good`
    requests sent beside it are each answered, `rows` rows each."""
    with ThreadPoolExecutor(4) as pool:
        answers = [pool.submit(good) for _ in range(3)]
        with pytest.raises(InferenceServerException) as refused:
            bad()
        assert "INVALID_ARG" in str(refused.value.status()), refused.value
        assert named in str(refused.value.message()), refused.value.message()
        for answer in answers:
            assert answer.result().shape[0] == rows


def requests_seen(grpc_url: str, model: str) -> int:
    """Requests `model` answered; Triton counts a Python model's error response as a success,
    so success and fail together."""
    client = grpcclient.InferenceServerClient(grpc_url)
    (stats,) = client.get_inference_statistics(model, as_json=True)["model_stats"]
    counts = stats["inference_stats"]
    return sum(int(counts.get(kind, {}).get("count", 0)) for kind in ("success", "fail"))
