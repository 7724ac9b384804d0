"""A field's vocabulary as arrays that the processes of a worker machine map: term -> term id
with no Python object per term (``models/qtable_files.py`` builds it once per machine).

The table holds each term's 64-bit hash, sorted, with the term's id, and where each term ends in
the field's terms (the archive's ``<field>.terms``: UTF-8 bytes, each followed by a NUL). A batch
of query tokens is looked up in whole-array numpy steps: the tokens' bytes are hashed together
(:func:`hash_strings`), each hash found by a binary search (``np.searchsorted``), and every hit is
checked against the term's own bytes, walking on past terms of the same hash. So a token gets
exactly the id a dictionary of the terms gives it, whatever the hashes do: a collision (two terms
of one hash, or a token hashed like a term it is not) costs a step more, never a wrong id.

The hash mixes 8 bytes at a time (a multiply and a shift, then murmur3's finaliser) under a key
drawn at random for each machine's copy, so that pages cannot be made to collide on purpose
(which would only slow the look-ups down). Not a cryptographic hash; it need not be one.
"""

from __future__ import annotations

import secrets
from typing import NamedTuple

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)
_FINAL_1 = np.uint64(0xFF51AFD7ED558CCD)
_FINAL_2 = np.uint64(0xC4CEB9FE1A85EC53)
_SHIFT = np.uint64(32)
_FINAL_SHIFT = np.uint64(33)
# The bytes of a block that belong to a string of k more bytes (little-endian), k = 0..8.
_MASKS = np.array([(1 << (8 * k)) - 1 for k in range(8)] + [(1 << 64) - 1], dtype=np.uint64)
_PAD = 8  # zero bytes after the last string, so that a block read never leaves the buffer
BUILD_BLOCK = 1 << 20  # terms hashed at once when a table is built
CHECKED_HASHES = 64  # stored hashes recomputed when a table is mapped


class Strings(NamedTuple):
    """Byte strings side by side: string i is ``chars[starts[i]:starts[i] + lengths[i]]``;
    ``chars`` has :data:`_PAD` bytes past the last one."""

    chars: np.ndarray  # uint8
    starts: np.ndarray  # int64
    lengths: np.ndarray  # int64

    def part(self, begin: int, end: int) -> Strings:
        return Strings(self.chars, self.starts[begin:end], self.lengths[begin:end])


def encode(tokens: list[str]) -> Strings:
    """The UTF-8 bytes of ``tokens`` (a lone surrogate kept as it is: no term holds one)."""
    joined = "\x00".join(tokens)
    if joined.isascii():
        lengths = np.fromiter(map(len, tokens), dtype=np.int64, count=len(tokens))
        data = joined.encode("ascii")
    else:
        encoded = [token.encode("utf-8", "surrogatepass") for token in tokens]
        lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
        data = b"\x00".join(encoded)
    starts = np.cumsum(lengths + 1) - lengths - 1
    return Strings(np.frombuffer(data + bytes(_PAD), dtype=np.uint8), starts, lengths)


