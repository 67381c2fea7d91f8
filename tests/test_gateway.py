"""The OpenAI-compatible gateway, run as a real process in front of the real
Triton, called with the official openai SDK and with plain HTTP.

The shared test server serves the single-model repository (`embed`,
`embed_tokens`), so the gateway in front of it serves `embed` for the
embeddings compared here, the catalog name `all-MiniLM-L6-v2`, and a name
Triton lacks, all three with MiniLM's tokenizer.json; one test runs the
default deployment's gateway in front of a server of the default catalog."""

from __future__ import annotations

import base64
import json
import logging
import re
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import openai
import orjson
import pytest
from aiohttp.test_utils import make_mocked_request
from embedding_client import ClientTokenizer, EmbeddingClient
from embedding_client.errors import ERROR_KINDS, from_triton
from embedding_client.options import EmbedOptions
from embedding_gateway.app import GatewayModel
from embedding_gateway.errors import ANSWERS, from_embedding_error
from embedding_gateway.logs import JsonFormatter, failure_fields
from embedding_gateway.openai_api import MAX_INPUTS, TokenLimits, parse_embeddings_request
from embedding_gateway.routes import TASK_ROUTES
from embedding_gateway.served_models import ServedModels
from embedding_gateway.server import parse_settings
from embedding_gateway.service import INLINE_TOKENIZE_CHARS
from embedding_gateway.trace_context import read_trace_context
from embedding_gateway.tracing import REQUEST_TRACE, RequestTrace
from embedding_requests import LONG_TEXT, SAMPLE_TEXTS
from tritonclient.utils import InferenceServerException

from harness.gateway import RunningGateway, running_gateway
from harness.logs import RECORD_FIELDS, record, records
from harness.ports import free_loopback_port
from harness.server import RunningServer, running_server
from server.catalog import DEFAULT_CATALOG, Catalog, read_catalog
from server.edge.refusals import REFUSALS
from server.paths import MODEL_REPOSITORY, TOKENIZER_JSON
from server.served_repository import prepare

TOKENIZER = TOKENIZER_JSON
# The Triton name every server has: the catalog MiniLM's alias.
MODEL = "embed"
CATALOG_MODEL = "all-MiniLM-L6-v2"
NOT_IN_TRITON = "not-in-triton"
SERVED = [MODEL, CATALOG_MODEL, NOT_IN_TRITON]
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
        [(name, TOKENIZER) for name in SERVED],
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
    assert [model.id for model in sdk.models.list()] == SERVED
    for name in SERVED:
        assert sdk.models.retrieve(name).owned_by == "triton-embedding-service"
    with pytest.raises(openai.NotFoundError) as caught:
        sdk.models.retrieve("text-embedding-3-small")
    assert_openai_error(caught.value, 404, "model")
    assert caught.value.code == "model_not_found"
    assert caught.value.message.endswith(
        "The model 'text-embedding-3-small' does not exist; this gateway serves "
        "'embed', 'all-MiniLM-L6-v2', 'not-in-triton'"
    )


def test_an_unknown_model_is_404_naming_the_served_ones(gateway: RunningGateway) -> None:
    body = orjson.dumps({"model": "text-embedding-3-small", "input": "text"})
    status, reply = post(gateway, "/v1/embeddings", body)
    assert status == 404
    assert reply["error"] == {
        "message": "The model 'text-embedding-3-small' does not exist; this gateway serves "
        "'embed', 'all-MiniLM-L6-v2', 'not-in-triton'",
        "type": "invalid_request_error",
        "param": "model",
        "code": "model_not_found",
    }


