"""A multi-vector encoder's rows per role and its MaxSim, without a server:
model_common.multivector builds what the tokenizer stages send the encoder
(query expansion, the skip-list, each role's max length) from an export
record's settings, and the MaxSim scorer's arithmetic and the encoder's
token pooling (model_common.token_pooling) equal the definitions written out
here."""

from __future__ import annotations

import numpy as np
import pytest
from model_common.multivector import MultiVectorRoles, maxsim
from model_common.token_pooling import ModelPooling, TokenPooling, pool_rows, row_factors

RECORD = {
    "max_seq_length": 64,
    "query_length": None,
    "document_length": 48,
    "query_expansion": {"strategy": "fixed", "length": 6, "attend": False, "token_id": 4},
    "skiplist_ids": [9, 11],
    "skiplist_tasks": ["document"],
}


def test_a_fixed_expansion_pads_queries_with_the_token_unattended() -> None:
    roles = MultiVectorRoles.from_record(RECORD)
    assert roles.max_length("query") == 6 and roles.max_length("document") == 48
    rows = roles.rows("query", [[2, 9, 3], [2, 7, 8, 11, 3]])
    np.testing.assert_array_equal(rows.input_ids, [[2, 9, 3, 4, 4, 4], [2, 7, 8, 11, 3, 4]])
    np.testing.assert_array_equal(rows.attention_mask, [[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 0]])
    # Every position is scored; the skip-list is the documents'.
    np.testing.assert_array_equal(rows.vector_mask, np.ones((2, 6)))


def test_a_document_drops_the_skip_list_and_is_padded_to_its_longest() -> None:
    rows = MultiVectorRoles.from_record(RECORD).rows("document", [[2, 9, 3], [2, 7, 11, 3]])
    np.testing.assert_array_equal(rows.input_ids, [[2, 9, 3, 0], [2, 7, 11, 3]])
    np.testing.assert_array_equal(rows.attention_mask, [[1, 1, 1, 0], [1, 1, 1, 1]])
    np.testing.assert_array_equal(rows.vector_mask, [[1, 0, 1, 0], [1, 1, 0, 1]])


def test_a_min_expansion_that_attends_keeps_long_queries_whole() -> None:
    record = {
        **RECORD,
        "query_length": 10,
        "query_expansion": {"strategy": "min", "length": 4, "attend": True, "token_id": 4},
        "skiplist_tasks": ["query", "document"],
    }
    roles = MultiVectorRoles.from_record(record)
    assert roles.max_length("query") == 10
    rows = roles.rows("query", [[2, 3], [2, 5, 6, 9, 8, 3]])
    np.testing.assert_array_equal(rows.input_ids, [[2, 3, 4, 4, 0, 0], [2, 5, 6, 9, 8, 3]])
    np.testing.assert_array_equal(rows.attention_mask, [[1, 1, 1, 1, 0, 0], [1] * 6])
    np.testing.assert_array_equal(rows.vector_mask, [[1, 1, 1, 1, 0, 0], [1, 1, 1, 0, 1, 1]])


def test_without_settings_both_roles_are_the_texts_as_tokenized() -> None:
    roles = MultiVectorRoles.from_record({"max_seq_length": 32})
    assert roles.max_length("query") == roles.max_length("document") == 32
    for role in ("query", "document"):
        rows = roles.rows(role, [[2, 9, 3], [2, 3]])
        np.testing.assert_array_equal(rows.vector_mask, rows.attention_mask)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"query_expansion": {"strategy": "max", "length": 3}}, "query_expansion"),
        ({"skiplist_tasks": ["passage"]}, "unknown roles ['passage']"),
        ({"skiplist_ids": 9}, "skiplist_ids"),
    ],
)
def test_a_bad_record_is_refused_naming_the_field(change: dict[str, object], named: str) -> None:
    with pytest.raises(ValueError, match=named.replace("[", r"\[").replace("]", r"\]")):
        MultiVectorRoles.from_record({**RECORD, **change})


def test_maxsim_sums_each_scored_query_vectors_best_match() -> None:
    rng = np.random.default_rng(3)
    queries = rng.normal(size=(3, 5, 8)).astype(np.float32)
    documents = rng.normal(size=(3, 7, 8)).astype(np.float32)
    query_mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 1, 0, 1]])
    mask = np.array([[1, 1, 0, 0, 0, 0, 0], [1] * 7, [0] * 7])
    scores = maxsim(queries, query_mask, documents, mask)
    assert scores.shape == (3, 1) and scores.dtype == np.float32
    for row in range(2):
        kept_queries = queries[row][query_mask[row] == 1]
        kept_documents = documents[row][mask[row] == 1]
        best = (kept_queries @ kept_documents.T).max(axis=1).sum()
        assert scores[row, 0] == pytest.approx(best, rel=1e-5)
    # A document with no vector scores 0.
    assert scores[2, 0] == 0.0


def _unit(vectors: np.ndarray) -> np.ndarray:
    return vectors / np.linalg.norm(vectors, axis=-1, keepdims=True)


