"""The JLSE link evaluator: joint similarity and formula (10) priorities (docs/algorithms.md §1.9–§1.10).

``sim(u) = max(sim_anchor(u), sim_predicted(u))``: direct evidence from the anchor text (GTSAT)
and indirect evidence from the Q-table (the best matching vertex of G_w times its Q value).
Before the learner has published a Q-table, ``sim_predicted = 0``.

Priority of out-link i of page k (formula 10): ``P(rel|k) * sim(i) / sum_{v in O_k} sim(v)``,
the page's relevance shared among its out-links; ``product=True`` gives the named variant
``P(rel|k) * sim(i)``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence

import numpy as np

from jlse.models.qtable import QTable

logger = logging.getLogger(__name__)


class JLSEEvaluator:
    """Scores a page's out-links from anchor similarity and the current Q-table."""

    def __init__(self, anchor_similarity: Callable[[Sequence[str]], np.ndarray],
                 qtable: Callable[[], QTable | None], product: bool = False) -> None:
        self.anchor_similarity = anchor_similarity
        self.qtable = qtable
        self.product = product

    def similarities(self, anchors: Sequence[str], urls: Sequence[str],
                     contexts: Sequence[str]) -> np.ndarray:
        """sim = max(sim_anchor, sim_predicted) of each link, shape (n,)."""
        sim_anchor, sim_predicted = self.evidence(anchors, urls, contexts)
        return np.maximum(sim_anchor, sim_predicted)

    def evidence(self, anchors: Sequence[str], urls: Sequence[str],
                 contexts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(sim_anchor, sim_predicted) of each link; sim_predicted is 0 without a Q-table."""
        n_links = len(anchors)
        if not n_links == len(urls) == len(contexts):
            raise ValueError(f"link triples: {n_links} anchors, {len(urls)} URLs, "
                             f"{len(contexts)} contexts")
        if n_links == 0:
            return np.zeros(0), np.zeros(0)
        sim_anchor = np.asarray(self.anchor_similarity(anchors), dtype=np.float64).reshape(-1)
        if sim_anchor.shape != (n_links,):
            raise ValueError(f"anchor_similarity gave {sim_anchor.size} values for {n_links} links")
        table = self._current_qtable()
        if table is None:
            return sim_anchor, np.zeros(n_links)
        return sim_anchor, np.asarray(table.predicted(anchors, urls, contexts), dtype=np.float64)

    def priorities(self, page_relevance: float, anchors: Sequence[str], urls: Sequence[str],
                   contexts: Sequence[str]) -> np.ndarray:
        """Priority of each out-link of one page (formula 10, or the product variant)."""
        relevance = _checked_relevance(page_relevance)
        sims = self.similarities(anchors, urls, contexts)
        if self.product:
            return relevance * sims
        total = sims.sum()
        if not total > 0:
            return np.zeros_like(sims)
        return relevance * sims / total

    def _current_qtable(self) -> QTable | None:
        """The Q-table to use for this call; a failing source means "none yet", logged."""
        try:
            return self.qtable()
        except Exception:  # noqa: BLE001 - a missing Q-table must not stop the crawl
            logger.warning("JLSE: cannot read the current Q-table; anchor similarity only",
                           exc_info=True)
            return None


def _checked_relevance(page_relevance: float) -> float:
    """P(rel|page) as a float in [0, 1]; out-of-range values are clipped, NaN becomes 0."""
    relevance = float(page_relevance)
    if math.isnan(relevance):
        logger.warning("JLSE: page relevance is NaN; its out-links get priority 0")
        return 0.0
    if not 0.0 <= relevance <= 1.0:
        logger.warning("JLSE: page relevance %r outside [0, 1]; clipped", relevance)
        return min(max(relevance, 0.0), 1.0)
    return relevance
