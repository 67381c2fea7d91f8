"""The client library (clients/embedding_client) against a real server: sync
and asyncio, gRPC and HTTP, zero-copy decode, splitting, client-side
tokenization, the model and text options a call names, and typed errors."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from embedding_client import (
    ROW_DTYPES,
    AsyncEmbeddingClient,
    ClientTokenizer,
    EmbeddingClient,
    InvalidInputError,
    ServerError,
    UnavailableError,
    decode_rows,
)
from embedding_client.batching import pad_rows
from embedding_client.options import (
    INTEGER_MAXIMUM,
    RERANK_OPTIONS,
    ROW_OPTIONS,
    TEXT_OPTION_DECLARATIONS,
    EmbedOptions,
    SparseOptions,
)
from embedding_client.plan import planner
from embedding_requests import LONG_TEXT, SAMPLE_TEXTS, embed_float32
from tokenizers import Tokenizer

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
        (lambda client: client.embed(["x"], prompt_name=3), "'prompt_name': must be a string"),
        (
            lambda client: client.embed(["x"], input_type="passage"),
            "'input_type': must be one of query, document, got 'passage'",
        ),
        (lambda client: client.embed(["x"], truncate="no"), "'truncate': must be a boolean"),
        (
            lambda client: client.embed(["x"], truncation_direction="middle"),
            "'truncation_direction': must be one of right, left",
        ),
        (
            lambda client: client.embed_token_ids([[101, 102]], prompt_name="query"),
            "'prompt_name': applies to texts only",
        ),
        (
            lambda client: client.embed_tokens([[101, 102]], [[1, 1]], truncate=False),
            "'truncate': applies to texts only",
        ),
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


def test_options_become_the_request_parameters() -> None:
    """What travels to Triton: dtype always, the rest only where set or off
    the server's default, under the server's names."""
    assert EmbedOptions().parameters() == {"dtype": "float32"}
    options = EmbedOptions(
        dtype="int8",
        dimensions=128,
        normalize=False,
        prompt_name="query",
        truncate=False,
        truncation_direction="left",
    )
    assert options.parameters() == {
        "dtype": "int8",
        "dimensions": 128,
        "normalize": False,
        "prompt_name": "query",
        "truncate": False,
        "truncation_direction": "left",
    }
    assert options.text_options == ("prompt_name", "truncate", "truncation_direction")
    # An explicit truncate=True travels: a model may default to refusing.
    typed = EmbedOptions(input_type="document", truncate=True).parameters()
    assert typed == {"dtype": "float32", "input_type": "document", "truncate": True}


@pytest.mark.parametrize(
    ("model", "tokens_model"), [("embed", "embed_tokens"), ("e5-small", "e5-small_tokens")]
)
def test_token_ids_go_to_the_models_tokens_entry_point(model: str, tokens_model: str) -> None:
    plans = planner(model, ClientTokenizer.from_file(TOKENIZER))
    options = EmbedOptions()
    assert plans.texts(["text"], options).model == tokens_model
    assert plans.token_rows([[101, 102]], options).model == tokens_model
    assert plans.token_arrays([[101, 102]], [[1, 1]], options).model == tokens_model
    # A text option is the server tokenizer's to apply: the texts go to it.
    assert plans.texts(["text"], EmbedOptions(input_type="query")).model == model
    assert planner(model, None).texts(["text"], options).model == model


def left_truncated_ids(text: str) -> list[int]:
    """[CLS], the text's last tokens, [SEP]: at most the max length."""
    tokenizer = Tokenizer.from_file(str(TOKENIZER))
    truncation = tokenizer.truncation
    assert truncation is not None
    max_length = truncation["max_length"]
    tokenizer.no_truncation()
    ids = tokenizer.encode(text).ids
    return [ids[0], *ids[len(ids) - max_length + 1 :]]


