"""What a Celery worker does for a distributed crawl: the embedded writer, with shared backends.

Each worker process keeps one ``CrawlContext`` per crawl (settings and topic model from Redis,
the PostgreSQL store, the Redis frontier, fetcher, robots cache, strategy, pipeline), built on
first use. ``process`` runs ``PagePipeline.process`` and writes its result exactly as
``jlse.embedded`` does (history row / rejection / requeue, trap-checked links, counters), with
two differences that come from sharing the crawl between machines:

- the per-host page budget (``max_pages_per_host``) and the robots.txt failure counts live in
  Redis hashes, so every worker sees every fetch;
- the robots.txt cache is per process: each worker process fetches a host's robots.txt once
  itself (politeness between that fetch and the page fetch is kept as in the embedded crawl).

Write order is crash-safe: links first (PostgreSQL, then the frontier), then the page's own
row, then the counters and the end of the lease in one atomic step. A worker killed anywhere in
between leaves the URL ``queued`` and leased; the lease expires, the dispatcher hands the URL
out again, and a task whose URL is already fetched (or whose lease was meanwhile reaped) is
just acknowledged. Counters move only with the live lease: a worker whose lease was reaped
(e.g. cut off the network) still writes its rows but counts nothing, so fetched + in flight
never exceeds the page budget.

Round trips per page: Redis 4 (the checks before the task in one script, host counts, new
links, counters + ack in one script), PostgreSQL 3 transactions (the link's state, new links,
the fetch in one statement). Links this process already wrote with no lower priority are not
written again (``_written``).
"""

from __future__ import annotations

import json
import logging
import math
import os
import socket
import threading
from collections import OrderedDict
from contextlib import AbstractContextManager, nullcontext
from functools import cached_property
from typing import Any

from jlse.learner.learner import Learner
from jlse.learner.publish import RedisQTableSource, RedisQTableStore
from jlse.models.persist import topic_model_from_bytes
from jlse.models.strategies import make_strategy
from jlse.scheduler.crawl_registry import (
    CrawlRegistry,
    RegistryError,
    TaskStart,
    config_sha1,
    connect,
    settings_from_config,
    worker_store_url,
)
from jlse.scheduler.redis_frontier import LeasedTask, RedisFrontier
from jlse.scheduler.robots import RobotsCache
from jlse.scheduler.store import open_store
from jlse.scheduler.store.base import StoreError
from jlse.scheduler.store.pages import PageRepository
from jlse.scheduler.traps import TrapGuard
from jlse.scheduler.urls import host_of
from jlse.workers.fetcher import Fetcher
from jlse.workers.pipeline import PagePipeline, PageResult

from jlse.embedded import UNCOUNTED_OUTCOMES
from jlse.records import CrawlTask, FetchRecord, LinkStatus, NewLink, Outcome

log = logging.getLogger(__name__)

LEARNING_STRATEGIES = frozenset({"jlse", "jlse-paper", "jlse-product"})
MAX_CONTEXTS = 4  # crawls served at once by one worker process
WRITTEN_LINKS = 50_000  # URLs a context remembers having written (about 10 MB)


