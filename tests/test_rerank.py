"""Rerankers in the catalog: one tritonserver serving random-weight
cross-encoder folders (harness/cross_encoder_models.py) beside the packaged
MiniLM, each answering `NAME` (one (query, document) pair per row, one
float32 score per row) like sentence-transformers' CrossEncoder.predict on
the same weights, over gRPC and HTTP; bad input refused alone."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import cohere
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from embedding_client import AsyncEmbeddingClient, EmbeddingClient, InvalidInputError, Ranked
from embedding_client.errors import AccessError
from embedding_requests import LONG_TEXT, SAMPLE_TEXTS, Client, assert_refused_alone, embed_float32
from export_records import assert_the_recorded_reranker_choices_replay
from served_catalog import post_json

from harness.catalog_files import catalog_beside_minilm
from harness.edge import running_edge, tenant_toml
from harness.export_environment import run_in_export_environment
from harness.gateway import RunningGateway, running_gateway
from harness.server import RunningServer, running_server
from server.catalog import Catalog
from server.catalog_exports import engine_of, export_root
from server.engine_report import engine_line
from server.paths import REPO_ROOT, TOKENIZER_JSON

QUERIES = ["How do I reset my password?", "東京は日本の首都です。"]
DOCUMENTS = [
    "Open the settings page and choose 'reset password'.",
    "Triton serves several models from one process.",
    "Café naïve façade: résumé of the crème brûlée.",
    "",
    # Over the max length with its query: truncation decides the score.
    LONG_TEXT,
]
# float32 on both sides, the same graph's arithmetic against torch's.
MAX_SCORE_DIFFERENCE = 1e-4
# Each engine by name; the third reranker's is auto (the one its export measured faster).
ENGINES = {"bert-reranker": "onnxruntime", "xlmr-reranker": "openvino"}
# The reranker with prompts, its query prompt the default (harness/cross_encoder_models.py).
PROMPTED = "bert_identity-reranker"


@pytest.fixture(scope="module")
def rerankers(cross_encoder_folders: dict[str, Path]) -> dict[str, Path]:
    """Catalog name -> cross-encoder folder."""
    return {f"{key}-reranker": folder for key, folder in cross_encoder_folders.items()}


@pytest.fixture(scope="module")
def served_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("rerank")


@pytest.fixture(scope="module")
def catalog(served_dir: Path, rerankers: dict[str, Path]) -> Catalog:
    return catalog_beside_minilm(served_dir, rerankers, ENGINES)


@pytest.fixture(scope="module")
def server(served_dir: Path, catalog: Catalog) -> Iterator[RunningServer]:
    with running_server(served_dir / "tritonserver.log", [served_dir / "served"]) as running:
        yield running


def _client(server: RunningServer, protocol: str) -> Client:
    if protocol == "grpc":
        return grpcclient.InferenceServerClient(server.grpc_url)
    return httpclient.InferenceServerClient(server.http_url)


def _score(
    client: Client,
    model: str,
    pairs: list[tuple[str, str]],
    parameters: dict[str, Any] | None = None,
) -> np.ndarray:
    module = grpcclient if isinstance(client, grpcclient.InferenceServerClient) else httpclient
    inputs = []
    for name, column in (("QUERY", 0), ("TEXT", 1)):
        values = np.array([[pair[column].encode()] for pair in pairs], dtype=np.object_)
        tensor = module.InferInput(name, list(values.shape), "BYTES")
        tensor.set_data_from_numpy(values)
        inputs.append(tensor)
    outputs = [module.InferRequestedOutput("SCORE")]
    result = client.infer(model, inputs, outputs=outputs, parameters=parameters)
    scores = result.as_numpy("SCORE")
    assert scores is not None and scores.dtype == np.float32 and scores.shape == (len(pairs), 1)
    return scores.reshape(-1)


def _pairs() -> list[tuple[str, str]]:
    return [(query, document) for query in QUERIES for document in DOCUMENTS]


def _predict(jobs: list[dict[str, Any]]) -> list[np.ndarray]:
    """CrossEncoder.predict's scores on the original weights, per job (tests/ce_reference.py)."""
    done = run_in_export_environment(
        [str(REPO_ROOT / "tests" / "ce_reference.py")], json.dumps(jobs)
    )
    return [np.asarray(answer["scores"], np.float32) for answer in json.loads(done.stdout)]


