"""export/export_onnx.py and export_openvino.py on a tiny random-weight model of each family
the export serves (harness/family_models.py: BERT with CLS pooling and a Dense module,
XLM-RoBERTa with a Unigram tokenizer, MPNet, ModernBERT, a Qwen3-style decoder with last-token
pooling, left padding and an EOS post-processor): each export passes its own self-check against
sentence-transformers, prompted texts included, and records what the server needs; folders it
cannot serve are refused with a message naming what it cannot serve, and nothing is written.

The exports run in the export environment, as scripts/setup.sh runs them; the graphs they wrote
are run here with onnxruntime."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from engine_fault import died, with_engine_fault
from export_records import assert_the_recorded_choices_replay
from model_common.openvino_runtime import ov
from model_common.openvino_setting import THREADS_PER_STREAM, Setting, precision_candidates
from tokenizers import Tokenizer

from export.engine_choice import MIN_COSINE
from harness.export_environment import run_in_export_environment
from server.paths import REPO_ROOT
from tests.family_catalog import FamilyCatalog

EXPORT_ONNX = REPO_ROOT / "export" / "export_onnx.py"
EXPORT_OPENVINO = REPO_ROOT / "export" / "export_openvino.py"
DIED = died("SIGFPE", "compiling")
# Check texts: 13 unprompted, 5 more after each non-empty prompt (export/reference_check.py).
UNPROMPTED_CHECKS, CHECKS_PER_PROMPT = 13, 5
QWEN3_QUERY = "Instruct: Given a web search query, retrieve relevant passages\nQuery: "
# What each family's record must say: its folder's architecture, modules and prompts.
_NORMALIZED = ["Transformer", "Pooling", "Normalize"]
_QUERY_PASSAGE = {"query": "query: ", "document": "passage: "}
_KEYS = ("model_type", "modules", "pooling", "embedding_dim", "prompts", "default_prompt_name")
EXPECTED: dict[str, dict[str, Any]] = {
    family: dict(zip(_KEYS, values, strict=True))
    for family, values in {
        "bert": ("bert", ["Transformer", "Pooling", "Dense"], "cls", 48, _QUERY_PASSAGE, None),
        "xlmr": ("xlm-roberta", _NORMALIZED, "mean", 64, _QUERY_PASSAGE, None),
        "mpnet": ("mpnet", _NORMALIZED, "mean", 64, {}, None),
        "modernbert": ("modernbert", _NORMALIZED, "mean", 64, {}, None),
        "qwen3": ("qwen3", _NORMALIZED, "lasttoken", 64, {"query": QWEN3_QUERY}, "query"),
    }.items()
}
# Different texts, none empty, for telling the models' embeddings apart.
DISTINCT_TEXTS = [
    "How do I reset my password?",
    "The weather today is sunny with a light breeze.",
    "Triton serves several embedding models from one process.",
    "東京は日本の首都です。",
    "Le chat dort sur le canapé.",
    "🎉🚀 Launch day!",
]


@dataclass(frozen=True)
class Export:
    """One family's export: its folder and the repository written."""

    folder: Path
    repository: Path

    @property
    def record(self) -> dict[str, Any]:
        return json.loads((self.repository / "onnx_cpu/embedder/1/export.json").read_text())

    def session(self) -> ort.InferenceSession:
        return ort.InferenceSession(
            str(self.repository / "onnx_cpu/embedder/1/model.onnx"),
            providers=["CPUExecutionProvider"],
        )

    def tokenizer(self) -> Tokenizer:
        return Tokenizer.from_file(str(self.repository / "shared/tokenizer/1/tokenizer.json"))


