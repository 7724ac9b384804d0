"""Map new links onto the vertices of G_w: the nearest vertex by weighted BM25 (SPEC section 1).

Each vertex and each query link is a triple (anchor text, URL, context). Anchor and context are
tokenised by :func:`models.tokenizer.tokenize` (their first :data:`TEXT_CHARS` characters), the
URL by :func:`url_tokens`. Per field the normalised BM25 score lies in [0, 1); the link's score
against vertex v is ``s_v = w . (s_anchor, s_url, s_context)``, the best vertex
``v* = argmax_v s_v`` (ties to the lowest vertex index).

**Exact search** (``best_vertices(..., exact=True)``, or ``max_postings=None``): one sparse
product of the links' query matrix (the three fields side by side, each scaled by its weight)
with the fields' postings stacked on top of each other. It costs one step per (query term,
vertex) pair sharing that term: with Zipf-distributed words, millions of pairs per page.

**Default search: approximate**, in two steps (candidates from impact-ordered postings with a
per-term cap, then exact re-ranking; standard for nearest-neighbour search over inverted indexes):

1. Candidates. Each term keeps only its ``max_postings`` highest-weighted vertices (a cap per
   field: an anchor or URL term carries much of a score and keeps many, a context term, one of
   some thirty words sharing the context's weight, keeps few). The product with these capped
   postings bounds the work per query term and gives each vertex it reaches a lower bound of s_v.
2. Re-ranking. The ``rescore`` best candidates of each link are scored exactly (each candidate's
   own postings against the whole query) and the best of them is v*.

The s_v* reported is always the exact score of the vertex chosen; the approximation is that v*
is not argmax_v s_v when the best vertex is not among the candidates. benchmarks/bench_jlse.py
measures how often that happens and the score lost (see the README's figures).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, NamedTuple
from urllib.parse import unquote, unquote_plus, urlsplit

import numpy as np
import scipy.sparse as sp

from models.bm25 import FieldBM25
from models.tokenizer import tokenize

if TYPE_CHECKING:
    from typing import Self

logger = logging.getLogger(__name__)

FIELDS = ("anchor", "url", "context")
TEXT_CHARS = 400  # anchors and contexts are cut to this (the parser's cap on contexts)
DEFAULT_MAX_POSTINGS = (1024, 1024, 8)  # per field, as FIELDS; see the module docstring
DEFAULT_RESCORE = 16

# Same rule as scheduler.urls.url_tokens (models may not import scheduler).
_URL_WORD = re.compile(r"[^\W_]+")
COMMON_URL_TOKENS = frozenset(
    ("http", "https", "www", "com", "net", "org", "html", "htm", "shtml", "php", "asp", "aspx",
     "jsp", "cgi", "index", "default")
)


def url_tokens(url: str) -> list[str]:
    """Lower-case word tokens of the URL's host (without ``www`` and the TLD), path and query.
    One-character numbers and common tokens (``html``, ``php``, ``com``, ...) are dropped."""
    parts = _url_parts(url)
    if parts is None:
        return []
    host, path, query = parts
    labels = host.split(".")
    if labels and labels[0] == "www":
        labels = labels[1:]
    if len(labels) > 1:
        labels = labels[:-1]
    text = " ".join((*labels, unquote(path), unquote_plus(query))).lower()
    return [
        token
        for token in _URL_WORD.findall(text)
        if token not in COMMON_URL_TOKENS and not (token.isdigit() and len(token) < 2)
    ]


# ``scheme://host[:port]/path?query#fragment`` with a plain ASCII host and no blanks or control
# characters: split by one regex, exactly as ``urlsplit(url)`` and its ``.hostname`` would
# (checked in the tests); anything else goes through ``urlsplit``.
_PLAIN_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://([!-~]*?)([/?#][^\x00-\x20]*)?")
_UNUSUAL_HOST = re.compile(r"[/?#\[\]@%]")


def _url_parts(url: str) -> tuple[str, str, str] | None:
    """(host, path, query) of ``url``, host lower-cased; None if it is not a URL."""
    if not isinstance(url, str):
        return None
    plain = _PLAIN_URL.fullmatch(url)
    if plain is not None and not _UNUSUAL_HOST.search(plain[1]):
        rest = (plain[2] or "").partition("#")[0]
        path, _, query = rest.partition("?")
        return plain[1].partition(":")[0].lower(), path, query
    return _url_parts_by_urlsplit(url)


def _url_parts_by_urlsplit(url: str) -> tuple[str, str, str] | None:
    try:
        parts = urlsplit(url)
        return parts.hostname or "", parts.path, parts.query
    except ValueError:
        return None


def text_tokens(text: str) -> list[str]:
    """Tokens of an anchor or context: :func:`tokenize` of its first :data:`TEXT_CHARS`."""
    return tokenize(text[:TEXT_CHARS] if isinstance(text, str) else text)


# Links repeat from page to page (navigation, templates): each string is tokenised once.
_cached_text_tokens = lru_cache(maxsize=65_536)(lambda text: tuple(text_tokens(text)))
_cached_url_tokens = lru_cache(maxsize=65_536)(lambda url: tuple(url_tokens(url)))


def field_tokens(anchors: Sequence[str], urls: Sequence[str],
                 contexts: Sequence[str]) -> list[list[Sequence[str]]]:
    """Token sequences of each field of query links, in :data:`FIELDS` order (cached per
    string); ValueError if the lengths differ."""
    _check_lengths(anchors, urls, contexts)
    return [_tokens(anchors, _cached_text_tokens, text_tokens),
            _tokens(urls, _cached_url_tokens, url_tokens),
            _tokens(contexts, _cached_text_tokens, text_tokens)]


def _tokens(texts: Sequence[str], cached, uncached) -> list[Sequence[str]]:
    return [cached(text) if isinstance(text, str) else uncached(text) for text in texts]


def _check_lengths(anchors: Sequence[str], urls: Sequence[str], contexts: Sequence[str]) -> None:
    if not len(anchors) == len(urls) == len(contexts):
        raise ValueError(f"link triples: {len(anchors)} anchors, {len(urls)} URLs, "
                         f"{len(contexts)} contexts")


class _Queries(NamedTuple):
    """Query links as (row, column, value) entries per field and as one stacked matrix."""

    entries: list[tuple[np.ndarray, np.ndarray, np.ndarray]]
    matrix: sp.csr_matrix  # links x (all fields' terms), each field scaled by its weight


class LinkIndex:
    """BM25 indexes of the three fields of the vertices of G_w; finds each link's best vertex.

    ``max_postings`` caps each term's postings in the default (approximate) search: one number
    for every field, one per field (:data:`FIELDS` order; None = no cap), or None for the exact
    search. ``rescore`` candidates per link are re-ranked by their exact scores."""

    def __init__(self, k1: float = 2.0, b: float = 0.75,
                 weights: Sequence[float] = (0.5, 0.2, 0.3),
                 max_postings: int | Sequence[int | None] | None = DEFAULT_MAX_POSTINGS,
                 rescore: int = DEFAULT_RESCORE) -> None:
        self.k1 = k1
        self.b = b
        self.weights = weights
        self.max_postings = max_postings
        self.rescore = rescore

    def fit(self, anchors: Sequence[str], urls: Sequence[str], contexts: Sequence[str]) -> Self:
        """Index one (anchor, url, context) triple per vertex; each distinct string is
        tokenised once."""
        self._check_params()
        _check_lengths(anchors, urls, contexts)
        tokenizers = (text_tokens, url_tokens, text_tokens)
        self.fields_ = [FieldBM25(k1=self.k1, b=self.b).fit_texts(texts, tokens)
                        for texts, tokens in zip((anchors, urls, contexts), tokenizers, strict=True)]
        self._finish()
        return self

    @classmethod
    def from_fields(cls, fields: Sequence[FieldBM25], weights: Sequence[float],
                    max_postings: int | Sequence[int | None] | None = DEFAULT_MAX_POSTINGS,
                    rescore: int = DEFAULT_RESCORE) -> LinkIndex:
        """A fitted index from three fitted :class:`FieldBM25` (anchor, url, context)."""
        if len(fields) != len(FIELDS):
            raise ValueError(f"LinkIndex: needs {len(FIELDS)} fields, got {len(fields)}")
        if len({f.n_docs_ for f in fields}) != 1:
            raise ValueError("LinkIndex: the fields index different numbers of vertices")
        index = cls(k1=fields[0].k1, b=fields[0].b, weights=tuple(weights),
                    max_postings=max_postings, rescore=rescore)
        index._check_params()
        index.fields_ = list(fields)
        index._finish()
        return index

    @property
    def caps(self) -> tuple[int | None, ...]:
        """The postings cap of each field (None: all postings)."""
        if self.max_postings is None or isinstance(self.max_postings, int | np.integer):
            return (self.max_postings,) * len(FIELDS)
        return tuple(self.max_postings)

    def best_vertices(self, anchors: Sequence[str], urls: Sequence[str], contexts: Sequence[str],
                      *, exact: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """For each query link: (index of its best vertex v*, s_v*); -1 and 0 if nothing matches.

        Ties go to the lowest vertex index. ``exact=True`` searches all postings whatever the
        caps (slow on a big G_w: for tests and measurements)."""
        queries = self._queries(anchors, urls, contexts)
        n_links = len(anchors)
        if exact or not any(cap is not None for cap in self.caps):
            scores = queries.matrix @ self._all_postings()
            return _row_argmax(scores.indptr, scores.data, scores.indices)
        candidates = queries.matrix @ self.postings_
        rows, vertices = _top_per_row(candidates, self.rescore)
        scores = self._pair_scores(queries, rows, vertices, n_links)
        indptr = np.zeros(n_links + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=n_links), out=indptr[1:])
        return _row_argmax(indptr, scores, vertices)

    def scores(self, anchors: Sequence[str], urls: Sequence[str],
               contexts: Sequence[str]) -> sp.csr_matrix:
        """Exact weighted score s_v of every (query, vertex) pair sharing a term: Q x N, sparse."""
        return (self._queries(anchors, urls, contexts).matrix @ self._all_postings()).tocsr()

    def _queries(self, anchors: Sequence[str], urls: Sequence[str],
                 contexts: Sequence[str]) -> _Queries:
        tokens = field_tokens(anchors, urls, contexts)
        entries = [field.query_entries(docs, weight=float(weight))
                   for field, docs, weight in zip(self.fields_, tokens, self.weights, strict=True)]
        rows = np.concatenate([rows for rows, _, _ in entries])
        columns = np.concatenate([columns + offset for (_, columns, _), offset
                                  in zip(entries, self.offsets_, strict=False)])
        values = np.concatenate([values for _, _, values in entries])
        order = np.argsort(rows, kind="stable")  # by link, each link's terms in field order
        indptr = np.zeros(len(anchors) + 1, dtype=np.int32)
        np.cumsum(np.bincount(rows, minlength=len(anchors)), out=indptr[1:])
        matrix = sp.csr_matrix((values[order], columns[order].astype(np.int32), indptr),
                               shape=(len(anchors), int(self.offsets_[-1])))
        return _Queries(entries, matrix)

    def _pair_scores(self, queries: _Queries, rows: np.ndarray, vertices: np.ndarray,
                     n_links: int) -> np.ndarray:
        """Exact s_v of each (link ``rows[i]``, vertex ``vertices[i]``) pair."""
        total = np.zeros(len(rows))
        for field, entries in zip(self.fields_, queries.entries, strict=True):
            total += _pair_products(field.doc_weights_, entries, rows, vertices, n_links)
        return total

    def _all_postings(self) -> sp.csr_matrix:
        """All fields' postings (term x vertex) stacked, built on first use."""
        if getattr(self, "_postings_all", None) is None:
            if not any(cap is not None for cap in self.caps):
                self._postings_all = self.postings_
            else:
                self._postings_all = _stack([_term_major(f.doc_weights_) for f in self.fields_])
        return self._postings_all

    def _finish(self) -> None:
        self.n_vertices_ = self.fields_[0].n_docs_
        # First column of each field's terms in the stacked term space (as the query matrix).
        self.offsets_ = np.cumsum([0] + [len(f.vocabulary_) for f in self.fields_])
        self.postings_ = _stack([_top_postings(_term_major(f.doc_weights_), cap)
                                 for f, cap in zip(self.fields_, self.caps, strict=True)])
        self._postings_all = None

    def _check_params(self) -> None:
        weights = np.asarray(self.weights, dtype=np.float64)
        if weights.shape != (len(FIELDS),) or not np.all(np.isfinite(weights)) or np.any(weights < 0):
            raise ValueError(f"LinkIndex: weights must be {len(FIELDS)} non-negative numbers, "
                             f"got {self.weights!r}")
        caps = self.caps
        if len(caps) != len(FIELDS) or not all(
                cap is None or (isinstance(cap, int | np.integer) and cap >= 1) for cap in caps):
            raise ValueError(f"LinkIndex: max_postings must be None, a positive integer or "
                             f"{len(FIELDS)} of them (None for no cap), got {self.max_postings!r}")
        if not (isinstance(self.rescore, int | np.integer) and self.rescore >= 1):
            raise ValueError(f"LinkIndex: rescore must be a positive integer, got {self.rescore!r}")


