"""Links that lead to more of a relevant page's own section (docs/algorithms.md, the jlse
strategy): a target page's *up-links* (its section index pages) and a listing's *next pages*
(links whose anchor is a page number or "next"). ``jlse`` follows them at a floor priority
(``section_links`` x the page's relevance), whatever their anchors say: "3" or "Back to
Graphics" tells the anchor model nothing, and on forum and news sites they are the only way
to the rest of a relevant section.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from jlse.records import Link
from jlse.scheduler.urls import host_of

# a page number (1-3 digits) or a "next" word, optionally followed by "next" or an arrow
_NEXT_PAGE = re.compile(
    r"\s*(\d{1,3}|next|next page|older|[»›>]+|下一页|下一頁|下頁)(\s+(next|[»›>]+))?\s*",
    re.IGNORECASE)


def is_up_link(page_url: str, link_url: str) -> bool:
    """Whether ``link_url`` leads up from ``page_url`` to a section: the same host, no query,
    and a directory path (ending in "/") that the page's path sits under, other than the home
    page "/" (which on a general site leads to every topic)."""
    try:
        page, link = urlsplit(page_url), urlsplit(link_url)
    except ValueError:
        return False
    if link.netloc.lower() != page.netloc.lower() or link.query or not link.path.endswith("/"):
        return False
    if link.path == "/":
        return False
    return link.path != page.path and page.path.startswith(link.path)


def is_next_page(page_url: str, link: Link) -> bool:
    """Whether ``link`` goes to another page of the listing ``page_url`` is: the same host and
    an anchor that is a page number or "next"."""
    if _NEXT_PAGE.fullmatch(link.anchor_text or "") is None:  # most links stop here, cheaply
        return False
    host = host_of(page_url)
    return bool(host) and host_of(link.url) == host


def up_links(page_url: str, links: list[Link]) -> list[Link]:
    """The links of ``links`` that lead up from ``page_url`` (:func:`is_up_link`)."""
    return [link for link in links if is_up_link(page_url, link.url)]


def off_site_links(page_url: str, links: list[Link]) -> list[Link]:
    """The links of ``links`` to another host than ``page_url``'s."""
    host = host_of(page_url)
    return [link for link in links if host_of(link.url) != host]
