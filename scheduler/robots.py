"""robots.txt (RFC 9309): fetch once per host, cache, and answer "may we fetch this URL?".

The cache does not fetch by itself: it is given a ``fetch_robots(url) -> RobotsResponse`` function
(``workers.fetcher.Fetcher.fetch_robots``), so ``scheduler`` does not depend on ``workers``.

What a robots.txt fetch means (RFC 9309 section 2.3.1):

* 2xx: the rules are parsed (protego) and obeyed for the user-agent token ``jlse``.
* 4xx, too many redirects, a refused address: "unavailable", everything is allowed.
* 5xx, 429, timeout, connection error: "unreachable", the whole host is disallowed and the answer
  is cached only for ``robots_retry_after`` seconds, after which robots.txt is fetched again. A
  host that is not there (name not found, connection refused: no answer at all, at once) is
  asked again sooner, after ``NOT_THERE_RETRY_AFTER`` seconds: asking costs it nothing, and a
  crawl whose seed hosts are all gone ends in seconds, not minutes. A slow or failing host
  (timeout, 5xx) keeps the full wait.

robots.txt fetches have their own deadline (``robots_deadline``) and at most ``robots_slots`` run
at once per cache: when they are all taken, a URL of a host not yet known is *pending* (its
runner queues it again shortly), so hosts whose robots.txt hangs never hold every fetch slot.
The embedded crawl runs its robots.txt fetches beside its page fetches, not in their slots, and
has many more of them (``robots_slots(settings, embedded=True)``).
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol
from urllib.parse import urlsplit

from protego import Protego

from jlse.records import BODY_FAILED, Outcome

if TYPE_CHECKING:
    from jlse.settings import Settings

log = logging.getLogger(__name__)

_DEFAULT_PORTS = {"http": 80, "https": 443}
_UNREACHABLE_OUTCOMES = {Outcome.TIMEOUT, Outcome.CONNECTION_ERROR, Outcome.ERROR}
NOT_THERE_RETRY_AFTER = 5.0  # seconds (at most robots_retry_after): see the docstring
PENDING_HOSTS = 100_000  # hosts remembered as waiting for a robots.txt slot
PENDING_TTL = 600.0  # seconds a waiting host is remembered


class RobotsResponse(Protocol):
    """What the cache reads of a robots.txt fetch (a ``workers.fetcher.FetchResult``)."""

    @property
    def outcome(self) -> Outcome: ...

    @property
    def status_code(self) -> int | None: ...

    @property
    def text(self) -> str | None: ...

    @property
    def error(self) -> str: ...

    @property
    def n_bytes(self) -> int: ...


@dataclass
class RobotsVerdict:
    allowed: bool
    crawl_delay: float | None = None  # capped at settings.max_crawl_delay
    unavailable: bool = False  # robots.txt 5xx/unreachable: host disallowed for now
    retry_after: float | None = None  # seconds until the host should be tried again
    fetched: bool = False  # this check fetched robots.txt (a request was made to the host)
    pending: bool = False  # not known yet and every robots.txt slot is busy: ask again soon
    sitemaps: tuple[str, ...] = ()  # its Sitemap: lines (only in the verdict that fetched it)


class SharedRobots(Protocol):
    """robots.txt answers shared by every process of a crawl, so a host's robots.txt is
    fetched once per crawl rather than once per process."""

    def get(self, origin: str) -> RobotsResponse | None: ...

    def put(self, origin: str, response: RobotsResponse, ttl: float) -> None: ...


@dataclass
class _Entry:
    """What one host's robots.txt said, until ``expires_at`` (monotonic clock)."""

    expires_at: float
    rules: Protego | None = None  # None: everything allowed (or nothing, if unreachable)
    unreachable: bool = False
    crawl_delay: float | None = None
    sitemaps: tuple[str, ...] = ()  # the Sitemap: lines


def robots_origin(url: str) -> str | None:
    """``scheme://host[:port]`` of ``url`` (default port dropped), or None if it has none."""
    try:
        parts = urlsplit(url)
        scheme, host, port = parts.scheme.lower(), parts.hostname, parts.port
    except ValueError:
        return None
    if scheme not in _DEFAULT_PORTS or not host:
        return None
    if ":" in host:
        host = f"[{host}]"
    if port is not None and port != _DEFAULT_PORTS[scheme]:
        host = f"{host}:{port}"
    return f"{scheme}://{host}"


def agent_token(user_agent: str) -> str:
    """The product token robots.txt groups are matched against: ``jlse/0.1 (...)`` → ``jlse``."""
    words = user_agent.split("/", 1)[0].split()
    return words[0] if words else "*"


