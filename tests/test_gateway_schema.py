"""The gateway's OpenAPI document against the gateway itself: Schemathesis
generates requests for every route from the served /openapi.json, valid and
invalid ones, and sends them to the installed `embedding-gateway` serving a
catalog (MiniLM, a reranker, a sparse encoder, a multi-vector encoder) in front of a real
tritonserver that serves it.

Every answer must be no 5xx, documented, an error in its API's own shape
(OpenAI's, Cohere's or TEI's), a success conforming to its schema, and a
request the schema refuses must be refused. One check is left out: that
every request the schema allows is accepted. A model's own limits are
Triton's to know (its width for `dimensions`, its prompts, its vocabulary
and max length for token ids), so a request the document allows may still
be refused with a 400 for one model, naming the limit.

The examples per route are bounded (EXAMPLES) to keep the run near a
minute on 2 cores; the count that ran is printed at the end."""

from __future__ import annotations

import sys
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import schemathesis
from embedding_client.options import (
    INPUT_TYPES,
    INTEGER_MAXIMUM,
    RERANK_OPTIONS,
    ROW_OPTIONS,
    TEXT_OPTIONS,
    TRUNCATION_DIRECTIONS,
)
from embedding_gateway.cohere_api import CohereRerankRequest
from embedding_gateway.openai_api import EmbeddingsRequest
from embedding_gateway.routes import OPENAPI_PATH, ROUTES
from embedding_gateway.tei_api import TeiEmbedRequest
from hypothesis import HealthCheck, Phase, given, settings
from openapi_spec_validator import validate
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import positive_data_acceptance

from harness.catalog_files import catalog_beside_minilm
from harness.gateway import RunningGateway, running_gateway
from harness.server import RunningServer, running_server
from server.catalog import Catalog
from server.paths import EXPORTS, MODEL_REPOSITORY

# Hypothesis examples per route, on top of Schemathesis' own boundary cases.
EXAMPLES = 100
# The names and engine of test_rerank.py's, test_sparse.py's and test_multivector.py's
# models, so that a run of the whole suite exports each once.
RERANKER = "bert-reranker"
SPARSE = "bert_max-sparse"
MULTIVECTOR = "bert_colbert-mv"
# Examples that ran, by route and mode.
RAN: Counter[str] = Counter()
ROUTE_PATHS = [route.path for route in ROUTES]


@pytest.fixture(scope="module")
def served_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gateway_schema")


@pytest.fixture(scope="module")
def catalog(
    served_dir: Path,
    cross_encoder_folders: dict[str, Path],
    sparse_encoder_folders: dict[str, Path],
    multivector_folders: dict[str, Path],
) -> Catalog:
    folders = {
        RERANKER: cross_encoder_folders["bert"],
        SPARSE: sparse_encoder_folders["bert_max"],
        MULTIVECTOR: multivector_folders["bert_colbert"],
    }
    return catalog_beside_minilm(served_dir, folders, {RERANKER: "onnxruntime"})


@pytest.fixture(scope="module")
def server(served_dir: Path, catalog: Catalog) -> Iterator[RunningServer]:
    with running_server(served_dir / "tritonserver.log", [served_dir / "served"]) as running:
        yield running


@pytest.fixture(scope="module")
def gateway(server: RunningServer, served_dir: Path, catalog: Catalog) -> Iterator[RunningGateway]:
    """The installed command, run outside the checkout (no server/ to
    import), told where the catalog's exports are."""
    outside = served_dir / "elsewhere"
    outside.mkdir()
    with running_gateway(
        server.grpc_url,
        [],
        served_dir / "gateway.log",
        extra_args=(
            f"--catalog={catalog.path}",
            f"--model-repository={MODEL_REPOSITORY}",
            f"--exports={EXPORTS}",
        ),
        program=(str(Path(sys.executable).parent / "embedding-gateway"),),
        cwd=outside,
    ) as running:
        yield running
    print(f"\nSchemathesis examples by route: {dict(RAN)}; {sum(RAN.values())} in all")


@pytest.fixture(scope="module")
def document(gateway: RunningGateway) -> dict[str, Any]:
    with urllib.request.urlopen(f"{gateway.url}/openapi.json", timeout=30) as reply:
        return orjson.loads(reply.read())