@pytest.mark.parametrize("model_input", ["text", [101, 102]])
def test_a_served_model_triton_lacks_is_503(sdk: openai.OpenAI, model_input: Any) -> None:
    """Listed here, unknown to Triton (missing from its catalog, or the server
    is stopping): a retryable 503 naming the model, not a 502. Texts are
    tokenized here, so both go to the token entry point."""
    with pytest.raises(openai.InternalServerError) as caught:
        sdk.embeddings.create(model=NOT_IN_TRITON, input=model_input)
    assert_openai_error(caught.value, 503, "model")
    assert caught.value.code == "model_not_available"
    assert "Triton does not serve the model 'not-in-triton' now" in caught.value.message
    assert "Request for unknown model: 'not-in-triton_tokens' is not found" in caught.value.message


def test_a_served_model_triton_lacks_with_a_text_option_is_503(sdk: openai.OpenAI) -> None:
    # Texts with a text option go to the text entry point, named as the model.
    with pytest.raises(openai.InternalServerError) as caught:
        sdk.embeddings.create(
            model=NOT_IN_TRITON, input="text", extra_body={"truncation_direction": "left"}
        )
    assert caught.value.code == "model_not_available"
    assert "Request for unknown model: 'not-in-triton' is not found" in caught.value.message


def test_the_default_deployment_serves_the_catalog_name(
    tmp_path: Path, library: EmbeddingClient, tokenizer: ClientTokenizer
) -> None:
    """The compose and Helm gateways' command line (--model all-MiniLM-L6-v2=
    its tokenizer.json) in front of a server of the default catalog, where
    Triton has `all-MiniLM-L6-v2` and `all-MiniLM-L6-v2_tokens`."""
    catalog_path = tmp_path / "models.toml"
    catalog_path.write_text(f'[[models]]\nname = "{CATALOG_MODEL}"\naliases = ["embed"]\n')
    assert isinstance(prepare(catalog_path, tmp_path / "served"), Catalog)
    with (
        running_server(tmp_path / "tritonserver.log", [tmp_path / "served"]) as server,
        running_gateway(
            server.grpc_url, [(CATALOG_MODEL, TOKENIZER)], tmp_path / "gateway.log"
        ) as gateway,
    ):
        sdk = openai.OpenAI(base_url=gateway.base_url, api_key="unused", max_retries=0)
        assert [model.id for model in sdk.models.list()] == [CATALOG_MODEL]
        texts = sdk.embeddings.create(model=CATALOG_MODEL, input=TEXTS)
        ids = sdk.embeddings.create(model=CATALOG_MODEL, input=tokenizer.encode(TEXTS[:2]))
        left = sdk.embeddings.create(
            model=CATALOG_MODEL, input=TEXTS, extra_body={"truncation_direction": "left"}
        )
    assert texts.model == CATALOG_MODEL
    np.testing.assert_allclose(vectors(texts), library.embed(TEXTS), atol=ATOL)
    np.testing.assert_allclose(vectors(ids), library.embed(TEXTS[:2]), atol=ATOL)
    expected = library.embed(TEXTS, truncation_direction="left")
    np.testing.assert_allclose(vectors(left), expected, atol=ATOL)


def test_text_options_reach_triton(
    sdk: openai.OpenAI, library: EmbeddingClient, tokenizer: ClientTokenizer
) -> None:
    """Texts with a text option go to Triton's `embed`, whose tokenizer
    applies it; usage still counts the texts' tokens."""
    texts = [LONG_TEXT, TEXTS[0]]
    left = sdk.embeddings.create(
        model=MODEL, input=texts, extra_body={"truncation_direction": "left", "truncate": True}
    )
    expected = library.embed(texts, truncation_direction="left")
    np.testing.assert_allclose(vectors(left), expected, atol=ATOL)
    assert float(vectors(left)[0] @ library.embed([LONG_TEXT])[0]) < 0.99
    assert left.usage.prompt_tokens == sum(len(row) for row in tokenizer.encode(texts))
    # MiniLM has no prompts: a role picks none.
    query = sdk.embeddings.create(model=MODEL, input=texts, extra_body={"input_type": "query"})
    np.testing.assert_allclose(vectors(query), library.embed(texts), atol=ATOL)