class CrawlContext:
    """Everything one worker process needs for one crawl (built lazily, reused per task)."""

    def __init__(self, crawl_id: str, registry: CrawlRegistry) -> None:
        self.crawl_id = crawl_id
        self.registry = registry
        raw = registry.config_raw(crawl_id)
        if raw is None:
            raise RegistryError(f"crawl {crawl_id!r} is not registered in Redis")
        self.config_sha1 = config_sha1(raw)
        try:
            self.config = json.loads(raw)
        except ValueError as exc:
            raise RegistryError(f"crawl {crawl_id!r}: unreadable config ({exc})") from None
        self.settings = settings_from_config(self.config)
        self.store = open_store(worker_store_url(self.config["store_url"]))
        settings = self.settings
        self.frontier = RedisFrontier(
            registry.client, registry.frontier_prefix(crawl_id), max_size=settings.frontier_size,
            lease_seconds=settings.lease_seconds, default_delay=settings.politeness_delay)
        self.qtables = RedisQTableStore(registry.client, registry.qtable_prefix(crawl_id))
        self.counters_key = registry.prefix(crawl_id) + "counters"
        self.traps = TrapGuard(settings)
        self.worker_name = f"{os.environ.get('JLSE_WORKER_NAME') or socket.gethostname()}:" \
                           f"{os.getpid()}"
        self._reported_version = -1
        # URL -> highest priority this process wrote it with to PostgreSQL and the frontier.
        # Both keep a known URL's row and only raise a queued URL's priority, so writing it
        # again with no higher priority changes nothing: site menus and footers repeat on every
        # page, and most out-links skip both round trips' worth of work.
        self._written: OrderedDict[str, float] = OrderedDict()
        self._written_lock = threading.Lock()  # a thread pool shares the context

    @cached_property
    def qtable_source(self) -> RedisQTableSource:
        return RedisQTableSource(self.qtables)

    @cached_property
    def fetcher(self) -> Fetcher:
        return Fetcher(self.settings)

    @cached_property
    def pipeline(self) -> PagePipeline:
        settings = self.settings
        blob = self.registry.model_bytes(self.crawl_id)
        model = topic_model_from_bytes(blob, f"crawl {self.crawl_id} model") if blob else None
        strategy = make_strategy(settings.strategy, settings, model, self.qtable_source)
        robots = RobotsCache(settings, self.fetcher.fetch_robots) if settings.obey_robots else None
        pages_dir = os.environ.get("JLSE_PAGES_DIR")  # the page repository is per machine
        pages = PageRepository(pages_dir) if pages_dir and settings.store_pages else None
        return PagePipeline(settings, self.fetcher, robots, strategy, model,
                            self.traps.child_pattern_run, pages)

    def close(self) -> None:
        if "fetcher" in self.__dict__:
            self.fetcher.close()
        self.store.close()

    # --- one task ------------------------------------------------------------------------
    def start(self, task: LeasedTask) -> TaskStart | None:
        """The checks before ``task`` (one round trip); None if the crawl's config changed.
        A live lease is shortened to ``worker_lease_seconds`` from now: this worker's heartbeat
        (``workers.lease_keeper``) renews it while the task runs, and if the worker dies the URL
        comes back that soon."""
        settings = self.settings
        hold = min(settings.worker_lease_seconds, settings.lease_seconds)
        return self.registry.task_start(self.crawl_id, self.config_sha1, task,
                                        deadline=self.frontier.now() + hold)

    def process(self, task: LeasedTask, start: TaskStart) -> str:
        """Fetch and write one leased URL; a word saying what became of it."""
        if not start.lease_current:
            log.info("dropped %s: its lease ended (reaped or handed out again)", task.url)
            return "stale"
        with self._autocommit():
            link = self.store.get_link(task.url_id)
        if link is None or link.status is not LinkStatus.QUEUED:
            self.frontier.ack(task)  # a redelivered task: its result is already written
            return "already done"
        refusal = self._refusal(start)
        if refusal is not None:
            self._finish(task, self._reject(task, *refusal))
            return "rejected"
        result = self.pipeline.process(task)
        self._report_qtable()
        return self._write(result)

    def _refusal(self, start: TaskStart) -> tuple[Outcome, str] | None:
        """The embedded crawl's checks before a fetch: host budget, robots.txt given up."""
        if start.host_fetched >= self.settings.max_pages_per_host:
            return Outcome.TRAP, "host page budget spent"
        if self._robots_given_up(start.robots_failures):
            return Outcome.ROBOTS_UNAVAILABLE, "robots.txt unavailable"
        return None

    def _robots_given_up(self, failures: int) -> bool:
        return failures > self.settings.robots_unavailable_retries

    def _write(self, result: PageResult) -> str:
        task = result.task
        link_hosts = sorted({host_of(link.url) for link in result.links} - {""})
        fetched_host = host_of(task.url) if result.fetch is not None else None
        counts = self.registry.fetch_counts(self.crawl_id, fetched_host, link_hosts)
        deltas = {"trap_refused": self._add_links(result.links, counts)}
        if result.fetch is not None:
            self._record(result.fetch)
            deltas.update(self._fetch_counts(result))
            word = result.fetch.outcome.value
        elif result.rejected is not None:
            deltas.update(self._reject(task, *result.rejected))
            word = "rejected"
        elif result.requeue_after is not None:
            requeued = self._requeue(task, result.requeue_after)
            if requeued is None:
                return "requeued"
            deltas.update(requeued)
            word = "rejected"
        else:
            word = "nothing"
        self._finish(task, deltas, result.crawl_delay)
        return word

    def _record(self, record: FetchRecord) -> None:
        """Write the fetch (PostgreSQL: one statement; a page written meanwhile by a worker
        whose lease was reaped keeps that row, and gets a second history row)."""
        record_once = getattr(self.store, "record_fetch_once", None)
        if record_once is None:
            self.store.record_fetch(record)
            return
        with self._autocommit():
            written = record_once(record)
        if not written:
            log.info("%s was written meanwhile by another worker", record.url)

    def _autocommit(self) -> AbstractContextManager:
        """PostgreSQL: the next calls without BEGIN/COMMIT round trips (see the store)."""
        autocommit = getattr(self.store, "autocommit", None)
        return nullcontext() if autocommit is None else autocommit()

    def _finish(self, task: LeasedTask, deltas: dict[str, int],
                delay: float | None = None) -> None:
        """Counters, then the lease ends (one round trip); maybe a learning round."""
        live, counters = self.frontier.finish(task, delay=delay or 0.0,
                                              counters_key=self.counters_key, deltas=deltas)
        if "targets" in counters:
            self._maybe_learn(counters["targets"])
        if not live:
            log.info("ack of %s found no lease (reaped meanwhile)", task.url)

    def _fetch_counts(self, result: PageResult) -> dict[str, int]:
        record = result.fetch
        relevant = record.relevance is not None and \
            record.relevance >= self.settings.relevance_threshold
        return {"fetched": int(record.outcome not in UNCOUNTED_OUTCOMES),
                "relevant": int(relevant), "targets": int(record.is_target)}

    def _requeue(self, task: LeasedTask, retry_after: float) -> dict[str, int] | None:
        """robots.txt unavailable: retry the host later (None), a bounded number of times
        (then the rejection's counter deltas)."""
        host = host_of(task.url)
        failures = self.registry.note_robots_failure(self.crawl_id, host)
        if self._robots_given_up(failures):
            log.warning("giving up on %s: robots.txt unavailable %d times", host, failures)
            return self._reject(task, Outcome.ROBOTS_UNAVAILABLE, "robots.txt unavailable")
        self.frontier.finish(task, requeue=True, delay=retry_after,
                             counters_key=self.counters_key, deltas={"requeued": 1})
        return None

    def _reject(self, task: CrawlTask, outcome: Outcome, reason: str) -> dict[str, int]:
        """The rejection's row; its counter deltas (added when the lease ends)."""
        self.store.reject(task.url_id, outcome, reason)
        return {"rejected": 1}

    def _add_links(self, links: list[NewLink], host_counts: dict[str, int]) -> int:
        """Trap-check (``host_counts``: pages fetched per link host), store and queue new
        links (Redis dedups and raises priorities); how many were refused."""
        self.traps.restore_counts(host_counts)
        allowed = []
        for link in links:
            reason = self.traps.refuse_reason(link.url, link.depth, link.pattern_run)
            if reason is None:
                allowed.append(link)
            else:
                log.debug("refused %s: %s", link.url, reason)
        fresh = [link for link in allowed
                 if not self._written.get(link.url, -math.inf) >= link.priority]  # NaN: raise
        if fresh:
            with self._autocommit():
                ids = self.store.add_links(fresh)
            self.frontier.add_new([_task_of(link, url_id)
                                   for link, (url_id, _) in zip(fresh, ids, strict=True)])
            self._remember(fresh)
        return len(links) - len(allowed)

    def _remember(self, links: list[NewLink]) -> None:
        written = self._written
        with self._written_lock:
            for link in links:
                written[link.url] = max(link.priority, written.get(link.url, -math.inf))
                written.move_to_end(link.url)
            while len(written) > WRITTEN_LINKS:
                written.popitem(last=False)

    def _maybe_learn(self, targets: int) -> None:
        if self.settings.strategy not in LEARNING_STRATEGIES:
            return
        if self.registry.claim_learning(self.crawl_id, targets, self.settings.cf):
            from jlse.workers.celery_app import LEARN_QUEUE, app

            app.send_task("jlse.learn", args=[self.crawl_id], queue=LEARN_QUEUE)
            log.info("crawl %s: %d results, learning round sent", self.crawl_id, targets)

    def _report_qtable(self) -> None:
        version = self.qtable_source.version
        if version != self._reported_version:
            self.registry.note_worker(self.crawl_id, self.worker_name, version)
            self._reported_version = version

    # --- learning ------------------------------------------------------------------------
    def learn(self) -> int:
        """One learning round from PostgreSQL, published to Redis; the version (0 if none)."""
        table = Learner(self.settings).learn(self.store, version=self.qtables.next_version())
        if table is None:
            return 0
        self.qtables.publish(table)
        return int(table.version)


