"""The model catalog (server/catalog.py) and the repository written from it
(server/served_repository.py): what a catalog may say, what it is refused
for, and the default catalog served by a real tritonserver under today's
names."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from embedding_requests import SAMPLE_TEXTS, embed_float32

from export.engine_choice import MIN_COSINE
from harness.repository import read_config
from harness.server import RunningServer, running_server
from server.catalog import DEFAULT_CATALOG, Catalog, read_catalog
from server.paths import SHARED_REPOSITORY
from server.served_repository import prepare


def _catalog(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "models.toml"
    path.write_text(text)
    return path


def _folder(tmp_path: Path, name: str) -> Path:
    """A folder that looks like a sentence-transformers one to the catalog."""
    folder = tmp_path / name
    folder.mkdir()
    (folder / "modules.json").write_text("[]")
    return folder


def test_the_default_catalog_names_the_packaged_minilm_and_todays_names() -> None:
    catalog = read_catalog(DEFAULT_CATALOG)
    assert isinstance(catalog, Catalog), catalog
    (model,) = catalog.models
    assert model.path is None and model.names == ("all-MiniLM-L6-v2", "embed")
    assert {"embed", "embed_tokens", "all-MiniLM-L6-v2_tokens"} <= set(model.triton_models())


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ('[[models]]\nname = "a"\n[[models]]\nname = "a"\n', ["'a'", "already"]),
        ('[[models]]\nname = "a"\n[[models]]\nname = "b"\naliases = ["a"]\n', ["'b'", "'a'"]),
        ('[[models]]\nname = "serializer"\n', ["serializer"]),
        ('[[models]]\nname = "a"\n[[models]]\nname = "b"\n', ["'b'", "'tokenizer'"]),
        ('[[models]]\nname = "bad/name"\n', ["'bad/name'", "not a name Triton can serve"]),
        ('[[models]]\nname = ".hidden"\n', ["'.hidden'", "not a name Triton"]),
        ('[[models]]\nname = "a"\npath = "nowhere"\n', ["'a'", "nowhere", "modules.json"]),
        ('[[models]]\nname = "a"\nengine = "cuda"\n', ["'a'", "'engine'", "'cuda'"]),
        ('[[models]]\nname = "a"\ninstances = 0\n', ["'a'", "'instances'"]),
        ('[[models]]\nname = "a"\nbatch = 3\n', ["'a'", "unknown keys ['batch']"]),
        ('[[models]]\npath = "x"\n', ["#1", "'name' is required"]),
        ('[[models]]\nname = "a"\nhub = "o/m"\npath = "x"\n', ["'a'", "'path' and 'hub'"]),
        ('[[models]]\nname = "a"\nhub = "no-owner"\n', ["'a'", "'no-owner'", "'owner/name'"]),
        ('[[models]]\nname = "a"\nhub = "o/m"\nrevision = 3\n', ["'a'", "'revision'"]),
        ('[[models]]\nname = "a"\nhub = "o/m"\ntrust_pickle = 1\n', ["'a'", "'trust_pickle'"]),
        ('[[models]]\nname = "a"\nrevision = "v1"\n', ["'a'", "'revision'", "'hub' entry"]),
        ("models = 3\n", ["no [[models]] entry"]),
        ("[[models]\n", ["not valid TOML"]),
    ],
)
def test_a_catalog_that_cannot_be_served_is_refused_naming_the_entry(
    tmp_path: Path, text: str, named: list[str]
) -> None:
    refusal = read_catalog(_catalog(tmp_path, text))
    assert isinstance(refusal, str), refusal
    for part in named:
        assert part in refusal, refusal


def test_a_hub_entry_is_served_from_the_cache_alone_where_the_launcher_put_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The edge and the gateway read a catalog after the launcher downloaded
    its Hub models: they find each revision's snapshot through the cache's
    refs, and refuse, naming the id, one the cache lacks."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    text = '[[models]]\nname = "m"\nhub = "org/m"\nrevision = "v1"\n'
    refusal = read_catalog(_catalog(tmp_path, text))
    assert isinstance(refusal, str) and "'org/m'" in refusal and "'v1'" in refusal, refusal
    repo = tmp_path / "cache" / "models--org--m"
    commit = "0123456789abcdef0123456789abcdef01234567"
    (repo / "snapshots").mkdir(parents=True)
    snapshot = _folder(repo / "snapshots", commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "v1").write_text(commit)
    catalog = read_catalog(_catalog(tmp_path, text))
    assert isinstance(catalog, Catalog), catalog
    assert catalog.models[0].path == snapshot and catalog.models[0].hub is not None


def test_paths_are_read_from_the_catalogs_folder(tmp_path: Path) -> None:
    folder = _folder(tmp_path, "e5")
    catalog = read_catalog(_catalog(tmp_path, '[[models]]\nname = "e5"\npath = "e5"\n'))
    assert isinstance(catalog, Catalog), catalog
    assert catalog.models[0].path == folder.resolve()


def test_a_folder_the_export_cannot_serve_is_refused_at_start(tmp_path: Path) -> None:
    folder = _folder(tmp_path, "maxpool")
    (folder / "modules.json").write_text(
        json.dumps([{"idx": 0, "name": "0", "path": "", "type": "some.custom.Module"}])
    )
    catalog = _catalog(tmp_path, '[[models]]\nname = "maxpool"\npath = "maxpool"\n')
    refusal = prepare(catalog, tmp_path / "served")
    assert isinstance(refusal, str), refusal
    assert "entry 'maxpool'" in refusal and "some.custom.Module" in refusal, refusal
    assert not (tmp_path / "served").exists()


def _saved_as(tmp_path: Path, model_type: object) -> None:
    """A folder "m" as sentence-transformers saves a model of model_type."""
    folder = _folder(tmp_path, "m")
    (folder / "config_sentence_transformers.json").write_text(
        json.dumps({"model_type": model_type})
    )


@pytest.mark.parametrize(
    ("model_type", "entry", "named"),
    [
        (
            "CrossEncoder",
            'engine = "tensorrt"\n',
            ["entry 'm'", "the tensorrt engine serves the packaged model only"],
        ),
        (
            "SparseEncoder",
            'engine = "openvino"\n',
            ["entry 'm'", "SparseEncoder", "onnxruntime only"],
        ),
        ("Mystery", "", ["entry 'm'", "'Mystery'", "SentenceTransformer, CrossEncoder"]),
        (["CrossEncoder"], "", ["entry 'm'", "model_type ['CrossEncoder']"]),
        ("SentenceTransformer", 'task = "rerank"\n', ["'task' is 'rerank'", "SentenceTransformer"]),
        ("SentenceTransformer", 'task = "classify"\n', ["'task' is 'classify'", "'sparse'"]),
    ],
)
def test_a_folder_is_served_for_what_it_holds_or_refused_naming_it(
    tmp_path: Path, model_type: object, entry: str, named: list[str]
) -> None:
    _saved_as(tmp_path, model_type)
    refusal = read_catalog(_catalog(tmp_path, f'[[models]]\nname = "m"\npath = "m"\n{entry}'))
    assert isinstance(refusal, str), refusal
    for part in named:
        assert part in refusal, refusal


@pytest.mark.parametrize("entry", ["", 'task = "embed"\n'])
def test_a_bi_encoder_folder_is_served_with_or_without_its_task_named(
    tmp_path: Path, entry: str
) -> None:
    _saved_as(tmp_path, "SentenceTransformer")
    catalog = read_catalog(_catalog(tmp_path, f'[[models]]\nname = "m"\npath = "m"\n{entry}'))
    assert isinstance(catalog, Catalog), catalog


def test_the_packaged_model_is_a_bi_encoder(tmp_path: Path) -> None:
    refusal = read_catalog(_catalog(tmp_path, '[[models]]\nname = "a"\ntask = "sparse"\n'))
    assert isinstance(refusal, str) and "'task' is 'sparse'" in refusal, refusal


def test_served_configs_come_from_the_shipped_ones_with_the_models_names(tmp_path: Path) -> None:
    served = tmp_path / "served"
    catalog = prepare(DEFAULT_CATALOG, served)
    assert isinstance(catalog, Catalog), catalog
    (model,) = catalog.models
    # The packaged model's stages keep the shipped names.
    assert (model.tokenizer, model.engine_stage) == ("tokenizer", "embedder")
    tokenizer = read_config(served / "tokenizer" / "config.pbtxt")
    assert tokenizer.parameters["embedder_model"].string_value == "embedder"
    for entry in ("embed", "all-MiniLM-L6-v2", "embed_tokens", "all-MiniLM-L6-v2_tokens"):
        steps = read_config(served / entry / "config.pbtxt").ensemble_scheduling.step
        assert [step.model_name for step in steps][-1] == "serializer"
        assert {step.model_name for step in steps[:-1]} <= {"tokenizer", "embedder"}


def test_tokenizer_instances_are_a_value_for_every_model(tmp_path: Path) -> None:
    shipped = read_config(SHARED_REPOSITORY / "tokenizer" / "config.pbtxt")
    wanted = shipped.instance_group[0].count + 7
    catalog = prepare(DEFAULT_CATALOG, tmp_path / "served", tokenizer_instances=wanted)
    assert isinstance(catalog, Catalog), catalog
    served = read_config(tmp_path / "served" / "tokenizer" / "config.pbtxt")
    assert served.instance_group[0].count == wanted
    shipped.ClearField("instance_group")
    served.ClearField("instance_group")
    assert served == shipped


def test_a_model_of_its_own_gets_stages_named_after_it(tmp_path: Path) -> None:
    _folder(tmp_path, "e5")
    text = '[[models]]\nname = "e5"\npath = "e5"\ninstances = 3\n'
    catalog = read_catalog(_catalog(tmp_path, text))
    assert isinstance(catalog, Catalog), catalog
    (model,) = catalog.models
    assert set(model.triton_models()) == {"e5", "e5_tokens", "e5.tokenizer", "e5.embedder"}


def test_the_gpu_engine_serves_the_packaged_model_only(tmp_path: Path) -> None:
    _folder(tmp_path, "e5")
    text = '[[models]]\nname = "e5"\npath = "e5"\nengine = "tensorrt"\n'
    refusal = read_catalog(_catalog(tmp_path, text))
    assert isinstance(refusal, str) and "'e5'" in refusal and "packaged model only" in refusal


@pytest.fixture(scope="module")
def default_catalog_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    workdir = tmp_path_factory.mktemp("default_catalog")
    catalog = prepare(DEFAULT_CATALOG, workdir / "served")
    assert isinstance(catalog, Catalog), catalog
    with running_server(workdir / "tritonserver.log", [workdir / "served"]) as server:
        yield server


def test_the_default_catalog_answers_by_its_name_and_todays(
    default_catalog_server: RunningServer, reference_embeddings: np.ndarray
) -> None:
    client = grpcclient.InferenceServerClient(default_catalog_server.grpc_url)
    by_alias = embed_float32(client, SAMPLE_TEXTS)
    by_name = embed_float32(client, SAMPLE_TEXTS, model="all-MiniLM-L6-v2")
    np.testing.assert_array_equal(by_alias, by_name)
    cosines = np.sum(by_name * reference_embeddings, axis=1)
    assert cosines.min() >= MIN_COSINE, cosines
