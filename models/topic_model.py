"""The topic model a crawl uses: page relevance, result-page test and anchor similarity.

:class:`TopicModel` fits what the samples allow and falls back for missing parts:

- relevance: page NB on relevant/irrelevant pages; without both kinds of pages, the keyword
  overlap of :class:`KeywordOverlap`; without keywords, a (tempered) NB over the labelled anchors.
- target pages: the RBF SVM on target/nontarget page stats; without both, :class:`TargetRule`.
- anchor similarity: GTSAT's NB over the labelled anchors; without both labels, the relevance
  model applied to the anchor text, with GTSAT's rule (``floor`` below ``relevance_threshold``).

A topic with nothing to judge relevance by is a ValueError.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from sklearn.model_selection import StratifiedKFold, cross_val_score

from models.anchor import AnchorSimilarity
from models.naive_bayes import DEFAULT_MAX_CHARS, NaiveBayesTextClassifier, text_sample
from models.page_stats import PageStats
from models.result_page import ResultPageClassifier, TargetRule
from models.tokenizer import tokenize

if TYPE_CHECKING:
    from typing import Self

logger = logging.getLogger(__name__)


@dataclass
class TopicSamples:
    """In-memory samples of a topic (the lead's loader fills them from the topic directory)."""

    relevant: list[str] = field(default_factory=list)  # page texts
    irrelevant: list[str] = field(default_factory=list)
    target: list[PageStats] = field(default_factory=list)
    nontarget: list[PageStats] = field(default_factory=list)
    anchors: list[tuple[str, int]] = field(default_factory=list)  # (text, 1 relevant / 0 irrelevant)
    keywords: list[str] = field(default_factory=list)


class KeywordOverlap:
    """A crude stand-in relevance for keyword-only topics: for each keyword (phrase), the share
    of its tokens found in the text; the text's score is the best keyword's share, in [0, 1].
    """

    def __init__(self, keywords: Sequence[str], max_chars: int = DEFAULT_MAX_CHARS) -> None:
        self.max_chars = max_chars
        tokenised = (frozenset(tokenize(keyword)) for keyword in keywords)
        self.keyword_tokens_ = [tokens for tokens in tokenised if tokens]  # stop-word-only keywords dropped

    @property
    def usable(self) -> bool:
        return bool(self.keyword_tokens_)

    def relevance(self, text: str) -> float:
        found = set(tokenize(text_sample(text, self.max_chars) if isinstance(text, str) else ""))
        return max((len(tokens & found) / len(tokens) for tokens in self.keyword_tokens_), default=0.0)

    def predict_proba(self, texts: Sequence[str]) -> np.ndarray:
        return np.array([self.relevance(text) for text in texts], dtype=float)


class TopicModel:
    """Everything the crawl asks of a topic: ``relevance``, ``is_target``, ``anchor_similarity``."""

    def __init__(self, relevance_threshold: float = 0.5, anchor_floor: float = 0.01) -> None:
        self.relevance_threshold = relevance_threshold
        self.anchor_floor = anchor_floor

    def fit(self, samples: TopicSamples) -> Self:
        """Fit every part the samples allow; ``self.sources_`` names what each part uses."""
        relevance_name, self.relevance_model_ = self._fit_relevance(samples)
        target_name, self.target_model_ = self._fit_target(samples)
        anchor_name, self.anchor_model_ = self._fit_anchor(samples)
        self.sources_ = {"relevance": relevance_name, "target": target_name, "anchor": anchor_name}
        logger.info("topic model fitted: %s", self.sources_)
        return self

    def relevance(self, text: str) -> float:
        """P(relevant | page text) in [0, 1] (a keyword score for keyword-only topics)."""
        return float(self.relevance_model_.predict_proba([text])[0])

    def is_relevant(self, text: str) -> bool:
        return self.relevance(text) >= self.relevance_threshold

    def is_target(self, stats: PageStats) -> bool:
        return self.target_model_.is_target(stats)

    def anchor_similarity(self, anchors: Sequence[str]) -> np.ndarray:
        """sim_anchor of each anchor text of a page's out-links, shape (n,)."""
        if self.anchor_model_ is not None:
            return self.anchor_model_.similarities(anchors)
        if len(anchors) == 0:
            return np.zeros(0)
        posteriors = self.relevance_model_.predict_proba(anchors)
        return np.where(posteriors >= self.relevance_threshold, posteriors, self.anchor_floor)

    def cross_validate(self, samples: TopicSamples, folds: int = 5) -> dict[str, float]:
        """Mean accuracy of each classifier under stratified k-fold (nan: < 2 samples per class)."""
        if folds < 2:
            raise ValueError(f"cross_validate: folds must be at least 2, got {folds}")
        pages, page_labels = _labelled(samples.relevant, samples.irrelevant)
        stats, stats_labels = _labelled(samples.target, samples.nontarget)
        anchors = [text for text, _ in samples.anchors]
        anchor_labels = [int(label) for _, label in samples.anchors]
        return {
            "relevance": _cv_accuracy(NaiveBayesTextClassifier(), pages, page_labels, folds),
            "target": _cv_accuracy(ResultPageClassifier(), stats, stats_labels, folds),
            "anchor": _cv_accuracy(AnchorSimilarity(floor=self.anchor_floor), anchors, anchor_labels, folds),
        }

    def _fit_relevance(self, samples: TopicSamples) -> tuple[str, Any]:
        if samples.relevant and samples.irrelevant:
            texts, labels = _labelled(samples.relevant, samples.irrelevant)
            return "page_nb", NaiveBayesTextClassifier().fit(texts, labels)
        if samples.relevant or samples.irrelevant:
            logger.warning("topic: page samples of one class only; not enough for the page classifier")
        keywords = KeywordOverlap(samples.keywords)
        if keywords.usable:
            return "keywords", keywords
        if _both_labels(samples.anchors):
            texts = [text for text, _ in samples.anchors]
            labels = [int(label) for _, label in samples.anchors]
            return "anchor_nb", NaiveBayesTextClassifier().fit(texts, labels)
        raise ValueError(
            "topic model: nothing to judge relevance by - give relevant and irrelevant sample "
            "pages, keywords, or anchor texts labelled relevant and irrelevant"
        )

    def _fit_target(self, samples: TopicSamples) -> tuple[str, Any]:
        if samples.target and samples.nontarget:
            stats, labels = _labelled(samples.target, samples.nontarget)
            return "svm", ResultPageClassifier().fit(stats, labels)
        if samples.target or samples.nontarget:
            logger.warning("topic: result-page samples of one class only; using the target rule")
        return "rule", TargetRule()

    def _fit_anchor(self, samples: TopicSamples) -> tuple[str, AnchorSimilarity | None]:
        if _both_labels(samples.anchors):
            texts = [text for text, _ in samples.anchors]
            labels = [int(label) for _, label in samples.anchors]
            return "anchor_nb", AnchorSimilarity(floor=self.anchor_floor).fit(texts, labels)
        if samples.anchors:
            logger.warning("topic: anchor samples of one class only; using the relevance model")
        return "relevance_model", None


def _labelled(positives: Sequence[Any], negatives: Sequence[Any]) -> tuple[list[Any], list[int]]:
    return list(positives) + list(negatives), [1] * len(positives) + [0] * len(negatives)


def _both_labels(anchors: Sequence[tuple[str, int]]) -> bool:
    return {int(label) for _, label in anchors} >= {0, 1}


def _accuracy(estimator: Any, X: Sequence[Any], y: np.ndarray) -> float:
    return float(np.mean(np.asarray(estimator.predict(X)).astype(int) == y))


def _cv_accuracy(estimator: Any, X: list[Any], labels: list[int], folds: int) -> float:
    y = np.asarray(labels, dtype=int)
    per_class = np.bincount(y, minlength=2) if len(y) else np.zeros(2, dtype=int)
    if per_class.min() < 2:
        return math.nan
    splitter = StratifiedKFold(n_splits=min(folds, int(per_class.min())), shuffle=True, random_state=0)
    scores = cross_val_score(estimator, X, y, cv=splitter, scoring=_accuracy, error_score="raise")
    return float(np.mean(scores))
