"""Multi-vector (late-interaction) encoders in the catalog: one tritonserver
serving random-weight MultiVectorEncoder folders (harness/multivector_models.py:
with query expansion and a skip-list, without, and with a token pooling of
documents in the pipeline) beside the packaged MiniLM,
each answering `NAME` (texts in, one row of token vectors per text as raw
bytes out: docs/contract.md, "Multi-vector rows") like sentence-transformers'
MultiVectorEncoder.encode_query and encode_document on the same weights, and
`NAME_rerank` (a query against documents, by MaxSim) like its similarity, over
gRPC and HTTP, through the client library, the `embed-multi` command and the
gateway's rerank routes; a document request's pool_factor pooling its vectors
as encode_document's token_pooling=HierarchicalTokenPooling(pool_factor) does,
on top of the model's own pooling where it has one; bad input refused alone."""

from __future__ import annotations

import asyncio
import json
import struct
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from embedding_catalog.tasks import MULTIVECTOR_SERIALIZER
from embedding_client import AsyncEmbeddingClient, EmbeddingClient
from embedding_requests import LONG_TEXT, SAMPLE_TEXTS, Client, assert_refused_alone
from served_catalog import post_json

from harness.catalog_files import catalog_beside_minilm
from harness.export_environment import run_in_export_environment
from harness.gateway import RunningGateway, running_gateway
from harness.server import RunningServer, running_server
from server.catalog import Catalog
from server.paths import REPO_ROOT, TOKENIZER_JSON

# Per vector, float32 on both sides: the same graph's arithmetic against torch's.
MIN_COSINE = 0.9999
# MaxSim sums a query's vectors' best dot products: 32 of them within 1e-4 each at most.
MAX_SCORE_DIFFERENCE = 1e-3
# More texts than one request holds (max_batch_size 64): the client splits them.
MANY = 20
TEXTS = [text for text in SAMPLE_TEXTS if text.strip()]
QUERY = "how do late interaction models score a document?"
DOCUMENTS = [
    "Late interaction scores each query token against every document token.",
    "A cross-encoder reads the query and the document together.",
    "Bananas are rich in potassium!",
    LONG_TEXT,
]
KINDS = ("query", "document")
# A document request's token pooling: a whole factor and a fractional one (keeps two thirds).
POOL_FACTORS = (2, 1.5)
# The test model with a HierarchicalTokenPooling of documents in its pipeline; otherwise
# bert_colbert's weights, prompts and skip-list, without the expansion.
POOLED = "bert_pooled-mv"
# Reference vectors per (model, kind); the reference MaxSim scores of QUERY per model.
Vectors = list[np.ndarray]


@pytest.fixture(scope="module")
def encoders(multivector_folders: dict[str, Path]) -> dict[str, Path]:
    """Catalog name -> multi-vector folder."""
    return {f"{key}-mv": folder for key, folder in multivector_folders.items()}


@pytest.fixture(scope="module")
def served_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("multivector")


@pytest.fixture(scope="module")
def catalog(served_dir: Path, encoders: dict[str, Path]) -> Catalog:
    return catalog_beside_minilm(served_dir, encoders)


@pytest.fixture(scope="module")
def server(served_dir: Path, catalog: Catalog) -> Iterator[RunningServer]:
    with running_server(served_dir / "tritonserver.log", [served_dir / "served"]) as running:
        yield running