@pytest.fixture(scope="module")
def expected(rerankers: dict[str, Path]) -> dict[str, np.ndarray]:
    """CrossEncoder.predict's scores, per model, with its default prompt where it has one."""
    jobs = [{"model_dir": str(folder), "pairs": _pairs()} for folder in rerankers.values()]
    return dict(zip(rerankers, _predict(jobs), strict=True))


@pytest.fixture(scope="module")
def allowed(catalog: Catalog) -> dict[str, float]:
    """Each reranker's bound on its scores as served: float32's, or where OpenVINO serves it
    in bfloat16, the bound its export checked (export/rerank_openvino.py)."""
    bounds = {}
    for model in catalog.models:
        if model.task != "rerank":
            continue
        record_path = export_root(model) / "reranker" / "scorer" / "1" / "export.json"
        openvino = json.loads(record_path.read_text()).get("openvino")
        bounds[model.name] = (
            openvino["max_score_difference_allowed"][openvino["precision"]]
            if engine_of(model) == "openvino"
            else MAX_SCORE_DIFFERENCE
        )
        if openvino is not None:
            assert_the_recorded_reranker_choices_replay(openvino)
    return bounds


def test_the_start_line_names_each_rerankers_engine_and_check(
    catalog: Catalog, allowed: dict[str, float]
) -> None:
    for model in catalog.models:
        line = engine_line(model)
        if model.task == "embed":
            assert line.startswith(f"{model.name}: engine "), line
            continue
        engine = engine_of(model)
        assert engine == ENGINES.get(model.name, engine), (model.name, engine)
        assert line.startswith(f"{model.name}: reranker, engine {engine}, precision "), line
        difference = float(line.split("max score difference to CrossEncoder ")[1].split()[0])
        assert difference <= allowed[model.name], line
        assert "None" not in line, line
        # auto says what it chose from.
        assert ("pairs/s per thread" in line) == (model.engine == "auto"), line


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_each_reranker_scores_like_cross_encoder(
    server: RunningServer,
    expected: dict[str, np.ndarray],
    allowed: dict[str, float],
    protocol: str,
) -> None:
    client = _client(server, protocol)
    for name, reference in expected.items():
        served = _score(client, name, _pairs())
        assert np.abs(served - reference).max() <= allowed[name], (name, served, reference)
        # Random weights still rank: the scores must not all be one value.
        assert np.ptp(reference) > 10 * MAX_SCORE_DIFFERENCE, (name, reference)


def test_the_embedding_model_beside_them_still_embeds(server: RunningServer) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    embeddings = embed_float32(client, SAMPLE_TEXTS, model="embed")
    assert embeddings.shape[0] == len(SAMPLE_TEXTS)
    np.testing.assert_allclose(np.linalg.norm(embeddings, axis=1), 1.0, atol=1e-5)


def test_a_reranker_has_one_entry_point_and_its_own_stages(
    served_dir: Path, rerankers: dict[str, Path]
) -> None:
    served = {path.name for path in (served_dir / "served").iterdir()}
    for name in rerankers:
        assert {name, f"{name}.tokenizer", f"{name}.scorer"} <= served
        assert f"{name}_tokens" not in served and f"{name}.embedder" not in served


