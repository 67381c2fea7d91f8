"""export/export_onnx.py on the tiny random-weight multi-vector encoders
(harness/multivector_models.py: bert_colbert with PyLate's prompts, fixed query expansion and a
document skip-list, bert_plain with none of them, modernbert_colbert with an attended minimum
expansion and a skip-list on both roles, bert_pooled with a HierarchicalTokenPooling of
documents last in its pipeline): each export passes its check against MultiVectorEncoder and
records what the served stages need (the model's token pooling too); the graph it wrote, run
here with onnxruntime on rows that model_common.multivector builds from the served tokenizer's
ids, its vectors pooled by model_common.token_pooling from the record as the encoder stage pools
them, gives fresh texts, as queries and as documents, the vectors encode_query and
encode_document give (as many, each at a cosine of at least 0.9999); folders it cannot serve
(a token pooling but sentence-transformers' HierarchicalTokenPooling last) are refused naming
what it cannot serve, and nothing is written.

The folders are built and exported in the export environment, as scripts/setup.sh runs the
exports; so does MultiVectorEncoder (tests/mv_reference.py)."""

from __future__ import annotations

import json
import shutil
import string
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from embedding_catalog.catalog import FolderKind, folder_kind
from embedding_catalog.tasks import MULTIVECTOR
from model_common.multivector import DOCUMENT, QUERY, ROLES, MultiVectorRoles, Rows
from model_common.token_pooling import ModelPooling, pool_rows, row_factors
from task_exports import OPENING_KEYS, ExportRun, assert_refused, export_each, run_export

from harness.export_environment import run_in_export_environment
from server.paths import REPO_ROOT

MV_REFERENCE = REPO_ROOT / "tests" / "mv_reference.py"
MIN_COSINE = 0.9999
MAX_SEQ_LENGTH = 128
INPUTS = ["input_ids", "attention_mask"]
# Where the catalog's declaration of the task has the export write (the stages it names grow
# with the task, the export's promise does not: a record in each, nothing else).
ENCODER = MULTIVECTOR.onnx_version
TOKENIZERS = MULTIVECTOR.tokenizer_versions
RECORDS = MULTIVECTOR.records
MODULES = ["Transformer", "Dense", "MultiVectorMask", "Normalize"]
POOLING = "HierarchicalTokenPooling"
POOLING_TYPE = f"sentence_transformers.multi_vector_encoder.modules.token_pooling.{POOLING}"
# The export's check texts: reference_check.py's 13 and two more, as queries and as documents.
CHECK_TEXTS = 2 * 15
COLBERT_PROMPTS = {"query": "[Q] ", "document": "[D] "}
# What each model's record must say beyond what every record says.
EXPECTED: dict[str, dict[str, Any]] = {
    "bert_colbert": {
        "model_type": "bert",
        "architecture": "BertModel",
        "embedding_dim": 32,
        "prompts": COLBERT_PROMPTS,
        "query_length": None,
        "document_length": 64,
        "query_expansion": {"strategy": "fixed", "length": 16, "attend": False},
        "skiplist_tasks": [DOCUMENT],
        "punctuation_skipped": True,
        "modules": MODULES,
        "token_pooling": None,
    },
    "bert_plain": {
        "model_type": "bert",
        "architecture": "BertModel",
        "embedding_dim": 48,
        # Named for both roles, as MultiVectorEncoder holds them, though the folder sets none.
        "prompts": {"query": "", "document": ""},
        "query_length": 24,
        "document_length": None,
        "query_expansion": None,
        "skiplist_tasks": [DOCUMENT],
        "punctuation_skipped": False,
        "modules": MODULES,
        "token_pooling": None,
    },
    "modernbert_colbert": {
        "model_type": "modernbert",
        "architecture": "ModernBertModel",
        "embedding_dim": 32,
        "prompts": COLBERT_PROMPTS,
        "query_length": 32,
        "document_length": None,
        "query_expansion": {"strategy": "min", "length": 12, "attend": True},
        "skiplist_tasks": [QUERY, DOCUMENT],
        "punctuation_skipped": True,
        "modules": MODULES,
        "token_pooling": None,
    },
    "bert_pooled": {
        "model_type": "bert",
        "architecture": "BertModel",
        "embedding_dim": 32,
        "prompts": COLBERT_PROMPTS,
        "query_length": None,
        "document_length": 64,
        "query_expansion": None,
        "skiplist_tasks": [DOCUMENT],
        "punctuation_skipped": True,
        "modules": [*MODULES, POOLING],
        # HierarchicalTokenPooling's settings as the folder saved them, the factor a float.
        "token_pooling": {
            "pool_factor": 2.0,
            "num_protected_tokens": 1,
            "normalize_embeddings": True,
            "tasks": [DOCUMENT],
        },
    },
}
RECORD_KEYS = [
    *OPENING_KEYS,
    "inputs",
    "max_seq_length",
    "vocab_size",
    "embedding_dim",
    "prompts",
    "default_prompt_name",
    "query_length",
    "document_length",
    "query_expansion",
    "skiplist_ids",
    "skiplist_tasks",
    "token_pooling",
    "normalized",
    "similarity_fn_name",
    "opset",
    "min_cosine_required",
    "min_cosine",
    "max_abs_difference",
    "num_check_texts",
    "num_check_vectors",
    "check_results",
    "versions",
]
WORDS = " ".join(
    f"Paragraph {index} says late interaction scores every query token, (mostly)."
    for index in range(30)
)
# None of the export's check texts: short queries that expansion fills, punctuation the
# skip-list drops, unicode, and texts past each role's max length.
FRESH_TEXTS = [
    "what is late interaction",
    "maxsim: why? (because) it's fast!",
    "Le chat dort sur le canapé pendant que la pluie tombe dehors.",
    "東京は日本の首都です。大阪は食べ物で有名です。",
    "Привет, как дела?",
    "emoji 😀 [ok]",
    "a",
    WORDS,
]
FRESH_KEYS = [(name, role) for name in EXPECTED for role in ROLES]


