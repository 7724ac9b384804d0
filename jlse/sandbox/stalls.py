"""Hosts that test a crawler's patience: retries under Crawl-delay, servers that trickle their
headers, and thousands of hosts whose robots.txt hangs. Like ``faults.test`` these names and
paths are an interface: the fetcher's and the crawl's tests are written against them.

* ``retry-delay.test``: ``Crawl-delay: 1``; every page answers 500 to its first request, then
  200. Pages ``/page/N.html`` (N < ``RETRY_PAGES``) link to the next two; ``/RUN/page/N.html``
  is the same site with its own first requests (RUN: up to 16 letters or digits), so each test
  can start afresh on a server shared by many.
* ``sN.slow-headers.test``: robots.txt is missing (404, at once); any other path answers 200, but
  its status line and headers arrive one byte every ``SLOW_HEADER_SECONDS`` (the body never
  starts within a sane deadline).
* ``hN.robots-hang.stall.test``: robots.txt answers after ``HANG_SECONDS``; pages link nowhere.
* ``normal.stall.test``: a plain site (no robots.txt rules, no delay): ``/`` links to 100
  sections, each section to 50 items (5,101 pages, none deeper than 2).
* ``hub.stall.test/?hang=H&slow=S``: links to H hanging-robots hosts, S slow-header hosts and
  the normal site (its link is the last one on the page).
"""

from __future__ import annotations

import re
from urllib.parse import parse_qs

from jlse.sandbox import response as r

RETRY_HOST = "retry-delay.test"
NORMAL_HOST = "normal.stall.test"
HUB_HOST = "hub.stall.test"
RETRY_ROBOTS = "User-agent: *\nCrawl-delay: 1\n"
RETRY_PAGES = 40
SLOW_HEADER_SECONDS = 2.0
HANG_SECONDS = 60.0
MAX_HUB_LINKS = 5000

_SLOW = re.compile(r"s\d{1,5}\.slow-headers\.test")
_HANG = re.compile(r"h\d{1,5}\.robots-hang\.stall\.test")
_PAGE = re.compile(r"(?:/([a-z0-9]{1,16}))?/page/(\d{1,7})\.html")
_SECTION = re.compile(r"/section/(\d{1,4})\.html")
_ITEM = re.compile(r"/item/(\d{1,4})-(\d{1,4})\.html")
NORMAL_SECTIONS, NORMAL_ITEMS = 100, 50


def serves(host: str) -> bool:
    """Whether ``host`` is one of this module's hosts."""
    return host in (RETRY_HOST, NORMAL_HOST, HUB_HOST) or bool(
        _SLOW.fullmatch(host) or _HANG.fullmatch(host))


def robots_rules(host: str) -> str | None:
    """The robots.txt text that applies to ``host`` (None: no rules)."""
    return RETRY_ROBOTS if host == RETRY_HOST else None


def respond(host: str, path: str, query: str, state: r.ServerState) -> r.Response:
    if _SLOW.fullmatch(host):
        return r.not_found() if path == "/robots.txt" else _slow_headers()
    if path == "/robots.txt":
        if _HANG.fullmatch(host):
            return r.Response(200, b"User-agent: *\nDisallow:\n", "text/plain",
                              delay=HANG_SECONDS)
        rules = robots_rules(host)
        return r.plain(200, rules) if rules else r.not_found()
    if host == HUB_HOST and path == "/":
        return _hub(query)
    if host == NORMAL_HOST:
        return _normal_page(path)
    match = _PAGE.fullmatch(path)
    if match is None or _HANG.fullmatch(host):
        return r.html(200, f"{host} home", "Nothing to see here.") if path == "/" \
            else r.not_found()
    run, number = match.group(1) or "", int(match.group(2))
    if host == RETRY_HOST:
        if number >= RETRY_PAGES:
            return r.not_found()
        if state.count(f"retry|{run}|{number}") == 0:
            return r.html(500, "Internal server error", "Try again later.")
    return _chain_page(host, run, number, RETRY_PAGES if host == RETRY_HOST else None)


def _chain_page(host: str, run: str, number: int, limit: int | None) -> r.Response:
    following = [n for n in (number + 1, number + 2) if limit is None or n < limit]
    base = f"/{run}/page" if run else "/page"
    links = " ".join(f'<a href="{base}/{n}.html">page {n}</a>' for n in following)
    body = (f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{host} page {number}'
            f"</title></head><body><h1>Page {number}</h1><p>{links}</p></body></html>\n")
    return r.Response(200, body.encode("utf-8"))


def _normal_page(path: str) -> r.Response:
    if path == "/":
        return _list_page("Sections", [f"/section/{k}.html" for k in range(NORMAL_SECTIONS)])
    if match := _SECTION.fullmatch(path):
        section = int(match.group(1))
        if section < NORMAL_SECTIONS:
            return _list_page(f"Section {section}", [f"/item/{section}-{j}.html"
                                                     for j in range(NORMAL_ITEMS)])
    if match := _ITEM.fullmatch(path):
        if int(match.group(1)) < NORMAL_SECTIONS and int(match.group(2)) < NORMAL_ITEMS:
            return _list_page(f"Item {match.group(1)}-{match.group(2)}", ["/"])
    return r.not_found()


def _list_page(title: str, hrefs: list[str]) -> r.Response:
    items = "\n".join(f'<li><a href="{href}">{href}</a></li>' for href in hrefs)
    body = (f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{title}</title></head>'
            f"<body><h1>{title}</h1><ul>\n{items}\n</ul></body></html>\n")
    return r.Response(200, body.encode("utf-8"))


def _hub(query: str) -> r.Response:
    params = parse_qs(query)
    hang = _count(params, "hang")
    slow = _count(params, "slow")
    links = [f"http://h{n}.robots-hang.stall.test/page/1.html" for n in range(hang)]
    links += [f"http://s{n}.slow-headers.test/page/1.html" for n in range(slow)]
    links.append(f"http://{NORMAL_HOST}/")
    items = "\n".join(f'<li><a href="{url}">site {n}</a></li>' for n, url in enumerate(links))
    body = (f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>Hub</title></head>'
            f"<body><ul>\n{items}\n</ul></body></html>\n")
    return r.Response(200, body.encode("utf-8"))


def _count(params: dict[str, list[str]], name: str) -> int:
    try:
        return max(0, min(int(params.get(name, ["0"])[0]), MAX_HUB_LINKS))
    except ValueError:
        return 0


def _slow_headers() -> r.Response:
    response = r.html(200, "Slow headers", "Only a patient client gets here.")
    response.header_trickle = SLOW_HEADER_SECONDS
    return response
