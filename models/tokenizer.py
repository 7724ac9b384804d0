"""Tokens for every text model: Chinese words (jieba's dictionary), lower-cased Latin words.

Text is normalised first (NFKD: full-width ``ＡＢＣ１２３`` becomes ``abc123``, accents are
dropped, curly apostrophes become ``'``). Then:

- Chinese runs (jieba's Han range) are segmented exactly as ``jieba.lcut(run, HMM=False)`` does:
  the maximum-probability route over jieba's dictionary (:func:`_segment_run`, checked against
  jieba in the tests). When a text brings at least :data:`BATCH_MIN_CHARS` characters of runs
  not seen lately, they are segmented in one batch with arrays (:func:`_han_words`: the same
  route, float sums and tie-breaking, checked against :func:`_segment_run`), in about half the
  time on long pages. Its array form of jieba's dictionary is built once per process (about a
  second) in a background thread when first needed, or by :func:`prepare`.
- Latin words are ``[a-z0-9][a-z0-9'-]*`` with trailing ``'``/``-`` removed; a word without a
  letter (``2024``, ``12-05``) or of one character is dropped. Starting at a digit keeps
  ``5g``, ``4k``, ``1080p``. ASCII text takes C-speed string steps (:func:`_ascii_tokens`);
  :func:`tokenize_many` takes them once for many ASCII texts.
- English and Chinese stop words (``models/data``) are removed; punctuation, whitespace and other
  scripts never form tokens.

Repeated short strings (anchor texts, boilerplate clauses) are served from caches. jieba keeps
its dictionary (~9 MB, read back with ``marshal``) in the user's cache folder, not in a shared
``$TMPDIR`` where another user could plant one (:func:`jieba_cache_dir`).
"""

from __future__ import annotations

import logging
import os
import re
import threading
import unicodedata
from collections.abc import Iterable, Sequence
from functools import lru_cache
from importlib import resources
from itertools import filterfalse
from math import log
from pathlib import Path

import jieba
import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import breadth_first_order, dijkstra

logger = logging.getLogger(__name__)
jieba.setLogLevel(logging.WARNING)


def jieba_cache_dir() -> Path:
    """Where jieba's dictionary cache goes: ``$JLSE_CACHE_DIR`` if set, else ``~/.cache/jlse``,
    as for the real-text web's corpus."""
    configured = os.environ.get("JLSE_CACHE_DIR", "").strip()
    return Path(configured).expanduser() if configured else Path.home() / ".cache/jlse"


def _use_jieba_cache_dir() -> None:
    folder = jieba_cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # jieba then keeps its own default, $TMPDIR
        logger.debug("jieba cache folder %s: %s", folder, exc)
        return
    jieba.dt.tmp_dir = str(folder)


_use_jieba_cache_dir()

_HAN = "\u4e00-\u9fd5"  # the Han range jieba segments; other CJK characters are not tokens
_HAN_FIRST, _HAN_LAST = 0x4E00, 0x9FD5
# A Latin word as the module docstring defines it, the trailing-'/- and letter rules included;
# each branch starts with a character set, which lets the regex engine skip other text fast.
_LATIN_WORD = r"[a-z][a-z0-9'-]*[a-z0-9]|[0-9][0-9'-]*[a-z](?:[a-z0-9'-]*[a-z0-9])?"
_LATIN = re.compile(_LATIN_WORD)
_PIECE = re.compile(rf"[{_HAN}]+|{_LATIN_WORD}")  # Han runs and Latin words, in text order
_HAN_CHAR = re.compile(f"[{_HAN}]")
_HAN_WORD = re.compile(f"[{_HAN}]+")
_COMBINING_MARK = re.compile("[\u0300-\u036f]")
_APOSTROPHES = ("\u2019", "\u2018", "\u02bc")  # replaced one by one: str.translate is slow here
_CACHED_TEXT_CHARS = 200  # whole texts up to this length are cached (anchor texts)
_CACHED_RUN_CHARS = 40  # Chinese runs up to this length are cached (clauses, not paragraphs)
_CACHED_RUNS = 16_384  # ~10 MB; a crawl has one per page process
# New Han runs of a text holding at least this many characters are segmented in one batch: below
# it, the batch's fixed cost (~0.25 ms) exceeds segmenting them one by one (~0.7 us a char).
BATCH_MIN_CHARS = 800


