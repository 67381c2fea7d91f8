"""A multi-vector encoder's rows per role and its MaxSim, without a server:
model_common.multivector builds what the tokenizer stages send the encoder
(query expansion, the skip-list, each role's max length) from an export
record's settings, and the MaxSim scorer's arithmetic equals the definition
written out here."""

from __future__ import annotations

import numpy as np
import pytest
from model_common.multivector import MultiVectorRoles, maxsim

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
