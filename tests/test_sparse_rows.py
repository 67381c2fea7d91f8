"""The serializer's sparse rows on a real tritonserver, over gRPC and HTTP:
model_repository/sparse/serializer alone (with the built backend), fed
ACTIVATIONS directly. The served bytes are the reference encoder's
(harness/sparse_reference.py) byte for byte, decode_sparse_rows gives each
row's (indices, values), and a bad option fails its own request only; a
declaration the sparse rows cannot be served from fails to load, naming the
field."""

from __future__ import annotations

import shutil
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from embedding_client.decode import decode_sparse_rows
from tritonclient.utils import InferenceServerException

from harness.server import RunningServer, running_server
from harness.sparse_reference import reference_entries, reference_sparse_rows
from server.paths import MODEL_REPOSITORY

MODEL = "serializer"
VOCAB_SIZE = 64
PROTOCOLS = ("grpc", "http")


def _activations() -> np.ndarray:
    """Four texts: SPLADE-like non-negative rows with a few active entries,
    ties among them, and one row with none."""
    rows = np.zeros((4, VOCAB_SIZE), np.float32)
    rows[0, [3, 17, 40, 63]] = [0.75, 2.5, 0.1, 1.25]
    rows[1, [0, 5, 9, 30, 31]] = [1.5, 1.5, 0.3, 1.5, 0.2]  # a three-way tie at 1.5
    rows[3, [2, 4, 60]] = [0.3333, 7.0, 1e-4]  # 1e-4 is a float16 subnormal
    return rows


SHIPPED = MODEL_REPOSITORY / "sparse" / MODEL


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sparse_only")
    shutil.copytree(SHIPPED, root / MODEL)
    return root


@pytest.fixture(scope="module")
def server(repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    log_path = tmp_path_factory.mktemp("triton") / "tritonserver.log"
    with running_server(log_path, repositories=[repository]) as running:
        yield running


def _infer(
    server: RunningServer, protocol: str, activations: np.ndarray, parameters: Mapping[str, Any]
) -> np.ndarray:
    module: Any = grpcclient if protocol == "grpc" else httpclient
    url = server.grpc_url if protocol == "grpc" else server.http_url
    client = module.InferenceServerClient(url)
    try:
        activations_input = module.InferInput("ACTIVATIONS", list(activations.shape), "FP32")
        activations_input.set_data_from_numpy(activations)
        result = client.infer(MODEL, [activations_input], parameters=dict(parameters))
        rows = result.as_numpy("SPARSE_BYTES")
    finally:
        # An open connection would hold the server's shutdown for its exit timeout.
        client.close()
    assert rows is not None
    return rows


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize(
    ("dtype", "max_active_dims"),
    [("float32", None), ("float16", None), ("float32", 2), ("float16", 1), ("float32", 64)],
)
def test_serves_the_reference_rows(
    server: RunningServer, protocol: str, dtype: str, max_active_dims: int | None
) -> None:
    activations = _activations()
    parameters: dict[str, Any] = {} if dtype == "float32" else {"dtype": dtype}
    if max_active_dims is not None:
        parameters["max_active_dims"] = max_active_dims
    rows = _infer(server, protocol, activations, parameters)

    np.testing.assert_array_equal(rows, reference_sparse_rows(activations, dtype, max_active_dims))
    decoded = decode_sparse_rows(rows, dtype)
    expected = reference_entries(activations, max_active_dims)
    for (indices, values), (want_indices, want_values) in zip(decoded, expected, strict=True):
        assert indices.tolist() == want_indices
        np.testing.assert_array_equal(values, np.array(want_values, np.float32).astype(dtype))


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_keeps_the_largest_with_ties_to_the_lower_index(
    server: RunningServer, protocol: str
) -> None:
    rows = _infer(server, protocol, _activations(), {"max_active_dims": 2})
    decoded = decode_sparse_rows(rows, "float32")
    assert [indices.tolist() for indices, _ in decoded] == [[17, 63], [0, 5], [], [2, 4]]
    # Rows share the widest row's width: 4 + 2 * (4 + 4) bytes.
    assert rows.shape == (4, 20)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_bad_option_fails_its_own_request_only(server: RunningServer, protocol: str) -> None:
    activations = _activations()
    requests: list[dict[str, Any]] = [
        {"max_active_dims": 2},
        {"max_active_dims": VOCAB_SIZE + 1},
        {"dtype": "float16"},
        {"dtype": "int8"},
        {"dimensions": 8},
        {},
    ]
    # Sent together, so that the dynamic batcher may put them in one batch.
    with ThreadPoolExecutor(len(requests)) as pool:
        futures = [
            pool.submit(_infer, server, protocol, activations, parameters)
            for parameters in requests
        ]
        outcomes: list[np.ndarray | str] = []
        for future in futures:
            try:
                outcomes.append(future.result())
            except InferenceServerException as error:
                outcomes.append(f"{error.status()} {error.message()}")

    np.testing.assert_array_equal(outcomes[0], reference_sparse_rows(activations, "float32", 2))
    np.testing.assert_array_equal(outcomes[2], reference_sparse_rows(activations, "float16"))
    np.testing.assert_array_equal(outcomes[5], reference_sparse_rows(activations))
    invalid = "StatusCode.INVALID_ARGUMENT" if protocol == "grpc" else "400"
    for failed in (outcomes[1], outcomes[3], outcomes[4]):
        assert isinstance(failed, str) and failed.startswith(invalid), failed
    assert "invalid_parameter 'max_active_dims': 65 is outside 1..64" in outcomes[1]
    assert (
        "invalid_parameter 'dtype': unknown dtype 'int8' (expected float32 or float16)"
        in outcomes[3]
    )
    assert (
        "invalid_parameter 'dimensions': sparse rows take dtype and max_active_dims only"
        in outcomes[4]
    )


@pytest.mark.parametrize(
    ("name", "old", "new", "message"),
    [
        (
            "bad_rows",
            'string_value: "sparse"',
            'string_value: "ragged"',
            "model configuration: parameters 'rows' is 'ragged'; expected dense, sparse or multivector",
        ),
        (
            "bad_input",
            'name: "ACTIVATIONS"',
            'name: "EMBEDDING"',
            "model configuration: input 'EMBEDDING' is not one the serializer knows "
            "(expected ACTIVATIONS)",
        ),
    ],
    ids=["rows", "input-name"],
)
def test_a_wrong_declaration_fails_to_load_naming_the_field(
    server: RunningServer, repository: Path, name: str, old: str, new: str, message: str
) -> None:
    # A model of its own, loaded once: the served one stays as shipped.
    shutil.copytree(SHIPPED, repository / name)
    config = SHIPPED.joinpath("config.pbtxt").read_text()
    assert config.count(old) == 1, old
    (repository / name / "config.pbtxt").write_text(config.replace(old, new))
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        with pytest.raises(InferenceServerException) as caught:
            client.load_model(name)
        assert message in caught.value.message(), caught.value.message()
        assert not client.is_model_ready(name)
    finally:
        client.close()
