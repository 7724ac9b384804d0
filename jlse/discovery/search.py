"""A client of the SearxNG JSON API: ``GET {base}/search?q=QUERY&format=json&pageno=N``.

SearxNG is the self-hostable metasearch engine people run in front of Bing, Google or
DuckDuckGo; its answer is ``{"results": [{"url", "title", "content"}, ...]}``. Backlink and
related-page searches are the queries ``link:URL`` and ``related:URL``: an engine that does not
support a form answers nothing for it.

The search URL is trusted configuration (the crawl's address guard does not apply to it, so a
SearxNG on localhost works). Its route is the ``search_proxy`` setting (``search_route``): by
default the standard HTTP(S)_PROXY / NO_PROXY variables, as curl and the crawl read them, except
that a loopback endpoint is always reached directly (a proxy's loopback is not ours); ``direct``
never uses a proxy; a URL is the proxy for every search. It is not the crawl's ``proxy``
setting, which often reaches a web the search engine is not on. Every error names the route
tried. Requests are rate-limited, retried on 5xx and connection errors, and cached per query
for the run; they are never counted as crawled pages.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

import requests

from jlse.redact import redact_url
from jlse.settings import SEARCH_DIRECT as DIRECT

log = logging.getLogger(__name__)

MAX_RESULTS_BYTES = 2 * 1024 * 1024  # one answer page; more is not a search result page
# A search that failed: the next ones get no retries. DOWN_AFTER failed in a row: the engine
# is down, and searches fail at once (no request) for DOWN_SECONDS, doubled after each failed
# probe up to DOWN_MAX_SECONDS; a search that succeeds ends it.
DOWN_AFTER = 2
DOWN_SECONDS = 30.0
DOWN_MAX_SECONDS = 300.0
LOOPBACK_NAMES = ("localhost", "localhost.localdomain")


class SearchError(RuntimeError):
    """The search endpoint gave no usable answer (after retries); ``problem`` is what went
    wrong, without the query (the same for every search while it lasts)."""

    def __init__(self, message: str, problem: str = "") -> None:
        super().__init__(message)
        self.problem = problem or message


class SearchSkipped(SearchError):
    """Not asked: the engine is down (``DOWN_AFTER`` searches failed in a row)."""


@dataclass(frozen=True)
class SearchResult:
    url: str
    title: str = ""
    content: str = ""


def search_endpoint(base_url: str) -> str:
    """``{base}/search`` of a search URL; a ValueError with a clear message when it is not an
    http(s) URL. A URL already ending in ``/search`` is taken as it is."""
    parts = urlsplit(base_url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"--search {base_url!r}: not an http(s) URL (a SearxNG instance, e.g. "
                         "http://127.0.0.1:8888)")
    base = base_url.strip().split("?", 1)[0].rstrip("/")
    return base if base.endswith("/search") else base + "/search"


def search_route(endpoint: str, setting: str = "") -> dict[str, str]:
    """The ``proxies`` of requests for ``endpoint`` (empty: direct) under ``search_proxy``
    (a validated setting: "", ``direct`` or a proxy URL)."""
    if setting == DIRECT:
        return {}
    if setting:
        return {"http": setting, "https": setting}
    if _is_loopback(urlsplit(endpoint).hostname or ""):
        return {}
    return requests.utils.get_environ_proxies(endpoint)


def route_name(endpoint: str, proxies: dict[str, str]) -> str:
    """``direct`` or ``through proxy URL`` (its password masked), as errors say it."""
    proxy = requests.utils.select_proxy(endpoint, proxies)
    return f"through proxy {redact_url(proxy)}" if proxy else DIRECT


def _is_loopback(host: str) -> bool:
    if host.lower().rstrip(".") in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class SearchClient:
    """Queries one SearxNG endpoint; thread-safe."""

    def __init__(self, base_url: str, *, rate: float = 1.0, retries: int = 2,
                 timeout: float = 10.0, user_agent: str = "jlse", proxy: str = "",
                 cache: dict[str, list[dict]] | None = None,
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.endpoint = search_endpoint(base_url)
        self.interval = 1.0 / rate if rate > 0 else 0.0
        self.retries = retries
        self.timeout = timeout
        self.cache = cache if cache is not None else {}  # "page|query" -> results (JSON rows)
        self.requests = self.failures = 0
        self._failed_in_a_row = 0
        self._down_until = 0.0
        self._down_seconds = DOWN_SECONDS
        self._sleep, self._clock = sleep, clock
        self._next_at = 0.0
        self._lock = threading.Lock()
        self.proxies = search_route(self.endpoint, proxy)
        self.route = route_name(self.endpoint, self.proxies)
        self._session = requests.Session()
        self._session.trust_env = False  # the route is self.proxies, decided once
        self._session.headers.update({"User-Agent": user_agent, "Accept": "application/json"})

    def search(self, query: str, page: int = 1) -> list[SearchResult]:
        """The results of one query page; cached. Raises SearchError when the endpoint gives
        no usable answer after ``retries`` more tries."""
        key = f"{page}|{query}"
        if key not in self.cache:
            self.cache[key] = self._fetch(query, page)
        return [SearchResult(row["url"], row.get("title", ""), row.get("content", ""))
                for row in self.cache[key]]

    def close(self) -> None:
        self._session.close()

    def _fetch(self, query: str, page: int) -> list[dict]:
        if self._clock() < self._down_until:
            raise SearchSkipped(f"search {query!r}: not asked, the engine is down (asked again "
                                f"in {self._down_until - self._clock():.0f} s)", "engine down")
        tries = 1 if self._failed_in_a_row else self.retries + 1
        problem = ""
        for attempt in range(tries):
            if attempt:
                self._sleep(min(2.0 ** attempt, 10.0))
            try:
                rows = self._request(query, page)
            except _Retryable as exc:
                problem = str(exc)
                continue
            except SearchError:
                self._failed()
                raise
            self._failed_in_a_row = 0
            self._down_seconds = DOWN_SECONDS
            return rows
        self._failed()
        raise SearchError(f"search {query!r}: {problem} ({tries} tries)", problem)

    def _failed(self) -> None:
        self.failures += 1
        self._failed_in_a_row += 1
        if self._failed_in_a_row >= DOWN_AFTER:
            self._down_until = self._clock() + self._down_seconds
            log.info("search engine %s down (%d searches failed in a row): not asked for %.0f s",
                     self._where, self._failed_in_a_row, self._down_seconds)
            self._down_seconds = min(2 * self._down_seconds, DOWN_MAX_SECONDS)

    def _request(self, query: str, page: int) -> list[dict]:
        self._wait_turn()
        self.requests += 1
        params = {"q": query, "format": "json", "pageno": str(page)}
        try:
            answer = self._session.get(self.endpoint, params=params, timeout=self.timeout,
                                       stream=True, proxies=self.proxies)
        except requests.RequestException as exc:
            raise _Retryable(f"{self._where} unreachable: {type(exc).__name__}") from None
        with answer:
            if answer.status_code >= 500:
                raise _Retryable(f"{self._where} answered HTTP {answer.status_code}")
            if answer.status_code != 200:
                raise SearchError(f"{self._where} answered HTTP {answer.status_code} "
                                  "(is it a SearxNG with the JSON format enabled?)")
            body = answer.raw.read(MAX_RESULTS_BYTES + 1, decode_content=True)
        return _results(body, self.endpoint)

    @property
    def _where(self) -> str:
        return f"{self.endpoint} ({self.route})"

    def _wait_turn(self) -> None:
        """The rate limit: one request per ``interval`` seconds across threads."""
        with self._lock:
            now = self._clock()
            start = max(now, self._next_at)
            self._next_at = start + self.interval
        if start > now:
            self._sleep(start - now)


class _Retryable(Exception):
    pass


def _results(body: bytes, endpoint: str) -> list[dict]:
    """The result rows of a SearxNG JSON answer; SearchError when it is not one."""
    if len(body) > MAX_RESULTS_BYTES:
        raise SearchError(f"{endpoint}: answer larger than {MAX_RESULTS_BYTES} bytes")
    try:
        data = json.loads(body.decode("utf-8", "replace"))
    except ValueError:
        start = body[:60].decode("utf-8", "replace").strip()
        raise SearchError(f"{endpoint}: the answer is not JSON (starts {start!r}); enable the "
                          "json format in SearxNG's settings.yml (search: formats)") from None
    rows = data.get("results") if isinstance(data, dict) else None
    if not isinstance(rows, list):
        raise SearchError(f"{endpoint}: JSON without a results list")
    return [{"url": row["url"], "title": str(row.get("title") or ""),
             "content": str(row.get("content") or "")}
            for row in rows if isinstance(row, dict) and isinstance(row.get("url"), str)]
