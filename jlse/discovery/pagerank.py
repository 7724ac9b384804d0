"""PageRank over the link graph of the discovered pages, by sparse power iteration.

``r ← d·(Mᵀ r + D/n) + (1 − d)/n`` where ``M[i, j] = 1/out(i)`` for a link i → j and ``D`` is the
rank held by dangling pages (no out-links), spread evenly over all pages as if they linked to
every page. A link counted twice is one link; a page's link to itself is dropped, since a
page's own navigation says nothing of what others think of it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

logger = logging.getLogger(__name__)


def link_graph(n: int, links: Sequence[tuple[int, int]] | np.ndarray) -> sp.csr_matrix:
    """The n × n adjacency matrix (1 where page i links to page j, i ≠ j) of ``links``."""
    edges = np.asarray(links, dtype=np.int64).reshape(-1, 2)
    if len(edges) and (edges.min() < 0 or edges.max() >= n):
        raise ValueError(f"pagerank: a link names a page outside 0..{n - 1}")
    edges = edges[edges[:, 0] != edges[:, 1]]
    graph = sp.csr_matrix((np.ones(len(edges)), (edges[:, 0], edges[:, 1])), shape=(n, n))
    graph.sum_duplicates()
    graph.data[:] = 1.0
    return graph


def pagerank(n: int, links: Sequence[tuple[int, int]] | np.ndarray, damping: float = 0.85,
             tol: float = 1e-8, max_iter: int = 100) -> np.ndarray:
    """The PageRank of pages 0..n-1 given links ``(from, to)``: shape (n,), sums to 1.

    Iterates until the L1 change of the rank vector is below ``tol`` or ``max_iter`` passes.
    """
    if n == 0:
        return np.zeros(0)
    if not 0.0 <= damping <= 1.0:
        raise ValueError(f"pagerank: damping must be in [0, 1], got {damping}")
    graph = link_graph(n, links)
    out_degree = np.asarray(graph.sum(axis=1)).ravel()
    dangling = out_degree == 0
    share = np.divide(1.0, out_degree, out=np.zeros(n), where=~dangling)
    inflow = graph.T.tocsr()  # inflow @ (rank * share) gives what each page receives
    rank = np.full(n, 1.0 / n)
    iterations, change = 0, np.inf
    while change >= tol and iterations < max_iter:
        spread = rank[dangling].sum() / n
        new = damping * (inflow @ (rank * share) + spread) + (1.0 - damping) / n
        change = np.abs(new - rank).sum()
        rank, iterations = new, iterations + 1
    logger.debug("pagerank: %d pages, %d links, %d iterations, change %.1e",
                 n, graph.nnz, iterations, change)
    return rank / rank.sum()