@pytest.fixture(scope="module")
def expected(encoders: dict[str, Path]) -> dict[tuple[str, str], Vectors]:
    """MultiVectorEncoder.encode_query and encode_document on the original weights, per
    (model, kind), and its MaxSim scores of QUERY against DOCUMENTS per (model, "scores");
    the documents of the first model and of POOLED (compounding on its own pooling) pooled per
    POOL_FACTORS as (model, "document pooled F"), and the first's scores against documents
    pooled by 2 as (model, "scores pooled 2")."""
    first = sorted(encoders)[0]
    jobs: list[dict[str, Any]] = [
        {"model_dir": str(folder), "texts": TEXTS, "role": kind}
        for folder in encoders.values()
        for kind in KINDS
    ] + [
        {"model_dir": str(folder), "query": QUERY, "documents": DOCUMENTS}
        for folder in encoders.values()
    ]
    jobs += [
        {"model_dir": str(encoders[name]), "texts": TEXTS, "role": "document", "pool_factor": f}
        for name in (first, POOLED)
        for f in POOL_FACTORS
    ] + [
        {
            "model_dir": str(encoders[first]),
            "query": QUERY,
            "documents": DOCUMENTS,
            "pool_factor": 2,
        }
    ]
    done = run_in_export_environment(
        [str(REPO_ROOT / "tests" / "mv_reference.py")], json.dumps(jobs)
    )
    answers = iter(json.loads(done.stdout))
    found: dict[tuple[str, str], Vectors] = {}
    for name in encoders:
        for kind in KINDS:
            found[name, kind] = [np.asarray(each, np.float32) for each in next(answers)]
    for name in encoders:
        found[name, "scores"] = [np.asarray(next(answers), np.float32)]
    for name in (first, POOLED):
        for factor in POOL_FACTORS:
            found[name, f"document pooled {factor}"] = [
                np.asarray(each, np.float32) for each in next(answers)
            ]
    found[first, "scores pooled 2"] = [np.asarray(next(answers), np.float32)]
    return found


def assert_vectors_match(served: Vectors, reference: Vectors) -> None:
    """As many vectors per text, each within MIN_COSINE of the reference's."""
    assert len(served) == len(reference)
    for index, (got, want) in enumerate(zip(served, reference, strict=True)):
        assert got.shape == want.shape, (index, got.shape, want.shape)
        got = got.astype(np.float32)
        cosines = (got * want).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))
        assert cosines.min() >= MIN_COSINE, (index, cosines.min())


def _rows_by_hand(raw: np.ndarray, dims: int) -> Vectors:
    """The documented float32 decode, written here from the contract's layout."""
    rows = []
    for row in raw:
        data = row.tobytes()
        count = int(np.frombuffer(data[:4], "<u4")[0])
        values = np.frombuffer(data[4 : 4 + 4 * dims * count], "<f4").reshape(count, dims)
        assert not any(data[4 + 4 * dims * count :]), "the padding is zeros"
        rows.append(values)
    return rows


def _client(server: RunningServer, protocol: str) -> Client:
    if protocol == "grpc":
        return grpcclient.InferenceServerClient(server.grpc_url)
    return httpclient.InferenceServerClient(server.http_url)


def _raw(
    client: Client, model: str, texts: list[str], parameters: dict[str, Any] | None = None
) -> np.ndarray:
    module = grpcclient if isinstance(client, grpcclient.InferenceServerClient) else httpclient
    values = np.array([[text.encode()] for text in texts], dtype=np.object_)
    tensor = module.InferInput("TEXT", list(values.shape), "BYTES")
    tensor.set_data_from_numpy(values)
    outputs = [module.InferRequestedOutput("MULTIVECTOR")]
    result = client.infer(model, [tensor], outputs=outputs, parameters=parameters)
    raw = result.as_numpy("MULTIVECTOR")
    assert raw is not None and raw.dtype == np.uint8 and raw.shape[0] == len(texts)
    return raw


def test_a_multivector_encoder_has_its_entry_points_and_its_own_stages(
    served_dir: Path, encoders: dict[str, Path], catalog: Catalog
) -> None:
    served = {path.name for path in (served_dir / "served").iterdir()}
    assert MULTIVECTOR_SERIALIZER in served
    for name in encoders:
        stages = {"", "_rerank", ".tokenizer", ".encoder", ".pair_tokenizer", ".maxsim"}
        assert {name + suffix for suffix in stages} <= served
        assert f"{name}_tokens" not in served


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_each_encoder_answers_like_multivector_encoder_in_its_bytes(
    server: RunningServer,
    served_dir: Path,
    encoders: dict[str, Path],
    expected: dict[tuple[str, str], Vectors],
    protocol: str,
) -> None:
    client = _client(server, protocol)
    for name in encoders:
        record = served_dir / "served" / f"{name}.encoder" / "1" / "export.json"
        dims = int(json.loads(record.read_text())["embedding_dim"])
        for kind in KINDS:
            raw = _raw(client, name, TEXTS, {"input_type": kind})
            assert_vectors_match(_rows_by_hand(raw, dims), expected[name, kind])