def _term_major(doc_weights: sp.csr_matrix) -> sp.csr_matrix:
    """Postings of one field: term x vertex, vertices ascending in each term's row."""
    postings = doc_weights.T.tocsr()
    postings.sort_indices()
    return postings


def _stack(postings: Sequence[sp.csr_matrix]) -> sp.csr_matrix:
    return sp.vstack(postings, format="csr", dtype=postings[0].dtype)


def _top_postings(postings: sp.csr_matrix, cap: int | None) -> sp.csr_matrix:
    """Each row (term) cut to its ``cap`` largest weights; among equal weights at the cut, the
    lowest vertices stay. Rows stay in vertex order."""
    counts = np.diff(postings.indptr)
    if cap is None or postings.nnz == 0 or counts.max() <= cap:
        return postings
    rows = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    # Non-negative float32 weights order as their bit patterns do: one int64 key per posting
    # orders by (term, weight descending).
    key = (rows << 31) | (0x7F800000 - postings.data.view(np.int32)).astype(np.int64)
    last = postings.indptr[:-1] + np.minimum(counts, cap) - 1  # the cap-th posting of a row
    limit = np.zeros(len(counts), dtype=np.int64)
    limit[counts > 0] = np.sort(key)[last[counts > 0]]
    above = key < limit[rows]
    tied = key == limit[rows]
    room = cap - np.bincount(rows[above], minlength=len(counts))
    tied_seen = np.cumsum(tied)
    tied_before_row = np.concatenate(([0], tied_seen))[postings.indptr[:-1]]
    keep = above | (tied & (tied_seen - tied_before_row[rows] <= room[rows]))
    indptr = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows[keep], minlength=len(counts)), out=indptr[1:])
    return sp.csr_matrix((postings.data[keep], postings.indices[keep], indptr),
                         shape=postings.shape)


