"""BGE-M3 in the catalog: one tritonserver serving a random-weight folder of BGE-M3's shape
(harness/m3_models.py: an XLM-RoBERTa backbone, CLS pooling and Normalize, colbert_linear.pt and
sparse_linear.pt beside it) beside the packaged MiniLM, answering `NAME` with any of its three
outputs from one pass (the dense vector, the sparse head's token weights and the ColBERT vectors,
each in its task's row format) like FlagEmbedding's BGEM3FlagModel.encode on the same weights,
over gRPC and HTTP, through the client library, the `embed-m3` command and the gateway's
embedding and sparse routes; a
request serializing only the outputs it names; bad input refused alone."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from embedding_catalog.catalog import FolderKind, folder_kind
from embedding_catalog.tasks import MULTIVECTOR_SERIALIZER, SERIALIZER, SPARSE_SERIALIZER
from embedding_client import (
    AsyncEmbeddingClient,
    EmbeddingClient,
    InvalidInputError,
    M3Result,
    SparseRow,
)
from embedding_requests import SAMPLE_TEXTS, assert_refused_alone, requests_seen
from served_catalog import post_json

from harness.catalog_files import catalog_beside_minilm
from harness.export_environment import run_in_export_environment
from harness.gateway import RunningGateway, running_gateway
from harness.requests import text_inputs
from harness.server import RunningServer, running_server
from server.catalog import Catalog
from server.engine_report import engine_line
from server.paths import REPO_ROOT

NAME = "bge-m3-tiny"
OUTPUTS = ("dense", "sparse", "multivector")
# float32 on both sides, the same graph's arithmetic against torch's: the bar.
MAX_DIFFERENCE = 1e-4
# float16 rows: about 3 decimal digits of a unit vector's components.
MAX_FLOAT16_DIFFERENCE = 1e-3
# The serializer of each output: a request names the outputs whose serializers run.
SERIALIZER_OF = {
    "EMBEDDING": SERIALIZER,
    "SPARSE": SPARSE_SERIALIZER,
    "MULTIVECTOR": MULTIVECTOR_SERIALIZER,
}


@pytest.fixture(scope="module")
def folder(m3_folders: dict[str, Path]) -> Path:
    (only,) = m3_folders.values()
    return only


@pytest.fixture(scope="module")
def served_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("m3")


@pytest.fixture(scope="module")
def catalog(served_dir: Path, folder: Path) -> Catalog:
    return catalog_beside_minilm(served_dir, {NAME: folder})


@pytest.fixture(scope="module")
def server(served_dir: Path, catalog: Catalog) -> Iterator[RunningServer]:
    with running_server(served_dir / "tritonserver.log", [served_dir / "served"]) as running:
        yield running


@pytest.fixture(scope="module")
def expected(folder: Path) -> list[dict[str, Any]]:
    """BGEM3FlagModel.encode's three outputs per text, on the original weights, cut where the
    served tokenizer cuts (the folder's max_seq_length)."""
    config = json.loads((folder / "sentence_bert_config.json").read_text())
    job = {"model_dir": str(folder), "texts": SAMPLE_TEXTS, "max_length": config["max_seq_length"]}
    done = run_in_export_environment(
        [str(REPO_ROOT / "tests" / "m3_reference.py")], json.dumps(job)
    )
    return list(json.loads(done.stdout))


def _assert_matches(result: M3Result, expected: list[dict[str, Any]], bar: float) -> None:
    """Each output asked for equals the reference's within `bar`: the dense vectors, each
    token's weight (an entry within `bar` of 0 may be absent on either side: the relu of a
    value within rounding of 0), and the ColBERT vectors, as many per text."""
    if result.dense is not None:
        reference = np.array([row["dense"] for row in expected], np.float32)
        assert np.abs(result.dense.astype(np.float32) - reference).max() <= bar
    if result.sparse is not None:
        assert len(result.sparse) == len(expected)
        assert any(row.indices.size for row in result.sparse), "the sparse head weighs no token"
        for row, reference in zip(result.sparse, expected, strict=True):
            served = dict(zip(row.indices.tolist(), row.values.astype(np.float32), strict=True))
            wanted = dict(
                zip(reference["sparse"]["indices"], reference["sparse"]["values"], strict=True)
            )
            for index in served.keys() | wanted.keys():
                assert abs(served.get(index, 0.0) - wanted.get(index, 0.0)) <= bar, index
    if result.multivector is not None:
        assert len(result.multivector) == len(expected)
        for vectors, reference in zip(result.multivector, expected, strict=True):
            wanted = np.array(reference["colbert"], np.float32)
            assert vectors.shape == wanted.shape
            assert np.abs(vectors.astype(np.float32) - wanted).max() <= bar


def test_the_folder_is_a_bge_m3_model_with_its_own_stages(
    served_dir: Path, folder: Path, catalog: Catalog
) -> None:
    assert folder_kind(folder) == FolderKind("BGEM3FlagModel", "m3")
    (model,) = [model for model in catalog.models if model.name == NAME]
    line = engine_line(model)
    assert line.startswith(f"{NAME}: BGE-M3 encoder, engine onnxruntime") and "None" not in line
    served = {path.name for path in (served_dir / "served").iterdir()}
    stages = {f"{NAME}.tokenizer", f"{NAME}.encoder", *SERIALIZER_OF.values()}
    assert {NAME, f"{NAME}_tokens", *stages} <= served


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_all_three_outputs_match_bgem3flagmodel(
    server: RunningServer, expected: list[dict[str, Any]], protocol: str
) -> None:
    url = server.grpc_url if protocol == "grpc" else server.http_url
    with EmbeddingClient(url, protocol, model=NAME) as client:  # type: ignore[arg-type]
        result = client.embed_m3(SAMPLE_TEXTS, outputs=OUTPUTS)
    assert all(output is not None for output in result)
    _assert_matches(result, expected, MAX_DIFFERENCE)


@pytest.mark.parametrize("outputs", [("sparse",), ("multivector", "dense")])
def test_a_request_gets_and_serializes_only_the_outputs_it_names(
    server: RunningServer, expected: list[dict[str, Any]], outputs: tuple[str, ...]
) -> None:
    before = {name: requests_seen(server.grpc_url, name) for name in SERIALIZER_OF.values()}
    with EmbeddingClient(server.grpc_url, model=NAME) as client:
        result = client.embed_m3(SAMPLE_TEXTS, outputs=outputs)
    assert [name for name in OUTPUTS if getattr(result, name) is not None] == sorted(
        outputs, key=OUTPUTS.index
    )
    _assert_matches(result, expected, MAX_DIFFERENCE)
    ran = {
        name
        for name in SERIALIZER_OF.values()
        if requests_seen(server.grpc_url, name) > before[name]
    }
    tensors = {"dense": "EMBEDDING", "sparse": "SPARSE", "multivector": "MULTIVECTOR"}
    assert ran == {SERIALIZER_OF[tensors[name]] for name in outputs}


def test_float16_rows_and_the_asyncio_client(
    server: RunningServer, expected: list[dict[str, Any]]
) -> None:
    async def embed() -> M3Result:
        async with AsyncEmbeddingClient(server.http_url, "http", model=NAME) as client:
            return await client.embed_m3(SAMPLE_TEXTS, outputs=OUTPUTS, dtype="float16")

    result = asyncio.run(embed())
    assert result.dense is not None and result.dense.dtype == np.float16
    _assert_matches(result, expected, MAX_FLOAT16_DIFFERENCE)


def test_the_embed_m3_command_prints_the_outputs_named(
    server: RunningServer, expected: list[dict[str, Any]]
) -> None:
    texts = SAMPLE_TEXTS[:3]
    command = [str(Path(sys.executable).parent / "embed-m3"), f"--url={server.grpc_url}"]
    done = subprocess.run(
        [*command, f"--model={NAME}", "--output=sparse", "--output=multivector", *texts],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [sorted(line) for line in lines] == [["index", "multivector", "sparse"]] * len(texts)
    sparse = [
        SparseRow(np.array(line["sparse"]["indices"]), np.array(line["sparse"]["values"]))
        for line in lines
    ]
    vectors = [np.array(line["multivector"], np.float32) for line in lines]
    _assert_matches(M3Result(None, sparse, vectors), expected[: len(texts)], MAX_DIFFERENCE)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"outputs": ["dense", "colbert"]}, "'outputs'"),
        ({"outputs": []}, "'outputs'"),
        ({"outputs": "dense"}, "'outputs'"),
        ({"outputs": ["sparse", "sparse"]}, "'outputs'"),
        ({"outputs": ["sparse"], "dtype": "int8"}, "'dtype'"),
        ({"dtype": "float64"}, "'dtype'"),
    ],
)
def test_the_client_refuses_bad_options_naming_them(
    server: RunningServer, options: dict[str, Any], named: str
) -> None:
    with EmbeddingClient(server.grpc_url, model=NAME) as client:
        with pytest.raises(InvalidInputError, match=named):
            client.embed_m3(["a text"], **options)