def test_each_role_has_its_own_length(
    encoders: dict[str, Path], expected: dict[tuple[str, str], Vectors]
) -> None:
    """What the served answers were checked against shows the roles apart: the expansion
    pads and cuts every query of bert_colbert to 16 vectors, bert_plain cuts its queries at
    24 tokens, and the long text's document keeps more; bert_pooled's pipeline pools its
    documents to fewer vectors than bert_colbert's (the same weights, prompts and skip-list)."""
    expanding = next(name for name in encoders if name.startswith("bert_colbert"))
    assert {len(vectors) for vectors in expected[expanding, "query"]} == {16}
    plain = next(name for name in encoders if name.startswith("bert_plain"))
    queries, documents = (expected[plain, kind][TEXTS.index(LONG_TEXT)] for kind in KINDS)
    assert len(queries) == 24 < len(documents), (len(queries), len(documents))
    pairs = zip(expected[POOLED, "document"], expected[expanding, "document"], strict=True)
    for pooled, unpooled in pairs:
        # Two vectors leave one to cluster, which pooling keeps.
        assert len(pooled) < len(unpooled) or len(unpooled) <= 2, (len(pooled), len(unpooled))


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_the_client_decodes_every_dtype(
    server: RunningServer, expected: dict[tuple[str, str], Vectors], protocol: str
) -> None:
    name = sorted({name for name, _ in expected})[0]
    url = server.grpc_url if protocol == "grpc" else server.http_url
    with EmbeddingClient(url, protocol, model=name) as client:  # type: ignore[arg-type]
        full = client.embed_multi(TEXTS, kind="query")
        half = client.embed_multi(TEXTS, kind="query", dtype="float16")
        codes = client.embed_multi(TEXTS, kind="query", dtype="int8")
        bits = client.embed_multi(TEXTS, kind="query", dtype="ubinary")
    assert_vectors_match(full, expected[name, "query"])
    for single, each, code, packed in zip(full, half, codes, bits, strict=True):
        assert each.dtype == np.float16 and code.dtype == np.int8 and packed.dtype == np.uint8
        np.testing.assert_array_equal(each, single.astype(np.float16))
        np.testing.assert_array_equal(code, np.clip(np.round(single * 127), -127, 127))
        np.testing.assert_array_equal(packed, np.packbits(single > 0, axis=1))


def test_many_texts_are_split_and_merged_in_order(
    server: RunningServer, expected: dict[tuple[str, str], Vectors]
) -> None:
    name = sorted({name for name, _ in expected})[0]
    with EmbeddingClient(server.grpc_url, model=name) as client:
        vectors = client.embed_multi(TEXTS * MANY)

    async def embed_async() -> Vectors:
        async with AsyncEmbeddingClient(server.http_url, "http", model=name) as client:
            return await client.embed_multi(TEXTS * MANY, kind="document")

    assert_vectors_match(vectors, expected[name, "document"] * MANY)
    assert_vectors_match(asyncio.run(embed_async()), expected[name, "document"] * MANY)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_rerank_scores_are_maxsim(
    server: RunningServer,
    encoders: dict[str, Path],
    expected: dict[tuple[str, str], Vectors],
    protocol: str,
) -> None:
    url = server.grpc_url if protocol == "grpc" else server.http_url
    for name in encoders:
        (scores,) = expected[name, "scores"]
        with EmbeddingClient(url, protocol, model=f"{name}_rerank") as client:  # type: ignore[arg-type]
            ranked = client.rerank(QUERY, DOCUMENTS)
        assert [each.index for each in ranked] == np.argsort(-scores, kind="stable").tolist()
        served = np.asarray([each.relevance_score for each in sorted(ranked, key=_index)])
        np.testing.assert_allclose(served, scores, atol=MAX_SCORE_DIFFERENCE)


@pytest.mark.parametrize("factor", POOL_FACTORS)
def test_a_document_requests_pool_factor_pools_as_token_pooling_does(
    server: RunningServer,
    served_dir: Path,
    encoders: dict[str, Path],
    expected: dict[tuple[str, str], Vectors],
    factor: float,
) -> None:
    """On a model without pooling of its own, and on POOLED, where the request's pooling
    compounds on the model's (what the model alone serves is expected[POOLED, "document"])."""
    for name in (sorted(encoders)[0], POOLED):
        reference = expected[name, f"document pooled {factor}"]
        unpooled = expected[name, "document"]
        assert sum(map(len, reference)) < sum(map(len, unpooled)), "the reference pooled"
        with EmbeddingClient(server.grpc_url, model=name) as client:
            assert_vectors_match(client.embed_multi(TEXTS, pool_factor=factor), reference)
        record = served_dir / "served" / f"{name}.encoder" / "1" / "export.json"
        dims = int(json.loads(record.read_text())["embedding_dim"])
        raw = _raw(_client(server, "grpc"), name, TEXTS, {"pool_factor": factor})
        assert_vectors_match(_rows_by_hand(raw, dims), reference)


