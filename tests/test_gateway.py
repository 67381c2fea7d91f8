"""The OpenAI-compatible gateway, run as a real process in front of the real
Triton, called with the official openai SDK and with plain HTTP."""

from __future__ import annotations

import base64
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import openai
import orjson
import pytest
from embedding_client import ClientTokenizer, EmbeddingClient
from embedding_client.errors import from_triton
from embedding_client.gateway.errors import from_embedding_error
from embedding_client.gateway.protocol import MAX_INPUTS
from embedding_client.gateway.service import INLINE_TOKENIZE_CHARS
from embedding_requests import LONG_TEXT, SAMPLE_TEXTS
from tritonclient.utils import InferenceServerException

from harness.gateway import RunningGateway, running_gateway
from harness.ports import free_loopback_port
from harness.server import RunningServer
from server.paths import TOKENIZER_JSON

TOKENIZER = TOKENIZER_JSON
MODEL = "all-MiniLM-L6-v2"
API_KEY = "test-key-for-the-gateway"
ATOL = 1e-6
# The model configurations' bulk priority level: its queue and deadline are
# long enough that these tests do not hinge on how loaded the machine is.
BULK = 2
# OpenAI rejects empty strings; the other sample texts cover scripts, emoji
# and a text past the max length.
TEXTS = [text for text in SAMPLE_TEXTS if text]


@pytest.fixture(scope="module")
def gateway(
    triton_server: RunningServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningGateway]:
    log_path = tmp_path_factory.mktemp("gateway") / "gateway.log"
    with running_gateway(
        triton_server.grpc_url,
        TOKENIZER,
        log_path,
        api_key=API_KEY,
        extra_args=(f"--priority={BULK}",),
    ) as running:
        yield running


