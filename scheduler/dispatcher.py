"""The dispatcher: feeds Celery's ``fetch`` queue from the Redis frontier of every active crawl.

Why a dispatcher with backpressure (and not workers popping the frontier themselves): Celery
queues are FIFO, so anything sent ahead loses the frontier's priority order. The dispatcher
keeps at most ``max_outstanding`` tasks per crawl outstanding (leased in the frontier: queued in
Celery or running), default 2 x ``concurrency``. A URL discovered a moment ago with a high
priority therefore waits behind at most that many tasks, and every pop takes the best URL of
the hosts that politeness allows now - the global order survives the queue. Workers stay thin
Celery consumers (monitoring, retries, scaling come from Celery).

Each round, per crawl: return expired leases (``reap``: a worker killed with SIGKILL loses no
URL), then pop and send while fewer than ``max_outstanding`` are in flight and the page budget
(``max_pages - fetched - in flight``) is not spent. A crawl is done when ``fetched`` reached
``max_pages`` or the frontier is empty with nothing in flight.

Restart-safe: the dispatcher holds no state of its own. Leases, counters and the frontier are
in Redis, results in PostgreSQL; a restarted dispatcher simply carries on (leases handed out by
the previous one are either acknowledged by workers or reaped).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import redis

from jlse.settings import Settings
from scheduler.crawl_registry import CrawlRegistry, RegistryError, settings_from_config
from scheduler.redis_frontier import RedisFrontier

log = logging.getLogger(__name__)

RATE_WINDOW = 5.0  # seconds between pages/s estimates
REAP_EVERY = 0.5  # seconds
IDLE_SLEEP = 0.2  # longest sleep when nothing could be sent
BUSY_POLL = 0.01  # sleep while tasks are in flight: their acks free hosts at any moment


@dataclass
class _Crawl:
    config_raw: bytes
    settings: Settings
    frontier: RedisFrontier
    max_outstanding: int
    last_reap: float = 0.0
    rate_sample: tuple[float, float] = field(default_factory=lambda: (time.monotonic(), -1.0))


SendTask = Callable[[str, dict], None]


class Dispatcher:
    def __init__(self, registry: CrawlRegistry, send: SendTask,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.registry = registry
        self.send = send  # (crawl_id, task dict) -> None: sends jlse.fetch (jlse.cluster)
        self.clock = clock
        self.sent = 0
        self._crawls: dict[str, _Crawl] = {}
        self._stopping = False

    def stop(self) -> None:
        self._stopping = True

    def run(self) -> None:
        """Serve every active crawl until ``stop`` (Ctrl+C / SIGTERM)."""
        log.info("dispatcher serving crawls under %s", self.registry.root)
        while not self._stopping:
            try:
                sent, wait = self.round()
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                log.warning("dispatcher: Redis unavailable (%s); retrying", exc)
                time.sleep(1.0)
                continue
            if sent == 0:
                time.sleep(wait)

    def round(self) -> tuple[int, float]:
        """One pass over the active crawls; (tasks sent, seconds to sleep if none were)."""
        total, wait = 0, IDLE_SLEEP
        active = self.registry.active()
        for crawl_id in list(self._crawls):
            if crawl_id not in active:
                del self._crawls[crawl_id]
        for crawl_id in active:
            try:
                sent, ready_in = self.serve(crawl_id)
            except RegistryError as exc:
                log.warning("dispatcher: %s", exc)
                continue
            total += sent
            wait = min(wait, ready_in)
        return total, wait

    def serve(self, crawl_id: str) -> tuple[int, float]:
        """Dispatch what crawl ``crawl_id`` may have now; (sent, seconds to wait if none was)."""
        crawl = self._crawl(crawl_id)
        now = self.clock()
        if now - crawl.last_reap >= REAP_EVERY:
            crawl.last_reap = now
            reaped = crawl.frontier.reap()
            if reaped:
                log.info("crawl %s: %d expired leases returned to the frontier", crawl_id, reaped)
        fetched = int(self.registry.counters(crawl_id)["fetched"])
        self._note_rate(crawl_id, crawl, fetched)
        in_flight = crawl.frontier.in_flight()
        budget = crawl.settings.max_pages - fetched - in_flight
        sent = 0
        low_below = self._low_priority_bound(crawl)
        low_in_flight = crawl.frontier.in_flight_below(low_below)
        while in_flight < crawl.max_outstanding and budget > 0:
            low_slots_full = low_in_flight >= crawl.settings.low_priority_slots
            task = crawl.frontier.pop(min_priority=low_below if low_slots_full else None)
            if task is None:
                break  # nothing ready, or only low URLs while better ones wait for their host
            self._send(crawl_id, crawl, task)
            sent, in_flight, budget = sent + 1, in_flight + 1, budget - 1
            low_in_flight += task.priority < low_below
        self._finish_if_done(crawl_id, crawl, fetched, in_flight)
        ready_in = crawl.frontier.next_ready_in()
        wait = IDLE_SLEEP if ready_in is None else max(ready_in, 0.005)
        return sent, min(wait, BUSY_POLL) if in_flight else wait

    def _low_priority_bound(self, crawl: _Crawl) -> float:
        """As the embedded crawl: URLs below ``priority_slack`` x the best queued priority are
        "low" and only ``low_priority_slots`` of them may be in flight, so slots left idle by
        busy relevant hosts do not fill with junk."""
        best = crawl.frontier.best_priority()
        return -math.inf if best is None else crawl.settings.priority_slack * best

    def _send(self, crawl_id: str, crawl: _Crawl, task) -> None:
        try:
            self.send(crawl_id, task.to_dict())
        except Exception:
            crawl.frontier.release(task, 0.0)  # not sent: back in its place
            raise
        self.sent += 1

    def _finish_if_done(self, crawl_id: str, crawl: _Crawl, fetched: int, in_flight: int) -> None:
        if in_flight > 0:
            return
        if fetched >= crawl.settings.max_pages:
            reason = "page budget reached"
        elif len(crawl.frontier) == 0:
            reason = "frontier empty"
        else:
            return
        self.registry.set_status(crawl_id, "done", reason)
        self._crawls.pop(crawl_id, None)
        log.info("crawl %s done: %s (%d pages)", crawl_id, reason, fetched)

    def _crawl(self, crawl_id: str) -> _Crawl:
        """The cached frontier and settings of a crawl (rebuilt when its config changes)."""
        raw = self.registry.config_raw(crawl_id)
        if raw is None:
            raise RegistryError(f"crawl {crawl_id!r} is active but has no config")
        crawl = self._crawls.get(crawl_id)
        if crawl is None or crawl.config_raw != raw:
            crawl = self._build(crawl_id, raw)
            self._crawls[crawl_id] = crawl
        return crawl

    def _build(self, crawl_id: str, raw: bytes) -> _Crawl:
        settings = settings_from_config(self.registry.config(crawl_id))
        frontier = RedisFrontier(
            self.registry.client, self.registry.frontier_prefix(crawl_id),
            max_size=settings.frontier_size, lease_seconds=settings.lease_seconds,
            default_delay=settings.politeness_delay)
        outstanding = settings.max_outstanding or 2 * settings.concurrency
        return _Crawl(raw, settings, frontier, outstanding)

    def _note_rate(self, crawl_id: str, crawl: _Crawl, fetched: int) -> None:
        """Every RATE_WINDOW seconds, store pages/s over the last window in the counters."""
        now = self.clock()
        started, fetched_then = crawl.rate_sample
        if fetched_then < 0:
            crawl.rate_sample = (now, fetched)
        elif now - started >= RATE_WINDOW:
            rate = (fetched - fetched_then) / (now - started)
            self.registry.set_counter(crawl_id, "pages_per_s", round(rate, 2))
            crawl.rate_sample = (now, fetched)
