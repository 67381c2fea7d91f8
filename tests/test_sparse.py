"""Sparse encoders in the catalog: one tritonserver serving random-weight
SPLADE folders (harness/sparse_encoder_models.py) beside the packaged
MiniLM, each answering `NAME` (texts in, one sparse row of raw bytes per
text out: docs/contract.md, "Sparse rows") like sentence-transformers'
SparseEncoder.encode on the same weights, over gRPC and HTTP, through the
client library, the `embed-sparse` command and the gateway's TEI route;
bad input refused alone."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from embedding_catalog.tasks import SPARSE_SERIALIZER
from embedding_client import AsyncEmbeddingClient, EmbeddingClient, SparseRow
from embedding_requests import LONG_TEXT, SAMPLE_TEXTS, Client, assert_refused_alone, embed_float32
from huggingface_hub import InferenceClient
from served_catalog import post_json

from harness.catalog_files import catalog_beside_minilm
from harness.export_environment import run_in_export_environment
from harness.gateway import RunningGateway, running_gateway
from harness.server import RunningServer, running_server
from server.catalog import Catalog
from server.engine_report import engine_line
from server.paths import REPO_ROOT, TOKENIZER_JSON

# float32 on both sides, the same graph's arithmetic against torch's.
MAX_VALUE_DIFFERENCE = 1e-4
# Rows cut to this many entries, checked against encode(max_active_dims=...).
TOP_K = 5
# More texts than one request holds (max_batch_size 64): the client splits them.
MANY = 20


# A model whose own config keeps this many entries per row unless asked.
DEFAULT_KEPT = 3


@pytest.fixture(scope="module")
def encoders(
    sparse_encoder_folders: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    """Catalog name -> sparse encoder folder: the test models, and a copy of
    the first whose config sets max_active_dims."""
    folders = {f"{key}-sparse": folder for key, folder in sparse_encoder_folders.items()}
    kept = tmp_path_factory.mktemp("kept") / "model"
    shutil.copytree(sparse_encoder_folders["bert_max"], kept)
    config_path = kept / "config_sentence_transformers.json"
    config = json.loads(config_path.read_text())
    config_path.write_text(json.dumps({**config, "max_active_dims": DEFAULT_KEPT}))
    return {**folders, "kept-sparse": kept}


@pytest.fixture(scope="module")
def served_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("sparse")


@pytest.fixture(scope="module")
def catalog(served_dir: Path, encoders: dict[str, Path]) -> Catalog:
    return catalog_beside_minilm(served_dir, encoders)


@pytest.fixture(scope="module")
def server(served_dir: Path, catalog: Catalog) -> Iterator[RunningServer]:
    with running_server(served_dir / "tritonserver.log", [served_dir / "served"]) as running:
        yield running


Reference = list[tuple[np.ndarray, np.ndarray]]  # (indices, values) per text


@pytest.fixture(scope="module")
def expected(encoders: dict[str, Path]) -> dict[tuple[str, str], Reference]:
    """SparseEncoder.encode's rows on the original weights, per (model, case):
    "plain", "top_k" (max_active_dims=TOP_K) and "query" (its prompt)."""
    cases: dict[str, dict[str, Any]] = {
        "plain": {},
        "top_k": {"max_active_dims": TOP_K},
        "query": {"prompt_name": "query"},
    }
    # Every model plain; the first (which has the prompt) in each case.
    first = sorted(encoders)[0]
    keys = [(name, "plain") for name in encoders] + [
        (first, case) for case in cases if case != "plain"
    ]
    jobs = [
        {"model_dir": str(encoders[name]), "texts": SAMPLE_TEXTS, **cases[case]}
        for name, case in keys
    ]
    done = run_in_export_environment(
        [str(REPO_ROOT / "tests" / "se_reference.py")], json.dumps(jobs)
    )
    answers = json.loads(done.stdout)
    return {
        key: [
            (np.asarray(row["indices"], np.uint32), np.asarray(row["values"], np.float32))
            for row in answer
        ]
        for key, answer in zip(keys, answers, strict=True)
    }


def _assert_rows_match(rows: list[SparseRow] | Reference, reference: Reference) -> None:
    """The same active terms, except terms below the bar on either side (the
    relu of a logit within rounding of 0), and their values within the bar."""
    assert len(rows) == len(reference)
    for (indices, values), (want_indices, want_values) in zip(rows, reference, strict=True):
        assert np.all(np.diff(indices.astype(np.int64)) > 0), indices
        served = dict(zip(indices.tolist(), values.astype(np.float32).tolist(), strict=True))
        wanted = dict(zip(want_indices.tolist(), want_values.tolist(), strict=True))
        for term in served.keys() | wanted.keys():
            difference = abs(served.get(term, 0.0) - wanted.get(term, 0.0))
            assert difference <= MAX_VALUE_DIFFERENCE, (term, served.get(term), wanted.get(term))


def _rows_by_hand(raw: np.ndarray, value_dtype: str) -> Reference:
    """The documented decode, written here from the contract's layout."""
    rows = []
    for row in raw:
        data = row.tobytes()
        count = int(np.frombuffer(data[:4], "<u4")[0])
        indices = np.frombuffer(data[4 : 4 + 4 * count], "<u4")
        width = np.dtype(value_dtype).itemsize
        values = np.frombuffer(data[4 + 4 * count : 4 + 4 * count + width * count], value_dtype)
        assert not any(data[4 + (4 + width) * count :]), "the padding is zeros"
        rows.append((indices, values.astype(np.float32)))
    return rows