def test_rerank_with_pool_factor_scores_the_pooled_documents(
    server: RunningServer, encoders: dict[str, Path], expected: dict[tuple[str, str], Vectors]
) -> None:
    """MaxSim of the (never pooled) query against documents pooled as the request asks."""
    name = sorted(encoders)[0]
    (scores,) = expected[name, "scores pooled 2"]
    assert not np.allclose(scores, expected[name, "scores"][0], atol=MAX_SCORE_DIFFERENCE)
    pairs = [
        grpcclient.InferInput(tensor, [len(DOCUMENTS), 1], "BYTES") for tensor in ("QUERY", "TEXT")
    ]
    for tensor, texts in zip(pairs, ([QUERY] * len(DOCUMENTS), DOCUMENTS), strict=True):
        tensor.set_data_from_numpy(np.array([[text.encode()] for text in texts], np.object_))
    client = grpcclient.InferenceServerClient(server.grpc_url)
    result = client.infer(f"{name}_rerank", pairs, parameters={"pool_factor": 2})
    served = result.as_numpy("SCORE")
    assert served is not None
    np.testing.assert_allclose(served[:, 0], scores, atol=MAX_SCORE_DIFFERENCE)


def _index(ranked: Any) -> int:
    return int(ranked.index)


@pytest.mark.parametrize(
    ("texts", "parameters", "named"),
    [
        (["text"], {"dimensions": 8}, "invalid_parameter 'dimensions'"),
        (["text"], {"dtype": "int4"}, "invalid_parameter 'dtype'"),
        (["text"], {"input_type": "passage-ish"}, "invalid_parameter 'input_type'"),
        (["text"], {"input_type": "query", "pool_factor": 2}, "invalid_parameter 'pool_factor'"),
        (["text"], {"pool_factor": 0.5}, "invalid_parameter 'pool_factor'"),
        (["text"], {"pool_factor": "two"}, "invalid_parameter 'pool_factor'"),
        ([LONG_TEXT], {"truncate": False}, "input_too_large"),
    ],
)
def test_bad_input_is_refused_alone_naming_it(
    server: RunningServer,
    encoders: dict[str, Path],
    texts: list[str],
    parameters: dict[str, Any],
    named: str,
) -> None:
    name = sorted(encoders)[0]
    client = grpcclient.InferenceServerClient(server.grpc_url)
    good = partial(_raw, client, name, TEXTS)
    assert_refused_alone(good, partial(_raw, client, name, texts, parameters), named, len(TEXTS))


