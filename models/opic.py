"""OPIC with OPIE's relevance bias: link priority as cash handed down from page to page.

OPIC (Abiteboul et al., "Adaptive on-line page importance computation") gives every seed the
same cash; a fetched page distributes its cash among its out-links and the frontier fetches
the URL holding the most cash next. OPIE's focused variant biases the split towards relevant
links: out-link ``i`` of a page with cash ``c`` receives

    c * (1 + w * rel(i)) / sum_j (1 + w * rel(j))

with ``rel`` the link's anchor similarity (``TopicModel.anchor_similarity``; 0 without a topic
model, which is plain OPIC) and ``w`` the relevance weight.

Approximation: a page's cash is the priority it was fetched at. True OPIC *adds up* the cash a
URL receives from every page linking to it; our frontier keeps the *maximum* priority of a URL
found again, so a URL's cash here is the largest single share it was given, not the sum. The
frontier has no "add to the priority" operation (and the Redis frontier keeps it that way), and
cash of already fetched pages is not redistributed (no repeated crawl of the same page).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from jlse.models.strategies import Strategy

DEFAULT_RELEVANCE_WEIGHT = 1.0  # w; overridden by the ``opic_relevance_weight`` setting


class CashSplit(Strategy):
    """``opic``: the page's cash split among its out-links, biased by anchor relevance."""

    name = "opic"
    focused = False  # link analysis: every fetched page passes its cash on

    def __init__(self, anchor_similarity: Callable[[Sequence[str]], np.ndarray] | None,
                 relevance_weight: float = DEFAULT_RELEVANCE_WEIGHT, **base: Any) -> None:
        super().__init__(**base)
        self.anchor_similarity = anchor_similarity
        self.relevance_weight = relevance_weight

    def score_links(self, page_relevance, depth, anchors, urls, contexts,
                    parent_priority=1.0, page_text="", page_url="") -> np.ndarray:
        if len(urls) == 0:
            return np.zeros(0)
        weights = 1.0 + self.relevance_weight * self._link_relevance(anchors)
        weights = np.clip(np.nan_to_num(weights, nan=1.0), 0.0, None)
        total = float(weights.sum())
        if total <= 0.0:  # only with a negative weight: nothing to prefer, split evenly
            return np.full(len(urls), parent_priority / len(urls))
        return parent_priority * weights / total

    def _link_relevance(self, anchors: Sequence[str]) -> np.ndarray:
        if self.anchor_similarity is None:
            return np.zeros(len(anchors))
        return np.asarray(self.anchor_similarity(anchors), dtype=float)
