"""Fixtures: a real tritonserver on free loopback ports (the shipped models,
and a variant that refuses bursts), reference embeddings from
sentence-transformers on the original weights, and the random-weight model of
each family, the random-weight rerankers and the random-weight sparse
encoders, built once for every module that serves or exports them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from embedding_requests import SAMPLE_TEXTS
from tritonclient.grpc import model_config_pb2

from harness import cross_encoder_models, multivector_models, sparse_encoder_models
from harness.export_environment import run_in_export_environment
from harness.family_models import FAMILY_NAMES, build_in_export_environment
from harness.priority import INTERACTIVE
from harness.repository import repository_variant
from harness.server import RunningServer, running_server
from server.paths import ONNX_MODEL_DIR, REPO_ROOT
from tests.family_catalog import FamilyCatalog, family_catalog


@pytest.fixture(scope="session")
def triton_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    log_path = tmp_path_factory.mktemp("triton") / "tritonserver.log"
    with running_server(log_path) as server:
        yield server


def _one_waiting_request(config: model_config_pb2.ModelConfig) -> None:
    config.dynamic_batching.priority_queue_policy[INTERACTIVE].max_queue_size = 1


@pytest.fixture(scope="session")
def one_slot_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """The shipped models with an interactive embedder queue of one request:
    a burst past what its two instances take at once is refused with
    UNAVAILABLE, however fast the machine."""
    workdir = tmp_path_factory.mktemp("one_slot")
    repository = repository_variant(
        workdir / "model_repository", {"embedder": _one_waiting_request}
    )
    with running_server(workdir / "tritonserver.log", [repository]) as server:
        yield server


def sentence_transformers_embed(texts: list[str]) -> np.ndarray:
    """sentence-transformers lives in the export environment (torch), so it
    runs there, in its own process."""
    export_info = json.loads((ONNX_MODEL_DIR / "export.json").read_text())
    request = json.dumps({"model_dir": export_info["model_dir"], "texts": texts})
    completed = run_in_export_environment([str(REPO_ROOT / "tests" / "st_reference.py")], request)
    return np.asarray(json.loads(completed.stdout), dtype=np.float32)


@pytest.fixture(scope="session")
def reference_embeddings() -> np.ndarray:
    return sentence_transformers_embed(SAMPLE_TEXTS)


@pytest.fixture(scope="session")
def family_folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A sentence-transformers folder per family (harness/family_models.py),
    random weights; the tests copy a folder before they change it."""
    out = tmp_path_factory.mktemp("families")
    build_in_export_environment(out)
    return {name: out / name for name in FAMILY_NAMES}


@pytest.fixture(scope="session")
def family_exports(
    family_folders: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> FamilyCatalog:
    """Every family's model exported through a catalog, once for the session."""
    return family_catalog(family_folders, tmp_path_factory.mktemp("family_catalog"))


@pytest.fixture(scope="session")
def cross_encoder_folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A one-label CrossEncoder folder per test reranker (harness/cross_encoder_models.py):
    bert (sigmoid, token type ids), xlmr (sigmoid, one token type) and bert_identity (raw
    logits); random weights; the tests copy a folder before they change it."""
    out = tmp_path_factory.mktemp("cross_encoders")
    cross_encoder_models.build_in_export_environment(out)
    return {name: out / name for name in cross_encoder_models.CROSS_ENCODER_NAMES}


@pytest.fixture(scope="session")
def multivector_folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A MultiVectorEncoder folder per test multi-vector encoder (harness/multivector_models.py):
    bert_colbert (prompts, a fixed query expansion, a skip-list), bert_plain (none of them),
    modernbert_colbert (a min expansion it attends to) and bert_pooled (HierarchicalTokenPooling
    of its documents); the tests copy a folder before they change it."""
    return multivector_models.build_in_export_environment(
        tmp_path_factory.mktemp("multivector_encoders")
    )


@pytest.fixture(scope="session")
def sparse_encoder_folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A SparseEncoder folder per test sparse encoder (harness/sparse_encoder_models.py):
    bert_max (max pooling, a query prompt) and bert_sum (sum pooling), the same random weights;
    the tests copy a folder before they change it."""
    out = tmp_path_factory.mktemp("sparse_encoders")
    sparse_encoder_models.build_in_export_environment(out)
    return {name: out / name for name in sparse_encoder_models.SPARSE_ENCODER_NAMES}


@pytest.fixture(scope="session")
def m3_folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The BGE-M3-shaped folder (harness/m3_models.py: bge_m3, XLM-RoBERTa with the ColBERT and
    sparse heads beside it), random weights; the tests copy it before they change it."""
    # Imported here: this fixture is appended after the module's other definitions.
    from harness import m3_models

    return m3_models.build_in_export_environment(tmp_path_factory.mktemp("m3_models"))