def test_the_embed_multi_command_prints_each_texts_vectors(
    server: RunningServer, expected: dict[tuple[str, str], Vectors]
) -> None:
    name = sorted({name for name, _ in expected})[0]
    texts = TEXTS[:3]
    command = [str(Path(sys.executable).parent / "embed-multi"), f"--url={server.grpc_url}"]
    done = subprocess.run(
        [*command, f"--model={name}", "--kind=query", *texts],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [line["index"] for line in lines] == list(range(len(texts)))
    vectors = [np.asarray(line["vectors"], np.float32) for line in lines]
    assert_vectors_match(vectors, expected[name, "query"][: len(texts)])


@pytest.fixture(scope="module")
def gateway(
    server: RunningServer, served_dir: Path, encoders: dict[str, Path]
) -> Iterator[RunningGateway]:
    with running_gateway(
        server.grpc_url,
        [("all-MiniLM-L6-v2", TOKENIZER_JSON)],
        served_dir / "gateway.log",
        extra_args=tuple(f"--multivector={name}" for name in encoders),
    ) as running:
        yield running


@pytest.mark.parametrize("route", ["/v1/rerank", "/v2/rerank", "/rerank"])
def test_the_rerank_routes_score_a_multivector_model_by_maxsim(
    gateway: RunningGateway,
    encoders: dict[str, Path],
    expected: dict[tuple[str, str], Vectors],
    route: str,
) -> None:
    name = sorted(encoders)[0]
    (scores,) = expected[name, "scores"]
    if route == "/rerank":
        payload: dict[str, Any] = {"model": name, "query": QUERY, "texts": DOCUMENTS}
    else:
        payload = {"model": name, "query": QUERY, "documents": DOCUMENTS}
    status, body = post_json(gateway, route, payload)
    assert status == 200, body
    results = body if route == "/rerank" else body["results"]
    served = {each["index"]: each.get("relevance_score", each.get("score")) for each in results}
    np.testing.assert_allclose(
        [served[index] for index in range(len(DOCUMENTS))], scores, atol=MAX_SCORE_DIFFERENCE
    )
    assert [each["index"] for each in results] == np.argsort(-scores, kind="stable").tolist()


def test_the_gateway_refuses_a_multivector_model_where_it_does_not_embed(
    gateway: RunningGateway, encoders: dict[str, Path]
) -> None:
    name = sorted(encoders)[0]
    status, body = post_json(gateway, "/v1/embeddings", {"model": name, "input": "a"})
    assert status == 400 and "its task is 'multivector'" in body["error"]["message"], body


def test_vllms_pooling_route_answers_token_vectors_as_json_or_raw_bytes(
    gateway: RunningGateway,
    encoders: dict[str, Path],
    expected: dict[tuple[str, str], Vectors],
) -> None:
    name = sorted(encoders)[0]
    payload = {"model": name, "input": TEXTS, "task": "token_embed", "input_type": "query"}
    status, body = post_json(gateway, "/pooling", payload)
    assert status == 200 and body["object"] == "list" and body["model"] == name, body
    assert [each["index"] for each in body["data"]] == list(range(len(TEXTS)))
    vectors = [np.asarray(each["data"], np.float32) for each in body["data"]]
    assert_vectors_match(vectors, expected[name, "query"])
    # The same vectors as bytes: per input its count, then its vectors, one after another.
    request = urllib.request.Request(
        gateway.url + "/pooling",
        data=json.dumps({**payload, "dtype": "float16"}).encode(),
        headers={"Content-Type": "application/json", "Accept": "application/octet-stream"},
    )
    with urllib.request.urlopen(request, timeout=30) as reply:
        assert reply.headers["Content-Type"] == "application/octet-stream"
        assert reply.headers["X-Vector-Dtype"] == "float16"
        dims = int(reply.headers["X-Vector-Dimensions"])
        data = reply.read()
    raw, offset = [], 0
    for _ in TEXTS:
        (count,) = struct.unpack_from("<I", data, offset)
        end = offset + 4 + 2 * dims * count
        raw.append(np.frombuffer(data[offset + 4 : end], "<f2").reshape(count, dims))
        offset = end
    assert offset == len(data)
    for got, want in zip(raw, vectors, strict=True):
        np.testing.assert_array_equal(got, want.astype(np.float16))


@pytest.mark.parametrize(
    ("payload", "named"),
    [
        ({"model": "all-MiniLM-L6-v2", "input": "a"}, "its task is 'embed'"),
        ({"model": "<mv>", "input": "a", "task": "embed"}, "'task'"),
        ({"model": "<mv>", "input": "a", "dtype": "int4"}, "'dtype'"),
        ({"model": "<mv>", "input": "a", "input_type": "passage-ish"}, "'input_type'"),
        ({"model": "<mv>", "input": "a", "pool_factor": 0.5}, "'pool_factor'"),
        ({"model": "<mv>", "input": "a", "input_type": "query", "pool_factor": 2}, "'pool_factor'"),
        ({"model": "<mv>", "input": ["a"] * 2049}, "'input'"),
    ],
)
def test_bad_pooling_requests_are_refused_naming_the_field(
    gateway: RunningGateway, encoders: dict[str, Path], payload: dict[str, Any], named: str
) -> None:
    if payload["model"] == "<mv>":
        payload = {**payload, "model": sorted(encoders)[0]}
    status, body = post_json(gateway, "/pooling", payload)
    assert status == 400, body
    assert named in body["error"]["message"], body
