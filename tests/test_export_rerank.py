"""export/export_onnx.py on the tiny random-weight rerankers (harness/cross_encoder_models.py:
BERT with token type ids, XLM-RoBERTa with one token type, BERT with an Identity activation):
each export passes its score check against CrossEncoder.predict and records what the server
needs; the graph it wrote, run here with onnxruntime on the pair tokenizer's ids, scores fresh
pairs as CrossEncoder.predict does; folders it cannot serve are refused naming what it cannot
serve, and nothing is written.

The exports run in the export environment, as scripts/setup.sh runs them; so does
CrossEncoder (tests/ce_reference.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from embedding_catalog.tasks import RERANK
from export_records import assert_the_recorded_reranker_choices_replay
from model_common.openvino_runtime import ov
from task_exports import ExportRun, assert_refused, export_each, run_export

from harness.export_environment import run_in_export_environment
from server.paths import REPO_ROOT

EXPORT_OPENVINO = REPO_ROOT / "export" / "export_openvino.py"
CE_REFERENCE = REPO_ROOT / "tests" / "ce_reference.py"
MAX_SCORE_DIFFERENCE = 1e-4
MAX_SEQ_LENGTH = 128
# export/score_check.py: 5 queries x 7 documents, unprompted and after each prompt.
CHECK_PAIRS = 35
WITH_TYPES = ["input_ids", "attention_mask", "token_type_ids"]
# What each reranker's record must say: (model_type, inputs, type_vocab_size, activation).
EXPECTED: dict[str, tuple[str, list[str], int | None, str]] = {
    "bert": ("bert", WITH_TYPES, 2, "sigmoid"),
    "xlmr": ("xlm-roberta", WITH_TYPES[:2], None, "sigmoid"),
    "bert_identity": ("bert", WITH_TYPES, 2, "identity"),
}
WORDS = " ".join(
    f"Paragraph {index} says inference servers rank passages for a search query."
    for index in range(40)
)
# None of export/score_check.py's pairs; the last three need truncation (each side, or both).
FRESH_PAIRS = [
    ("how do i reset my password", "Open the settings page and choose 'Forgot password'."),
    ("weather today", "The weather today is sunny with a light breeze from the west."),
    ("capital of france", "Le chat dort sur le canapé pendant que la pluie tombe dehors."),
    ("大阪", "東京は日本の首都です。大阪は食べ物で有名です。"),
    ("Привет", "Привет, как дела? Сегодня хорошая погода."),
    ("emoji 😀", ""),
    (WORDS, "A short document."),
    ("A short query?", WORDS),
    (WORDS, WORDS + " And one more sentence."),
]
TRUNCATED = FRESH_PAIRS[-3:]


def run_script(script: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_in_export_environment([str(script), *args], check=False)


@pytest.fixture(scope="module")
def exports(
    cross_encoder_folders: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, ExportRun]:
    return export_each(ExportRun, RERANK, cross_encoder_folders, EXPECTED, tmp_path_factory)


@pytest.fixture(scope="module")
def cross_encoder(cross_encoder_folders: dict[str, Path]) -> dict[str, dict[str, Any]]:
    """CrossEncoder's scores and ids on FRESH_PAIRS, per reranker, from one process."""
    requests = [
        {"model_dir": str(cross_encoder_folders[name]), "pairs": FRESH_PAIRS} for name in EXPECTED
    ]
    completed = run_in_export_environment([str(CE_REFERENCE)], json.dumps(requests))
    return dict(zip(EXPECTED, json.loads(completed.stdout), strict=True))


