"""The dispatcher: feeds Celery's ``fetch`` queue from the Redis frontier of every active crawl.

Why a dispatcher with backpressure (and not workers popping the frontier themselves): Celery
queues are FIFO, so anything sent ahead loses the frontier's priority order. The dispatcher
keeps at most ``max_outstanding`` tasks per crawl outstanding (leased in the frontier: queued in
Celery or running), default 2 x ``concurrency``. A URL discovered a moment ago with a high
priority therefore waits behind at most that many tasks, and every pop takes the best URL of
the hosts that politeness allows now - the global order survives the queue. Workers stay thin
Celery consumers (monitoring, retries, scaling come from Celery).

A "low" URL (below ``priority_slack`` x the best queued priority) is sent only while fewer than
``low_priority_slots`` low ones are in flight and low ones are fewer than
``low_priority_share`` of the URLs sent (or nothing was sent for ``LOW_AFTER_IDLE`` seconds),
as in the embedded crawl (``jlse.embedded``): a focused crawl whose few relevant hosts wait out
their delay does not fill the waits with junk from every other host, and its harvest does not
depend on the delay.

Each round, per crawl: return expired leases (``reap``: a worker killed with SIGKILL loses no
URL), then pop and send while fewer than ``max_outstanding`` are in flight and the page budget
(``max_pages - fetched - in flight``) is not spent. A crawl is done when ``fetched`` reached
``max_pages`` or the frontier is empty with nothing in flight. The round's Redis side (checks,
reap, counters, pops) is one Lua script (``redis_scripts.DISPATCH``), so it costs one round
trip. Its pops are ``RedisFrontier.pop``'s: politeness and the soft domain diversity rule
(``domain_diversity``, ``priority_slack``) included. Between rounds the dispatcher blocks on the
crawls' ``wake`` lists (BLPOP), which every ack and release fills: it wakes as soon as a host or
a slot is free rather than polling, and otherwise when a sleeping host's delay ends, a lease may
have expired, or ``IDLE_SLEEP`` passed.

Restart-safe: the dispatcher holds no state of its own. Leases, counters and the frontier are
in Redis, results in PostgreSQL; a restarted dispatcher simply carries on (leases handed out by
the previous one are either acknowledged by workers or reaped).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import redis

from jlse.scheduler import redis_scripts
from jlse.scheduler.crawl_registry import CrawlRegistry, RegistryError, settings_from_config
from jlse.scheduler.metrics import serve_dispatcher
from jlse.scheduler.redis_frontier import REAP_BATCH, LeasedTask, RedisFrontier
from jlse.settings import LOW_AFTER_IDLE, Settings

log = logging.getLogger(__name__)

RATE_WINDOW = 5.0  # seconds between pages/s estimates
REAP_EVERY = 0.5  # seconds
IDLE_SLEEP = 0.2  # longest wait between rounds
MIN_WAIT = 0.005  # shortest wait for a sleeping host
# Redis checks blocking timeouts only at its ``hz`` (10/s by default), so a BLPOP may return up
# to 0.1 s late: waits shorter than this are plain sleeps, longer ones stop blocking this early.
BLOCK_SLACK = 0.1


@dataclass
class _Crawl:
    config_sha1: str
    settings: Settings
    frontier: RedisFrontier
    max_outstanding: int
    last_reap: float = 0.0
    rate_sample: tuple[float, float] = field(default_factory=lambda: (time.monotonic(), -1.0))


@dataclass
class DispatchRound:
    """What one round's script did and saw (counts after its pops)."""

    tasks: list[LeasedTask]
    fetched: int
    in_flight: int
    queued: int
    reaped: int
    sleeper_ready_in: float | None  # seconds until the next sleeping host wakes; None: none


SendTask = Callable[[str, dict], None]
_INACTIVE = DispatchRound([], 0, 0, 0, 0, None)  # the crawl left the active set


