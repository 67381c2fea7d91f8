"""The benchmark workloads: deterministic texts of the target token counts,
and perf_analyzer input data that fits the `embed` / `embed_tokens`
contracts (read from their config.pbtxt)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from embedding_client.tokenization import ClientTokenizer
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from perf.workloads import (
    texts,
    token_counts,
    workload,
    write_text_input_data,
    write_token_input_data,
)
from server.paths import SHARED_REPOSITORY, TOKENIZER_JSON

MODEL_MAX_TOKENS = 256


def _inputs(model: str) -> dict[str, tuple[str, list[int]]]:
    config = text_format.Parse(
        (SHARED_REPOSITORY / model / "config.pbtxt").read_text(), model_config_pb2.ModelConfig()
    )
    return {
        tensor.name: (model_config_pb2.DataType.Name(tensor.data_type), list(tensor.dims))
        for tensor in config.input
    }


def test_texts_are_deterministic_distinct_prose() -> None:
    first = texts("short", 300)
    assert first == texts("short", 300)
    assert first[:10] == texts("short", 10)
    assert len(set(first)) == len(first)
    for text in first:
        assert text == " ".join(text.split())  # whitespace normalized
        assert sum(char.isalpha() for char in text) > len(text) / 2


def test_texts_repeat_past_the_end_of_the_prose() -> None:
    many = texts("long", 400)
    distinct = len(set(many))
    assert 100 < distinct < 400
    assert many[distinct:] == many[: 400 - distinct]


def test_queries_hold_8_to_16_tokens() -> None:
    counts = token_counts(texts("query", 1000), truncate=False)
    assert all(8 <= count <= 16 for count in counts), (min(counts), max(counts))


def test_short_texts_hold_about_50_tokens() -> None:
    counts = token_counts(texts("short", 1000), truncate=False)
    assert all(44 <= count <= 50 for count in counts), (min(counts), max(counts))


def test_long_texts_hold_about_512_tokens_and_the_model_keeps_256() -> None:
    batch = texts("long", 100)
    untruncated = token_counts(batch, truncate=False)
    assert all(500 <= count <= 512 for count in untruncated), (min(untruncated), max(untruncated))
    assert token_counts(batch) == [MODEL_MAX_TOKENS] * len(batch)


@pytest.mark.parametrize("kind", ["short", "long"])
@pytest.mark.parametrize("per_request", [1, 8, 32])
def test_workload_shapes_and_token_means(kind: str, per_request: int) -> None:
    load = workload(kind, per_request, requests=5)  # type: ignore[arg-type]
    assert load.name == f"{kind}-{per_request}"
    assert len(load.requests) == 5
    assert all(len(request) == per_request for request in load.requests)
    flat = [text for request in load.requests for text in request]
    assert flat == texts(kind, 5 * per_request)  # type: ignore[arg-type]
    if kind == "short":
        assert 44 <= load.mean_tokens == load.mean_untruncated_tokens <= 50
    else:
        assert load.mean_tokens == MODEL_MAX_TOKENS
        assert 500 <= load.mean_untruncated_tokens <= 512


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="kind"):
        texts("medium", 1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="texts_per_request"):
        workload("short", 0)


def test_text_input_data_fits_the_embed_contract(tmp_path: Path) -> None:
    assert _inputs("embed") == {"TEXT": ("TYPE_STRING", [1])}
    load = workload("short", 8, requests=3)
    data = json.loads(write_text_input_data(load, tmp_path / "in.json").read_text())["data"]
    # One row per entry, request-major: perf_analyzer -b 8 sends entries
    # 8k..8k+7 as request k.
    assert data == [{"TEXT": [text]} for request in load.requests for text in request]


def test_token_input_data_fits_the_embed_tokens_contract(tmp_path: Path) -> None:
    assert _inputs("embed_tokens") == {
        "INPUT_IDS": ("TYPE_INT64", [-1]),
        "ATTENTION_MASK": ("TYPE_INT64", [-1]),
    }
    load = workload("long", 4, requests=2)
    data = json.loads(write_token_input_data(load, tmp_path / "in.json").read_text())["data"]
    assert len(data) == 8
    client = ClientTokenizer.from_file(TOKENIZER_JSON)
    for index, request in enumerate(load.requests):
        entries = data[index * 4 : (index + 1) * 4]
        expected = client.encode(request)
        width = max(len(row) for row in expected)
        assert width <= MODEL_MAX_TOKENS
        for entry, ids in zip(entries, expected, strict=True):
            padding = width - len(ids)
            assert entry["INPUT_IDS"] == {"content": ids + [0] * padding, "shape": [width]}
            assert entry["ATTENTION_MASK"] == {
                "content": [1] * len(ids) + [0] * padding,
                "shape": [width],
            }
