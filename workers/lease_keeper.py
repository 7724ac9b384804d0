"""The heartbeat of a fetch worker's leases.

A leased URL goes back to the frontier when its lease ends. A task may run for up to the Celery
time limit (120 s), so without a heartbeat every lease would have to last longer than that, and
the URLs a dead worker held would wait that long; near the end of a crawl (the page budget
counts leased URLs) the whole crawl would wait with them. So the main process of each Celery worker renews, every ``RENEW_EVERY``
seconds, the leases of the fetch tasks it has received and not yet finished, to
``worker_lease_seconds`` ahead (capped at the crawl's ``lease_seconds``); the first renewal
is at the task's start (``CrawlContext.start``). A worker killed with SIGKILL or cut off the
network stops renewing, and its URLs are reaped that soon. Tasks not yet
received by any worker keep the full ``lease_seconds``.

What the worker holds comes from Celery's own bookkeeping (``celery.worker.state.requests``:
every request received and not yet finished, the one remote control's ``inspect`` reports).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable

import redis

from jlse.scheduler.crawl_registry import CrawlRegistry, RegistryError, settings_from_config
from jlse.scheduler.sharded_frontier import ShardedFrontier

log = logging.getLogger(__name__)

RENEW_EVERY = 1.0  # seconds between heartbeats
SETTINGS_TTL = 30.0  # seconds a crawl's lease settings are cached
FETCH_TASK = "jlse.fetch"
FETCH_BATCH_TASK = "jlse.fetch_batch"  # args: crawl id, a list of task dicts

Held = Callable[[], Iterable[tuple[str, dict]]]  # (crawl id, task dict) of each held fetch task


def celery_held() -> list[tuple[str, dict]]:
    """The fetch tasks this Celery worker has received and not finished (each URL of a
    batch)."""
    from celery.worker import state

    held = []
    for request in list(dict(state.requests).values()):  # a copy: the consumer changes it
        args = request.args
        if not args or len(args) != 2:
            continue
        if request.name == FETCH_TASK:
            held.append((args[0], args[1]))
        elif request.name == FETCH_BATCH_TASK and isinstance(args[1], list):
            held.extend((args[0], task) for task in args[1])
    return held


class LeaseKeeper:
    """Renews held leases; ``start`` runs it in a daemon thread until ``stop``."""

    def __init__(self, registry: CrawlRegistry, held: Held = celery_held,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.registry = registry
        self.held = held
        self.clock = clock
        self._seconds: dict[str, tuple[float, float | None]] = {}  # crawl -> (read at, seconds)
        self._frontiers: dict[str, ShardedFrontier] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = False

    def renew_once(self) -> int:
        """One heartbeat; how many leases were renewed."""
        by_crawl: dict[str, list[tuple[str, str]]] = defaultdict(list)
        for crawl_id, task in self.held():
            url, token = task.get("url"), task.get("lease")
            if isinstance(url, str) and isinstance(token, str) and token:
                by_crawl[crawl_id].append((url, token))
        renewed = 0
        for crawl_id, leases in by_crawl.items():
            seconds = self.lease_seconds(crawl_id)
            if seconds is not None:
                renewed += self._frontier(crawl_id).renew(leases, seconds)
        return renewed

    def _frontier(self, crawl_id: str) -> ShardedFrontier:
        frontier = self._frontiers.get(crawl_id)
        if frontier is None:
            frontier = self._frontiers[crawl_id] = self.registry.frontier(crawl_id)
        return frontier

    def lease_seconds(self, crawl_id: str) -> float | None:
        """How far ahead a held lease of the crawl is renewed; None if it is not registered.
        A crawl gone from Redis (its keys lost) is asked again at the next heartbeat: cached,
        its leases would go unrenewed for ``SETTINGS_TTL`` after ``jlse frontier rebuild``
        restored it, and lapse under the tasks running."""
        cached = self._seconds.get(crawl_id)
        if cached is None or self.clock() - cached[0] >= SETTINGS_TTL:
            try:
                settings = settings_from_config(self.registry.config(crawl_id))
            except RegistryError:  # gone (e.g. Redis lost its keys): nothing to renew now
                self._seconds.pop(crawl_id, None)
                return None
            seconds = min(settings.worker_lease_seconds, settings.lease_seconds)
            cached = self._seconds[crawl_id] = (self.clock(), seconds)
        return cached[1]

    def start(self) -> None:
        log.info("lease heartbeat: every %.0f s", RENEW_EVERY)
        self._thread = threading.Thread(target=self._run, name="jlse-lease-keeper", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(RENEW_EVERY):
            try:
                self.renew_once()
            except (redis.RedisError, ValueError) as exc:
                if not self._failing:  # once per outage, not every second
                    log.warning("lease heartbeat failed (%s); retrying every %.0f s", exc,
                                RENEW_EVERY)
                self._failing = True
                continue
            except Exception:  # a bug here must not kill the thread: leases would lapse
                log.exception("lease heartbeat failed")
                continue
            if self._failing:
                log.info("lease heartbeat back")
                self._failing = False
