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
row, then the counters, then the lease ends. A worker killed anywhere in between leaves the URL
``queued`` and leased; the lease expires, the dispatcher hands the URL out again, and a task
whose URL is already fetched (or whose lease was meanwhile reaped) is just acknowledged.
"""

from __future__ import annotations

import logging
import os
import socket
from collections import OrderedDict
from functools import cached_property
from typing import Any

from jlse.embedded import UNCOUNTED_OUTCOMES
from learner.learner import Learner
from learner.publish import RedisQTableSource, RedisQTableStore
from models.persist import topic_model_from_bytes
from models.strategies import make_strategy
from scheduler.crawl_registry import CrawlRegistry, connect, settings_from_config, worker_store_url
from scheduler.records import CrawlTask, LinkStatus, NewLink, Outcome
from scheduler.redis_frontier import LeasedTask, RedisFrontier
from scheduler.robots import RobotsCache
from scheduler.store import open_store
from scheduler.store.base import StoreError
from scheduler.store.pages import PageRepository
from scheduler.traps import TrapGuard
from scheduler.urls import host_of
from workers.fetcher import Fetcher
from workers.pipeline import PagePipeline, PageResult

log = logging.getLogger(__name__)

LEARNING_STRATEGIES = frozenset({"jlse", "jlse-paper", "jlse-product"})
MAX_CONTEXTS = 4  # crawls served at once by one worker process


class CrawlContext:
    """Everything one worker process needs for one crawl (built lazily, reused per task)."""

    def __init__(self, crawl_id: str, registry: CrawlRegistry) -> None:
        self.crawl_id = crawl_id
        self.registry = registry
        self.config_raw = registry.config_raw(crawl_id)
        self.config = registry.config(crawl_id)
        self.settings = settings_from_config(self.config)
        self.store = open_store(worker_store_url(self.config["store_url"]))
        settings = self.settings
        self.frontier = RedisFrontier(
            registry.client, registry.frontier_prefix(crawl_id), max_size=settings.frontier_size,
            lease_seconds=settings.lease_seconds, default_delay=settings.politeness_delay)
        self.qtables = RedisQTableStore(registry.client, registry.qtable_prefix(crawl_id))
        self.traps = TrapGuard(settings)
        self.worker_name = f"{os.environ.get('JLSE_WORKER_NAME') or socket.gethostname()}:" \
                           f"{os.getpid()}"
        self._reported_version = -1

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
    def process(self, task: LeasedTask) -> str:
        """Fetch and write one leased URL; a word saying what became of it."""
        if not self.frontier.lease_current(task):
            log.info("dropped %s: its lease ended (reaped or handed out again)", task.url)
            return "stale"
        link = self.store.get_link(task.url_id)
        if link is None or link.status is not LinkStatus.QUEUED:
            self.frontier.ack(task)  # a redelivered task: its result is already written
            return "already done"
        refusal = self._refusal(host_of(task.url))
        if refusal is not None:
            self._reject(task, *refusal)
            self.frontier.ack(task)
            return "rejected"
        result = self.pipeline.process(task)
        self._report_qtable()
        return self._write(result)

    def _refusal(self, host: str) -> tuple[Outcome, str] | None:
        """The embedded crawl's checks before a fetch: host budget, robots.txt given up."""
        if self.registry.host_counts(self.crawl_id, [host])[host] >= \
                self.settings.max_pages_per_host:
            return Outcome.TRAP, "host page budget spent"
        if self._robots_given_up(host):
            return Outcome.ROBOTS_UNAVAILABLE, "robots.txt unavailable"
        return None

    def _robots_given_up(self, host: str, failures: int | None = None) -> bool:
        if failures is None:
            failures = self.registry.robots_failures(self.crawl_id, host)
        return failures > self.settings.robots_unavailable_retries

    def _write(self, result: PageResult) -> str:
        task = result.task
        host = host_of(task.url)
        if result.fetch is not None:
            self.registry.note_host_fetch(self.crawl_id, host)
        refused = self._add_links(result.links)
        deltas = {"trap_refused": refused}
        if result.fetch is not None:
            self.store.record_fetch(result.fetch)
            deltas.update(self._fetch_counts(result))
            word = result.fetch.outcome.value
        elif result.rejected is not None:
            self._reject(task, *result.rejected)
            word = "rejected"
        elif result.requeue_after is not None:
            if self._requeue(task, result.requeue_after):
                return "requeued"
            word = "rejected"
        else:
            word = "nothing"
        counters = self.registry.bump(self.crawl_id, **deltas)
        if "targets" in counters:
            self._maybe_learn(counters["targets"])
        if not self.frontier.ack(task, delay=result.crawl_delay or 0.0):
            log.info("ack of %s found no lease (reaped meanwhile)", task.url)
        return word

    def _fetch_counts(self, result: PageResult) -> dict[str, int]:
        record = result.fetch
        relevant = record.relevance is not None and \
            record.relevance >= self.settings.relevance_threshold
        return {"fetched": int(record.outcome not in UNCOUNTED_OUTCOMES),
                "relevant": int(relevant), "targets": int(record.is_target)}

    def _requeue(self, task: LeasedTask, retry_after: float) -> bool:
        """robots.txt unavailable: retry the host later, a bounded number of times."""
        host = host_of(task.url)
        failures = self.registry.note_robots_failure(self.crawl_id, host)
        if self._robots_given_up(host, failures):
            log.warning("giving up on %s: robots.txt unavailable %d times", host, failures)
            self._reject(task, Outcome.ROBOTS_UNAVAILABLE, "robots.txt unavailable")
            self.frontier.ack(task)
            return False
        self.frontier.release(task, retry_after)
        self.registry.bump(self.crawl_id, requeued=1)
        return True

    def _reject(self, task: CrawlTask, outcome: Outcome, reason: str) -> None:
        self.store.reject(task.url_id, outcome, reason)
        self.registry.bump(self.crawl_id, rejected=1)

    def _add_links(self, links: list[NewLink]) -> int:
        """Trap-check, store and queue new links (Redis dedups and raises priorities);
        how many were refused."""
        hosts = sorted({host_of(link.url) for link in links} - {""})
        self.traps.restore_counts(self.registry.host_counts(self.crawl_id, hosts))
        allowed = []
        for link in links:
            reason = self.traps.refuse_reason(link.url, link.depth, link.pattern_run)
            if reason is None:
                allowed.append(link)
            else:
                log.debug("refused %s: %s", link.url, reason)
        if allowed:
            ids = self.store.add_links(allowed)
            self.frontier.add_new([_task_of(link, url_id)
                                   for link, (url_id, _) in zip(allowed, ids, strict=True)])
        return len(links) - len(allowed)

    def _maybe_learn(self, targets: int) -> None:
        if self.settings.strategy not in LEARNING_STRATEGIES:
            return
        if self.registry.claim_learning(self.crawl_id, targets, self.settings.cf):
            from workers.celery_app import LEARN_QUEUE, app

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


# --- the per-process cache -------------------------------------------------------------------
_registry: CrawlRegistry | None = None
_contexts: OrderedDict[str, CrawlContext] = OrderedDict()


def get_registry() -> CrawlRegistry:
    global _registry
    if _registry is None:
        _registry = CrawlRegistry(connect())
    return _registry


def get_context(crawl_id: str) -> CrawlContext:
    """The cached context of ``crawl_id``, rebuilt when its registration changed (--resume)."""
    registry = get_registry()
    context = _contexts.get(crawl_id)
    if context is not None and context.config_raw != registry.config_raw(crawl_id):
        drop_context(crawl_id)
        context = None
    if context is None:
        context = CrawlContext(crawl_id, registry)
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
    try:
        return get_context(crawl_id).process(LeasedTask.from_dict(task))
    except StoreError:
        drop_context(crawl_id)
        raise


def learn_qtable(crawl_id: str) -> int:
    """The ``jlse.learn`` task body."""
    try:
        return get_context(crawl_id).learn()
    except StoreError:
        drop_context(crawl_id)
        raise
