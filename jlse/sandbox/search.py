"""A search engine over the sandbox web that speaks SearxNG's JSON API.

Served for ``search.test`` through the proxy and for direct requests to the sandbox server
itself (``Host:`` 127.0.0.1, localhost or ::1), so ``--search http://127.0.0.1:PORT`` works:

- ``GET /search?q=QUERY&format=json&pageno=N``: ``{"query", "number_of_results", "results":
  [{"url", "title", "content", "engine": "sandbox", ...}], ...}``, 10 results a page, pageno
  from 1; without ``format=json`` the same results as an HTML page. A blank ``q`` or a bad
  ``pageno`` answers 400.
- Queries: words (BM25 over title and visible text), ``link:URL`` (pages linking to URL),
  ``related:URL`` (pages of other sites like URL's page); see ``search_index``.
- Fault modes, by path prefix so a search base URL can point at them:
  ``/fault/500/search`` (always 500), ``/fault/500once/search`` (500 on the first request for
  each distinct ``q``, then normal), ``/fault/html/search`` (200, an HTML body),
  ``/fault/badjson/search`` (200, application/json, truncated), ``/fault/empty/search`` (valid
  JSON, no results), ``/fault/slow/search?delay=S`` (the normal answer after S seconds, 5 s
  by default).

The index covers every page a search engine honouring robots.txt for ``*`` may fetch; it is
built on the first search and kept.
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections.abc import Callable, Iterable
from html import escape
from urllib.parse import parse_qs, urlencode

from jlse.sandbox import response as r
from jlse.sandbox.search_index import SearchIndex

SEARCH_HOST = "search.test"
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")  # the sandbox server itself
PAGE_SIZE = 10
SLOW_SECONDS, MAX_SLOW_SECONDS = 5.0, 60.0
FAULT_MODES = ("500", "500once", "html", "badjson", "empty", "slow")
JSON_TYPE = "application/json"

_PATH = re.compile(r"(?:/fault/([a-z0-9]+))?/search/?")


class BadRequest(ValueError):
    """A search request the engine refuses (400)."""


def serves(host: str) -> bool:
    """Whether requests for ``host`` go to the search engine."""
    return host == SEARCH_HOST or host in LOCAL_HOSTS


def _param(params: dict[str, list[str]], name: str, default: str = "") -> str:
    return params.get(name, [default])[0]


def _pageno(params: dict[str, list[str]]) -> int:
    text = _param(params, "pageno", "1").strip() or "1"
    if not text.isdigit() or int(text) < 1:
        raise BadRequest(f"pageno must be a positive integer, got {text!r}")
    return int(text)


def _delay(params: dict[str, list[str]]) -> float:
    try:
        delay = float(_param(params, "delay", str(SLOW_SECONDS)))
    except ValueError:
        return SLOW_SECONDS
    return min(max(delay, 0.0), MAX_SLOW_SECONDS) if math.isfinite(delay) else SLOW_SECONDS


class SearchEngine:
    """Answers search requests; ``pages()`` gives the ``(url, html)`` pairs to index."""

    def __init__(self, pages: Callable[[], Iterable[tuple[str, str]]]) -> None:
        self._pages = pages
        self._index: SearchIndex | None = None
        self._lock = threading.Lock()

    def index(self) -> SearchIndex:
        """The index, built on first use (one build even when requests race for it)."""
        if self._index is None:
            with self._lock:
                if self._index is None:
                    self._index = SearchIndex(self._pages())
        return self._index

    def warm_up(self) -> threading.Thread:
        """Start building the index in a background thread (searches meanwhile wait for it)."""
        thread = threading.Thread(target=self.index, name="sandbox-search-index", daemon=True)
        thread.start()
        return thread

    def ranked(self, query: str) -> list[tuple[int, float]]:
        """(document, score) of every result of ``query``, best first."""
        query = query.strip()
        if query.startswith("link:"):
            return self.index().links_to(query[len("link:"):])
        if query.startswith("related:"):
            return self.index().related(query[len("related:"):])
        return self.index().search(query)

    def answer(self, query: str, pageno: int = 1) -> dict:
        """The SearxNG JSON object of one results page."""
        ranked = self.ranked(query)
        index = self.index()
        chosen = ranked[(pageno - 1) * PAGE_SIZE: pageno * PAGE_SIZE]
        results = [{"url": index.urls[doc], "title": index.titles[doc],
                    "content": index.snippets[doc], "engine": "sandbox",
                    "engines": ["sandbox"], "positions": [(pageno - 1) * PAGE_SIZE + rank],
                    "score": round(score, 6), "category": "general"}
                   for rank, (doc, score) in enumerate(chosen, start=1)]
        return {"query": query, "number_of_results": len(ranked), "results": results,
                "answers": [], "corrections": [], "infoboxes": [], "suggestions": [],
                "unresponsive_engines": []}

    def respond(self, path: str, query: str, state: r.ServerState) -> r.Response:
        """The answer to ``GET path?query`` on a search host."""
        if path == "/":
            return _html_response(_home_page())
        match = _PATH.fullmatch(path)
        mode = match.group(1) if match else None
        if match is None or (mode is not None and mode not in FAULT_MODES):
            return r.not_found()
        params = parse_qs(query, keep_blank_values=True)
        q = _param(params, "q")
        if mode == "500" or (mode == "500once" and state.count(f"search-500once|{q}") == 0):
            return r.html(500, "Internal Server Error", "the search engine failed (sandbox fault)")
        try:
            response = self._answer_response(q, params, mode)
        except BadRequest as exc:
            return r.plain(400, str(exc))
        if mode == "slow":
            response.delay = _delay(params)
        return response

    def _answer_response(self, q: str, params: dict[str, list[str]],
                         mode: str | None) -> r.Response:
        if not q.strip():
            raise BadRequest("missing search terms (q)")
        pageno = _pageno(params)
        answer = self.answer(q, pageno)
        if mode == "empty":
            answer.update(results=[], number_of_results=0)
        if mode == "html" or (_param(params, "format") != "json" and mode != "badjson"):
            return _html_response(_results_page(answer, pageno))
        body = json.dumps(answer, ensure_ascii=False).encode("utf-8")
        if mode == "badjson":
            body = body[:len(body) // 2]
        return r.Response(200, body, JSON_TYPE)


# --- HTML pages (what a browser gets from SearxNG) ---

def _html_response(text: str) -> r.Response:
    return r.Response(200, text.encode("utf-8"), "text/html; charset=utf-8")


def _document(title: str, body: str) -> str:
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>{escape(title)}</title></head><body>{body}</body></html>\n")


def _form(query: str = "") -> str:
    return (f'<form method="get" action="/search"><input name="q" value="{escape(query)}">'
            '<button type="submit">Search</button></form>')


def _home_page() -> str:
    return _document("sandbox search", "<h1>sandbox search</h1>" + _form())


def _results_page(answer: dict, pageno: int) -> str:
    query = answer["query"]
    items = "".join(
        f'<article class="result"><h3><a href="{escape(hit["url"])}">{escape(hit["title"])}'
        f'</a></h3><p class="content">{escape(hit["content"])}</p></article>'
        for hit in answer["results"])
    pager = ""
    if pageno * PAGE_SIZE < answer["number_of_results"]:
        more = urlencode({"q": query, "pageno": pageno + 1})
        pager = f'<p><a class="next" href="/search?{more}">Next page</a></p>'
    body = (_form(query) + f'<p id="result_count">{answer["number_of_results"]} results</p>'
            + f'<div id="urls">{items}</div>{pager}')
    return _document(f"{query} - sandbox search", body)
