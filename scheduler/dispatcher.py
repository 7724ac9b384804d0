"""The dispatcher: feeds Celery's ``fetch`` queue from the Redis frontier of every active crawl.

Why a dispatcher with backpressure (and not workers popping the frontier themselves): Celery
queues are FIFO, so anything sent ahead loses the frontier's priority order. The dispatcher
keeps at most ``max_outstanding`` tasks per crawl outstanding (leased in the frontier: queued in
Celery or running), default 2 x ``concurrency``. A URL discovered a moment ago with a high
priority therefore waits behind at most that many tasks, and every pop takes the best URL of
the hosts that politeness allows now - the global order survives the queue. Workers stay thin
Celery consumers (monitoring, retries, scaling come from Celery).

A "low" URL (below ``priority_slack`` x the best priority queued at a host that may be contacted
within ``LOW_AFTER_IDLE``: one sleeping longer, e.g. after its robots.txt failed, holds nothing
back) is sent only while fewer than
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
crawls' ``wake`` lists (on a Redis Cluster only when it serves one shard of one crawl: a BLPOP
cannot span slots; otherwise it polls every ``CLUSTER_POLL`` seconds), which every ack and
release fills: it wakes as soon as a host or a slot is free rather than polling, and otherwise when a sleeping host's delay ends, a lease may
have expired, or ``IDLE_SLEEP`` passed.

Batches (``fetch_batch`` N > 1): a round sends its URLs N to a message. A shard's round pops
only when at least N pops can be made (free slots, the shard's share, ready hosts; then a
multiple of N), or ``BATCH_WAIT`` after it first held back, or when the crawl has fewer than N
URLs in flight or fewer than N pages left in its budget: otherwise a round per
acknowledgement would send one URL a message. The hold's start is in the shard's Redis, so a
restarted or second dispatcher keeps it.

Shards: a round runs the script once per shard of the crawl this dispatcher serves, keeping the
crawl's order across them (``scheduler.dispatch_shards``). A shard whose Redis is down or failing
over is skipped (its hosts wait; the other shards are served). A shard whose hosts wait for
spilled URLs (``RedisFrontier.refill``) gets a ``jlse.refill`` task at most every
``REFILL_EVERY`` seconds.

Restart-safe: the dispatcher holds no state of its own. Leases, counters and the frontier are
in Redis, results in PostgreSQL; a restarted dispatcher simply carries on (leases handed out by
the previous one are either acknowledged by workers or reaped).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import redis

from jlse.scheduler import redis_scripts
from jlse.scheduler.crawl_registry import (
    CrawlRegistry,
    RegistryError,
    config_sha1,
    settings_from_config,
)
from jlse.scheduler.dispatch_shards import (
    REAP_EVERY,
    REFILL_EVERY,
    CrawlState,
    ShardState,
    parse_shard_spec,
    read_figures,
)
from jlse.scheduler.metrics import serve_dispatcher
from jlse.scheduler.redis_client import UNAVAILABLE, is_cluster
from jlse.scheduler.redis_frontier import REAP_BATCH, LeasedTask, RedisFrontier
from jlse.settings import LOW_AFTER_IDLE

log = logging.getLogger(__name__)

RATE_WINDOW = 5.0  # seconds between pages/s estimates
IDLE_SLEEP = 0.2  # longest wait between rounds
MIN_WAIT = 0.005  # shortest wait for a sleeping host
OTHERS_EVERY = 0.5  # seconds between reads of the shards another dispatcher serves
CLUSTER_POLL = 0.02  # seconds between rounds where a cluster cannot block on every wake list
# Redis checks blocking timeouts only at its ``hz`` (10/s by default), so a BLPOP may return up
# to 0.1 s late: waits shorter than this are plain sleeps, longer ones stop blocking this early.
BLOCK_SLACK = 0.1
WARN_EVERY = 30.0  # seconds between warnings of one crawl's failing rounds
# With fetch_batch N > 1, a shard's round holds its pops back while fewer than N could be made,
# at most this long after it first held them: a dispatcher runs a round per acknowledgement,
# so without it every message held the one slot or host just freed. Short against the 0.2 s
# default politeness delay (a host's next request is at most a quarter of it late) and long
# against the milliseconds a crawl whose Redis is its limit needs to free N slots.
BATCH_WAIT = 0.05


@dataclass
class DispatchRound:
    """What one shard's round script did and saw (counts after its pops)."""

    tasks: list[LeasedTask]
    fetched: int
    in_flight: int
    queued: int
    reaped: int
    sleeper_ready_in: float | None  # seconds until the next sleeping host wakes; None: none
    spilled_hosts: int = 0  # hosts with URLs waiting in the crawl database
    refill_due: int = 0  # of them, hosts due a refill now
    ready_best: float | None = None  # the best priority of a ready host left after the pops
    low_in_flight: int = 0  # of its URLs in flight, those below the low bound
    hold_in: float | None = None  # seconds until its held pops go anyway; None: none held


