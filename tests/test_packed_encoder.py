"""The torch_gpu embedder's packed encoder (model_repository/torch_gpu/
embedder/1/packed_encoder.py, packed_rows.py) against sentence-transformers,
both in float32 on CPU: the packaged all-MiniLM-L6-v2 and small random-weight
BERT (CLS pooling, a Dense module) and XLM-RoBERTa (mean pooling, positions
after the padding id) models from harness/family_models.py. Rows of mixed
lengths, one row alone, a row at the max length, empty and whitespace-only
texts; a token budget that splits the rows into several forwards gives the
same embeddings as one forward, and so do forwards padded to token buckets
(the shapes CUDA graphs replay); an architecture the encoder does not serve
and a malformed bucket are refused by name.

torch lives only in .venv-export, so both sides run there as subprocesses
(tests/torch_reference.py, tests/st_reference.py), each once for all cases.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from embedding_client.batching import pad_rows
from tokenizers import Tokenizer

from export.engine_choice import MIN_COSINE
from harness.export_environment import run_in_export_environment
from server.paths import ONNX_MODEL_DIR, TOKENIZER_JSON

TESTS = Path(__file__).resolve().parent
# Far above any case's tokens: everything in one forward.
ONE_FORWARD = 1 << 20
LONG_TEXT = " ".join(f"Sentence {index} is about attention and padding." for index in range(80))
TEXTS = (
    "The quick brown fox jumps over the lazy dog.",
    "",
    " \t\n  ",
    "A",
    "How do I reset my password?",
    LONG_TEXT,
    "Café naïve façade: résumé of the jalapeño crème brûlée.",
    "東京は日本の首都です。",
    "Triton Inference Server batches requests dynamically across model instances.",
)
MODELS = ("minilm", "bert", "xlmr")
# name -> (texts, tokens per forward: None for the model's max length, the
# smallest budget the served model accepts; whether forwards run padded to
# token buckets, as CUDA graphs replay them)
CASES: dict[str, tuple[tuple[str, ...], int | None, bool]] = {
    "mixed": (TEXTS, ONE_FORWARD, False),
    "one-row": ((TEXTS[0],), ONE_FORWARD, False),
    "budget": (TEXTS, None, False),
    "buckets": (TEXTS, None, True),
}
# Rows a bucket holds: the first forward of TEXTS at the max length has
# more (5), so it runs unpadded; the others are padded.
BUCKET_ROWS = 4


@dataclass(frozen=True)
class Model:
    model_dir: Path
    pooling: str
    tokenizer_json: Path
    max_length: int

    def tokens(self, texts: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
        """Ids and mask as the tokenizer stage sends them: truncated at the
        max length, padded on the right to the longest row."""
        tokenizer = Tokenizer.from_file(str(self.tokenizer_json))
        tokenizer.enable_truncation(self.max_length)
        tokenizer.no_padding()
        return pad_rows([encoding.ids for encoding in tokenizer.encode_batch(list(texts))])


def _run(script: str, request: Any) -> subprocess.CompletedProcess[str]:
    return run_in_export_environment([str(TESTS / script)], json.dumps(request), check=False)


@pytest.fixture(scope="module")
def models(family_folders: dict[str, Path]) -> dict[str, Model]:
    export = json.loads((ONNX_MODEL_DIR / "export.json").read_text())
    found = {
        "minilm": Model(
            Path(export["model_dir"]), export["pooling"], TOKENIZER_JSON, export["max_seq_length"]
        )
    }
    for name, pooling in (("bert", "cls"), ("xlmr", "mean")):
        folder = family_folders[name]
        max_length = json.loads((folder / "sentence_bert_config.json").read_text())
        found[name] = Model(
            folder, pooling, folder / "tokenizer.json", int(max_length["max_seq_length"])
        )
    return found


@pytest.fixture(scope="module")
def results(models: dict[str, Model]) -> dict[tuple[str, str], dict[str, Any]]:
    """(model, case) -> the packed encoder's output, with sentence-transformers'
    embeddings of the same texts as "reference"."""
    keys = [(model, case) for model in MODELS for case in CASES]
    packed_requests, reference_requests = [], []
    for model_name, case in keys:
        model = models[model_name]
        texts, budget, bucketed = CASES[case]
        input_ids, attention_mask = model.tokens(texts)
        budget = budget or model.max_length
        packed_requests.append(
            {
                "model_dir": str(model.model_dir),
                "pooling": model.pooling,
                "device": "cpu",
                "tokens_per_forward": budget,
                "input_ids": input_ids.tolist(),
                "attention_mask": attention_mask.tolist(),
                # One too small for these forwards, and the budget itself.
                **({"token_buckets": f"16,{budget}", "max_rows": BUCKET_ROWS} if bucketed else {}),
            }
        )
        reference_requests.append({"model_dir": str(model.model_dir), "texts": list(texts)})
    packed, reference = (
        _run("torch_reference.py", packed_requests),
        _run("st_reference.py", reference_requests),
    )
    assert packed.returncode == 0, packed.stderr[-3000:]
    assert reference.returncode == 0, reference.stderr[-3000:]
    found = {}
    for key, output, embeddings in zip(
        keys, json.loads(packed.stdout), json.loads(reference.stdout), strict=True
    ):
        found[key] = {
            **output,
            "embedding": np.array(output["embedding"], np.float32),
            "norm": np.array(output["norm"], np.float32),
            "reference": np.array(embeddings, np.float32),
        }
    return found


def _cosines(result: dict[str, Any]) -> np.ndarray:
    return np.sum(result["embedding"] * result["reference"], axis=1)


def _assert_embeds_alike(result: dict[str, Any], baseline: dict[str, Any]) -> None:
    """The same embeddings and norms as `baseline`, and sentence-transformers'."""
    np.testing.assert_allclose(result["embedding"], baseline["embedding"], atol=1e-5)
    np.testing.assert_allclose(result["norm"], baseline["norm"], rtol=1e-5)
    assert _cosines(result).min() >= MIN_COSINE


