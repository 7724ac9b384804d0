"""Link outcomes: which anchors led to relevant pages in this crawl (docs/strategies.md, "Link
outcomes"; setting ``link_outcomes``, off by default).

The topic's link-text model (``TopicModel.link_text_relevance``) is fitted on the sample pages
before the crawl, so it judges a link by the words of the samples. The crawl meanwhile sees
where each link it followed led: every fetched page carries the anchor of the link that brought
the crawl to it (``CrawlTask.anchor_text``), and the page classifier has just judged the page.
This is the evidence of ACHE's online link classifier and of Rennie & McCallum's (1999) learnt
link values: a multinomial naive Bayes over anchor tokens, labelled by the pages the links led
to, updated with every page and read when the next page's links are scored. The label is soft,
the page's weight in the ``jlse`` strategy (r ** relevance_exponent when judged relevant, else
0): a page the classifier is less sure of teaches less. With hard labels the model learnt the
classifier's own mistakes and led the crawl to more of them (docs/strategies.md).

Until both classes hold :data:`MIN_PER_CLASS` links, :meth:`LinkOutcomes.relevance` answers
None and the samples' model is read alone. Each page process (each Celery worker process in
distributed mode) learns from the pages it classifies.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence

import numpy as np

from jlse.models.naive_bayes import EVIDENCE_TOKENS

MIN_PER_CLASS = 20  # followed links that led to relevant and to irrelevant pages before use
MAX_VOCABULARY = 500_000  # distinct tokens kept; past it new tokens are ignored
ALPHA = 1.0  # Laplace smoothing of the word counts
_LOG_ODDS_CAP = 30.0  # the posterior's log-odds are clipped here (exp overflow)


class LinkOutcomes:
    """An online multinomial NB over anchor tokens: P(the link leads to a relevant page).
    Thread-safe: the pipeline's threads observe and score at once.

    Per token it keeps ``log(N(t, relevant) + α) - log(N(t, irrelevant) + α)``, which only an
    observation of that token changes; the classes' totals enter once per known token of a
    link, so an observation costs O(its tokens) and a link O(its tokens)."""

    def __init__(self) -> None:
        self.counts: dict[str, list[float]] = {}  # token -> [irrelevant, relevant] counts
        self.token_log_ratio: dict[str, float] = {}
        self.links = [0.0, 0.0]  # links observed per class (soft labels: fractions)
        self.tokens_seen = [0.0, 0.0]  # token occurrences per class
        self._lock = threading.Lock()

    @property
    def ready(self) -> bool:
        return min(self.links) >= MIN_PER_CLASS

    def observe(self, tokens: Sequence[str], relevant: float) -> None:
        """One followed link's text tokens and P(the page it led to is relevant), a soft label:
        the link counts that much for the relevant class and the rest for the other."""
        if not tokens:
            return
        weights = (1.0 - relevant, relevant)
        with self._lock:
            kept = 0
            for token in tokens:
                counts = self.counts.get(token)
                if counts is None:
                    if len(self.counts) >= MAX_VOCABULARY:
                        continue
                    counts = self.counts[token] = [0.0, 0.0]
                counts[0] += weights[0]
                counts[1] += weights[1]
                self.token_log_ratio[token] = (math.log(counts[1] + ALPHA)
                                               - math.log(counts[0] + ALPHA))
                kept += 1
            for label in (0, 1):
                self.links[label] += weights[label]
                self.tokens_seen[label] += kept * weights[label]

    def relevance(self, token_lists: Sequence[Sequence[str]]) -> np.ndarray | None:
        """P(relevant) of each link from its text tokens, shape (n,); None before
        :attr:`ready`. Tokens the crawl never followed count for neither class; a link of more
        than :data:`EVIDENCE_TOKENS` known tokens is tempered as the page NB tempers a page."""
        with self._lock:
            if not self.ready:
                return None
            size = ALPHA * len(self.counts)
            per_token = (math.log(self.tokens_seen[1] + size)
                         - math.log(self.tokens_seen[0] + size))
            prior = math.log(self.links[1] / self.links[0])
        get = self.token_log_ratio.get
        scores = np.empty(len(token_lists))
        for i, tokens in enumerate(token_lists):
            known = [ratio for ratio in map(get, tokens) if ratio is not None]
            score = sum(known) - per_token * len(known) + prior
            scores[i] = score / max(1.0, len(known) / EVIDENCE_TOKENS)
        return 1.0 / (1.0 + np.exp(-np.clip(scores, -_LOG_ODDS_CAP, _LOG_ODDS_CAP)))
