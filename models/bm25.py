"""BM25 over one field of the link triples (docs/algorithms.md §1.8, "Mapping a new link onto G_w").

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
from array import array
from collections.abc import Callable, Iterable, Sequence
from itertools import chain, repeat
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import scipy.sparse as sp

from jlse.models import term_table

if TYPE_CHECKING:
    from typing import Self

    from jlse.models.term_table import TermTable

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

    @property
    def vocabulary_(self) -> dict[str, int]:
        """term -> column; made on first use where only the terms were given (:attr:`terms_`,
        :attr:`packed_terms_`: the incremental learner's fields, whose tables are mostly only
        published)."""
        vocabulary = self.__dict__.get("_vocabulary")
        if vocabulary is None:
            if self.__dict__.get("_terms") is None and self.__dict__.get("_packed") is None:
                raise AttributeError("vocabulary_")
            terms = self.terms_
            vocabulary = self._vocabulary = dict(zip(terms, range(len(terms)), strict=True))
        return vocabulary

    @vocabulary_.setter
    def vocabulary_(self, vocabulary: dict[str, int]) -> None:
        self._vocabulary, self._terms, self._packed = vocabulary, None, None

    @property
    def terms_(self) -> list[str]:
        """The terms in column order."""
        terms = self.__dict__.get("_terms")
        if terms is not None:
            return terms
        packed = self.__dict__.get("_packed")
        if packed is not None and self.__dict__.get("_vocabulary") is None:
            return packed.decode()
        vocabulary = self.vocabulary_
        return sorted(vocabulary, key=vocabulary.__getitem__)

    @terms_.setter
    def terms_(self, terms: list[str]) -> None:
        """Set the terms (column order, distinct); the dictionary is made when first needed."""
        self._vocabulary, self._terms, self._packed = None, terms, None

    @property
    def packed_terms_(self) -> PackedTerms:
        """The terms in column order as one array of UTF-8 bytes (:class:`PackedTerms`)."""
        packed = self.__dict__.get("_packed")
        return packed if packed is not None else PackedTerms.pack(self.terms_)

    @packed_terms_.setter
    def packed_terms_(self, packed: PackedTerms) -> None:
        self._vocabulary, self._terms, self._packed = None, None, packed

    @property
    def n_terms_(self) -> int:
        for name in ("_terms", "_vocabulary"):
            value = self.__dict__.get(name)
            if value is not None:
                return len(value)
        return self.packed_terms_.n_terms

    def fit(self, docs: Sequence[Sequence[str]]) -> Self:
        """Learn the vocabulary, idf and per-posting weights of ``docs`` (token lists)."""
        self._check_params()
        vocabulary: dict[str, int] = {}
        columns, lengths = _collect_term_ids(docs, vocabulary)
        return self._fit_counts(vocabulary, columns, lengths, np.arange(len(docs)))

    def fit_texts(self, texts: Sequence[str], tokenize: Callable[[str], Sequence[str]]) -> Self:
        """:meth:`fit` on ``tokenize(text)`` of each text, tokenising each distinct text once.

        The vertices of G_w share many anchors and contexts, and holding the token lists of a
        million contexts costs gigabytes; here only their term ids (4 bytes a token) are kept.
        A text that is not a string is an empty document."""
        self._check_params()
        n_other = sum(not isinstance(text, str) for text in texts)
        if n_other:
            logger.warning("BM25: %d of %d texts are not strings; indexed as empty", n_other,
                           len(texts))
        distinct: dict[str, int] = {}
        doc_index = np.fromiter(
            (distinct.setdefault(text if isinstance(text, str) else "", len(distinct))
             for text in texts),
            dtype=np.int64, count=len(texts))
        vocabulary: dict[str, int] = {}
        columns, lengths = _collect_term_ids(map(tokenize, distinct), vocabulary)
        return self._fit_counts(vocabulary, columns, lengths, doc_index)

    @classmethod
    def from_learned(cls, vocabulary: dict[str, int] | PackedTerms, idf_: np.ndarray,
                     doc_weights: sp.csr_matrix, avgdl: float, k1: float = 2.0,
                     b: float = 0.75) -> FieldBM25:
        """A fitted index from its learned state (as saved by a Q-table); ValueError if the
        parts do not fit together. ``vocabulary`` may be the terms packed (a machine's mapped
        copy, looked up through :class:`models.term_table.TermTable`): no dictionary is made
        until one is asked for."""
        index = cls(k1=k1, b=b)
        index._check_params()
        doc_weights = sp.csr_matrix(doc_weights, dtype=WEIGHT_DTYPE)
        packed = isinstance(vocabulary, PackedTerms)
        n_terms = vocabulary.n_terms if packed else len(vocabulary)
        if doc_weights.shape[1] != n_terms or np.shape(idf_) != (n_terms,):
            raise ValueError(f"BM25 state: {n_terms} terms, idf of shape {np.shape(idf_)}, "
                             f"weights of shape {doc_weights.shape}")
        if packed:
            index.packed_terms_ = vocabulary
        elif sorted(vocabulary.values()) != list(range(n_terms)):
            raise ValueError("BM25 state: vocabulary columns are not 0..V-1")
        else:
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

        ``query_matrix(queries) @ doc_weights_.T`` is :meth:`score`."""
        rows, columns, values = self.query_entries(queries, weight)
        indptr = np.zeros(len(queries) + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=len(queries)), out=indptr[1:])
        return sp.csr_matrix((values, columns, indptr), shape=(len(queries), len(self.vocabulary_)))

    def query_entries(self, queries: Sequence[Sequence[str]],
                      weight: float = 1.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The entries (row, column, value) of :meth:`query_matrix`, sorted by row then column.

        One vocabulary look-up per token and array operations: no loop over the queries."""
        n_queries = len(queries)
        token_rows, ids, tokens = self._look_up(queries)
        known = ids >= 0
        n_terms = max(len(self.vocabulary_), 1)
        rows, columns = np.divmod(distinct(token_rows[known] * n_terms + ids[known]), n_terms)
        term_idf = self.idf_[columns]
        unknown = np.flatnonzero(~known).tolist()
        n_unknown = _count_distinct(token_rows[unknown], [tokens[i] for i in unknown], n_queries)
        unknown_idf = idf(self.n_docs_, np.zeros(1))[0]
        bounds = np.bincount(rows, weights=term_idf, minlength=n_queries)
        bounds = (bounds + unknown_idf * n_unknown) * (self.k1 + 1.0)
        values = (weight * term_idf / bounds[rows]).astype(WEIGHT_DTYPE)
        return rows, columns.astype(np.int32), values

    def _look_up(self, queries: Sequence[Sequence[str]]) -> tuple[np.ndarray, np.ndarray, list]:
        """Query number and term id (-1 if unknown) of every token of ``queries``, and the
        tokens themselves."""
        lengths = np.fromiter(map(len, queries), dtype=np.int64, count=len(queries))
        tokens = list(chain.from_iterable(queries))
        ids = np.fromiter(map(self.vocabulary_.get, tokens, repeat(-1)), dtype=np.int64,
                          count=len(tokens))
        return np.repeat(np.arange(len(queries)), lengths), ids, tokens

    def _fit_counts(self, vocabulary: dict[str, int], columns: np.ndarray, lengths: np.ndarray,
                    doc_index: np.ndarray) -> Self:
        """Fit from the term ids of distinct documents; document i is ``doc_index[i]``."""
        indptr = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=indptr[1:])
        ones = np.ones(len(columns), dtype=WEIGHT_DTYPE)
        term_freq = sp.csr_matrix((ones, columns, indptr), shape=(len(lengths), len(vocabulary)))
        term_freq.sum_duplicates()  # one entry per (document, term), holding f(t, d)
        copies = np.bincount(doc_index, minlength=len(lengths))
        self.vocabulary_ = _compact(vocabulary)
        self.n_docs_ = len(doc_index)
        self.avgdl_ = float(lengths @ copies) / self.n_docs_ if self.n_docs_ else 0.0
        postings_per_doc = np.diff(term_freq.indptr)
        doc_freq = np.bincount(term_freq.indices, weights=np.repeat(copies, postings_per_doc),
                               minlength=len(vocabulary))
        self.idf_ = idf(self.n_docs_, doc_freq)
        weights = self._weights(term_freq, lengths)
        all_distinct = len(lengths) == len(doc_index)  # then doc_index is 0..N-1
        self.doc_weights_ = weights if all_distinct else weights[doc_index]
        return self

    def _weights(self, term_freq: sp.csr_matrix, lengths: np.ndarray) -> sp.csr_matrix:
        """f(t,d)(k1+1) / (f(t,d) + k1(1 - b + b|d|/avgdl)) at every posting."""
        tf = term_freq.data
        if tf.size == 0:
            return sp.csr_matrix(term_freq.shape, dtype=WEIGHT_DTYPE)
        norm = self.k1 * (1.0 - self.b + self.b * lengths / self.avgdl_)  # one per document
        weights = tf + np.repeat(norm.astype(WEIGHT_DTYPE), np.diff(term_freq.indptr))
        np.divide(tf * WEIGHT_DTYPE(self.k1 + 1.0), weights, out=weights)
        return sp.csr_matrix((weights, term_freq.indices, term_freq.indptr), shape=term_freq.shape)

    def _check_params(self) -> None:
        if not self.k1 > 0:
            raise ValueError(f"BM25: k1 must be positive, got {self.k1}")
        if not 0.0 <= self.b <= 1.0:
            raise ValueError(f"BM25: b must lie in [0, 1], got {self.b}")


class PackedTerms(NamedTuple):
    """Terms in column order as UTF-8 bytes, each followed by a NUL (``chars``), and where each
    ends (``ends[i]``: just past term i's NUL). 1e7 URL words take ~120 MB so, ~650 MB as a
    list of Python strings."""

    chars: np.ndarray  # uint8
    ends: np.ndarray  # int64, one per term

    @property
    def n_terms(self) -> int:
        return len(self.ends)

    @property
    def plain(self) -> bool:
        """Whether no term holds a NUL itself (then the NULs alone delimit the terms)."""
        return int(np.count_nonzero(self.chars == 0)) == self.n_terms

    @classmethod
    def pack(cls, terms: Sequence[str]) -> PackedTerms:
        encoded = [term.encode("utf-8") for term in terms]
        ends = np.cumsum(np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)) + 1)
        chars = np.frombuffer(b"".join(word + b"\x00" for word in encoded), dtype=np.uint8)
        return cls(chars, ends)

    def decode(self) -> list[str]:
        """The terms as strings."""
        if self.plain:
            return split_terms(self.chars, self.n_terms)
        raw, starts = self.chars.tobytes(), np.concatenate(([0], self.ends[:-1]))
        return [raw[start:end - 1].decode("utf-8")
                for start, end in zip(starts.tolist(), self.ends.tolist(), strict=True)]


def split_terms(chars: np.ndarray, n_terms: int) -> list[str]:
    """The ``n_terms`` terms of ``chars`` (UTF-8, each followed by a NUL, none holding one);
    ValueError if it holds another number of them or is not UTF-8."""
    terms = chars.tobytes().decode("utf-8").split("\x00")
    if terms.pop() != "" or len(terms) != n_terms:
        raise ValueError(f"{len(terms)} NUL-terminated terms, not {n_terms}")
    return terms


class StackedQueries(NamedTuple):
    """Query entries of several fields side by side (see :func:`stacked_query_entries`)."""

    rows: np.ndarray  # query number, ascending
    columns: np.ndarray  # term column in the stacked term space (field offset added)
    values: np.ndarray  # weight(field) * idf / bound, as FieldBM25.query_entries gives it
    field: np.ndarray  # field number of each entry


class StackedFields:
    """Fields indexing the same documents, their terms side by side: field f's term t is the
    stacked column ``offsets[f] + t``. Finds the query entries of all fields at once.

    Query tokens are looked up in one dict of all fields' words, each word's stacked columns in
    an array (-1 where a field lacks it): a word found in several fields is one look-up in one
    dict, which keeps the memory a page's look-ups touch small (cache misses: most of their
    time). It costs about 100 bytes per distinct word. Given ``tables`` (one
    :class:`models.term_table.TermTable` per field: a worker machine's mapped copy), the tokens
    are looked up in those instead, and no dict is made."""

    def __init__(self, fields: Sequence[FieldBM25], offsets: np.ndarray | None = None,
                 tables: Sequence[TermTable] | None = None) -> None:
        self.fields = list(fields)
        self.offsets = (np.cumsum([0] + [field.n_terms_ for field in self.fields])
                        if offsets is None else np.asarray(offsets))
        self.unknown_idf = np.array([idf(field.n_docs_, np.zeros(1))[0] for field in self.fields])
        self.k1_plus_1 = np.array([field.k1 + 1.0 for field in self.fields])
        self.tables = None if tables is None else list(tables)
        if self.tables is not None:
            if len(self.tables) != len(self.fields) or len({t.key for t in self.tables}) > 1:
                raise ValueError("stacked fields: one term table a field, under one key")
            return
        words = dict.fromkeys(chain.from_iterable(field.vocabulary_ for field in self.fields))
        self.words = dict(zip(words, range(len(words)), strict=True))  # word -> row of columns
        n_fields = len(self.fields)
        index = np.int64 if int(self.offsets[n_fields]) >= np.iinfo(np.int32).max else np.int32
        # (word, field) -> stacked column or -1, flat; the last row, for unknown words, all -1
        self.columns = np.full((len(words) + 1) * n_fields, -1, dtype=index)
        for number, (field, offset) in enumerate(zip(self.fields, self.offsets, strict=False)):
            vocabulary = field.vocabulary_
            rows = np.fromiter(map(self.words.__getitem__, vocabulary), dtype=np.int64,
                               count=len(vocabulary))
            self.columns[rows * n_fields + number] = np.fromiter(
                vocabulary.values(), dtype=np.int64, count=len(vocabulary)) + offset

    def query_entries(self, queries: Sequence[Sequence[Sequence[str]]],
                      weights: Sequence[float]) -> StackedQueries:
        """:meth:`FieldBM25.query_entries` of every field (``queries[f]`` are field f's token
        lists) with ``weight=weights[f]``: the same values, entries sorted by query then stacked
        column, with one sort and one normalisation for all fields."""
        n_fields, n_queries = len(self.fields), len(queries[0])
        # All fields' tokens in one list, field by field; group = field * n_queries + query.
        documents = list(chain.from_iterable(queries[:n_fields]))
        lengths = np.fromiter(map(len, documents), dtype=np.int64, count=len(documents))
        tokens = list(chain.from_iterable(documents))
        per_field = lengths.reshape(n_fields, n_queries).sum(axis=1)
        ids = (self._columns(tokens, per_field) if self.tables is None
               else self._table_columns(tokens, per_field))
        group = np.repeat(np.arange(n_fields * n_queries), lengths)
        known = ids >= 0
        unknown = np.flatnonzero(~known)
        unknown_counts = _count_distinct(group[unknown], [tokens[i] for i in unknown.tolist()],
                                         n_fields * n_queries).reshape(n_fields, n_queries)
        n_columns = max(int(self.offsets[n_fields]), 1)
        keys = (group[known] % max(n_queries, 1)) * n_columns + ids[known]
        rows, columns = np.divmod(distinct(keys), n_columns)
        field_of = np.searchsorted(self.offsets[1:n_fields], columns, side="right")
        term_idf = self._idf(columns, field_of)
        group = field_of * n_queries + rows  # one bound per (field, query)
        sums = np.bincount(group, weights=term_idf, minlength=n_fields * n_queries)
        bounds = (sums.reshape(n_fields, n_queries)
                  + self.unknown_idf[:, None] * unknown_counts) * self.k1_plus_1[:, None]
        field_weights = np.array([float(weight) for weight in weights])
        values = (field_weights[field_of] * term_idf / bounds.ravel()[group]).astype(WEIGHT_DTYPE)
        return StackedQueries(rows, columns, values, field_of)

    def _columns(self, tokens: list[str], per_field: np.ndarray) -> np.ndarray:
        """The stacked column of each token (-1: unknown), ``per_field[f]`` tokens of field f
        after those of the fields before it, by the dict of words."""
        n_fields = len(self.fields)
        word_rows = np.fromiter(map(self.words.get, tokens, repeat(len(self.words))),
                                dtype=np.int64, count=len(tokens))
        return self.columns[word_rows * n_fields + np.repeat(np.arange(n_fields), per_field)]

    def _table_columns(self, tokens: list[str], per_field: np.ndarray) -> np.ndarray:
        """:meth:`_columns` by the fields' term tables: all tokens hashed at once."""
        strings = term_table.encode(tokens)
        hashes = term_table.hash_strings(strings, self.tables[0].key)
        columns = np.full(len(tokens), -1, dtype=np.int64)
        bounds = np.concatenate(([0], np.cumsum(per_field))).tolist()
        for number, table in enumerate(self.tables):
            begin, end = bounds[number], bounds[number + 1]
            ids = table.ids_of(strings.part(begin, end), hashes[begin:end])
            columns[begin:end] = np.where(ids >= 0, ids + int(self.offsets[number]), -1)
        return columns

    def _idf(self, columns: np.ndarray, field_of: np.ndarray) -> np.ndarray:
        """idf of each stacked column (of field ``field_of``), from the fields' own arrays (a
        stacked copy would be private to each process of a machine)."""
        term_idf = np.empty(len(columns), dtype=np.float64)
        for number, field in enumerate(self.fields):
            at = field_of == number
            term_idf[at] = field.idf_[columns[at] - int(self.offsets[number])]
        return term_idf


def stacked_query_entries(fields: Sequence[FieldBM25], queries: Sequence[Sequence[Sequence[str]]],
                          weights: Sequence[float], offsets: np.ndarray) -> StackedQueries:
    """:meth:`StackedFields.query_entries` (``offsets[f]``: field f's first stacked column)."""
    return StackedFields(fields, offsets).query_entries(queries, weights)


def _collect_term_ids(docs: Iterable[Sequence[str]],
                      vocabulary: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """The term ids of all documents' tokens, concatenated (growing ``vocabulary``), and the
    number of tokens of each document."""
    columns = array("i")  # 4 bytes a token, not a Python list of int objects
    lengths = array("q")
    for doc in docs:
        columns.extend(vocabulary.setdefault(token, len(vocabulary)) for token in doc)
        lengths.append(len(doc))
    return (np.frombuffer(columns, dtype=np.intc).astype(np.int32, copy=False),
            np.frombuffer(lengths, dtype=np.int64))


def _compact(vocabulary: dict[str, int]) -> dict[str, int]:
    """``vocabulary`` (term ids 0..V-1 in insertion order) with its words copied into new
    strings made one after the other, and so side by side in memory in term order. The words
    found while fitting lie scattered among the memory of every text tokenised; a query's
    look-ups then touch a cache line or two per word fewer. Unchanged if a word holds NUL."""
    try:
        joined = "\x00".join(vocabulary)
    except TypeError:  # not all strings
        return vocabulary
    words = joined.split("\x00") if vocabulary else []
    if len(words) != len(vocabulary):
        return vocabulary
    return dict(zip(words, range(len(words)), strict=True))


def distinct(keys: np.ndarray) -> np.ndarray:
    """The distinct values of ``keys``, ascending (``np.unique``, without its fixed costs)."""
    keys = np.sort(keys, kind="stable")  # faster than the default on runs already in order
    return keys[np.concatenate(([True], keys[1:] != keys[:-1]))] if keys.size else keys


def _count_distinct(rows: np.ndarray, tokens: list[str], n_rows: int) -> np.ndarray:
    """Number of distinct tokens in each row, given each token's row (few tokens: a set)."""
    pairs = set(zip(rows.tolist(), tokens, strict=True))
    return np.bincount([row for row, _ in pairs], minlength=n_rows).astype(np.float64)
