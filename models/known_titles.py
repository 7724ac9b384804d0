"""Links that name a page the crawl has already judged: the same story on another site, a reply
in the same thread, the same product in another shop.

An anchor is usually its page's title, often cut short. When a link's anchor and the title of a
page the crawl has fetched share their words from the first on (one is a prefix of the other,
at least ``MIN_WORDS`` words, a reply's leading "re" dropped), the link most likely leads to a
copy of that page, and the crawl already knows what its classifier makes of that text: on the
newswire web such links led to a page judged as their namesake in 92-99% of the fetches
(docs/strategies.md, "Known titles"). The strategy ranks them by that judgement instead of by
the link evidence and the site's and URL shape's harvest, which average over the many other
pages of a mixed section.

A link queued before its namesake was judged is raised when it is: the links not yet fetched
are remembered by their anchors (the ``max_pending`` most recent), and a page judged relevant
names the ones its title begins (:meth:`KnownTitles.named_by`).

Bounded: the ``max_titles`` most recent titles and ``max_pending`` most recent links are kept
(about 300 bytes each).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

MIN_WORDS = 4  # fewer words name a section or a site ("World news", "Home"), not a page;
# a Han character counts half a word (Chinese words are mostly two characters)
MAX_TITLES = 50_000
MAX_PENDING = 50_000
_WORDS = re.compile(r"[\u3400-\u9fff]|[^\W_\u3400-\u9fff]+")  # a Han character is a word
_REPLY = ("re", "fwd", "fw")


def _long_enough(words: list[str]) -> bool:
    han = sum(1 for word in words if len(word) == 1 and "\u3400" <= word <= "\u9fff")
    return len(words) - han / 2 >= MIN_WORDS


def title_words(text: str) -> list[str]:
    """The lower-case words of a title or anchor, leading reply markers dropped."""
    words = _WORDS.findall(text.lower())
    start = 0
    while start < len(words) and words[start] in _REPLY:
        start += 1
    return words[start:]


class KnownTitles:
    """The judged weight of each page title the crawl has fetched, looked up by anchor; the
    links not yet fetched that name no judged page, by anchor. Thread-safe."""

    def __init__(self, max_titles: int = MAX_TITLES, max_pending: int = MAX_PENDING) -> None:
        self.max_titles = max_titles
        self.max_pending = max_pending
        self._weights: dict[str, float] = {}  # a title's words -> its page's weight, oldest first
        self._titles: dict[str, list[str]] = {}  # first words -> the titles that begin so
        # a link's url -> (its anchor's words, parent id, depth), oldest first; and by first words
        self._links: dict[str, tuple[str, int | None, int]] = {}
        self._urls: dict[str, list[str]] = {}
        self._ranked: dict[str, None] = {}  # links ranked by a title, oldest first
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._weights)

    def observe(self, title: str, weight: float) -> None:
        """A page titled ``title`` was judged: ``weight`` is what it passes to its links."""
        words = title_words(title)
        if not _long_enough(words):
            return
        joined = " ".join(words)
        with self._lock:
            if self._weights.pop(joined, None) is None:  # the newest judgement, last in the order
                self._titles.setdefault(_start(words), []).append(joined)
            self._weights[joined] = float(weight)
            if len(self._weights) > self.max_titles:
                oldest = next(iter(self._weights))
                del self._weights[oldest]
                _drop(self._titles, _start(oldest.split()), oldest)

    def name(self, links: Sequence[Any]) -> np.ndarray:
        """For each link (``url``, ``anchor_text``, ``parent_id``, ``depth``), the mean weight
        of the judged pages its anchor names, NaN for none; a link that names none is
        remembered, to be named later (:meth:`named_by`)."""
        found = np.full(len(links), np.nan)
        with self._lock:
            for i, link in enumerate(links):
                words = title_words(link.anchor_text)
                if not _long_enough(words):
                    continue
                start = _start(words)
                named = [self._weights[title] for title in self._titles.get(start, ())
                         if _same_start(words, title.split())]
                if named:
                    found[i] = sum(named) / len(named)
                elif link.url not in self._links:
                    self._remember(start, words, link)
        return found

    def rank(self, url: str) -> None:
        """``url`` was ranked by the page its anchor names (:meth:`ranked`)."""
        with self._lock:
            self._ranked[url] = None
            if len(self._ranked) > self.max_pending:
                del self._ranked[next(iter(self._ranked))]

    def ranked(self, url: str) -> bool:
        """Whether ``url`` was ranked by the page its anchor names (its URL shape's harvest
        does not apply to it)."""
        return url in self._ranked

    def fetched(self, url: str) -> None:
        """``url`` was fetched: it is not named any more."""
        with self._lock:
            self._forget(url)

    def named_by(self, title: str) -> list[tuple[str, int | None, int]]:
        """The remembered links whose anchors name a page titled ``title``, as (url, parent
        id, depth), forgotten now."""
        words = title_words(title)
        if not _long_enough(words):
            return []
        with self._lock:
            named = [(url, *self._links[url][1:]) for url in self._urls.get(_start(words), ())
                     if _same_start(self._links[url][0].split(), words)]
            for url, _, _ in named:
                self._forget(url)
        return named

    def _remember(self, start: str, words: list[str], link: Any) -> None:
        self._links[link.url] = (" ".join(words), link.parent_id, link.depth)
        self._urls.setdefault(start, []).append(link.url)
        if len(self._links) > self.max_pending:
            self._forget(next(iter(self._links)))

    def _forget(self, url: str) -> None:
        known = self._links.pop(url, None)
        if known is not None:
            _drop(self._urls, _start(known[0].split()), url)


def _start(words: list[str]) -> str:
    return " ".join(words[:MIN_WORDS])


def _drop(table: dict[str, list[str]], start: str, key: str) -> None:
    keys = table.get(start)
    if keys is not None and key in keys:
        keys.remove(key)
        if not keys:
            del table[start]


def _same_start(anchor: list[str], title: list[str]) -> bool:
    """Whether one of the two word sequences begins the other, the shorter one's last word
    possibly cut ("thailan" for "thailand")."""
    last = min(len(anchor), len(title)) - 1
    if anchor[:last] != title[:last]:
        return False
    return anchor[last].startswith(title[last]) or title[last].startswith(anchor[last])
