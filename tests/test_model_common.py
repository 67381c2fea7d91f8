"""The checks every first stage runs (model_common), without a server: the
option check agrees with the serializer's messages, the token check refuses
what an embedder must never see, and the client parses every error kind."""

from __future__ import annotations

from collections.abc import Sequence
from importlib.resources import files

import numpy as np
import pytest
from embedding_client.decode import OPTION_DEFAULTS as CLIENT_OPTION_DEFAULTS
from embedding_client.decode import ROW_DTYPES as CLIENT_ROW_DTYPES
from embedding_client.errors import ERROR_KINDS, InvalidInputError
from model_common.admission import pending_requests
from model_common.errors import ErrorKind, error_message
from model_common.options import (
    BIT_PACKED,
    OPTION_DEFAULTS,
    ROW_DTYPES,
    ROW_FORMATS,
    SPARSE_OPTION_DEFAULTS,
    option_error,
    sparse_option_error,
)
from model_common.rows import Embeddings, embed_in_groups, groups_by_tokens, keep_largest
from model_common.text_options import Prompts, TextOptions, text_options
from model_common.tokens import TokenLimits, stack_tokens, token_error

DIMS = 384
LIMITS = TokenLimits(max_length=8, max_tokens=10, vocab_size=100)


@pytest.mark.parametrize(
    ("parameters", "expected"),
    [
        ({}, None),
        ({"dtype": "binary", "dimensions": 64, "normalize": False, "other": 1}, None),
        (
            {"dtype": "float64"},
            "invalid_parameter 'dtype': unknown dtype 'float64' (expected float32, float16, "
            "int8, uint8, binary or ubinary)",
        ),
        ({"dtype": 8}, "invalid_parameter 'dtype': must be a string"),
        ({"dimensions": True}, "invalid_parameter 'dimensions': must be an integer"),
        ({"dimensions": "64"}, "invalid_parameter 'dimensions': must be an integer"),
        ({"dimensions": 0}, "invalid_parameter 'dimensions': 0 is outside 1..384"),
        ({"dimensions": 385}, "invalid_parameter 'dimensions': 385 is outside 1..384"),
        ({"normalize": 1}, "invalid_parameter 'normalize': must be a boolean"),
        (
            {"dtype": "ubinary", "dimensions": 12},
            "invalid_parameter 'dimensions': binary and ubinary pack 8 dimensions per byte, "
            "so the dimensions must be a multiple of 8, got 12",
        ),
    ],
)
def test_option_error(parameters: dict[str, object], expected: str | None) -> None:
    error = option_error(parameters, DIMS)
    if expected is None:
        assert error is None
    else:
        assert error is not None and expected in error


VOCAB_SIZE = 30522
DENSE_OPTION = "sparse rows take dtype and max_active_dims only"


@pytest.mark.parametrize(
    ("parameters", "expected"),
    [
        ({}, None),
        ({"dtype": "float16", "max_active_dims": 64, "prompt_name": "query", "other": 1}, None),
        ({"max_active_dims": 1}, None),
        ({"max_active_dims": VOCAB_SIZE}, None),
        (
            {"dtype": "int8"},
            "invalid_parameter 'dtype': unknown dtype 'int8' (expected float32 or float16)",
        ),
        ({"dtype": 8}, "invalid_parameter 'dtype': must be a string"),
        ({"max_active_dims": True}, "invalid_parameter 'max_active_dims': must be an integer"),
        ({"max_active_dims": "64"}, "invalid_parameter 'max_active_dims': must be an integer"),
        ({"max_active_dims": 0}, "invalid_parameter 'max_active_dims': 0 is outside 1..30522"),
        (
            {"max_active_dims": VOCAB_SIZE + 1},
            "invalid_parameter 'max_active_dims': 30523 is outside 1..30522",
        ),
        ({"dimensions": 64}, f"invalid_parameter 'dimensions': {DENSE_OPTION}"),
        ({"normalize": False}, f"invalid_parameter 'normalize': {DENSE_OPTION}"),
    ],
)
def test_sparse_option_error(parameters: dict[str, object], expected: str | None) -> None:
    """The same messages as the serializer's (test/sparse_options_test.cc)."""
    assert sparse_option_error(parameters, VOCAB_SIZE) == expected


def test_sparse_option_defaults() -> None:
    assert SPARSE_OPTION_DEFAULTS == {"dtype": "float32", "max_active_dims": None}


def test_client_ships_the_row_format_declaration() -> None:
    """The client's copy is the server's declaration, byte for byte
    (docs/adding_a_row_format.md)."""
    declared = files("model_common").joinpath("row_formats.json").read_bytes()
    shipped = files("embedding_client").joinpath("row_formats.json").read_bytes()
    assert shipped == declared, (
        "copy the declaration: cp model_common/model_common/row_formats.json "
        "clients/embedding_client/"
    )


