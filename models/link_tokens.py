"""Tokens of the three fields of link triples (anchor text, URL, context) for the link index.

Anchor and context are tokenised by :func:`models.tokenizer.tokenize` (their first
:data:`TEXT_CHARS` characters), the URL by :func:`url_tokens`. The strings of a page's links are
tokenised together (:func:`models.tokenizer.tokenize_many`, :func:`url_tokens_many`).

The tokens of the anchors and URLs seen lately are cached: they repeat from page to page
(navigation, templates), and the anchor similarity tokenises a page's anchors just before the
link index does. Of contexts only the last list tokenised is kept (:class:`_LastTexts`): a
context seen again on a later page nearly always comes with its whole link, which the link index
answers from memory (a cache of contexts cost tens of MB for nothing), but the link-text model
reads the same page's contexts just after the link index (:func:`link_text_tokens`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from itertools import filterfalse, repeat
from operator import is_
from urllib.parse import unquote, unquote_plus, urlsplit

from jlse.models.tokenizer import tokenize, tokenize_many

TEXT_CHARS = 400  # anchors and contexts are cut to this (the parser's cap on contexts)

# URL tokens for the url field; scheduler.urls re-exports url_tokens (through link_index).
_URL_WORD = re.compile(r"[^\W_]+")
COMMON_URL_TOKENS = frozenset(
    ("http", "https", "www", "com", "net", "org", "html", "htm", "shtml", "php", "asp", "aspx",
     "jsp", "cgi", "index", "default")
)
# ASCII byte -> itself lower-cased if ``_URL_WORD`` keeps it (a letter or digit), else a blank;
# the second table keeps _SEPARATOR (no word character), to split texts joined by it again.
_URL_WORD_BYTES = bytes(ord(chr(byte).lower()) if chr(byte).isascii() and chr(byte).isalnum()
                        else ord(" ") for byte in range(256))
_SEPARATOR = "\x00"
_SEPARATED_URL_WORD_BYTES = _SEPARATOR.encode("ascii") + _URL_WORD_BYTES[1:]
_URL_NOT_TOKENS = COMMON_URL_TOKENS | frozenset("0123456789")


def url_tokens(url: str) -> list[str]:
    """Lower-case word tokens of the URL's host (without ``www`` and the TLD), path and query.
    One-character numbers and common tokens (``html``, ``php``, ``com``, ...) are dropped."""
    return _url_text_tokens(_url_text(url))


def url_tokens_many(urls: Sequence[str]) -> list[list[str]]:
    """:func:`url_tokens` of each URL; the words of the ASCII ones are split apart together."""
    texts = list(map(_url_text, urls))
    tokens: list = [None] * len(texts)
    plain = [i for i, text in enumerate(texts) if text.isascii()]
    joined = _SEPARATOR.join([texts[i] for i in plain])
    if plain and joined.count(_SEPARATOR) == len(plain) - 1:  # else a URL holds the separator
        joined = joined.encode("ascii").translate(_SEPARATED_URL_WORD_BYTES).decode("ascii")
        for i, piece in zip(plain, joined.split(_SEPARATOR), strict=True):
            tokens[i] = list(filterfalse(_URL_NOT_TOKENS.__contains__, piece.split()))
    for i in [i for i, found in enumerate(tokens) if found is None]:
        tokens[i] = _url_text_tokens(texts[i])
    return tokens


def _url_text(url: str) -> str:
    """The text whose words are the URL's tokens: host labels, path and query; "" if ``url``
    is not a URL."""
    parts = _url_parts(url)
    if parts is None:
        return ""
    host, path, query = parts
    labels = host.split(".")
    if labels and labels[0] == "www":
        labels = labels[1:]
    if len(labels) > 1:
        labels = labels[:-1]
    return " ".join((*labels, unquote(path) if "%" in path else path,
                     unquote_plus(query) if query else ""))


def _url_text_tokens(text: str) -> list[str]:
    if text.isascii():  # the usual case: C-speed steps, the same words as the regex finds
        words = text.encode("ascii").translate(_URL_WORD_BYTES).decode("ascii").split()
        return list(filterfalse(_URL_NOT_TOKENS.__contains__, words))
    return [
        token
        for token in _URL_WORD.findall(text.lower())
        if token not in COMMON_URL_TOKENS and not (token.isdigit() and len(token) < 2)
    ]


# ``scheme://host[:port]/path?query#fragment`` with a plain ASCII host and no blanks or control
# characters: split by one regex, exactly as ``urlsplit(url)`` and its ``.hostname`` would
# (checked in the tests); anything else goes through ``urlsplit``.
_PLAIN_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://([!\"$-.0->@-~]*)([/?#][^\x00-\x20]*)?")
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


def text_tokens_many(texts: Sequence[str]) -> list[list[str]]:
    """:func:`text_tokens` of each text, all tokenised together."""
    return tokenize_many([text[:TEXT_CHARS] if isinstance(text, str) else text for text in texts])


class _TokenCache:
    """Token tuples of the strings seen lately, forgotten all at once when ``max_entries`` are
    held; the texts not cached are tokenised together by ``tokens_many`` (a list of texts ->
    their token lists; a text repeated among them is tokenised each time, which costs less than
    finding the repeats). A plain dict: its look-ups cost a fraction of ``lru_cache`` calls, and
    its get and set are atomic across threads."""

    def __init__(self, tokens_many: Callable[[list], list[Sequence[str]]],
                 max_entries: int) -> None:
        self.tokens_many = tokens_many
        self.max_entries = max_entries
        self.entries: dict[str, tuple[str, ...]] = {}

    def many(self, texts: Sequence[str]) -> list[Sequence[str]]:
        """The tokens of each text as tuples (not a string: tokenised, not cached)."""
        try:
            found = list(map(self.entries.get, texts))
        except TypeError:  # an unhashable non-string
            found = [None] * len(texts)
        missing = [i for i, tokens in enumerate(found) if tokens is None]
        if not missing:
            return found
        new = [texts[i] for i in missing]
        tokens = list(map(tuple, self.tokens_many(new)))
        for i, text_tokens in zip(missing, tokens, strict=True):
            found[i] = text_tokens
        if not all(map(isinstance, new, repeat(str))):
            strings = [i for i, text in enumerate(new) if isinstance(text, str)]
            new, tokens = [new[i] for i in strings], [tokens[i] for i in strings]
        if len(self.entries) + len(new) > self.max_entries:
            self.entries.clear()
        self.entries.update(zip(new, tokens, strict=True))
        return found


# A cached anchor or URL costs about half a KB: these caches stay under ~10 MB.
_TEXT_TOKENS = _TokenCache(text_tokens_many, 8192)
_URL_TOKENS = _TokenCache(url_tokens_many, 8192)


class _LastTexts:
    """The tokens of the last list of texts tokenised, handed out again for the same strings
    (the very objects). One slot, replaced whole: safe across threads."""

    def __init__(self, tokens_many: Callable[[list], list[Sequence[str]]]) -> None:
        self.tokens_many = tokens_many
        self.last: tuple[list, list[tuple[str, ...]]] = ([], [])

    def many(self, texts: Sequence[str]) -> list[tuple[str, ...]]:
        seen, tokens = self.last
        if len(texts) == len(seen) and all(map(is_, texts, seen)):
            return tokens
        tokens = list(map(tuple, self.tokens_many(list(texts))))
        self.last = (list(texts), tokens)
        return tokens


_CONTEXT_TOKENS = _LastTexts(text_tokens_many)


def anchor_tokens(anchors: Sequence[str]) -> list[Sequence[str]]:
    """:func:`text_tokens` of each anchor, from the cache the link index reads."""
    return _TEXT_TOKENS.many(anchors)


def field_tokens(anchors: Sequence[str], urls: Sequence[str],
                 contexts: Sequence[str]) -> list[list[Sequence[str]]]:
    """Token sequences of each field of query links, in ``FIELDS`` order (anchors and URLs
    cached per string); ValueError if the lengths differ."""
    check_lengths(anchors, urls, contexts)
    return [_TEXT_TOKENS.many(anchors), _URL_TOKENS.many(urls), _CONTEXT_TOKENS.many(contexts)]


def link_texts(anchors: Sequence[str], contexts: Sequence[str]) -> list[str]:
    """``anchor + " " + context`` of each link (what the link-text models read)."""
    return [f"{anchor} {context}".strip() for anchor, context in zip(anchors, contexts, strict=True)]


def link_text_tokens(anchors: Sequence[str], contexts: Sequence[str]) -> list[Sequence[str]]:
    """The tokens of each link's text: its anchor's then its context's (:func:`text_tokens`),
    from the caches the link index has just filled. The same tokens as
    ``tokenize(anchor + " " + context)`` when both are at most :data:`TEXT_CHARS` long (the
    parser's cap on contexts)."""
    if len(anchors) != len(contexts):
        raise ValueError(f"link texts: {len(anchors)} anchors, {len(contexts)} contexts")
    return list(map(tuple.__add__, _TEXT_TOKENS.many(anchors), _CONTEXT_TOKENS.many(contexts)))


def check_lengths(anchors: Sequence[str], urls: Sequence[str], contexts: Sequence[str]) -> None:
    if not len(anchors) == len(urls) == len(contexts):
        raise ValueError(f"link triples: {len(anchors)} anchors, {len(urls)} URLs, "
                         f"{len(contexts)} contexts")
