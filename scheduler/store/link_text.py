"""Links' text made storable by both backends, and a batch's links merged by URL."""

from __future__ import annotations

from collections.abc import Sequence

from jlse.records import NewLink


def clean_text(text: str | None) -> str:
    """``text`` storable by both backends: no NUL characters, no lone surrogates."""
    if not text:
        return ""
    if text.isascii():  # most text: no surrogate can hide in it (isascii is O(1))
        return text if "\x00" not in text else text.replace("\x00", "")
    text = text.replace("\x00", "")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text


def clean_texts(values: list[str]) -> list[str]:
    """``clean_text`` of each value. A column that needs no cleaning (the usual case) is found
    so in one pass over its joined text and returned as it is, the same objects."""
    try:
        joined = "".join(values)
    except TypeError:  # a None among them
        return [clean_text(value) for value in values]
    if "\x00" not in joined:
        if joined.isascii():
            return values
        try:
            joined.encode("utf-8")  # no lone surrogate anywhere
            return values
        except UnicodeEncodeError:
            pass
    return [clean_text(value) for value in values]


def merge_duplicates(links: Sequence[NewLink],
                     urls: Sequence[str] | None = None) -> dict[str, NewLink]:
    """One link per (cleaned) URL: the first occurrence, with the highest priority seen;
    ``urls``: the links' cleaned URLs, if the caller has them.

    A link whose text needs no cleaning and whose priority is a float is kept as it is (no
    copy); a copy is made where something changes, so the caller's links are never altered."""
    if urls is None:
        urls = clean_texts([link.url for link in links])
    anchors = clean_texts([link.anchor_text for link in links])
    contexts = clean_texts([link.context for link in links])
    merged: dict[str, NewLink] = {}
    for link, url, anchor, context in zip(links, urls, anchors, contexts, strict=True):
        first = merged.get(url)
        if first is None:
            if (url is link.url and anchor is link.anchor_text and context is link.context
                    and type(link.priority) is float):
                merged[url] = link
            else:
                merged[url] = NewLink(
                    url=url, parent_id=link.parent_id, depth=link.depth, anchor_text=anchor,
                    context=context, priority=float(link.priority),
                    pattern_run=link.pattern_run, redirect_hops=link.redirect_hops,
                )
        elif link.priority > first.priority:
            merged[url] = NewLink(
                url=url, parent_id=first.parent_id, depth=first.depth,
                anchor_text=first.anchor_text, context=first.context,
                priority=float(link.priority), pattern_run=first.pattern_run,
                redirect_hops=first.redirect_hops,
            )
    return merged
