"""The OpenVINO embedder (model_repository/openvino_cpu/embedder) on a real
server: its export record, each precision it serves against
sentence-transformers on held-out texts, a precision it cannot serve refused
at load with a message naming the parameter, OpenVINO's model cache reused
by copies and reloads, and the launcher's default following the export's measurement.

The server holds copies of the embedder under other names, each with its own
precision; the copies added after the start are loaded through Triton's
repository API (explicit model control), where the launcher's watchdog,
which reloads the models it saw at the start, leaves them alone."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from model_common.processor import this_processor
from tritonclient.utils import InferenceServerException

from export.engine_choice import MIN_COSINE
from harness.requests import token_inputs
from harness.server import RunningServer, running_server
from perf.ceiling import serving_tokenizer, tokenize
from perf.openvino_shape_cache import SHAPES, measure_apart
from perf.workloads import texts
from server import paths
from server.paths import OPENVINO_CPU_REPOSITORY
from tests.conftest import sentence_transformers_embed
from tests.embedding_requests import SAMPLE_TEXTS
from tests.export_records import assert_the_recorded_choices_replay

EMBEDDER = OPENVINO_CPU_REPOSITORY / "embedder"
RECORD = json.loads((EMBEDDER / "1" / "export.json").read_text())["openvino"]
# bfloat16 keeps 8 bits of mantissa: forced on a model whose export refused it (the random
# Qwen3 measured 0.99968 on a bf16 Xeon), it still stays this close to float32.
BF16_MIN_COSINE = 0.999
# Held out from the export's check texts: prose of three lengths (the long
# ones truncated at the max length), and the sample texts (scripts, emoji,
# the empty text).
HELD_OUT = texts("query", 16) + texts("short", 16) + texts("long", 4) + SAMPLE_TEXTS


def _embedder_copy(root: Path, name: str, precision: str) -> None:
    """The shipped embedder folder as model `name`, with `precision`."""
    target = root / name
    (target / "1").mkdir(parents=True)
    for file in (EMBEDDER / "1").iterdir():
        if file.is_file():
            (target / "1" / file.name).symlink_to(file.resolve())
    config = (EMBEDDER / "config.pbtxt").read_text()
    shipped = 'key: "precision"\n  value: { string_value: "auto" }'
    assert config.count(shipped) == 1
    (target / "config.pbtxt").write_text(
        config.replace(shipped, shipped.replace('"auto"', f'"{precision}"'))
    )


@pytest.fixture(scope="module")
def cache_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache_home")


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("openvino_repository")
    _embedder_copy(root, "embedder_f32", "f32")
    _embedder_copy(root, "embedder_auto", "auto")
    return root


@pytest.fixture(scope="module")
def server(repository: Path, cache_home: Path) -> Iterator[RunningServer]:
    # The stubs inherit the server's environment: the model cache goes here.
    previous = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(cache_home)
    try:
        with running_server(repository.parent / "tritonserver.log", [repository]) as running:
            yield running
    finally:
        if previous is None:
            os.environ.pop("XDG_CACHE_HOME")
        else:
            os.environ["XDG_CACHE_HOME"] = previous


@pytest.fixture
def client(server: RunningServer) -> Iterator[grpcclient.InferenceServerClient]:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        yield client


def _embed(client: grpcclient.InferenceServerClient, model: str, batch: list[str]) -> np.ndarray:
    (tokens,) = tokenize(serving_tokenizer(), [batch])
    inputs = token_inputs(grpcclient, tokens.input_ids, tokens.attention_mask)
    return client.infer(model, inputs).as_numpy("EMBEDDING")


def test_the_export_checked_the_precision_it_records() -> None:
    assert_the_recorded_choices_replay(RECORD)


@pytest.mark.parametrize("model", ["embedder_f32", "embedder_auto"])
def test_each_precision_keeps_the_cosine_bar_on_held_out_texts(
    client: grpcclient.InferenceServerClient, model: str
) -> None:
    reference = sentence_transformers_embed(HELD_OUT)
    # Four texts per request, so rows of different lengths share executions.
    served = np.concatenate(
        [_embed(client, model, HELD_OUT[start : start + 4]) for start in range(0, len(HELD_OUT), 4)]
    )
    cosines = np.sum(served * reference, axis=1)
    assert cosines.min() >= MIN_COSINE, dict(zip(HELD_OUT, cosines.tolist(), strict=True))


def test_auto_serves_the_recorded_precision(client: grpcclient.InferenceServerClient) -> None:
    """bf16 products round differently from f32 ones: where auto serves
    bf16, its embeddings are close to f32's but not equal."""
    batch = texts("short", 4)
    f32, auto = _embed(client, "embedder_f32", batch), _embed(client, "embedder_auto", batch)
    if RECORD["precision"] == "bf16":
        assert not np.array_equal(f32, auto)
        assert np.sum(f32 * auto, axis=1).min() >= MIN_COSINE
    else:
        np.testing.assert_array_equal(f32, auto)


def test_concurrent_requests_embed_as_alone(server: RunningServer) -> None:
    """A request's rows are split across its instance's streams, and
    concurrent requests merged into one execute: each row gets the
    embedding it gets alone."""
    batches = [texts("short", 24)[start : start + 3] for start in range(0, 24, 3)]
    with grpcclient.InferenceServerClient(server.grpc_url) as alone:
        expected = [_embed(alone, "embedder_f32", batch) for batch in batches]

    def embed(batch: list[str]) -> np.ndarray:
        with grpcclient.InferenceServerClient(server.grpc_url) as client:
            return _embed(client, "embedder_f32", batch)

    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(embed, batches * 4))
    for answer, wanted in zip(answers, expected * 4, strict=True):
        np.testing.assert_allclose(answer, wanted, atol=1e-5)


