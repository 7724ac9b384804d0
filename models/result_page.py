"""Result-page classifier: is a page a target ("detail") page or a link page? (docs/algorithms.md §1.3)

Three features per page, from :class:`models.page_stats.PageStats`:

- ``TextDegree = log2((plain + 1) / k)``, ``plain`` = words outside links.
- ``LinkDegree = log2((links + 1) / (words + 1))``.
- ``Aggregation`` = share of all the page's words (link words included) that sit in text blocks
  of at least ``m`` words (``m = BLOCK_MIN_WORDS = 20``), in [0, 1]. A detail page keeps most of
  its words in paragraphs; a list page's words are link texts and short snippets between them.

The ``+ 1`` terms keep pages without words or links finite (the paper's formulas are otherwise kept).
``TEXT_DEGREE_K``: the SVM sees standardised features, so ``k`` only shifts TextDegree and does
not change its decisions; it matters for :class:`TargetRule` and for reading the feature. We set
``k = 200``, the words (or CJK characters) of a few short paragraphs - about the least text a
product detail page carries - so ``TextDegree >= 0`` reads "enough text for a detail page".
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC

from jlse.models.naive_bayes import binary_labels
from jlse.models.page_stats import PageStats

if TYPE_CHECKING:
    from typing import Self

logger = logging.getLogger(__name__)

TEXT_DEGREE_K: float = 200.0
BLOCK_MIN_WORDS: int = 20


def page_features(stats: PageStats, block_min_words: int = BLOCK_MIN_WORDS) -> np.ndarray:
    """``[TextDegree, LinkDegree, Aggregation]`` of a page; finite for any counts."""
    words = max(0, int(stats.n_words))
    link_words = min(words, max(0, int(stats.n_link_words)))
    links = max(0, int(stats.n_links))
    plain = words - link_words
    text_degree = math.log2((plain + 1) / TEXT_DEGREE_K)
    link_degree = math.log2((links + 1) / (words + 1))
    block_words = sum(size for size in stats.text_blocks if size >= block_min_words)
    aggregation = min(1.0, block_words / words) if words else 0.0
    return np.array([text_degree, link_degree, aggregation])


def feature_matrix(stats: Sequence[PageStats], block_min_words: int = BLOCK_MIN_WORDS) -> np.ndarray:
    """Features of many pages, shape (n, 3)."""
    rows = [page_features(page, block_min_words) for page in stats]
    return np.array(rows).reshape(len(rows), 3)


class ResultPageClassifier(ClassifierMixin, BaseEstimator):
    """RBF SVM on standardised page features; labels 1 = target (detail) page, 0 = link page.

    Fitting is sklearn's ``StandardScaler`` + ``SVC``. Prediction evaluates the fitted decision
    function ``Σ_i dual_i · exp(-γ‖sv_i - z‖²) + b`` with numpy: sklearn's per-call overhead
    (~1 ms) was most of the classification time of a page. Tests check it against sklearn.
    """

    def __init__(self, C: float = 1.0, gamma: str | float = "scale", *, block_min_words: int = BLOCK_MIN_WORDS) -> None:
        self.C = C
        self.gamma = gamma
        self.block_min_words = block_min_words

    def fit(self, stats: Sequence[PageStats], labels: Sequence[int]) -> Self:
        y = binary_labels(labels, len(stats), "ResultPageClassifier.fit")
        self.scaler_ = StandardScaler().fit(feature_matrix(stats, self.block_min_words))
        standardised = self.scaler_.transform(feature_matrix(stats, self.block_min_words))
        self.gamma_ = _resolve_gamma(self.gamma, standardised)
        # probability stays False (SVC's default; passing it explicitly is deprecated)
        self.svm_ = SVC(kernel="rbf", C=self.C, gamma=self.gamma_).fit(standardised, y)
        self.classes_ = self.svm_.classes_
        self._keep_decision_arrays()
        return self

    def _keep_decision_arrays(self) -> None:
        """The arrays :meth:`decision_function` reads, copied out of the sklearn objects so a
        model restored by :meth:`from_state` needs neither."""
        self.mean_ = self.scaler_.mean_
        self.scale_ = self.scaler_.scale_
        self.support_vectors_ = self.svm_.support_vectors_
        self.dual_coef_ = self.svm_.dual_coef_[0]
        self.intercept_ = float(self.svm_.intercept_[0])

    def decision_function(self, stats: Sequence[PageStats]) -> np.ndarray:
        """Signed distance to the SVM boundary; positive means target page."""
        standardised = (feature_matrix(stats, self.block_min_words) - self.mean_) / self.scale_
        offsets = standardised[:, None, :] - self.support_vectors_[None, :, :]
        kernel = np.exp(-self.gamma_ * np.einsum("ijk,ijk->ij", offsets, offsets))
        return kernel @ self.dual_coef_ + self.intercept_

    def predict(self, stats: Sequence[PageStats]) -> np.ndarray:
        """True where a page is a target page."""
        return self.decision_function(stats) > 0

    def is_target(self, stats: PageStats) -> bool:
        return bool(self.predict([stats])[0])

    def get_state(self) -> tuple[dict[str, np.ndarray], dict]:
        """Scaler, support vectors, dual coefficients, intercept and gamma; parameters."""
        arrays = {
            "mean": self.mean_, "scale": self.scale_, "support_vectors": self.support_vectors_,
            "dual_coef": self.dual_coef_, "intercept": np.array([self.intercept_]),
            "gamma": np.array([self.gamma_]), "classes": np.asarray(self.classes_),
        }
        return arrays, {"params": self.get_params()}

    @classmethod
    def from_state(cls, arrays: dict[str, np.ndarray], header: dict) -> Self:
        """The classifier :meth:`get_state` described (``svm_``/``scaler_`` are not kept)."""
        model = cls(**header["params"])
        model.mean_ = np.asarray(arrays["mean"], dtype=float)
        model.scale_ = np.asarray(arrays["scale"], dtype=float)
        model.support_vectors_ = np.asarray(arrays["support_vectors"], dtype=float)
        model.dual_coef_ = np.asarray(arrays["dual_coef"], dtype=float)
        model.intercept_ = float(arrays["intercept"][0])
        model.gamma_ = float(arrays["gamma"][0])
        model.classes_ = np.asarray(arrays["classes"])
        n_features = model.support_vectors_.shape[1] if model.support_vectors_.ndim == 2 else -1
        if model.mean_.shape != (3,) or n_features != 3 or len(model.dual_coef_) != len(model.support_vectors_):
            raise ValueError("ResultPageClassifier state: arrays of inconsistent shapes")
        return model


def _resolve_gamma(gamma: str | float, standardised: np.ndarray) -> float:
    """SVC's ``gamma`` as a number ("scale": 1 / (n_features · Var(X)), "auto": 1 / n_features)."""
    if gamma == "scale":
        variance = standardised.var()
        return 1.0 / (standardised.shape[1] * variance) if variance > 0 else 1.0
    if gamma == "auto":
        return 1.0 / standardised.shape[1]
    return float(gamma)


