"""The link search's array steps against plain per-row or dense computations: top-k per row,
exact pair scores, stacked query entries, and the token caches of link strings."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from jlse.models import link_index
from jlse.models.bm25 import FieldBM25, StackedFields, stacked_query_entries
from jlse.models.link_index import LinkIndex, _TokenCache
from jlse.models.sparse_rows import pair_products, top_per_row


def random_scores(seed: int, dtype: type = np.float32) -> sp.csr_matrix:
    """Sparse scores in [0, 1) on a coarse grid, so that rows hold many ties."""
    rng = np.random.default_rng(seed)
    dense = rng.integers(0, 8, (rng.integers(1, 12), rng.integers(1, 40))) / 8.0
    dense[rng.random(dense.shape) < 0.5] = 0.0
    return sp.csr_matrix(dense.astype(dtype))


def top_per_row_plainly(scores: sp.csr_matrix, k: int, min_ratio: float) -> set[tuple[int, int]]:
    """Row by row: entries at least min_ratio of the row's best, then those ranked at or above
    the k-th (ranks are 1 - score in the scores' own precision, as top_per_row documents)."""
    chosen = set()
    for row in range(scores.shape[0]):
        columns = scores.indices[scores.indptr[row] : scores.indptr[row + 1]]
        values = scores.data[scores.indptr[row] : scores.indptr[row + 1]]
        if not len(values):
            continue
        keep = values >= min_ratio * values.max() if k > 1 else values >= values.max()
        columns, ranks = columns[keep], (1.0 - values[keep])
        kth = np.sort(ranks)[min(k, len(ranks)) - 1]
        chosen |= {(row, int(column)) for column in columns[ranks <= kth]}
    return chosen


@pytest.mark.parametrize("seed", range(60))
def test_top_per_row_is_the_plain_row_by_row_choice(seed: int) -> None:
    scores = random_scores(seed, np.float32 if seed % 2 else np.float64)
    for k in (1, 2, 4):
        for min_ratio in (0.0, 0.5):
            rows, columns = top_per_row(scores, k, min_ratio)
            pairs = list(zip(rows.tolist(), columns.tolist(), strict=True))
            assert len(pairs) == len(set(pairs))
            assert set(pairs) == top_per_row_plainly(scores, k, min_ratio), (k, min_ratio)


def test_top_per_row_of_an_empty_matrix() -> None:
    rows, columns = top_per_row(sp.csr_matrix((3, 5), dtype=np.float32), 4, 0.5)
    assert rows.size == columns.size == 0


def test_pair_products_are_the_dot_products_of_query_and_vertex_rows() -> None:
    rng = np.random.default_rng(1)
    sizes = (7, 5, 9)
    docs = [sp.random(30, size, density=0.3, random_state=i, format="csr", dtype=np.float32)
            for i, size in enumerate(sizes)]
    offsets = np.cumsum((0, *sizes))
    queries = sp.random(6, offsets[-1], density=0.4, random_state=5, format="csr",
                        dtype=np.float32)
    rows = rng.integers(0, 6, 50)
    vertices = rng.integers(0, 30, 50)
    scores = pair_products(docs, offsets, queries, rows, vertices)
    dense_docs = sp.hstack(docs).toarray().astype(np.float64)
    expected = (queries.toarray()[rows] * dense_docs[vertices]).sum(axis=1)
    np.testing.assert_allclose(scores, expected, rtol=1e-6)


@pytest.fixture(scope="module")
def fields() -> list[FieldBM25]:
    docs = [["apple", "pie"], ["apple", "phone"], [], ["phone", "case", "case"], ["pie"]]
    other = [["site", "a"], ["site", "b"], ["c"], ["a", "b"], []]
    return [FieldBM25().fit(docs), FieldBM25(k1=1.5).fit(other), FieldBM25(b=0.5).fit(docs)]


def test_stacked_entries_are_each_fields_entries_side_by_side(fields) -> None:
    queries = [[["apple", "kiwi"], [], ["phone", "phone", "case"]],
               [["site"], ["zzz"], ["a", "b", "c"]],
               [["pie", "pie"], ["case"], []]]
    weights = (0.5, 0.2, 0.3)
    offsets = np.cumsum([0] + [len(field.vocabulary_) for field in fields])
    stacked = stacked_query_entries(fields, queries, weights, offsets)
    keys = stacked.rows * offsets[-1] + stacked.columns
    assert (np.diff(keys) > 0).all(), "sorted by query, then stacked column"
    for number, (field, docs, weight) in enumerate(zip(fields, queries, weights, strict=True)):
        rows, columns, values = field.query_entries(docs, weight=weight)
        mine = stacked.field == number
        assert np.array_equal(stacked.rows[mine], rows)
        assert np.array_equal(stacked.columns[mine] - offsets[number], columns)
        assert np.array_equal(stacked.values[mine], values)  # the same floats, bit for bit


def test_stacked_fields_find_a_word_in_each_field_it_is_in(fields) -> None:
    stacked = StackedFields(fields)
    queries = [[["a", "pie"]], [["a", "pie"]], [["a", "pie"]]]  # "a": field 1 only; "pie": 0, 2
    entries = stacked.query_entries(queries, (1.0, 1.0, 1.0))
    expected = [stacked.offsets[0] + fields[0].vocabulary_["pie"],
                stacked.offsets[1] + fields[1].vocabulary_["a"],
                stacked.offsets[2] + fields[2].vocabulary_["pie"]]
    assert entries.columns.tolist() == expected and entries.field.tolist() == [0, 1, 2]
    empty = stacked.query_entries([[], [], []], (1.0, 1.0, 1.0))
    assert empty.rows.size == empty.columns.size == empty.values.size == 0


def test_the_query_matrix_stacks_the_weighted_field_matrices() -> None:
    anchors = ["apple pie", "phone case", "", "apple phone"]
    urls = ["http://a.example/pie", "http://b.example/case", "http://c.example/", "x"]
    contexts = ["fresh apple pie recipe", "a case for your phone", "nothing", "apple"]
    index = LinkIndex().fit(anchors, urls, contexts)
    links = (["apple", "kiwi case"], ["http://a.example/x", "http://z.example/case"],
             ["pie", ""])
    tokens = link_index.field_tokens(*links)
    expected = sp.hstack([field.query_matrix(docs, weight=weight) for field, docs, weight
                          in zip(index.fields_, tokens, index.weights, strict=True)])
    assert np.array_equal(index._queries(*links).toarray(), expected.toarray())


def test_the_token_cache_remembers_strings_and_passes_other_values_through() -> None:
    calls = []

    def tokens_many(texts: list) -> list[list[str]]:
        calls.append(list(texts))
        return [str(text).split() for text in texts]

    cache = _TokenCache(tokens_many, max_entries=3)
    assert cache.many(["a b", "c", "a b"]) == [("a", "b"), ("c",), ("a", "b")]
    assert calls == [["a b", "c", "a b"]], "the new texts, tokenised together"
    assert cache.many(["c", "a b"]) == [("c",), ("a", "b")] and len(calls) == 1
    assert cache.many([None, ["un", "hashable"], "c"]) == [("None",), ("['un',", "'hashable']"),
                                                          ("c",)]
    assert set(cache.entries) == {"a b", "c"}  # non-strings are not cached
    cache.many(["d", "e"])
    assert set(cache.entries) == {"d", "e"}  # full: forgotten at once, then filled again
