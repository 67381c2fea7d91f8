"""The serializer checks its config.pbtxt when it loads: a declaration it
cannot serve fails the load with a message naming the field, instead of
failing every request; a TYPE_FP16 EMBEDDING declaration loads and reads
FP16. Each config is loaded through Triton's repository API (explicit model
control) on a server whose repository holds only a copy of the serializer."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from harness.server import RunningServer, running_server
from server.paths import SHARED_REPOSITORY

SHIPPED_CONFIG = SHARED_REPOSITORY / "serializer" / "config.pbtxt"
EMBEDDING_TYPE = 'name: "EMBEDDING"\n    data_type: TYPE_FP32'
NORM_DIMS = 'name: "NORM"\n    data_type: TYPE_FP32\n    dims: [ 1 ]'
OUTPUT_TYPE = 'name: "EMBEDDING_BYTES"\n    data_type: TYPE_UINT8'


def _edited(old: str, new: str) -> str:
    text = SHIPPED_CONFIG.read_text()
    assert text.count(old) == 1, old
    return text.replace(old, new)


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("serializer_only")
    shutil.copytree(SHARED_REPOSITORY / "serializer", root / "serializer")
    return root


@pytest.fixture(scope="module")
def server(repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    log_path = tmp_path_factory.mktemp("triton") / "tritonserver.log"
    with running_server(log_path, repositories=[repository]) as running:
        yield running


@pytest.fixture
def client(server: RunningServer, repository: Path) -> Iterator[httpclient.InferenceServerClient]:
    """After each test the shipped config is back and loads."""
    client = httpclient.InferenceServerClient(server.http_url)
    yield client
    shutil.copyfile(SHIPPED_CONFIG, repository / "serializer" / "config.pbtxt")
    client.load_model("serializer")
    assert client.is_model_ready("serializer")
    # An open connection would hold the server's shutdown for its exit timeout.
    client.close()


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            _edited(EMBEDDING_TYPE, EMBEDDING_TYPE.replace("FP32", "INT32")),
            "model configuration: input 'EMBEDDING' data_type is TYPE_INT32; "
            "expected TYPE_FP32 or TYPE_FP16",
        ),
        (
            _edited(NORM_DIMS, NORM_DIMS.replace("[ 1 ]", "[ 2 ]")),
            "model configuration: input 'NORM' dims are [2]; expected [1]",
        ),
        (
            _edited(OUTPUT_TYPE, OUTPUT_TYPE.replace("UINT8", "FP32")),
            "model configuration: output 'EMBEDDING_BYTES' data_type is TYPE_FP32; "
            "expected TYPE_UINT8",
        ),
        (
            _edited('name: "NORM"', 'name: "NORMS"'),
            "model configuration: input 'NORMS' is not one the serializer knows "
            "(expected EMBEDDING or NORM)",
        ),
    ],
    ids=["embedding-type", "norm-dims", "output-type", "input-name"],
)
def test_a_wrong_config_fails_to_load_naming_the_field(
    client: httpclient.InferenceServerClient, repository: Path, config: str, message: str
) -> None:
    # A fresh load rather than a reload: Triton 2.51 keeps a failed reload's
    # model in the background, and its shutdown then waits out the exit timeout.
    client.unload_model("serializer")
    (repository / "serializer" / "config.pbtxt").write_text(config)
    with pytest.raises(InferenceServerException) as caught:
        client.load_model("serializer")
    assert message in caught.value.message(), caught.value.message()
    assert not client.is_model_ready("serializer")


def test_a_float16_declaration_loads_and_reads_float16(
    client: httpclient.InferenceServerClient, repository: Path
) -> None:
    fp16 = _edited(EMBEDDING_TYPE, EMBEDDING_TYPE.replace("FP32", "FP16"))
    (repository / "serializer" / "config.pbtxt").write_text(fp16)
    client.load_model("serializer")

    rows = np.array([[0.6, -0.8, 0.0], [0.25, 0.5, -1.0]], dtype=np.float16)
    inputs = [
        httpclient.InferInput("EMBEDDING", list(rows.shape), "FP16"),
        httpclient.InferInput("NORM", [2, 1], "FP32"),
    ]
    inputs[0].set_data_from_numpy(rows)
    inputs[1].set_data_from_numpy(np.ones((2, 1), dtype=np.float32))
    result = client.infer("serializer", inputs).as_numpy("EMBEDDING_BYTES")
    assert result is not None
    served = np.frombuffer(result.tobytes(), "<f4").reshape(rows.shape)
    np.testing.assert_array_equal(served, rows.astype(np.float32))
