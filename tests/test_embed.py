"""The `embed` and `embed_tokens` ensembles on a real tritonserver, over
gRPC and HTTP, checked against sentence-transformers and against the
conversions each dtype promises."""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from embedding_requests import (
    LONG_TEXT,
    SAMPLE_TEXTS,
    Client,
    embed_float32,
    embed_raw,
)
from tokenizers import Tokenizer

from export.engine_choice import MIN_COSINE
from harness.priority import BULK
from harness.requests import text_inputs, token_inputs
from harness.server import RunningServer
from server.paths import OPENVINO_CPU_REPOSITORY, TOKENIZER_JSON, default_cpu_embedder

DIMS = 384


def _serves_bf16() -> bool:
    if default_cpu_embedder() != OPENVINO_CPU_REPOSITORY:
        return False
    record = OPENVINO_CPU_REPOSITORY / "embedder" / "1" / "export.json"
    return json.loads(record.read_text())["openvino"]["precision"] == "bf16"


def _assert_same_rows(batched: np.ndarray, alone: np.ndarray) -> None:
    """Each text's embedding from a merged batch is its embedding alone. In
    float32 to rounding; in bfloat16 the matrix kernels (AMX tiles) block the
    products by the batch's shape, so a row moves within the cosine bar and
    must still be nearest to its own embedding alone, not another text's."""
    if not _serves_bf16():
        np.testing.assert_allclose(batched, alone, atol=1e-5)
        return
    cosines = batched @ alone.T
    assert np.diag(cosines).min() >= MIN_COSINE, np.diag(cosines)
    np.testing.assert_array_equal(np.argmax(cosines, axis=1), np.arange(len(alone)))


def _client(server: RunningServer, protocol: str) -> Client:
    if protocol == "grpc":
        return grpcclient.InferenceServerClient(server.grpc_url)
    return httpclient.InferenceServerClient(server.http_url)


@pytest.fixture(scope="module")
def grpc(triton_server: RunningServer) -> grpcclient.InferenceServerClient:
    return grpcclient.InferenceServerClient(triton_server.grpc_url)


@pytest.fixture(scope="module")
def baseline(grpc: grpcclient.InferenceServerClient) -> np.ndarray:
    """The default float32 output for SAMPLE_TEXTS, as every dtype's source."""
    return embed_float32(grpc, SAMPLE_TEXTS)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_embed_matches_sentence_transformers(
    triton_server: RunningServer, reference_embeddings: np.ndarray, protocol: str
) -> None:
    rows = embed_raw(_client(triton_server, protocol), SAMPLE_TEXTS)
    assert rows.dtype == np.uint8 and rows.shape == (len(SAMPLE_TEXTS), DIMS * 4)
    vectors = np.frombuffer(rows.tobytes(), dtype="<f4").reshape(len(SAMPLE_TEXTS), DIMS)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    cosines = np.sum(vectors * reference_embeddings, axis=1)
    assert cosines.min() >= MIN_COSINE, dict(zip(SAMPLE_TEXTS, cosines.tolist(), strict=True))


def test_text_over_max_length_is_truncated(grpc: grpcclient.InferenceServerClient) -> None:
    longer = LONG_TEXT + " This tail lies far beyond the 256-token limit."
    vectors = embed_float32(grpc, [LONG_TEXT, longer])
    np.testing.assert_array_equal(vectors[0], vectors[1])


def _packbits(vectors: np.ndarray) -> np.ndarray:
    return np.packbits(vectors > 0, axis=1)


def _int8(vectors: np.ndarray) -> np.ndarray:
    return np.clip(np.rint(vectors * np.float32(127)), -127, 127).astype(np.int8)


EXPECTED_BY_DTYPE: dict[str, tuple[str, Callable[[np.ndarray], np.ndarray]]] = {
    "float32": ("<f4", lambda v: v),
    "float16": ("<f2", lambda v: v.astype(np.float16)),
    "int8": ("i1", _int8),
    "uint8": ("u1", lambda v: (_int8(v).astype(np.int16) + 128).astype(np.uint8)),
    "ubinary": ("u1", _packbits),
    "binary": ("i1", lambda v: (_packbits(v).astype(np.int16) - 128).astype(np.int8)),
}