def test_row_formats_decode_with_the_declared_widths() -> None:
    """The numpy dtype each format decodes as holds one value per declared
    byte width (a packed byte for the bit-packed ones)."""
    assert tuple(CLIENT_ROW_DTYPES) == ROW_DTYPES
    assert CLIENT_OPTION_DEFAULTS == OPTION_DEFAULTS
    for name, row_format in ROW_FORMATS.items():
        decoded = CLIENT_ROW_DTYPES[name]
        assert decoded == np.dtype(row_format.numpy)
        assert decoded.itemsize == (row_format.bytes_per_value or 1), name
    assert BIT_PACKED == ("binary", "ubinary")
    assert OPTION_DEFAULTS == {"dtype": "float32", "dimensions": None, "normalize": True}


def _tokens(ids: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    array = np.array(ids, dtype=np.int64)
    return array, (array != 0).astype(np.int64)


@pytest.mark.parametrize(
    ("ids", "expected"),
    [
        ([[5, 6, 0]], None),
        ([[99]], None),
        ([[100]], "invalid_input: token ids must lie in [0, 100), got [100, 100]"),
        ([[-3, 4]], "invalid_input: token ids must lie in [0, 100), got [-3, 4]"),
        ([[1] * 9], "input_too_large: INPUT_IDS rows have 9 tokens; this model takes at most 8"),
        ([[1] * 6, [1] * 6], "input_too_large: the request has 12 tokens, over the limit of 10"),
    ],
)
def test_token_error(ids: list[list[int]], expected: str | None) -> None:
    error = token_error(*_tokens(ids), LIMITS)
    if expected is None:
        assert error is None
    else:
        assert error is not None and error.startswith(expected), error


def test_token_error_on_no_rows() -> None:
    empty = np.zeros((0, 3), np.int64)
    assert token_error(empty, empty, LIMITS) == (
        "invalid_input: INPUT_IDS is empty: send at least one row of at least one token"
    )


def test_token_error_on_shapes_that_disagree() -> None:
    error = token_error(np.ones((2, 3), np.int64), np.ones((2, 4), np.int64), LIMITS)
    assert error == (
        "invalid_input: INPUT_IDS [2, 3] and ATTENTION_MASK [2, 4] must have the same shape"
    )


def test_stack_tokens_pads_each_request_to_the_longest_row() -> None:
    input_ids, attention_mask = stack_tokens([_tokens([[1, 2, 3]]), _tokens([[4], [5]])])
    assert input_ids.tolist() == [[1, 2, 3], [4, 0, 0], [5, 0, 0]]
    assert attention_mask.tolist() == [[1, 1, 1], [1, 0, 0], [1, 0, 0]]


def test_the_client_knows_every_error_kind() -> None:
    # The models' kinds, beside the edge's (tests/test_edge_refusals.py).
    assert {kind.value for kind in ErrorKind} <= set(ERROR_KINDS)
    for kind in ErrorKind:
        # Triton puts its own words in front of a composing model's error.
        message = "in ensemble 'embed', " + error_message(kind, "detail", "dtype")
        error = InvalidInputError(message, "400")
        assert (error.kind, error.parameter) == (kind.value, "dtype")
    assert InvalidInputError(error_message(ErrorKind.INVALID_INPUT, "x")).parameter is None


def test_pending_requests_reads_the_models_gauge_over_its_versions() -> None:
    metrics = "\n".join(
        [
            "# TYPE nv_inference_pending_request_count gauge",
            'nv_inference_pending_request_count{model="embed",version="1"} 7',
            'nv_inference_pending_request_count{model="embedder",version="1"} 12',
            'nv_inference_pending_request_count{model="embedder",version="2"} 3',
            'nv_inference_queue_duration_us{model="embedder",version="1"} 99',
        ]
    )
    assert pending_requests(metrics, "embedder") == 15
    assert pending_requests(metrics, "tokenizer") == 0


@pytest.mark.parametrize(
    ("lengths", "parallel_runs", "sizes"),
    [
        # 8 texts of 256 tokens: 4 to a run of 1024 tokens.
        ([256] * 8, 2, [4, 4]),
        ([256] * 10, 2, [4, 4, 2]),
        # 64 queries of 12 tokens fit one run, cut again for two runners.
        ([12] * 64, 2, [32, 32]),
        # Long rows first (with one short row in their run's room), then the
        # short ones fill whole runs.
        ([50] * 30 + [256] * 3, 2, [4, 20, 9]),
        # A row longer than the cap runs alone.
        ([2000, 10], 1, [1, 1]),
        ([7], 2, [1]),
    ],
)
def test_groups_by_tokens_caps_padded_tokens_longest_first(
    lengths: list[int], parallel_runs: int, sizes: list[int]
) -> None:
    real = np.array(lengths)
    groups = groups_by_tokens(real, 1024, parallel_runs)
    assert [len(group) for group in groups] == sizes
    order = np.concatenate(groups)
    assert sorted(order.tolist()) == list(range(len(lengths)))
    assert list(real[order]) == sorted(lengths, reverse=True)
    for group in groups:
        assert len(group) == 1 or len(group) * real[group].max() <= 1024


def test_embed_in_groups_trims_each_group_and_keeps_row_order() -> None:
    ids = np.array([[1, 2, 3, 0], [4, 0, 0, 0], [5, 6, 0, 0], [7, 8, 9, 10]], np.int64)
    mask = (ids != 0).astype(np.int64)
    seen: list[tuple[int, ...]] = []

    def run_groups(groups: Sequence[tuple[np.ndarray, np.ndarray]]) -> list[Embeddings]:
        out = []
        for group_ids, group_mask in groups:
            seen.append(group_ids.shape)
            # A row's "embedding" is its first id; its norm its real length.
            out.append(
                (
                    np.repeat(group_ids[:, :1], 2, axis=1).astype(np.float32),
                    group_mask.sum(axis=1, keepdims=True).astype(np.float32),
                )
            )
        return out

    embedding, norm = embed_in_groups(
        ids, mask, 2, lambda lengths: groups_by_tokens(lengths, 8, 2), run_groups
    )
    assert seen == [(2, 4), (2, 2)]  # [7..10], [1, 2, 3] then [5, 6], [4]
    np.testing.assert_array_equal(embedding[:, 0], [1, 4, 5, 7])
    np.testing.assert_array_equal(norm[:, 0], [3, 1, 2, 4])


E5 = Prompts({"query": "query: ", "passage": "passage: "}, None)
QWEN = Prompts({"query": "Instruct: search\nQuery: "}, "query")


@pytest.mark.parametrize(
    ("parameters", "prompts", "expected"),
    [
        ({}, E5, TextOptions("", True, "right")),
        ({}, QWEN, TextOptions("Instruct: search\nQuery: ", True, "right")),
        ({"prompt_name": "passage"}, E5, TextOptions("passage: ", True, "right")),
        ({"input_type": "document"}, E5, TextOptions("passage: ", True, "right")),
        ({"input_type": "document"}, QWEN, TextOptions("", True, "right")),
        ({"input_type": "query"}, QWEN, TextOptions("Instruct: search\nQuery: ", True, "right")),
        (
            {"truncate": False, "truncation_direction": "left"},
            E5,
            TextOptions("", False, "left"),
        ),
        (
            {"prompt_name": "doc"},
            E5,
            "invalid_parameter 'prompt_name': unknown prompt 'doc'; the model's prompts: "
            "passage, query",
        ),
        ({"prompt_name": 3}, E5, "invalid_parameter 'prompt_name': must be a string"),
        (
            {"prompt_name": "query", "input_type": "query"},
            E5,
            "invalid_parameter 'prompt_name': give prompt_name or input_type, not both",
        ),
        (
            {"input_type": "code"},
            E5,
            "invalid_parameter 'input_type': unknown input_type 'code' (expected one of query, "
            "document)",
        ),
        ({"truncate": "no"}, E5, "invalid_parameter 'truncate': must be a boolean"),
        (
            {"truncation_direction": "up"},
            E5,
            "invalid_parameter 'truncation_direction': unknown direction 'up' (expected right "
            "or left)",
        ),
    ],
)
def test_text_options(
    parameters: dict[str, object], prompts: Prompts, expected: TextOptions | str
) -> None:
    assert text_options(parameters, prompts, truncate_default=True) == expected


def test_keep_largest_keeps_the_k_largest_ties_to_the_lower_index() -> None:
    rows = np.array([[0.0, 2.0, 1.0, 2.0, 3.0], [1.0, 1.0, 1.0, 0.0, 0.5]], np.float32)
    np.testing.assert_array_equal(
        keep_largest(rows, 2), [[0.0, 2.0, 0.0, 0.0, 3.0], [1.0, 1.0, 0.0, 0.0, 0.0]]
    )
    np.testing.assert_array_equal(keep_largest(rows, 3)[0], [0.0, 2.0, 0.0, 2.0, 3.0])
    assert keep_largest(rows, 5) is rows
