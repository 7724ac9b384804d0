"""BM25 over one field of the link triples (SPEC section 1, "Mapping a new link onto G_w").

``BM25(q, d) = sum_{t in q} idf(t) * f(t,d)(k1+1) / (f(t,d) + k1(1 - b + b|d|/avgdl))`` with
``idf(t) = ln(1 + (N - n_t + 0.5)/(n_t + 0.5))``, statistics over the N fitted documents (the
vertices of G_w). A query is the *set* of its terms: a term repeated in the query counts once,
in the score and in its upper bound ``sum_{t in q} idf(t)(k1+1)`` alike. Dividing by that bound
puts every score in [0, 1). A query term the vocabulary does not know adds nothing to the score
but its idf (``n_t = 0``) still counts in the bound, so an unknown word makes a match weaker.

Scoring is one sparse product ``(query terms x idf / bound) @ doc_weights_.T``: only the
postings of the query terms are touched, never a loop over documents.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

if TYPE_CHECKING:
    from typing import Self

logger = logging.getLogger(__name__)

WEIGHT_DTYPE = np.float32  # document weights and scores: halves memory, ample precision


def idf(n_docs: int, doc_freq: np.ndarray) -> np.ndarray:
    """BM25's idf of terms found in ``doc_freq`` of ``n_docs`` documents (always > 0)."""
    doc_freq = np.asarray(doc_freq, dtype=np.float64)
    return np.log1p((n_docs - doc_freq + 0.5) / (doc_freq + 0.5))


class FieldBM25:
    """BM25 index of one field (anchor, URL or context tokens) of N documents."""

    def __init__(self, k1: float = 2.0, b: float = 0.75) -> None:
        self.k1 = k1
        self.b = b

    def fit(self, docs: Sequence[Sequence[str]]) -> Self:
        """Learn the vocabulary, idf and per-posting weights of ``docs`` (token lists)."""
        self._check_params()
        vocabulary: dict[str, int] = {}
        columns = [vocabulary.setdefault(token, len(vocabulary)) for doc in docs for token in doc]
        lengths = np.fromiter((len(doc) for doc in docs), dtype=np.int64, count=len(docs))
        indptr = np.concatenate(([0], np.cumsum(lengths)))
        ones = np.ones(len(columns), dtype=np.float64)
        shape = (len(docs), len(vocabulary))
        term_freq = sp.csr_matrix((ones, np.asarray(columns, dtype=np.int64), indptr), shape=shape)
        term_freq.sum_duplicates()  # one entry per (document, term), holding f(t, d)
        self.vocabulary_ = vocabulary
        self.n_docs_ = len(docs)
        self.avgdl_ = float(lengths.mean()) if len(docs) else 0.0
        self.idf_ = idf(self.n_docs_, np.bincount(term_freq.indices, minlength=len(vocabulary)))
        self.doc_weights_ = self._weights(term_freq, lengths)
        return self

    @classmethod
    def from_learned(cls, vocabulary: dict[str, int], idf_: np.ndarray, doc_weights: sp.csr_matrix,
                     avgdl: float, k1: float = 2.0, b: float = 0.75) -> FieldBM25:
        """A fitted index from its learned state (as saved by a Q-table); ValueError if the
        parts do not fit together."""
        index = cls(k1=k1, b=b)
        index._check_params()
        doc_weights = sp.csr_matrix(doc_weights, dtype=WEIGHT_DTYPE)
        n_terms = len(vocabulary)
        if doc_weights.shape[1] != n_terms or np.shape(idf_) != (n_terms,):
            raise ValueError(f"BM25 state: {n_terms} terms, idf of shape {np.shape(idf_)}, "
                             f"weights of shape {doc_weights.shape}")
        if sorted(vocabulary.values()) != list(range(n_terms)):
            raise ValueError("BM25 state: vocabulary columns are not 0..V-1")
        index.vocabulary_ = dict(vocabulary)
        index.idf_ = np.asarray(idf_, dtype=np.float64)
        index.doc_weights_ = doc_weights
        index.n_docs_ = doc_weights.shape[0]
        index.avgdl_ = float(avgdl)
        return index

    def score(self, queries: Sequence[Sequence[str]]) -> sp.csr_matrix:
        """Normalised BM25 of each query against each document: Q x N, values in [0, 1)."""
        return (self.query_matrix(queries) @ self.doc_weights_.T).tocsr()

    def query_matrix(self, queries: Sequence[Sequence[str]], weight: float = 1.0) -> sp.csr_matrix:
        """Q x V: ``weight * idf(t) / bound(q)`` for each known term t of query q.

        ``query_matrix(queries) @ doc_weights_.T`` is :meth:`score`; a caller may stack these
        matrices of several fields to score all fields in one product."""
        columns, indptr, n_unknown = self._known_terms(queries)
        term_idf = self.idf_[columns]
        counts = np.diff(indptr)
        known_sums = np.zeros(len(counts))
        has_known = counts > 0
        if has_known.any():
            known_sums[has_known] = np.add.reduceat(term_idf, indptr[:-1][has_known])
        unknown_idf = idf(self.n_docs_, np.zeros(1))[0]
        bounds = (known_sums + unknown_idf * n_unknown) * (self.k1 + 1.0)
        values = weight * term_idf / np.repeat(bounds, counts)
        shape = (len(queries), len(self.vocabulary_))
        return sp.csr_matrix((values.astype(WEIGHT_DTYPE), columns, indptr), shape=shape)

    def _known_terms(self, queries: Sequence[Sequence[str]]) -> tuple[np.ndarray, ...]:
        """The known distinct terms of each query as CSR columns and row pointers, and the
        number of distinct unknown terms of each query."""
        vocabulary = self.vocabulary_
        columns: list[int] = []
        indptr = [0]
        n_unknown = []
        for query in queries:
            terms = set(query)
            known = [vocabulary[t] for t in terms if t in vocabulary]
            columns.extend(known)
            indptr.append(len(columns))
            n_unknown.append(len(terms) - len(known))
        return (np.asarray(columns, dtype=np.int64), np.asarray(indptr, dtype=np.int64),
                np.asarray(n_unknown, dtype=np.float64))

    def _weights(self, term_freq: sp.csr_matrix, lengths: np.ndarray) -> sp.csr_matrix:
        """f(t,d)(k1+1) / (f(t,d) + k1(1 - b + b|d|/avgdl)) at every posting."""
        tf = term_freq.data
        if tf.size == 0:
            return sp.csr_matrix(term_freq.shape, dtype=WEIGHT_DTYPE)
        doc_length = np.repeat(lengths, np.diff(term_freq.indptr)).astype(np.float64)
        norm = self.k1 * (1.0 - self.b + self.b * doc_length / self.avgdl_)
        weights = tf * (self.k1 + 1.0) / (tf + norm)
        return sp.csr_matrix((weights.astype(WEIGHT_DTYPE), term_freq.indices, term_freq.indptr),
                             shape=term_freq.shape)

    def _check_params(self) -> None:
        if not self.k1 > 0:
            raise ValueError(f"BM25: k1 must be positive, got {self.k1}")
        if not 0.0 <= self.b <= 1.0:
            raise ValueError(f"BM25: b must lie in [0, 1], got {self.b}")
