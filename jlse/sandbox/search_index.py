"""The sandbox search engine's index, built once from the rendered pages.

- Plain queries: BM25 (k1 1.2, b 0.75) over each page's title and visible text, tokenised by
  the project's tokenizer (Chinese words and English words alike).
- ``link:URL``: the pages whose ``<a href>`` resolves to URL (the web's true link graph).
- ``related:URL``: pages of other sites whose BM25 score is highest for URL's title and its
  twenty terms of highest BM25 weight times idf.
"""

from __future__ import annotations

import html
import logging
import re
import time
from collections.abc import Iterable
from urllib.parse import urljoin, urlsplit

import numpy as np

from jlse.models.bm25 import FieldBM25
from jlse.models.tokenizer import tokenize, tokenize_many

log = logging.getLogger(__name__)

K1, B = 1.2, 0.75
SNIPPET_CHARS = 200
RELATED_TERMS = 20

# The sandbox's own HTML is regular, so regular expressions extract what lxml would, six times
# faster (the index of the discovery web is built while a client waits for its first answer).
_TITLE = re.compile(r"<title>(.*?)</title>", re.S)
_HREF = re.compile(r'<a\s[^>]*?href="([^"]*)"')
_TAG = re.compile(r"<[^>]*>")
_SCRIPT = re.compile(r"<(script|style)\b.*?</\1>", re.S | re.I)
_PARAGRAPH = re.compile(r"<p>(.*?)</p>", re.S)
_SPACE = re.compile(r"\s+")
_HAN_RUN = re.compile("[\u4e00-\u9fd5]+")  # the tokenizer's Han range: it segments such runs
# Han runs, CJK punctuation and the copyright sign: no Latin token holds them or spans them
_NOT_LATIN = re.compile("[\u4e00-\u9fd5\u3000-\u303f\uff01\uff08\uff09\uff0c\uff1a\uff1b"
                        "\uff1f\uffe5\xa9]+")
_RUN_SEPARATOR = "qqrunbreakqq"  # a Latin word no sandbox page holds
RUNS_PER_BATCH = 2000


