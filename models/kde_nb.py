"""Naive Bayes with kernel density estimates over normalised TF-IDF (docs/algorithms.md §2.5–§2.6).

Features: the ``max_features`` most frequent terms of the training texts, each weighted
``w = tf·log(|E|/df) / sqrt(Σ_r (tf_r·log(|E|/df_r))²)`` (|E| training texts, ``df`` texts holding
the term; a term found in every text weighs 0). Per class c and feature j (John & Langley):
``P(x_j|c) = (1/n_c) Σ_i K(x_j; x_ji, σ)``, K the Gaussian density. The class score is
``log P(c) + Σ_j log P(x_j|c)``.

Bandwidth (``bandwidth``): the paper's ``σ_c = 1/sqrt(n_c)`` per class ("per-class") is unusable on a
text vocabulary: the kernel's normalisation ``1/σ_c`` enters each of the F feature densities, so
the log-odds carries ``(F/2)·log(n_1/n_0)`` however the texts read - 44 nats for 23 vs 22 samples
and F = 2000, against a few nats of evidence (sandbox topic, 4-fold CV: 0.47, the majority
class). The default "mean-class" uses one ``σ = 1/sqrt(n̄)`` for both classes, n̄ the mean class
size: the paper's value when the classes are balanced (same CV: 0.98).

Speed: a text's vector is mostly zeros, and the density at 0 of every feature is fixed by the
training set. So ``Σ_j log P(x_j|c)`` is a precomputed constant plus, for the text's non-zero
features only, ``log P(x_j|c) - log P(0|c)``. The training vectors are mostly zeros too: the
``n_c - m_j`` zero values of feature j are one kernel term with that weight, and only its
``m_j`` non-zero training values are visited. Both exact, and cheap enough for every
out-link's text (a page's link texts: :meth:`KDENaiveBayes.predict_proba_tokens` on the tokens
the link index has just made).

Temperature, as in :mod:`models.naive_bayes`: a feature that is 0 in the text adds almost
nothing to the log-odds, so the log-odds grows with the text's non-zero features (its distinct
known terms, ~140 on a sandbox page) and with the class sizes (σ shrinks). The reported
posterior is ``sigmoid(log_odds / T)`` with ``T = max(1, n_terms / evidence_features)``: a text
of up to ``evidence_features`` terms (an anchor, a link context) gets the exact posterior; a longer
text is scored as if it carried ``evidence_features`` terms of its average per-term evidence.
Dividing the whole log-odds keeps every decision (above or below 0.5) that of plain KDE-NB.
Default 50, measured on a sandbox topic (5-fold CV, median posterior of relevant / irrelevant
pages): 20 pages per class 0.60 / 0.41 (untempered 0.81 / 0.28); 80 per class 0.93 / 0.14
(untempered 1.0 / 0.015).
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Sequence
from itertools import chain, repeat
from typing import TYPE_CHECKING

import numpy as np
from scipy.sparse import csc_matrix, csr_matrix
from scipy.special import expit
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.naive_bayes import GaussianNB

from jlse.models import compiled
from jlse.models.naive_bayes import DEFAULT_MAX_CHARS, binary_labels, text_sample
from jlse.models.sparse_rows import row_positions
from jlse.models.tokenizer import tokenize_many

if TYPE_CHECKING:
    from typing import Self

logger = logging.getLogger(__name__)

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
_MAX_CELLS = 2_000_000  # (non-zero entries × class samples) evaluated per numpy step
BANDWIDTHS = ("mean-class", "per-class")


def _text_tokens(texts: Sequence[str], max_chars: int) -> list[list[str]]:
    """The tokens of each text's sample, the texts tokenised together (a page's link texts)."""
    samples = []
    for text in texts:
        if not isinstance(text, str):
            logger.warning("KDE-NB: expected str, got %s; scored as an empty text", type(text).__name__)
            text = ""
        samples.append(text_sample(text, max_chars))
    return tokenize_many(samples)


def _log_sum_kernels(zero_term: np.ndarray, values: np.ndarray, columns: np.ndarray,
                     by_column: csc_matrix, sigma: float) -> np.ndarray:
    """``log(exp(zero_term) + Σ_i exp(-z_i² / 2))`` per (value, column) pair, z_i = (value -
    x_i) / σ over the column's non-zero training values x_i; shifted by each pair's largest
    term (logsumexp)."""
    positions, owner = row_positions(by_column.indptr, columns)
    z = (values[owner] - by_column.data[positions]) / sigma
    terms = -0.5 * z * z
    peak = zero_term.copy()
    np.maximum.at(peak, owner, terms)
    total = np.exp(zero_term - peak) + np.bincount(owner, weights=np.exp(terms - peak[owner]),
                                                   minlength=len(values))
    return peak + np.log(total)


class TfidfFeatures:
    """The normalised TF-IDF of the module docstring; ``vocabulary_`` lists terms by column."""

    def __init__(self, max_features: int = 2000, max_chars: int = DEFAULT_MAX_CHARS) -> None:
        self.max_features = max_features
        self.max_chars = max_chars

    def fit(self, texts: Sequence[str]) -> Self:
        documents = _text_tokens(texts, self.max_chars)
        frequency = Counter(token for tokens in documents for token in tokens)
        if not frequency:
            raise ValueError("TF-IDF features: no usable words in the samples")
        ranked = sorted(frequency.items(), key=lambda item: (-item[1], item[0]))  # ties: by term
        self.vocabulary_ = [term for term, _ in ranked[: self.max_features]]
        self._index = {term: column for column, term in enumerate(self.vocabulary_)}
        document_frequency = np.zeros(len(self.vocabulary_))
        for tokens in documents:
            columns = [self._index[t] for t in set(tokens) if t in self._index]
            document_frequency[columns] += 1
        self.idf_ = np.log(len(documents) / document_frequency)
        return self

    def transform(self, texts: Sequence[str]) -> csr_matrix:
        """Normalised TF-IDF rows, shape (n, F); a text without weighted terms is a zero row."""
        return self.transform_tokens(_text_tokens(texts, self.max_chars))

    def transform_tokens(self, documents: Sequence[Sequence[str]]) -> csr_matrix:
        """:meth:`transform` of texts already tokenised (each a sequence of tokens)."""
        rows, columns, weights = self.entries(documents)
        indptr = np.zeros(len(documents) + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=len(documents)), out=indptr[1:])
        return csr_matrix((weights, columns, indptr), shape=(len(documents), len(self.vocabulary_)))

    def token_columns(self, documents: Sequence[Sequence[str]]) -> tuple[np.ndarray, np.ndarray]:
        """The feature column of every token (-1: not a feature), all texts' tokens in a row,
        and the number of tokens of each text."""
        lengths = np.fromiter(map(len, documents), dtype=np.int64, count=len(documents))
        columns = np.fromiter(map(self._index.get, chain.from_iterable(documents), repeat(-1)),
                              dtype=np.int64, count=int(lengths.sum()))
        return columns, lengths

    def entries(self, documents: Sequence[Sequence[str]]) -> tuple[np.ndarray, ...]:
        """The non-zero entries of :meth:`transform_tokens`: (row, column, weight) arrays,
        ordered by row, then column."""
        columns, lengths = self.token_columns(documents)
        n_texts, n_features = len(documents), len(self.vocabulary_)
        rows = np.repeat(np.arange(n_texts), lengths)
        known = columns >= 0
        keys = np.sort(rows[known] * n_features + columns[known])  # (text, term), text-major
        first = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1]))) if keys.size \
            else np.zeros(0, dtype=np.int64)
        counts = np.diff(np.append(first, keys.size))  # term counts
        rows, columns = np.divmod(keys[first], n_features)
        weights = counts * self.idf_[columns]
        norms = np.sqrt(np.bincount(rows, weights=weights**2, minlength=n_texts))
        weights /= np.where(norms > 0, norms, 1.0)[rows]
        nonzero = weights != 0  # a term found in every training text weighs 0
        return rows[nonzero], columns[nonzero], weights[nonzero]

    def get_state(self) -> tuple[dict[str, np.ndarray], dict]:
        params = {"max_features": self.max_features, "max_chars": self.max_chars}
        return {"idf": self.idf_}, {"params": params, "vocabulary": list(self.vocabulary_)}

    @classmethod
    def from_state(cls, arrays: dict[str, np.ndarray], header: dict) -> TfidfFeatures:
        features = cls(**header["params"])
        features.vocabulary_ = list(header["vocabulary"])
        features._index = {term: column for column, term in enumerate(features.vocabulary_)}
        features.idf_ = np.asarray(arrays["idf"], dtype=float)
        if features.idf_.shape != (len(features.vocabulary_),):
            raise ValueError("TF-IDF state: vocabulary and idf differ in size")
        return features


class KDENaiveBayes(ClassifierMixin, BaseEstimator):
    """P(relevant | text) by kernel-density Naive Bayes (labels 1 relevant, 0 irrelevant).

    ``bandwidth``: "mean-class" or "per-class" (module docstring); ``evidence_features``: the
    temperature (``None``: plain KDE-NB posteriors)."""

    def __init__(
        self, max_features: int = 2000, *, max_chars: int = DEFAULT_MAX_CHARS,
        evidence_features: int | None = 50, bandwidth: str = "mean-class",
    ) -> None:
        self.max_features = max_features
        self.max_chars = max_chars
        self.evidence_features = evidence_features
        self.bandwidth = bandwidth

    def fit(self, texts: Sequence[str], labels: Sequence[int]) -> Self:
        y = binary_labels(labels, len(texts), "KDENaiveBayes.fit")
        self.features_ = TfidfFeatures(self.max_features, self.max_chars).fit(texts)
        self._set_training(self.features_.transform(texts).toarray(), y)
        logger.debug("KDE-NB fitted on %d texts, %d features", len(y), self.train_matrix_.shape[1])
        return self

    def _set_training(self, matrix: np.ndarray, labels: np.ndarray) -> None:
        """Keep the training vectors per class and precompute every density at 0."""
        if self.bandwidth not in BANDWIDTHS:
            raise ValueError(f"KDENaiveBayes: bandwidth must be one of {BANDWIDTHS}, got {self.bandwidth!r}")
        self.train_matrix_, self.train_labels_ = matrix, labels
        self.classes_ = np.array([0, 1])
        self.class_vectors_ = [matrix[labels == c] for c in self.classes_]
        self.class_columns_ = [csc_matrix(vectors) for vectors in self.class_vectors_]
        counts = np.array([len(vectors) for vectors in self.class_vectors_], dtype=float)
        sizes = counts if self.bandwidth == "per-class" else np.full(2, counts.mean())
        self.sigma_ = 1.0 / np.sqrt(sizes)
        self.prior_log_odds_ = float(np.log(counts[1] / counts[0]))
        self.zero_log_density_ = [
            self._log_density(np.zeros(matrix.shape[1]), np.arange(matrix.shape[1]), c)
            for c in self.classes_
        ]
        self.zero_log_likelihood_ = np.array([zero.sum() for zero in self.zero_log_density_])
        # the same, as the compiled posteriors take them
        self._by_column_arrays = tuple(array for by_column in self.class_columns_
                                       for array in (by_column.indptr, by_column.data))
        self._class_sizes = counts.astype(np.int64)
        self._zero_log_densities = np.vstack(self.zero_log_density_)

    def _log_density(self, values: np.ndarray, columns: np.ndarray, c: int) -> np.ndarray:
        """``log P(x_j = value | c)`` for each (value, column j) pair, shape (len(values),).

        Most training values of a column are 0 (a page holds a few of the F terms): the
        ``n_c - m_j`` zero kernels are one term ``(n_c - m_j) K(x; 0)``, and only the column's
        ``m_j`` non-zero training values are visited (``class_columns_[c]``, the class's vectors
        by column). The same sum as over all n_c kernels, in a fraction of the work."""
        by_column, sigma = self.class_columns_[c], self.sigma_[c]
        n_samples = by_column.shape[0]
        values = np.asarray(values, dtype=float)
        zeros = n_samples - (by_column.indptr[columns + 1] - by_column.indptr[columns])
        with np.errstate(divide="ignore"):  # log 0 = -inf: a column without zero values
            zero_term = np.log(zeros) - 0.5 * (values / sigma) ** 2
        out = np.empty(len(values))
        step = max(1, _MAX_CELLS // max(1, n_samples))
        for start in range(0, len(values), step):  # bounded memory on long texts
            part = slice(start, start + step)
            out[part] = _log_sum_kernels(zero_term[part], values[part], columns[part], by_column,
                                         sigma)
        return out - math.log(n_samples) - math.log(sigma) - _LOG_SQRT_2PI

    def class_log_likelihood(self, matrix: csr_matrix) -> np.ndarray:
        """``Σ_j log P(x_j|c)`` of each row of a TF-IDF matrix, shape (n, 2)."""
        matrix = csr_matrix(matrix)
        rows = np.repeat(np.arange(matrix.shape[0]), np.diff(matrix.indptr))
        return self._likelihood(rows, matrix.indices, matrix.data, matrix.shape[0])

    def _likelihood(self, rows: np.ndarray, columns: np.ndarray, values: np.ndarray,
                    n_rows: int) -> np.ndarray:
        """:meth:`class_log_likelihood` of a matrix given by its non-zero entries."""
        result = np.empty((n_rows, 2))
        for c in self.classes_:
            zero = self.zero_log_density_[c]
            change = self._log_density(values, columns, c) - zero[columns]
            result[:, c] = self.zero_log_likelihood_[c] + np.bincount(rows, weights=change,
                                                                      minlength=n_rows)
        return result

    def log_odds(self, texts: Sequence[str]) -> np.ndarray:
        """Plain KDE-NB ``log P(relevant|text) - log P(irrelevant|text)``."""
        entries = self.features_.entries(_text_tokens(texts, self.max_chars))
        return self._log_odds(*entries, len(texts))

    def _log_odds(self, rows: np.ndarray, columns: np.ndarray, values: np.ndarray,
                  n_rows: int) -> np.ndarray:
        likelihood = self._likelihood(rows, columns, values, n_rows)
        return self.prior_log_odds_ + likelihood[:, 1] - likelihood[:, 0]

    def predict_proba(self, texts: Sequence[str]) -> np.ndarray:
        """P(relevant | text) for each text, shape (n,), tempered as the module docstring says."""
        return self.predict_proba_tokens(_text_tokens(texts, self.max_chars))

    def predict_proba_tokens(self, documents: Sequence[Sequence[str]]) -> np.ndarray:
        """:meth:`predict_proba` of texts already tokenised (a page's link texts, whose tokens
        the link index has at hand)."""
        if len(documents) == 0:
            return np.zeros(0)
        kernel = compiled.kernel("_kde_kernel", "posteriors")
        if kernel is not None:
            return kernel(*self.features_.token_columns(documents), self.features_.idf_,
                          *self._by_column_arrays, self.sigma_, self._class_sizes,
                          self._zero_log_densities, self.zero_log_likelihood_,
                          self.prior_log_odds_, float(self.evidence_features or 0))
        return self._posteriors_arrays(documents)

    def _posteriors_arrays(self, documents: Sequence[Sequence[str]]) -> np.ndarray:
        """:meth:`predict_proba_tokens` in whole-array numpy steps."""
        rows, columns, values = self.features_.entries(documents)
        log_odds = self._log_odds(rows, columns, values, len(documents))
        if self.evidence_features is not None:
            n_terms = np.bincount(rows, minlength=len(documents))
            log_odds = log_odds / np.maximum(1.0, n_terms / self.evidence_features)
        return expit(log_odds)

    def predict(self, texts: Sequence[str]) -> np.ndarray:
        return (self.predict_proba(texts) > 0.5).astype(int)

    def get_state(self) -> tuple[dict[str, np.ndarray], dict]:
        """Training vectors, labels and the feature idf; parameters and vocabulary."""
        arrays, feature_header = self.features_.get_state()
        arrays = {**arrays, "train_matrix": self.train_matrix_, "train_labels": self.train_labels_}
        return arrays, {"params": self.get_params(), "features": feature_header}

    @classmethod
    def from_state(cls, arrays: dict[str, np.ndarray], header: dict) -> Self:
        model = cls(**header["params"])
        model.features_ = TfidfFeatures.from_state(arrays, header["features"])
        matrix = np.asarray(arrays["train_matrix"], dtype=float)
        labels = binary_labels(arrays["train_labels"], len(matrix), "KDENaiveBayes state")
        if matrix.ndim != 2 or matrix.shape[1] != len(model.features_.vocabulary_):
            raise ValueError("KDENaiveBayes state: training matrix does not match the vocabulary")
        model._set_training(matrix, labels)
        return model


class GaussianNBText(ClassifierMixin, BaseEstimator):
    """The normal-density NB baseline of docs/algorithms.md §2.6 on the same TF-IDF features."""

    def __init__(self, max_features: int = 2000, *, max_chars: int = DEFAULT_MAX_CHARS) -> None:
        self.max_features = max_features
        self.max_chars = max_chars

    def fit(self, texts: Sequence[str], labels: Sequence[int]) -> Self:
        y = binary_labels(labels, len(texts), "GaussianNBText.fit")
        self.features_ = TfidfFeatures(self.max_features, self.max_chars).fit(texts)
        self.gnb_ = GaussianNB().fit(self.features_.transform(texts).toarray(), y)
        self.classes_ = self.gnb_.classes_
        return self

    def predict_proba(self, texts: Sequence[str]) -> np.ndarray:
        """P(relevant | text), shape (n,) (untempered: a baseline for accuracy only)."""
        if len(texts) == 0:
            return np.zeros(0)
        return self.gnb_.predict_proba(self.features_.transform(texts).toarray())[:, 1]

    def predict(self, texts: Sequence[str]) -> np.ndarray:
        if len(texts) == 0:
            return np.zeros(0, dtype=int)
        return self.gnb_.predict(self.features_.transform(texts).toarray())
