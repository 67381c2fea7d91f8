"""One tritonserver serving a catalog of the packaged MiniLM and a small
random-weight model of each family (harness/family_models.py: BERT with a
Dense module and CLS pooling, XLM-RoBERTa with a Unigram tokenizer, MPNet,
ModernBERT, a Qwen3-style decoder with last-token pooling and an EOS
post-processor), each answering by its name like sentence-transformers on
the same weights: with and without prompts, in both truncation directions,
over gRPC and HTTP, with requests to all models at once."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from embedding_requests import LONG_TEXT, Client, embed_float32
from tritonclient.utils import InferenceServerException

from export.engine_choice import MIN_COSINE
from harness.export_environment import run_in_export_environment
from harness.gateway import running_gateway
from harness.server import RunningServer, running_server
from server.paths import REPO_ROOT
from tests.family_catalog import FAMILY_ENGINES, FamilyCatalog, catalog_name

TEXTS = [
    "How do I reset my password?",
    "Triton serves several embedding models from one process.",
    "Café naïve façade: résumé of the crème brûlée.",
    "東京は日本の首都です。",
    "",
    LONG_TEXT,
]


@dataclass(frozen=True)
class Family:
    name: str  # the catalog name
    folder: Path
    prompts: dict[str, str]


@pytest.fixture(scope="module")
def families(family_folders: dict[str, Path]) -> dict[str, Family]:
    found = {}
    for family in FAMILY_ENGINES:
        folder = family_folders[family]
        settings = folder / "config_sentence_transformers.json"
        prompts = json.loads(settings.read_text()).get("prompts", {}) if settings.exists() else {}
        found[family] = Family(catalog_name(family), folder, prompts)
    return found


@pytest.fixture(scope="module")
def server(
    family_exports: FamilyCatalog, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    log = tmp_path_factory.mktemp("catalog") / "tritonserver.log"
    with running_server(log, [family_exports.served]) as running:
        yield running


def _references(jobs: list[dict[str, Any]]) -> list[np.ndarray]:
    """sentence-transformers on the original weights, all jobs in one
    process of the export environment."""
    done = run_in_export_environment(
        [str(REPO_ROOT / "tests" / "st_reference.py")], json.dumps(jobs)
    )
    return [np.asarray(rows, dtype=np.float32) for rows in json.loads(done.stdout)]


def _cosines(served: np.ndarray, reference: np.ndarray) -> np.ndarray:
    return np.sum(served * reference, axis=1)


# What each served request sets, and the sentence-transformers call it
# must match: (request parameters, reference job keys).
def _variants(family: Family) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    variants: list[tuple[dict[str, Any], dict[str, Any]]] = [
        ({}, {}),
        ({"truncation_direction": "left"}, {"truncation_side": "left"}),
    ]
    for name in family.prompts:
        variants.append(({"prompt_name": name}, {"prompt_name": name}))
    if "query" in family.prompts:
        variants.append(({"input_type": "query"}, {"prompt_name": "query"}))
    return variants


@pytest.fixture(scope="module")
def expected(families: dict[str, Family]) -> dict[tuple[str, str], np.ndarray]:
    """Reference embeddings by (catalog name, request parameters as JSON)."""
    keys, jobs = [], []
    for family in families.values():
        for parameters, job in _variants(family):
            keys.append((family.name, json.dumps(parameters, sort_keys=True)))
            jobs.append({"model_dir": str(family.folder), "texts": TEXTS, **job})
    return dict(zip(keys, _references(jobs), strict=True))


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_each_family_answers_like_sentence_transformers(
    server: RunningServer,
    families: dict[str, Family],
    expected: dict[tuple[str, str], np.ndarray],
    protocol: str,
) -> None:
    client: Client = (
        grpcclient.InferenceServerClient(server.grpc_url)
        if protocol == "grpc"
        else httpclient.InferenceServerClient(server.http_url)
    )
    worst = {}
    for family in families.values():
        for parameters, _ in _variants(family):
            key = (family.name, json.dumps(parameters, sort_keys=True))
            served = embed_float32(client, TEXTS, family.name, **parameters)
            worst[key] = float(_cosines(served, expected[key]).min())
    assert min(worst.values()) >= MIN_COSINE, worst


def test_texts_differ_so_the_comparison_means_something(
    expected: dict[tuple[str, str], np.ndarray], families: dict[str, Family]
) -> None:
    for family in families.values():
        rows = expected[(family.name, "{}")][:4]
        similarity = rows @ rows.T
        off_diagonal = similarity[~np.eye(len(rows), dtype=bool)]
        assert off_diagonal.max() < 0.99, (family.name, similarity)


def test_prompts_and_truncation_change_the_embedding(
    server: RunningServer, families: dict[str, Family]
) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    for family in families.values():
        plain = embed_float32(client, [LONG_TEXT], family.name)
        left = embed_float32(client, [LONG_TEXT], family.name, truncation_direction="left")
        assert float(plain[0] @ left[0]) < 0.999, family.name
        for name in family.prompts:
            prompted = embed_float32(client, ["a short query"], family.name, prompt_name=name)
            bare = embed_float32(client, ["a short query"], family.name, input_type="document")
            if family.prompts[name] != family.prompts.get("document", ""):
                assert float(prompted[0] @ bare[0]) < 0.999, (family.name, name)


def test_every_model_at_once_answers_as_it_does_alone(
    server: RunningServer, families: dict[str, Family]
) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    names = ["embed", *(family.name for family in families.values())] * 4
    alone = {name: embed_float32(client, TEXTS, name) for name in set(names)}
    with ThreadPoolExecutor(len(names)) as pool:
        together = list(pool.map(lambda name: embed_float32(client, TEXTS, name), names))
    for name, rows in zip(names, together, strict=True):
        assert float(_cosines(rows, alone[name]).min()) >= MIN_COSINE, name


def test_an_unknown_prompt_is_refused_with_the_models_choices(
    server: RunningServer, families: dict[str, Family]
) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    family = families["xlmr"]
    with pytest.raises(InferenceServerException) as refused:
        embed_float32(client, ["text"], family.name, prompt_name="summary")
    message = refused.value.message()
    assert "invalid_parameter 'prompt_name'" in message, message
    for name in family.prompts:
        assert name in message, message


def test_truncate_false_refuses_an_over_long_text(
    server: RunningServer, families: dict[str, Family]
) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    with pytest.raises(InferenceServerException) as refused:
        embed_float32(client, [LONG_TEXT], families["qwen3"].name, truncate=False)
    assert "input_too_large" in refused.value.message()
    assert embed_float32(client, ["short"], families["qwen3"].name, truncate=False).shape[0] == 1


def test_the_token_entry_point_serves_each_model(
    server: RunningServer, families: dict[str, Family]
) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    for family in families.values():
        ids = np.array([[1, 5, 9, 2]], dtype=np.int64)
        inputs = [
            grpcclient.InferInput("INPUT_IDS", list(ids.shape), "INT64"),
            grpcclient.InferInput("ATTENTION_MASK", list(ids.shape), "INT64"),
        ]
        inputs[0].set_data_from_numpy(ids)
        inputs[1].set_data_from_numpy(np.ones_like(ids))
        rows = client.infer(f"{family.name}_tokens", inputs).as_numpy("EMBEDDING")
        assert rows.shape[0] == 1 and rows.shape[1] > 0, family.name


def test_the_gateway_serves_each_model_by_name_with_its_default_prompt(
    server: RunningServer,
    family_exports: FamilyCatalog,
    families: dict[str, Family],
    expected: dict[tuple[str, str], np.ndarray],
    tmp_path: Path,
) -> None:
    # The gateway tokenizes texts itself: the default prompt (qwen3's) must
    # be applied there as the server's tokenizer applies it.
    served = family_exports.served
    models = [
        (family.name, served / f"{family.name}.tokenizer" / "1" / "tokenizer.json")
        for family in families.values()
    ]
    with running_gateway(server.grpc_url, models, tmp_path / "gateway.log") as gateway:
        listed = json.loads(urllib.request.urlopen(f"{gateway.base_url}/models").read())
        assert [model["id"] for model in listed["data"]] == [name for name, _ in models]
        # OpenAI's API refuses empty inputs.
        kept = [index for index, text in enumerate(TEXTS) if text]
        for family in families.values():
            texts = [TEXTS[index] for index in kept]
            body = json.dumps({"model": family.name, "input": texts}).encode()
            request = urllib.request.Request(
                f"{gateway.base_url}/embeddings", body, {"Content-Type": "application/json"}
            )
            data = json.loads(urllib.request.urlopen(request).read())["data"]
            served = np.asarray([row["embedding"] for row in data], dtype=np.float32)
            reference = expected[(family.name, "{}")][kept]
            assert float(_cosines(served, reference).min()) >= MIN_COSINE, family.name
