"""Tokens for every text model: Chinese words (jieba's dictionary), lower-cased Latin words.

Text is normalised first (NFKD: full-width ``ＡＢＣ１２３`` becomes ``abc123``, accents are
dropped, curly apostrophes become ``'``). Then:

- Chinese runs (jieba's Han range) are segmented exactly as ``jieba.lcut(run, HMM=False)`` does,
  by :func:`_segment_run` - the same maximum-probability route over jieba's dictionary, written
  without jieba's per-call overhead (about 2x faster, checked against jieba in the tests).
- Latin words are ``[a-z0-9][a-z0-9'-]*`` with trailing ``'``/``-`` removed; a word without a
  letter (``2024``, ``12-05``) or of one character is dropped. Starting at a digit keeps
  ``5g``, ``4k``, ``1080p``.
- English and Chinese stop words (``models/data``) are removed; punctuation, whitespace and other
  scripts never form tokens.

Repeated short strings (anchor texts, boilerplate clauses) are served from LRU caches.
"""

from __future__ import annotations

import logging
import re
import unicodedata
from functools import lru_cache
from importlib import resources
from math import log

import jieba

logger = logging.getLogger(__name__)
jieba.setLogLevel(logging.WARNING)

_HAN = "\u4e00-\u9fd5"  # the Han range jieba segments; other CJK characters are not tokens
_TOKEN = re.compile(rf"([{_HAN}]+)|([a-z0-9][a-z0-9'-]*)")
_COMBINING_MARK = re.compile("[\u0300-\u036f]")
_APOSTROPHES = ("\u2019", "\u2018", "\u02bc")  # replaced one by one: str.translate is slow here
_NOT_LETTERS = "0123456789'-"
_CACHED_TEXT_CHARS = 200  # whole texts up to this length are cached (anchor texts)
_CACHED_RUN_CHARS = 40  # Chinese runs up to this length are cached (clauses, not paragraphs)


def _load_stopwords(name: str) -> frozenset[str]:
    text = resources.files("models").joinpath("data", name).read_text(encoding="utf-8")
    words = (line.strip() for line in text.splitlines())
    return frozenset(word for word in words if word and not word.startswith("#"))


STOPWORDS: frozenset[str] = _load_stopwords("stopwords_en.txt") | _load_stopwords("stopwords_zh.txt")


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
    tokens: list[str] = []
    for han, latin in _TOKEN.findall(_normalise(text)):
        if han:
            tokens.extend(word for word in _segment(han) if word not in STOPWORDS)
            continue
        word = latin.rstrip("'-")
        if len(word) > 1 and word.strip(_NOT_LETTERS) and word not in STOPWORDS:
            tokens.append(word)
    return tokens


def _normalise(text: str) -> str:
    """Lower case, compatibility forms folded, accents dropped, apostrophes unified."""
    text = text.lower()
    if not unicodedata.is_normalized("NFKD", text):
        text = _COMBINING_MARK.sub("", unicodedata.normalize("NFKD", text))
    for apostrophe in _APOSTROPHES:
        text = text.replace(apostrophe, "'")
    return text


def _segment(run: str) -> tuple[str, ...]:
    if len(run) <= _CACHED_RUN_CHARS:
        return _segment_cached(run)
    return _segment_run(run)


@lru_cache(maxsize=65_536)
def _segment_cached(run: str) -> tuple[str, ...]:
    return _segment_run(run)


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
