"""G_w kept between learning rounds: vertices, parent edges, leaves and Q(v), in growable arrays.

Vertex ``i`` is the i-th link added (its link id, its parent vertex, whether it is a result).
Every vertex has at most one parent (the page its link was found on), so G_w is a forest and
``Q(u) = max over u's children`` (docs/algorithms.md §1.7). Adding vertices or leaves only
raises values, and only on the added vertices' ancestor chains: :meth:`VertexTable.propagate`
walks those chains upwards from the changed vertices and stops where a value does not rise, so
a round costs O(changed vertices x depth), and the values equal a from-scratch solve.
"""

from __future__ import annotations

import logging

import numpy as np

from jlse.learner.growable import Growable

log = logging.getLogger(__name__)

MAX_SWEEPS = 200  # as models.qlearning.q_learning: bounds a walk round a (corrupt) parent cycle


class VertexTable:
    """Vertices of G_w with their link ids, parents, leaf flags and Q-values."""

    def __init__(self, gamma: float = 0.9, reward: float = 1.0) -> None:
        self.gamma = gamma
        self.reward = reward
        self.link_ids = Growable(np.int64)
        self.parents = Growable(np.int32)  # parent vertex, -1 for none (vertices < 2**31)
        self.leaves = Growable(np.bool_)
        self.q = Growable(np.float64)
        self._sorted_ids = np.zeros(0, dtype=np.int64)  # link ids ascending ...
        self._sorted_vertices = np.zeros(0, dtype=np.int32)  # ... and their vertices

    def __len__(self) -> int:
        return len(self.link_ids)

    @property
    def nbytes(self) -> int:
        arrays = (self.link_ids, self.parents, self.leaves, self.q)
        return sum(a.nbytes for a in arrays) + self._sorted_ids.nbytes + self._sorted_vertices.nbytes

    def vertices_of(self, link_ids: np.ndarray) -> np.ndarray:
        """The vertex of each link id, -1 where the link is not a vertex."""
        link_ids = np.asarray(link_ids, dtype=np.int64)
        if not len(self._sorted_ids):
            return np.full(len(link_ids), -1, dtype=np.int64)
        at = np.minimum(np.searchsorted(self._sorted_ids, link_ids), len(self._sorted_ids) - 1)
        return np.where(self._sorted_ids[at] == link_ids, self._sorted_vertices[at], -1)

    def add(self, link_ids: np.ndarray, is_result: np.ndarray) -> np.ndarray:
        """Append new vertices (link ids not yet vertices, each once); their vertex numbers.
        Their parents are set by :meth:`link_parents` once every new vertex is known."""
        link_ids = np.asarray(link_ids, dtype=np.int64)
        first = len(self)
        vertices = np.arange(first, first + len(link_ids), dtype=np.int64)
        self.link_ids.extend(link_ids)
        self.parents.extend(np.full(len(link_ids), -1, dtype=np.int32))
        self.leaves.extend(is_result)
        self.q.extend(np.where(np.asarray(is_result, dtype=bool), self.reward, 0.0))
        order = np.argsort(link_ids, kind="stable")
        at = np.searchsorted(self._sorted_ids, link_ids[order])
        self._sorted_ids = np.insert(self._sorted_ids, at, link_ids[order])
        self._sorted_vertices = np.insert(self._sorted_vertices, at, vertices[order])
        return vertices

    def link_parents(self, vertices: np.ndarray, parent_link_ids: np.ndarray) -> None:
        """Point each of ``vertices`` at its parent's vertex (-1 if the parent is none; a link
        that is its own parent, a corrupt row, gets none)."""
        parents = self.vertices_of(parent_link_ids)
        self_loops = parents == vertices
        if self_loops.any():
            log.warning("G_w: dropped %d links that are their own parent", int(self_loops.sum()))
            parents[self_loops] = -1
        self.parents.view()[vertices] = parents

    def mark_leaves(self, vertices: np.ndarray) -> np.ndarray:
        """Make ``vertices`` results (terminal, Q = reward); those that were not, now are."""
        leaves = self.leaves.view()
        new = np.asarray(vertices, dtype=np.int64)[~leaves[vertices]]
        leaves[new] = True
        self.q.view()[new] = self.reward
        return new

    def propagate(self, changed: np.ndarray) -> int:
        """Raise Q up the parent chains of ``changed`` (vertices whose value or leaf flag is
        new) until nothing rises; the number of steps walked up."""
        q, parents, leaves = self.q.view(), self.parents.view(), self.leaves.view()
        frontier = np.unique(np.asarray(changed, dtype=np.int64))
        steps = 0
        while len(frontier) and steps < MAX_SWEEPS:
            up = parents[frontier]
            keep = up >= 0
            frontier, up = frontier[keep], up[keep]
            keep = ~leaves[up]  # a leaf is terminal: its children do not change it
            frontier, up = frontier[keep], up[keep]
            offered = np.where(leaves[frontier], self.reward, self.gamma * q[frontier])
            order = np.argsort(up, kind="stable")
            up, offered = up[order], offered[order]
            targets, starts = np.unique(up, return_index=True)
            best = np.maximum.reduceat(offered, starts) if len(up) else offered
            rises = best > q[targets]
            q[targets[rises]] = best[rises]
            frontier = targets[rises]
            steps += 1
        if len(frontier):
            log.warning("G_w: Q still rising after %d steps up (a parent cycle?)", steps)
        return steps

    def edges(self) -> tuple[np.ndarray, np.ndarray]:
        """(src, dst) vertex arrays of every parent -> child edge (for a from-scratch check)."""
        parents = self.parents.view()
        children = np.flatnonzero(parents >= 0)
        return parents[children], children