def _load_stopwords(name: str) -> frozenset[str]:
    text = resources.files("jlse.models").joinpath("data", name).read_text(encoding="utf-8")
    words = (line.strip() for line in text.splitlines())
    return frozenset(word for word in words if word and not word.startswith("#"))


STOPWORDS: frozenset[str] = _load_stopwords("stopwords_en.txt") | _load_stopwords("stopwords_zh.txt")

_WORD_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789'-"
_NOT_LETTERS = "0123456789'-"
# byte -> itself (lower-cased) if it can be in a Latin word, else a blank. Normalised text is
# lower-cased already: an upper-case letter left in it (NFKD of a letter without a lower case,
# like U+1D400) is no word character.
_LOWERED_WORD_CHARS = bytes(
    ord(chr(byte).lower()) if chr(byte).lower() in _WORD_CHARS else ord(" ") for byte in range(256))
_WORD_CHARS_ONLY = bytes(byte if chr(byte) in _WORD_CHARS else ord(" ") for byte in range(256))
# Words that are no tokens once digit-only words are out: stop words, single characters, "".
_NOT_TOKENS = STOPWORDS | frozenset(_WORD_CHARS) | {""}
# tokenize_many joins texts by _SEPARATOR, which its table keeps: no word holds it.
_SEPARATOR = "\x00"
_SEPARATED_WORD_CHARS = _SEPARATOR.encode("ascii") + _LOWERED_WORD_CHARS[1:]


def han_share(text: str) -> float:
    """The share of Han characters (the range the tokenizer segments) among the letters of
    ``text``'s first 4,000 characters; 0 for a text without letters."""
    sample = text[:4000]
    letters = sum(ch.isalpha() for ch in sample)
    return len(_HAN_CHAR.findall(sample)) / letters if letters else 0.0


def tokenize(text: str) -> list[str]:
    """The model tokens of ``text``: Chinese and Latin words, stop words removed. Never raises."""
    if not isinstance(text, str):
        logger.warning("tokenize: expected str, got %s; no tokens", type(text).__name__)
        return []
    if len(text) <= _CACHED_TEXT_CHARS:
        return list(_tokenize_cached(text))
    return _tokenize(text)


@lru_cache(maxsize=16_384)
def _tokenize_cached(text: str) -> tuple[str, ...]:
    return tuple(_tokenize(text))


def _tokenize(text: str) -> list[str]:
    if text.isascii():  # O(1) in CPython; ASCII text only needs lower-casing
        return _ascii_tokens(text, _LOWERED_WORD_CHARS)
    text = _normalise(text)
    if text.isascii():
        return _ascii_tokens(text, _WORD_CHARS_ONLY)
    return _tokenize_unicode(text)


def tokenize_many(texts: Sequence[str]) -> list[list[str]]:
    """``[tokenize(text) for text in texts]``, the ASCII texts tokenised together: one
    ``bytes.translate`` for all, joined by a character that no word holds."""
    tokens: list = [None] * len(texts)
    plain = [i for i, text in enumerate(texts) if isinstance(text, str) and text.isascii()]
    joined = _SEPARATOR.join([texts[i] for i in plain])
    if plain and joined.count(_SEPARATOR) == len(plain) - 1:  # else a text holds the separator
        joined = joined.encode("ascii").translate(_SEPARATED_WORD_CHARS).decode("ascii")
        marks = "'" in joined or "-" in joined
        digits = any(map(joined.__contains__, "0123456789"))
        for i, piece in zip(plain, joined.split(_SEPARATOR), strict=True):
            tokens[i] = _word_tokens(piece.split(), marks, digits)
    for i in [i for i, found in enumerate(tokens) if found is None]:
        tokens[i] = tokenize(texts[i])
    return tokens


def _ascii_tokens(text: str, word_chars: bytes) -> list[str]:
    """:func:`_tokenize` of ASCII text with C-speed steps: one ``bytes.translate`` by
    ``word_chars`` blanks whatever cannot be in a word, so the words are the whitespace-split
    runs of what is left."""
    return _word_tokens(text.encode("ascii").translate(word_chars).decode("ascii").split())


