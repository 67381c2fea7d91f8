"""export/export_onnx.py on the tiny random-weight BGE-M3 folder (harness/m3_models.py): the
export passes its check against BGEM3FlagModel.encode and records what the server needs; the
graph it wrote, run here with onnxruntime on the served tokenizer's ids, encodes fresh texts as
BGEM3FlagModel does (the dense vector, the lexical weights, the ColBERT vectors, each within
1e-4); folders it cannot serve, and an opset below the graph's, are refused naming what it
cannot serve, and nothing is written.

The exports run in the export environment, as scripts/setup.sh runs them; so does
BGEM3FlagModel (tests/m3_reference.py)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from embedding_catalog.tasks import COLBERT_HEAD, M3, SPARSE_HEAD
from task_exports import OPENING_KEYS, ExportRun, assert_refused, run_export

from harness.export_environment import run_in_export_environment
from server.paths import REPO_ROOT

M3_REFERENCE = REPO_ROOT / "tests" / "m3_reference.py"
NAME = "bge_m3"
# The graph's max per token id is ONNX's ScatterElements with reduction max: opset 18.
OPSET = 18
MAX_DIFFERENCE = 1e-4
MAX_SEQ_LENGTH = 128
HIDDEN = 64
INPUTS = ["input_ids", "attention_mask"]
OUTPUTS = ["embedding", "norm", "activations", "token_vectors"]
# <s>, <pad>, </s>, <unk>: FlagEmbedding's cls, pad, eos and unk tokens.
SKIPPED_TOKEN_IDS = [0, 1, 2, 3]
# Check texts: 13, no prompts (export/reference_check.py).
CHECK_TEXTS = 13
RECORD_KEYS = [
    *OPENING_KEYS,
    "inputs",
    "max_seq_length",
    "vocab_size",
    "prompts",
    "default_prompt_name",
    "embedding_dim",
    "colbert_dim",
    "skipped_token_ids",
    "opset",
    "max_difference_allowed",
    "max_dense_difference",
    "max_sparse_difference",
    "max_colbert_difference",
    "num_check_texts",
    "check_results",
    "versions",
]
# None of the export's check texts: repeated words (one id's weight is its max over positions),
# several scripts, one letter, and one that needs truncation.
FRESH_TEXTS = [
    "the cat and the dog and the bird",
    "Le chat dort sur le canapé pendant que la pluie tombe dehors.",
    "東京は日本の首都です。",
    "a",
    " ".join(f"Paragraph {index} weighs the terms of a search query." for index in range(40)),
]


@pytest.fixture(scope="module")
def export(m3_folders: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> ExportRun:
    return run_export(ExportRun, M3, m3_folders[NAME], tmp_path_factory.mktemp("repository"))


@pytest.fixture(scope="module")
def reference(m3_folders: dict[str, Path]) -> list[dict[str, Any]]:
    """BGEM3FlagModel.encode's three outputs per fresh text."""
    job = {"model_dir": str(m3_folders[NAME]), "texts": FRESH_TEXTS, "max_length": MAX_SEQ_LENGTH}
    done = run_in_export_environment([str(M3_REFERENCE)], json.dumps(job))
    return list(json.loads(done.stdout))


def run_graph(export: ExportRun, texts: list[str]) -> tuple[list[np.ndarray], list[int]]:
    """The exported graph's outputs on the served tokenizer's ids, padded on the right as the
    server pads, and each text's number of tokens."""
    encodings = export.tokenizer().encode_batch(texts)
    lengths = [len(encoding.ids) for encoding in encodings]
    input_ids = np.zeros((len(texts), max(lengths)), np.int64)
    attention_mask = np.zeros_like(input_ids)
    for row, encoding in enumerate(encodings):
        input_ids[row, : lengths[row]] = encoding.ids
        attention_mask[row, : lengths[row]] = 1
    outputs = export.session().run(None, {"input_ids": input_ids, "attention_mask": attention_mask})
    assert all(output.dtype == np.float32 for output in outputs)
    return outputs, lengths


def assert_matches(export: ExportRun, texts: list[str], expected: list[dict[str, Any]]) -> None:
    """Each text's dense vector, lexical weights (every token id's: a term within rounding of 0
    may be active on one side only) and ColBERT vectors (every token's but the CLS's, as many)
    within MAX_DIFFERENCE."""
    (embedding, norm, activations, token_vectors), lengths = run_graph(export, texts)
    dense = np.array([row["dense"] for row in expected], np.float32)
    assert np.abs(embedding - dense).max() <= MAX_DIFFERENCE
    assert (norm > 0).all()
    for row, reference in enumerate(expected):
        weights = np.zeros_like(activations[row])
        weights[reference["sparse"]["indices"]] = reference["sparse"]["values"]
        assert np.abs(activations[row] - weights).max() <= MAX_DIFFERENCE
        colbert = np.array(reference["colbert"], np.float32)
        ours = token_vectors[row, 1 : lengths[row]]
        assert ours.shape == colbert.shape
        assert np.abs(ours - colbert).max() <= MAX_DIFFERENCE
        # Padding gives no vector.
        assert not token_vectors[row, lengths[row] :].any()


