"""A multi-vector encoder's MUVERA entry point (`NAME_muvera`) served: one tritonserver with a
catalog of one random-weight MultiVectorEncoder (harness/multivector_models.py's bert_colbert,
named bert_colbert-mv so that its export is test_multivector.py's), whose encodings through
the client's embed_muvera over gRPC are model_common.muvera's of
MultiVectorEncoder.encode_query's and encode_document's vectors for the same texts, for both
roles and two parameter sets; a bad parameter refused alone, naming it; and the encodings'
dot products ranking documents as MaxSim does where MaxSim ranks them clearly."""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from embedding_client import EmbeddingClient
from embedding_requests import LONG_TEXT, SAMPLE_TEXTS, assert_refused_alone
from model_common.muvera import MuveraDraws, draw, encode_document, encode_query
from model_common.options import muvera_parameters

from harness.export_environment import run_in_export_environment
from harness.server import RunningServer, running_server
from server.catalog import Catalog
from server.paths import REPO_ROOT
from server.served_repository import prepare

NAME = "bert_colbert-mv"
TEXTS = [text for text in SAMPLE_TEXTS if text.strip()]
KINDS = ("query", "document")
# Two parameter sets: fastembed's defaults, and a small one without projection's rounding
# (k_sim, dim_proj, r_reps, seed as the client names them; dim_proj set per model below).
PARAMETER_SETS: list[dict[str, int]] = [{}, {"k_sim": 3, "r_reps": 4, "seed": 7}]
# The served token vectors are ONNX Runtime's, the reference's torch's: within float32
# rounding of each other, summed over a text's vectors.
TOLERANCE = 1e-4
# A token vector this near a hyperplane may fall on either side of it in the two runtimes,
# moving it to another partition: such a text is compared against the encoding of the served
# token vectors instead.
SIDE_MARGIN = 1e-4
QUERY = "how do late interaction models score a document?"
# A clear case on random weights: the query's own words, whose vectors match its own.
DOCUMENTS = [
    QUERY,
    "Late interaction models score each query token against every document token.",
    "A cross-encoder reads the query and the document together.",
    "Bananas are rich in potassium!",
    LONG_TEXT,
]


@pytest.fixture(scope="module")
def folder(multivector_folders: dict[str, Path]) -> Path:
    return multivector_folders["bert_colbert"]


@pytest.fixture(scope="module")
def served_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("muvera")


@pytest.fixture(scope="module")
def catalog(served_dir: Path, folder: Path) -> Catalog:
    """The one model, exported (or its export reused) and written to served_dir/served."""
    catalog_path = served_dir / "models.toml"
    catalog_path.write_text(f'[[models]]\nname = "{NAME}"\npath = "{folder}"\ninstances = 1\n')
    catalog = prepare(catalog_path, served_dir / "served")
    assert isinstance(catalog, Catalog), catalog
    return catalog


@pytest.fixture(scope="module")
def server(served_dir: Path, catalog: Catalog) -> Iterator[RunningServer]:
    with running_server(served_dir / "tritonserver.log", [served_dir / "served"]) as running:
        yield running


@pytest.fixture(scope="module")
def client(server: RunningServer) -> Iterator[EmbeddingClient]:
    with EmbeddingClient(server.grpc_url, model=NAME) as client:
        yield client


@pytest.fixture(scope="module")
def reference(folder: Path) -> dict[str, Any]:
    """encode_query's and encode_document's vectors for TEXTS by role, and QUERY's MaxSim
    scores against DOCUMENTS, from one run of tests/mv_reference.py."""
    model_dir = str(folder)
    jobs: list[dict[str, Any]] = [
        {"model_dir": model_dir, "texts": TEXTS, "role": kind} for kind in KINDS
    ]
    jobs.append({"model_dir": model_dir, "query": QUERY, "documents": DOCUMENTS})
    done = run_in_export_environment(
        [str(REPO_ROOT / "tests" / "mv_reference.py")], json.dumps(jobs)
    )
    answers = json.loads(done.stdout)
    found: dict[str, Any] = {
        kind: [np.asarray(each, np.float32) for each in answer]
        for kind, answer in zip(KINDS, answers, strict=False)
    }
    found["maxsim"] = np.asarray(answers[2])
    return found