@pytest.mark.parametrize(
    ("output", "parameters", "named"),
    [
        ("COLBERT", {}, "COLBERT"),
        ("SPARSE", {"dtype": "int8"}, "dtype"),
        ("EMBEDDING", {"dtype": "float64"}, "dtype"),
    ],
)
def test_the_server_refuses_a_bad_request_alone_naming_it(
    server: RunningServer, output: str, parameters: dict[str, Any], named: str
) -> None:
    triton = grpcclient.InferenceServerClient(server.grpc_url)
    good = partial(_raw, triton, "EMBEDDING", {})
    bad = partial(_raw, triton, output, parameters)
    assert_refused_alone(good, bad, named, len(SAMPLE_TEXTS))
    assert server.is_ready()


@pytest.fixture(scope="module")
def gateway(server: RunningServer, served_dir: Path) -> Iterator[RunningGateway]:
    # The gateway counts an embedding request's tokens with the model's tokenizer.json and sends
    # the ids to NAME_tokens.
    tokenizer = served_dir / "served" / f"{NAME}.tokenizer" / "1" / "tokenizer.json"
    with running_gateway(
        server.grpc_url, [], served_dir / "gateway.log", extra_args=(f"--m3={NAME}={tokenizer}",)
    ) as running:
        yield running


def test_the_embedding_and_sparse_routes_serve_its_dense_and_sparse_outputs(
    server: RunningServer, gateway: RunningGateway, expected: list[dict[str, Any]]
) -> None:
    texts = [text for text in SAMPLE_TEXTS if text]
    reference = [expected[SAMPLE_TEXTS.index(text)] for text in texts]
    before = requests_seen(server.grpc_url, MULTIVECTOR_SERIALIZER)
    status, body = post_json(gateway, "/v1/embeddings", {"model": NAME, "input": texts})
    assert status == 200, body
    assert body["usage"]["prompt_tokens"] > len(texts)
    dense = np.array([item["embedding"] for item in body["data"]], np.float32)
    _assert_matches(M3Result(dense, None, None), reference, MAX_DIFFERENCE)
    status, vectors = post_json(gateway, "/embed", {"model": NAME, "inputs": texts})
    assert status == 200, vectors
    _assert_matches(M3Result(np.array(vectors, np.float32), None, None), reference, MAX_DIFFERENCE)
    status, rows = post_json(gateway, "/embed_sparse", {"model": NAME, "inputs": texts})
    assert status == 200, rows
    sparse = [
        SparseRow(
            np.array([entry["index"] for entry in row], np.uint32),
            np.array([entry["value"] for entry in row], np.float32),
        )
        for row in rows
    ]
    _assert_matches(M3Result(None, sparse, None), reference, MAX_DIFFERENCE)
    # Neither route asks for the ColBERT vectors, so none were serialized.
    assert requests_seen(server.grpc_url, MULTIVECTOR_SERIALIZER) == before


def _raw(
    triton: grpcclient.InferenceServerClient, output: str, parameters: dict[str, Any]
) -> np.ndarray:
    result = triton.infer(
        NAME,
        text_inputs(grpcclient, SAMPLE_TEXTS),
        outputs=[grpcclient.InferRequestedOutput(output)],
        parameters=parameters or None,
    )
    answer = result.as_numpy(output)
    if answer is None:
        raise AssertionError(f"no {output} in the answer")
    return answer