def _groups(rng: np.random.Generator, sizes: list[int], dims: int = 8) -> np.ndarray:
    """Unit vectors in far-apart groups of the sizes, each group near its own direction."""
    centers = np.eye(dims)[: len(sizes)]
    return np.concatenate(
        [
            _unit(center + 0.01 * rng.standard_normal((size, dims)))
            for center, size in zip(centers, sizes, strict=True)
        ]
    ).astype(np.float32)


def test_pooling_keeps_the_protected_vector_and_averages_each_ward_cluster() -> None:
    """HierarchicalTokenPooling's definition: the first vector kept, the other 6 clustered into
    6 // 2 = 3 (Ward on cosine distance: here the three groups), each cluster's mean, every
    vector then normalized; clusters in label order, which follows the tree, not the rows."""
    vectors = _groups(np.random.default_rng(0), [1, 2, 1, 3])
    vectors = np.concatenate([vectors[:1], vectors[1:][[0, 2, 3, 1, 4, 5]]])
    pooled = TokenPooling(2).pool(vectors)
    np.testing.assert_allclose(pooled[0], vectors[0], atol=1e-6)
    means = [vectors[[1, 4]].mean(0), vectors[[2]].mean(0), vectors[[3, 5, 6]].mean(0)]
    found = sorted(range(1, 4), key=lambda row: int(np.argmax(pooled[row])))
    np.testing.assert_allclose(pooled[found], _unit(np.asarray(means)), atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(pooled, axis=1), 1, atol=1e-6)


@pytest.mark.parametrize(
    ("count", "factor", "protected", "kept"),
    [(10, 2, 1, 1 + 4), (10, 1.5, 1, 1 + 6), (10, 1, 1, 10), (3, 8, 1, 1 + 1), (10, 3, 0, 3)],
)
def test_pooling_keeps_the_protected_then_the_pooled_fraction(
    count: int, factor: float, protected: int, kept: int
) -> None:
    """protected + max((count - protected) // factor, 1) vectors, never more than there were."""
    vectors = _unit(np.random.default_rng(count).standard_normal((count, 8))).astype(np.float32)
    pooled = TokenPooling(factor, protected).pool(vectors)
    assert pooled.shape == (kept, 8) and pooled.dtype == np.float32
    np.testing.assert_allclose(pooled[:protected], vectors[:protected], atol=1e-6)
    if kept == count:
        np.testing.assert_allclose(pooled, vectors, atol=1e-6)


def test_without_normalizing_the_means_keep_their_length() -> None:
    vectors = _groups(np.random.default_rng(1), [1, 2, 2])
    pooled = TokenPooling(2, normalize=False).pool(vectors)
    assert len(pooled) == 3 and (np.linalg.norm(pooled[1:], axis=1) < 1).all()


def test_pooled_rows_serve_their_vectors_first_and_others_stay_as_they_came() -> None:
    vectors = _groups(np.random.default_rng(2), [2, 2, 2, 2]).reshape(2, 4, 8)
    mask = np.array([[1, 1, 0, 1], [1, 0, 1, 1]])
    factors = np.array([[0, 2], [0, 0]], np.float32)
    served, served_mask = pool_rows(vectors, mask, factors, None)
    np.testing.assert_array_equal(served_mask, [[1, 1, 0, 0], [1, 0, 1, 1]])
    np.testing.assert_allclose(served[0, :2], TokenPooling(2).pool(vectors[0][[0, 1, 3]]))
    assert not served[0, 2:].any()
    np.testing.assert_array_equal(served[1], vectors[1])


def test_a_models_pooling_covers_its_roles_and_a_request_compounds_on_it() -> None:
    model = ModelPooling.from_record(
        {
            "token_pooling": {
                "pool_factor": 2,
                "num_protected_tokens": 0,
                "normalize_embeddings": False,
                "tasks": ["document"],
            }
        }
    )
    assert model is not None and ModelPooling.from_record({}) is None
    np.testing.assert_array_equal(row_factors(model, "query", None), [0, 0])
    np.testing.assert_array_equal(row_factors(model, "document", 1.5), [2, 1.5])
    vectors = _unit(np.random.default_rng(3).standard_normal((1, 12, 8))).astype(np.float32)
    served, mask = pool_rows(
        vectors, np.ones((1, 12), np.int64), row_factors(model, "document", 1.5)[None], model
    )
    twice = TokenPooling(1.5).pool(TokenPooling(2, 0, False).pool(vectors[0]))
    assert mask.sum() == len(twice) == 1 + (6 - 1) // 1.5
    np.testing.assert_allclose(served[0, : len(twice)], twice, atol=1e-6)


def test_a_decimal_pool_factor_counts_clusters_as_the_request_wrote_it() -> None:
    """Six vectors to pool at 1.2 make 5 clusters (6 // 1.2), as sentence-transformers counts;
    the float32 nearest 1.2 would make 4."""
    rng = np.random.default_rng(5)
    vectors = rng.normal(size=(1, 7, 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=2, keepdims=True)
    factors = row_factors(None, "document", 1.2)[None, :]
    _, mask = pool_rows(vectors, np.ones((1, 7), np.int64), factors, None)
    assert int(mask.sum()) == 1 + 5