def run_export(script: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_in_export_environment([str(script), *args], check=False)


@pytest.fixture(scope="module")
def exports(family_folders: dict[str, Path], family_exports: FamilyCatalog) -> dict[str, Export]:
    """Each family exported as the launcher exports a catalog entry (export_onnx.py with its
    folder, then export_openvino.py with only --repository where its engine may be OpenVINO),
    once for these tests and tests/test_catalog_families.py; a failed export refused the
    catalog, naming it."""
    return {
        name: Export(family_folders[name], family_exports.repository(name)) for name in EXPECTED
    }


def embed(export: Export, texts: list[str], left: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The exported graph on the served tokenizer's ids, padded on the right as the server
    pads (or on the left); returns (embedding, norm)."""
    encodings = export.tokenizer().encode_batch(texts)
    width = max(len(encoding.ids) for encoding in encodings)
    input_ids = np.zeros((len(texts), width), np.int64)
    attention_mask = np.zeros((len(texts), width), np.int64)
    for row, encoding in enumerate(encodings):
        columns = slice(width - len(encoding.ids), width) if left else slice(0, len(encoding.ids))
        input_ids[row, columns] = encoding.ids
        attention_mask[row, columns] = 1
    embedding, norm = export.session().run(
        ["embedding", "norm"], {"input_ids": input_ids, "attention_mask": attention_mask}
    )
    return embedding, norm


@pytest.mark.parametrize("family", list(EXPECTED))
def test_each_family_exports_and_passes_its_self_check(
    exports: dict[str, Export], family: str
) -> None:
    export = exports[family]
    record = export.record
    for key, value in EXPECTED[family].items():
        assert record[key] == value, (key, record[key])
    config = json.loads((export.folder / "config.json").read_text())
    assert record["vocab_size"] == config["vocab_size"]
    assert record["max_seq_length"] == 128
    assert record["model_dir"] == str(export.folder)
    assert record["graph"] == "plain" and record["min_cosine_required"] == MIN_COSINE
    assert record["min_cosine"] >= MIN_COSINE, record["check_cosines"]
    assert min(record["check_cosines"].values()) == record["min_cosine"]
    prompted = sum(1 for text in record["prompts"].values() if text)
    assert record["num_check_texts"] == UNPROMPTED_CHECKS + CHECKS_PER_PROMPT * prompted
    assert len(record["check_cosines"]) == record["num_check_texts"]
    # Each folder that reads the record gets the same one.
    for folder in ("torch_gpu/embedder/1", "shared/tokenizer/1"):
        assert json.loads((export.repository / folder / "export.json").read_text()) == record


@pytest.mark.parametrize("family", list(EXPECTED))
def test_the_graph_serves_unit_vectors_of_the_recorded_width(
    exports: dict[str, Export], family: str
) -> None:
    embedding, norm = embed(exports[family], DISTINCT_TEXTS)
    assert embedding.dtype == np.float32 and norm.dtype == np.float32
    assert embedding.shape == (len(DISTINCT_TEXTS), exports[family].record["embedding_dim"])
    assert norm.shape == (len(DISTINCT_TEXTS), 1) and (norm > 0).all()
    np.testing.assert_allclose(np.linalg.norm(embedding, axis=1), 1.0, atol=1e-5)


@pytest.mark.parametrize("family", list(EXPECTED))
def test_random_weights_still_tell_texts_apart(exports: dict[str, Export], family: str) -> None:
    """Else a cosine of 0.9999 to sentence-transformers would say little."""
    embedding, _ = embed(exports[family], DISTINCT_TEXTS)
    similarity = embedding @ embedding.T
    off_diagonal = similarity[~np.eye(len(DISTINCT_TEXTS), dtype=bool)]
    assert off_diagonal.mean() < 0.9 and off_diagonal.max() < 0.99, similarity


def test_the_decoder_pools_the_last_token_on_either_padding_side(
    exports: dict[str, Export],
) -> None:
    """The server pads on the right, sentence-transformers pads Qwen3 on the left: the graph
    finds the last token from the mask either way (rotary positions make the shift moot)."""
    export = exports["qwen3"]
    right, _ = embed(export, DISTINCT_TEXTS)
    left, _ = embed(export, DISTINCT_TEXTS, left=True)
    assert np.sum(right * left, axis=1).min() >= MIN_COSINE


def test_the_served_tokenizer_runs_the_models_post_processor(exports: dict[str, Export]) -> None:
    qwen3 = exports["qwen3"].tokenizer()
    eos = qwen3.token_to_id("<|endoftext|>")
    assert qwen3.encode("hello").ids[-1] == eos
    assert qwen3.encode("").ids == [eos]
    assert qwen3.padding is None and qwen3.truncation is not None
    assert qwen3.truncation["max_length"] == 128
    assert len(qwen3.encode(QWEN3_QUERY + " ".join(["word"] * 500)).ids) == 128
    bert = exports["bert"].tokenizer()
    ids = bert.encode("query: hello").ids
    assert ids[0] == bert.token_to_id("[CLS]") and ids[-1] == bert.token_to_id("[SEP]")


def test_prompts_change_what_the_graph_embeds(exports: dict[str, Export]) -> None:
    """The record's prompts, put before the text as the tokenizer stage puts them, give other
    embeddings than the bare text (else the prompted self-check would prove nothing)."""
    for family in ("bert", "xlmr", "qwen3"):
        export = exports[family]
        prompts = export.record["prompts"]
        texts = ["a short query", *(prompt + "a short query" for prompt in prompts.values())]
        embedding, _ = embed(export, texts)
        assert (embedding[1:] @ embedding[0]).max() < 0.999, family


def test_openvino_converts_and_checks_a_decoder(exports: dict[str, Export]) -> None:
    """export_openvino.py with only --repository, as the catalog ran it: the weights folder
    comes from the ONNX record, and the prompted and left-padded checks hold in OpenVINO."""
    export = exports["qwen3"]
    record = json.loads((export.repository / "openvino_cpu/embedder/1/export.json").read_text())
    assert record["model_dir"] == str(export.folder)
    assert record["prompts"] == EXPECTED["qwen3"]["prompts"]
    assert_the_recorded_choices_replay(record["openvino"])


def _repository_of_onnx(export: Export, tmp_path: Path) -> Path:
    """A repository holding a copy of the export's ONNX graph and record alone."""
    repository = tmp_path / "repository"
    shutil.copytree(export.repository / "onnx_cpu", repository / "onnx_cpu")
    return repository


def _first_precision() -> str:
    """The precision this processor's export tries first (bf16 where OpenVINO runs it)."""
    capabilities = ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    return precision_candidates("BF16" in capabilities)[0]


def test_a_setting_whose_engine_dies_is_refused_and_the_next_served(
    exports: dict[str, Export], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The decoder's first precision dies with one thread per stream, on every processor: the
    export names the death, tries two threads per stream, and serves what then keeps the bar
    (on a bf16 processor, where random-weight Qwen3 misses it in bf16, float32)."""
    first = _first_precision()
    # As OpenVINO 2026.4.1 dies compiling a decoder in bf16 with one thread per stream on AMX.
    with_engine_fault(monkeypatch, f"SIGFPE:{first}/1")
    repository = _repository_of_onnx(exports["qwen3"], tmp_path)
    result = run_export(EXPORT_OPENVINO, f"--repository={repository}")
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert f"check: {first} refused: {DIED}" in result.stdout, result.stdout
    openvino = json.loads((repository / "openvino_cpu/embedder/1/export.json").read_text())
    record = openvino["openvino"]
    assert record["failed"] == {first: DIED}, record
    assert Setting(first, 2).label in record["min_cosine"], record
    assert_the_recorded_choices_replay(record)


def test_a_precision_whose_engine_dies_in_every_layout_gives_way(
    exports: dict[str, Export], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every layout of the first precision dies: a bf16 processor serves float32; without
    bfloat16, no setting is left, the export refuses itself naming each death, and writes
    nothing."""
    first = _first_precision()
    dead = [Setting(first, threads) for threads in THREADS_PER_STREAM]
    with_engine_fault(monkeypatch, f"SIGFPE:{first}/1,{first}/2")
    repository = _repository_of_onnx(exports["qwen3"], tmp_path)
    result = run_export(EXPORT_OPENVINO, f"--repository={repository}")
    written = repository / "openvino_cpu/embedder/1/export.json"
    deaths = "; ".join(f"{setting.label} refused: {DIED}" for setting in dead)
    if first == "f32":
        assert result.returncode != 0 and not written.exists()
        last = result.stderr.strip().splitlines()[-1]
        assert last.startswith(f"no OpenVINO setting kept its bar ({deaths}"), last
        return
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    record = json.loads(written.read_text())["openvino"]
    assert record["failed"] == {setting.label: DIED for setting in dead}, record
    assert record["precision"] == "f32"
    assert_the_recorded_choices_replay(record)


def _edit_json(path: Path, edit: Callable[[Any], Any]) -> None:
    path.write_text(json.dumps(edit(json.loads(path.read_text()))))


def _pooling_config(folder: Path) -> Path:
    modules = json.loads((folder / "modules.json").read_text())
    path = next(module["path"] for module in modules if module["type"].endswith(".Pooling"))
    return folder / path / "config.json"


def _max_pooling(folder: Path) -> None:
    _edit_json(_pooling_config(folder), lambda config: {**config, "pooling_mode": "max"})


def _weightedmean_pooling(folder: Path) -> None:
    # The legacy boolean keys, as older published folders have them.
    _edit_json(
        _pooling_config(folder),
        lambda config: {
            **config,
            "pooling_mode_lasttoken": False,
            "pooling_mode_weightedmean_tokens": True,
        },
    )


def _prompt_excluded(folder: Path) -> None:
    _edit_json(_pooling_config(folder), lambda config: {**config, "include_prompt": False})


def _unsupported_architecture(folder: Path) -> None:
    _edit_json(folder / "config.json", lambda config: {**config, "model_type": "gpt2"})


def _unsupported_module(folder: Path) -> None:
    layer_norm = {
        "idx": 3,
        "name": "3",
        "path": "3_LayerNorm",
        "type": "sentence_transformers.sentence_transformer.modules.layer_norm.LayerNorm",
    }
    _edit_json(folder / "modules.json", lambda modules: [*modules, layer_norm])


def _tokenizer_differs(folder: Path) -> None:
    # sentence-transformers then truncates long texts on the left; tokenizer.json on the right.
    _edit_json(
        folder / "tokenizer_config.json", lambda config: {**config, "truncation_side": "left"}
    )


# (family copied, how it is broken, what the refusal must name)
REFUSALS: dict[str, tuple[str, Callable[[Path], None], tuple[str, ...]]] = {
    "max pooling": ("mpnet", _max_pooling, ("unsupported pooling mode", "max")),
    "weightedmean pooling": (
        "qwen3",
        _weightedmean_pooling,
        ("unsupported pooling mode", "pooling_mode_weightedmean_tokens"),
    ),
    "prompt left out of pooling": ("qwen3", _prompt_excluded, ("include_prompt",)),
    "architecture": ("bert", _unsupported_architecture, ("model_type 'gpt2'",)),
    "module": (
        "xlmr",
        _unsupported_module,
        ("unsupported sentence-transformers modules", "LayerNorm"),
    ),
    "tokenizer": ("mpnet", _tokenizer_differs, ("tokenizer check failed", "Sentence number 0")),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_a_folder_the_export_cannot_serve_is_refused(
    family_folders: dict[str, Path], tmp_path: Path, case: str
) -> None:
    family, breaking, messages = REFUSALS[case]
    folder = tmp_path / "model"
    shutil.copytree(family_folders[family], folder)
    breaking(folder)
    repository = tmp_path / "repository"
    result = run_export(EXPORT_ONNX, f"--model-dir={folder}", f"--repository={repository}")
    assert result.returncode != 0
    # A refusal is one message, not a traceback.
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    for message in messages:
        assert message in result.stderr, result.stderr[-3000:]
    assert not repository.exists()
