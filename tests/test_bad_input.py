"""Bad requests get INVALID_ARG with a message naming the problem, the
server stays ready, and good requests before and after are answered."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from embedding_requests import embed_float32, embed_raw, requests_seen
from tritonclient.utils import InferenceServerException

from harness.requests import token_inputs
from harness.server import RunningServer

GOOD_TEXTS = ["a good request after a bad one"]


def _assert_rejected(
    call: Any, expected_status: str, expected_message: str
) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as caught:
        call()
    assert caught.value.status() == expected_status, caught.value
    assert expected_message in caught.value.message(), caught.value.message()
    return caught.value


@pytest.fixture
def grpc(triton_server: RunningServer) -> grpcclient.InferenceServerClient:
    return grpcclient.InferenceServerClient(triton_server.grpc_url)


@pytest.fixture(autouse=True)
def _server_still_serves(triton_server: RunningServer) -> Any:
    yield
    client = grpcclient.InferenceServerClient(triton_server.grpc_url)
    assert client.is_server_ready()
    assert embed_float32(client, GOOD_TEXTS).shape == (1, 384)


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({"dtype": "float64"}, "invalid_parameter 'dtype': unknown dtype 'float64'"),
        ({"dtype": 8}, "invalid_parameter 'dtype': must be a string"),
        ({"dimensions": 0}, "invalid_parameter 'dimensions': 0 is outside 1..384"),
        ({"dimensions": 385}, "invalid_parameter 'dimensions': 385 is outside 1..384"),
        ({"dimensions": "64"}, "invalid_parameter 'dimensions': must be an integer"),
        ({"normalize": "no"}, "invalid_parameter 'normalize': must be a boolean"),
        ({"dtype": "binary", "dimensions": 100}, "must be a multiple of 8, got 100"),
        ({"dtype": "ubinary", "dimensions": 12}, "must be a multiple of 8, got 12"),
    ],
)
def test_bad_option_is_invalid_arg_over_grpc(
    grpc: grpcclient.InferenceServerClient, parameters: dict[str, Any], message: str
) -> None:
    _assert_rejected(
        lambda: embed_raw(grpc, ["text"], **parameters), "StatusCode.INVALID_ARGUMENT", message
    )


def test_bad_option_is_refused_at_the_tokenizer(
    triton_server: RunningServer, grpc: grpcclient.InferenceServerClient
) -> None:
    before = {
        model: requests_seen(triton_server.grpc_url, model) for model in ("embedder", "serializer")
    }
    _assert_rejected(
        lambda: embed_raw(grpc, ["a text that is never tokenized"], dimensions=999),
        "StatusCode.INVALID_ARGUMENT",
        "invalid_parameter 'dimensions': 999 is outside 1..384",
    )
    after = {
        model: requests_seen(triton_server.grpc_url, model) for model in ("embedder", "serializer")
    }
    assert after == before


def test_bad_option_on_tokens_is_refused_at_the_embedder(
    triton_server: RunningServer, grpc: grpcclient.InferenceServerClient
) -> None:
    ids = np.array([[101, 2023, 102]], dtype=np.int64)
    before = requests_seen(triton_server.grpc_url, "serializer")
    _assert_rejected(
        lambda: grpc.infer(
            "embed_tokens",
            token_inputs(grpcclient, ids, np.ones_like(ids)),
            parameters={"dtype": "f64"},
        ),
        "StatusCode.INVALID_ARGUMENT",
        "invalid_parameter 'dtype': unknown dtype 'f64'",
    )
    assert requests_seen(triton_server.grpc_url, "serializer") == before


def test_bad_option_is_400_over_http(triton_server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(triton_server.http_url)
    _assert_rejected(
        lambda: embed_raw(client, ["text"], dimensions=0), "400", "'dimensions': 0 is outside"
    )


def test_wrong_datatype_is_invalid_arg(grpc: grpcclient.InferenceServerClient) -> None:
    numbers = np.ones((1, 1), dtype=np.int32)
    tensor = grpcclient.InferInput("TEXT", [1, 1], "INT32")
    tensor.set_data_from_numpy(numbers)
    _assert_rejected(lambda: grpc.infer("embed", [tensor]), "StatusCode.INVALID_ARGUMENT", "TEXT")


def test_invalid_utf8_is_invalid_arg(grpc: grpcclient.InferenceServerClient) -> None:
    batch = np.array([[b"fine"], [b"\xff\xfe broken"]], dtype=np.object_)
    tensor = grpcclient.InferInput("TEXT", [2, 1], "BYTES")
    tensor.set_data_from_numpy(batch)
    _assert_rejected(
        lambda: grpc.infer("embed", [tensor]),
        "StatusCode.INVALID_ARGUMENT",
        "invalid_input: TEXT[1] is not valid UTF-8",
    )


@pytest.mark.parametrize(("bad_id", "seen"), [(10**9, "[101, 1000000000]"), (-1, "[-1, 102]")])
def test_token_id_outside_vocabulary_fails_only_its_request(
    grpc: grpcclient.InferenceServerClient, bad_id: int, seen: str
) -> None:
    ids = np.array([[101, bad_id, 102]], dtype=np.int64)
    inputs = token_inputs(grpcclient, ids, np.ones_like(ids))
    _assert_rejected(
        lambda: grpc.infer("embed_tokens", inputs),
        "StatusCode.INVALID_ARGUMENT",
        f"invalid_input: token ids must lie in [0, 30522), got {seen}",
    )


def test_bad_request_among_concurrent_good_ones(
    triton_server: RunningServer, grpc: grpcclient.InferenceServerClient
) -> None:
    expected = embed_float32(grpc, GOOD_TEXTS)

    def call(index: int) -> np.ndarray | InferenceServerException:
        client = grpcclient.InferenceServerClient(triton_server.grpc_url)
        parameters = {"dimensions": 0} if index % 4 == 0 else {}
        try:
            return embed_float32(client, GOOD_TEXTS, **parameters)
        except InferenceServerException as error:
            return error

    with ThreadPoolExecutor(max_workers=16) as pool:
        outcomes = list(pool.map(call, range(32)))
    for index, outcome in enumerate(outcomes):
        if index % 4 == 0:
            assert isinstance(outcome, InferenceServerException)
            assert outcome.status() == "StatusCode.INVALID_ARGUMENT"
        else:
            assert not isinstance(outcome, InferenceServerException), outcome
            np.testing.assert_allclose(outcome, expected, atol=1e-6)


def test_more_texts_than_max_batch_size_is_invalid_arg(
    grpc: grpcclient.InferenceServerClient,
) -> None:
    _assert_rejected(
        lambda: embed_raw(grpc, ["text"] * 65),
        "StatusCode.INVALID_ARGUMENT",
        "batch-size must be <= 64",
    )