def url_key(url: str) -> str | None:
    """``host/path?query`` of an http(s) URL (scheme, default port and fragment dropped);
    a URL without a scheme is taken as http. None when it is no web URL."""
    url = url.strip()
    if "://" not in url:
        url = "http://" + url
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    host = parts.hostname.lower() + (f":{port}" if port not in (None, 80, 443) else "")
    return host + (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


def _text(fragment: str) -> str:
    return _SPACE.sub(" ", html.unescape(_TAG.sub(" ", fragment))).strip()


def _snippet(page: str) -> str:
    """About SNIPPET_CHARS characters of the page's main content, paragraphs first."""
    start = page.find('<div id="main">')
    end = page.find('<div id="sidebar">', start)
    main = page[start:end] if start >= 0 and end > start else page
    text = ""
    for paragraph in _PARAGRAPH.finditer(main):
        text = f"{text} {_text(paragraph.group(1))}".strip()
        if len(text) > SNIPPET_CHARS:
            break
    text = text or _text(main)
    if len(text) <= SNIPPET_CHARS:
        return text
    cut = text.rfind(" ", SNIPPET_CHARS - 40, SNIPPET_CHARS)
    return text[:cut if cut > 0 else SNIPPET_CHARS].rstrip() + " …"


def _run_words(runs: list[str]) -> dict[str, list[str]]:
    """The tokens of each Han run, RUNS_PER_BATCH runs a ``tokenize`` call (its batch
    segmentation wants long texts), split again at a separator word."""
    words: dict[str, list[str]] = {}
    for start in range(0, len(runs), RUNS_PER_BATCH):
        batch = runs[start:start + RUNS_PER_BATCH]
        current: list[str] = []
        found = iter(batch)
        for token in tokenize(f" {_RUN_SEPARATOR} ".join(batch)):
            if token == _RUN_SEPARATOR:
                words[next(found)], current = current, []
            else:
                current.append(token)
        words[next(found)] = current
    return words


def tokenize_texts(texts: list[str]) -> list[list[str]]:
    """``tokenize(text)`` of each text as a bag of words (the order differs).

    The tokenizer segments each Han run on its own and finds Latin words between them, so a
    text's tokens are its Latin part's plus those of its runs. Pages share many runs (menus,
    clauses): each distinct run is segmented once, and Latin parts, mostly ASCII once the
    runs are out, take ``tokenize_many``'s fast path: a third faster on the discovery web."""
    runs = [_HAN_RUN.findall(text) for text in texts]
    words = _run_words(list(dict.fromkeys(run for found in runs for run in found)))
    latin = tokenize_many([_NOT_LATIN.sub(" ", text) for text in texts])
    for tokens, found in zip(latin, runs, strict=True):
        for run in found:
            tokens.extend(words[run])
    return latin


def _link_keys(url: str, key: str, page: str) -> set[str]:
    """Keys of the distinct pages one page links to (itself excepted)."""
    host = key.split("/", 1)[0]
    keys = set()
    for href in map(html.unescape, _HREF.findall(page)):
        if href.startswith("http://") and "#" not in href:  # canonical already: no parsing
            found: str | None = href[len("http://"):]
            found = found if "/" in found else found + "/"
        elif href.startswith("/") and not href.startswith("//") and "#" not in href:
            found = host + href
        else:
            found = url_key(urljoin(url, href).partition("#")[0])
        if found is not None and found != key:
            keys.add(found)
    return keys


class SearchIndex:
    """Every page given at construction (``(url, html)`` pairs), searchable three ways."""

    def __init__(self, pages: Iterable[tuple[str, str]]) -> None:
        started = time.monotonic()
        self.urls: list[str] = []
        self.titles: list[str] = []
        self.snippets: list[str] = []
        self.hosts: list[str] = []
        self._doc_of: dict[str, int] = {}
        self._in_links: dict[str, list[int]] = {}
        texts = [self._add(url, page) for url, page in pages]
        self.bm25 = FieldBM25(k1=K1, b=B).fit(tokenize_texts(texts))
        self._terms = np.array(list(self.bm25.vocabulary_), dtype=object)
        self.build_seconds = time.monotonic() - started
        log.info("sandbox search: indexed %d pages in %.1f s", len(self.urls),
                 self.build_seconds)

    def _add(self, url: str, page: str) -> str:
        """Record one page; its title and visible text."""
        doc, key = len(self.urls), url_key(url) or url
        match = _TITLE.search(page)
        title = _text(match.group(1)) if match else url
        self.urls.append(url)
        self.titles.append(title)
        self.snippets.append(_snippet(page))
        self.hosts.append(key.split("/", 1)[0])
        self._doc_of[key] = doc
        for target in _link_keys(url, key, page):
            self._in_links.setdefault(target, []).append(doc)
        body = _SCRIPT.sub(" ", page[max(page.find("<body"), 0):])
        return title + " " + html.unescape(_TAG.sub(" ", body))

    def __len__(self) -> int:
        return len(self.urls)

    def _ranked(self, terms: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(documents, scores) matching any of ``terms``, best first, ties in web order."""
        if not terms:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        row = self.bm25.score([terms]).tocsr()
        docs, scores = row.indices.astype(np.int64), row.data.astype(np.float64)
        order = np.lexsort((docs, -scores))
        return docs[order], scores[order]

    def search(self, text: str) -> list[tuple[int, float]]:
        """(document, score) of a plain query, best first."""
        docs, scores = self._ranked(tokenize(text))
        return list(zip(docs.tolist(), scores.tolist(), strict=True))

    def links_to(self, url: str) -> list[tuple[int, float]]:
        """(document, 1.0) of the pages linking to ``url``: other sites' first, in web order."""
        key = url_key(url)
        sources = self._in_links.get(key, []) if key else []
        host = key.split("/", 1)[0] if key else ""
        ordered = sorted(sources, key=lambda doc: (self.hosts[doc] == host, doc))
        return [(doc, 1.0) for doc in ordered]

    def top_terms(self, doc: int, count: int = RELATED_TERMS) -> list[str]:
        """The ``count`` terms of a page with the highest BM25 weight times idf."""
        row = self.bm25.doc_weights_[doc]
        weights = row.data * self.bm25.idf_[row.indices]
        best = row.indices[np.lexsort((row.indices, -weights))[:count]]
        return self._terms[best].tolist()

    def related(self, url: str) -> list[tuple[int, float]]:
        """(document, score) of pages of other sites most similar to ``url``'s page."""
        key = url_key(url)
        doc = self._doc_of.get(key) if key else None
        if doc is None:
            return []
        terms = list(dict.fromkeys(tokenize(self.titles[doc]) + self.top_terms(doc)))
        docs, scores = self._ranked(terms)
        other = np.array([self.hosts[d] != self.hosts[doc] for d in docs.tolist()], dtype=bool)
        return list(zip(docs[other].tolist(), scores[other].tolist(), strict=True))