def test_the_document_is_valid_openapi_naming_the_served_models(
    document: dict[str, Any], catalog: Catalog
) -> None:
    validate(document)
    assert document["openapi"].startswith("3.1")
    schemas = document["components"]["schemas"]
    embedding_names = [
        name for model in catalog.models if model.task == "embed" for name in model.names
    ]
    assert schemas["EmbeddingsRequest"]["properties"]["model"]["enum"] == embedding_names
    # A multi-vector encoder reranks too, by MaxSim: with two, `model` is required.
    rerank = schemas["CohereRerankRequest"]
    assert rerank["properties"]["model"]["enum"] == [RERANKER, MULTIVECTOR]
    assert "model" in rerank["required"]
    assert schemas["TeiSparseRequest"]["properties"]["model"]["enum"] == [SPARSE, None]
    assert schemas["PoolingRequest"]["properties"]["model"]["enum"] == [MULTIVECTOR, None]


def test_the_schemas_take_the_options_from_the_one_declaration() -> None:
    """The options' names, choices and bounds in each API's schema are the
    declaration's (row_formats.json), as the client and the stages read it."""
    openai = EmbeddingsRequest.model_json_schema()["properties"]
    tei = TeiEmbedRequest.model_json_schema()["properties"]
    assert set(TEXT_OPTIONS) <= set(openai)
    assert _choices(openai["input_type"]) == list(INPUT_TYPES)
    assert _choices(openai["truncation_direction"]) == list(TRUNCATION_DIRECTIONS)
    assert _choices(tei["truncation_direction"]) == [d.capitalize() for d in TRUNCATION_DIRECTIONS]
    dimensions = ROW_OPTIONS["dimensions"]
    for schema in (openai, tei):
        (bounded,) = [each for each in schema["dimensions"]["anyOf"] if each["type"] == "integer"]
        assert (bounded["minimum"], bounded["maximum"]) == (dimensions.minimum, INTEGER_MAXIMUM)
    top_n = CohereRerankRequest.model_json_schema()["properties"]["top_n"]["anyOf"][0]
    assert top_n["minimum"] == RERANK_OPTIONS["top_n"].minimum


def _choices(schema: dict[str, Any]) -> list[str]:
    return next(each["enum"] for each in schema["anyOf"] if "enum" in each)


def _answer(url: str, method: str, body: bytes) -> tuple[int, dict[str, str], Any]:
    request = urllib.request.Request(
        url, data=body, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return reply.status, dict(reply.headers), orjson.loads(reply.read())
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), orjson.loads(error.read())


TOO_LARGE = INTEGER_MAXIMUM + 1


@pytest.mark.parametrize(
    ("path", "shape", "too_large"),
    [
        ("/v1/embeddings", {"error"}, {"model": "embed", "input": "a", "dimensions": TOO_LARGE}),
        ("/v2/rerank", {"message"}, {"query": "q", "documents": ["d"], "top_n": TOO_LARGE}),
        (
            "/embed",
            {"error", "error_type"},
            {"model": "embed", "inputs": "a", "dimensions": TOO_LARGE},
        ),
        # TEI's rerank takes no integer.
        ("/rerank", {"error", "error_type"}, None),
    ],
)
def test_a_route_answers_every_error_in_its_apis_shape(
    gateway: RunningGateway, path: str, shape: set[str], too_large: dict[str, Any] | None
) -> None:
    """Refusals the schema does not make too: a method the route does not
    take (with the methods it does), and an integer past Triton's int64,
    which once failed the gateway (500) where it met tritonclient."""
    status, headers, body = _answer(f"{gateway.url}{path}", "PUT", b"{}")
    assert (status, set(body), headers["Allow"]) == (405, shape, "POST"), body
    if too_large is not None:
        status, _, body = _answer(f"{gateway.url}{path}", "POST", orjson.dumps(too_large))
        assert (status, set(body)) == (400, shape), body
        assert f"must be at most {INTEGER_MAXIMUM}, got {TOO_LARGE}" in str(body), body


def _examples(operation: Any, mode: GenerationMode) -> None:
    """Sends `operation`'s examples of `mode`, each answer checked; the first
    failure raises, with the request that found it."""

    @given(case=operation.as_strategy(mode))
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        # No shrinking: a failing example is reported as generated, in bounded time.
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    def run(case: Any) -> None:
        RAN[f"{operation.label} ({mode})"] += 1
        case.call_and_validate(excluded_checks=[positive_data_acceptance])

    run()


def test_every_route_answers_as_the_document_says(gateway: RunningGateway) -> None:
    """Valid and invalid requests for every route the served document has."""
    schema = schemathesis.openapi.from_url(f"{gateway.url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    # Schemathesis leaves out the document's own route, fetched and validated above.
    assert {operation.path for operation in operations} == set(ROUTE_PATHS) - {OPENAPI_PATH}
    for operation in operations:
        _examples(operation, GenerationMode.POSITIVE)
        # Only a body can be invalid: a path parameter is any string.
        if len(operation.body):
            _examples(operation, GenerationMode.NEGATIVE)