@pytest.mark.parametrize(
    ("options", "param", "code", "message"),
    [
        (
            {"prompt_name": "query"},
            "prompt_name",
            "invalid_value",
            "invalid_parameter 'prompt_name': unknown prompt 'query'; the model's prompts: none",
        ),
        ({"truncate": False}, None, "context_length_exceeded", "input_too_large: TEXT[0] has"),
        (
            {"prompt_name": "query", "input_type": "query"},
            "prompt_name",
            "invalid_value",
            "give prompt_name or input_type, not both",
        ),
    ],
)
def test_triton_refusals_of_text_options_are_400(
    sdk: openai.OpenAI, options: dict[str, Any], param: str | None, code: str, message: str
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.embeddings.create(model=MODEL, input=[LONG_TEXT], extra_body=options)
    assert_openai_error(caught.value, 400, param)
    assert caught.value.code == code
    assert message in caught.value.message


def test_text_options_become_request_parameters() -> None:
    """What the gateway forwards: the fields set, under the same names, as
    request parameters of Triton's text entry point."""
    limits = {MODEL: TokenLimits(256, 30522), "e5-small": TokenLimits(512, 250037)}
    served = ServedModels(dict.fromkeys(limits, "embed"), TASK_ROUTES)
    body = {
        "model": "e5-small",
        "input": ["a text"],
        "dimensions": 64,
        "prompt_name": "query",
        "truncate": False,
        "truncation_direction": "left",
        "input_type": None,
    }
    request = parse_embeddings_request(orjson.dumps(body), limits, served)
    assert request.model == "e5-small" and request.texts == ["a text"]
    assert request.text_options == {
        "prompt_name": "query",
        "truncate": False,
        "truncation_direction": "left",
    }
    options = EmbedOptions(dimensions=request.dimensions, **request.text_options)
    assert options.parameters() == {
        "dtype": "float32",
        "dimensions": 64,
        "prompt_name": "query",
        "truncate": False,
        "truncation_direction": "left",
    }
    plain = parse_embeddings_request(
        orjson.dumps({"model": MODEL, "input": "text"}), limits, served
    )
    assert plain.text_options == {}
    typed = {"model": MODEL, "input": "text", "input_type": "document", "truncate": True}
    assert parse_embeddings_request(orjson.dumps(typed), limits, served).text_options == {
        "input_type": "document",
        "truncate": True,
    }


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
        ({"extra_body": {"prompt_name": 5}}, 400, "prompt_name", "'prompt_name' must be a string"),
        (
            {"extra_body": {"input_type": "passage"}},
            400,
            "input_type",
            "'input_type' must be 'query' or 'document', got 'passage'",
        ),
        ({"extra_body": {"truncate": "yes"}}, 400, "truncate", "'truncate' must be a boolean"),
        (
            {"extra_body": {"truncation_direction": "up"}},
            400,
            "truncation_direction",
            "'truncation_direction' must be 'right' or 'left', got 'up'",
        ),
        (
            {"input": [101, 102], "extra_body": {"prompt_name": "query"}},
            400,
            "prompt_name",
            "'prompt_name' applies to text input only",
        ),
        (
            {"input": [[101, 102]], "extra_body": {"input_type": "query"}},
            400,
            "input_type",
            "'input_type' applies to text input only",
        ),
        (
            {"input": [[101, 102]], "extra_body": {"truncate": False}},
            400,
            "truncate",
            "token ids go to the model as given, without a prompt or truncation",
        ),
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


def test_tei_embed_returns_the_library_vectors(
    gateway: RunningGateway, library: EmbeddingClient
) -> None:
    body = orjson.dumps({"model": MODEL, "inputs": TEXTS})
    status, reply = post(gateway, "/embed", body)
    assert status == 200, reply
    np.testing.assert_allclose(np.array(reply, np.float32), library.embed(TEXTS), atol=ATOL)
    # One string is one input; TEI's options reach the model's entry point.
    options = {"normalize": False, "dimensions": 64, "truncation_direction": "Left"}
    status, reply = post(
        gateway, "/embed", orjson.dumps({"model": MODEL, "inputs": LONG_TEXT, **options})
    )
    assert status == 200, reply
    expected = library.embed(
        [LONG_TEXT], normalize=False, dimensions=64, truncation_direction="left"
    )
    np.testing.assert_allclose(np.array(reply, np.float32), expected, rtol=1e-5, atol=ATOL)


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        # Several embedding models and none named: refused naming them.
        ({"inputs": "text"}, 400, "'model' is required: this gateway serves several ('embed', "),
        ({"model": MODEL, "inputs": []}, 400, "'inputs' is required"),
        ({"model": MODEL, "inputs": ["a", ""]}, 400, "'inputs[1]' must be a non-empty string"),
        ({"model": MODEL, "inputs": "a", "truncation_direction": "up"}, 400, "'Right' or 'Left'"),
        ({"model": MODEL, "inputs": "a", "normalize": 1}, 400, "'normalize' must be a boolean"),
        (
            {"model": MODEL, "inputs": "a", "dimensions": 9999},
            400,
            "invalid_parameter 'dimensions'",
        ),
        ({"model": MODEL, "inputs": "a", "pooling": "cls"}, 400, "argument supplied: pooling"),
        ({"model": "nope", "inputs": "a"}, 404, "this gateway's embedding models: 'embed'"),
        # The gateway serves no sparse encoder.
        ({"inputs": "a"}, 404, "This gateway serves no sparse encoder"),
    ],
)
def test_bad_tei_requests_are_tei_errors(
    gateway: RunningGateway, body: dict[str, Any], status: int, field: str
) -> None:
    path = "/embed_sparse" if body == {"inputs": "a"} else "/embed"
    got, reply = post(gateway, path, orjson.dumps(body))
    assert got == status, reply
    assert set(reply) == {"error", "error_type"} and field in reply["error"], reply
    assert reply["error_type"] == "Validation"


