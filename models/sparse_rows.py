"""Row-wise operations on sparse matrices for the link index (models/link_index.py).

Every function works on whole arrays - one pass or one sort over the stored entries - never a
Python loop over rows: postings matrices have a row per term, score matrices a row per link.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

try:  # scipy's kernel of the sparse product, whose public form first counts the entries
    from scipy.sparse._sparsetools import csr_matmat
except ImportError:  # pragma: no cover - a scipy without it: the public product
    csr_matmat = None


def term_major(doc_weights: sp.csr_matrix) -> sp.csr_matrix:
    """Postings of one field: term x vertex, vertices ascending in each term's row."""
    postings = doc_weights.T.tocsr()
    postings.sort_indices()
    return postings


def stack(postings: Sequence[sp.csr_matrix]) -> sp.csr_matrix:
    return sp.vstack(postings, format="csr", dtype=postings[0].dtype)


def product(queries: sp.csr_matrix, postings: sp.csr_matrix) -> sp.csr_matrix:
    """``queries @ postings`` (CSR, one dtype) by scipy's own kernel, so the same floats, without
    the first of scipy's two passes, which counts the product's entries (a tenth of the time):
    here the postings the query terms reach bound their number. A row's entries are unsorted."""
    if queries.shape[1] != postings.shape[0]:
        raise ValueError(f"product: shapes {queries.shape} and {postings.shape} do not match")
    if csr_matmat is None or queries.dtype != postings.dtype:
        return (queries @ postings).tocsr()
    columns = queries.indices
    bound = int((postings.indptr[columns + 1] - postings.indptr[columns]).sum())
    wide = max(bound, postings.nnz, *postings.shape) >= np.iinfo(np.int32).max
    index = np.int64 if wide or postings.indptr.dtype == np.int64 else np.int32
    indptr = np.empty(queries.shape[0] + 1, dtype=index)
    indices = np.empty(bound, dtype=index)
    data = np.empty(bound, dtype=queries.dtype)
    csr_matmat(queries.shape[0], postings.shape[1],
               queries.indptr.astype(index, copy=False), columns.astype(index, copy=False),
               queries.data, postings.indptr.astype(index, copy=False),
               postings.indices.astype(index, copy=False), postings.data, indptr, indices, data)
    nnz = int(indptr[-1])
    return sp.csr_matrix((data[:nnz], indices[:nnz], indptr),
                         shape=(queries.shape[0], postings.shape[1]))


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
    included, row by row; entries below ``min_ratio`` times their row's largest are left out.
    No sort and no loop over rows: at most k passes over the entries that can be chosen."""
    counts = np.diff(scores.indptr)
    nonempty = np.flatnonzero(counts)
    row_max = np.zeros(len(counts), dtype=scores.dtype)
    row_max[nonempty] = np.maximum.reduceat(scores.data, scores.indptr[nonempty])
    threshold = row_max if k == 1 else min_ratio * row_max
    near = np.flatnonzero(scores.data >= np.repeat(threshold, counts))
    near_counts = np.diff(np.searchsorted(near, scores.indptr))  # of each row
    rows = np.repeat(np.arange(len(counts)), near_counts)
    if k == 1 or near.size == 0:
        return rows, scores.indices[near]
    # Ranks are 1 - score in the scores' precision: scores a float apart may share a rank, and
    # then count as tied.
    rank = 1.0 - scores.data[near]
    lengths = near_counts[near_counts > 0]
    starts = np.cumsum(lengths) - lengths
    chosen = rank <= np.repeat(_kth_smallest(rank, starts, lengths, k), lengths)
    return rows[chosen], scores.indices[near[chosen]]


def _kth_smallest(values: np.ndarray, starts: np.ndarray, lengths: np.ndarray,
                  k: int) -> np.ndarray:
    """The k-th smallest value of each group ``values[starts[i]:starts[i+1]]`` counting repeats
    (the largest if the group is smaller): k - 1 rounds, each moving the groups that still have
    fewer than k values at or below their limit to their next distinct value."""
    limit = np.minimum.reduceat(values, starts)
    for _ in range(k - 1):
        at_most = values <= np.repeat(limit, lengths)
        short = np.add.reduceat(at_most, starts) < np.minimum(lengths, k)
        if not short.any():
            break
        above = np.where(at_most, np.inf, values)
        limit[short] = np.minimum.reduceat(above, starts)[short]
    return limit


def pair_products(doc_weights: Sequence[sp.csr_matrix], offsets: Sequence[int],
                  queries: sp.csr_matrix, rows: np.ndarray, vertices: np.ndarray) -> np.ndarray:
    """The score of each (link ``rows[i]``, vertex ``vertices[i]``) pair: the vertex's postings
    in each field (its row of ``doc_weights[f]``, whose terms are the stacked columns from
    ``offsets[f]``) against the link's row of the stacked ``queries``, summed field by field."""
    terms, slot = _column_slots(queries.indices, queries.shape[1])
    n_terms = len(terms)
    table = np.zeros(queries.shape[0] * n_terms, dtype=queries.dtype)  # (link, place) -> value
    query_rows = np.repeat(np.arange(queries.shape[0]), np.diff(queries.indptr))
    table[query_rows * n_terms + slot[queries.indices]] = queries.data
    total = np.zeros(len(vertices))
    for weights, offset in zip(doc_weights, offsets, strict=False):
        positions, pair = row_positions(weights.indptr, vertices)
        places = slot[weights.indices[positions] + offset]
        hit = np.flatnonzero(places >= 0)
        pair = pair[hit]
        products = table[rows[pair] * n_terms + places[hit]] * weights.data[positions[hit]]
        total += np.bincount(pair, weights=products, minlength=len(vertices))
    return total


def _column_slots(columns: np.ndarray, n_columns: int) -> tuple[np.ndarray, np.ndarray]:
    """The distinct ``columns`` ascending, and for each column its place among them (-1)."""
    present = np.zeros(n_columns, dtype=bool)
    present[columns] = True
    terms = np.flatnonzero(present)
    slot = np.full(n_columns, -1, dtype=np.int32)
    slot[terms] = np.arange(len(terms), dtype=np.int32)
    return terms, slot


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