@pytest.mark.parametrize(
    ("pairs", "parameters", "named"),
    [
        ([("", "a document")], None, "invalid_input: QUERY[0] is empty"),
        ([("q", "d"), ("  ", "d")], None, "QUERY[1] is empty"),
        (
            [("a query", LONG_TEXT)],
            {"truncate": False},
            "input_too_large: pair 0 (QUERY[0], TEXT[0]) has",
        ),
        ([("a query", "d")], {"truncate": "yes"}, "invalid_parameter 'truncate'"),
        (
            [("a query", "d")],
            {"prompt_name": "web"},
            "invalid_parameter 'prompt_name': unknown prompt 'web'",
        ),
    ],
)
def test_bad_input_is_refused_alone_naming_it(
    server: RunningServer,
    rerankers: dict[str, Path],
    pairs: list[tuple[str, str]],
    parameters: dict[str, Any] | None,
    named: str,
) -> None:
    name = next(iter(rerankers))
    client = grpcclient.InferenceServerClient(server.grpc_url)
    good = _pairs()
    answered = partial(_score, client, name, good)
    assert_refused_alone(
        answered, partial(_score, client, name, pairs, parameters), named, len(good)
    )


# More documents than one request holds (the ensemble's max_batch_size, 64):
# the client splits them and ranks all the scores together.
MANY = 30


def _check_ranking(ranked: list[Ranked], reference: np.ndarray, top_n: int) -> None:
    assert len(ranked) == top_n
    scores = np.array([each.relevance_score for each in ranked])
    assert np.all(np.diff(scores) <= 0), scores
    for each in ranked:
        assert abs(each.relevance_score - reference[each.index]) <= MAX_SCORE_DIFFERENCE
    # The best is one of the copies of the best document.
    assert ranked[0].index % len(DOCUMENTS) == int(np.argmax(reference[: len(DOCUMENTS)]))


def _reference_for_first_query(expected: dict[str, np.ndarray], name: str) -> np.ndarray:
    return np.tile(expected[name][: len(DOCUMENTS)], MANY)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_the_client_ranks_many_documents_like_cross_encoder(
    server: RunningServer, expected: dict[str, np.ndarray], protocol: str
) -> None:
    name = next(iter(expected))
    url = server.grpc_url if protocol == "grpc" else server.http_url
    with EmbeddingClient(url, protocol, model=name) as client:  # type: ignore[arg-type]
        ranked = client.rerank(QUERIES[0], DOCUMENTS * MANY, top_n=7)
        everything = client.rerank(QUERIES[0], DOCUMENTS, top_n=len(DOCUMENTS) + 3)
    _check_ranking(ranked, _reference_for_first_query(expected, name), 7)
    assert sorted(each.index for each in everything) == list(range(len(DOCUMENTS)))


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_the_async_client_ranks_like_the_sync_one(
    server: RunningServer, expected: dict[str, np.ndarray], protocol: str
) -> None:
    name = next(iter(expected))
    url = server.grpc_url if protocol == "grpc" else server.http_url

    async def rank() -> list[Ranked]:
        async with AsyncEmbeddingClient(url, protocol, model=name) as client:  # type: ignore[arg-type]
            return await client.rerank(QUERIES[0], DOCUMENTS * MANY, top_n=7)

    _check_ranking(asyncio.run(rank()), _reference_for_first_query(expected, name), 7)


@pytest.mark.parametrize(
    ("query", "documents", "top_n", "named"),
    [
        ("", ["d"], None, "query is empty"),
        ("q", [], None, "documents is empty"),
        ("q", ["d", 3], None, "documents[1] is int"),
        ("q", ["d"], 0, "top_n must be a positive integer, got 0"),
    ],
)
def test_the_client_refuses_a_bad_call_before_sending_it(
    server: RunningServer, query: str, documents: list[Any], top_n: int | None, named: str
) -> None:
    with EmbeddingClient(server.grpc_url, model="no-such-model") as client:
        with pytest.raises(InvalidInputError, match=named.replace("[", r"\[")):
            client.rerank(query, documents, top_n=top_n)


@pytest.fixture(scope="module")
def gateway(
    server: RunningServer, served_dir: Path, rerankers: dict[str, Path]
) -> Iterator[RunningGateway]:
    extra = tuple(f"--reranker={name}" for name in rerankers)
    with running_gateway(
        server.grpc_url,
        [("all-MiniLM-L6-v2", TOKENIZER_JSON)],
        served_dir / "gateway.log",
        extra_args=extra,
    ) as running:
        yield running