def _assert_load_refused(
    client: grpcclient.InferenceServerClient, repository: Path, precision: str, reason: str
) -> None:
    """A copy of the embedder with `precision` fails its load with `reason`, and the
    embedders already served stay served."""
    # Added after the start: the server loads every model it finds at start.
    name = f"embedder_refused_{precision}"
    _embedder_copy(repository, name, precision)
    with pytest.raises(InferenceServerException, match=reason):
        client.load_model(name)
    assert not client.is_model_ready(name)
    assert client.is_model_ready("embedder_f32")


def test_an_unknown_precision_fails_the_load_with_its_name(
    client: grpcclient.InferenceServerClient, repository: Path
) -> None:
    _assert_load_refused(client, repository, "fp64", "parameter 'precision' is 'fp64'")


@pytest.mark.skipif(
    not this_processor().has_bf16,
    reason=f"needs bfloat16 instructions (avx512_bf16 or amx_bf16); this processor is "
    f"class {this_processor().cls}: the float32 path is tested instead (embedder_f32, and "
    "test_forcing_bf16_without_bfloat16_fails_the_load_with_the_reason)",
)
def test_forced_bf16_serves_bfloat16(
    client: grpcclient.InferenceServerClient, repository: Path
) -> None:
    """An operator who forces bf16 gets bf16, whatever the export measured: rows that differ
    from float32's, within bfloat16's rounding of them. The 0.9999 bar is the export's to
    keep for auto (test_each_precision_keeps_the_cosine_bar_on_held_out_texts), and a
    processor where bf16 misses it must not fail this test."""
    _embedder_copy(repository, "embedder_bf16", "bf16")
    client.load_model("embedder_bf16")
    try:
        batch = texts("short", 8) + SAMPLE_TEXTS
        bf16, f32 = _embed(client, "embedder_bf16", batch), _embed(client, "embedder_f32", batch)
        assert not np.array_equal(bf16, f32)
        cosines = np.sum(bf16 * f32, axis=1)
        assert cosines.min() >= BF16_MIN_COSINE, dict(zip(batch, cosines.tolist(), strict=True))
    finally:
        client.unload_model("embedder_bf16")


@pytest.mark.skipif(
    this_processor().has_bf16,
    reason="this processor has bfloat16: test_forced_bf16_serves_bfloat16 serves it",
)
def test_forcing_bf16_without_bfloat16_fails_the_load_with_the_reason(
    client: grpcclient.InferenceServerClient, repository: Path
) -> None:
    _assert_load_refused(client, repository, "bf16", "this processor has no bfloat16")


def test_copies_and_reloads_use_the_model_cache(
    client: grpcclient.InferenceServerClient, repository: Path, cache_home: Path
) -> None:
    """The server's start compiled each precision once into its own cache
    folder; a copy of the model in another folder (linking the same IR) and
    a reload load that blob and write nothing."""
    cache = cache_home / "triton-embedding" / "openvino"
    blobs = {path: path.stat().st_mtime_ns for path in cache.glob("*/*.blob")}
    folders = {path.parent.name for path in blobs}
    assert {folder.split("-")[1] for folder in folders} == {"f32", RECORD["precision"]}, folders
    _embedder_copy(repository, "embedder_cached", "f32")
    client.load_model("embedder_cached")
    client.unload_model("embedder_cached")
    client.load_model("embedder_cached")
    assert {path: path.stat().st_mtime_ns for path in cache.glob("*/*.blob")} == blobs
    batch = texts("query", 4)
    np.testing.assert_array_equal(
        _embed(client, "embedder_cached", batch), _embed(client, "embedder_f32", batch)
    )


def test_the_launcher_serves_the_engine_the_export_measured_faster(tmp_path: Path) -> None:
    expected = (
        paths.OPENVINO_CPU_REPOSITORY
        if RECORD["faster_engine"] == "openvino"
        else paths.ONNX_CPU_REPOSITORY
    )
    assert paths.default_cpu_embedder() == expected
    assert paths.default_repositories()[1] == expected
    # Without a complete OpenVINO export, ONNX Runtime serves.
    partial = tmp_path / "openvino_cpu"
    shutil.copytree(OPENVINO_CPU_REPOSITORY, partial, ignore=shutil.ignore_patterns("model.xml"))
    assert paths.faster_cpu_engine(tmp_path, "embed") == "onnxruntime"


# What a hundred new input shapes, met after the cache is full, may add to
# the stage: OpenVINO's default cache added 150-190 MiB a hundred, the
# stage's adds none (perf/results/debian12-2core/openvino_shape_cache.md).
NEW_SHAPES_GROWTH_MIB = 25


def test_new_input_shapes_do_not_grow_the_embedders_memory() -> None:
    """Requests bring a new (batch, length) pair at will: the graph compiled
    as the stages compile it must not keep something for every shape, or
    the stage grows for as long as it serves (the soak found it)."""
    cost = measure_apart(EMBEDDER / "1" / "model.xml", "f32", None, SHAPES)
    assert cost.rss_mib[-1] - cost.rss_mib[-2] <= NEW_SHAPES_GROWTH_MIB, cost