class RobotsCache:
    """Per-host robots.txt rules in an LRU of ``robots_cache_size`` hosts, each kept for
    ``robots_cache_ttl`` seconds (``robots_retry_after`` when unreachable)."""

    def __init__(self, settings: Settings, fetch_robots: Callable[[str], RobotsResponse],
                 slots: int | None = None, shared: SharedRobots | None = None) -> None:
        self.settings = settings
        self.slots = slots or robots_slots(settings)
        self.fetch_robots = fetch_robots
        self.shared = shared  # other processes' answers (a cluster: ``redis_robots``)
        self.agent = agent_token(settings.user_agent)
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._loading: dict[str, threading.Lock] = {}  # per-host locks while robots.txt loads
        self._lock = threading.Lock()  # guards _entries and _loading
        self._slots = threading.BoundedSemaphore(self.slots)
        self._pending: OrderedDict[str, float] = OrderedDict()  # origin -> when it waited

    def check(self, url: str) -> RobotsVerdict:
        """May ``url`` be fetched? Fetches robots.txt once per host when it is not cached."""
        if not self.settings.obey_robots:
            return RobotsVerdict(allowed=True)
        origin = robots_origin(url)
        if origin is None:
            return RobotsVerdict(allowed=True)  # not an http(s) URL: the fetcher refuses it
        entry, fetched = self._entry_for(origin)
        if entry is None:
            return RobotsVerdict(False, pending=True, retry_after=self._pending_wait(origin))
        return self._verdict(entry, url, fetched)

    def crawl_delay(self, host: str) -> float | None:
        """Cached Crawl-delay of ``host`` (``name[:port]`` or a URL); None if unknown. No fetch."""
        candidates = [host] if "://" in host else [f"http://{host}", f"https://{host}"]
        for candidate in candidates:
            origin = robots_origin(candidate)
            entry = self._cached(origin) if origin else None
            if entry is not None and entry.crawl_delay is not None:
                return entry.crawl_delay
        return None

    def _entry_for(self, origin: str) -> tuple[_Entry | None, bool]:
        """The host's entry and whether this call fetched it; (None, False) when robots.txt is
        not known and no robots.txt slot is free."""
        entry = self._cached(origin)
        if entry is not None:
            return entry, False
        with self._lock:
            being_loaded = origin in self._loading
        if being_loaded:  # wait for the thread loading it (no slot of our own)
            return self._load_once(origin)
        if not self._slots.acquire(blocking=False):
            return None, False
        try:
            return self._load_once(origin)
        finally:
            self._slots.release()

    def _pending_wait(self, origin: str) -> float:
        now = time.monotonic()
        with self._lock:
            self._pending[origin] = now
            self._pending.move_to_end(origin)
            while self._pending and (len(self._pending) > PENDING_HOSTS
                                     or next(iter(self._pending.values())) < now - PENDING_TTL):
                self._pending.popitem(last=False)
            waiting = len(self._pending)
        return pending_wait(self.settings, waiting, self.slots)

    def _load_once(self, origin: str) -> tuple[_Entry, bool]:
        with self._lock:
            host_lock = self._loading.setdefault(origin, threading.Lock())
        with host_lock:
            entry = self._cached(origin)  # another thread may have loaded it meanwhile
            if entry is not None:
                return entry, False
            entry, fetched = self._load(origin)
            with self._lock:
                self._store(origin, entry)
                self._loading.pop(origin, None)
                self._pending.pop(origin, None)
        return entry, fetched

    def _cached(self, origin: str) -> _Entry | None:
        with self._lock:
            entry = self._entries.get(origin)
            if entry is None:
                return None
            if entry.expires_at <= time.monotonic():
                del self._entries[origin]
                return None
            self._entries.move_to_end(origin)
            return entry

    def _store(self, origin: str, entry: _Entry) -> None:
        """Add ``entry`` and evict the least recently used hosts beyond the cache size."""
        self._entries[origin] = entry
        self._entries.move_to_end(origin)
        while len(self._entries) > self.settings.robots_cache_size:
            self._entries.popitem(last=False)

    def _load(self, origin: str) -> tuple[_Entry, bool]:
        """The host's entry from the shared answers, else fetched (and shared); whether it
        was fetched."""
        robots_url = f"{origin}/robots.txt"
        result = self.shared.get(origin) if self.shared is not None else None
        if result is not None:
            return self._entry(robots_url, result), False
        try:
            result = self.fetch_robots(robots_url)
        except Exception:  # fetch_robots should never raise; if it does, the host waits
            log.exception("fetching %s failed unexpectedly", robots_url)
            return self._unreachable_entry(robots_url, "unexpected error"), True
        entry = self._entry(robots_url, result)
        if self.shared is not None:
            ttl = (self.settings.robots_retry_after if entry.unreachable
                   else self.settings.robots_cache_ttl)
            self.shared.put(origin, result, ttl)
        return entry, True

    def _entry(self, robots_url: str, result: RobotsResponse) -> _Entry:
        if result.outcome is Outcome.OK:
            return self._parsed_entry(robots_url, result.text or "")
        if _is_unreachable(result):
            return self._unreachable_entry(robots_url, result.error or result.outcome.value,
                                           _is_not_there(result))
        log.info(
            "%s unavailable (%s): all allowed", robots_url, result.error or result.outcome.value
        )
        return _Entry(expires_at=time.monotonic() + self.settings.robots_cache_ttl)

    def _parsed_entry(self, robots_url: str, text: str) -> _Entry:
        expires_at = time.monotonic() + self.settings.robots_cache_ttl
        try:
            rules = Protego.parse(text)
            delay = rules.crawl_delay(self.agent)
        except Exception:  # protego is lenient; a crash here means "no usable rules"
            log.warning("%s could not be parsed: all allowed", robots_url, exc_info=True)
            return _Entry(expires_at=expires_at)
        return _Entry(expires_at=expires_at, rules=rules, crawl_delay=self._capped_delay(delay),
                      sitemaps=tuple(rules.sitemaps))

    def _unreachable_entry(self, robots_url: str, reason: str, not_there: bool = False
                           ) -> _Entry:
        retry_after = self.settings.robots_retry_after
        if not_there:
            retry_after = min(retry_after, NOT_THERE_RETRY_AFTER)
        log.warning(
            "%s unreachable (%s): host disallowed for %.0f s", robots_url, reason, retry_after
        )
        return _Entry(expires_at=time.monotonic() + retry_after, unreachable=True)

    def _capped_delay(self, delay: float | None) -> float | None:
        if delay is None or not math.isfinite(delay) or delay < 0:
            return None
        return min(float(delay), self.settings.max_crawl_delay)

    def _verdict(self, entry: _Entry, url: str, fetched: bool) -> RobotsVerdict:
        if entry.unreachable:
            retry_after = max(0.0, entry.expires_at - time.monotonic())
            return RobotsVerdict(False, unavailable=True, retry_after=retry_after, fetched=fetched)
        allowed = True
        if entry.rules is not None:
            try:
                allowed = entry.rules.can_fetch(url, self.agent)
            except Exception:  # an odd URL protego cannot match: no rule applies to it
                log.debug("robots match failed for %s", url, exc_info=True)
        return RobotsVerdict(allowed, crawl_delay=entry.crawl_delay, fetched=fetched,
                             sitemaps=entry.sitemaps if fetched else ())