def test_the_cohere_sdk_reranks_through_the_gateway(
    gateway: RunningGateway, expected: dict[str, np.ndarray]
) -> None:
    name = next(iter(expected))
    reference = expected[name][: len(DOCUMENTS)]
    client = cohere.ClientV2(api_key="unused", base_url=gateway.url)
    answer = client.rerank(model=name, query=QUERIES[0], documents=DOCUMENTS, top_n=3)
    assert [result.index for result in answer.results] == list(np.argsort(-reference)[:3])
    for result in answer.results:
        assert abs(result.relevance_score - reference[result.index]) <= MAX_SCORE_DIFFERENCE


def test_cohere_v1_returns_documents_and_tei_its_own_shape(
    gateway: RunningGateway, expected: dict[str, np.ndarray]
) -> None:
    name = next(iter(expected))
    reference = expected[name][: len(DOCUMENTS)]
    status, answer = post_json(
        gateway,
        "/v1/rerank",
        {"model": name, "query": QUERIES[0], "documents": DOCUMENTS, "return_documents": True},
    )
    assert status == 200, answer
    assert [result["document"]["text"] for result in answer["results"]] == [
        DOCUMENTS[index] for index in np.argsort(-reference)
    ]
    status, answer = post_json(
        gateway, "/rerank", {"model": name, "query": QUERIES[0], "texts": DOCUMENTS}
    )
    assert status == 200, answer
    assert [item["index"] for item in answer] == list(np.argsort(-reference))
    assert all(abs(item["score"] - reference[item["index"]]) <= 1e-4 for item in answer)


# Stands for the first reranker's name in a payload below.
RERANKER = "<reranker>"


@pytest.mark.parametrize(
    ("route", "payload", "status", "named"),
    [
        ("/v2/rerank", {"model": RERANKER, "query": "", "documents": ["d"]}, 400, "'query'"),
        ("/v2/rerank", {"model": RERANKER, "query": "q", "documents": []}, 400, "'documents'"),
        (
            "/v2/rerank",
            {"model": RERANKER, "query": "q", "documents": ["d"], "top_n": 0},
            400,
            "'top_n'",
        ),
        ("/v2/rerank", {"query": "q", "documents": ["d"]}, 400, "serves several ("),
        ("/v2/rerank", {"model": "embed-x", "query": "q", "documents": ["d"]}, 404, "embed-x"),
        (
            "/v2/rerank",
            {"model": "all-MiniLM-L6-v2", "query": "q", "documents": ["d"]},
            400,
            "its task is 'embed'",
        ),
        (
            "/rerank",
            {"model": RERANKER, "query": "q", "texts": ["d"], "raw_scores": True},
            400,
            "'raw_scores'",
        ),
    ],
)
def test_bad_rerank_requests_get_a_400_in_the_apis_shape(
    gateway: RunningGateway,
    rerankers: dict[str, Path],
    route: str,
    payload: dict[str, Any],
    status: int,
    named: str,
) -> None:
    assert len(rerankers) > 1, "the 'serves several' case needs two"
    if payload.get("model") == RERANKER:
        payload = {**payload, "model": next(iter(rerankers))}
    answered, body = post_json(gateway, route, payload)
    assert answered == status, body
    message = body["message"] if route != "/rerank" else body["error"]
    assert named in message, message


def test_tei_rerank_takes_the_direction_as_tei_spells_it(
    gateway: RunningGateway, rerankers: dict[str, Path]
) -> None:
    """TEI spells the directions capitalized; a pair is cut from the right only."""
    body = {"model": next(iter(rerankers)), "query": "q", "texts": DOCUMENTS[:2]}
    status, answer = post_json(gateway, "/rerank", {**body, "truncation_direction": "Right"})
    assert status == 200 and len(answer) == 2, answer
    status, answer = post_json(gateway, "/rerank", {**body, "truncation_direction": "Left"})
    assert status == 400 and "'truncation_direction' must be 'Right'" in answer["error"], answer