@pytest.fixture(scope="module")
def sdk(gateway: RunningGateway) -> openai.OpenAI:
    # No retries: every error must surface as it was answered.
    return openai.OpenAI(base_url=gateway.base_url, api_key=API_KEY, max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def library(triton_server: RunningServer) -> Iterator[EmbeddingClient]:
    with EmbeddingClient(triton_server.grpc_url, priority=BULK) as client:
        yield client


@pytest.fixture(scope="module")
def tokenizer() -> ClientTokenizer:
    return ClientTokenizer.from_file(TOKENIZER)


def vectors(response: Any) -> np.ndarray:
    return np.array([item.embedding for item in response.data], dtype=np.float32)


def post(gateway: RunningGateway, path: str, body: bytes, api_key: str | None = API_KEY) -> Any:
    """Returns (status, parsed JSON body) of a raw HTTP request."""
    headers = {"Content-Type": "application/json"}
    if api_key is not None:
        headers["Authorization"] = f"Bearer {api_key}"
    request = urllib.request.Request(f"{gateway.url}{path}", data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return reply.status, orjson.loads(reply.read())
    except urllib.error.HTTPError as error:
        return error.code, orjson.loads(error.read())


def test_openai_sdk_returns_the_library_vectors(
    sdk: openai.OpenAI, library: EmbeddingClient, tokenizer: ClientTokenizer
) -> None:
    # The SDK asks for base64 unless told otherwise.
    response = sdk.embeddings.create(model=MODEL, input=TEXTS)
    assert response.object == "list" and response.model == MODEL
    assert [item.index for item in response.data] == list(range(len(TEXTS)))
    assert all(item.object == "embedding" for item in response.data)
    np.testing.assert_allclose(vectors(response), library.embed(TEXTS), atol=ATOL)
    tokens = sum(len(ids) for ids in tokenizer.encode(TEXTS))
    assert response.usage.prompt_tokens == tokens == response.usage.total_tokens


def test_float_and_base64_agree(gateway: RunningGateway) -> None:
    body = {"model": MODEL, "input": TEXTS[:3]}
    status, floats = post(gateway, "/v1/embeddings", orjson.dumps(body))
    assert status == 200
    status, encoded = post(
        gateway, "/v1/embeddings", orjson.dumps({**body, "encoding_format": "base64"})
    )
    assert status == 200
    from_floats = np.array([item["embedding"] for item in floats["data"]], dtype=np.float32)
    from_base64 = np.array(
        [np.frombuffer(base64.b64decode(item["embedding"]), "<f4") for item in encoded["data"]]
    )
    np.testing.assert_allclose(from_floats, from_base64, atol=ATOL)
    assert floats["usage"] == encoded["usage"]


def test_sdk_float_format_with_dimensions(sdk: openai.OpenAI, library: EmbeddingClient) -> None:
    response = sdk.embeddings.create(
        model=MODEL, input=TEXTS[:2], encoding_format="float", dimensions=128, user="someone"
    )
    np.testing.assert_allclose(
        vectors(response), library.embed(TEXTS[:2], dimensions=128), atol=ATOL
    )


def test_token_id_inputs(
    sdk: openai.OpenAI, library: EmbeddingClient, tokenizer: ClientTokenizer
) -> None:
    rows = tokenizer.encode(TEXTS[:3])
    several = sdk.embeddings.create(model=MODEL, input=rows)
    np.testing.assert_allclose(vectors(several), library.embed(TEXTS[:3]), atol=ATOL)
    assert several.usage.prompt_tokens == sum(len(row) for row in rows)
    one = sdk.embeddings.create(model=MODEL, input=rows[0])
    np.testing.assert_allclose(vectors(one), library.embed(TEXTS[:1]), atol=ATOL)


def test_more_inputs_than_one_triton_batch(sdk: openai.OpenAI, library: EmbeddingClient) -> None:
    texts = [f"Input {index} of a request larger than one Triton batch." for index in range(100)]
    response = sdk.embeddings.create(model=MODEL, input=texts)
    np.testing.assert_allclose(vectors(response), library.embed(texts), atol=ATOL)


def test_long_texts_are_truncated_like_the_server_does(
    sdk: openai.OpenAI, library: EmbeddingClient, tokenizer: ClientTokenizer
) -> None:
    # Over INLINE_TOKENIZE_CHARS in all: tokenized off the event loop.
    texts = [f"{index}: {LONG_TEXT}" for index in range(20)]
    assert sum(len(text) for text in texts) > INLINE_TOKENIZE_CHARS
    response = sdk.embeddings.create(model=MODEL, input=texts)
    np.testing.assert_allclose(vectors(response), library.embed(texts), atol=ATOL)
    assert response.usage.prompt_tokens == 20 * tokenizer.max_length


def test_models_are_listed(sdk: openai.OpenAI) -> None:
    assert [model.id for model in sdk.models.list()] == [MODEL]
    assert sdk.models.retrieve(MODEL).owned_by == "triton-embedding-service"


def test_health_needs_no_key(gateway: RunningGateway) -> None:
    for path in ("/health/live", "/health/ready"):
        with urllib.request.urlopen(f"{gateway.url}{path}", timeout=10) as reply:
            assert reply.status == 200


def assert_openai_error(error: openai.APIStatusError, status: int, param: str | None) -> None:
    assert error.status_code == status
    assert isinstance(error.body, dict)
    assert set(error.body) == {"message", "type", "param", "code"}
    assert error.body["param"] == param


@pytest.mark.parametrize(
    ("arguments", "status", "param", "message"),
    [
        ({"model": "text-embedding-3-small"}, 404, "model", "does not exist"),
        ({"input": []}, 400, "input", "'input' is an empty array"),
        ({"input": ""}, 400, "input", "'input[0]' is an empty string"),
        ({"input": [[101, 102], []]}, 400, "input", "'input[1]' is an empty token array"),
        ({"input": ["text", 7]}, 400, "input", "'input' must be a string, an array"),
        ({"input": [[101, 40000]]}, 400, "input", "not a token id in 0..30521"),
        ({"input": [[-1]]}, 400, "input", "not a token id"),
        ({"input": [101] * 257}, 400, "input", "has 257 tokens; the model takes at most 256"),
        ({"input": ["x"] * (MAX_INPUTS + 1)}, 400, "input", "at most 2048 are allowed"),
        ({"dimensions": 0}, 400, "dimensions", "must be a positive integer"),
        ({"dimensions": 385}, 400, "dimensions", "'dimensions': 385 is outside 1..384"),
        ({"encoding_format": "int8"}, 400, "encoding_format", "'float' or 'base64'"),
        ({"user": 5}, 400, "user", "'user' must be a string"),
        ({"extra_body": {"normalize": False}}, 400, "normalize", "Unrecognized request argument"),
    ],
)
def test_bad_requests_are_openai_errors(
    sdk: openai.OpenAI, arguments: dict[str, Any], status: int, param: str, message: str
) -> None:
    request: dict[str, Any] = {"model": MODEL, "input": "text", **arguments}
    with pytest.raises(openai.APIStatusError) as caught:
        sdk.embeddings.create(**request)
    assert_openai_error(caught.value, status, param)
    assert message in caught.value.message


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "must be a JSON object"),
        (b'{"input": "text"}', "'model' is required"),
        (b'{"model": "all-MiniLM-L6-v2"}', "'input' is required"),
    ],
)
def test_malformed_bodies_are_400(gateway: RunningGateway, body: bytes, message: str) -> None:
    status, reply = post(gateway, "/v1/embeddings", body)
    assert status == 400
    assert message in reply["error"]["message"]
    assert reply["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    ("api_key", "code"), [(None, "missing_api_key"), ("wrong-key", "invalid_api_key")]
)
def test_missing_or_wrong_key_is_401(
    gateway: RunningGateway, api_key: str | None, code: str
) -> None:
    body = orjson.dumps({"model": MODEL, "input": "text"})
    status, reply = post(gateway, "/v1/embeddings", body, api_key=api_key)
    assert status == 401
    assert reply["error"]["code"] == code