class Dispatcher:
    def __init__(self, registry: CrawlRegistry, send: SendTask,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.registry = registry
        self.send = send  # (crawl_id, task dict) -> None: sends jlse.fetch (jlse.cluster)
        self.clock = clock
        self.sent = 0
        self._crawls: dict[str, _Crawl] = {}
        self._stopping = False
        self._script = registry.client.register_script(redis_scripts.DISPATCH)
        self._active: list[str] = []
        self._active_read = -float("inf")

    def stop(self) -> None:
        self._stopping = True

    def run(self) -> None:
        """Serve every active crawl until ``stop`` (Ctrl+C / SIGTERM)."""
        log.info("dispatcher serving crawls under %s", self.registry.root)
        metrics = serve_dispatcher(self.registry)  # JLSE_DISPATCHER_METRICS_PORT: Prometheus
        try:
            while not self._stopping:
                try:
                    _, wait = self.round()
                    self.wait(wait)
                except (redis.ConnectionError, redis.TimeoutError) as exc:
                    log.warning("dispatcher: Redis unavailable (%s); retrying", exc)
                    time.sleep(1.0)
        finally:
            if metrics is not None:
                metrics.close()

    def round(self) -> tuple[int, float]:
        """One pass over the active crawls; (tasks sent, seconds until a round is due even if
        no lease ends meanwhile)."""
        total, wait = 0, IDLE_SLEEP
        active = self._active_crawls()
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

    def _active_crawls(self) -> list[str]:
        """The active crawls, read again at most every ``IDLE_SLEEP`` (a new crawl waits that
        long at most; each round's script checks that a served crawl is still active)."""
        now = self.clock()
        if now - self._active_read >= IDLE_SLEEP:
            self._active, self._active_read = self.registry.active(), now
        return self._active

    def wait(self, seconds: float) -> None:
        """Until a lease of a served crawl ends (its ``wake`` list) or ``seconds`` passed."""
        keys = [crawl.frontier.wake_key for crawl in self._crawls.values()]
        if not keys or seconds < BLOCK_SLACK + MIN_WAIT:
            time.sleep(seconds)
        else:
            self.registry.client.blpop(keys, timeout=seconds - BLOCK_SLACK)

    def serve(self, crawl_id: str) -> tuple[int, float]:
        """Dispatch what crawl ``crawl_id`` may have now; (sent, seconds until a round is due
        even if no lease ends meanwhile)."""
        crawl = self._crawl(crawl_id)
        now = self.clock()
        reap = now - crawl.last_reap >= REAP_EVERY
        if reap:
            crawl.last_reap = now
        result = self._dispatch(crawl_id, crawl, reap)
        if result is None:  # registered again (--resume) since cached: settings may differ
            crawl = self._crawl(crawl_id, refresh=True)
            result = self._dispatch(crawl_id, crawl, reap)
            if result is None:
                raise RegistryError(f"crawl {crawl_id!r} changed its config twice in a row")
        if result is _INACTIVE:  # stopped or done meanwhile
            self._crawls.pop(crawl_id, None)
            self._active_read = -float("inf")
            return 0, IDLE_SLEEP
        if result.reaped:
            reaped = result.reaped
            if reaped >= REAP_BATCH:
                reaped += crawl.frontier.reap()
            log.info("crawl %s: %d expired leases returned to the frontier", crawl_id, reaped)
        self._note_rate(crawl_id, crawl, result.fetched)
        self._send_all(crawl_id, crawl, result.tasks)
        self._finish_if_done(crawl_id, crawl, result)
        wait = IDLE_SLEEP  # below REAP_EVERY: expired leases come back on time
        if result.sleeper_ready_in is not None:
            wait = min(wait, max(result.sleeper_ready_in, MIN_WAIT))
        return len(result.tasks), wait

    def _dispatch(self, crawl_id: str, crawl: _Crawl, reap: bool) -> DispatchRound | None:
        """The round's script (see ``redis_scripts.DISPATCH``); None if the config changed,
        ``_INACTIVE`` if the crawl is no longer active."""
        settings, frontier = crawl.settings, crawl.frontier
        prefix = self.registry.prefix(crawl_id)
        args = [frontier.prefix, repr(frontier.now()), repr(frontier.lease_seconds),
                prefix + "counters", prefix + "config", crawl.config_sha1, settings.max_pages,
                crawl.max_outstanding, repr(float(settings.priority_slack)),
                settings.low_priority_slots, REAP_BATCH if reap else 0,
                repr(frontier.default_delay), frontier.max_size, self.registry.root + "crawls",
                crawl_id, repr(float(settings.low_priority_share)), frontier.diversity,
                repr(float(frontier.slack)), repr(LOW_AFTER_IDLE)]
        reply = self._script(args=args)
        if reply[0] == -1:
            return _INACTIVE
        if not reply[0]:
            return None
        fetched, in_flight, queued, reaped, ready_in = reply[1:6]
        tasks = []
        for body, token in zip(reply[6::2], reply[7::2], strict=True):
            task = LeasedTask.from_dict(json.loads(body))
            task.lease = token.decode() if isinstance(token, bytes) else str(token)
            tasks.append(task)
        return DispatchRound(tasks, int(fetched), int(in_flight), int(queued), int(reaped),
                             float(ready_in) if ready_in else None)

    def _send_all(self, crawl_id: str, crawl: _Crawl, tasks: list[LeasedTask]) -> None:
        for i, task in enumerate(tasks):
            try:
                self.send(crawl_id, task.to_dict())
            except Exception:
                for unsent in tasks[i:]:  # back in their places
                    crawl.frontier.release(unsent, 0.0)
                raise
            self.sent += 1

    def _finish_if_done(self, crawl_id: str, crawl: _Crawl, result: DispatchRound) -> None:
        if result.in_flight > 0:
            return
        if result.fetched >= crawl.settings.max_pages:
            reason = "page budget reached"
        elif result.queued == 0:
            reason = "frontier empty"
        else:
            return
        self.registry.set_status(crawl_id, "done", reason)
        self._crawls.pop(crawl_id, None)
        log.info("crawl %s done: %s (%d pages)", crawl_id, reason, result.fetched)

    def _crawl(self, crawl_id: str, refresh: bool = False) -> _Crawl:
        """The cached frontier and settings of a crawl (``refresh``: read its config again;
        each round's script checks that the cached one is still current)."""
        crawl = self._crawls.get(crawl_id)
        if crawl is None or refresh:
            raw = self.registry.config_raw(crawl_id)
            if raw is None:
                raise RegistryError(f"crawl {crawl_id!r} is active but has no config")
            crawl = self._build(crawl_id, raw)
            self._crawls[crawl_id] = crawl
        return crawl

    def _build(self, crawl_id: str, raw: bytes) -> _Crawl:
        try:
            settings = settings_from_config(json.loads(raw))
        except ValueError as exc:
            raise RegistryError(f"crawl {crawl_id!r}: unreadable config ({exc})") from None
        frontier = self.registry.frontier(crawl_id, settings)
        outstanding = settings.max_outstanding or 2 * settings.concurrency
        return _Crawl(hashlib.sha1(raw).hexdigest(), settings, frontier, outstanding)

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
