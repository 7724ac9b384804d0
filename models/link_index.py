"""Map new links onto the vertices of G_w: the nearest vertex by weighted BM25 (SPEC section 1).

Each vertex and each query link is a triple (anchor text, URL, context). Anchor and context are
tokenised by :func:`models.tokenizer.tokenize`, the URL by :func:`url_tokens`. Per field the
normalised BM25 score lies in [0, 1); the link's score against vertex v is
``s_v = w . (s_anchor, s_url, s_context)`` and the best vertex is ``v* = argmax_v s_v``.

All three fields are scored in one sparse product: the fields' query matrices, each scaled by its
weight, side by side, times the fields' postings stacked on top of each other. Only vertices
sharing a term with the query are ever touched.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING
from urllib.parse import unquote, unquote_plus, urlsplit

import numpy as np
import scipy.sparse as sp

from models.bm25 import FieldBM25
from models.tokenizer import tokenize

if TYPE_CHECKING:
    from typing import Self

logger = logging.getLogger(__name__)

FIELDS = ("anchor", "url", "context")

# Same rule as scheduler.urls.url_tokens (models may not import scheduler).
_URL_WORD = re.compile(r"[^\W_]+")
COMMON_URL_TOKENS = frozenset(
    ("http", "https", "www", "com", "net", "org", "html", "htm", "shtml", "php", "asp", "aspx",
     "jsp", "cgi", "index", "default")
)


def url_tokens(url: str) -> list[str]:
    """Lower-case word tokens of the URL's host (without ``www`` and the TLD), path and query.
    One-character numbers and common tokens (``html``, ``php``, ``com``, ...) are dropped."""
    if not isinstance(url, str):
        return []
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
    except ValueError:
        return []
    labels = host.split(".")
    if labels and labels[0] == "www":
        labels = labels[1:]
    if len(labels) > 1:
        labels = labels[:-1]
    text = " ".join((*labels, unquote(parts.path), unquote_plus(parts.query))).lower()
    return [
        token
        for token in _URL_WORD.findall(text)
        if token not in COMMON_URL_TOKENS and not (token.isdigit() and len(token) < 2)
    ]


def field_tokens(anchors: Sequence[str], urls: Sequence[str],
                 contexts: Sequence[str]) -> list[list[list[str]]]:
    """Token lists of each field, in :data:`FIELDS` order; ValueError if lengths differ."""
    if not len(anchors) == len(urls) == len(contexts):
        raise ValueError(f"link triples: {len(anchors)} anchors, {len(urls)} URLs, "
                         f"{len(contexts)} contexts")
    return [[tokenize(text) for text in anchors], [url_tokens(url) for url in urls],
            [tokenize(text) for text in contexts]]


class LinkIndex:
    """BM25 indexes of the three fields of the vertices of G_w; finds each link's best vertex."""

    def __init__(self, k1: float = 2.0, b: float = 0.75,
                 weights: Sequence[float] = (0.5, 0.2, 0.3)) -> None:
        self.k1 = k1
        self.b = b
        self.weights = weights

    def fit(self, anchors: Sequence[str], urls: Sequence[str], contexts: Sequence[str]) -> Self:
        """Index one (anchor, url, context) triple per vertex."""
        self._check_weights()
        tokens = field_tokens(anchors, urls, contexts)
        self.fields_ = [FieldBM25(k1=self.k1, b=self.b).fit(docs) for docs in tokens]
        self._finish()
        return self

    @classmethod
    def from_fields(cls, fields: Sequence[FieldBM25], weights: Sequence[float]) -> LinkIndex:
        """A fitted index from three fitted :class:`FieldBM25` (anchor, url, context)."""
        if len(fields) != len(FIELDS):
            raise ValueError(f"LinkIndex: needs {len(FIELDS)} fields, got {len(fields)}")
        if len({f.n_docs_ for f in fields}) != 1:
            raise ValueError("LinkIndex: the fields index different numbers of vertices")
        index = cls(k1=fields[0].k1, b=fields[0].b, weights=tuple(weights))
        index._check_weights()
        index.fields_ = list(fields)
        index._finish()
        return index

    def best_vertices(self, anchors: Sequence[str], urls: Sequence[str],
                      contexts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """For each query link: (index of its best vertex v*, s_v*); -1 and 0 if nothing matches.

        Ties go to the lowest vertex index."""
        scores = self.scores(anchors, urls, contexts)
        return _row_argmax(scores)

    def scores(self, anchors: Sequence[str], urls: Sequence[str],
               contexts: Sequence[str]) -> sp.csr_matrix:
        """Weighted score s_v of every (query, vertex) pair sharing a term: Q x N, sparse."""
        tokens = field_tokens(anchors, urls, contexts)
        fields = zip(self.fields_, tokens, self.weights, strict=True)
        queries = [index.query_matrix(docs, weight=float(weight)) for index, docs, weight in fields]
        return (sp.hstack(queries, format="csr") @ self.postings_).tocsr()

    def _finish(self) -> None:
        self.n_vertices_ = self.fields_[0].n_docs_
        # The fields' postings (term x vertex), stacked in the column order of hstacked queries.
        self.postings_ = sp.vstack([index.doc_weights_.T for index in self.fields_], format="csr")

    def _check_weights(self) -> None:
        weights = np.asarray(self.weights, dtype=np.float64)
        if weights.shape != (len(FIELDS),) or not np.all(np.isfinite(weights)) or np.any(weights < 0):
            raise ValueError(f"LinkIndex: weights must be {len(FIELDS)} non-negative numbers, "
                             f"got {self.weights!r}")


def _row_argmax(scores: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray]:
    """Row-wise (argmax column, max) over the stored positive entries; (-1, 0) for empty rows.

    Ties go to the lowest column. A loop over the (few) query rows, not over vertices."""
    best = np.full(scores.shape[0], -1, dtype=np.int64)
    best_score = np.zeros(scores.shape[0], dtype=np.float64)
    indptr, data, columns = scores.indptr, scores.data, scores.indices
    for row in np.flatnonzero(np.diff(indptr)):
        values = data[indptr[row] : indptr[row + 1]]
        top = values.max()
        if top > 0:
            best[row] = columns[indptr[row] : indptr[row + 1]][values == top].min()
            best_score[row] = top
    return best, best_score
