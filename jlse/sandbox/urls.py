"""Paths of a site's pages in each URL style. All paths are already canonical (sorted queries)."""

from __future__ import annotations


def home_path() -> str:
    return "/"


def list_path(style: str, slug: str, number: int) -> str:
    """A category list page (a hub section page for style "hub"); ``number`` counts from 1."""
    if style == "php":
        return f"/list.php?cat={slug}" + (f"&page={number}" if number > 1 else "")
    if style == "path":
        return f"/{slug}/" if number == 1 else f"/{slug}/page-{number}/"
    if style == "hub":
        return f"/news/{slug}/" if number == 1 else f"/news/{slug}/{number}.html"
    return f"/c/{slug}/" if number == 1 else f"/c/{slug}/page/{number}.html"


def detail_path(style: str, slug: str, item_id: int) -> str:
    """A detail page (product/review/recipe...) or a hub article."""
    if style == "php":
        return f"/item.php?id={item_id}"
    if style == "path":
        return f"/{slug}/{item_id}.html"
    if style == "hub":
        return f"/article/{item_id}.html"
    return f"/p/{item_id}.html"


def info_path(style: str, name: str) -> str:
    """The about/contact page."""
    if style == "php":
        return f"/{name}.php"
    if style == "path":
        return f"/{name}/"
    return f"/{name}.html"


def print_path(item_id: int) -> str:
    return f"/print/{item_id}.html"


ADMIN_PATH = "/admin/"
DIRECTORY_PATH = "/directory.html"
