"""Multinomial Naive Bayes page classifier with Laplace smoothing (docs/algorithms.md §1.2).

``P(c|d) ∝ P(c) · Π_k P(w_k|c)`` with ``P(w|c) = (α + Σ_{d∈c} N(w,d)) / (α|V| + Σ_{w'} Σ_{d∈c} N(w',d))``,
α = 1 being Laplace smoothing and V the training vocabulary (both classes). Computed in log
space; words not in V are ignored, so an empty text gets the class prior.

Why a temperature: NB treats every word of a page as independent evidence, so on a page of a
thousand tokens the log-odds run into the hundreds and the posterior is exactly 0 or 1 - useless
as a crawl priority. The reported posterior is ``sigmoid(log_odds / T)`` with
``T = max(1, n_tokens / evidence_tokens)``: texts of up to ``evidence_tokens`` known tokens
(anchors, snippets) get the exact NB posterior; a longer text is scored as if it carried
``evidence_tokens`` tokens of its average per-token evidence. Dividing the whole log-odds (prior
included) keeps every decision (posterior above or below 0.5) identical to plain NB.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from itertools import chain, repeat
from typing import TYPE_CHECKING

import numpy as np
from scipy.sparse import csr_matrix
from scipy.special import expit
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.feature_extraction.text import CountVectorizer
from sklearn.naive_bayes import MultinomialNB

from jlse.models.tokenizer import han_share, tokenize

if TYPE_CHECKING:
    from typing import Self

logger = logging.getLogger(__name__)


# Characters tokenised per text. Chinese segmentation costs ~0.4-1 µs per character, so a whole
# 15 KB page (~4,000 characters) takes ~2-4 ms; a sample of 2,000 characters spread over the
# page (benchmarks/bench_classify.py: ~450-850 Chinese / ~9,000 English pages/s per core) is
# still far more evidence than the posterior's temperature lets count (see above).
DEFAULT_MAX_CHARS = 2_000
SAMPLE_WINDOWS = 4
EVIDENCE_TOKENS = 10  # the temperature's default (module docstring)


def text_sample(text: str, max_chars: int, windows: int = SAMPLE_WINDOWS) -> str:
    """``text`` if it has at most ``max_chars`` characters, else ``windows`` evenly spaced slices
    of ``max_chars // windows`` characters, first and last included: the whole page is sampled,
    not only its navigation-heavy start. Bounds tokenising time on long pages."""
    if len(text) <= max_chars:
        return text
    width = max_chars // windows
    if windows < 2 or width == 0:
        return text[:max_chars]
    step = (len(text) - width) / (windows - 1)
    starts = [round(i * step) for i in range(windows)]
    return "\n".join(text[start : start + width] for start in starts)


def binary_labels(labels: Sequence[int], n_samples: int, what: str) -> np.ndarray:
    """``labels`` as an int array of 0/1 with both classes present, or a clear ValueError."""
    y = np.asarray(labels, dtype=int).reshape(-1)
    if len(y) != n_samples:
        raise ValueError(f"{what}: {n_samples} samples but {len(y)} labels")
    if not np.isin(y, (0, 1)).all():
        raise ValueError(f"{what}: labels must be 1 (relevant/target) or 0, got {sorted(set(y.tolist()))}")
    if len(np.unique(y)) < 2:
        raise ValueError(f"{what}: needs samples of both classes (label 1 and label 0)")
    return y


def is_chinese(text: str, share: float = 0.3) -> bool:
    """Whether Han characters make up at least ``share`` of the text's letters."""
    return han_share(text) >= share


def script_balanced_weights(texts: Sequence[str], labels: np.ndarray) -> np.ndarray:
    """Sample weights giving each class the same share of Chinese texts (the share of both
    classes pooled), each class keeping its total weight (its prior)."""
    chinese = np.array([is_chinese(text) if isinstance(text, str) else False for text in texts])
    target = chinese.mean()
    weights = np.ones(len(texts))
    for label in (0, 1):
        in_class = labels == label
        share = chinese[in_class].mean()
        if 0.0 < share < 1.0 and 0.0 < target < 1.0:
            weights[in_class & chinese] = target / share
            weights[in_class & ~chinese] = (1 - target) / (1 - share)
    return weights