def test_unreachable_triton_is_503(tmp_path: Path) -> None:
    dead_triton = f"127.0.0.1:{free_loopback_port()}"
    with running_gateway(dead_triton, [(MODEL, TOKENIZER)], tmp_path / "gateway.log") as gateway:
        client = openai.OpenAI(base_url=gateway.base_url, api_key="unused", max_retries=0)
        with pytest.raises(openai.InternalServerError) as caught:
            client.embeddings.create(model=MODEL, input="text")
        assert_openai_error(caught.value, 503, None)
        # After its own retries of Triton, the gateway says when to come back.
        assert caught.value.response.headers["Retry-After"] == "1"
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
        running_gateway(
            one_slot_server.grpc_url, [(MODEL, TOKENIZER)], tmp_path / "gateway.log"
        ) as gateway,
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


# How the gateway answers each of the edge's refusals (a key forwarded with
# --forward-api-key): its status and OpenAI's code.
EDGE_ANSWERS = {
    "invalid_parameter": (400, "invalid_value"),
    "invalid_input": (400, "invalid_value"),
    "input_too_large": (400, "context_length_exceeded"),
    "unauthenticated": (401, "invalid_api_key"),
    "permission_denied": (403, "model_not_permitted"),
    "quota_exceeded": (429, "rate_limit_exceeded"),
    "unavailable": (503, "service_unavailable"),
    "internal": (502, "upstream_error"),
}


def test_the_gateway_answers_every_error_kind() -> None:
    assert set(ANSWERS) == set(ERROR_KINDS) == set(EDGE_ANSWERS)


@pytest.mark.parametrize("name", sorted(REFUSALS))
def test_each_edge_refusal_is_answered_by_its_kind(name: str) -> None:
    """Over gRPC, as the gateway's client raises it: the kind read from the
    message gives the status and the code; the parameter it names, if any,
    is OpenAI's param."""
    refusal = REFUSALS[name]
    message = refusal.message(*("word",) * refusal.detail.count("%s"))
    code = next(str(each) for each in grpc.StatusCode if each.value[0] == refusal.grpc_status)
    error = from_triton(InferenceServerException(message, code))
    answer = from_embedding_error(error, "embed")
    body = orjson.loads(answer.body())["error"]
    assert (answer.status, body["code"]) == EDGE_ANSWERS[refusal.kind], name
    assert body["message"].endswith(message)
    if refusal.parameter is not None:
        assert body["param"] == refusal.parameter