class Export(ExportRun):
    """One multi-vector encoder's export, and what its served stages make of texts."""

    def roles(self) -> MultiVectorRoles:
        return MultiVectorRoles.from_record(self.record)

    def rows(self, role: str, texts: list[str]) -> Rows:
        """The rows the served stages build: the role's prompt before each text, the served
        tokenizer cutting at the role's max length, then model_common.multivector's rows."""
        roles = self.roles()
        tokenizer = self.tokenizer()
        tokenizer.enable_truncation(roles.max_length(role))
        prompt = self.record["prompts"].get(role) or ""
        encodings = tokenizer.encode_batch([prompt + text for text in texts])
        return roles.rows(role, [encoding.ids for encoding in encodings])

    def vectors(self, role: str, texts: list[str], pooled: bool = True) -> list[np.ndarray]:
        """The graph's vectors of the texts as the role, pooled (unless not `pooled`) as the
        encoder stage pools them by the record's token_pooling, each text's at its served mask."""
        rows = self.rows(role, texts)
        (vectors,) = self.session().run(
            None, {"input_ids": rows.input_ids, "attention_mask": rows.attention_mask}
        )
        assert vectors.dtype == np.float32
        pooling = ModelPooling.from_record(self.record) if pooled else None
        factors = np.tile(row_factors(pooling, role, None), (len(texts), 1))
        vectors, served = pool_rows(vectors, rows.vector_mask, factors, pooling)
        return [row[mask == 1] for row, mask in zip(vectors, served, strict=True)]


def export_folder(folder: Path, repository: Path, *args: str) -> Export:
    return run_export(Export, MULTIVECTOR, folder, repository, *args)


@pytest.fixture(scope="module")
def exports(
    multivector_folders: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Export]:
    return export_each(Export, MULTIVECTOR, multivector_folders, EXPECTED, tmp_path_factory)


@pytest.fixture(scope="module")
def multivector_encoder(
    multivector_folders: dict[str, Path],
) -> dict[tuple[str, str], list[np.ndarray]]:
    """encode_query's and encode_document's vectors of FRESH_TEXTS, per (model, role), from one
    process."""
    requests = [
        {"model_dir": str(multivector_folders[name]), "role": role, "texts": FRESH_TEXTS}
        for name, role in FRESH_KEYS
    ]
    completed = run_in_export_environment([str(MV_REFERENCE)], json.dumps(requests))
    answers = json.loads(completed.stdout)
    return {
        key: [np.asarray(vectors, np.float32) for vectors in answer]
        for key, answer in zip(FRESH_KEYS, answers, strict=True)
    }


