"""One learning round (docs/algorithms.md §1.11, incremental learning): crawl DB -> G_w -> Q-table."""

from __future__ import annotations

import logging
import time

from jlse.learner.graph import build_link_graph
from jlse.models.qtable import QTable, build_qtable
from jlse.scheduler.store import CrawlStore
from jlse.settings import Settings

log = logging.getLogger(__name__)


class Learner:
    """Rebuilds G_w from a crawl database and learns its Q-values (QLAWLG)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        # the default jlse learns from dead ends too (Q = 0); the paper's variants do not
        self.dead_ends = settings.strategy == "jlse" and settings.dead_end_vertices

    def learn(self, store: CrawlStore, version: int) -> QTable | None:
        """The Q-table of the current crawl as ``version``; None while ResultTable is empty."""
        started = time.perf_counter()
        rows = store.learning_graph(self.dead_ends)
        if not rows.is_result.any():
            log.info("learner: no result pages yet, no Q-table v%d", version)
            return None
        read_seconds = time.perf_counter() - started
        graph = build_link_graph(rows)
        table = build_qtable(
            version, graph.anchors, graph.urls, graph.contexts, graph.src, graph.dst,
            graph.is_leaf,
            k1=self.settings.bm25_k1, b=self.settings.bm25_b,
            weights=tuple(self.settings.field_weights),
            gamma=self.settings.gamma, reward=self.settings.reward,
            max_postings=tuple(self.settings.link_search_postings),
            rescore=self.settings.link_search_rescore,
        )
        log.info(
            "learner: Q-table v%d from %d vertices (%d results), %d edges, %s iterations, "
            "%.2f s (%.2f s reading the crawl database)",
            version, graph.n_vertices, int(graph.is_leaf.sum()), graph.n_edges,
            table.meta.get("iterations", "?"), time.perf_counter() - started, read_seconds,
        )
        return table