def _word_tokens(words: list[str], marks: bool = True, digits: bool = True) -> list[str]:
    """The tokens among runs of ``[a-z0-9'-]``; ``marks`` or ``digits`` False: no run holds
    ' or - or a digit."""
    if marks and not all(map(str.isalnum, words)):  # some run holds ' or -
        words = [word if word.isalnum() else _trimmed(word) for word in words]
    return list(filterfalse(_NOT_TOKENS.__contains__,
                            filterfalse(str.isdigit, words) if digits else words))


def _trimmed(run: str) -> str:
    """A run of ``[a-z0-9'-]`` without its leading and trailing ' and -; "" if no letter."""
    word = run.strip("'-")
    return word if word.strip(_NOT_LETTERS) else ""


def _tokenize_unicode(text: str) -> list[str]:
    """:func:`_tokenize` of normalised text that is not ASCII."""
    if _HAN_CHAR.search(text) is None:
        return [word for word in _LATIN.findall(text) if word not in STOPWORDS]
    pieces = _PIECE.findall(text)
    segmented = iter(_segment_runs([piece for piece in pieces if piece >= "\u4e00"]))
    tokens: list[str] = []
    for piece in pieces:
        if piece < "\u4e00":  # a Latin word (they start with [a-z0-9])
            tokens.append(piece)
        else:
            tokens.extend(next(segmented))
    return [token for token in tokens if token not in STOPWORDS]


def _normalise(text: str) -> str:
    """Lower case, compatibility forms folded, accents dropped, apostrophes unified."""
    text = text.lower()
    if not unicodedata.is_normalized("NFKD", text):
        text = _COMBINING_MARK.sub("", unicodedata.normalize("NFKD", text))
    for apostrophe in _APOSTROPHES:
        text = text.replace(apostrophe, "'")
    return text


_RUN_WORDS: dict[str, tuple[str, ...]] = {}  # words of short runs seen lately (clauses, menus)


def _segment_runs(runs: list[str]) -> list[tuple[str, ...]]:
    """The words of each Han run: short runs seen lately from a cache, the others segmented in
    one batch (:func:`_segment_batch`) when they hold enough characters, else one by one."""
    found = list(map(_RUN_WORDS.get, runs))
    missing = [i for i, words in enumerate(found) if words is None]
    if not missing:
        return found
    new_runs = [runs[i] for i in missing]
    dictionary = _ready_dictionary() if sum(map(len, new_runs)) >= BATCH_MIN_CHARS else None
    if dictionary is not None:
        segmented = _segment_batch(new_runs, dictionary)
    else:
        segmented = list(map(_segment_run, new_runs))
    if len(_RUN_WORDS) + len(missing) > _CACHED_RUNS:
        _RUN_WORDS.clear()  # forgotten at once: cheaper than an LRU, and safe across threads
    for i, words in zip(missing, segmented, strict=True):
        found[i] = words
        if len(runs[i]) <= _CACHED_RUN_CHARS:
            _RUN_WORDS[runs[i]] = words
    return found


def _segment_run(run: str) -> tuple[str, ...]:
    """Segment a run of Han characters like ``jieba.lcut(run, HMM=False)``.

    jieba's algorithm: every dictionary word starting at position k is a candidate edge; the
    route maximises the summed log word frequency, scanning from the end; ties go to the longer
    word. A character that starts no dictionary word stands alone with count 1.
    """
    jieba.dt.check_initialized()
    freq = jieba.dt.FREQ  # word -> count; prefixes of words are present with count 0
    log_total = log(jieba.dt.total)
    n = len(run)
    score = [0.0] * (n + 1)
    end = list(range(1, n + 2))
    for k in range(n - 1, -1, -1):
        best = None
        i = k + 1
        count = freq.get(run[k])
        while count is not None:
            if count:
                candidate = log(count) - log_total + score[i]
                if best is None or candidate >= best:
                    best, end[k] = candidate, i
            i += 1
            if i > n:
                break
            count = freq.get(run[k:i])
        score[k] = score[k + 1] - log_total if best is None else best
    words = []
    k = 0
    while k < n:
        words.append(run[k : end[k]])
        k = end[k]
    return tuple(words)


# --- batch segmentation ----------------------------------------------------------------------

_CODE_BITS = 15  # a Han character's code: 1 + its offset in the Han range (0: not Han)
_N_CODES = _HAN_LAST - _HAN_FIRST + 1