def prompted(export: ExportRun, pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The pairs as the pair tokenizer stage reads them unasked: the record's default prompt,
    if any, before each query."""
    record = export.record
    prompt = record["prompts"].get(record["default_prompt_name"] or "", "")
    return [(prompt + query, document) for query, document in pairs]


def score(
    export: ExportRun,
    pairs: list[tuple[str, str]],
    zero_types: bool = False,
    run: Callable[[dict[str, np.ndarray]], np.ndarray] | None = None,
) -> np.ndarray:
    """The exported graph (ONNX Runtime on model.onnx, unless `run` runs another) on the pair
    tokenizer's ids of the pairs as the stage reads them, padded on the right as the server
    pads."""
    encodings = export.tokenizer().encode_batch(prompted(export, pairs))
    width = max(len(encoding.ids) for encoding in encodings)
    arrays = {name: np.zeros((len(pairs), width), np.int64) for name in WITH_TYPES}
    for row, encoding in enumerate(encodings):
        arrays["input_ids"][row, : len(encoding.ids)] = encoding.ids
        arrays["attention_mask"][row, : len(encoding.ids)] = 1
        if not zero_types:
            arrays["token_type_ids"][row, : len(encoding.ids)] = encoding.type_ids
    session = export.session()
    names = [graph_input.name for graph_input in session.get_inputs()]
    feeds = {name: arrays[name] for name in names}
    scores = session.run(None, feeds)[0] if run is None else np.asarray(run(feeds))
    assert scores.dtype == np.float32 and scores.shape == (len(pairs), 1)
    return scores[:, 0]


@pytest.mark.parametrize("name", list(EXPECTED))
def test_each_reranker_exports_and_passes_its_score_check(
    exports: dict[str, ExportRun], name: str
) -> None:
    export = exports[name]
    assert export.returncode == 0, export.output[-3000:]
    model_type, inputs, type_vocab_size, activation = EXPECTED[name]
    record = export.record
    assert record["task"] == "rerank" and "embedding_dim" not in record
    assert record["model_type"] == model_type
    assert record["inputs"] == inputs
    assert [graph_input.name for graph_input in export.session().get_inputs()] == inputs
    assert record["type_vocab_size"] == type_vocab_size
    assert record["activation"] == activation
    assert record["max_seq_length"] == MAX_SEQ_LENGTH
    config = json.loads((export.folder / "config.json").read_text())
    assert record["vocab_size"] == config["vocab_size"]
    assert record["model_dir"] == str(export.folder)
    checked = CHECK_PAIRS * (1 + len(record["prompts"]))
    assert record["num_check_pairs"] == checked == len(record["check_score_differences"])
    prompts = json.loads((export.folder / "config_sentence_transformers.json").read_text())
    assert record["prompts"] == prompts.get("prompts", {})
    assert record["default_prompt_name"] == prompts.get("default_prompt_name")
    assert record["max_score_difference"] <= MAX_SCORE_DIFFERENCE
    assert max(record["check_score_differences"].values()) == record["max_score_difference"]
    # Both folders that read the record get the same one (the scorer's gains its OpenVINO
    # results once export_openvino.py has run); no bi-encoder folder is written.
    pair_tokenizer_record = export.repository / "reranker/pair_tokenizer/1/export.json"
    onnx_record = {key: value for key, value in record.items() if key != "openvino"}
    assert json.loads(pair_tokenizer_record.read_text()) == onnx_record
    assert sorted(path.name for path in export.repository.iterdir()) == ["reranker"]
    assert f"exported task=rerank {model_type} " in export.output
    assert f"activation={activation} " in export.output


@pytest.mark.parametrize("name", list(EXPECTED))
def test_the_graph_scores_fresh_pairs_as_cross_encoder_predict(
    exports: dict[str, ExportRun], cross_encoder: dict[str, dict[str, Any]], name: str
) -> None:
    ours = score(exports[name], FRESH_PAIRS)
    theirs = np.asarray(cross_encoder[name]["scores"], dtype=np.float32)
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=MAX_SCORE_DIFFERENCE)
    # Else agreeing within 1e-4 would say little.
    assert theirs.std() > 0.01, theirs
    if EXPECTED[name][3] == "sigmoid":
        assert ((ours > 0) & (ours < 1)).all(), ours
    else:
        assert (ours < 0).any() or (ours > 1).any(), ours


@pytest.mark.parametrize("name", list(EXPECTED))
def test_the_pair_tokenizer_gives_cross_encoders_ids_on_truncated_pairs(
    exports: dict[str, ExportRun], cross_encoder: dict[str, dict[str, Any]], name: str
) -> None:
    tokenizer = exports[name].tokenizer()
    assert tokenizer.padding is None
    assert tokenizer.truncation is not None
    assert tokenizer.truncation["max_length"] == MAX_SEQ_LENGTH
    assert tokenizer.truncation["strategy"] == "longest_first"
    theirs = cross_encoder[name]
    encodings = tokenizer.encode_batch(prompted(exports[name], FRESH_PAIRS))
    assert [encoding.ids for encoding in encodings] == theirs["input_ids"]
    for encoding in encodings[-len(TRUNCATED) :]:
        assert len(encoding.ids) == MAX_SEQ_LENGTH
    if "token_type_ids" in EXPECTED[name][1]:
        assert [encoding.type_ids for encoding in encodings] == theirs["token_type_ids"]
        # The document's tokens are type 1 after a query truncated at all.
        assert set(encodings[-1].type_ids) == {0, 1}


def test_the_segments_reach_the_bert_graph(exports: dict[str, ExportRun]) -> None:
    """Where the graph takes token type ids they change the score, so the checks on them
    (pair tokenizer and scores) would catch a wrong segment."""
    export = exports["bert"]
    scores = score(export, FRESH_PAIRS)
    assert np.abs(scores - score(export, FRESH_PAIRS, zero_types=True)).max() > 1e-3


def test_openvino_converts_a_reranker_and_records_its_choices(
    exports: dict[str, ExportRun], cross_encoder: dict[str, dict[str, Any]]
) -> None:
    export = exports["xlmr"]
    result = run_script(EXPORT_OPENVINO, f"--repository={export.repository}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "exported OpenVINO IR of the reranker, setting " in result.stdout, result.stdout
    openvino = export.record["openvino"]
    assert_the_recorded_reranker_choices_replay(openvino)
    # The IR beside the graph, and no bi-encoder folder.
    scorer = export.repository / "reranker/scorer/1"
    assert (scorer / "model.xml").exists() and (scorer / "model.bin").exists()
    assert sorted(path.name for path in export.repository.iterdir()) == ["reranker"]
    # The IR in the precision served scores fresh pairs within that precision's bound.
    precision = openvino["precision"]
    compiled = ov.Core().compile_model(
        str(scorer / "model.xml"), "CPU", {"INFERENCE_PRECISION_HINT": precision}
    )
    ours = score(export, FRESH_PAIRS, run=lambda feeds: compiled(feeds)[compiled.output(0)])
    theirs = np.asarray(cross_encoder["xlmr"]["scores"], dtype=np.float32)
    bound = openvino["max_score_difference_allowed"][precision]
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=bound)


def _edit_json(path: Path, edit: Callable[[Any], Any]) -> None:
    path.write_text(json.dumps(edit(json.loads(path.read_text()))))


def _two_labels(folder: Path) -> None:
    _edit_json(
        folder / "config.json",
        lambda config: {
            **config,
            "id2label": {"0": "LABEL_0", "1": "LABEL_1"},
            "label2id": {"LABEL_0": 0, "LABEL_1": 1},
        },
    )


def _model_type(model_type: str) -> Callable[[Path], None]:
    def edit(folder: Path) -> None:
        _edit_json(
            folder / "config_sentence_transformers.json",
            lambda config: {**config, "model_type": model_type},
        )

    return edit


def _tanh(folder: Path) -> None:
    _edit_json(
        folder / "config_sentence_transformers.json",
        lambda config: {**config, "activation_fn": "torch.nn.modules.activation.Tanh"},
    )


# (reranker copied, how it is broken if at all, extra arguments, what the refusal must name)
Refusal = tuple[str, Callable[[Path], None] | None, tuple[str, ...], tuple[str, ...]]
REFUSALS: dict[str, Refusal] = {
    "two labels": ("bert", _two_labels, (), ("2 labels", "one-label")),
    "unknown model_type": ("xlmr", _model_type("FancyEncoder"), (), ("'FancyEncoder'",)),
    "sparse encoder": ("bert", _model_type("SparseEncoder"), (), ("'SparseEncoder'",)),
    "activation": ("bert", _tanh, (), ("torch.nn.modules.activation.Tanh",)),
    "fused graph": ("xlmr", None, ("--graph=fused",), ("--graph fused", "plain")),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_a_reranker_the_export_cannot_serve_is_refused(
    cross_encoder_folders: dict[str, Path], tmp_path: Path, case: str
) -> None:
    name, breaking, arguments, messages = REFUSALS[case]
    folder = tmp_path / "model"
    shutil.copytree(cross_encoder_folders[name], folder)
    if breaking is not None:
        breaking(folder)
    repository = tmp_path / "repository"
    assert_refused(run_export(ExportRun, RERANK, folder, repository, *arguments), messages)
