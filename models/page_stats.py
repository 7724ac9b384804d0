"""Counts the parser takes from a page for the result-page (target vs link page) classifier."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class PageStats:
    """Word and link counts of one page.

    A "word" is a run of Latin letters/digits or a single CJK character, so Chinese and English
    pages are counted on one scale.
    """

    n_words: int = 0  # words of visible text (script/style excluded)
    n_link_words: int = 0  # of those, words inside <a> elements
    n_links: int = 0  # <a href> elements
    text_blocks: list[int] = field(default_factory=list)  # words outside links per text block

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