class _BucketTable:
    """An immutable map from non-negative int64 keys to int32 values, looked up an array at a
    time: each key sits in one 8-slot bucket picked by a multiplicative hash, so a lookup reads
    one row (a cache line); the few keys of overfull buckets are kept in a dict."""

    SLOT_BITS = 3
    MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)

    def __init__(self, keys: np.ndarray, values: np.ndarray) -> None:
        bits = max(1, int(np.ceil(np.log2(max(len(keys), 1) / 4))))  # ~4 keys per bucket
        self.shift = np.uint64(64 - bits)
        slots = 1 << self.SLOT_BITS
        # The table first, then the temporaries: freed last-in first-out, they can go back to
        # the system instead of staying in the process (half a million keys: tens of MB).
        self.keys = np.full((1 << bits, slots), -1, dtype=np.int64)  # -1: empty
        self.values = np.zeros((1 << bits) * slots, dtype=np.int32)
        order = np.argsort(self._bucket(keys), kind="stable")
        bucket = self._bucket(keys[order])
        rank = np.arange(len(keys)) - np.searchsorted(bucket, bucket)
        fits = rank < slots
        place = (bucket[fits] << self.SLOT_BITS) + rank[fits]
        self.keys.reshape(-1)[place] = keys[order[fits]]
        self.values[place] = values[order[fits]]
        self.full = self.keys[:, -1] >= 0
        rest = order[~fits]
        self.overflow = dict(zip(keys[rest].tolist(), values[rest].tolist(), strict=True))

    def _bucket(self, keys: np.ndarray) -> np.ndarray:
        return ((keys.astype(np.uint64) * self.MULTIPLIER) >> self.shift).astype(np.intp)

    def get(self, keys: np.ndarray) -> np.ndarray:
        """The value of each key, -1 for keys not in the table."""
        bucket = self._bucket(keys)
        hits = np.flatnonzero(np.take(self.keys, bucket, axis=0) == keys[:, None])
        rows = hits >> self.SLOT_BITS
        found = np.full(len(keys), -1, dtype=np.int64)
        slot_mask = (1 << self.SLOT_BITS) - 1
        found[rows] = self.values[(bucket[rows] << self.SLOT_BITS) | (hits & slot_mask)]
        again = np.flatnonzero((found < 0) & self.full[bucket])
        if len(again):
            found[again] = [self.overflow.get(key, -1) for key in keys[again].tolist()]
        return found


class _HanDictionary:
    """jieba's dictionary (its Han-only words and word prefixes) as a trie in arrays.

    Node i is ``strings[i]``; ``root[code]`` is the node of a single character, and
    ``children.get((node << 15) | code)`` the node one character longer. ``log_prob[i]`` is
    ``log(count) - log(total)`` as :func:`_segment_run` computes it, NaN for a prefix that is no
    word. Token ids past the nodes stand for lone characters (``strings[n_nodes + code - 1]``).
    The strings are kept as one text and offsets (``word``): a crawl's page processes share
    this dictionary copy-on-write, and handing out the stored word objects would write their
    reference counts, copying the pages they sit on into every process.
    """

    def __init__(self, freq: dict[str, int], total: float) -> None:
        self.log_total = log(total)
        words, counts, codes, starts, lengths = _han_entries(freq)
        self.n_nodes = len(words)
        distinct, inverse = np.unique(counts, return_inverse=True)
        values = [log(count) - self.log_total if count else np.nan for count in distinct.tolist()]
        self.log_prob = np.array(values, dtype=np.float64)[inverse]
        last = codes[starts + lengths - 1]
        singles = int(np.searchsorted(lengths, 2))
        self.root = np.full(_N_CODES + 1, -1, dtype=np.int64)
        self.root[last[:singles]] = np.arange(singles)
        parents = _parents(codes, starts, lengths, self.root)
        self.children = _BucketTable((parents[singles:] << _CODE_BITS) | last[singles:],
                                     np.arange(singles, len(words), dtype=np.int32))
        strings = words + [chr(_HAN_FIRST + offset) for offset in range(_N_CODES)]
        self.text = "".join(strings)
        self.offsets = np.cumsum([0, *map(len, strings)])  # an array: no int objects to share

    def words(self, ids: np.ndarray) -> list[str]:
        """The strings of token ids, each a new object."""
        text = self.text
        starts, ends = self.offsets[ids].tolist(), self.offsets[ids + 1].tolist()
        return [text[start:end] for start, end in zip(starts, ends, strict=True)]