def cosines(ours: np.ndarray, theirs: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(ours, axis=1) * np.linalg.norm(theirs, axis=1)
    return np.sum(ours * theirs, axis=1) / norms


def assert_the_same_vectors(ours: list[np.ndarray], theirs: list[np.ndarray]) -> None:
    """As many vectors per text as MultiVectorEncoder's, each at a cosine of at least 0.9999."""
    assert [len(vectors) for vectors in ours] == [len(vectors) for vectors in theirs]
    for mine, reference in zip(ours, theirs, strict=True):
        assert mine.shape == reference.shape
        assert cosines(mine, reference).min() >= MIN_COSINE


@pytest.mark.parametrize("name", list(EXPECTED))
def test_each_multivector_encoder_exports_and_passes_its_check(
    exports: dict[str, Export], name: str
) -> None:
    export = exports[name]
    assert export.returncode == 0, export.output[-3000:]
    record = export.record
    assert list(record) == RECORD_KEYS
    expected = EXPECTED[name]
    assert record["task"] == "multivector" and record["graph"] == "plain"
    assert record["model_dir"] == str(export.folder)
    assert record["modules"] == expected["modules"]
    assert record["token_pooling"] == expected["token_pooling"]
    assert record["inputs"] == INPUTS
    assert record["max_seq_length"] == MAX_SEQ_LENGTH
    config = json.loads((export.folder / "config.json").read_text())
    assert record["vocab_size"] == config["vocab_size"]
    assert record["default_prompt_name"] is None
    assert record["normalized"] is True and record["similarity_fn_name"] == "maxsim"
    for key in ("model_type", "architecture", "embedding_dim", "prompts"):
        assert record[key] == expected[key], key
    for key in ("query_length", "document_length", "skiplist_tasks"):
        assert record[key] == expected[key], key
    expansion = record["query_expansion"]
    if expected["query_expansion"] is None:
        assert expansion is None
    else:
        # Filled with the mask token, named by the served tokenizer as by the model's.
        tokenizer = export.tokenizer()
        assert expansion == {
            **expected["query_expansion"],
            "token_id": tokenizer.token_to_id("[MASK]"),
        }
    check_skiplist(export, record, expected["punctuation_skipped"])
    session = export.session()
    assert [graph_input.name for graph_input in session.get_inputs()] == INPUTS
    (output,) = session.get_outputs()
    assert output.name == "token_vectors" and output.shape[2] == expected["embedding_dim"]
    assert record["min_cosine_required"] == MIN_COSINE
    assert record["min_cosine"] >= MIN_COSINE
    assert 0 <= record["max_abs_difference"] < 1e-4
    results = record["check_results"]
    assert record["num_check_texts"] == len(results) == CHECK_TEXTS
    assert record["num_check_vectors"] == sum(text["vectors"] for text in results.values())
    assert min(text["min_cosine"] for text in results.values()) == record["min_cosine"]
    # Every folder that reads the record gets the same one, both tokenizer stages the same
    # tokenizer.json (truncating at max_seq_length, never padding); nothing else is written.
    for folder in RECORDS:
        assert json.loads((export.repository / folder / "export.json").read_text()) == record
    served = [export.repository / folder / "tokenizer.json" for folder in TOKENIZERS]
    assert served[0].read_bytes() == served[1].read_bytes()
    assert sorted(path.name for path in export.repository.iterdir()) == ["multivector"]
    stages = sorted(path.name for path in (export.repository / "multivector").iterdir())
    assert stages == sorted(folder.split("/")[1] for folder in RECORDS)
    assert {"encoder", "maxsim", "pair_tokenizer", "tokenizer"} <= set(stages)
    tokenizer = export.tokenizer()
    assert tokenizer.padding is None
    assert tokenizer.truncation is not None
    assert tokenizer.truncation["max_length"] == MAX_SEQ_LENGTH
    assert f"exported task=multivector {expected['model_type']} " in export.output
    # The catalog serves the folder as this task.
    assert folder_kind(export.folder) == FolderKind("MultiVectorEncoder", "multivector")


def check_skiplist(export: Export, record: dict[str, Any], punctuation: bool) -> None:
    """The skip-list is the punctuation each served vocabulary holds as one token (every ASCII
    punctuation character in both test vocabularies), or empty."""
    if not punctuation:
        assert record["skiplist_ids"] == []
        return
    tokenizer = export.tokenizer()
    ids = sorted({tokenizer.token_to_id(char) for char in string.punctuation})
    assert None not in ids
    assert record["skiplist_ids"] == ids


@pytest.mark.parametrize("key", FRESH_KEYS, ids=[f"{name}-{role}" for name, role in FRESH_KEYS])
def test_the_graph_encodes_fresh_texts_as_multivector_encoder(
    exports: dict[str, Export],
    multivector_encoder: dict[tuple[str, str], list[np.ndarray]],
    key: tuple[str, str],
) -> None:
    name, role = key
    export = exports[name]
    theirs = multivector_encoder[key]
    assert_the_same_vectors(export.vectors(role, FRESH_TEXTS), theirs)
    # One text at a time too, as the server may batch it alone.
    for text, vectors in zip(FRESH_TEXTS, theirs, strict=True):
        assert_the_same_vectors(export.vectors(role, [text]), [vectors])
    # Else agreeing would say little: the vectors of a text differ from each other (but a pooled
    # "a", its [CLS] and the mean of the rest, which lie close).
    for vectors in (each for each in theirs if len(each) > 2):
        unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
        assert (unit @ unit.T).min() < 0.99
    # The model's pooling pools its roles only, and where it does, fewer vectors are served.
    pooling = export.record["token_pooling"]
    unpooled = sum(map(len, export.vectors(role, FRESH_TEXTS, pooled=False)))
    if pooling is not None and role in pooling["tasks"]:
        assert sum(map(len, theirs)) < unpooled
    else:
        assert sum(map(len, theirs)) == unpooled


def test_fixed_expansion_gives_every_query_its_length(exports: dict[str, Export]) -> None:
    """bert_colbert's queries are 16 vectors whatever their length: the served rows fill a short
    query with unattended mask tokens, which are scored, and cut a long one."""
    export = exports["bert_colbert"]
    mask_id = export.record["query_expansion"]["token_id"]
    rows = export.rows(QUERY, ["a", WORDS])
    assert rows.input_ids.shape == (2, 16)
    assert (rows.vector_mask == 1).all()
    # [CLS] [ q ] a [SEP], then the mask tokens.
    assert rows.attention_mask[0].tolist() == [1] * 6 + [0] * 10
    assert (rows.input_ids[0, 6:] == mask_id).all()
    assert rows.attention_mask[1].all() and (rows.input_ids[1] != mask_id).all()
    # Documents: the skip-list drops their punctuation (the prompt's brackets too), and they are
    # cut at document_length.
    documents = export.rows(DOCUMENT, ["maxsim: why? (because)", WORDS])
    assert documents.input_ids.shape == (2, 64)
    skipped = np.isin(documents.input_ids, export.record["skiplist_ids"])
    assert skipped[0].sum() == 2 + 4 and not (documents.vector_mask[skipped]).any()


def test_minimum_expansion_pads_short_queries_only(exports: dict[str, Export]) -> None:
    """modernbert_colbert's expansion is a floor of 12 (attended): a short query is widened to
    it, a long one keeps up to query_length (32) tokens; its skip-list drops query punctuation."""
    export = exports["modernbert_colbert"]
    rows = export.rows(QUERY, ["a", WORDS])
    assert rows.input_ids.shape == (2, 32)
    expansion = export.record["query_expansion"]
    length = len(export.tokenizer().encode("[Q] a").ids)
    assert length < 12
    assert rows.attention_mask[0].tolist() == [1] * 12 + [0] * 20
    assert (rows.input_ids[0, length:12] == expansion["token_id"]).all()
    assert rows.vector_mask[0, 12:].sum() == 0
    assert rows.attention_mask[1].all()
    assert not rows.vector_mask[np.isin(rows.input_ids, export.record["skiplist_ids"])].any()


def _edit_json(path: Path, edit: Callable[[Any], Any]) -> None:
    path.write_text(json.dumps(edit(json.loads(path.read_text()))))


def _without(settings: dict[str, Any], key: str) -> dict[str, Any]:
    return {name: value for name, value in settings.items() if name != key}


def _pooling_module(kind: str) -> Callable[[Path], None]:
    """Appends a token pooling of the type `kind` to the folder's pipeline."""

    def append(folder: Path) -> None:
        _edit_json(
            folder / "modules.json",
            lambda modules: [
                *modules,
                {
                    "idx": len(modules),
                    "name": str(len(modules)),
                    "path": f"{len(modules)}_{kind.rsplit('.', 1)[-1]}",
                    "type": kind,
                },
            ],
        )

    return append


def _pooling_before_normalize(folder: Path) -> None:
    """bert_pooled's HierarchicalTokenPooling moved before its Normalize."""
    _edit_json(folder / "modules.json", lambda modules: [*modules[:3], modules[4], modules[3]])


def _pooling_setting(folder: Path) -> None:
    _edit_json(
        folder / f"4_{POOLING}/config.json", lambda config: {**config, "cluster_metric": "l2"}
    )


def _similarity(folder: Path) -> None:
    _edit_json(
        folder / "config_sentence_transformers.json",
        lambda config: {**config, "similarity_fn_name": "meanmaxsim"},
    )


def _allowlist(folder: Path) -> None:
    _edit_json(
        folder / "2_MultiVectorMask/config.json",
        lambda config: {**config, "keep_only_token_ids": [7]},
    )


def _chat_template(folder: Path) -> None:
    message = {"method": "forward", "method_output_name": "last_hidden_state"}
    _edit_json(
        folder / "sentence_bert_config.json",
        lambda config: {**config, "modality_config": {"message": message}},
    )


def _family(folder: Path) -> None:
    _edit_json(folder / "config.json", lambda config: {**config, "model_type": "distilbert"})


# (model copied, how it is broken if at all, extra arguments, what the refusal must name)
Refusal = tuple[str, Callable[[Path], None] | None, tuple[str, ...], tuple[str, ...]]
REFUSALS: dict[str, Refusal] = {
    "lambda pooling": (
        "bert_colbert",
        _pooling_module(POOLING_TYPE.replace(POOLING, "LambdaTokenPooling")),
        (),
        ("LambdaTokenPooling'", f"only sentence-transformers' {POOLING} is served"),
    ),
    "unknown pooling": (
        "bert_plain",
        _pooling_module("my_package.pooling.ClusterTokenPooling"),
        (),
        ("'my_package.pooling.ClusterTokenPooling'", f"only sentence-transformers' {POOLING}"),
    ),
    "pooling before normalize": (
        "bert_pooled",
        _pooling_before_normalize,
        (),
        (f"'{POOLING}', 'Normalize'", "only once and last in the pipeline"),
    ),
    "pooling setting": ("bert_pooled", _pooling_setting, (), ("['cluster_metric']", POOLING)),
    "meanmaxsim": ("bert_colbert", _similarity, (), ("'meanmaxsim'", "only 'maxsim'")),
    "allowlist": ("bert_colbert", _allowlist, (), ("keep_only_token_ids", "[7]")),
    "chat template": ("bert_plain", _chat_template, (), ("['message']", "chat template")),
    "family": ("bert_plain", _family, (), ("'distilbert'", "BertModel")),
    "fused graph": ("bert_plain", None, ("--graph=fused",), ("--graph fused", "plain")),
}


def test_a_pooling_saved_without_normalize_embeddings_is_served_unnormalized(
    multivector_folders: dict[str, Path], tmp_path: Path
) -> None:
    """HierarchicalTokenPooling loads a saved config without normalize_embeddings as False (for
    indexes pooled before it normalized): the record says so, and the check, which pools the
    graph's vectors by the record, passes against the model as it loaded."""
    folder = tmp_path / "model"
    shutil.copytree(multivector_folders["bert_pooled"], folder)
    config = folder / f"4_{POOLING}/config.json"
    _edit_json(config, lambda settings: _without(settings, "normalize_embeddings"))
    export = export_folder(folder, tmp_path / "repository")
    assert export.returncode == 0, export.output[-3000:]
    assert export.record["token_pooling"] == {
        **EXPECTED["bert_pooled"]["token_pooling"],
        "normalize_embeddings": False,
    }
    assert export.record["min_cosine"] >= MIN_COSINE
    # Unnormalized cluster means are shorter than the unit vectors they average (a little: the
    # random-weight vectors lie close together).
    (document,) = export.vectors(DOCUMENT, [WORDS])
    assert np.linalg.norm(document, axis=1).min() < 0.999


@pytest.mark.parametrize("case", list(REFUSALS))
def test_a_multivector_encoder_the_export_cannot_serve_is_refused(
    multivector_folders: dict[str, Path], tmp_path: Path, case: str
) -> None:
    name, breaking, arguments, messages = REFUSALS[case]
    folder = tmp_path / "model"
    shutil.copytree(multivector_folders[name], folder)
    if breaking is not None:
        breaking(folder)
    repository = tmp_path / "repository"
    assert_refused(export_folder(folder, repository, *arguments), messages)