def _sparse_raw(
    client: Client, model: str, texts: list[str], parameters: dict[str, Any] | None = None
) -> np.ndarray:
    module = grpcclient if isinstance(client, grpcclient.InferenceServerClient) else httpclient
    values = np.array([[text.encode()] for text in texts], dtype=np.object_)
    tensor = module.InferInput("TEXT", list(values.shape), "BYTES")
    tensor.set_data_from_numpy(values)
    outputs = [module.InferRequestedOutput("SPARSE")]
    result = client.infer(model, [tensor], outputs=outputs, parameters=parameters)
    raw = result.as_numpy("SPARSE")
    assert raw is not None and raw.dtype == np.uint8 and raw.shape[0] == len(texts)
    return raw


def _client(server: RunningServer, protocol: str) -> Client:
    if protocol == "grpc":
        return grpcclient.InferenceServerClient(server.grpc_url)
    return httpclient.InferenceServerClient(server.http_url)


def test_the_start_line_names_each_encoders_check(catalog: Catalog) -> None:
    for model in catalog.models:
        if model.task == "embed":
            continue
        line = engine_line(model)
        assert line.startswith(f"{model.name}: sparse encoder, engine onnxruntime, "), line
        difference = float(line.split("max value difference to SparseEncoder ")[1].split()[0])
        assert difference <= MAX_VALUE_DIFFERENCE, line
        assert "None" not in line, line


def test_a_sparse_encoder_has_one_entry_point_and_its_own_stages(
    served_dir: Path, encoders: dict[str, Path]
) -> None:
    served = {path.name for path in (served_dir / "served").iterdir()}
    assert SPARSE_SERIALIZER in served
    for name in encoders:
        assert {name, f"{name}.tokenizer", f"{name}.encoder"} <= served
        assert f"{name}_tokens" not in served and f"{name}.embedder" not in served


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_each_encoder_answers_like_sparse_encoder_in_its_bytes(
    server: RunningServer,
    served_dir: Path,
    expected: dict[tuple[str, str], Reference],
    protocol: str,
) -> None:
    client = _client(server, protocol)
    for name in {name for name, _ in expected}:
        raw = _sparse_raw(client, name, SAMPLE_TEXTS)
        _assert_rows_match(_rows_by_hand(raw, "<f4"), expected[name, "plain"])
        # Random weights with a negative head bias: sparse, and not empty.
        record = served_dir / "served" / f"{name}.encoder" / "1" / "export.json"
        vocabulary = json.loads(record.read_text())["vocab_size"]
        counts = [len(indices) for indices, _ in expected[name, "plain"]]
        assert 0 < max(counts) < vocabulary / 2, counts
        if name == "kept-sparse":
            # Its own default, applied unasked, and overridden when asked.
            assert max(counts) == DEFAULT_KEPT, counts
            wider = _rows_by_hand(
                _sparse_raw(client, name, SAMPLE_TEXTS, {"max_active_dims": 9}), "<f4"
            )
            assert max(len(indices) for indices, _ in wider) > DEFAULT_KEPT