def _top_per_row(scores: sp.csr_matrix, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(row, column) of the entries among the k largest of their row, ties at the k-th value
    included, row by row. One sort of all entries, no loop over rows."""
    counts = np.diff(scores.indptr)
    rows = np.repeat(np.arange(len(counts)), counts)
    key = 2.0 * rows + (1.0 - scores.data)  # scores lie in [0, 1): rows never overlap
    nonempty = counts > 0
    limit = np.zeros(len(counts))
    limit[nonempty] = np.sort(key)[(scores.indptr[:-1] + np.minimum(counts, k) - 1)[nonempty]]
    chosen = key <= limit[rows]
    return rows[chosen], scores.indices[chosen]


def _pair_products(doc_weights: sp.csr_matrix, entries: tuple[np.ndarray, ...], rows: np.ndarray,
                   vertices: np.ndarray, n_links: int) -> np.ndarray:
    """One field's part of the score of each (link, vertex) pair: the vertex's postings (its
    row of ``doc_weights``) against the link's query ``entries`` (row, column, value)."""
    query_rows, query_columns, query_values = entries
    terms, local = np.unique(query_columns, return_inverse=True)
    slot = np.full(doc_weights.shape[1], -1, dtype=np.int64)  # term -> its place in ``terms``
    slot[terms] = np.arange(len(terms))
    table = np.zeros(n_links * len(terms))  # (link, place) -> query value
    table[query_rows * len(terms) + local] = query_values
    starts = doc_weights.indptr[vertices]
    lengths = doc_weights.indptr[vertices + 1] - starts
    pair = np.repeat(np.arange(len(vertices)), lengths)
    positions = np.arange(lengths.sum()) + np.repeat(starts - (np.cumsum(lengths) - lengths),
                                                      lengths)
    places = slot[doc_weights.indices[positions]]
    hit = places >= 0
    pair, places, positions = pair[hit], places[hit], positions[hit]
    products = table[rows[pair] * len(terms) + places] * doc_weights.data[positions]
    return np.bincount(pair, weights=products, minlength=len(vertices))


def _row_argmax(indptr: np.ndarray, data: np.ndarray,
                columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row-wise (argmax column, max) of a row-grouped sparse matrix; (-1, 0) for rows without a
    positive entry. Ties go to the lowest column."""
    n_rows = len(indptr) - 1
    best = np.full(n_rows, -1, dtype=np.int64)
    best_score = np.zeros(n_rows, dtype=np.float64)
    counts = np.diff(indptr)
    nonempty = np.flatnonzero(counts)
    if nonempty.size == 0:
        return best, best_score
    starts = indptr[:-1][nonempty]
    top = np.maximum.reduceat(data, starts)
    is_top = data == np.repeat(top, counts[nonempty])
    lowest = np.minimum.reduceat(np.where(is_top, columns, np.iinfo(columns.dtype).max), starts)
    positive = top > 0
    best[nonempty[positive]] = lowest[positive]
    best_score[nonempty[positive]] = top[positive]
    return best, best_score
