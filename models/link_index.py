"""Map new links onto the vertices of G_w: the nearest vertex by weighted BM25 (docs/algorithms.md §1.8).

Each vertex and each query link is a triple (anchor text, URL, context), tokenised as
:mod:`models.link_tokens` says. Per field the normalised BM25 score lies in [0, 1); the link's
score against vertex v is ``s_v = w . (s_anchor, s_url, s_context)``, the best vertex
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
2. Re-ranking. The ``rescore`` best candidates of each link (none under half the best one's
   capped score) are scored exactly - each candidate's own postings against the whole query -
   and the best of them is v*.

Both steps run link by link in compiled code (:mod:`models.link_search`, numba), or as
whole-array numpy steps with the same floats where numba is missing.

The s_v* reported is always the exact score of the vertex chosen; the approximation is that v*
is not argmax_v s_v when the best vertex is not among the candidates. On
benchmarks/bench_jlse.py (100,000 vertices, links unrelated to them, so that the best vertex wins
by a hair: the worst case) the default picks the exact v* for 98.5% of links and loses 0.04% of
the score on average, in a fifth of the exact search's time.

Repeated strings cost little: anchors and URLs are tokenised once (caches of the strings seen
lately, :mod:`models.link_tokens`), and the default search remembers its answers for the last
links it saw.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

from jlse.models import link_search
from jlse.models.bm25 import FieldBM25, StackedFields
from jlse.models.link_tokens import (  # noqa: F401  (url_tokens and the caches are re-exported)
    COMMON_URL_TOKENS,
    TEXT_CHARS,
    _TokenCache,
    _url_parts,
    _url_parts_by_urlsplit,
    check_lengths,
    field_tokens,
    text_tokens,
    url_tokens,
)
from jlse.models.sparse_rows import row_argmax, stack, term_major, top_postings

if TYPE_CHECKING:
    from typing import Self

    from jlse.models.term_table import TermTable

logger = logging.getLogger(__name__)

FIELDS = ("anchor", "url", "context")
DEFAULT_MAX_POSTINGS = (1024, 1024, 4)  # per field, as FIELDS; see the module docstring
DEFAULT_RESCORE = 4
CANDIDATE_RATIO = 0.5  # a candidate under half the best candidate's capped score is not re-ranked
REMEMBERED_LINKS = 16_384  # answers kept per index, then forgotten at once (under ~16 MB of keys)
SEARCH_BATCH = 256  # links searched together


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
        # A name for the fitted index that Q-table versions sharing it carry (the incremental
        # learner's: it keeps one index for several rounds); None: each table has its own.
        self.uid: str | None = None
        self._given_postings: sp.csr_matrix | None = None
        self._term_tables: list[TermTable] | None = None

    def fit(self, anchors: Sequence[str], urls: Sequence[str], contexts: Sequence[str]) -> Self:
        """Index one (anchor, url, context) triple per vertex; each distinct string is
        tokenised once."""
        self._check_params()
        check_lengths(anchors, urls, contexts)
        fields = zip((anchors, urls, contexts), (text_tokens, url_tokens, text_tokens), strict=True)
        self.fields_ = [FieldBM25(k1=self.k1, b=self.b).fit_texts(texts, tokens)
                        for texts, tokens in fields]
        self._finish()
        return self

    @classmethod
    def from_fields(cls, fields: Sequence[FieldBM25], weights: Sequence[float],
                    max_postings: int | Sequence[int | None] | None = DEFAULT_MAX_POSTINGS,
                    rescore: int = DEFAULT_RESCORE, search: bool = True,
                    postings: sp.csr_matrix | None = None,
                    term_tables: Sequence[TermTable] | None = None) -> LinkIndex:
        """A fitted index from three fitted :class:`FieldBM25` (anchor, url, context).

        ``search=False`` leaves the search structures (the fields' term-major postings and the
        stacked vocabulary) to :meth:`prepare`, or to the first search: an index that is only
        published (the learner's) never holds them. ``postings``: :meth:`capped_postings`,
        built before, and ``term_tables``: the fields' vocabularies as arrays, one
        :class:`TermTable` a field (a worker machine's cache maps both:
        ``models/qtable_files.py``), looked up instead of a dictionary of the words."""
        if len(fields) != len(FIELDS):
            raise ValueError(f"LinkIndex: needs {len(FIELDS)} fields, got {len(fields)}")
        if len({f.n_docs_ for f in fields}) != 1:
            raise ValueError("LinkIndex: the fields index different numbers of vertices")
        index = cls(k1=fields[0].k1, b=fields[0].b, weights=tuple(weights),
                    max_postings=max_postings, rescore=rescore)
        index._check_params()
        index.fields_ = list(fields)
        index._given_postings = postings
        index._term_tables = None if term_tables is None else list(term_tables)
        index._finish(search)
        return index

    @property
    def caps(self) -> tuple[int | None, ...]:
        """The postings cap of each field (None: all postings)."""
        caps = self.max_postings
        if caps is None or isinstance(caps, int | np.integer):
            return (caps,) * len(FIELDS)
        try:
            return tuple(caps)
        except TypeError:
            raise ValueError(f"LinkIndex: max_postings {caps!r} is not a number or a sequence") \
                from None

    def best_vertices(self, anchors: Sequence[str], urls: Sequence[str], contexts: Sequence[str],
                      *, exact: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """For each query link: (index of its best vertex v*, s_v*); -1 and 0 if nothing matches.

        Ties go to the lowest vertex index. ``exact=True`` searches all postings whatever the
        caps (slow on a big G_w: for tests and measurements). The default search remembers the
        answers for the last links it saw (pages of a site repeat their navigation links)."""
        check_lengths(anchors, urls, contexts)
        self.prepare()
        if exact or self.caps == (None,) * len(FIELDS):
            scores = self._queries(anchors, urls, contexts) @ self._all_postings()
            return row_argmax(scores.indptr, scores.data, scores.indices)
        return self._search_remembering(anchors, urls, contexts)

    def _search_remembering(self, anchors: Sequence[str], urls: Sequence[str],
                            contexts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`_search` of the links not answered before; remembers the new answers."""
        links = list(zip(anchors, urls, contexts, strict=True))
        try:
            answers = list(map(self._answers.get, links))
            remember = True
        except TypeError:  # a field is unhashable (a list): searched, not remembered
            answers, remember = [None] * len(links), False
        new = [i for i, answer in enumerate(answers) if answer is None]
        if len(new) == len(links) <= SEARCH_BATCH:  # the usual page: all new, one search
            best, score = self._search(anchors, urls, contexts)
            if remember:
                self._remember(links, best, score)
            return best, score
        for start in range(0, len(new), SEARCH_BATCH):  # bounds the memory of one search
            batch = new[start : start + SEARCH_BATCH]
            best, score = self._search([anchors[i] for i in batch], [urls[i] for i in batch],
                                       [contexts[i] for i in batch])
            for i, answer in zip(batch, zip(best.tolist(), score.tolist(), strict=True),
                                 strict=True):
                answers[i] = answer
            if remember:
                self._remember([links[i] for i in batch], best, score)
        return (np.fromiter((best for best, _ in answers), dtype=np.int64, count=len(links)),
                np.fromiter((score for _, score in answers), dtype=np.float64, count=len(links)))

    def _remember(self, links: list[tuple], best: np.ndarray, score: np.ndarray) -> None:
        if len(self._answers) + len(links) > REMEMBERED_LINKS:
            self._answers.clear()
        self._answers.update(zip(links, zip(best.tolist(), score.tolist(), strict=True),
                                 strict=True))

    def _search(self, anchors: Sequence[str], urls: Sequence[str],
                contexts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """The approximate search of the module docstring: capped candidates, exact re-ranking."""
        return link_search.search(self._queries(anchors, urls, contexts), self.postings_,
                                  [field.doc_weights_ for field in self.fields_], self.offsets_,
                                  self.rescore, CANDIDATE_RATIO)

    def scores(self, anchors: Sequence[str], urls: Sequence[str],
               contexts: Sequence[str]) -> sp.csr_matrix:
        """Exact weighted score s_v of every (query, vertex) pair sharing a term: Q x N, sparse."""
        self.prepare()
        return (self._queries(anchors, urls, contexts) @ self._all_postings()).tocsr()

    def _queries(self, anchors: Sequence[str], urls: Sequence[str],
                 contexts: Sequence[str]) -> sp.csr_matrix:
        """Links x (all fields' terms), each field's query values scaled by its weight."""
        stacked = self._stacked.query_entries(field_tokens(anchors, urls, contexts), self.weights)
        indptr = np.zeros(len(anchors) + 1, dtype=np.int32)
        np.cumsum(np.bincount(stacked.rows, minlength=len(anchors)), out=indptr[1:])
        return sp.csr_matrix((stacked.values, stacked.columns.astype(np.int32), indptr),
                             shape=(len(anchors), int(self.offsets_[-1])))

    def _all_postings(self) -> sp.csr_matrix:
        """All fields' postings (term x vertex) stacked, built on first use."""
        if self._postings_all is None:
            if not any(cap is not None for cap in self.caps):
                self._postings_all = self.postings_
            else:
                self._postings_all = stack([term_major(f.doc_weights_) for f in self.fields_])
        return self._postings_all

    def _finish(self, search: bool = True) -> None:
        self.n_vertices_ = self.fields_[0].n_docs_
        self._answers: dict[tuple[str, str, str], tuple[int, float]] = {}
        self._postings_all = None
        self._prepared = False
        self._prepare_lock = threading.Lock()
        if search:
            self.prepare()

    def prepare(self) -> None:
        """Build the search structures now (once; thread-safe): the stacked vocabulary and
        the capped term-major postings."""
        if self._prepared:
            return
        with self._prepare_lock:
            if self._prepared:
                return
            self._stacked = StackedFields(self.fields_, tables=self._term_tables)
            # First column of each field's terms in the stacked term space (as the query matrix).
            self.offsets_ = self._stacked.offsets
            self.postings_ = (self.capped_postings() if self._given_postings is None
                              else self._given_postings)
            self._given_postings = None
            self._prepared = True

    def capped_postings(self) -> sp.csr_matrix:
        """The default search's postings: each field's term-major postings cut to its cap,
        stacked (term rows of all fields x vertices)."""
        return stack([top_postings(term_major(f.doc_weights_), cap)
                      for f, cap in zip(self.fields_, self.caps, strict=True)])

    @property
    def prepared(self) -> bool:
        """Whether the search structures are built (:meth:`prepare`)."""
        return self._prepared

    def _check_params(self) -> None:
        weights = np.asarray(self.weights, dtype=np.float64)
        if weights.shape != (len(FIELDS),) or not np.all(np.isfinite(weights)) or np.any(weights < 0):
            raise ValueError(f"LinkIndex: weights must be {len(FIELDS)} non-negative numbers, "
                             f"got {self.weights!r}")
        caps = self.caps
        if len(caps) != len(FIELDS) or not all(
                cap is None or (isinstance(cap, int | np.integer) and not isinstance(cap, bool)
                                and cap >= 1) for cap in caps):
            raise ValueError(f"LinkIndex: max_postings must be None, a positive integer or "
                             f"{len(FIELDS)} of them (None for no cap), got {self.max_postings!r}")
        if not (isinstance(self.rescore, int | np.integer) and self.rescore >= 1):
            raise ValueError(f"LinkIndex: rescore must be a positive integer, got {self.rescore!r}")


def prepare_search() -> None:
    """Load the compiled link search now (numba's import and its machine code from the disk
    cache, about 0.4 s; compiled the first time, a few seconds): before forking page processes,
    each of which would otherwise load it on its first search. Without numba, nothing to do."""
    if link_search._kernel() is not None:  # a tiny index has the dtypes of real ones
        LinkIndex().fit(["a"], ["http://a.test/"], ["b"]).best_vertices(["a"], ["http://a.test/"],
                                                                          ["b"])
