"""HTML parsing with lxml: metadata, visible text, out-links with their context, the position
blocks of the VSM model (SPEC section 4) and the counts of the result-page classifier.

The tree is walked once (``etree.iterwalk``). Visible text goes into one stream of pieces; every
open element remembers where its text starts and ends in that stream, so a link's context is a
slice of the stream, found without re-reading any subtree.
"""

from __future__ import annotations

import logging
import re
import threading
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from itertools import accumulate

from lxml import etree

from jlse.models.page_stats import PageStats
from jlse.records import Link
from jlse.scheduler.urls import canonicalize

logger = logging.getLogger(__name__)

CONTEXT_CHARS = 400  # cap on a link's context
ANCHOR_CHARS = 300  # cap on the merged anchor texts of one URL
ZH_SHARE = 0.3  # a page is "zh" when at least this share of its words are Han characters

# Not visible text ("head" is walked for title/meta/base; the others are skipped whole).
HIDDEN_TAGS = frozenset(("script", "style", "noscript", "template", "head", "svg", "iframe"))
HEADING_TAGS = frozenset(("h1", "h2", "h3", "h4", "h5", "h6"))
BLOCK_TAGS = HEADING_TAGS | frozenset((
    "html", "body", "address", "article", "aside", "blockquote", "caption", "center", "dd",
    "details", "dialog", "div", "dl", "dt", "fieldset", "figcaption", "figure", "footer", "form",
    "header", "legend", "li", "main", "menu", "nav", "ol", "p", "pre", "section", "summary",
    "table", "tbody", "td", "tfoot", "th", "thead", "tr", "ul",
))
HEAD_TAGS = frozenset(("title", "meta", "base"))

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f"
_WORD = re.compile(rf"[{_CJK}]|[^\W_{_CJK}]+")
_HAN = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f]")
_ASCII_SEPARATORS = str.maketrans({c: " " for c in map(chr, range(128)) if not c.isalnum()})
_HTML_END_TAG = re.compile(r"</html\s*>", re.IGNORECASE)
_PARSERS = threading.local()  # lxml parsers must not be shared between threads


def count_words(text: str) -> int:
    """Words in ``text``: runs of letters/digits, each CJK character counting as one word."""
    # Same result as len(_WORD.findall(text)), several times faster on mostly-ASCII text.
    tokens = text.translate(_ASCII_SEPARATORS).split()
    if text.isascii():
        return len(tokens)
    return sum(1 if token.isascii() else len(_WORD.findall(token)) for token in tokens)


def normalize_space(text: str) -> str:
    return " ".join(text.split())


@dataclass
class ParsedPage:
    url: str  # the page URL (canonical)
    base_url: str  # after <base href>, used to resolve links
    title: str = ""
    description: str = ""  # meta description
    keywords: str = ""  # meta keywords
    text: str = ""  # title + visible text, whitespace-normalised
    links: list[Link] = field(default_factory=list)
    blocks: dict[str, str] = field(default_factory=dict)  # title/headings/body/anchor/meta
    stats: PageStats = field(default_factory=PageStats)
    lang: str = "en"  # "zh" or "en"


@dataclass
class _OpenLink:
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


def _image_texts(element: etree._Element) -> list[str]:
    """The alt and title texts of an image (or image-map area), whitespace-normalised."""
    texts = (normalize_space(element.get(name) or "") for name in ("alt", "title"))
    return [text for text in texts if text]