@pytest.mark.parametrize("dtype", sorted(EXPECTED_BY_DTYPE))
def test_every_dtype_is_the_conversion_of_float32(
    grpc: grpcclient.InferenceServerClient, baseline: np.ndarray, dtype: str
) -> None:
    numpy_dtype, convert = EXPECTED_BY_DTYPE[dtype]
    rows = embed_raw(grpc, SAMPLE_TEXTS, dtype=dtype)
    decoded = np.frombuffer(rows.tobytes(), dtype=numpy_dtype).reshape(len(SAMPLE_TEXTS), -1)
    np.testing.assert_array_equal(decoded, convert(baseline))


def test_ubinary_bits_are_the_signs(
    grpc: grpcclient.InferenceServerClient, baseline: np.ndarray
) -> None:
    rows = embed_raw(grpc, SAMPLE_TEXTS, dtype="ubinary")
    assert rows.shape == (len(SAMPLE_TEXTS), DIMS // 8)
    np.testing.assert_array_equal(np.unpackbits(rows, axis=1).astype(bool), baseline > 0)


@pytest.mark.parametrize("dimensions", [1, 64, 256, DIMS])
def test_dimensions_truncates_and_renormalizes(
    grpc: grpcclient.InferenceServerClient, baseline: np.ndarray, dimensions: int
) -> None:
    vectors = embed_float32(grpc, SAMPLE_TEXTS, dimensions=dimensions)
    prefix = baseline[:, :dimensions]
    expected = prefix / np.linalg.norm(prefix, axis=1, keepdims=True)
    np.testing.assert_allclose(vectors, expected, atol=1e-6)


def test_normalize_false_returns_the_pooled_vectors(
    grpc: grpcclient.InferenceServerClient, baseline: np.ndarray
) -> None:
    raw = embed_float32(grpc, SAMPLE_TEXTS, normalize=False)
    norms = np.linalg.norm(raw, axis=1)
    # Mean-pooled MiniLM vectors are far from unit length and differ by text.
    assert norms.min() > 1.5 and np.ptp(norms) > 0.1
    np.testing.assert_allclose(raw / norms[:, None], baseline, atol=1e-6)
    prefix = embed_float32(grpc, SAMPLE_TEXTS, normalize=False, dimensions=32)
    np.testing.assert_allclose(prefix, raw[:, :32], rtol=1e-6)


def test_embed_tokens_equals_embed(
    grpc: grpcclient.InferenceServerClient, baseline: np.ndarray
) -> None:
    tokenizer = Tokenizer.from_file(str(TOKENIZER_JSON))
    tokenizer.enable_padding()
    encodings = tokenizer.encode_batch(SAMPLE_TEXTS)
    input_ids = np.array([encoding.ids for encoding in encodings], dtype=np.int64)
    attention_mask = np.array([encoding.attention_mask for encoding in encodings], dtype=np.int64)
    inputs = token_inputs(grpcclient, input_ids, attention_mask)
    rows = grpc.infer("embed_tokens", inputs).as_numpy("EMBEDDING")
    vectors = np.frombuffer(rows.tobytes(), dtype="<f4").reshape(len(SAMPLE_TEXTS), DIMS)
    np.testing.assert_allclose(vectors, baseline, atol=1e-5)


def _many_texts(count: int) -> list[str]:
    words = "semantic search ranks documents by the cosine of their embeddings".split()
    return [" ".join(words[: 2 + index % len(words)]) + f" #{index}" for index in range(count)]


def test_64_texts_in_one_request_match_one_by_one(grpc: grpcclient.InferenceServerClient) -> None:
    texts = _many_texts(64)
    together = embed_float32(grpc, texts)
    one_by_one = np.vstack([embed_float32(grpc, [text]) for text in texts])
    _assert_same_rows(together, one_by_one)


def test_64_concurrent_requests_match_one_by_one(
    triton_server: RunningServer, grpc: grpcclient.InferenceServerClient
) -> None:
    texts = _many_texts(64)
    one_by_one = np.vstack([embed_float32(grpc, [text]) for text in texts])

    def embed_one(text: str) -> np.ndarray:
        # At the bulk level: a burst of 64 at once is more than the
        # interactive door admits (the tokenizer's config.pbtxt).
        client = grpcclient.InferenceServerClient(triton_server.grpc_url)
        rows = client.infer("embed", text_inputs(grpcclient, [text]), priority=BULK)
        return np.frombuffer(rows.as_numpy("EMBEDDING").tobytes(), dtype="<f4").reshape(1, -1)

    with ThreadPoolExecutor(max_workers=64) as pool:
        concurrent = np.vstack(list(pool.map(embed_one, texts)))
    _assert_same_rows(concurrent, one_by_one)
