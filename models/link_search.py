"""The default (capped) link search of :mod:`models.link_index`: candidates, then re-ranking.

For each query link (a row of the stacked query matrix, :meth:`LinkIndex._queries`):

1. its capped score against every vertex the capped postings reach (``queries @ postings``, in
   float32 as scipy's sparse product sums it);
2. the candidates: the ``rescore`` best of those (ties at the k-th included; ranks are
   ``1 - score`` in float32, so scores a float apart may tie), none under ``ratio`` times the
   best;
3. each candidate's exact score: its postings in each field (its row of the field's
   ``doc_weights_``) against the link's query values, summed field by field in float64;
4. v* = the candidate with the best exact score (ties to the lowest vertex); -1 and 0 when the
   link reaches no vertex.

Two implementations give the same floats (tests/test_link_search.py checks them against each
other): :func:`search_arrays` in whole-array numpy steps (:mod:`models.sparse_rows`), and
:func:`search_compiled`, the same steps link by link in code compiled by numba
(``models/_link_search_kernel.py``, loaded by :mod:`models.compiled`), where nothing is
materialised but one link's scores: about half the time at 100,000 vertices
(benchmarks/bench_jlse.py). Without numba, :func:`search` takes the numpy steps.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import scipy.sparse as sp

from jlse.models import compiled
from jlse.models.sparse_rows import pair_products, product, row_argmax, top_per_row


def search(queries: sp.csr_matrix, postings: sp.csr_matrix, doc_weights: Sequence[sp.csr_matrix],
           offsets: Sequence[int], rescore: int, ratio: float) -> tuple[np.ndarray, np.ndarray]:
    """(v*, exact s_v*) of each query row, as the module docstring says; compiled when numba
    is there. ``doc_weights[f]`` is field f's vertex x term matrix, whose terms are the stacked
    columns from ``offsets[f]``."""
    kernel = _kernel()
    if kernel is None:
        return search_arrays(queries, postings, doc_weights, offsets, rescore, ratio)
    return search_compiled(kernel, queries, postings, doc_weights, offsets, rescore, ratio)


def search_arrays(queries: sp.csr_matrix, postings: sp.csr_matrix,
                  doc_weights: Sequence[sp.csr_matrix], offsets: Sequence[int], rescore: int,
                  ratio: float) -> tuple[np.ndarray, np.ndarray]:
    """:func:`search` in whole-array numpy steps."""
    candidates = product(queries, postings)
    rows, vertices = top_per_row(candidates, rescore, min_ratio=ratio)
    scores = pair_products(doc_weights, offsets, queries, rows, vertices)
    indptr = np.zeros(queries.shape[0] + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=queries.shape[0]), out=indptr[1:])
    return row_argmax(indptr, scores, vertices)


def search_compiled(kernel: Callable, queries: sp.csr_matrix, postings: sp.csr_matrix,
                    doc_weights: Sequence[sp.csr_matrix], offsets: Sequence[int], rescore: int,
                    ratio: float) -> tuple[np.ndarray, np.ndarray]:
    """:func:`search` by the compiled ``kernel`` (:func:`_kernel`)."""
    if len(doc_weights) != 3:
        raise ValueError(f"link search: the compiled search takes 3 fields, got {len(doc_weights)}")
    anchor, url, context = doc_weights
    dtype = np.float32
    if not (queries.dtype == postings.dtype == dtype
            and all(weights.dtype == dtype for weights in doc_weights)):
        return search_arrays(queries, postings, doc_weights, offsets, rescore, ratio)
    return kernel(queries.indptr, queries.indices, queries.data,
                  postings.indptr, postings.indices, postings.data,
                  anchor.indptr, anchor.indices, anchor.data, url.indptr, url.indices, url.data,
                  context.indptr, context.indices, context.data,
                  np.asarray(offsets[:3], dtype=np.int64), postings.shape[1], queries.shape[1],
                  int(rescore), np.float32(ratio))


def _kernel() -> Callable | None:
    return compiled.kernel("_link_search_kernel", "search_links")