def _task_of(link: NewLink, url_id: int) -> CrawlTask:
    return CrawlTask(url=link.url, url_id=url_id, priority=link.priority, depth=link.depth,
                     parent_id=link.parent_id, anchor_text=link.anchor_text,
                     context=link.context, redirect_hops=link.redirect_hops,
                     pattern_run=link.pattern_run)


def preload() -> None:
    """Warm what every crawl needs, once per worker before Celery forks its pool: the modules
    imported here and jieba's dictionary with its array form (about 3 s of CPU that each
    prefork child would otherwise spend on its first task)."""
    from jlse.models import tokenizer

    tokenizer.prepare(["中文"])


# --- the per-process cache -------------------------------------------------------------------
_registry: CrawlRegistry | None = None
_contexts: OrderedDict[str, CrawlContext] = OrderedDict()


def get_registry() -> CrawlRegistry:
    global _registry
    if _registry is None:
        _registry = CrawlRegistry(connect())
    return _registry


def get_context(crawl_id: str) -> CrawlContext:
    """The cached context of ``crawl_id`` (built on first use; ``process_task`` rebuilds it
    when the crawl was registered again, e.g. by --resume)."""
    context = _contexts.get(crawl_id)
    if context is None:
        context = CrawlContext(crawl_id, get_registry())
        _contexts[crawl_id] = context
        while len(_contexts) > MAX_CONTEXTS:
            drop_context(next(iter(_contexts)))
    _contexts.move_to_end(crawl_id)
    return context