def _han_entries(freq: dict[str, int]) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray,
                                                np.ndarray]:
    """jieba's Han-only entries, shortest first: the entries themselves (no copies), their
    counts, and their characters' codes (all in one array: start and length of each entry).
    Arrays throughout, hardly a Python object made: the dict holds half a million entries."""
    keys = np.array(list(freq), dtype=object)
    lengths = np.fromiter(map(len, keys), dtype=np.int64, count=len(keys))
    codes = np.frombuffer("".join(keys).encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    codes = codes.astype(np.int32) - np.int32(_HAN_FIRST - 1)  # non-Han: out of 1.._N_CODES
    starts = np.cumsum(lengths) - lengths
    nonempty = lengths > 0
    is_han = np.zeros(len(keys), dtype=bool)
    if len(codes):
        in_range = (codes >= 1) & (codes <= _N_CODES)
        is_han[nonempty] = np.logical_and.reduceat(in_range, starts[nonempty])
    kept = np.flatnonzero(is_han)
    order = kept[np.argsort(lengths[kept], kind="stable")]
    counts = np.fromiter(freq.values(), dtype=np.int64, count=len(keys))[order]
    return keys[order].tolist(), counts, codes, starts[order], lengths[order]


def _parents(codes: np.ndarray, starts: np.ndarray, lengths: np.ndarray,
             root: np.ndarray) -> np.ndarray:
    """The node of ``word[:-1]`` for each word (-1 for single characters), for words sorted by
    length whose prefixes are all words: one word length at a time, each word's prefix node
    moves one character on by a sorted look-up of the nodes of that length."""
    parents = np.full(len(lengths), -1, dtype=np.int64)
    prefix = root[codes[starts]]  # node of each word's first character
    bounds = np.searchsorted(lengths, np.arange(int(lengths.max(initial=0)) + 2)).tolist()
    for length in range(2, len(bounds) - 1):
        begin, end = bounds[length], bounds[length + 1]
        parents[begin:end] = prefix[begin:end]
        keys = (prefix[begin:end] << _CODE_BITS) | codes[starts[begin:end] + length - 1]
        order = np.argsort(keys)
        longer = (prefix[end:] << _CODE_BITS) | codes[starts[end:] + length - 1]
        place = np.minimum(np.searchsorted(keys[order], longer), max(len(keys) - 1, 0))
        if len(longer) and not np.array_equal(keys[order][place], longer):
            raise ValueError("jieba's dictionary lacks a prefix of one of its words")
        prefix[end:] = begin + order[place]
    return parents


_dictionary_lock = threading.Lock()
_dictionary_built: list[_HanDictionary] = []
_build_started = threading.Event()


def prepare(texts: Iterable[str]) -> None:
    """Build the batch segmentation's dictionary now (about a second, once per process) if one
    of ``texts`` holds Han characters; benchmarks use it to keep the build out of timings."""
    if not _dictionary_built and any(isinstance(text, str) and _HAN_CHAR.search(text)
                                     for text in texts):
        _dictionary()


def _dictionary() -> _HanDictionary:
    """The array form of jieba's dictionary, built on first use and then shared."""
    if not _dictionary_built:
        with _dictionary_lock:
            if not _dictionary_built:
                jieba.dt.check_initialized()
                _dictionary_built.append(_HanDictionary(jieba.dt.FREQ, jieba.dt.total))
    return _dictionary_built[0]


def _ready_dictionary() -> _HanDictionary | None:
    """The array dictionary if it is built; else None, and its build starts in a background
    thread: meanwhile runs are segmented one by one, so no crawl thread waits for the build."""
    if _dictionary_built:
        return _dictionary_built[0]
    if not _build_started.is_set():
        _build_started.set()
        threading.Thread(target=_dictionary, name="jieba-arrays", daemon=True).start()
    return None


def _segment_batch(runs: list[str], dictionary: _HanDictionary) -> list[tuple[str, ...]]:
    """:func:`_segment_run` of each run, all runs at once by :func:`_han_words`."""
    starts, ids = _han_words("\n".join(runs), dictionary)
    words = dictionary.words(ids)
    run_starts = np.cumsum([0] + [len(run) + 1 for run in runs[:-1]])
    bounds = [*np.searchsorted(starts, run_starts).tolist(), len(words)]
    return [tuple(words[begin:end]) for begin, end in zip(bounds[:-1], bounds[1:], strict=True)]


def _han_words(text: str, dictionary: _HanDictionary) -> tuple[np.ndarray, np.ndarray]:
    """Start position and token id of each word of the Han runs of ``text``, in order.

    The same route as :func:`_segment_run` on every run: every dictionary word of the text is an
    edge (one array step per word length); the best score from every position to the end of its
    run is a shortest-path search over the reversed edges (scipy's Dijkstra adds
    ``-log_prob + distance(end)``: :func:`_segment_run`'s float sums, negated); each position
    keeps its best edge, the longest among equals.
    """
    codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    codes = codes.astype(np.int64) - (_HAN_FIRST - 1)
    n = len(codes)
    han = (codes >= 1) & (codes <= _N_CODES)
    codes = np.append(np.where(han, codes, 0), 0)
    starts, ends, ids, weights = _edges(codes, han, dictionary)
    by_end = np.argsort(ends, kind="stable")
    indptr = np.zeros(n + 2, dtype=np.int32)
    np.cumsum(np.bincount(ends, minlength=n + 1), out=indptr[1:])
    reversed_edges = sp.csr_matrix((weights[by_end], starts[by_end].astype(np.int32), indptr),
                                   shape=(n + 1, n + 1))
    sinks = np.flatnonzero(np.append(~han, True))  # the ends of runs: score 0
    score = -dijkstra(reversed_edges, directed=True, indices=sinks, min_only=True)
    best = np.flatnonzero(-weights + score[ends] == score[starts])
    chosen = np.full(n, -1, dtype=np.int64)
    np.maximum.at(chosen, starts[best], best)  # a position's edges run shortest to longest
    words = chosen[_on_route(han, ends[chosen[han]])]
    return starts[words], ids[words]


def _edges(codes: np.ndarray, han: np.ndarray, dictionary: _HanDictionary
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(start, end, token id, weight = -log prob) of every edge: the dictionary words found in
    the text, shortest first, then a lone character at each Han position that starts none."""
    position = np.flatnonzero(han)
    node = dictionary.root[codes[position]]
    found_starts, found_nodes = [], []
    while len(position):
        alive = node >= 0
        position, node = position[alive], node[alive]
        found_starts.append(position)
        found_nodes.append(node)
        node = dictionary.children.get((node << _CODE_BITS) | codes[position + len(found_starts)])
    starts, nodes = np.concatenate(found_starts), np.concatenate(found_nodes)
    lengths = np.repeat(np.arange(1, len(found_starts) + 1), [len(s) for s in found_starts])
    log_prob = dictionary.log_prob[nodes]
    is_word = ~np.isnan(log_prob)
    starts, nodes = starts[is_word], nodes[is_word]
    has_word = np.zeros(len(han), dtype=bool)
    has_word[starts] = True
    lone = np.flatnonzero(han & ~has_word)
    return (np.concatenate((starts, lone)),
            np.concatenate((starts + lengths[is_word], lone + 1)),
            np.concatenate((nodes, dictionary.n_nodes + codes[lone] - 1)),
            np.concatenate((-log_prob[is_word], np.full(len(lone), dictionary.log_total))))


def _on_route(han: np.ndarray, next_start: np.ndarray) -> np.ndarray:
    """Whether each position starts a word of its run's route: the positions reached from the
    run starts along the best edges (``next_start``: where the best edge of each Han position,
    in order, ends), by one breadth-first search from a root linked to every run start."""
    n = len(han)
    run_starts = np.flatnonzero(han & np.append(True, ~han[:-1]))
    indptr = np.zeros(n + 3, dtype=np.int32)  # nodes 0..n (n: the end), then the root
    np.cumsum(np.append(han, False), out=indptr[1 : n + 2])
    indptr[n + 2] = indptr[n + 1] + len(run_starts)
    targets = np.concatenate((next_start, run_starts)).astype(np.int32)
    edges = sp.csr_matrix((np.ones(len(targets)), targets, indptr), shape=(n + 2, n + 2))
    reached = np.zeros(n + 2, dtype=bool)
    reached[breadth_first_order(edges, n + 1, directed=True, return_predecessors=False)] = True
    return reached[:n] & han
