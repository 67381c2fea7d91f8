"""Configurable input limits and the restricted admin APIs, each on a real
server started with the setting under test."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from embedding_requests import embed_raw
from tritonclient.utils import InferenceServerException

from harness.repository import chained, repository_variant, set_parameter
from harness.server import RunningServer, running_server
from server.launch import ADMIN_KEY_HEADER

MAX_TEXT_BYTES = 2000
MAX_TOKENS = 300
ADMIN_KEY = "test-admin-key"


@pytest.fixture(scope="module")
def strict_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    workdir = tmp_path_factory.mktemp("strict")
    repository = repository_variant(
        workdir / "model_repository",
        {
            "tokenizer": chained(
                set_parameter("truncate", "false"),
                set_parameter("max_text_bytes", str(MAX_TEXT_BYTES)),
            ),
            "embedder": set_parameter("max_tokens_per_request", str(MAX_TOKENS)),
        },
    )
    with running_server(workdir / "tritonserver.log", [repository]) as server:
        yield server


def _rejected(client: grpcclient.InferenceServerClient, texts: list[str]) -> str:
    with pytest.raises(InferenceServerException) as caught:
        embed_raw(client, texts)
    assert caught.value.status() == "StatusCode.INVALID_ARGUMENT", caught.value
    return caught.value.message()


def test_text_over_max_length_without_truncation(strict_server: RunningServer) -> None:
    client = grpcclient.InferenceServerClient(strict_server.grpc_url)
    long_text = "word " * 300
    message = _rejected(client, ["short", long_text])
    assert "TEXT[1] has 302 tokens, over the model's max length 256" in message
    assert embed_raw(client, ["word " * 200]).shape == (1, 1536)


def test_text_over_byte_limit(strict_server: RunningServer) -> None:
    client = grpcclient.InferenceServerClient(strict_server.grpc_url)
    message = _rejected(client, ["x" * (MAX_TEXT_BYTES + 1)])
    assert f"TEXT[0] has {MAX_TEXT_BYTES + 1} bytes, over the limit of {MAX_TEXT_BYTES}" in message


def test_tokens_per_request_limit(strict_server: RunningServer) -> None:
    client = grpcclient.InferenceServerClient(strict_server.grpc_url)
    message = _rejected(client, ["word " * 100] * 4)
    assert f"over the limit of {MAX_TOKENS} (max_tokens_per_request)" in message
    assert embed_raw(client, ["word " * 100] * 2).shape == (2, 1536)


def test_empty_batch_is_invalid_arg(triton_server: RunningServer) -> None:
    client = grpcclient.InferenceServerClient(triton_server.grpc_url)
    tensor = grpcclient.InferInput("TEXT", [0, 1], "BYTES")
    tensor.set_data_from_numpy(np.zeros((0, 1), dtype=np.object_))
    with pytest.raises(InferenceServerException) as caught:
        client.infer("embed", [tensor])
    assert caught.value.status() == "StatusCode.INVALID_ARGUMENT"


@pytest.fixture(scope="module")
def restricted_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    log_path = tmp_path_factory.mktemp("restricted") / "tritonserver.log"
    with running_server(log_path, admin_key=ADMIN_KEY) as server:
        yield server


def _post_status(url: str, headers: dict[str, str]) -> int:
    request = urllib.request.Request(url, data=b"{}", headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request) as reply:
            return reply.status
    except urllib.error.HTTPError as error:
        return error.code


@pytest.mark.parametrize("path", ["/v2/repository/index", "/v2/logging"])
def test_admin_apis_need_the_key_over_http(restricted_server: RunningServer, path: str) -> None:
    url = f"http://{restricted_server.http_url}{path}"
    assert _post_status(url, {}) == 403
    assert _post_status(url, {ADMIN_KEY_HEADER: "wrong"}) == 403
    assert _post_status(url, {ADMIN_KEY_HEADER: ADMIN_KEY}) == 200


def test_admin_apis_need_the_key_over_grpc(restricted_server: RunningServer) -> None:
    client = grpcclient.InferenceServerClient(restricted_server.grpc_url)
    with pytest.raises(InferenceServerException, match="restricted"):
        client.get_model_repository_index()
    # gRPC carries the key in a header named after the restricted protocol.
    headers = {f"triton-grpc-protocol-{ADMIN_KEY_HEADER}": ADMIN_KEY}
    assert client.get_model_repository_index(headers=headers).models
    assert embed_raw(client, ["inference needs no key"]).shape == (1, 1536)
