"""One field of G_w's link triples, tokenised once and kept between learning rounds.

The incremental learner appends each new vertex's term counts here (term ids into a vocabulary
that only grows) and keeps every term's document frequency and the field's total length, so a
round tokenises only its new vertices. :meth:`FieldTokens.bm25` turns the counts into the
:class:`models.bm25.FieldBM25` a from-scratch fit would give (same vocabulary, same floats, in
this store's vertex and term order) with whole-array arithmetic: no text is tokenised again.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence

import numpy as np
import scipy.sparse as sp

from jlse.learner.growable import Growable
from jlse.models.bm25 import WEIGHT_DTYPE, FieldBM25, idf

WEIGHT_BLOCK = 1 << 22  # postings weighted at once
MAX_COUNT = np.iinfo(np.uint8).max  # a term count in one byte (a text is cut to 400 characters)


class FieldTokens:
    """Per-vertex term counts of one field (a CSR matrix built by appending rows)."""

    def __init__(self, tokenize_many: Callable[[list[str]], Sequence[Sequence[str]]]) -> None:
        self.tokenize_many = tokenize_many
        self.vocabulary: dict[str, int] = {}
        self.doc_freq = Growable(np.int64)
        self.indptr = Growable(np.int64)
        self.indptr.extend([0])
        self.terms = Growable(np.int32)
        self.counts = Growable(np.uint8)
        self.lengths = Growable(np.int32)  # tokens per vertex, repeats included
        self.total_length = 0

    @property
    def n_docs(self) -> int:
        return len(self.lengths)

    @property
    def nbytes(self) -> int:
        arrays = (self.doc_freq, self.indptr, self.terms, self.counts, self.lengths)
        return sum(a.nbytes for a in arrays)

    def add(self, texts: Sequence[str]) -> None:
        """Append one vertex per text; each distinct text is tokenised once."""
        distinct: dict[str, int] = {}
        doc_index = np.fromiter(
            (distinct.setdefault(text if isinstance(text, str) else "", len(distinct))
             for text in texts), dtype=np.int64, count=len(texts))
        terms, tokens_per_doc = self._term_ids(self.tokenize_many(list(distinct)))
        doc_of_token = np.repeat(np.arange(len(distinct), dtype=np.int64), tokens_per_doc)
        n_terms = max(len(self.vocabulary), 1)
        keys, counts = np.unique(doc_of_token * n_terms + terms, return_counts=True)
        doc_rows, doc_terms = np.divmod(keys, n_terms)
        entries_per_doc = np.bincount(doc_rows, minlength=len(distinct))
        positions = _ragged_positions(entries_per_doc, doc_index)
        entries = entries_per_doc[doc_index]
        self.terms.extend(doc_terms[positions])
        self.counts.extend(np.minimum(counts[positions], MAX_COUNT))
        self.indptr.extend(self.indptr.view()[-1] + np.cumsum(entries))
        lengths = tokens_per_doc[doc_index]
        self.lengths.extend(lengths)
        self.total_length += int(lengths.sum())
        new_terms = len(self.vocabulary) - len(self.doc_freq)
        self.doc_freq.extend(np.zeros(new_terms, dtype=np.int64))
        self.doc_freq.view()[:] += np.bincount(doc_terms[positions], minlength=len(self.vocabulary))

    def _term_ids(self, docs: Sequence[Sequence[str]]) -> tuple[np.ndarray, np.ndarray]:
        ids, lengths = array("q"), array("q")
        vocabulary = self.vocabulary
        for doc in docs:
            ids.extend(vocabulary.setdefault(token, len(vocabulary)) for token in doc)
            lengths.append(len(doc))
        return np.frombuffer(ids, dtype=np.int64), np.frombuffer(lengths, dtype=np.int64)

    def bm25(self, k1: float, b: float) -> FieldBM25:
        """The fitted BM25 index of the vertices so far (weights as ``FieldBM25`` computes them)."""
        n_docs, n_terms = self.n_docs, len(self.vocabulary)
        field = FieldBM25(k1=k1, b=b)
        field.vocabulary_ = dict(self.vocabulary)  # a snapshot: the store's own keeps growing
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
            (weights, self.terms.view().astype(index, copy=False), indptr.astype(index)),
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