@pytest.mark.parametrize("tokenizer", [None, TOKENIZER])
def test_text_options_reach_the_server(
    triton_server: RunningServer, tokenizer: Path | None
) -> None:
    """With or without a client-side tokenizer: a call with a text option
    sends texts to `embed`, whose tokenizer applies it."""
    texts = [LONG_TEXT, SAMPLE_TEXTS[0]]
    with EmbeddingClient(triton_server.grpc_url, tokenizer=tokenizer, priority=BULK) as client:
        right = client.embed(texts)
        left = client.embed(texts, truncation_direction="left")
        expected_left = client.embed_token_ids([left_truncated_ids(LONG_TEXT)])
        # MiniLM has no prompts: a role picks none.
        query = client.embed(texts, input_type="query", truncate=True)
        with pytest.raises(InvalidInputError) as too_long:
            client.embed(texts, truncate=False)
        with pytest.raises(InvalidInputError) as unknown:
            client.embed(texts, prompt_name="query")
    np.testing.assert_allclose(left[0], expected_left[0], atol=ATOL)
    assert float(left[0] @ right[0]) < 0.99
    np.testing.assert_allclose(left[1], right[1], atol=ATOL)
    np.testing.assert_allclose(query, right, atol=ATOL)
    assert too_long.value.status == "StatusCode.INVALID_ARGUMENT"
    assert too_long.value.kind == "input_too_large"
    assert (unknown.value.kind, unknown.value.parameter) == ("invalid_parameter", "prompt_name")
    assert "unknown prompt 'query'" in unknown.value.message


def test_model_names_the_triton_model(
    triton_server: RunningServer, direct: grpcclient.InferenceServerClient
) -> None:
    with EmbeddingClient(triton_server.grpc_url, model="not-in-triton", priority=BULK) as client:
        assert client.model == "not-in-triton"
        with pytest.raises(ServerError) as texts:
            client.embed(["text"])
        with pytest.raises(ServerError) as ids:
            client.embed_token_ids([[101, 102]])
        # Another model of the same server, on the same connection.
        served = client.with_model("embed")
        assert served.model == "embed"
        np.testing.assert_allclose(
            served.embed(SAMPLE_TEXTS[:2]),
            embed_float32(
                grpcclient.InferenceServerClient(triton_server.grpc_url), SAMPLE_TEXTS[:2]
            ),
            atol=ATOL,
        )
    assert texts.value.status == ids.value.status == "StatusCode.NOT_FOUND"
    assert "'not-in-triton'" in texts.value.message
    assert "'not-in-triton_tokens'" in ids.value.message


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_unreachable_server_is_unavailable(protocol: str) -> None:
    with EmbeddingClient(f"127.0.0.1:{free_loopback_port()}", protocol, timeout_s=5) as client:
        with pytest.raises(UnavailableError):
            client.embed(["nobody listens"])


def test_unknown_protocol_is_named() -> None:
    with pytest.raises(ValueError, match="protocol must be one of grpc, http, got 'udp'"):
        EmbeddingClient("127.0.0.1:8001", "udp")  # type: ignore[arg-type]


def test_each_option_is_checked_once_as_declared() -> None:
    """Every option's check is its declaration's (row_formats.json): its
    type, its choices, its minimum, and Triton's int64 for an integer, which
    tritonclient would otherwise fail on while building the request."""
    for option in (*ROW_OPTIONS.values(), *TEXT_OPTION_DECLARATIONS.values()):
        assert option.problem(option.default) is None, option
    with pytest.raises(InvalidInputError, match=f"must be at most {INTEGER_MAXIMUM}"):
        EmbedOptions(dimensions=INTEGER_MAXIMUM + 1)
    with pytest.raises(InvalidInputError, match="'max_active_dims': must be a positive integer"):
        SparseOptions(max_active_dims=0)
    assert RERANK_OPTIONS["top_n"].problem(0) == "must be a positive integer, got 0"
    assert EmbedOptions(dimensions=INTEGER_MAXIMUM).parameters()["dimensions"] == INTEGER_MAXIMUM