def test_the_export_passes_its_check_and_records_what_the_server_needs(export: ExportRun) -> None:
    assert export.returncode == 0, export.output[-3000:]
    record = export.record
    assert list(record) == RECORD_KEYS
    assert record["task"] == "m3" and record["graph"] == "plain"
    assert record["model_dir"] == str(export.folder)
    assert (record["model_type"], record["architecture"]) == ("xlm-roberta", "XLMRobertaModel")
    assert record["modules"] == ["Transformer", "Pooling", "Normalize"]
    assert record["inputs"] == INPUTS
    config = json.loads((export.folder / "config.json").read_text())
    assert record["vocab_size"] == config["vocab_size"]
    assert record["max_seq_length"] == MAX_SEQ_LENGTH
    assert record["prompts"] == {} and record["default_prompt_name"] is None
    assert record["embedding_dim"] == record["colbert_dim"] == HIDDEN
    assert record["skipped_token_ids"] == SKIPPED_TOKEN_IDS
    assert record["opset"] == OPSET
    assert record["max_difference_allowed"] == MAX_DIFFERENCE
    assert record["num_check_texts"] == len(record["check_results"]) == CHECK_TEXTS
    for kind in ("dense", "sparse", "colbert"):
        worst = record[f"max_{kind}_difference"]
        assert worst <= MAX_DIFFERENCE
        assert worst == max(text[f"{kind}_difference"] for text in record["check_results"].values())
    # Lexical weights worth checking: a text weighs some of its tokens, not all.
    terms = [text["sparse_terms"] for text in record["check_results"].values()]
    vectors = [text["colbert_vectors"] for text in record["check_results"].values()]
    assert sum(terms) > 0 and all(t < v for t, v in zip(terms, vectors, strict=True) if v > 1)
    session = export.session()
    assert [graph_input.name for graph_input in session.get_inputs()] == INPUTS
    shapes = {output.name: output.shape for output in session.get_outputs()}
    assert list(shapes) == OUTPUTS
    assert shapes["embedding"][1] == HIDDEN and shapes["norm"][1] == 1
    assert shapes["activations"][1] == config["vocab_size"]
    assert shapes["token_vectors"][2] == HIDDEN
    # Both folders that read the record get the same one; nothing else is written.
    tokenizer_record = export.repository / "shared/tokenizer/1/export.json"
    assert json.loads(tokenizer_record.read_text()) == record
    assert sorted(path.name for path in export.repository.iterdir()) == ["m3", "shared"]
    tokenizer = export.tokenizer()
    assert tokenizer.padding is None
    assert tokenizer.truncation is not None
    assert tokenizer.truncation["max_length"] == MAX_SEQ_LENGTH
    assert "exported task=m3 xlm-roberta (XLMRobertaModel) graph=plain " in export.output


def test_the_graph_encodes_fresh_texts_as_bgem3flagmodel(
    export: ExportRun, reference: list[dict[str, Any]]
) -> None:
    assert_matches(export, FRESH_TEXTS, reference)
    # One text at a time too, as the server may batch it alone.
    for row, text in enumerate(FRESH_TEXTS):
        assert_matches(export, [text], reference[row : row + 1])
    # Else agreeing would say little: the sparse head keeps some tokens and drops others.
    weighed = [len(row["sparse"]["indices"]) for row in reference]
    assert sum(weighed) > 0
    assert len(reference[-1]["colbert"]) == MAX_SEQ_LENGTH - 1 > weighed[-1]


def _copy(m3_folders: dict[str, Path], tmp_path: Path, breaking: Callable[[Path], None]) -> Path:
    folder = tmp_path / "model"
    shutil.copytree(m3_folders[NAME], folder)
    breaking(folder)
    return folder


def _sparse_head_as_colbert(folder: Path) -> None:
    # A Linear(64, 1) where BGEM3FlagModel loads a Linear(64, 64).
    shutil.copyfile(folder / SPARSE_HEAD, folder / COLBERT_HEAD)


def _unreadable_sparse_head(folder: Path) -> None:
    (folder / SPARSE_HEAD).write_bytes(b"not a torch file")


def _bert_backbone(folder: Path) -> None:
    config_path = folder / "config.json"
    config_path.write_text(
        json.dumps({**json.loads(config_path.read_text()), "model_type": "bert"})
    )


# (how the folder is broken, what the refusal must name)
REFUSALS: dict[str, tuple[Callable[[Path], None], tuple[str, ...]]] = {
    "colbert head": (_sparse_head_as_colbert, (COLBERT_HEAD, "torch.nn.Linear(64, 64)")),
    "sparse head": (_unreadable_sparse_head, (SPARSE_HEAD, "not a readable")),
    "backbone": (_bert_backbone, ("'bert'", "XLMRobertaModel")),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_a_folder_the_export_cannot_serve_is_refused(
    m3_folders: dict[str, Path], tmp_path: Path, case: str
) -> None:
    breaking, messages = REFUSALS[case]
    folder = _copy(m3_folders, tmp_path, breaking)
    repository = tmp_path / "repository"
    run = run_export(ExportRun, M3, folder, repository)
    assert_refused(run, messages)


def test_an_opset_below_the_graphs_is_refused(m3_folders: dict[str, Path], tmp_path: Path) -> None:
    run = run_export(ExportRun, M3, m3_folders[NAME], tmp_path / "repository", "--opset=17")
    assert_refused(run, (f"opset {OPSET} or later", "--opset 17"))