def test_pooling_sum_and_max_differ(expected: dict[tuple[str, str], Reference]) -> None:
    firsts = [
        expected[name, "plain"][0][1].sum() for name in ("bert_max-sparse", "bert_sum-sparse")
    ]
    assert firsts[0] != firsts[1], firsts


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_the_client_keeps_the_top_k_in_float16(
    server: RunningServer, expected: dict[tuple[str, str], Reference], protocol: str
) -> None:
    name = sorted({name for name, _ in expected})[0]
    url = server.grpc_url if protocol == "grpc" else server.http_url
    with EmbeddingClient(url, protocol, model=name) as client:  # type: ignore[arg-type]
        top = client.embed_sparse(SAMPLE_TEXTS, max_active_dims=TOP_K)
        full = client.embed_sparse(SAMPLE_TEXTS)
        half = client.embed_sparse(SAMPLE_TEXTS, dtype="float16")
        prompted = client.embed_sparse(SAMPLE_TEXTS, prompt_name="query")
    _assert_rows_match(top, expected[name, "top_k"])
    assert all(len(row.indices) <= TOP_K for row in top)
    _assert_rows_match(prompted, expected[name, "query"])
    # float16 values of the same entries, rounded to nearest.
    for row, single in zip(half, full, strict=True):
        assert row.values.dtype == np.float16 and single.values.dtype == np.float32
        np.testing.assert_array_equal(row.indices, single.indices)
        np.testing.assert_array_equal(row.values, single.values.astype(np.float16))


def test_many_texts_are_split_and_merged_in_order(
    server: RunningServer, expected: dict[tuple[str, str], Reference]
) -> None:
    name = sorted({name for name, _ in expected})[0]
    with EmbeddingClient(server.grpc_url, model=name) as client:
        rows = client.embed_sparse(SAMPLE_TEXTS * MANY)

    async def embed_async() -> list[SparseRow]:
        async with AsyncEmbeddingClient(server.http_url, "http", model=name) as client:
            return await client.embed_sparse(SAMPLE_TEXTS * MANY)

    _assert_rows_match(rows, expected[name, "plain"] * MANY)
    _assert_rows_match(asyncio.run(embed_async()), expected[name, "plain"] * MANY)


