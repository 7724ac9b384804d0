"""``cfc``'s learning round: label the pages the crawl has seen by context layer, fit the layers.

Run by the embedded crawl's ``BackgroundLearner`` every ``cf`` results, like the JLSE learner.
Everything it needs is in the strategy's ``PageLog`` (the crawl database is not read).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np

from jlse.models.context_graph import LayerModel, PageLog, context_layers
from jlse.settings import Settings

log = logging.getLogger(__name__)


class ContextGraphLearner:
    """Fits a :class:`LayerModel` on the logged pages, labelled by their links to relevant ones."""

    def __init__(self, settings: Settings, page_log: PageLog) -> None:
        self.settings = settings
        self.page_log = page_log

    def learn(self, store: Any, version: int) -> LayerModel | None:
        """The layer model of the crawl so far as ``version``; None while every logged page is in
        one layer (nothing to tell apart yet). ``store`` is unused (the learner interface)."""
        started = time.perf_counter()
        n_layers = self.settings.cfc_layers
        pages = self.page_log.snapshot()
        layers = context_layers(pages.page_keys, pages.edge_pages, pages.edge_keys,
                                pages.relevant_keys, n_layers)
        if len(np.unique(layers)) < 2:
            log.info("cfc: %d logged pages all in one layer; no layer model v%d yet",
                     len(layers), version)
            return None
        model = LayerModel(n_layers, version).fit(pages.counts, layers)
        log.info("cfc: layer model v%d from %d pages (per layer 0..%d, other: %s), %.2f s",
                 version, len(layers), n_layers, model.layer_counts_.tolist(),
                 time.perf_counter() - started)
        return model
