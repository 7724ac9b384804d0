"""A hostile corner of the sandbox web: pages built to exhaust a crawler's memory and CPU, and
traps that per-host rules cannot see. Like ``faults.test`` these names and paths are an
interface: the parser's, the trap filter's and the crawl's tests are written against them.

* ``links.hostile.test/big.html``: ~0.9 MB of gzip holding ``BIG_LINKS`` (200,000) links to
  ``/item/N.html`` (7.6 MB decompressed, inside the default byte caps).
* ``links.hostile.test/many.html``: ``MANY_LINKS`` (10,000) links to ``/item/N.html``, the last
  of them to ``normal.hostile.test`` (the only way there).
* ``links.hostile.test/item/N.html``: a small page that links nowhere.
* ``deep.hostile.test/?depth=D``: text and a link nested D levels deep (default 300), then a
  link to ``normal.hostile.test/deep-exit.html`` after the nesting closes.
* ``sN.subtrap.test/``: a subdomain trap: every page links to ``SUBTRAP_FANOUT`` fresh
  subdomains of ``subtrap.test``.
* ``ids.hostile.test/item?id=X``: a query-variant trap: every page links to
  ``IDS_FANOUT`` fresh ``?id=`` values of the same path.
* ``normal.hostile.test``: a plain site, a tree without end: ``/a/N.html`` links to
  ``/b/4N+1.html`` ... ``/b/4N+4.html`` (and ``/b/`` to ``/a/``).
* ``farm.hostile.test/?dead=N``: a link farm of dead robots.txt hosts: links to N (default
  ``FARM_HOSTS``, at most ``MAX_FARM_HOSTS``) hosts ``dead-robots-K.test``, each its own
  registered domain, then to ``normal.hostile.test`` (the page's last link).
* ``dead-robots-K.test``: robots.txt never answers (the server waits until the client gives
  up); any other path is a page that links nowhere.

No other host has robots.txt rules (404).
"""

from __future__ import annotations

import gzip
import hashlib
import re
from functools import cache
from urllib.parse import parse_qs

from jlse.sandbox import response as r

LINKS_HOST = "links.hostile.test"
DEEP_HOST = "deep.hostile.test"
IDS_HOST = "ids.hostile.test"
NORMAL_HOST = "normal.hostile.test"
SUBTRAP_DOMAIN = "subtrap.test"
FARM_HOST = "farm.hostile.test"
FARM_HOSTS = 1997
MAX_FARM_HOSTS = 5000
NEVER = 3600.0  # a robots.txt that never answers: the server waits until the client leaves
BIG_LINKS = 200_000
MANY_LINKS = 10_000
DEFAULT_DEPTH = 300
MAX_DEPTH = 20_000
SUBTRAP_FANOUT = 3
IDS_FANOUT = 3
NORMAL_FANOUT = 4

_SUBTRAP = re.compile(r"s(\d{1,20})\.subtrap\.test")
_DEAD = re.compile(r"dead-robots-(\d{1,5})\.test")
_ITEM = re.compile(r"/item/(\d{1,7})\.html")
_PAGE = re.compile(r"/([ab])/(\d{1,9})\.html")


def serves(host: str) -> bool:
    """Whether ``host`` is one of this module's hosts."""
    return host in (LINKS_HOST, DEEP_HOST, IDS_HOST, NORMAL_HOST, FARM_HOST) or bool(
        _SUBTRAP.fullmatch(host) or _DEAD.fullmatch(host))


def dead_host(number: int) -> str:
    """The farm's ``number``-th host, whose robots.txt never answers."""
    return f"dead-robots-{number}.test"


def respond(host: str, path: str, query: str, state: r.ServerState) -> r.Response:
    if _DEAD.fullmatch(host):
        return r.Response(200, b"User-agent: *\nDisallow:\n", "text/plain", delay=NEVER) \
            if path == "/robots.txt" else r.html(200, host, "A page that links nowhere.")
    if path == "/robots.txt":
        return r.not_found()
    if host == FARM_HOST:
        return _farm(min(max(0, _int(query, "dead", FARM_HOSTS)), MAX_FARM_HOSTS)) \
            if path == "/" else r.not_found()
    if host == LINKS_HOST:
        return _links_host(path)
    if host == DEEP_HOST:
        return _deep_page(_int(query, "depth", DEFAULT_DEPTH)) if path == "/" else r.not_found()
    if host == IDS_HOST:
        return _id_page(parse_qs(query).get("id", ["0"])[0]) if path == "/item" \
            else r.not_found()
    match = _SUBTRAP.fullmatch(host)
    if match is not None:
        return _subtrap_page(int(match.group(1))) if path == "/" else r.not_found()
    return _normal_page(path)