def test_sdk_with_a_wrong_key_gets_authentication_error(gateway: RunningGateway) -> None:
    client = openai.OpenAI(base_url=gateway.base_url, api_key="wrong-key", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        client.models.list()


def test_unknown_path_is_an_openai_404(gateway: RunningGateway) -> None:
    status, reply = post(gateway, "/v1/completions", b"{}")
    assert status == 404
    assert set(reply["error"]) == {"message", "type", "param", "code"}


def test_unreachable_triton_is_503(tmp_path: Path) -> None:
    dead_triton = f"127.0.0.1:{free_loopback_port()}"
    with running_gateway(dead_triton, TOKENIZER, tmp_path / "gateway.log") as gateway:
        client = openai.OpenAI(base_url=gateway.base_url, api_key="unused", max_retries=0)
        with pytest.raises(openai.InternalServerError) as caught:
            client.embeddings.create(model=MODEL, input="text")
        assert_openai_error(caught.value, 503, None)
        with pytest.raises(urllib.error.HTTPError) as not_ready:
            urllib.request.urlopen(f"{gateway.url}/health/ready", timeout=30)
        assert not_ready.value.code == 503


def test_overload_is_503_with_an_openai_error(
    one_slot_server: RunningServer, tmp_path: Path
) -> None:
    """A burst of 48 requests against 2 embedder instances and a queue of 1 at
    the default (interactive) level: Triton turns part of it away with
    UNAVAILABLE, and the gateway answers those 503."""
    texts = [f"Burst text {index}: more than the server will queue." for index in range(64)]
    body = orjson.dumps({"model": MODEL, "input": texts, "encoding_format": "base64"})
    with (
        running_gateway(one_slot_server.grpc_url, TOKENIZER, tmp_path / "gateway.log") as gateway,
        ThreadPoolExecutor(48) as pool,
    ):
        replies = list(
            pool.map(lambda _: post(gateway, "/v1/embeddings", body, api_key=None), range(48))
        )
    statuses = [status for status, _ in replies]
    assert set(statuses) <= {200, 503}, statuses
    assert 503 in statuses, statuses
    rejected = next(reply for status, reply in replies if status == 503)
    assert rejected["error"]["code"] == "service_unavailable"
    assert "Triton is unavailable or overloaded" in rejected["error"]["message"]


@pytest.mark.parametrize(
    ("status", "http_status"),
    [
        ("StatusCode.INVALID_ARGUMENT", 400),
        ("400", 400),
        ("StatusCode.RESOURCE_EXHAUSTED", 429),
        ("429", 429),
        ("StatusCode.UNAVAILABLE", 503),
        ("StatusCode.DEADLINE_EXCEEDED", 503),
        ("503", 503),
        ("StatusCode.INTERNAL", 502),
        ("500", 502),
    ],
)
def test_triton_statuses_map_to_http_statuses(status: str, http_status: int) -> None:
    """Triton's answers as tritonclient raises them, including those the
    tests above cannot provoke on demand."""
    error = from_embedding_error(from_triton(InferenceServerException("refused", status)))
    assert error.status == http_status
    assert orjson.loads(error.body())["error"]["message"].endswith("refused")