def test_openai_embeddings_refuse_a_reranker_naming_its_task(
    gateway: RunningGateway, rerankers: dict[str, Path]
) -> None:
    name = next(iter(rerankers))
    status, body = post_json(gateway, "/v1/embeddings", {"model": name, "input": "text"})
    assert status == 400, body
    assert f"'{name}' does not embed (its task is 'rerank')" in body["error"]["message"]


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_a_named_prompt_goes_before_the_query_as_cross_encoder_puts_it(
    server: RunningServer,
    rerankers: dict[str, Path],
    expected: dict[str, np.ndarray],
    allowed: dict[str, float],
    protocol: str,
) -> None:
    pairs = [(QUERIES[0], document) for document in DOCUMENTS]
    job = {"model_dir": str(rerankers[PROMPTED]), "pairs": pairs, "prompt_name": "web"}
    (reference,) = _predict([job])
    # Else the prompt's effect would go unseen: the default prompt scores otherwise.
    assert np.abs(reference - expected[PROMPTED][: len(DOCUMENTS)]).max() > MAX_SCORE_DIFFERENCE
    url = server.grpc_url if protocol == "grpc" else server.http_url
    with EmbeddingClient(url, protocol, model=PROMPTED) as client:  # type: ignore[arg-type]
        ranked = client.rerank(QUERIES[0], DOCUMENTS, prompt_name="web")
    served = np.array([each.relevance_score for each in sorted(ranked, key=lambda e: e.index)])
    np.testing.assert_allclose(served, reference, rtol=0, atol=allowed[PROMPTED])


def test_the_rerank_command_prints_the_ranking(
    server: RunningServer, expected: dict[str, np.ndarray]
) -> None:
    name = next(iter(expected))
    reference = expected[name][: len(DOCUMENTS)]
    command = [str(Path(sys.executable).parent / "rerank"), f"--url={server.grpc_url}"]
    done = subprocess.run(
        [*command, f"--model={name}", f"--query={QUERIES[0]}", "--top-n=2", *DOCUMENTS],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [line["index"] for line in lines] == list(np.argsort(-reference)[:2])
    assert [line["text"] for line in lines] == [DOCUMENTS[line["index"]] for line in lines]
    refused = subprocess.run(
        [*command, f"--model={name}", "--query= ", "a document"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 1 and "query is empty" in refused.stderr, refused.stderr
    unknown = subprocess.run(
        [*command, f"--model={PROMPTED}", "--query=q", "--prompt-name=nope", "a document"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert unknown.returncode == 1 and "unknown prompt 'nope'" in unknown.stderr, unknown.stderr


# A tenant's texts quota, which a rerank request's documents count against.
DOCUMENTS_PER_SECOND = 40


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_a_tenant_reranks_only_its_models_and_documents_count_as_texts(
    server: RunningServer, served_dir: Path, rerankers: dict[str, Path], protocol: str
) -> None:
    allowed, other = sorted(rerankers)[:2]
    tenants = served_dir / f"tenants-{protocol}.toml"
    tenants.write_text(
        tenant_toml("ranker", ["ranker-key"], [allowed], texts_rate=DOCUMENTS_PER_SECOND)
    )
    with running_edge(server.endpoints, tenants, served_dir / f"edge-{protocol}") as edge:
        url = edge.grpc_url if protocol == "grpc" else edge.http_url
        with EmbeddingClient(url, protocol, model=allowed, api_key="ranker-key") as client:  # type: ignore[arg-type]
            assert len(client.rerank(QUERIES[0], DOCUMENTS)) == len(DOCUMENTS)
            # More documents in one request than the quota holds: refused as
            # too large, counted in documents, not requests.
            with pytest.raises(InvalidInputError, match="more than this tenant's texts_per_second"):
                client.rerank(QUERIES[0], ["d"] * (DOCUMENTS_PER_SECOND + 1))
            with pytest.raises(AccessError, match=f"may not call model {other}"):
                client.with_model(other).rerank(QUERIES[0], DOCUMENTS)
