"""The web link graph G_w (docs/algorithms.md §1.6) as arrays: vertices 0..n-1 and parent->child edges."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from jlse.scheduler.store.base import LearningGraphRows

log = logging.getLogger(__name__)


@dataclass
class LinkGraph:
    """G_w: vertex ``i`` is link ``ids[i]`` (ids ascending) with its link triple."""

    ids: np.ndarray  # int64 link ids, sorted
    anchors: list[str]
    urls: list[str]
    contexts: list[str]
    src: np.ndarray  # int64 vertex index of each edge's parent
    dst: np.ndarray  # int64 vertex index of each edge's child
    is_leaf: np.ndarray  # bool: a result page (terminal state)

    @property
    def n_vertices(self) -> int:
        return len(self.ids)

    @property
    def n_edges(self) -> int:
        return len(self.src)


def build_link_graph(rows: LearningGraphRows) -> LinkGraph:
    """Index ``rows`` by sorted id; an edge for every parent that is itself a vertex.

    Duplicate ids keep their first row; self-loops (a corrupt parent_id) are dropped.
    """
    order, ids = _sorted_unique(rows.ids)
    parents = rows.parent_ids[order]
    child_index = np.arange(len(ids), dtype=np.int64)
    parent_index = np.searchsorted(ids, parents)
    in_range = parent_index < len(ids)
    is_edge = in_range & (parents >= 0)
    is_edge[is_edge] = ids[parent_index[is_edge]] == parents[is_edge]
    self_loops = is_edge & (parent_index == child_index)
    if self_loops.any():
        log.warning("G_w: dropped %d links that are their own parent", int(self_loops.sum()))
        is_edge &= ~self_loops
    return LinkGraph(
        ids=ids,
        anchors=_take(rows.anchors, order),
        urls=_take(rows.urls, order),
        contexts=_take(rows.contexts, order),
        src=parent_index[is_edge].astype(np.int64),
        dst=child_index[is_edge],
        is_leaf=np.asarray(rows.is_result, dtype=bool)[order],
    )


def _sorted_unique(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions that put ``ids`` in ascending order, each id once, and the sorted ids."""
    ids = np.asarray(ids, dtype=np.int64)
    unique_ids, first = np.unique(ids, return_index=True)
    if len(unique_ids) < len(ids):
        log.warning("G_w: %d duplicate link rows ignored", len(ids) - len(unique_ids))
    return first, unique_ids


def _take(values: list[str], order: np.ndarray) -> list[str]:
    if len(order) == len(values) and np.array_equal(order, np.arange(len(values))):
        return list(values)
    return np.asarray(values, dtype=object)[order].tolist()
