"""The client library (clients/embedding_client) against a real server: sync
and asyncio, gRPC and HTTP, zero-copy decode, splitting, client-side
tokenization and typed errors."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from embedding_client import (
    ROW_DTYPES,
    AsyncEmbeddingClient,
    ClientTokenizer,
    EmbeddingClient,
    InvalidInputError,
    UnavailableError,
    decode_rows,
)
from embedding_client.batching import pad_rows
from embedding_requests import SAMPLE_TEXTS, embed_float32

from harness.ports import free_loopback_port
from harness.server import RunningServer
from server.paths import TOKENIZER_JSON

TOKENIZER = TOKENIZER_JSON
ATOL = 1e-6
# The model configurations' bulk priority level: its queue and deadline are
# long enough that these tests do not hinge on how loaded the machine is.
BULK = 2
# More texts than the ensembles' max batch size (64), so they go out as
# three requests at once.
MANY_TEXTS = [f"Text number {index} on how a client splits its work." for index in range(150)]


def url(server: RunningServer, protocol: str) -> str:
    return server.grpc_url if protocol == "grpc" else server.http_url


@pytest.fixture(scope="module")
def direct(triton_server: RunningServer) -> grpcclient.InferenceServerClient:
    return grpcclient.InferenceServerClient(triton_server.grpc_url)


@pytest.fixture(scope="module")
def expected_many(direct: grpcclient.InferenceServerClient) -> np.ndarray:
    """MANY_TEXTS embedded with plain tritonclient, in requests of 50."""
    parts = [embed_float32(direct, MANY_TEXTS[i : i + 50]) for i in range(0, len(MANY_TEXTS), 50)]
    return np.concatenate(parts)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_embed_matches_plain_tritonclient(
    triton_server: RunningServer, direct: grpcclient.InferenceServerClient, protocol: str
) -> None:
    with EmbeddingClient(url(triton_server, protocol), protocol, priority=BULK) as client:
        vectors = client.embed(SAMPLE_TEXTS)
    assert vectors.shape == (len(SAMPLE_TEXTS), 384)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(vectors, embed_float32(direct, SAMPLE_TEXTS), atol=ATOL)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_one_response_is_decoded_without_a_copy(
    triton_server: RunningServer, protocol: str
) -> None:
    with EmbeddingClient(url(triton_server, protocol), protocol, priority=BULK) as client:
        vectors = client.embed(["a view of the received bytes", "not a copy"])
    assert not vectors.flags.owndata
    assert vectors.base is not None


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_large_input_is_split_and_reassembled_in_order(
    triton_server: RunningServer, expected_many: np.ndarray, protocol: str
) -> None:
    with EmbeddingClient(url(triton_server, protocol), protocol, priority=BULK) as client:
        assert client.max_batch_size("embed") == 64
        vectors = client.embed(MANY_TEXTS)
    np.testing.assert_allclose(vectors, expected_many, atol=ATOL)


def test_single_string_is_one_text(triton_server: RunningServer) -> None:
    with EmbeddingClient(triton_server.grpc_url, priority=BULK) as client:
        assert client.embed("one text").shape == (1, 384)


def test_decode_rows_reinterprets_without_copying() -> None:
    values = np.array([[0.5, -0.25], [1.0, 0.0]], dtype="<f4")
    rows = np.frombuffer(values.tobytes(), dtype=np.uint8).reshape(2, 8)
    decoded = decode_rows(rows, "float32")
    np.testing.assert_array_equal(decoded, values)
    assert np.shares_memory(decoded, rows)


@pytest.mark.parametrize("dtype", list(ROW_DTYPES))
def test_every_dtype_decodes_as_documented(triton_server: RunningServer, dtype: str) -> None:
    with EmbeddingClient(triton_server.grpc_url, priority=BULK) as client:
        reference = client.embed(SAMPLE_TEXTS[:4], dimensions=128)
        decoded = client.embed(SAMPLE_TEXTS[:4], dtype=dtype, dimensions=128)
    assert decoded.dtype == ROW_DTYPES[dtype]
    if dtype == "float16":
        np.testing.assert_allclose(decoded, reference, atol=1e-3)
    elif dtype in ("int8", "uint8"):
        codes = decoded.astype(np.int16) - (128 if dtype == "uint8" else 0)
        np.testing.assert_allclose(codes / 127, reference, atol=1 / 127)
    elif dtype in ("ubinary", "binary"):
        bits = decoded.view(np.uint8) ^ (0x80 if dtype == "binary" else 0)
        assert decoded.shape == (4, 16)
        np.testing.assert_array_equal(np.unpackbits(bits, axis=1), reference > 0)
    else:
        np.testing.assert_array_equal(decoded, reference)


def test_client_side_tokenization_matches_the_server(
    triton_server: RunningServer, direct: grpcclient.InferenceServerClient
) -> None:
    with EmbeddingClient(triton_server.grpc_url, tokenizer=TOKENIZER, priority=BULK) as client:
        vectors = client.embed(SAMPLE_TEXTS)
    np.testing.assert_allclose(vectors, embed_float32(direct, SAMPLE_TEXTS), atol=ATOL)


def test_embed_tokens_takes_padded_arrays(
    triton_server: RunningServer, direct: grpcclient.InferenceServerClient
) -> None:
    input_ids, attention_mask = pad_rows(ClientTokenizer.from_file(TOKENIZER).encode(SAMPLE_TEXTS))
    with EmbeddingClient(triton_server.http_url, "http", priority=BULK) as client:
        vectors = client.embed_tokens(input_ids, attention_mask, dimensions=64)
    expected = embed_float32(direct, SAMPLE_TEXTS, dimensions=64)
    np.testing.assert_allclose(vectors, expected, atol=ATOL)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_async_client_matches_the_sync_client(
    triton_server: RunningServer, expected_many: np.ndarray, protocol: str
) -> None:
    async def embed_concurrently() -> list[np.ndarray]:
        async with AsyncEmbeddingClient(
            url(triton_server, protocol), protocol, tokenizer=TOKENIZER, priority=BULK
        ) as client:
            return await asyncio.gather(
                client.embed(MANY_TEXTS),
                client.embed_token_ids([[101, 7592, 2088, 102]]),
            )

    many, hello = asyncio.run(embed_concurrently())
    np.testing.assert_allclose(many, expected_many, atol=ATOL)
    with EmbeddingClient(triton_server.grpc_url, priority=BULK) as client:
        np.testing.assert_allclose(hello, client.embed(["hello world"]), atol=ATOL)


@pytest.mark.parametrize(
    ("protocol", "status"), [("grpc", "StatusCode.INVALID_ARGUMENT"), ("http", "400")]
)
def test_server_rejection_is_typed_with_message_and_status(
    triton_server: RunningServer, protocol: str, status: str
) -> None:
    with EmbeddingClient(url(triton_server, protocol), protocol, priority=BULK) as client:
        with pytest.raises(InvalidInputError) as caught:
            client.embed(["text"], dimensions=385)
    assert caught.value.status == status
    assert "invalid_parameter 'dimensions': 385 is outside 1..384" in caught.value.message
    assert (caught.value.kind, caught.value.parameter) == ("invalid_parameter", "dimensions")


def test_async_server_rejection_is_typed(triton_server: RunningServer) -> None:
    async def embed_binary_of_odd_width() -> None:
        async with AsyncEmbeddingClient(triton_server.grpc_url, priority=BULK) as client:
            await client.embed(["text"], dtype="binary", dimensions=12)

    with pytest.raises(InvalidInputError, match="multiple of 8") as caught:
        asyncio.run(embed_binary_of_odd_width())
    assert caught.value.status == "StatusCode.INVALID_ARGUMENT"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda client: client.embed([]), "texts is empty"),
        (lambda client: client.embed(["fine", 3]), "texts[1] is int, not str"),
        (lambda client: client.embed(["x"], dtype="float64"), "unknown dtype 'float64'"),
        (lambda client: client.embed(["x"], dimensions="64"), "'dimensions': must be an integer"),
        (lambda client: client.embed(["x"], normalize="no"), "'normalize': must be a boolean"),
        (lambda client: client.embed_token_ids([[101, 102], []]), "token row 1 is empty"),
        (lambda client: client.embed_tokens([[1, 2]], [[1]]), "attention_mask has shape"),
        (lambda client: client.embed_tokens([1, 2], [1, 1]), "input_ids must be a non-empty"),
    ],
)
def test_bad_input_is_rejected_before_sending(
    triton_server: RunningServer, call: Callable[[EmbeddingClient], object], message: str
) -> None:
    with EmbeddingClient(triton_server.grpc_url, priority=BULK) as client:
        with pytest.raises(InvalidInputError, match=message.replace("[", r"\[")) as caught:
            call(client)
    assert caught.value.status is None


def test_overload_rejection_is_unavailable(one_slot_server: RunningServer) -> None:
    """Far more requests at once than the embedder queues: Triton turns some
    away with UNAVAILABLE."""
    texts = [f"Text {index} of a burst past the server's queues." for index in range(64 * 48)]

    async def burst() -> None:
        async with AsyncEmbeddingClient(one_slot_server.grpc_url, max_in_flight=48) as client:
            await client.embed(texts)

    with pytest.raises(UnavailableError) as caught:
        asyncio.run(burst())
    assert caught.value.status == "StatusCode.UNAVAILABLE"


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_unreachable_server_is_unavailable(protocol: str) -> None:
    with EmbeddingClient(f"127.0.0.1:{free_loopback_port()}", protocol, timeout_s=5) as client:
        with pytest.raises(UnavailableError):
            client.embed(["nobody listens"])


def test_unknown_protocol_is_named() -> None:
    with pytest.raises(ValueError, match="protocol must be one of grpc, http, got 'udp'"):
        EmbeddingClient("127.0.0.1:8001", "udp")  # type: ignore[arg-type]
