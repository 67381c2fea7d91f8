"""perf_analyzer through the edge, as an operator measuring a tenant's view
runs it: the key as `-H "authorization: Bearer KEY"`, the ensemble's stages
read (metadata, config, statistics) but never called, and every model's
statistics cut to the models the key may read (server/edge/stats.lua)."""

from __future__ import annotations

import http.client
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from harness.edge import RunningEdge, edge_for_tenants, tenant_toml
from harness.server import RunningServer
from perf.perf_analyzer import run_perf_analyzer
from perf.workloads import workload, write_text_input_data
from server.catalog import DEFAULT_CATALOG, Catalog, CatalogModel, read_catalog
from server.edge.refusals import refusal_message

SEARCH_KEY = "search-key"
OTHER_KEY = "other-key"
# A key the file may list (its hash is valid) but no client can present.
SPACED_KEY = "two words"
# The packaged model's stages (model_repository's names), which the test
# server's `embed` ensemble calls; what a tenant of `embed` may read.
STAGES = {"tokenizer", "embedder", "serializer"}


def _catalog() -> Catalog:
    """The default catalog (the packaged model, alias `embed`) and a
    reranker this server does not serve: another tenant's model."""
    packaged = read_catalog(DEFAULT_CATALOG)
    assert isinstance(packaged, Catalog), packaged
    other = CatalogModel("other", DEFAULT_CATALOG.parent / "other", task="rerank")
    return Catalog(DEFAULT_CATALOG, (*packaged.models, other))


@pytest.fixture(scope="module")
def edge(
    triton_server: RunningServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningEdge]:
    tenants = (
        tenant_toml("search", [SEARCH_KEY], ["embed"])
        + tenant_toml("other", [OTHER_KEY], ["other"])
        + tenant_toml("spaced", [SPACED_KEY], ["embed"])
    )
    workdir = tmp_path_factory.mktemp("edge_stages")
    with edge_for_tenants(
        triton_server.endpoints, tenants, workdir, _catalog().stages()
    ) as running:
        yield running


def _grpc(edge: RunningEdge) -> grpcclient.InferenceServerClient:
    return grpcclient.InferenceServerClient(edge.grpc_url)


def _grpc_status(call: Callable[[], object]) -> str:
    """ "OK", or the gRPC status code and message of the refusal."""
    try:
        call()
    except InferenceServerException as error:
        return f"{error.status()} {error.message()}"
    return "OK"


def _http(edge: RunningEdge, method: str, path: str, authorization: str) -> tuple[int, bytes]:
    host, port = edge.http_url.split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        body = b"{}" if method == "POST" else None
        connection.request(method, path, body=body, headers={"authorization": authorization})
        reply = connection.getresponse()
        return reply.status, reply.read()
    finally:
        connection.close()


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_perf_analyzer_measures_through_the_edge(
    edge: RunningEdge, tmp_path: Path, protocol: str
) -> None:
    """The command a new user writes, key header with its space; the
    server-side breakdown by stage comes through as well."""
    url = edge.grpc_url if protocol == "grpc" else edge.http_url
    data = write_text_input_data(workload("short", 1, requests=4), tmp_path / "input.json")
    (measurement,) = run_perf_analyzer(
        "embed",
        url,
        protocol,  # type: ignore[arg-type]
        data,
        tmp_path / "edge.csv",
        concurrency=(1, 1, 1),
        measurement_ms=1000,
        stability_percentage=1000,
        max_trials=3,
        extra=["-H", f"authorization: Bearer {SEARCH_KEY}"],
    )
    assert measurement.infer_per_sec > 0
    assert {model.model for model in measurement.composing} == STAGES


def test_a_stage_is_read_never_called(edge: RunningEdge) -> None:
    key = {"authorization": f"Bearer {SEARCH_KEY}"}
    client = _grpc(edge)
    try:
        config = client.get_model_config("tokenizer", headers=key, as_json=True)
        assert config["config"]["name"] == "tokenizer"
        assert client.get_model_metadata("embedder", headers=key).name == "embedder"
        assert client.is_model_ready("serializer", headers=key)
        (stats,) = client.get_inference_statistics("tokenizer", headers=key).model_stats
        assert stats.name == "tokenizer"
        refused = _grpc_status(lambda: client.infer("tokenizer", [], headers=key))
    finally:
        client.close()
    assert (
        refused
        == f"StatusCode.PERMISSION_DENIED {refusal_message('stage_not_callable', 'tokenizer')}"
    )
    bearer = key["authorization"]
    status, body = _http(edge, "GET", "/v2/models/tokenizer/config", bearer)
    assert status == 200 and json.loads(body)["name"] == "tokenizer"
    assert _http(edge, "GET", "/v2/models/embedder/ready", bearer)[0] == 200
    status, body = _http(edge, "POST", "/v2/models/tokenizer/infer", bearer)
    assert status == 403 and b"this key may not call model tokenizer" in body
    status, body = _http(edge, "POST", "/v2/models/embedder/versions/1/infer", bearer)
    assert status == 403, body