class TargetRule:
    """The fallback without target/nontarget samples: a detail page has most of its words in
    large blocks (``Aggregation >= min_aggregation``), few links per word
    (``LinkDegree <= max_link_degree``, default: at most one link per four words) and enough
    text (``TextDegree >= min_text_degree``, default: about ``TEXT_DEGREE_K`` plain words).
    """

    def __init__(
        self,
        min_aggregation: float = 0.5,
        max_link_degree: float = -2.0,
        min_text_degree: float = 0.0,
        block_min_words: int = BLOCK_MIN_WORDS,
    ) -> None:
        self.min_aggregation = min_aggregation
        self.max_link_degree = max_link_degree
        self.min_text_degree = min_text_degree
        self.block_min_words = block_min_words

    def predict(self, stats: Sequence[PageStats]) -> np.ndarray:
        """True where a page is a target page."""
        features = feature_matrix(stats, self.block_min_words)
        text_degree, link_degree, aggregation = features.T
        return (
            (aggregation >= self.min_aggregation)
            & (link_degree <= self.max_link_degree)
            & (text_degree >= self.min_text_degree)
        )

    def is_target(self, stats: PageStats) -> bool:
        return bool(self.predict([stats])[0])

    def get_state(self) -> tuple[dict[str, np.ndarray], dict]:
        """A rule has no learned arrays, only its thresholds."""
        return {}, {"params": dict(vars(self))}

    @classmethod
    def from_state(cls, arrays: dict[str, np.ndarray], header: dict) -> TargetRule:
        return cls(**header["params"])
