"""Position-weighted vector space model: page relevance to keywords (docs/algorithms.md §4.1).

A page is split into position blocks (title, headings, meta, anchor, body - the parser's
``ParsedPage.blocks``). The query Q (all keywords' tokens) and every block S_l are ``tf · idf``
vectors; the page's relevance is ``Σ_l p_l · cos(Q, S_l)`` with the position weights p_l
normalised to sum to 1, so it lies in [0, 1]. ``threshold`` [0.1] is the relevance cut-off.

idf: ``idf(t) = ln((1 + N) / (1 + df_t)) + 1`` over N documents (smoothed, like scikit-learn's
TfidfVectorizer). Without a corpus N = 0 and every term weighs 1, so the model works from the
keywords alone (plain tf cosine); :meth:`PositionVSM.fit` learns N and df from sample pages,
and a term never seen there gets the largest idf, ``ln(1 + N) + 1``.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin

from jlse.models.naive_bayes import DEFAULT_MAX_CHARS, text_sample
from jlse.models.tokenizer import tokenize

if TYPE_CHECKING:
    from typing import Self

logger = logging.getLogger(__name__)

BLOCKS = ("title", "headings", "meta", "anchor", "body")
DEFAULT_POSITION_WEIGHTS: dict[str, float] = {
    "title": 0.3, "headings": 0.2, "meta": 0.15, "anchor": 0.1, "body": 0.25,
}


def normalised_weights(weights: Mapping[str, float]) -> dict[str, float]:
    """``weights`` scaled to sum to 1; a ValueError for unknown blocks or unusable values."""
    unknown = set(weights) - set(BLOCKS)
    if unknown:
        raise ValueError(f"position weights: unknown blocks {sorted(unknown)}; blocks are {', '.join(BLOCKS)}")
    values = {name: float(value) for name, value in weights.items()}
    if any(not math.isfinite(v) or v < 0 for v in values.values()) or sum(values.values()) <= 0:
        raise ValueError(f"position weights: need finite, non-negative weights with a positive sum, got {weights}")
    total = sum(values.values())
    return {name: value / total for name, value in values.items()}


class PositionVSM(ClassifierMixin, BaseEstimator):
    """Relevance of a page's blocks to ``keywords``; ``weights`` None means the defaults of docs/algorithms.md §4.1."""

    def __init__(
        self, keywords: Sequence[str] = (), weights: Mapping[str, float] | None = None,
        threshold: float = 0.1, *, max_chars: int = DEFAULT_MAX_CHARS,
    ) -> None:
        self.keywords = keywords
        self.weights = weights
        self.threshold = threshold
        self.max_chars = max_chars
        self._position_weights = normalised_weights(DEFAULT_POSITION_WEIGHTS if weights is None else weights)
        self._query = Counter(token for keyword in keywords for token in tokenize(keyword))

    @property
    def usable(self) -> bool:
        """False when the keywords have no tokens (stop words only): every score would be 0."""
        return bool(self._query)

    @property
    def position_weights(self) -> dict[str, float]:
        return dict(self._position_weights)

    def fit(self, texts: Sequence[str], labels: Sequence[int] | None = None) -> Self:
        """Learn idf from ``texts`` (labels are ignored: accepted for cross-validation)."""
        df = Counter(term for text in texts for term in set(self._tokens(text)))
        self.vocabulary_ = sorted(df)
        self.n_documents_ = len(texts)
        self.idf_ = np.array([self._smoothed_idf(df[term]) for term in self.vocabulary_])
        self._idf = dict(zip(self.vocabulary_, self.idf_.tolist(), strict=True))
        self.classes_ = np.array([0, 1])
        return self

    def relevance_blocks(self, blocks: Mapping[str, str]) -> float:
        """``Σ_l p_l · cos(Q, S_l)`` in [0, 1]; a missing or empty block contributes 0."""
        total = 0.0
        for name, weight in self._position_weights.items():
            text = blocks.get(name) or ""
            total += weight * self._cosine(self._tokens(text))
        return min(1.0, total)

    def relevance(self, text: str) -> float:
        """cos(Q, text): the relevance of a page whose every block is ``text``."""
        return min(1.0, self._cosine(self._tokens(text)))

    def predict_proba(self, texts: Sequence[str]) -> np.ndarray:
        """:meth:`relevance` of each text, shape (n,) (a score in [0, 1], not a probability)."""
        return np.array([self.relevance(text) for text in texts], dtype=float)

    def predict(self, texts: Sequence[str]) -> np.ndarray:
        """1 where the relevance reaches ``threshold``."""
        return (self.predict_proba(texts) >= self.threshold).astype(int)

    def _tokens(self, text: str) -> list[str]:
        if not isinstance(text, str):
            logger.warning("VSM: expected str, got %s; scored as an empty text", type(text).__name__)
            return []
        return tokenize(text_sample(text, self.max_chars))

    def _smoothed_idf(self, document_frequency: int) -> float:
        return math.log((1 + getattr(self, "n_documents_", 0)) / (1 + document_frequency)) + 1.0

    def _cosine(self, tokens: list[str]) -> float:
        if not tokens or not self._query:
            return 0.0
        idf = getattr(self, "_idf", {})
        unseen = self._smoothed_idf(0)
        block = {term: count * idf.get(term, unseen) for term, count in Counter(tokens).items()}
        query = {term: count * idf.get(term, unseen) for term, count in self._query.items()}
        dot = sum(weight * block.get(term, 0.0) for term, weight in query.items())
        norms = math.sqrt(sum(w * w for w in block.values())) * math.sqrt(sum(w * w for w in query.values()))
        return dot / norms if norms > 0 else 0.0

    def get_state(self) -> tuple[dict[str, np.ndarray], dict]:
        """idf over the fitted vocabulary (empty when not fitted); parameters."""
        params = {"keywords": list(self.keywords), "weights": None if self.weights is None else dict(self.weights),
                  "threshold": self.threshold, "max_chars": self.max_chars}
        fitted = hasattr(self, "idf_")
        header = {"params": params, "fitted": fitted, "vocabulary": list(getattr(self, "vocabulary_", [])),
                  "n_documents": getattr(self, "n_documents_", 0)}
        return {"idf": getattr(self, "idf_", np.zeros(0))}, header

    @classmethod
    def from_state(cls, arrays: dict[str, np.ndarray], header: dict) -> Self:
        model = cls(**header["params"])
        if header["fitted"]:
            model.vocabulary_ = list(header["vocabulary"])
            model.n_documents_ = int(header["n_documents"])
            model.idf_ = np.asarray(arrays["idf"], dtype=float)
            if model.idf_.shape != (len(model.vocabulary_),):
                raise ValueError("PositionVSM state: vocabulary and idf differ in size")
            model._idf = dict(zip(model.vocabulary_, model.idf_.tolist(), strict=True))
            model.classes_ = np.array([0, 1])
        return model
