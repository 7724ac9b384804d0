"""Row-wise operations on sparse matrices for the link index (models/link_index.py).

Every function works on whole arrays - one pass or one sort over the stored entries - never a
Python loop over rows: postings matrices have a row per term, score matrices a row per link.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from models.bm25 import distinct


def term_major(doc_weights: sp.csr_matrix) -> sp.csr_matrix:
    """Postings of one field: term x vertex, vertices ascending in each term's row."""
    postings = doc_weights.T.tocsr()
    postings.sort_indices()
    return postings


def stack(postings: Sequence[sp.csr_matrix]) -> sp.csr_matrix:
    return sp.vstack(postings, format="csr", dtype=postings[0].dtype)


def top_postings(postings: sp.csr_matrix, cap: int | None) -> sp.csr_matrix:
    """Each row (term) cut to its ``cap`` largest weights; among equal weights at the cut, the
    lowest vertices stay. Rows stay in vertex order. Works through blocks of rows to bound the
    memory it needs on a big G_w."""
    counts = np.diff(postings.indptr)
    if cap is None or postings.nnz == 0 or counts.max() <= cap:
        return postings
    kept = [_top_in_block(postings, block, cap) for block in _row_blocks(postings.indptr)]
    indptr = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(np.minimum(counts, cap), out=indptr[1:])
    return sp.csr_matrix((np.concatenate([postings.data[k] for k in kept]),
                          np.concatenate([postings.indices[k] for k in kept]), indptr),
                         shape=postings.shape)


def _row_blocks(indptr: np.ndarray, block_entries: int = 1 << 22) -> list[slice]:
    """Consecutive row ranges holding about ``block_entries`` entries each."""
    bounds = np.searchsorted(indptr, np.arange(0, indptr[-1], block_entries), side="right") - 1
    bounds = np.unique(np.concatenate((bounds, [len(indptr) - 1])))
    return [slice(int(start), int(stop)) for start, stop in zip(bounds[:-1], bounds[1:],
                                                                 strict=True)]


def _top_in_block(postings: sp.csr_matrix, rows: slice, cap: int) -> np.ndarray:
    """Positions of the postings :func:`top_postings` keeps in a block of rows, ascending."""
    begin, end = postings.indptr[rows.start], postings.indptr[rows.stop]
    counts = np.diff(postings.indptr[rows.start : rows.stop + 1])
    row = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    # Non-negative float32 weights order as their bit patterns do: one int64 key per posting
    # orders by (term, weight descending).
    bits = postings.data[begin:end].astype(np.float32, copy=False).view(np.int32)
    key = (row << 31) | (0x7F800000 - bits).astype(np.int64)
    starts = postings.indptr[rows.start : rows.stop] - begin
    limit = np.zeros(len(counts), dtype=np.int64)  # the key of each row's cap-th posting
    nonempty = counts > 0
    limit[nonempty] = np.sort(key)[(starts + np.minimum(counts, cap) - 1)[nonempty]]
    row_limit = limit[row]
    above = key < row_limit
    tied = key == row_limit
    del key, row_limit
    room = cap - np.bincount(row[above], minlength=len(counts))
    tied_seen = np.cumsum(tied, dtype=np.int32)
    tied_before_row = np.concatenate(([0], tied_seen))[starts]
    keep = above | (tied & (tied_seen - tied_before_row[row] <= room[row]))
    return begin + np.flatnonzero(keep)


def top_per_row(scores: sp.csr_matrix, k: int,
                min_ratio: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """(row, column) of the entries among the k largest of their row, ties at the k-th value
    included, row by row; entries below ``min_ratio`` times their row's largest are left out
    first (which spares sorting most entries). One sort of the rest, no loop over rows."""
    counts = np.diff(scores.indptr)
    nonempty = np.flatnonzero(counts)
    rows = np.repeat(np.arange(len(counts)), counts)
    row_max = np.zeros(len(counts), dtype=scores.dtype)
    row_max[nonempty] = np.maximum.reduceat(scores.data, scores.indptr[nonempty])
    if k == 1:
        chosen = np.flatnonzero(scores.data >= row_max[rows])
        return rows[chosen], scores.indices[chosen]
    near = np.flatnonzero(scores.data >= min_ratio * row_max[rows])
    rows, data, columns = rows[near], scores.data[near], scores.indices[near]
    counts = np.bincount(rows, minlength=len(counts))
    nonempty = np.flatnonzero(counts)
    starts = np.cumsum(counts) - counts
    key = 2.0 * rows + (1.0 - data)  # scores lie in [0, 1): rows never overlap
    limit = np.zeros(len(counts))
    limit[nonempty] = np.sort(key)[starts[nonempty] + np.minimum(counts[nonempty], k) - 1]
    chosen = key <= limit[rows]
    return rows[chosen], columns[chosen]


def pair_products(doc_weights: sp.csr_matrix, entries: tuple[np.ndarray, ...], rows: np.ndarray,
                   vertices: np.ndarray, n_links: int) -> np.ndarray:
    """One field's part of the score of each (link, vertex) pair: the vertex's postings (its
    row of ``doc_weights``) against the link's query ``entries`` (row, column, value)."""
    query_rows, query_columns, query_values = entries
    terms = distinct(query_columns)
    slot = np.full(doc_weights.shape[1], -1, dtype=np.int32)  # term -> its place in ``terms``
    slot[terms] = np.arange(len(terms), dtype=np.int32)
    table = np.zeros(n_links * len(terms), dtype=np.float32)  # (link, place) -> query value
    table[query_rows * len(terms) + slot[query_columns]] = query_values
    positions, pair = row_positions(doc_weights.indptr, vertices)
    places = slot[doc_weights.indices[positions]]
    hit = np.flatnonzero(places >= 0)
    pair = pair[hit]
    products = table[rows[pair] * len(terms) + places[hit]] * doc_weights.data[positions[hit]]
    return np.bincount(pair, weights=products, minlength=len(vertices))


def row_positions(indptr: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions of the entries of ``rows`` of a CSR matrix, and for each the place in ``rows``
    of its row."""
    starts = indptr[rows]
    lengths = indptr[rows + 1] - starts
    ends = np.cumsum(lengths)
    owner = np.repeat(np.arange(len(rows)), lengths)
    return np.arange(ends[-1] if len(ends) else 0) + (starts - (ends - lengths))[owner], owner


def row_argmax(indptr: np.ndarray, data: np.ndarray,
                columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row-wise (argmax column, max) of a row-grouped sparse matrix; (-1, 0) for rows without a
    positive entry. Ties go to the lowest column."""
    n_rows = len(indptr) - 1
    best = np.full(n_rows, -1, dtype=np.int64)
    best_score = np.zeros(n_rows, dtype=np.float64)
    counts = np.diff(indptr)
    nonempty = np.flatnonzero(counts)
    if nonempty.size == 0:
        return best, best_score
    starts = indptr[:-1][nonempty]
    top = np.maximum.reduceat(data, starts)
    is_top = data == np.repeat(top, counts[nonempty])
    lowest = np.minimum.reduceat(np.where(is_top, columns, np.iinfo(columns.dtype).max), starts)
    positive = top > 0
    best[nonempty[positive]] = lowest[positive]
    best_score[nonempty[positive]] = top[positive]
    return best, best_score