SendTask = Callable[[str, dict], None]
SendBatch = Callable[[str, list[dict]], None]
SendRefill = Callable[[str, int], None]
_INACTIVE = DispatchRound([], 0, 0, 0, 0, None)  # the crawl left the active set
_UNAVAILABLE = DispatchRound([], 0, 0, 0, 0, None)  # the shard's Redis is down


class Dispatcher:
    def __init__(self, registry: CrawlRegistry, send: SendTask,
                 clock: Callable[[], float] = time.monotonic, *,
                 send_refill: SendRefill | None = None, shard_spec: str | None = None,
                 send_batch: SendBatch | None = None) -> None:
        self.registry = registry
        self.send = send  # (crawl_id, task dict) -> None: sends jlse.fetch (jlse.cluster)
        # (crawl_id, task dicts) -> None: sends jlse.fetch_batch, the crawl's fetch_batch
        # tasks of a round at a time (None: one task per message whatever the setting)
        self.send_batch = send_batch
        self.send_refill = send_refill  # (crawl_id, shard) -> None: sends jlse.refill
        self.clock = clock
        self.shard_index, self.shard_step = parse_shard_spec(shard_spec)
        self.sent = 0
        self._crawls: dict[str, CrawlState] = {}
        self._stopping = False
        self._script = registry.client.register_script(redis_scripts.DISPATCH)
        self._figures = registry.client.register_script(redis_scripts.FIGURES)
        self._cluster = is_cluster(registry.client)
        self._active: list[str] = []
        self._active_read = -float("inf")
        self._warned: dict[str, float] = {}  # crawl -> when a failed round was last logged

    def stop(self) -> None:
        self._stopping = True

    def run(self) -> None:
        """Serve every active crawl until ``stop`` (Ctrl+C / SIGTERM)."""
        log.info("dispatcher serving crawls under %s (shards %d/%d)", self.registry.root,
                 self.shard_index, self.shard_step)
        metrics = serve_dispatcher(self.registry)  # JLSE_DISPATCHER_METRICS_PORT: Prometheus
        try:
            while not self._stopping:
                try:
                    _, wait = self.round()
                    self.wait(wait)
                except (redis.ConnectionError, redis.TimeoutError) as exc:
                    log.warning("dispatcher: Redis unavailable (%s); retrying", exc)
                    time.sleep(1.0)
                except Exception:  # noqa: BLE001 - one bad round must not stop every crawl
                    log.exception("dispatcher: round failed; retrying in 1 s")
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
            except redis.ResponseError as exc:  # a script failed on this crawl's keys
                self._crawls.pop(crawl_id, None)
                self._warn_failed(crawl_id, exc)
                continue
            total += sent
            wait = min(wait, ready_in)
        return total, wait

    def _warn_failed(self, crawl_id: str, exc: Exception) -> None:
        """Say that a crawl's round failed, at most every ``WARN_EVERY`` seconds per crawl
        (its other rounds go on: its keys may be whole again, e.g. after a rebuild)."""
        now = self.clock()
        if now - self._warned.get(crawl_id, -float("inf")) >= WARN_EVERY:
            self._warned[crawl_id] = now
            log.error("crawl %s: a frontier script failed (%s); are its Redis keys damaged? "
                      "`jlse frontier rebuild --crawl-id %s` restores them", crawl_id, exc,
                      crawl_id)

    def _active_crawls(self) -> list[str]:
        """The active crawls, read again at most every ``IDLE_SLEEP`` (a new crawl waits that
        long at most; each round's script checks that a served crawl is still active)."""
        now = self.clock()
        if now - self._active_read >= IDLE_SLEEP:
            self._active, self._active_read = self.registry.active(), now
        return self._active

    def wait(self, seconds: float) -> None:
        """Until a lease of a served shard ends (its ``wake`` list) or ``seconds`` passed."""
        keys = [shard.frontier.wake_key for crawl in self._crawls.values()
                for shard in crawl.shards.values()]
        if self._cluster and len(keys) > 1:
            seconds = min(seconds, CLUSTER_POLL)
        if not keys or seconds < BLOCK_SLACK + MIN_WAIT or (self._cluster and len(keys) > 1):
            time.sleep(seconds)
        else:
            self.registry.client.blpop(keys, timeout=seconds - BLOCK_SLACK)

    def serve(self, crawl_id: str) -> tuple[int, float]:
        """Dispatch what crawl ``crawl_id`` may have now, shard by shard; (sent, seconds until
        a round is due even if no lease ends meanwhile)."""
        crawl = self._crawl(crawl_id)
        sent, wait = 0, IDLE_SLEEP
        if not crawl.shards:  # another dispatcher serves this crawl's shards
            return sent, wait
        sharded = crawl.settings.frontier_shards > 1
        self._read_others(crawl_id, crawl, force=sharded)
        calls = crawl.round_calls() if sharded else [(index, None, None)
                                                     for index in crawl.shards]
        popped: list[tuple[LeasedTask, RedisFrontier]] = []
        try:
            for index, most, floor in calls:
                result = self._serve_shard_safely(crawl_id, crawl, index, floor, most)
                if result is _UNAVAILABLE:  # its URLs wait: they hold back no other shard's
                    crawl.ready.pop(index, None)
                    crawl.left[index] = None
                    continue
                if result is None:  # registered again (--resume) since cached
                    crawl = self._crawl(crawl_id, refresh=True)
                    result = self._serve_shard(crawl_id, crawl, index, floor, most)
                    if result is None:
                        raise RegistryError(f"crawl {crawl_id!r} changed its config twice "
                                            "in a row")
                if result is _INACTIVE:  # stopped or done meanwhile
                    self._crawls.pop(crawl_id, None)
                    self._active_read = -float("inf")
                    return len(popped), IDLE_SLEEP
                popped += [(task, crawl.shards[index].frontier) for task in result.tasks]
                for ready_in in (result.sleeper_ready_in, result.hold_in):
                    if ready_in is not None:
                        wait = min(wait, max(ready_in, MIN_WAIT))
        finally:  # the round's URLs in the crawl's order, whichever shard they came from
            popped.sort(key=lambda pair: -pair[0].priority)
            self._send_all(crawl_id, popped, crawl.settings.fetch_batch)
        sent = len(popped)
        self._finish_if_done(crawl_id, crawl)
        return sent, wait  # IDLE_SLEEP is below REAP_EVERY: expired leases come back on time

    def _serve_shard_safely(self, crawl_id: str, crawl: CrawlState, index: int,
                            floor: float | None, most: int | None) -> DispatchRound | None:
        """``_serve_shard``, or ``_UNAVAILABLE`` while the shard's Redis is down or failing
        over: its hosts wait, the other shards go on (warned once per outage)."""
        shard = crawl.shards[index]
        try:
            result = self._serve_shard(crawl_id, crawl, index, floor, most)
        except UNAVAILABLE as exc:
            if not shard.failing:
                log.warning("crawl %s: shard %d unavailable (%s); its hosts wait", crawl_id,
                            index, exc)
            shard.failing = True
            crawl.down.add(index)
            return _UNAVAILABLE
        crawl.down.discard(index)
        if shard.failing:  # URLs deferred meanwhile wait in the crawl database: refill
            log.info("crawl %s: shard %d is back", crawl_id, index)
            shard.failing = False
            shard.last_refill = -float("inf")
            if self.send_refill is not None and result not in (None, _INACTIVE):
                self.send_refill(crawl_id, index)
                shard.last_refill = self.clock()
        return result

    def _serve_shard(self, crawl_id: str, crawl: CrawlState, index: int,
                     floor: float | None = None, most: int | None = None
                     ) -> DispatchRound | None:
        shard = crawl.shards[index]
        now = self.clock()
        reap = now - shard.last_reap >= REAP_EVERY
        if reap:
            shard.last_reap = now
        result = self._dispatch(crawl_id, crawl, index, reap, floor, most)
        if result is None or result is _INACTIVE:
            return result
        if result.reaped:
            reaped = result.reaped
            if reaped >= REAP_BATCH:
                reaped += shard.frontier.reap()
            log.info("crawl %s: %d expired leases returned to the frontier", crawl_id, reaped)
        crawl.seen[index] = (result.fetched, result.in_flight, result.queued,
                             result.spilled_hosts)
        crawl.low[index] = result.low_in_flight  # the round's next shards see its low pops
        crawl.left[index] = result.ready_best
        self._note_rate(crawl_id, shard, index, result.fetched)
        self._maybe_refill(crawl_id, shard, index, result)
        return result

    def _dispatch(self, crawl_id: str, crawl: CrawlState, index: int, reap: bool,
                  floor: float | None = None, most: int | None = None
                  ) -> DispatchRound | None:
        """The round's script on one shard (see ``redis_scripts.DISPATCH``); None if the config
        changed, ``_INACTIVE`` if the crawl is no longer active."""
        settings, frontier = crawl.settings, crawl.shards[index].frontier
        others = [figures for shard, figures in crawl.seen.items() if shard != index]
        elsewhere = sum(fetched + in_flight for fetched, in_flight, _, _ in others)
        bests = [best for shard, best in crawl.best.items() if shard != index]
        low_elsewhere = sum(low for shard, low in crawl.low.items() if shard != index)
        # a down shard's tasks are stuck until it is back: they take no slot from the others
        in_flight_elsewhere = sum(figures[1] for shard, figures in crawl.seen.items()
                                  if shard != index and shard not in crawl.down)
        max_in_flight = crawl.max_outstanding - in_flight_elsewhere
        values = {"prefix": frontier.prefix, "now": repr(frontier.now()),
                  "lease_seconds": repr(frontier.lease_seconds),
                  "counters": frontier.counters_key,
                  "state": self.registry.shard_prefix(crawl_id, index) + "state",
                  "config_sha1": crawl.config_sha1, "max_pages": settings.max_pages,
                  "max_in_flight": max_in_flight,
                  "priority_slack": repr(float(settings.priority_slack)),
                  "low_slots": settings.low_priority_slots,
                  "reap_batch": REAP_BATCH if reap else 0,
                  "reap_delay": repr(frontier.default_delay), "max_size": frontier.max_size,
                  "window": frontier.window, "elsewhere": elsewhere,
                  "low_share": repr(float(settings.low_priority_share)),
                  "diversity": frontier.diversity, "diversity_slack": repr(float(frontier.slack)),
                  "low_after_idle": repr(LOW_AFTER_IDLE),
                  "crawl_best": repr(max(bests)) if bests else "",
                  "low_elsewhere": low_elsewhere,
                  "floor": "" if floor is None else repr(floor),
                  "max_pops": "" if most is None else most,
                  "min_pops": self._min_pops(crawl), "batch_wait": repr(BATCH_WAIT),
                  "in_flight_elsewhere": in_flight_elsewhere}
        args = [values[name] for name in redis_scripts.DISPATCH_ARGS]
        reply = self._script(keys=[frontier.prefix + "ready"], args=args)
        if reply[0] == -1:
            return _INACTIVE
        if not reply[0]:
            return None
        fetched, in_flight, queued, reaped, ready_in, spilled, due, ready_best, low, hold_in = \
            reply[1:11]
        tasks = []
        for body, token in zip(reply[11::2], reply[12::2], strict=True):
            task = LeasedTask.from_dict(json.loads(body))
            task.lease = token.decode() if isinstance(token, bytes) else str(token)
            tasks.append(task)
        return DispatchRound(tasks, int(fetched), int(in_flight), int(queued), int(reaped),
                             float(ready_in) if ready_in else None, int(spilled), int(due),
                             float(ready_best) if ready_best else None, int(low),
                             float(hold_in) if hold_in else None)

    def _min_pops(self, crawl: CrawlState) -> int:
        """The fewest pops a round of a shard makes before ``BATCH_WAIT`` (the script's
        ``min_pops``; it holds none while the crawl has fewer in flight): the crawl's
        ``fetch_batch`` when messages carry several URLs, else 0 (no hold)."""
        batch = crawl.settings.fetch_batch
        return batch if batch > 1 and self.send_batch is not None else 0

    def _read_others(self, crawl_id: str, crawl: CrawlState, force: bool = False) -> None:
        """Figures of the crawl's shards this dispatcher does not serve (every
        ``OTHERS_EVERY``), or with ``force`` of every shard (a call per shard at the start of
        a round: the page budget and ``max_outstanding`` are the crawl's, and the round's
        shares need every shard's best ready URLs as they are now)."""
        others = [index for index in range(crawl.settings.frontier_shards)
                  if index not in crawl.shards or force]
        now = self.clock()
        if not others or (not force and now - crawl.others_read < OTHERS_EVERY):
            return
        crawl.others_read = now
        for index in others:
            served = crawl.shards.get(index)
            try:
                read_figures(self.registry, self._figures, crawl_id, crawl, index,
                             served.frontier.now() if served else time.time())
                crawl.down.discard(index)
            except UNAVAILABLE:  # its figures stay as last seen; its URLs get no share
                crawl.down.add(index)
                crawl.ready.pop(index, None)

    def _send_all(self, crawl_id: str, popped: list[tuple[LeasedTask, RedisFrontier]],
                  batch: int = 1) -> None:
        """Send a round's tasks in order (the crawl's, across its shards: Celery's queue is
        FIFO), ``batch`` to a message (a worker writes a message's pages together); on a
        failure the unsent ones go back to their shards."""
        batch = batch if self.send_batch is not None else 1
        for start in range(0, len(popped), batch):
            chunk = [task.to_dict() for task, _ in popped[start:start + batch]]
            try:
                if len(chunk) == 1:
                    self.send(crawl_id, chunk[0])
                else:
                    self.send_batch(crawl_id, chunk)
            except Exception:
                for unsent, frontier in popped[start:]:  # back in their places
                    frontier.release(unsent, 0.0)
                raise
            self.sent += len(chunk)

    def _maybe_refill(self, crawl_id: str, shard: ShardState, index: int,
                      result: DispatchRound) -> None:
        now = self.clock()
        # this dispatcher's first round of the shard refills it whatever is due: URLs deferred
        # before it started (a crawl that ended or a dispatcher that died while the shard was
        # down) come back on --resume or a restart
        first = shard.last_refill == -float("inf")
        if (self.send_refill is None or not (result.refill_due or first)
                or now - shard.last_refill < REFILL_EVERY):
            return
        shard.last_refill = now
        self.send_refill(crawl_id, index)

    def _finish_if_done(self, crawl_id: str, crawl: CrawlState) -> None:
        if any(in_flight for _, in_flight, _, _ in crawl.seen.values()):
            return
        if len(crawl.seen) < crawl.settings.frontier_shards:
            return
        self._read_others(crawl_id, crawl, force=len(crawl.shards) <
                          crawl.settings.frontier_shards)
        seen = crawl.seen.values()
        fetched = sum(figures[0] for figures in seen)
        if any(in_flight for _, in_flight, _, _ in seen):
            return
        if fetched >= crawl.settings.max_pages:
            reason = "page budget reached"
        elif not any(queued or spilled for _, _, queued, spilled in seen):
            reason = "frontier empty"
        else:
            return
        self.registry.set_status(crawl_id, "done", reason)
        self._crawls.pop(crawl_id, None)
        log.info("crawl %s done: %s (%d pages)", crawl_id, reason, fetched)

    def _crawl(self, crawl_id: str, refresh: bool = False) -> CrawlState:
        """The cached shards and settings of a crawl (``refresh``: read its config again;
        each round's script checks that the cached one is still current)."""
        crawl = self._crawls.get(crawl_id)
        if crawl is None or refresh:
            raw = self.registry.config_raw(crawl_id)
            if raw is None:
                raise RegistryError(f"crawl {crawl_id!r} is active but has no config")
            crawl = self._build(crawl_id, raw)
            self._crawls[crawl_id] = crawl
        return crawl

    def _build(self, crawl_id: str, raw: bytes) -> CrawlState:
        try:
            settings = settings_from_config(json.loads(raw))
        except ValueError as exc:
            raise RegistryError(f"crawl {crawl_id!r}: unreadable config ({exc})") from None
        served = {index: ShardState(self.registry.shard_frontier(crawl_id, index, settings))
                  for index in range(settings.frontier_shards)
                  if index % self.shard_step == self.shard_index}
        outstanding = settings.max_outstanding or 2 * settings.concurrency
        return CrawlState(config_sha1(raw), settings, served, outstanding)

    def _note_rate(self, crawl_id: str, shard: ShardState, index: int, fetched: int) -> None:
        """Every RATE_WINDOW seconds, store the shard's pages/s over the last window in its
        counters (the crawl's rate is their sum)."""
        now = self.clock()
        started, fetched_then = shard.rate_sample
        if fetched_then < 0:
            shard.rate_sample = (now, fetched)
        elif now - started >= RATE_WINDOW:
            rate = (fetched - fetched_then) / (now - started)
            self.registry.set_counter(crawl_id, "pages_per_s", round(rate, 2), shard=index)
            shard.rate_sample = (now, fetched)