class NaiveBayesTextClassifier(ClassifierMixin, BaseEstimator):
    """P(relevant | text) by multinomial NB over :func:`models.tokenizer.tokenize` tokens.

    ``max_chars`` bounds the characters tokenised per text (:func:`text_sample`; speed on long
    pages); ``evidence_tokens`` is the temperature of the module docstring (``None``: plain NB);
    ``balance_scripts`` weights the samples so both classes hold the same share of Chinese
    texts (:func:`script_balanced_weights`).
    """

    def __init__(
        self,
        alpha: float = 1.0,
        max_features: int | None = 50_000,
        *,
        max_chars: int = DEFAULT_MAX_CHARS,
        evidence_tokens: int | None = EVIDENCE_TOKENS,
        balance_scripts: bool = False,
    ) -> None:
        self.alpha = alpha
        self.max_features = max_features
        self.max_chars = max_chars
        self.evidence_tokens = evidence_tokens
        self.balance_scripts = balance_scripts

    def fit(self, texts: Sequence[str], labels: Sequence[int]) -> Self:
        y = binary_labels(labels, len(texts), "NaiveBayesTextClassifier.fit")
        self.vectorizer_ = CountVectorizer(
            tokenizer=tokenize, lowercase=False, token_pattern=None, max_features=self.max_features
        )
        try:
            counts = self.vectorizer_.fit_transform(self._capped(texts))
        except ValueError as exc:  # CountVectorizer: "empty vocabulary"
            raise ValueError(f"NaiveBayesTextClassifier.fit: no usable words in the samples ({exc})") from None
        weights = script_balanced_weights(texts, y) if self.balance_scripts else None
        self.nb_ = MultinomialNB(alpha=self.alpha).fit(counts, y, sample_weight=weights)
        self.classes_ = self.nb_.classes_
        self.class_counts_ = self.nb_.feature_count_  # (2, |V|): what a refit adds pages to
        log_prob = self.nb_.feature_log_prob_
        self.word_log_ratio_ = log_prob[1] - log_prob[0]
        self.prior_log_odds_ = float(self.nb_.class_log_prior_[1] - self.nb_.class_log_prior_[0])
        logger.debug("page NB fitted on %d texts, %d words", len(y), counts.shape[1])
        return self

    def log_odds(self, texts: Sequence[str]) -> np.ndarray:
        """Plain NB ``log P(relevant|text) - log P(irrelevant|text)`` for each text."""
        return self._log_odds(*self._token_columns(texts), len(texts))

    def predict_proba(self, texts: Sequence[str]) -> np.ndarray:
        """P(relevant | text) for each text, shape (n,), tempered as the module docstring says."""
        return self.predict_proba_tokens(self.token_lists(texts))

    def token_lists(self, texts: Sequence[str]) -> list[list[str]]:
        """The tokens each text is scored by (its :func:`text_sample`, tokenised)."""
        return [tokenize(text) for text in self._capped(texts)]

    def predict_proba_tokens(self, token_lists: list[list[str]]) -> np.ndarray:
        """:meth:`predict_proba` of texts already tokenised by :meth:`token_lists` (a model
        refitted over a grown vocabulary scores the same tokens)."""
        rows, columns = self._columns(token_lists)
        log_odds = self._log_odds(rows, columns, len(token_lists))
        if self.evidence_tokens is not None:
            n_tokens = np.bincount(rows, minlength=len(token_lists))
            log_odds = log_odds / np.maximum(1.0, n_tokens / self.evidence_tokens)
        return expit(log_odds)

    def predict(self, texts: Sequence[str]) -> np.ndarray:
        """1 where NB prefers relevant, else 0 (a tie goes to irrelevant, as argmax does)."""
        return (self.predict_proba(texts) > 0.5).astype(int)

    def relevance(self, text: str) -> float:
        """P(relevant | text) of one text."""
        return float(self.predict_proba([text])[0])

    def _counts(self, texts: Sequence[str]) -> csr_matrix:
        """Word counts over the vocabulary, as ``vectorizer_.transform`` gives them (repeated
        indices in a row are summed by every sparse operation)."""
        rows, columns = self._token_columns(texts)
        indptr = np.zeros(len(texts) + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=len(texts)), out=indptr[1:])
        return csr_matrix((np.ones(len(columns)), columns, indptr),
                          shape=(len(texts), len(self.vectorizer_.vocabulary_)))

    def _token_columns(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        return self._columns(self.token_lists(texts))

    def _columns(self, token_lists: list[list[str]]) -> tuple[np.ndarray, np.ndarray]:
        """(text number, vocabulary column) of every known token, texts and tokens in order:
        one vocabulary look-up per token, no per-text arrays."""
        lengths = np.fromiter(map(len, token_lists), dtype=np.int64, count=len(token_lists))
        columns = np.fromiter(map(self.vectorizer_.vocabulary_.get,
                                  chain.from_iterable(token_lists), repeat(-1)),
                              dtype=np.int64, count=int(lengths.sum()))
        rows = np.repeat(np.arange(len(token_lists)), lengths)
        known = columns >= 0
        return rows[known], columns[known]

    def _log_odds(self, rows: np.ndarray, columns: np.ndarray, n_texts: int) -> np.ndarray:
        # Sums each text's word weights in token order: the same floats as counts @ weights.
        weights = np.bincount(rows, weights=self.word_log_ratio_[columns], minlength=n_texts)
        return self.prior_log_odds_ + weights

    def _capped(self, texts: Sequence[str]) -> list[str]:
        capped = []
        for text in texts:
            if not isinstance(text, str):
                logger.warning("NB: expected str, got %s; scored as an empty text", type(text).__name__)
                text = ""
            capped.append(text_sample(text, self.max_chars))
        return capped

    def get_state(self) -> tuple[dict[str, np.ndarray], dict]:
        """Learned arrays and a JSON-ready header (parameters, vocabulary in index order)."""
        vocabulary = self.vectorizer_.vocabulary_
        words = sorted(vocabulary, key=vocabulary.__getitem__)
        arrays = {
            "word_log_ratio": self.word_log_ratio_,
            "prior_log_odds": np.array([self.prior_log_odds_]),
            "classes": np.asarray(self.classes_),
        }
        if getattr(self, "class_counts_", None) is not None:
            arrays["class_counts"] = np.asarray(self.class_counts_, dtype=float)
        header = {"params": self.get_params(), "vocabulary": words}
        return arrays, header

    @classmethod
    def from_state(cls, arrays: dict[str, np.ndarray], header: dict) -> Self:
        """The classifier :meth:`get_state` described, ready to predict (``nb_`` is not kept)."""
        model = cls(**header["params"])
        vocabulary = {word: index for index, word in enumerate(header["vocabulary"])}
        model.vectorizer_ = CountVectorizer(
            tokenizer=tokenize, lowercase=False, token_pattern=None, vocabulary=vocabulary
        )
        model.vectorizer_.vocabulary_ = vocabulary
        model.vectorizer_.fixed_vocabulary_ = True
        model.word_log_ratio_ = np.asarray(arrays["word_log_ratio"], dtype=float)
        model.prior_log_odds_ = float(arrays["prior_log_odds"][0])
        model.classes_ = np.asarray(arrays["classes"])
        model.class_counts_ = arrays.get("class_counts")  # None in a model saved before them
        if model.word_log_ratio_.shape != (len(vocabulary),):
            raise ValueError("NaiveBayesTextClassifier state: vocabulary and word weights differ in size")
        if model.class_counts_ is not None and model.class_counts_.shape != (2, len(vocabulary)):
            raise ValueError("NaiveBayesTextClassifier state: vocabulary and class counts differ in size")
        return model