def _draws(chosen: dict[str, int], dims: int) -> MuveraDraws:
    return draw(muvera_parameters({f"muvera_{key}": value for key, value in chosen.items()}), dims)


def _encoded(vectors: np.ndarray, kind: str, draws: MuveraDraws) -> np.ndarray:
    encode = encode_query if kind == "query" else encode_document
    return encode(vectors, draws).astype(np.float32)


def _near_a_hyperplane(vectors: np.ndarray, draws: MuveraDraws) -> bool:
    return bool((np.abs(vectors @ draws.hyperplanes) < SIDE_MARGIN).any())


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("chosen", PARAMETER_SETS, ids=["defaults", "small"])
def test_the_encodings_are_muveras_of_the_reference_vectors(
    client: EmbeddingClient, reference: dict[str, Any], kind: str, chosen: dict[str, int]
) -> None:
    dims = reference[kind][0].shape[1]
    # The small set keeps every dimension: no projection.
    chosen = chosen | ({"dim_proj": dims} if chosen else {})
    draws = _draws(chosen, dims)
    served = client.embed_muvera(TEXTS, kind=kind, **chosen)  # type: ignore[arg-type]
    assert served.shape == (len(TEXTS), draws.parameters.width) and served.dtype == np.float32
    token_vectors = client.embed_multi(TEXTS, kind=kind)
    near = 0
    for index, vectors in enumerate(reference[kind]):
        if _near_a_hyperplane(vectors, draws):
            near += 1
            vectors = token_vectors[index]
        expected = _encoded(vectors, kind, draws)
        np.testing.assert_allclose(
            served[index], expected, rtol=0, atol=TOLERANCE, err_msg=str(index)
        )
    # The fallback is for the rare text, not the rule.
    assert near <= len(TEXTS) // 4, near


def test_a_row_is_one_vector_in_any_dtype(client: EmbeddingClient) -> None:
    floats = client.embed_muvera(TEXTS[:2], kind="query")
    halves = client.embed_muvera(TEXTS[:2], kind="query", dtype="float16")
    np.testing.assert_allclose(halves.astype(np.float32), floats, rtol=1e-3, atol=1e-3)
    packed = client.embed_muvera(TEXTS[:2], kind="query", dtype="ubinary")
    assert packed.shape == (2, floats.shape[1] // 8) and packed.dtype == np.uint8


def _raw(url: str, parameters: dict[str, Any]) -> np.ndarray:
    with grpcclient.InferenceServerClient(url) as raw:
        values = np.array([[text.encode()] for text in TEXTS], dtype=np.object_)
        tensor = grpcclient.InferInput("TEXT", list(values.shape), "BYTES")
        tensor.set_data_from_numpy(values)
        result = raw.infer(f"{NAME}_muvera", [tensor], parameters=parameters)
        answer = result.as_numpy("MULTIVECTOR")
        assert answer is not None
        return answer


@pytest.mark.parametrize(
    ("parameters", "named"),
    [
        ({"muvera_k_sim": 9}, "muvera_k_sim"),
        ({"muvera_dim_proj": 100000}, "muvera_dim_proj"),
        ({"muvera_r_reps": 0}, "muvera_r_reps"),
        ({"muvera_seed": "42"}, "muvera_seed"),
    ],
)
def test_a_bad_parameter_is_refused_naming_it_while_others_answer(
    server: RunningServer, parameters: dict[str, Any], named: str
) -> None:
    good, bad = (partial(_raw, server.grpc_url, each) for each in ({}, parameters))
    assert_refused_alone(good, bad, f"invalid_parameter '{named}'", len(TEXTS))


def test_the_encodings_rank_documents_as_maxsim_does(
    client: EmbeddingClient, reference: dict[str, Any]
) -> None:
    """A loose check: MaxSim's best document is among the encodings' best two, where MaxSim
    ranks it clearly first (random weights may rank every document alike)."""
    maxsim = reference["maxsim"]
    best, second = np.sort(maxsim)[::-1][:2]
    if best - second < 0.02 * abs(best):
        pytest.skip(f"MaxSim ranks no document clearly first on these weights: {maxsim}")
    query = client.embed_muvera([QUERY], kind="query")[0]
    documents = client.embed_muvera(DOCUMENTS, kind="document")
    scores = documents @ query
    assert int(np.argmax(maxsim)) in np.argsort(scores)[::-1][:2], (maxsim, scores)