def gather(chars: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> Strings:
    """The strings at ``starts`` of ``chars`` copied side by side, padded (as :func:`encode`)."""
    total = int(lengths.sum())
    new_starts = np.cumsum(lengths) - lengths
    within = np.arange(total, dtype=np.int64) - np.repeat(new_starts, lengths)
    copied = np.zeros(total + _PAD, dtype=np.uint8)
    copied[:total] = chars[np.repeat(starts, lengths) + within]
    return Strings(copied, new_starts, lengths)


def hash_strings(strings: Strings, key: np.uint64) -> np.ndarray:
    """The keyed 64-bit hash (uint64) of each string."""
    chars, starts, lengths = strings
    blocks = (lengths + 7) >> 3
    order = np.argsort(-blocks, kind="stable")  # the longest first: block j's strings, a prefix
    starts, lengths, blocks = starts[order], lengths[order], blocks[order]
    hashes = (lengths.astype(np.uint64) * _MULTIPLIER) ^ np.uint64(key)
    windows = sliding_window_view(chars, 8)
    counts = np.searchsorted(-blocks, -np.arange(int(blocks[0]) if len(blocks) else 0),
                             side="left")  # strings with more than j blocks, for each j
    for j, count in enumerate(counts.tolist()):
        block = windows[starts[:count] + 8 * j].view("<u8")[:, 0]
        block &= _MASKS[np.minimum(lengths[:count] - 8 * j, 8)]
        mixed = (hashes[:count] ^ block) * _MULTIPLIER
        hashes[:count] = mixed ^ (mixed >> _SHIFT)
    hashes ^= hashes >> _FINAL_SHIFT
    hashes *= _FINAL_1
    hashes ^= hashes >> _FINAL_SHIFT
    hashes *= _FINAL_2
    hashes ^= hashes >> _FINAL_SHIFT
    result = np.empty_like(hashes)
    result[order] = hashes
    return result


def new_key() -> np.ndarray:
    """A random hash key, as the one-element array a table is saved with."""
    return np.array([secrets.randbits(64)], dtype=np.uint64)


class TermTable:
    """The terms of one field (``chars``, NUL-terminated, ending at ``ends``), looked up by
    their hashes (``hashes`` ascending, ``ids[i]`` the term of ``hashes[i]``) under ``key``."""

    def __init__(self, key: np.ndarray, hashes: np.ndarray, ids: np.ndarray, chars: np.ndarray,
                 ends: np.ndarray) -> None:
        self.key_array = key
        self.key = np.uint64(key[0])
        self.hashes = hashes
        self.ids = ids
        self.chars = chars
        self.ends = ends

    @property
    def n_terms(self) -> int:
        return len(self.ends)

    @classmethod
    def build(cls, chars: np.ndarray, key: np.ndarray) -> TermTable:
        """The table of the NUL-terminated terms ``chars`` (none holding a NUL itself)."""
        ends = np.flatnonzero(chars == 0) + 1
        hashes = np.empty(len(ends), dtype=np.uint64)
        starts, lengths = _starts(ends), _lengths(ends)
        for begin in range(0, len(ends), BUILD_BLOCK):
            part = slice(begin, begin + BUILD_BLOCK)
            hashes[part] = hash_strings(gather(chars, starts[part], lengths[part]), key[0])
        order = np.argsort(hashes, kind="stable")
        index = np.int32 if len(ends) < np.iinfo(np.int32).max else np.int64
        return cls(key, hashes[order], order.astype(index), chars, ends)

    def arrays(self) -> dict[str, np.ndarray]:
        """The arrays to save (``chars`` is the field's own terms, saved already)."""
        return {"hashes": self.hashes, "ids": self.ids, "ends": self.ends}

    @classmethod
    def from_arrays(cls, key: np.ndarray, hashes: np.ndarray, ids: np.ndarray,
                    chars: np.ndarray, ends: np.ndarray) -> TermTable:
        """A saved table, checked (the arrays are not copied); ValueError if malformed."""
        n_terms = len(ends) if ends.ndim == 1 else -1
        if not (key.dtype == np.uint64 and key.shape == (1,)
                and hashes.dtype == np.uint64 and hashes.shape == (n_terms,)
                and ids.dtype in (np.int32, np.int64) and ids.shape == (n_terms,)
                and ends.dtype == np.int64 and chars.dtype == np.uint8 and chars.ndim == 1):
            raise ValueError("term table: arrays of the wrong types or shapes")
        if n_terms and not (ends[0] >= 1 and ends[-1] == len(chars)
                            and bool(np.all(np.diff(ends) >= 1)) and not chars[ends - 1].any()):
            raise ValueError("term table: term ends do not fit the terms")
        if n_terms and not (bool(np.all(hashes[1:] >= hashes[:-1]))
                            and ids.min() >= 0 and ids.max() < n_terms
                            and bool(np.all(np.bincount(ids, minlength=n_terms) == 1))):
            raise ValueError("term table: hashes unsorted or ids not a permutation")
        table = cls(key, hashes, ids, chars, ends)
        table._check_sample()
        return table

    def _check_sample(self) -> None:
        """Recompute a few stored hashes from their terms (a table of another key, or of
        other terms, fails)."""
        if not self.n_terms:
            return
        at = np.unique(np.linspace(0, self.n_terms - 1, CHECKED_HASHES).astype(np.int64))
        ids = self.ids[at].astype(np.int64)
        sample = gather(self.chars, self._start(ids), _lengths(self.ends, ids))
        if not np.array_equal(hash_strings(sample, self.key), self.hashes[at]):
            raise ValueError("term table: stored hashes do not match their terms")

    def _start(self, ids: np.ndarray) -> np.ndarray:
        return np.where(ids > 0, self.ends[np.maximum(ids - 1, 0)], 0)

    def ids_of(self, tokens: Strings, hashes: np.ndarray) -> np.ndarray:
        """The term id of each token (``hashes``: theirs, :func:`hash_strings`), -1 where the
        field has no such term."""
        ids = np.full(len(hashes), -1, dtype=np.int64)
        last = len(self.hashes) - 1
        if last < 0 or not len(hashes):
            return ids
        at = np.minimum(np.searchsorted(self.hashes, hashes), last)
        pending = np.flatnonzero(self.hashes[at] == hashes)
        while len(pending):  # more than once only where hashes collide
            terms = self.ids[at[pending]]
            same = self._same(tokens, pending, terms)
            ids[pending[same]] = terms[same]
            if same.all():
                break
            pending = pending[~same]
            at[pending] += 1
            pending = pending[at[pending] <= last]
            pending = pending[self.hashes[at[pending]] == hashes[pending]]
        return ids

    def _same(self, tokens: Strings, which: np.ndarray, terms: np.ndarray) -> np.ndarray:
        """Whether token ``which[i]`` is the term ``terms[i]``, byte for byte."""
        starts = self.ends[terms - 1]  # term 0's is the last term's end: set to 0 below
        starts[terms == 0] = 0
        same = self.ends[terms] - starts - 1 == tokens.lengths[which]
        check = np.flatnonzero(same)
        lengths = tokens.lengths[which[check]]
        token_starts = tokens.starts[which[check]]
        token_at = (np.arange(int(lengths.sum()), dtype=np.int64)
                    + np.repeat(token_starts - (np.cumsum(lengths) - lengths), lengths))
        term_at = token_at + np.repeat(starts[check] - token_starts, lengths)
        differs = tokens.chars[token_at] != self.chars[term_at]
        if differs.any():
            same[check[np.repeat(np.arange(len(check)), lengths)[differs]]] = False
        return same


def _starts(ends: np.ndarray) -> np.ndarray:
    return np.concatenate(([0], ends[:-1])).astype(np.int64)


def _lengths(ends: np.ndarray, ids: np.ndarray | None = None) -> np.ndarray:
    """The length (without its NUL) of each term, or of terms ``ids``."""
    if ids is None:
        return np.diff(ends, prepend=0) - 1
    return ends[ids] - np.where(ids > 0, ends[np.maximum(ids - 1, 0)], 0) - 1