@pytest.mark.parametrize(
    ("texts", "parameters", "named"),
    [
        (["text"], {"max_active_dims": 0}, "invalid_parameter 'max_active_dims'"),
        (["text"], {"max_active_dims": "ten"}, "invalid_parameter 'max_active_dims'"),
        (["text"], {"dtype": "int8"}, "invalid_parameter 'dtype'"),
        ([LONG_TEXT], {"truncate": False}, "input_too_large"),
        (["text"], {"prompt_name": "nope"}, "invalid_parameter 'prompt_name'"),
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
    good = partial(_sparse_raw, client, name, SAMPLE_TEXTS)
    bad = partial(_sparse_raw, client, name, texts, parameters)
    assert_refused_alone(good, bad, named, len(SAMPLE_TEXTS))


def test_the_embedding_model_beside_them_still_embeds(server: RunningServer) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    embeddings = embed_float32(client, SAMPLE_TEXTS, model="embed")
    np.testing.assert_allclose(np.linalg.norm(embeddings, axis=1), 1.0, atol=1e-5)


def test_the_embed_sparse_command_prints_each_row(
    server: RunningServer, expected: dict[tuple[str, str], Reference]
) -> None:
    name = sorted({name for name, _ in expected})[0]
    texts = [text for text in SAMPLE_TEXTS if text][:3]
    command = [str(Path(sys.executable).parent / "embed-sparse"), f"--url={server.grpc_url}"]
    done = subprocess.run(
        [*command, f"--model={name}", *texts], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [line["index"] for line in lines] == list(range(len(texts)))
    rows = [(np.asarray(line["indices"]), np.asarray(line["values"])) for line in lines]
    reference = [expected[name, "plain"][SAMPLE_TEXTS.index(text)] for text in texts]
    _assert_rows_match(rows, reference)
    refused = subprocess.run(
        [*command, f"--model={name}", "--max-active-dims=0", "text"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 1 and "max_active_dims" in refused.stderr, refused.stderr


@pytest.fixture(scope="module")
def gateway(
    server: RunningServer, served_dir: Path, encoders: dict[str, Path]
) -> Iterator[RunningGateway]:
    with running_gateway(
        server.grpc_url,
        [("all-MiniLM-L6-v2", TOKENIZER_JSON)],
        served_dir / "gateway.log",
        extra_args=tuple(f"--sparse={name}" for name in encoders),
    ) as running:
        yield running


def test_tei_embed_sparse_through_the_gateway(
    gateway: RunningGateway, expected: dict[tuple[str, str], Reference]
) -> None:
    name = sorted({name for name, _ in expected})[0]
    texts = [text for text in SAMPLE_TEXTS if text]
    status, answer = post_json(gateway, "/embed_sparse", {"model": name, "inputs": texts})
    assert status == 200, answer
    rows = [
        (np.asarray([e["index"] for e in row]), np.asarray([e["value"] for e in row]))
        for row in answer
    ]
    _assert_rows_match(rows, [expected[name, "plain"][SAMPLE_TEXTS.index(t)] for t in texts])
    # Each value in a float32's shortest digits (at most 9 significant), as TEI writes them,
    # not in the 17 of the double it widens to.
    _, digits = post_json(gateway, "/embed_sparse", {"model": name, "inputs": texts}, str)
    written = [entry["value"] for row in digits for entry in row]
    significant = [
        len(v.lower().split("e")[0].strip("-").replace(".", "").strip("0")) for v in written
    ]
    assert max(significant) <= 9, [v for v, n in zip(written, significant, strict=True) if n > 9]
    # TEI's dense /embed serves the embedding model beside it, named or alone,
    # and so does its root route, as huggingface_hub's InferenceClient calls it.
    status, dense = post_json(gateway, "/embed", {"inputs": texts})
    assert status == 200 and len(dense) == len(texts) and len(dense[0]) == 384, dense
    hub = InferenceClient(base_url=gateway.url).feature_extraction(texts[0])
    np.testing.assert_allclose(hub, np.asarray(dense[:1], np.float32), atol=1e-6)


@pytest.mark.parametrize(
    ("route", "payload", "status", "named"),
    [
        ("/embed_sparse", {"inputs": "a"}, 400, "'model' is required: this gateway serves several"),
        ("/embed_sparse", {"model": "all-MiniLM-L6-v2", "inputs": "a"}, 400, "its task is 'embed'"),
        ("/embed_sparse", {"model": "<sparse>", "inputs": []}, 400, "'inputs'"),
        ("/embed", {"model": "<sparse>", "inputs": "a"}, 400, "its task is 'sparse'"),
        ("/v1/embeddings", {"model": "<sparse>", "input": "a"}, 400, "its task is 'sparse'"),
    ],
)
def test_bad_sparse_requests_are_refused_naming_the_field(
    gateway: RunningGateway,
    encoders: dict[str, Path],
    route: str,
    payload: dict[str, Any],
    status: int,
    named: str,
) -> None:
    assert len(encoders) > 1, "the 'serves several' case needs two"
    if payload.get("model") == "<sparse>":
        payload = {**payload, "model": sorted(encoders)[0]}
    answered, body = post_json(gateway, route, payload)
    assert answered == status, body
    message = body["error"]["message"] if route == "/v1/embeddings" else body["error"]
    assert named in message, message


def test_the_gateway_serves_the_catalog_by_name(
    server: RunningServer, served_dir: Path, catalog: Catalog
) -> None:
    """scripts/gateway.sh --catalog: every name of every entry, each on its
    task's routes, no path given."""
    with running_gateway(
        server.grpc_url,
        [],
        served_dir / "gateway-catalog.log",
        extra_args=(f"--catalog={catalog.path}",),
        program=(str(REPO_ROOT / "scripts" / "gateway.sh"),),
    ) as gateway:
        with urllib.request.urlopen(f"{gateway.url}/v1/models", timeout=30) as reply:
            listed = {model["id"] for model in json.loads(reply.read())["data"]}
        assert listed == {name for model in catalog.models for name in model.names}
        for name in ("embed", "all-MiniLM-L6-v2"):
            status, body = post_json(gateway, "/v1/embeddings", {"model": name, "input": "text"})
            assert status == 200 and len(body["data"][0]["embedding"]) == 384, body
        sparse = sorted(model.name for model in catalog.models if model.task == "sparse")
        status, body = post_json(gateway, "/embed_sparse", {"model": sparse[0], "inputs": "text"})
        assert status == 200 and body[0], body


def test_a_catalog_the_gateway_cannot_serve_is_refused_naming_why(tmp_path: Path) -> None:
    missing = tmp_path / "models.toml"
    missing.write_text('[[models]]\nname = "never-exported"\npath = "/nonexistent"\n')
    done = subprocess.run(
        [
            str(REPO_ROOT / "scripts" / "gateway.sh"),
            "--triton-url=127.0.0.1:1",
            f"--catalog={missing}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "never-exported" in done.stderr, done.stderr