def test_command_line_serves_each_model_given() -> None:
    settings, host, port = parse_settings(
        [
            "--triton-url=127.0.0.1:8001",
            f"--model=all-MiniLM-L6-v2={TOKENIZER}",
            f"--model=e5.small_v2={TOKENIZER}",
        ]
    )
    assert settings.models == (
        GatewayModel("all-MiniLM-L6-v2", TOKENIZER),
        GatewayModel("e5.small_v2", TOKENIZER),
    )
    assert (host, port) == ("127.0.0.1", 8080)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ([], "give at least one --model, --reranker, --sparse, --multivector or --m3"),
        (["--reranker=a/b"], "'a/b' is not a Triton model name"),
        (
            ["--model=embed={tokenizer}", "--reranker=embed"],
            "the model embed is given more than once",
        ),
        (["--model=embed"], "'embed' is not NAME=TOKENIZER_JSON"),
        (["--model=org/model={tokenizer}"], "'org/model' is not a Triton model name"),
        (
            ["--model=embed=/nonexistent/tokenizer.json"],
            "embed: /nonexistent/tokenizer.json: no such",
        ),
        (
            ["--model=embed={tokenizer}", "--model=embed={tokenizer}"],
            "the model embed is given more than once",
        ),
        (
            ["--model=embed={tokenizer}", "--tokenizer={tokenizer}"],
            "unrecognized arguments: --tokenizer=",
        ),
        (
            ["--model=embed={tokenizer}", "--log-format=yaml"],
            "--log-format: invalid choice: 'yaml'",
        ),
    ],
)
def test_bad_command_lines_exit_2(
    arguments: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [argument.format(tokenizer=TOKENIZER) for argument in arguments]
    with pytest.raises(SystemExit) as caught:
        parse_settings(["--triton-url=127.0.0.1:8001", *argv])
    assert caught.value.code == 2
    assert message in capsys.readouterr().err


# --- the gateway's log --------------------------------------------------------

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"
# A line of the text format (logging's asctime, a level), which a JSON log lacks.
TEXT_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ ")


def _get(gateway: RunningGateway, path: str, headers: dict[str, str]) -> int:
    request = urllib.request.Request(f"{gateway.url}{path}", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as error:
        return error.code


def test_the_gateway_logs_json_lines_with_the_callers_trace_id(tmp_path: Path) -> None:
    """Requests that need no Triton: one with a traceparent, one without;
    each has its access line, the first with the caller's trace id."""
    dead_triton = f"127.0.0.1:{free_loopback_port()}"
    log_path = tmp_path / "gateway.log"
    with running_gateway(dead_triton, [(MODEL, TOKENIZER)], log_path) as gateway:
        assert _get(gateway, "/v1/models", {"traceparent": TRACEPARENT}) == 200
        assert _get(gateway, "/v1/models/nope", {}) == 404
    log = log_path.read_text()
    assert not [line for line in log.splitlines() if TEXT_LINE.match(line)], log[-4000:]
    for line in log.splitlines():
        if line.startswith("{"):
            assert record(line) is not None, line
    entries = records(log)
    assert all(RECORD_FIELDS <= set(entry) and entry["time"].endswith("Z") for entry in entries), (
        entries
    )
    assert any(f"Triton gRPC {dead_triton}" in entry["message"] for entry in entries), entries
    (traced,) = [entry for entry in entries if entry.get("path") == "/v1/models"]
    assert traced["trace_id"] == TRACE_ID
    assert (traced["method"], traced["status"], traced["level"]) == ("GET", 200, "info")
    assert isinstance(traced["duration_ms"], float) and traced["duration_ms"] >= 0
    (untraced,) = [entry for entry in entries if entry.get("path") == "/v1/models/nope"]
    assert untraced["status"] == 404 and "trace_id" not in untraced


def test_gateway_log_format_text_keeps_the_human_lines(tmp_path: Path) -> None:
    dead_triton = f"127.0.0.1:{free_loopback_port()}"
    log_path = tmp_path / "gateway.log"
    with running_gateway(
        dead_triton, [(MODEL, TOKENIZER)], log_path, extra_args=("--log-format=text",)
    ) as gateway:
        assert _get(gateway, "/v1/models", {"traceparent": TRACEPARENT}) == 200
    log = log_path.read_text()
    started = (
        f"embedding-gateway: {gateway.url}/v1 -> Triton gRPC {dead_triton}, "
        f"models '{MODEL}', priority 0, auth off"
    )
    assert started in log.splitlines(), log[-4000:]
    # No access lines and nothing in JSON, as before the JSON log.
    assert not records(log) and TRACE_ID not in log, log[-4000:]


def test_an_unexpected_failure_logs_the_request_and_its_trace_id() -> None:
    """The 500 line (app.py's _openai_errors) in JSON: the request's method,
    path and the caller's trace id beside the traceback."""
    request = make_mocked_request("POST", "/v1/embeddings", headers={"traceparent": TRACEPARENT})
    # As app.py's middleware sets it, the gateway's spans off.
    request[REQUEST_TRACE] = RequestTrace(read_trace_context(request.headers))
    try:
        raise RuntimeError("a bug")
    except RuntimeError:
        record = logging.getLogger("embedding_gateway.app").makeRecord(
            "embedding_gateway.app",
            logging.ERROR,
            __file__,
            1,
            "unexpected failure on %s %s",
            ("POST", "/v1/embeddings"),
            sys.exc_info(),
            extra=failure_fields(request),
        )
    line = json.loads(JsonFormatter().format(record))
    assert line["message"] == "unexpected failure on POST /v1/embeddings"
    assert (line["level"], line["trace_id"], line["status"]) == ("error", TRACE_ID, 500)
    assert (line["method"], line["path"]) == ("POST", "/v1/embeddings")
    assert "RuntimeError: a bug" in line["error"]


# --- the OpenAPI document and the catalog ------------------------------------


def test_the_document_says_which_routes_need_the_key(gateway: RunningGateway) -> None:
    """With a key, every route but the health checks needs it, /openapi.json
    too, and the document says so."""
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{gateway.url}/openapi.json", timeout=30)
    assert refused.value.code == 401
    request = urllib.request.Request(
        f"{gateway.url}/openapi.json", headers={"Authorization": f"Bearer {API_KEY}"}
    )
    with urllib.request.urlopen(request, timeout=30) as reply:
        document = orjson.loads(reply.read())
    assert document["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    keyed = {
        path: "security" in operation
        for path, methods in document["paths"].items()
        for operation in methods.values()
    }
    assert keyed == {path: not path.startswith("/health/") for path in keyed}, keyed
    schema = document["components"]["schemas"]["EmbeddingsRequest"]
    assert schema["properties"]["model"]["enum"] == SERVED


def test_a_catalog_is_served_from_the_export_folders_given(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The default catalog's packaged model is exported into the model
    repository: without it the command names the folder to give."""
    catalog = ["--triton-url=127.0.0.1:8001", f"--catalog={DEFAULT_CATALOG}"]
    with pytest.raises(SystemExit) as caught:
        parse_settings(catalog)
    assert caught.value.code == 2
    assert "give --model-repository DIR" in capsys.readouterr().err
    settings, _, _ = parse_settings([*catalog, f"--model-repository={MODEL_REPOSITORY}"])
    names = read_catalog(DEFAULT_CATALOG)
    assert isinstance(names, Catalog)
    assert settings.models == tuple(
        GatewayModel(name, TOKENIZER) for model in names.models for name in model.names
    )
