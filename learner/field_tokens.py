"""One field of G_w's link triples, tokenised once and kept between learning rounds.

The incremental learner appends each new vertex's term counts here (term ids into a vocabulary
that only grows) and keeps every term's document frequency and the field's total length, so a
round tokenises only its new vertices. :meth:`FieldTokens.bm25` turns the counts into the
:class:`models.bm25.FieldBM25` a from-scratch fit would give (same vocabulary, same floats, in
this store's vertex and term order) with whole-array arithmetic: no text is tokenised again.

The vocabulary holds no Python object per term (the URL field of a G_w of 1e7 vertices has
1e7 terms: as a dictionary of strings, ~1.2 GB): the terms' UTF-8 bytes one after the other,
each followed by a NUL, with where each ends (``models.bm25.PackedTerms``, which the Q-table
archive stores as it is), and, to find a token's id, the terms' 64-bit string hashes, sorted,
with their ids: ~30 bytes a term in all. Two distinct terms with one hash would be one term:
with Python's 64-bit string hash the chance that any pair among 1e7 terms collides is ~3e-6.
A known hash is checked against its term, and a mismatch is counted (``collisions``) and
logged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from itertools import chain

import numpy as np
import scipy.sparse as sp

from jlse.learner.growable import Growable
from jlse.models.bm25 import WEIGHT_DTYPE, FieldBM25, PackedTerms, idf

log = logging.getLogger(__name__)

WEIGHT_BLOCK = 1 << 22  # postings weighted at once
MAX_COUNT = np.iinfo(np.uint8).max  # a term count in one byte (a text is cut to 400 characters)


class FieldTokens:
    """Per-vertex term counts of one field (a CSR matrix built by appending rows)."""

    def __init__(self, tokenize_many: Callable[[list[str]], Sequence[Sequence[str]]]) -> None:
        self.tokenize_many = tokenize_many
        self.chars = Growable(np.uint8)  # every term's UTF-8 bytes and a NUL, by term id
        self.ends = Growable(np.int64)  # where each term ends in chars (past its NUL)
        self._hashes = np.zeros(0, dtype=np.int64)  # hash(term), ascending ...
        self._ids = np.zeros(0, dtype=np.int32)  # ... and its term id
        self.collisions = 0  # tokens taken for another term of the same hash
        self.doc_freq = Growable(np.int32)  # documents <= vertices < 2**31
        self.indptr = Growable(np.int32)  # int64 once a field has 2**31 postings
        self.indptr.extend([0])
        self.terms = Growable(np.int32)
        self.counts = Growable(np.uint8)
        self.lengths = Growable(np.int32)  # tokens per vertex, repeats included
        self.total_length = 0

    @property
    def n_docs(self) -> int:
        return len(self.lengths)

    @property
    def n_terms(self) -> int:
        return len(self.ends)

    def term(self, term_id: int) -> str:
        ends = self.ends.view()
        start = int(ends[term_id - 1]) if term_id else 0
        return self.chars.view()[start:int(ends[term_id]) - 1].tobytes().decode("utf-8")

    @property
    def nbytes(self) -> int:
        """Memory of the arrays (the terms' strings not included)."""
        arrays = (self.doc_freq, self.indptr, self.terms, self.counts, self.lengths,
                  self.chars, self.ends)
        return sum(a.nbytes for a in arrays) + self._hashes.nbytes + self._ids.nbytes

    def add(self, texts: Sequence[str]) -> None:
        """Append one vertex per text; each distinct text is tokenised once."""
        distinct: dict[str, int] = {}
        doc_index = np.fromiter(
            (distinct.setdefault(text if isinstance(text, str) else "", len(distinct))
             for text in texts), dtype=np.int64, count=len(texts))
        terms, tokens_per_doc = self._term_ids(self.tokenize_many(list(distinct)))
        doc_of_token = np.repeat(np.arange(len(distinct), dtype=np.int64), tokens_per_doc)
        n_terms = max(self.n_terms, 1)
        keys, counts = np.unique(doc_of_token * n_terms + terms, return_counts=True)
        doc_rows, doc_terms = np.divmod(keys, n_terms)
        entries_per_doc = np.bincount(doc_rows, minlength=len(distinct))
        positions = _ragged_positions(entries_per_doc, doc_index)
        entries = entries_per_doc[doc_index]
        self.terms.extend(doc_terms[positions])
        self.counts.extend(np.minimum(counts[positions], MAX_COUNT))
        ends = int(self.indptr.view()[-1]) + np.cumsum(entries)
        if len(ends) and ends[-1] > np.iinfo(self.indptr.dtype).max:
            self.indptr.widen(np.int64)
        self.indptr.extend(ends)
        lengths = tokens_per_doc[doc_index]
        self.lengths.extend(lengths)
        self.total_length += int(lengths.sum())
        new_terms = self.n_terms - len(self.doc_freq)
        self.doc_freq.extend(np.zeros(new_terms, dtype=np.int64))
        self.doc_freq.view()[:] += np.bincount(doc_terms[positions], minlength=self.n_terms)

    def _term_ids(self, docs: Sequence[Sequence[str]]) -> tuple[np.ndarray, np.ndarray]:
        """The term id of every token of ``docs`` (new terms get the next ids, in order of
        first appearance, as a fit numbers them) and the number of tokens of each doc."""
        lengths = np.fromiter(map(len, docs), dtype=np.int64, count=len(docs))
        tokens = list(chain.from_iterable(docs))
        hashes = np.fromiter(map(hash, tokens), dtype=np.int64, count=len(tokens))
        keys, first, inverse = np.unique(hashes, return_index=True, return_inverse=True)
        ids = self._known(keys)
        found = np.flatnonzero(ids >= 0)
        mismatches = self._mismatches(ids[found], [tokens[i] for i in first[found].tolist()])
        if mismatches:
            self.collisions += mismatches
            log.warning("field tokens: %d new terms share a 64-bit hash with a known term and "
                        "are counted as it", mismatches)
        new = np.flatnonzero(ids < 0)
        if len(new):
            new = new[np.argsort(first[new], kind="stable")]  # in order of first appearance
            base = self.n_terms
            ids[new] = np.arange(base, base + len(new))
            self._append_terms([tokens[i] for i in first[new].tolist()])
            added = np.sort(new)  # keys ascending
            at = np.searchsorted(self._hashes, keys[added])
            self._hashes = np.insert(self._hashes, at, keys[added])
            self._ids = np.insert(self._ids, at, ids[added])
        return ids[inverse.reshape(-1)], lengths

    def _append_terms(self, words: list[str]) -> None:
        encoded = [word.encode("utf-8") for word in words]
        end = self.ends.view()[-1] if len(self.ends) else 0
        sizes = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)) + 1
        self.ends.extend(end + np.cumsum(sizes))
        self.chars.extend(np.frombuffer(b"\x00".join(encoded) + b"\x00", dtype=np.uint8))

    def _mismatches(self, ids: np.ndarray, words: list[str]) -> int:
        """How many of ``words`` differ from the term of the same place in ``ids``."""
        if not len(ids):
            return 0
        ends = self.ends.view()
        stops = ends[ids] - 1
        starts = np.where(ids > 0, ends[np.maximum(ids - 1, 0)], 0)
        raw = self.chars.view()
        return sum(raw[start:stop].tobytes() != word.encode("utf-8")
                   for start, stop, word in zip(starts.tolist(), stops.tolist(), words,
                                                strict=True))

    def _known(self, keys: np.ndarray) -> np.ndarray:
        """The term id of each hash in ``keys``, -1 where no term has it."""
        if not len(self._hashes):
            return np.full(len(keys), -1, dtype=np.int64)
        at = np.minimum(np.searchsorted(self._hashes, keys), len(self._hashes) - 1)
        return np.where(self._hashes[at] == keys, self._ids[at], -1)

    def bm25(self, k1: float, b: float) -> FieldBM25:
        """The fitted BM25 index of the vertices so far (weights as ``FieldBM25`` computes them)."""
        n_docs, n_terms = self.n_docs, self.n_terms
        field = FieldBM25(k1=k1, b=b)
        ends = self.ends.view()[:n_terms]  # a snapshot: later terms are written past its end
        field.packed_terms_ = PackedTerms(self.chars.view()[: int(ends[-1]) if n_terms else 0],
                                          ends)
        field.n_docs_ = n_docs
        field.avgdl_ = self.total_length / n_docs if n_docs else 0.0
        field.idf_ = idf(n_docs, self.doc_freq.view()[:n_terms])
        indptr = self.indptr.view()
        wide = indptr[-1] >= np.iinfo(np.int32).max
        index = np.int64 if wide else np.int32
        norm = k1 * (1.0 - b + b * self.lengths.view() / max(field.avgdl_, 1e-300))
        weights = _weights(self.counts.view(), np.repeat(norm.astype(WEIGHT_DTYPE),
                                                         np.diff(indptr)), k1)
        field.doc_weights_ = sp.csr_matrix(
            (weights, self.terms.view().astype(index, copy=False),
             indptr.astype(index, copy=False)),
            shape=(n_docs, n_terms))
        return field


def _weights(counts: np.ndarray, norm: np.ndarray, k1: float) -> np.ndarray:
    """``tf (k1+1) / (tf + norm)`` at every posting, in place in ``norm``, block by block (a
    G_w of 1e7 vertices has 2e8 postings: whole-array temporaries would cost gigabytes).
    The same float32 operations as ``FieldBM25``, so the same weights."""
    scale = WEIGHT_DTYPE(k1 + 1.0)
    for start in range(0, len(counts), WEIGHT_BLOCK):
        tf = counts[start:start + WEIGHT_BLOCK].astype(WEIGHT_DTYPE)
        block = norm[start:start + WEIGHT_BLOCK]
        block += tf
        np.divide(tf * scale, block, out=block)
    return norm


def _ragged_positions(lengths: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Positions, in the concatenation of rows of ``lengths``, of the entries of ``rows`` one
    after the other (a gather of ragged rows without a Python loop)."""
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
    taken = lengths[rows]
    offsets = np.arange(int(taken.sum()), dtype=np.int64)
    offsets -= np.repeat(np.cumsum(taken) - taken, taken)
    return np.repeat(starts[rows], taken) + offsets
