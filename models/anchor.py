"""Anchor-text similarity, the direct evidence of JLSE (GTSAT, docs/algorithms.md §1.4).

A Naive Bayes classifier over the anchor texts that linked to the sample pages. For a link:
if NB says relevant (posterior above 0.5) the similarity is ``P(relevant | anchor)``, otherwise
the small constant ``floor``. Anchors are short, so the plain NB posterior is used (no
temperature); an anchor without known words gets the class prior, as NB gives it.

The anchors' tokens come from the cache the link index reads (:mod:`models.link_tokens`): the
evaluator scores a page's anchors here first, and the link index finds them tokenised.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain, repeat
from typing import TYPE_CHECKING

import numpy as np
from scipy.special import expit
from sklearn.base import BaseEstimator, ClassifierMixin

from jlse.models.link_tokens import TEXT_CHARS, anchor_tokens
from jlse.models.naive_bayes import NaiveBayesTextClassifier

if TYPE_CHECKING:
    from typing import Self


def gtsat(posteriors: np.ndarray, floor: float, threshold: float = 0.5) -> np.ndarray:
    """GTSAT's rule: the posterior where it is above ``threshold``, else ``floor``."""
    return np.where(posteriors > threshold, posteriors, floor)


class AnchorSimilarity(ClassifierMixin, BaseEstimator):
    """sim_anchor(u) by NB over labelled anchor texts (1 relevant, 0 irrelevant)."""

    def __init__(self, floor: float = 0.01, alpha: float = 1.0) -> None:
        self.floor = floor
        self.alpha = alpha

    def fit(self, anchors: Sequence[str], labels: Sequence[int]) -> Self:
        self.nb_ = NaiveBayesTextClassifier(alpha=self.alpha, max_features=None, evidence_tokens=None)
        self.nb_.fit(anchors, labels)
        self.classes_ = self.nb_.classes_
        return self

    def similarities(self, anchors: Sequence[str]) -> np.ndarray:
        """sim_anchor of each anchor text, shape (n,)."""
        if len(anchors) == 0:
            return np.zeros(0)
        return gtsat(self._posteriors(anchors), self.floor)

    def _posteriors(self, anchors: Sequence[str]) -> np.ndarray:
        """``nb_.predict_proba(anchors)``; anchors that NB and the link index tokenise alike
        (strings of at most :data:`TEXT_CHARS` characters) are tokenised once for both."""
        nb = self.nb_
        if nb.evidence_tokens is not None or not all(
                isinstance(anchor, str) and len(anchor) <= min(TEXT_CHARS, nb.max_chars)
                for anchor in anchors):
            return nb.predict_proba(anchors)
        tokens = anchor_tokens(anchors)
        lengths = np.fromiter(map(len, tokens), dtype=np.int64, count=len(tokens))
        columns = np.fromiter(map(nb.vectorizer_.vocabulary_.get, chain.from_iterable(tokens),
                                  repeat(-1)), dtype=np.int64, count=int(lengths.sum()))
        rows = np.repeat(np.arange(len(tokens)), lengths)
        known = columns >= 0
        # NB's plain posterior: its log-odds of the known tokens, summed in token order
        return expit(nb._log_odds(rows[known], columns[known], len(tokens)))

    def similarity(self, anchor: str) -> float:
        return float(self.similarities([anchor])[0])

    def predict(self, anchors: Sequence[str]) -> np.ndarray:
        """1 where NB says the anchor is relevant, else 0."""
        return self.nb_.predict(anchors)

    def get_state(self) -> tuple[dict[str, np.ndarray], dict]:
        """The anchor NB's state plus this model's parameters."""
        arrays, nb_header = self.nb_.get_state()
        return arrays, {"params": self.get_params(), "nb": nb_header}

    @classmethod
    def from_state(cls, arrays: dict[str, np.ndarray], header: dict) -> Self:
        model = cls(**header["params"])
        model.nb_ = NaiveBayesTextClassifier.from_state(arrays, header["nb"])
        model.classes_ = model.nb_.classes_
        return model
