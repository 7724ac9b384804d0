"""HTML parsing with lxml: metadata, visible text, out-links with their context, the position
blocks of the VSM model (docs/algorithms.md §4.1) and the counts of the result-page classifier.

The tree is walked once (``etree.iterwalk``). Visible text goes into one stream of pieces; every
open element remembers where its text starts and ends in that stream, so a link's context is a
slice of the stream, found without re-reading any subtree (``jlse.workers.parser_links``).

Bounds, for pages built to exhaust a crawler: the byte caps alone do not bound a page's memory
(8 MB of ``<a href=/n>`` is 200,000 links and ~450 MB of tree and link objects), so the text is
cut after ``max_tags`` tags before lxml sees it, and at most ``max_links`` links are kept
(a spread over their hosts, see ``spread_order``). libxml2 stops at 256 levels of nesting and
drops the rest of the page; the parser runs with ``huge_tree`` (2,048 levels: the other limits
it lifts are covered by the byte and tag caps), and a page nested deeper still is parsed again
from where libxml2 stopped. What was cut is in ``ParsedPage.notes`` and logged with the URL.
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass, field

from lxml import etree

from jlse.models.page_stats import PageStats
from jlse.records import Link
from jlse.scheduler.urls import canonicalize
from jlse.workers.parser_links import OpenLink, resolve_links

logger = logging.getLogger(__name__)

ZH_SHARE = 0.3  # a page is "zh" when at least this share of its words are Han characters
MAX_LINKS = 2000  # default of the setting max_links_per_page
MAX_TAGS = 50_000  # default of the setting max_page_tags
DEEP_RESTARTS = 8  # parses of the rest of a page nested past libxml2's depth limit

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
_TAG_RUNS: dict[int, re.Pattern[str]] = {}  # max_tags -> a pattern matching that many "<"
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
    # what the bounds cut, for the crawl's counters: links_cut (distinct hrefs dropped by
    # max_links), tags_cut (1: the text was cut at max_tags), deep_nesting (1: nested past
    # libxml2's depth limit; the rest was parsed separately)
    notes: dict[str, int] = field(default_factory=dict)


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
        self.links: list[OpenLink] = []
        self.text_blocks: list[int] = []  # words outside links, per block element
        self.title: str | None = None
        self.base_href: str | None = None
        self.meta: dict[str, str] = {}

    def walk(self, root: etree._Element) -> None:
        pieces, body, headings_text = self.pieces, self.body_parts, self.heading_parts
        ranges: list[list[int]] = []  # stream [start, end] of every open element
        blocks: list[list[str]] = []  # the enclosing blocks' own text
        block: list[str] = []  # own text of the innermost block
        outer_links: list[OpenLink | None] = []
        link: OpenLink | None = None
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
                  position: int) -> OpenLink | None:
        href = element.get("href")
        if href is None:
            return None
        up = min(self.context_up, len(ranges) - 1)
        link = OpenLink(href, len(ranges), position, ranges[-1 - up], counted=tag == "a")
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


def parse_html(html: str, url: str, context_distance: int = 5, max_links: int = MAX_LINKS,
               max_tags: int = MAX_TAGS) -> ParsedPage:
    """Parse ``html`` fetched from ``url``. Never raises: input lxml cannot read at all gives an
    empty page (no title, no links). See the module docstring for ``max_links``/``max_tags``."""
    page_url = canonicalize(url) or url
    try:
        if not isinstance(html, str):
            logger.warning("parse_html needs str, got %s", type(html).__name__)
            return _empty_page(page_url)
        notes: dict[str, int] = {}
        html = _cap_tags(html, max(1, max_tags), notes)
        walker = _Walker(context_distance)
        if not _walk_document(html, walker, notes):
            return _empty_page(page_url)
        page = _build_page(walker, page_url, max(0, max_links), notes)
        _log_notes(url, notes, len(page.links), max_tags)
        return page
    except Exception:  # noqa: BLE001 - a bad page must never stop the crawl
        logger.exception("could not parse %s; treating it as an empty page", url)
        return _empty_page(page_url)


def _cap_tags(html: str, max_tags: int, notes: dict[str, int]) -> str:
    """``html`` cut before its ``max_tags + 1``-th "<" (the tree's size follows the tags)."""
    if html.count("<") <= max_tags:  # C speed: ~0.3 ms per MB
        return html
    pattern = _TAG_RUNS.get(max_tags)
    if pattern is None:
        pattern = _TAG_RUNS[max_tags] = re.compile(f"(?:[^<]*<){{{max_tags + 1}}}")
    end = pattern.match(html).end() - 1  # the "<" past the cap
    notes["tags_cut"] = 1
    return html[:end]


def _walk_document(html: str, walker: _Walker, notes: dict[str, int]) -> bool:
    """Parse and walk ``html``; False when there is no document at all. A document nested past
    libxml2's depth limit is parsed again from where libxml2 stopped (a few times at most)."""
    # libxml2 drops everything after </html>; browsers show it, so the end tag goes.
    data = _HTML_END_TAG.sub("", html.replace("\x00", "")).encode("utf-8", "replace")
    walked = False
    for _ in range(DEEP_RESTARTS + 1):
        root, stopped_at = _parse_tree(data)
        if root is not None:
            walker.walk(root)
            walked = True
        if stopped_at is None:
            break
        notes["deep_nesting"] = 1
        data = data[stopped_at:]
    return walked


def _parse_tree(data: bytes) -> tuple[etree._Element | None, int | None]:
    """The document root (None when there is no document), and the byte offset where libxml2
    gave up on nesting too deep (None if it did not).

    The text goes to lxml as UTF-8 bytes with the encoding fixed, so an XML declaration or a
    ``<meta charset>`` in the text cannot make lxml re-decode it. ``etree.HTMLParser`` is the
    parser of ``lxml.html`` without its element classes, which only slow the walk down."""
    if not data.strip():
        return None, None
    parser = getattr(_PARSERS, "parser", None)
    if parser is None:
        parser = etree.HTMLParser(recover=True, remove_comments=True, remove_pis=True,
                                  encoding="utf-8", no_network=True, huge_tree=True)
        _PARSERS.parser = parser
    try:
        root = etree.fromstring(data, parser)
    except etree.LxmlError as exc:
        logger.info("lxml could not parse the document: %s", exc)
        return None, None
    return root, _depth_stop(parser.error_log, data)


def _depth_stop(errors: etree._ListErrorLog, data: bytes) -> int | None:
    """Where libxml2 stopped on "Excessive depth": the offset of the tag it refused, past the
    start of ``data`` (so a new parse always moves on); None if it did not stop."""
    for error in errors:
        if error.type_name == "ERR_RESOURCE_LIMIT" and "depth" in error.message:
            line_start = 0
            for _ in range(error.line - 1):
                line_start = data.find(b"\n", line_start) + 1
            offset = min(len(data), line_start + max(0, error.column - 1))
            tag = data.rfind(b"<", 0, offset + 1)
            return tag if tag > 0 else max(1, offset)
    return None


def _log_notes(url: str, notes: dict[str, int], kept_links: int, max_tags: int) -> None:
    if notes.get("tags_cut"):
        logger.info("page too large: %s cut after %d tags (max_page_tags)", url, max_tags)
    if notes.get("deep_nesting"):
        logger.info("nesting too deep on %s: the rest of the page was parsed separately", url)
    if notes.get("links_cut"):
        logger.info("too many links on %s: kept %d, dropped %d (max_links_per_page)", url,
                    kept_links, notes["links_cut"])


def _empty_page(url: str) -> ParsedPage:
    blocks = dict.fromkeys(("title", "headings", "body", "anchor", "meta"), "")
    return ParsedPage(url=url, base_url=url, blocks=blocks)


def _build_page(walker: _Walker, page_url: str, max_links: int,
                notes: dict[str, int]) -> ParsedPage:
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
    links, cut = resolve_links(walker.links, anchor_texts, walker.pieces, base_url, max_links)
    if cut:
        notes["links_cut"] = cut
    return ParsedPage(
        url=page_url, base_url=base_url, title=title, description=description,
        keywords=keywords, text=text, blocks=blocks, stats=stats, links=links,
        lang=_language(text, n_words), notes=notes,
    )


def _language(text: str, n_words: int) -> str:
    if n_words and not text.isascii() and len(_HAN.findall(text)) / n_words >= ZH_SHARE:
        return "zh"
    return "en"
