"""QLAWLG: Q-learning over the web link graph G_w (docs/algorithms.md §1.7), vectorised.

States are vertices, actions are edges ``u -> v``; the reward of an edge is ``reward`` if ``v``
is a leaf (a result page) and 0 otherwise. Leaves are terminal states: their own value is
``reward`` and their out-edges, if any, are ignored. Starting from 0, every sweep sets

    Q(u, u->v) = r(u->v) + gamma * Q(v)        with Q(v) = 0 for a leaf v (terminal)
    Q(u)       = max_{u->v} Q(u, u->v)         (0 without out-edges)

for all edges at once, until no value changes by more than ``tol``. Values only grow from 0 and
``Q(u) = reward * gamma^(d-1)`` where d is u's distance to the nearest leaf, so with ``tol = 0``
the iteration stops after (largest finite distance + 1) sweeps, cycles or not.
"""

from __future__ import annotations

import logging

import numpy as np

logger = logging.getLogger(__name__)


def q_learning(n_vertices: int, src: np.ndarray, dst: np.ndarray, is_leaf: np.ndarray,
               gamma: float = 0.9, reward: float = 1.0, max_iter: int = 200,
               tol: float = 0.0) -> tuple[np.ndarray, int]:
    """Q(v) of every vertex, in [0, reward], and the number of sweeps used.

    The count includes the last sweep, which found nothing left to change; if ``max_iter``
    sweeps do not converge the values so far are returned (and a warning logged)."""
    src, dst, is_leaf = _checked(n_vertices, src, dst, is_leaf, gamma, reward, max_iter, tol)
    order = np.argsort(src, kind="stable")
    src, dst = src[order], dst[order]
    keep = ~is_leaf[src]  # a leaf is terminal: it takes no action
    src, dst = src[keep], dst[keep]
    sources, starts = np.unique(src, return_index=True)
    dst_is_leaf = is_leaf[dst]
    values = np.zeros(n_vertices, dtype=np.float64)
    sweeps, change = 0, np.inf
    while change > tol and sweeps < max_iter:
        edge_values = np.where(dst_is_leaf, reward, gamma * values[dst])
        updated = np.maximum.reduceat(edge_values, starts) if len(src) else edge_values
        change = np.abs(updated - values[sources]).max(initial=0.0)
        values[sources] = updated
        sweeps += 1
    if change > tol:
        logger.warning("q_learning: not converged after %d sweeps (last change %.3g > tol %.3g)",
                       max_iter, change, tol)
    values[is_leaf] = reward
    return values, sweeps


def _checked(n_vertices: int, src: np.ndarray, dst: np.ndarray, is_leaf: np.ndarray,
             gamma: float, reward: float, max_iter: int,
             tol: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The graph as int64 edge arrays and a bool leaf mask; ValueError naming what is wrong."""
    if n_vertices < 0:
        raise ValueError(f"q_learning: n_vertices must not be negative, got {n_vertices}")
    src = np.asarray(src).reshape(-1)
    dst = np.asarray(dst).reshape(-1)
    is_leaf = np.asarray(is_leaf).reshape(-1)
    if src.shape != dst.shape:
        raise ValueError(f"q_learning: {src.size} edge sources but {dst.size} destinations")
    if is_leaf.shape != (n_vertices,):
        raise ValueError(f"q_learning: is_leaf has {is_leaf.size} entries for {n_vertices} vertices")
    for name, ends in (("src", src), ("dst", dst)):
        if ends.size and (not np.issubdtype(ends.dtype, np.integer)
                          or ends.min() < 0 or ends.max() >= n_vertices):
            raise ValueError(f"q_learning: {name} must hold vertex indices in [0, {n_vertices})")
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"q_learning: gamma must lie in [0, 1], got {gamma}")
    if not reward >= 0.0:
        raise ValueError(f"q_learning: reward must not be negative, got {reward}")
    if max_iter < 1 or not tol >= 0.0:
        raise ValueError(f"q_learning: need max_iter >= 1 and tol >= 0, got {max_iter}, {tol}")
    return src.astype(np.int64), dst.astype(np.int64), is_leaf.astype(bool)