def test_another_tenants_stages_are_not_readable(edge: RunningEdge) -> None:
    """Neither way round: the edge refuses before Triton (which does not
    even serve `other`'s stages, so a 403 is the edge's)."""
    other = {"authorization": f"Bearer {OTHER_KEY}"}
    search = {"authorization": f"Bearer {SEARCH_KEY}"}
    client = _grpc(edge)
    try:
        assert _grpc_status(lambda: client.get_model_config("tokenizer", headers=other)) == (
            f"StatusCode.PERMISSION_DENIED {refusal_message('model_not_allowed', 'tokenizer')}"
        )
        assert _grpc_status(lambda: client.get_model_config("other.scorer", headers=search)) == (
            f"StatusCode.PERMISSION_DENIED {refusal_message('model_not_allowed', 'other.scorer')}"
        )
    finally:
        client.close()
    assert _http(edge, "GET", "/v2/models/serializer", other["authorization"])[0] == 403
    assert _http(edge, "GET", "/v2/models/other.tokenizer/config", search["authorization"])[0] == (
        403
    )


def test_every_models_statistics_are_cut_to_the_keys(
    edge: RunningEdge, triton_server: RunningServer
) -> None:
    """What perf_analyzer asks for: the statistics of no model named. Each
    key gets those of the models it may read, of what Triton serves."""
    client = grpcclient.InferenceServerClient(triton_server.grpc_url)
    try:
        index = client.get_model_repository_index(as_json=True)["models"]
    finally:
        client.close()
    served = {model["name"] for model in index}
    readable = {"embed", "embed_tokens", *STAGES}
    # `other`'s key gets none of these: it may read none.
    assert readable <= served
    client = _grpc(edge)
    try:
        for key, expected in ((SEARCH_KEY, readable), (OTHER_KEY, set())):
            headers = {"authorization": f"Bearer {key}"}
            stats = client.get_inference_statistics(headers=headers).model_stats
            assert {entry.name for entry in stats} == expected
            status, body = _http(edge, "GET", "/v2/models/stats", headers["authorization"])
            assert status == 200
            assert {entry["name"] for entry in json.loads(body)["model_stats"]} == expected
    finally:
        client.close()


def test_the_keys_surrounding_whitespace_is_no_part_of_it(edge: RunningEdge) -> None:
    """gRPC metadata keeps the spaces around a value (HTTP drops them before
    the edge sees them); a key itself never holds a space."""
    client = _grpc(edge)
    try:
        for value in (f"  Bearer {SEARCH_KEY}  ", f"Bearer {SEARCH_KEY} "):
            assert client.is_model_ready("embed", headers={"authorization": value})
        refused = _grpc_status(
            lambda: client.is_model_ready(
                "embed", headers={"authorization": f"Bearer {SPACED_KEY}"}
            )
        )
    finally:
        client.close()
    assert refused == f"StatusCode.UNAUTHENTICATED {refusal_message('no_key')}", refused
    assert _http(edge, "GET", "/v2/models/embed/ready", f"\tBearer {SEARCH_KEY} \t")[0] == 200
    assert _http(edge, "GET", "/v2/models/embed/ready", f"Bearer {SPACED_KEY}")[0] == 401


def test_without_a_catalog_only_the_entry_points(
    triton_server: RunningServer, tmp_path: Path
) -> None:
    """An edge given no catalog (python -m server.edge without --catalog)
    knows no stages: a key reads its models' entry points only, as before."""
    tenants = tenant_toml("search", [SEARCH_KEY], ["embed"])
    with edge_for_tenants(triton_server.endpoints, tenants, tmp_path) as edge:
        bearer = f"Bearer {SEARCH_KEY}"
        assert _http(edge, "GET", "/v2/models/embed/config", bearer)[0] == 200
        assert _http(edge, "GET", "/v2/models/tokenizer/config", bearer)[0] == 403
        status, body = _http(edge, "GET", "/v2/models/stats", bearer)
    assert status == 200
    assert {entry["name"] for entry in json.loads(body)["model_stats"]} == {"embed", "embed_tokens"}
