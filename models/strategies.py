"""Crawl strategies: how a fetched page's out-links are prioritised.

A strategy is a small, pure component the pipeline calls once per page. It sees the page's
relevance and its out-links' link triples (anchor, URL, context) and returns one priority per
link; it also says whether a page is expanded at all (hard focus). Strategies are picked by name
with ``make_strategy`` (``--strategy``) and all run through the same pipeline.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np


class Strategy(ABC):
    name: str = ""
    focused: bool = True  # hard focus: irrelevant pages are not expanded

    def __init__(self, relevance_threshold: float = 0.5, expand_targets: bool = False,
                 hard_focus: bool = True) -> None:
        self.relevance_threshold = relevance_threshold
        self.expand_targets = expand_targets
        self.hard_focus = hard_focus

    def seed_priority(self) -> float:
        return 1.0

    def should_expand(self, relevance: float | None, is_target: bool) -> bool:
        """Whether the out-links of a page are followed at all."""
        if not self.focused:
            return True
        if is_target and not self.expand_targets:
            return False
        if not self.hard_focus:
            return True
        return relevance is None or relevance >= self.relevance_threshold

    @abstractmethod
    def score_links(
        self,
        page_relevance: float | None,
        depth: int,
        anchors: Sequence[str],
        urls: Sequence[str],
        contexts: Sequence[str],
    ) -> np.ndarray:
        """One priority per out-link (higher is fetched first)."""


class BreadthFirst(Strategy):
    """Every link the same priority: the frontier's discovery order makes it breadth-first."""

    name = "bfs"
    focused = False

    def score_links(self, page_relevance, depth, anchors, urls, contexts) -> np.ndarray:
        return np.ones(len(urls))


class BestFirst(Strategy):
    """Chakrabarti's baseline: a link inherits its page's relevance."""

    name = "best-first"
    focused = False  # soft focus: low-relevance pages still pass on their (low) priority

    def score_links(self, page_relevance, depth, anchors, urls, contexts) -> np.ndarray:
        score = 0.0 if page_relevance is None else page_relevance
        return np.full(len(urls), score)


_STRATEGIES: dict[str, type[Strategy]] = {cls.name: cls for cls in (BreadthFirst, BestFirst)}


class UnknownStrategy(ValueError):
    pass


def available_strategies() -> list[str]:
    return sorted(_STRATEGIES)


def make_strategy(name: str, relevance_threshold: float = 0.5, expand_targets: bool = False,
                  hard_focus: bool = True) -> Strategy:
    try:
        cls = _STRATEGIES[name]
    except KeyError:
        raise UnknownStrategy(
            f"strategy {name!r} is not available in this version; available: "
            f"{', '.join(available_strategies())}"
        ) from None
    return cls(relevance_threshold=relevance_threshold, expand_targets=expand_targets,
               hard_focus=hard_focus)