def _links_host(path: str) -> r.Response:
    if path == "/big.html":
        return r.Response(200, big_page_gzip(), "text/html; charset=utf-8",
                          [("Content-Encoding", "gzip")])
    if path == "/many.html":
        return r.Response(200, many_links_page())
    if _ITEM.fullmatch(path):
        return r.html(200, f"Item {path}", "A page that links nowhere.")
    return r.not_found()


def _page(title: str, body: str) -> bytes:
    return (f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{title}</title></head>'
            f"<body>{body}</body></html>\n").encode()


def big_page() -> bytes:
    """The 200,000-link page, decompressed."""
    items = "".join(f'<a href="/item/{n}.html">{n}</a>\n' for n in range(BIG_LINKS))
    return _page("Two hundred thousand links", f"<p>\n{items}</p>")


@cache
def big_page_gzip() -> bytes:
    return gzip.compress(big_page(), compresslevel=9, mtime=0)


@cache
def many_links_page() -> bytes:
    items = [f'<li><a href="/item/{n}.html">item {n}</a></li>' for n in range(MANY_LINKS - 1)]
    items.append(f'<li><a href="http://{NORMAL_HOST}/">the normal site</a></li>')
    return _page("Ten thousand links", "<ul>\n" + "\n".join(items) + "\n</ul>")


def _farm(dead: int) -> r.Response:
    links = [f"http://{dead_host(n)}/" for n in range(dead)] + [f"http://{NORMAL_HOST}/"]
    items = "\n".join(f'<li><a href="{url}">site {n}</a></li>' for n, url in enumerate(links))
    return r.Response(200, _page(f"{dead} sites", f"<ul>\n{items}\n</ul>"))


def _deep_page(depth: int) -> r.Response:
    depth = max(0, min(depth, MAX_DEPTH))
    inner = '<p>deep text <a href="/deep-inside.html">inside the nesting</a></p>'
    after = (f'<p>after the nesting <a href="http://{NORMAL_HOST}/deep-exit.html">'
             "the way out</a></p>")
    return r.Response(200, _page(f"Nested {depth} levels",
                                 "<div>" * depth + inner + "</div>" * depth + after))


def _fresh(seed: str, n: int) -> list[str]:
    """``n`` tokens that never repeat across pages (a hash of the page's own token)."""
    return [hashlib.blake2b(f"{seed}/{i}".encode(), digest_size=6).hexdigest() for i in range(n)]


def _subtrap_page(number: int) -> r.Response:
    children = [int(token, 16) for token in _fresh(f"s{number}", SUBTRAP_FANOUT)]
    links = " ".join(f'<a href="http://s{child}.{SUBTRAP_DOMAIN}/">site {child}</a>'
                     for child in children)
    return r.Response(200, _page(f"Subdomain {number}", f"<p>Welcome. {links}</p>"))


def _id_page(item: str) -> r.Response:
    links = " ".join(f'<a href="/item?id={token}">item {token}</a>'
                     for token in _fresh(item[:64], IDS_FANOUT))
    return r.Response(200, _page(f"Item {item[:64]}", f"<p>Related items: {links}</p>"))


def _normal_page(path: str) -> r.Response:
    if path in ("/", "/deep-exit.html"):
        number, shape = 0, "a"
    else:
        match = _PAGE.fullmatch(path)
        if match is None:
            return r.not_found()
        shape, number = match.group(1), int(match.group(2))
    # two URL shapes in turn: an endless site, but no chain of one pattern (max_pattern_run)
    child = "b" if shape == "a" else "a"
    links = " ".join(f'<a href="/{child}/{n}.html">page {n}</a>'
                     for n in range(NORMAL_FANOUT * number + 1, NORMAL_FANOUT * (number + 1) + 1))
    return r.Response(200, _page(f"Normal page {number}",
                                 f"<h1>Normal page {number}</h1><p>{links}</p>"))


def _int(query: str, name: str, default: int) -> int:
    try:
        return int(parse_qs(query).get(name, [str(default)])[0])
    except ValueError:
        return default
