"""A parsed page's out-links: canonical, deduplicated, with anchor text and DOM context, and
at most ``max_links`` of them, chosen so that no single host crowds out the others.

The walker (``jlse.workers.parser``) collects every ``<a href>``/``<area href>`` as an
``OpenLink`` that indexes the page's visible-text stream; ``resolve_links`` turns them into
``Link`` records. Canonicalising a URL is the costly step (tens of microseconds), so on a page
with more distinct hrefs than the cap only the links that will be kept are canonicalised.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from itertools import accumulate

from jlse.records import Link
from jlse.scheduler.urls import canonicalize

CONTEXT_CHARS = 400  # cap on a link's context
ANCHOR_CHARS = 300  # cap on the merged anchor texts of one URL


@dataclass
class OpenLink:
    """An <a href>/<area href> as the walk met it; ``start``/``end`` index the text stream."""

    href: str
    depth: int  # open-element depth of the link element, to know when it closes
    start: int
    ancestor: list[int]  # [start, end] of the context ancestor in the stream
    counted: bool  # an <a href> (counted in the stats), not an <area>
    parts: list[str] = field(default_factory=list)  # its text pieces
    alts: list[str] = field(default_factory=list)  # alt/title of images inside it
    end: int = -1

    @property
    def text(self) -> str:
        return " ".join((*self.parts, *self.alts))


def resolve_links(links: list[OpenLink], anchor_texts: list[str], pieces: list[str],
                  base_url: str, max_links: int) -> tuple[list[Link], int]:
    """(canonical deduplicated links, how many distinct hrefs were cut by ``max_links``).

    A URL keeps its first occurrence's context and the distinct anchor texts of all its
    occurrences. Over the cap, the kept links are a round robin over the hosts the hrefs name
    (``spread_order``), listed in document order."""
    order: range | list[int] = range(len(links))
    distinct = len({link.href for link in links})
    if distinct > max_links:
        order = spread_order(links, base_url)
    resolved: dict[str, str | None] = {}  # raw href -> canonical URL
    first: dict[str, int] = {}  # canonical URL -> index of its first occurrence
    for index in order:
        href = links[index].href
        if href in resolved:
            url = resolved[href]
            if url is not None and index < first[url]:
                first[url] = index
            continue
        if len(first) >= max_links:
            break
        url = resolved[href] = canonicalize(href, base_url)
        if url is not None and (url not in first or index < first[url]):
            first[url] = index
    context = _ContextReader(pieces)
    anchors: dict[str, list[str]] = {url: [] for url in first}
    for link, anchor in zip(links, anchor_texts, strict=True):
        url = resolved.get(link.href)
        if url is not None and anchor and anchor not in anchors[url]:
            anchors[url].append(anchor)
    kept = [Link(url, context=context.around(links[index]),
                 anchor_text=cut_words(" ".join(anchors[url]), ANCHOR_CHARS, keep_end=False))
            for url, index in sorted(first.items(), key=lambda item: item[1])]
    return kept, max(0, distinct - len(resolved))


def spread_order(links: list[OpenLink], base_url: str) -> list[int]:
    """Link indices in round-robin order over the hosts their hrefs name (relative hrefs name
    the page's host), each host's links in document order: the first link to every host comes
    before any host's second. A cut then keeps the one link to another site that a page of
    10,000 links to its own trap hides at its end."""
    base_host = _raw_host(base_url, "")
    seen: dict[str, int] = {}
    keys = []
    for index, link in enumerate(links):
        host = _raw_host(link.href, base_host)
        rank = seen.get(host, 0)
        seen[host] = rank + 1
        keys.append((rank, index))
    keys.sort()
    return [index for _, index in keys]


def _raw_host(href: str, base_host: str) -> str:
    """The host part of an absolute or scheme-relative href, lowercased, else ``base_host``
    (cheap: no parsing, no IDNA)."""
    start = href.find("//")
    if start < 0 or (start > 0 and href[start - 1] != ":"):
        return base_host
    rest = href[start + 2:]
    end = len(rest)
    for stop in "/?#\\":
        found = rest.find(stop)
        if 0 <= found < end:
            end = found
    return rest[:end].lower() or base_host


class _ContextReader:
    """Link contexts from the text stream.

    The paper's context is the text of the DOM nodes within tree distance delta of the link.
    Approximation used here: the text of the ancestor delta//2 levels up (all of its subtree),
    without the link's own text, keeping the text nearest the link: at most CONTEXT_CHARS
    characters, split between the two sides. Cumulative piece lengths make each context cost
    a bisection and one bounded slice, whatever the size of the ancestor.
    """

    RAW_CHARS = 2 * CONTEXT_CHARS  # stream characters read on each side before cutting

    def __init__(self, pieces: list[str]) -> None:
        self.pieces = pieces
        self.offsets = list(accumulate((len(piece) + 1 for piece in pieces), initial=0))

    def around(self, link: OpenLink) -> str:
        first, last = link.ancestor
        before = self._before(first, link.start)
        after = self._after(link.end, last)
        before = cut_words(before, max(CONTEXT_CHARS // 2, CONTEXT_CHARS - len(after) - 1),
                           keep_end=True)
        after = cut_words(after, CONTEXT_CHARS - len(before) - 1, keep_end=False)
        return f"{before} {after}".strip()

    def _before(self, first: int, start: int) -> str:
        """About RAW_CHARS of stream text ending at piece ``start`` (not before ``first``)."""
        limit = self.RAW_CHARS
        # the piece holding the cut point, or ``first``
        lo = bisect_right(self.offsets, self.offsets[start] - limit, first + 1, start + 1) - 1
        if lo >= start:
            return ""
        return " ".join((self.pieces[lo][-limit:], *self.pieces[lo + 1 : start]))

    def _after(self, end: int, last: int) -> str:
        """About RAW_CHARS of stream text from piece ``end`` on (not reaching ``last``)."""
        limit = self.RAW_CHARS
        # pieces[end:hi] start before the cut point
        hi = bisect_left(self.offsets, self.offsets[end] + limit, end, last)
        if hi <= end:
            return ""
        return " ".join((*self.pieces[end : hi - 1], self.pieces[hi - 1][:limit]))


def cut_words(text: str, limit: int, keep_end: bool) -> str:
    """``text`` cut to ``limit`` characters, keeping its start or its end; a word cut in two is
    dropped when the cut part has a space to cut at (CJK text has none)."""
    if len(text) <= limit:
        return text
    if limit <= 0:
        return ""
    if keep_end:
        cut = text[len(text) - limit :]
        partial = text[len(text) - limit - 1] != " "
        return cut.partition(" ")[2] if partial and " " in cut else cut
    cut = text[:limit]
    partial = text[limit] != " "
    return cut.rpartition(" ")[0] if partial and " " in cut else cut