@pytest.mark.parametrize("model", MODELS)
def test_packed_rows_of_mixed_lengths_match_sentence_transformers(
    models: dict[str, Model], results: dict[tuple[str, str], dict[str, Any]], model: str
) -> None:
    result = results[model, "mixed"]
    _, attention_mask = models[model].tokens(TEXTS)
    # The long text fills the max length; the empty ones are only special tokens.
    assert attention_mask.sum(axis=1).max() == models[model].max_length
    assert result["forwards"] == 1
    # Torch's variable-length kernels are CUDA-only: CPU runs each sequence alone.
    assert result["attention"] == "sdpa_per_sequence"
    cosines = _cosines(result)
    assert cosines.min() >= MIN_COSINE, dict(zip(TEXTS, cosines.tolist(), strict=True))
    np.testing.assert_allclose(np.linalg.norm(result["embedding"], axis=1), 1.0, rtol=1e-5)
    assert (result["norm"] > 0).all()


@pytest.mark.parametrize("model", MODELS)
def test_one_row_matches_sentence_transformers(
    results: dict[tuple[str, str], dict[str, Any]], model: str
) -> None:
    result = results[model, "one-row"]
    assert result["embedding"].shape[0] == 1
    assert _cosines(result).min() >= MIN_COSINE


@pytest.mark.parametrize("model", MODELS)
def test_a_token_budget_below_the_rows_splits_forwards_alike(
    results: dict[tuple[str, str], dict[str, Any]], model: str
) -> None:
    split, whole = results[model, "budget"], results[model, "mixed"]
    assert split["forwards"] > 1
    _assert_embeds_alike(split, whole)


@pytest.mark.parametrize("model", MODELS)
def test_forwards_padded_to_token_buckets_embed_alike(
    results: dict[tuple[str, str], dict[str, Any]], model: str
) -> None:
    padded, unpadded = results[model, "buckets"], results[model, "budget"]
    assert padded["forwards"] == unpadded["forwards"] > 1
    _assert_embeds_alike(padded, unpadded)


@pytest.mark.parametrize(
    ("buckets", "message"),
    [
        ("64,x", "CUDA graph bucket 'x' is not a positive token count"),
        ("0", "CUDA graph bucket '0' is not a positive token count"),
        ("64,512", "CUDA graph bucket 512 exceeds tokens_per_forward 256"),
    ],
)
def test_a_bad_token_bucket_is_refused_by_name(
    models: dict[str, Model], buckets: str, message: str
) -> None:
    model = models["minilm"]
    request = {
        "model_dir": str(model.model_dir),
        "pooling": model.pooling,
        "device": "cpu",
        "tokens_per_forward": 256,
        "token_buckets": buckets,
        "max_rows": 8,
        "input_ids": [[101, 2000, 102]],
        "attention_mask": [[1, 1, 1]],
    }
    refused = _run("torch_reference.py", request)
    assert refused.returncode != 0
    assert message in refused.stderr, refused.stderr[-2000:]


def test_an_architecture_it_does_not_serve_is_refused_by_name(tmp_path: Path) -> None:
    config = {"model_type": "mpnet", "architectures": ["MPNetModel"]}
    (tmp_path / "config.json").write_text(json.dumps(config))
    request = {
        "model_dir": str(tmp_path),
        "pooling": "mean",
        "device": "cpu",
        "tokens_per_forward": 128,
        "input_ids": [[0, 5, 2]],
        "attention_mask": [[1, 1, 1]],
    }
    refused = _run("torch_reference.py", request)
    assert refused.returncode != 0
    assert "does not serve architecture 'mpnet' (MPNetModel)" in refused.stderr
    assert "it serves bert, xlm-roberta" in refused.stderr