class _Walker:
    """Reads a document tree in one pass over the start/end events of ``etree.iterwalk``.

    Visible text is kept as a stream of whitespace-normalised pieces; every piece boundary
    counts as a word boundary (so ``<b>H</b>ello`` reads as two words: rare, and much cheaper to
    walk). Text is routed to the innermost open link, else to the innermost block element and
    the "body" block; heading text also goes to the "headings" block.
    """

    def __init__(self, context_distance: int) -> None:
        self.context_up = max(0, context_distance // 2)
        self.pieces: list[str] = []  # the visible text stream
        self.body_parts: list[str] = []  # text outside links and headings
        self.heading_parts: list[str] = []
        self.links: list[_OpenLink] = []
        self.text_blocks: list[int] = []  # words outside links, per block element
        self.title: str | None = None
        self.base_href: str | None = None
        self.meta: dict[str, str] = {}

    def walk(self, root: etree._Element) -> None:
        pieces, body, headings_text = self.pieces, self.body_parts, self.heading_parts
        ranges: list[list[int]] = []  # stream [start, end] of every open element
        blocks: list[list[str]] = []  # the enclosing blocks' own text
        block: list[str] = []  # own text of the innermost block
        outer_links: list[_OpenLink | None] = []
        link: _OpenLink | None = None
        hidden = headings = 0
        walker = etree.iterwalk(root, events=("start", "end"))
        for event, element in walker:
            tag = element.tag
            if event == "start":
                ranges.append([len(pieces), -1])
                if tag.__class__ is not str:  # a comment or processing instruction
                    continue
                if tag in HIDDEN_TAGS:
                    hidden += 1
                    if tag != "head":
                        walker.skip_subtree()
                    continue
                if tag in BLOCK_TAGS:
                    blocks.append(block)
                    block = []
                    headings += tag in HEADING_TAGS
                elif tag == "a" or tag == "area":
                    opened = self.open_link(element, tag, ranges, len(pieces))
                    if opened is not None:
                        outer_links.append(link)
                        link = opened
                elif tag == "img":
                    if link is not None:
                        link.alts.extend(_image_texts(element))
                elif tag in HEAD_TAGS:
                    self.read_head_element(element, tag)
                    if tag == "title":
                        walker.skip_subtree()
                    continue
                text = element.text
            else:
                if tag.__class__ is str:
                    if tag in HIDDEN_TAGS:
                        hidden -= 1
                    elif tag in BLOCK_TAGS:
                        if block:
                            self.close_block(block)
                        block = blocks.pop()
                        headings -= tag in HEADING_TAGS
                    if link is not None and link.depth == len(ranges):
                        link.end = len(pieces)
                        link = outer_links.pop()
                ranges.pop()[1] = len(pieces)
                text = element.tail
            if text and not hidden:
                words = text.split()
                if words:
                    text = " ".join(words)
                    pieces.append(text)
                    if link is not None:
                        link.parts.append(text)
                    else:
                        block.append(text)
                        if not headings:
                            body.append(text)
                    if headings:
                        headings_text.append(text)

    def close_block(self, own_text: list[str]) -> None:
        words = count_words(" ".join(own_text))
        if words:
            self.text_blocks.append(words)

    def open_link(self, element: etree._Element, tag: str, ranges: list[list[int]],
                  position: int) -> _OpenLink | None:
        href = element.get("href")
        if href is None:
            return None
        up = min(self.context_up, len(ranges) - 1)
        link = _OpenLink(href, len(ranges), position, ranges[-1 - up], counted=tag == "a")
        if tag == "area":
            link.alts.extend(_image_texts(element))
        self.links.append(link)
        return link

    def read_head_element(self, element: etree._Element, tag: str) -> None:
        if tag == "title":
            if self.title is None:
                self.title = normalize_space("".join(element.itertext()))
        elif tag == "base":
            if self.base_href is None and element.get("href"):
                self.base_href = element.get("href")
        else:
            name = (element.get("name") or "").strip().lower()
            if name in ("description", "keywords") and name not in self.meta:
                self.meta[name] = normalize_space(element.get("content") or "")


def parse_html(html: str, url: str, context_distance: int = 5, max_links: int = 2000) -> ParsedPage:
    """Parse ``html`` fetched from ``url``. Never raises: input lxml cannot read at all gives an
    empty page (no title, no links)."""
    page_url = canonicalize(url) or url
    try:
        root = _parse_tree(html)
        if root is None:
            return _empty_page(page_url)
        walker = _Walker(context_distance)
        walker.walk(root)
        return _build_page(walker, page_url, max(0, max_links))
    except Exception:  # noqa: BLE001 - a bad page must never stop the crawl
        logger.exception("could not parse %s; treating it as an empty page", url)
        return _empty_page(page_url)


def _parse_tree(html: str) -> etree._Element | None:
    """The document root, or None when there is no document.

    The text goes to lxml as UTF-8 bytes with the encoding fixed, so an XML declaration or a
    ``<meta charset>`` in the text cannot make lxml re-decode it. ``etree.HTMLParser`` is the
    parser of ``lxml.html`` without its element classes, which only slow the walk down."""
    if not isinstance(html, str):
        logger.warning("parse_html needs str, got %s", type(html).__name__)
        return None
    # libxml2 drops everything after </html>; browsers show it, so the end tag goes.
    html = _HTML_END_TAG.sub("", html.replace("\x00", ""))
    data = html.encode("utf-8", "replace")
    if not data.strip():
        return None
    parser = getattr(_PARSERS, "parser", None)
    if parser is None:
        parser = etree.HTMLParser(
            recover=True, remove_comments=True, remove_pis=True, encoding="utf-8", no_network=True
        )
        _PARSERS.parser = parser
    try:
        return etree.fromstring(data, parser)
    except etree.LxmlError as exc:
        logger.info("lxml could not parse the document: %s", exc)
        return None


def _empty_page(url: str) -> ParsedPage:
    blocks = dict.fromkeys(("title", "headings", "body", "anchor", "meta"), "")
    return ParsedPage(url=url, base_url=url, blocks=blocks)


def _build_page(walker: _Walker, page_url: str, max_links: int) -> ParsedPage:
    title = walker.title or ""
    text = " ".join((title, *walker.pieces)) if title else " ".join(walker.pieces)
    base_url = canonicalize(walker.base_href, page_url) if walker.base_href else None
    base_url = base_url or page_url
    description = walker.meta.get("description", "")
    keywords = walker.meta.get("keywords", "")
    anchor_texts = [link.text for link in walker.links]
    anchors = [link for link in walker.links if link.counted]
    n_words = count_words(text)
    stats = PageStats(
        n_words=n_words,
        n_link_words=sum(count_words(" ".join(link.parts)) for link in anchors),
        n_links=len(anchors),
        text_blocks=walker.text_blocks,
    )
    blocks = {
        "title": title,
        "headings": " ".join(walker.heading_parts),
        "body": " ".join(walker.body_parts),
        "anchor": " ".join(filter(None, anchor_texts)),
        "meta": f"{description} {keywords}".strip(),
    }
    return ParsedPage(
        url=page_url, base_url=base_url, title=title, description=description,
        keywords=keywords, text=text, blocks=blocks, stats=stats,
        links=_resolve_links(walker, anchor_texts, base_url, max_links),
        lang=_language(text, n_words),
    )


def _resolve_links(walker: _Walker, anchor_texts: list[str], base_url: str,
                   max_links: int) -> list[Link]:
    """Canonical, deduplicated links: the first occurrence of a URL is kept, with the distinct
    anchor texts of all its occurrences."""
    context = _ContextReader(walker.pieces)
    by_url: dict[str, Link] = {}
    anchors: dict[str, list[str]] = {}
    resolved: dict[str, str | None] = {}  # raw href -> canonical URL, for repeated hrefs
    for open_link, anchor in zip(walker.links, anchor_texts, strict=True):
        href = open_link.href
        if href not in resolved:
            resolved[href] = canonicalize(href, base_url)
        url = resolved[href]
        if url is None:
            continue
        if url not in by_url:
            if len(by_url) >= max_links:
                continue
            by_url[url] = Link(url, context=context.around(open_link))
            anchors[url] = []
        if anchor and anchor not in anchors[url]:
            anchors[url].append(anchor)
    for url, link in by_url.items():
        link.anchor_text = _cut_words(" ".join(anchors[url]), ANCHOR_CHARS, keep_end=False)
    return list(by_url.values())


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

    def around(self, link: _OpenLink) -> str:
        first, last = link.ancestor
        before = self._before(first, link.start)
        after = self._after(link.end, last)
        before = _cut_words(before, max(CONTEXT_CHARS // 2, CONTEXT_CHARS - len(after) - 1),
                            keep_end=True)
        after = _cut_words(after, CONTEXT_CHARS - len(before) - 1, keep_end=False)
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


def _cut_words(text: str, limit: int, keep_end: bool) -> str:
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


def _language(text: str, n_words: int) -> str:
    if n_words and not text.isascii() and len(_HAN.findall(text)) / n_words >= ZH_SHARE:
        return "zh"
    return "en"