def robots_slots(settings: Settings, embedded: bool = False) -> int:
    """robots.txt fetches allowed at once: ``robots_slots``, else a quarter of ``concurrency``,
    or 8 x ``concurrency`` in the embedded crawl, where they wait beside the page fetches (a
    robots.txt fetch is cheap I/O: a link farm of hosts whose robots.txt never answers must
    not hold the crawl for long)."""
    if settings.robots_slots:
        return settings.robots_slots
    return 8 * settings.concurrency if embedded else max(1, settings.concurrency // 4)


def pending_wait(settings: Settings, waiting: int, slots: int) -> float:
    """Seconds a host waiting for one of ``slots`` robots.txt slots should stay away: about
    the time the slots need to serve the ``waiting`` hosts (hosts whose robots.txt hang must
    not come back hundreds of times a second, crowding out the hosts that answer)."""
    return settings.robots_deadline * (1.0 + waiting / slots) * random.uniform(0.5, 1.5)


def _is_not_there(result: RobotsResponse) -> bool:
    """No answer from the host at all: its name not found, the connection refused or reset
    before a response (not a timeout: a slow host may be alive)."""
    return (result.outcome is Outcome.CONNECTION_ERROR and result.status_code is None
            and result.n_bytes == 0 and not result.error.startswith(BODY_FAILED))


def _is_unreachable(result: RobotsResponse) -> bool:
    """RFC 9309 "unreachable": server errors and network failures (429 counts as a 5xx)."""
    if result.outcome in _UNREACHABLE_OUTCOMES:
        return True
    if result.outcome is Outcome.HTTP_ERROR:
        status = result.status_code
        return status is None or status >= 500 or status == 429
    return False
