"""export/export_onnx.py on the tiny random-weight sparse encoders (harness/sparse_encoder_models.py:
bert_max with max pooling and a query prompt, bert_sum with sum pooling, the same weights): each
export passes its check against SparseEncoder.encode and records what the server needs; the graph
it wrote, run here with onnxruntime on the served tokenizer's ids, encodes fresh texts as
SparseEncoder.encode does (the same active terms, values within 1e-4; a term below 1e-4 may be
active on one side only); folders it cannot serve are refused naming what it cannot serve, and
nothing is written; export_openvino.py refuses sparse encoders.

The exports run in the export environment, as scripts/setup.sh runs them; so does SparseEncoder
(tests/se_reference.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from embedding_catalog.tasks import SPARSE
from task_exports import OPENING_KEYS, ExportRun, assert_refused, export_each, run_export

from harness.export_environment import run_in_export_environment
from server.paths import REPO_ROOT

EXPORT_OPENVINO = REPO_ROOT / "export" / "export_openvino.py"
SE_REFERENCE = REPO_ROOT / "tests" / "se_reference.py"
MAX_VALUE_DIFFERENCE = 1e-4
ACTIVE_TERM_FLOOR = 1e-4
MAX_SEQ_LENGTH = 128
INPUTS = ["input_ids", "attention_mask"]
# Check texts: 13 unprompted, 5 more after each non-empty prompt (export/reference_check.py).
UNPROMPTED_CHECKS, CHECKS_PER_PROMPT = 13, 5
# What each sparse encoder's record must say: (pooling_strategy, prompts).
EXPECTED: dict[str, tuple[str, dict[str, str]]] = {
    "bert_max": ("max", {"query": "query: "}),
    "bert_sum": ("sum", {}),
}
RECORD_KEYS = [
    *OPENING_KEYS,
    "pooling_strategy",
    "activation_function",
    "inputs",
    "max_seq_length",
    "vocab_size",
    "prompts",
    "default_prompt_name",
    "max_active_dims",
    "opset",
    "max_value_difference_allowed",
    "max_value_difference",
    "num_check_texts",
    "check_results",
    "versions",
]
WORDS = " ".join(
    f"Paragraph {index} says sparse encoders weigh the terms of a search query."
    for index in range(40)
)
# (model, prompt name): every model unprompted and after each of its prompts.
FRESH_KEYS: list[tuple[str, str | None]] = [(name, None) for name in EXPECTED] + [
    (name, prompt_name) for name, (_, prompts) in EXPECTED.items() for prompt_name in prompts
]
# None of the export's check texts; the last needs truncation.
FRESH_TEXTS = [
    "how do i reset my password",
    "The weather today is sunny with a light breeze from the west.",
    "Le chat dort sur le canapé pendant que la pluie tombe dehors.",
    "東京は日本の首都です。大阪は食べ物で有名です。",
    "Привет, как дела?",
    "emoji 😀",
    "a",
    WORDS,
]


def run_script(script: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_in_export_environment([str(script), *args], check=False)


def export_folder(folder: Path, repository: Path, *args: str) -> ExportRun:
    return run_export(ExportRun, SPARSE, folder, repository, *args)


@pytest.fixture(scope="module")
def exports(
    sparse_encoder_folders: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, ExportRun]:
    return export_each(ExportRun, SPARSE, sparse_encoder_folders, EXPECTED, tmp_path_factory)


@pytest.fixture(scope="module")
def sparse_encoder(
    sparse_encoder_folders: dict[str, Path],
) -> dict[tuple[str, str | None], np.ndarray]:
    """SparseEncoder.encode's rows of FRESH_TEXTS, densified, per (model, prompt name), from
    one process."""
    requests = [
        {"model_dir": str(sparse_encoder_folders[name]), "texts": FRESH_TEXTS}
        | ({"prompt_name": prompt_name} if prompt_name else {})
        for name, prompt_name in FRESH_KEYS
    ]
    completed = run_in_export_environment([str(SE_REFERENCE)], json.dumps(requests))
    answers = json.loads(completed.stdout)
    vocab_size = json.loads((sparse_encoder_folders["bert_max"] / "config.json").read_text())[
        "vocab_size"
    ]
    rows = {}
    for key, answer in zip(FRESH_KEYS, answers, strict=True):
        dense = np.zeros((len(FRESH_TEXTS), vocab_size), np.float32)
        for row, terms in enumerate(answer):
            assert terms["indices"] == sorted(terms["indices"])
            dense[row, terms["indices"]] = terms["values"]
        rows[key] = dense
    return rows


def encode(export: ExportRun, texts: list[str], prompt: str = "") -> np.ndarray:
    """The exported graph on the served tokenizer's ids (the prompt put before each text, as the
    tokenizer stage does), padded on the right as the server pads."""
    encodings = export.tokenizer().encode_batch([prompt + text for text in texts])
    width = max(len(encoding.ids) for encoding in encodings)
    input_ids = np.zeros((len(texts), width), np.int64)
    attention_mask = np.zeros((len(texts), width), np.int64)
    for row, encoding in enumerate(encodings):
        input_ids[row, : len(encoding.ids)] = encoding.ids
        attention_mask[row, : len(encoding.ids)] = 1
    (activations,) = export.session().run(
        None, {"input_ids": input_ids, "attention_mask": attention_mask}
    )
    assert activations.dtype == np.float32
    return activations


def assert_the_same_rows(ours: np.ndarray, theirs: np.ndarray) -> None:
    """The rule of export/sparse_check.py: values within 1e-4, the same active terms but those
    below 1e-4 on both sides."""
    assert ours.shape == theirs.shape
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=MAX_VALUE_DIFFERENCE)
    one_sided = (ours > 0) != (theirs > 0)
    assert (np.maximum(ours, theirs)[one_sided] < ACTIVE_TERM_FLOOR).all()


@pytest.mark.parametrize("name", list(EXPECTED))
def test_each_sparse_encoder_exports_and_passes_its_check(
    exports: dict[str, ExportRun], name: str
) -> None:
    export = exports[name]
    assert export.returncode == 0, export.output[-3000:]
    pooling_strategy, prompts = EXPECTED[name]
    record = export.record
    assert list(record) == RECORD_KEYS
    assert record["task"] == "sparse" and record["graph"] == "plain"
    assert record["model_dir"] == str(export.folder)
    assert (record["model_type"], record["architecture"]) == ("bert", "BertForMaskedLM")
    assert record["modules"] == ["MLMTransformer", "SpladePooling"]
    assert record["pooling_strategy"] == pooling_strategy
    assert record["activation_function"] == "relu"
    assert record["inputs"] == INPUTS
    session = export.session()
    assert [graph_input.name for graph_input in session.get_inputs()] == INPUTS
    config = json.loads((export.folder / "config.json").read_text())
    assert record["vocab_size"] == config["vocab_size"]
    (output,) = session.get_outputs()
    assert output.name == "activations" and output.shape[1] == config["vocab_size"]
    assert record["max_seq_length"] == MAX_SEQ_LENGTH
    assert record["prompts"] == prompts and record["default_prompt_name"] is None
    assert record["max_active_dims"] is None
    assert record["max_value_difference_allowed"] == MAX_VALUE_DIFFERENCE
    results = record["check_results"]
    assert record["num_check_texts"] == UNPROMPTED_CHECKS + CHECKS_PER_PROMPT * len(prompts)
    assert len(results) == record["num_check_texts"]
    assert record["max_value_difference"] <= MAX_VALUE_DIFFERENCE
    assert (
        max(text["max_value_difference"] for text in results.values())
        == (record["max_value_difference"])
    )
    # Sparse, as a trained SPLADE model's rows: every text has some terms, none has many.
    assert all(0 < text["active_terms"] < config["vocab_size"] // 10 for text in results.values())
    # Both folders that read the record get the same one; nothing else is written.
    tokenizer_record = export.repository / "shared/tokenizer/1/export.json"
    assert json.loads(tokenizer_record.read_text()) == record
    assert sorted(path.name for path in export.repository.iterdir()) == ["shared", "sparse"]
    tokenizer = export.tokenizer()
    assert tokenizer.padding is None
    assert tokenizer.truncation is not None
    assert tokenizer.truncation["max_length"] == MAX_SEQ_LENGTH
    assert (
        f"exported task=sparse bert (BertForMaskedLM) graph=plain pooling={pooling_strategy} "
        in (export.output)
    )


@pytest.mark.parametrize("key", FRESH_KEYS, ids=[f"{name}-{prompt}" for name, prompt in FRESH_KEYS])
def test_the_graph_encodes_fresh_texts_as_sparse_encoder(
    exports: dict[str, ExportRun],
    sparse_encoder: dict[tuple[str, str | None], np.ndarray],
    key: tuple[str, str | None],
) -> None:
    name, prompt_name = key
    export = exports[name]
    prompt = export.record["prompts"][prompt_name] if prompt_name else ""
    ours = encode(export, FRESH_TEXTS, prompt)
    theirs = sparse_encoder[key]
    assert_the_same_rows(ours, theirs)
    # One text at a time too, as the server may batch it alone.
    for row, text in enumerate(FRESH_TEXTS):
        assert_the_same_rows(encode(export, [text], prompt), theirs[row : row + 1])
    # Else agreeing would say little: every row has terms, of several sizes.
    assert ((theirs > 0).sum(axis=1) > 0).all()
    assert theirs[theirs > 0].std() > 0.1


def test_the_truncated_text_is_cut_at_the_max_length(exports: dict[str, ExportRun]) -> None:
    (encoding,) = exports["bert_sum"].tokenizer().encode_batch([WORDS])
    assert len(encoding.ids) == MAX_SEQ_LENGTH


def test_sum_and_max_pooling_differ(exports: dict[str, ExportRun]) -> None:
    """The two models share their weights: the same terms are active, and only the pooling
    tells their values apart (a sum over the tokens is at least their max)."""
    maxima = encode(exports["bert_max"], FRESH_TEXTS)
    sums = encode(exports["bert_sum"], FRESH_TEXTS)
    assert ((maxima > 0) == (sums > 0)).all()
    assert (sums >= maxima - MAX_VALUE_DIFFERENCE).all()
    assert (sums - maxima).max() > 1.0


def _edit_json(path: Path, edit: Callable[[Any], Any]) -> None:
    path.write_text(json.dumps(edit(json.loads(path.read_text()))))


def test_a_fill_mask_transformer_with_a_default_max_active_dims_exports(
    sparse_encoder_folders: dict[str, Path], tmp_path: Path
) -> None:
    """A folder as sentence-transformers 5.4+ names it (a Transformer running fill-mask, not an
    MLMTransformer) exports alike; the model's default max_active_dims is recorded, and the graph
    still returns every activation (the check compares them all)."""
    folder = tmp_path / "model"
    shutil.copytree(sparse_encoder_folders["bert_sum"], folder)
    _edit_json(
        folder / "modules.json",
        lambda modules: [
            {**modules[0], "type": "sentence_transformers.base.modules.transformer.Transformer"},
            modules[1],
        ],
    )
    _edit_json(
        folder / "config_sentence_transformers.json",
        lambda config: {**config, "max_active_dims": 4},
    )
    export = export_folder(folder, tmp_path / "repository")
    assert export.returncode == 0, export.output[-3000:]
    record = export.record
    assert record["modules"] == ["Transformer", "SpladePooling"]
    assert record["max_active_dims"] == 4
    assert max(text["active_terms"] for text in record["check_results"].values()) > 4


def _set_module(position: int, module_type: str) -> Callable[[Path], None]:
    def edit(folder: Path) -> None:
        def replace(modules: list[dict[str, Any]]) -> list[dict[str, Any]]:
            modules[position] = {**modules[position], "type": module_type}
            return modules

        _edit_json(folder / "modules.json", replace)

    return edit


def _activation(folder: Path) -> None:
    _edit_json(
        folder / "1_SpladePooling/config.json",
        lambda config: {**config, "activation_function": "log1p_relu"},
    )


def _family(folder: Path) -> None:
    _edit_json(folder / "config.json", lambda config: {**config, "model_type": "distilbert"})


def _fill_mask_task(folder: Path) -> None:
    _edit_json(
        folder / "sentence_bert_config.json",
        lambda config: {**config, "transformer_task": "feature-extraction"},
    )


STATIC = (
    "sentence_transformers.sparse_encoder.modules.sparse_static_embedding.SparseStaticEmbedding"
)
ROUTER = "sentence_transformers.base.modules.router.Router"
# (sparse encoder copied, how it is broken if at all, extra arguments, what the refusal must name)
Refusal = tuple[str, Callable[[Path], None] | None, tuple[str, ...], tuple[str, ...]]
REFUSALS: dict[str, Refusal] = {
    "inference-free": ("bert_max", _set_module(0, STATIC), (), ("SparseStaticEmbedding",)),
    "router": ("bert_max", _set_module(0, ROUTER), (), ("Router",)),
    "activation": ("bert_sum", _activation, (), ("'log1p_relu'", "relu")),
    "family": ("bert_max", _family, (), ("'distilbert'", "BertForMaskedLM")),
    "task": ("bert_max", _fill_mask_task, (), ("'feature-extraction'", "fill-mask")),
    "fused graph": ("bert_sum", None, ("--graph=fused",), ("--graph fused", "plain")),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_a_sparse_encoder_the_export_cannot_serve_is_refused(
    sparse_encoder_folders: dict[str, Path], tmp_path: Path, case: str
) -> None:
    name, breaking, arguments, messages = REFUSALS[case]
    folder = tmp_path / "model"
    shutil.copytree(sparse_encoder_folders[name], folder)
    if breaking is not None:
        breaking(folder)
    repository = tmp_path / "repository"
    assert_refused(export_folder(folder, repository, *arguments), messages)


def test_openvino_refuses_a_sparse_export(exports: dict[str, ExportRun]) -> None:
    export = exports["bert_sum"]
    result = run_script(EXPORT_OPENVINO, f"--repository={export.repository}")
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert "holds a sparse encoder's export" in result.stderr
    assert "sparse encoders are exported for ONNX Runtime only" in result.stderr
    assert not (export.repository / "openvino_cpu").exists()


def test_openvino_refuses_a_sparse_encoder_folder(
    sparse_encoder_folders: dict[str, Path], tmp_path: Path
) -> None:
    """Named with --model-dir beside a bi-encoder's record, the folder itself is refused."""
    repository = tmp_path / "repository"
    record = repository / "onnx_cpu/embedder/1/export.json"
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"model_dir": str(sparse_encoder_folders["bert_max"])}))
    result = run_script(
        EXPORT_OPENVINO,
        f"--repository={repository}",
        f"--model-dir={sparse_encoder_folders['bert_max']}",
    )
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert "holds a sparse encoder (SparseEncoder)" in result.stderr
    assert "sparse encoders are exported for ONNX Runtime only" in result.stderr
    assert not (repository / "openvino_cpu").exists()
