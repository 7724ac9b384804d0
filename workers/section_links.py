"""A listing's *next pages*: links whose anchor is a page number or "next" (docs/algorithms.md,
the jlse strategy). ``jlse`` follows them from a relevant page at a floor priority
(``section_links`` x the page's relevance), whatever their anchors say: "3" tells the anchor
model nothing, and on forum and news sites they are the way to the rest of a relevant section.
"""

from __future__ import annotations

import re

from jlse.records import Link
from jlse.scheduler.urls import host_of

# a page number (1-3 digits) or a "next" word, optionally followed by "next" or an arrow
_NEXT_PAGE = re.compile(
    r"\s*(\d{1,3}|next|next page|older|[»›>]+|下一页|下一頁|下頁)(\s+(next|[»›>]+))?\s*",
    re.IGNORECASE)


def is_next_page(page_url: str, link: Link) -> bool:
    """Whether ``link`` goes to another page of the listing ``page_url`` is: the same host and
    an anchor that is a page number or "next"."""
    if _NEXT_PAGE.fullmatch(link.anchor_text or "") is None:  # most links stop here, cheaply
        return False
    host = host_of(page_url)
    return bool(host) and host_of(link.url) == host