def drop_context(crawl_id: str) -> None:
    context = _contexts.pop(crawl_id, None)
    if context is not None:
        try:
            context.close()
        except Exception:  # noqa: BLE001 - closing a broken connection may fail too
            log.debug("closing the context of %s failed", crawl_id, exc_info=True)


def process_task(crawl_id: str, task: dict[str, Any]) -> str:
    """The ``jlse.fetch`` task body. A store failure drops the context (reconnect on retry)."""
    leased = LeasedTask.from_dict(task)
    try:
        context = get_context(crawl_id)
        start = context.start(leased)
        if start is None:  # registered again since the context was built (--resume)
            drop_context(crawl_id)
            context = get_context(crawl_id)
            start = context.start(leased)
            if start is None:
                raise RegistryError(f"crawl {crawl_id!r}: its config keeps changing")
        return context.process(leased, start)
    except StoreError:
        drop_context(crawl_id)
        raise


def learn_qtable(crawl_id: str) -> int:
    """The ``jlse.learn`` task body (rare: the config is read again each time)."""
    try:
        context = get_context(crawl_id)
        raw = context.registry.config_raw(crawl_id)
        if raw is None or config_sha1(raw) != context.config_sha1:  # registered again
            drop_context(crawl_id)
            context = get_context(crawl_id)
        return context.learn()
    except StoreError:
        drop_context(crawl_id)
        raise
