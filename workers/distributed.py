"""What a Celery worker does for a distributed crawl: a thin runner around the crawl engine.

Each worker process keeps one ``CrawlContext`` per crawl (settings and topic model from Redis,
the PostgreSQL store, the Redis frontier and host ledger, the engine), built on first use. A
task runs the engine's checks before a fetch (on the figures ``CrawlRegistry.task_start`` read
in one round trip), the per-page pipeline and the result writer: the same
``jlse.workers.engine`` code as the embedded crawl. What differs comes from sharing the crawl
between machines: per-host page counts and robots.txt failures live in Redis
(``RedisHostLedger``); robots.txt answers are shared through Redis (``redis_robots``); a task whose lease is no longer the
live one is dropped, and one whose URL is already written is only acknowledged.

Round trips per page: Redis 4 (the checks before the task in one script, host counts, new
links, counters + ack in one script), PostgreSQL 3 transactions (the link's state, new links,
the fetch in one statement). A batch (``jlse.fetch_batch``, ``fetch_batch`` URLs) takes the
same per URL but for PostgreSQL: a read of each link's state, then 2 commits for the batch
(every page's new links, then every page's row).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import cached_property
from pathlib import Path
from typing import Any, TypeVar

from jlse.learner.incremental import IncrementalLearner
from jlse.learner.publish import RedisQTableSource, RedisQTableStore
from jlse.learner.qtable_cache import MachineCache
from jlse.models.persist import topic_model_from_bytes
from jlse.models.strategy_catalog import make_strategy
from jlse.records import LinkStatus
from jlse.scheduler.crawl_registry import (
    CrawlRegistry,
    RegistryError,
    TaskStart,
    config_sha1,
    connect,
    worker_store_url,
)
from jlse.scheduler.redis_frontier import LeasedTask
from jlse.scheduler.redis_robots import RedisRobotsStore
from jlse.scheduler.store import open_store
from jlse.scheduler.store.base import StoreError
from jlse.workers import page_store
from jlse.workers.engine import CrawlEngine, build_engine, redis_backends, refusal
from jlse.workers.worker_trust import UntrustedConfig, WorkerEnvironment, trusted_config

log = logging.getLogger(__name__)
T = TypeVar("T")

LEARNING_STRATEGIES = frozenset({"jlse", "jlse-paper", "jlse-product"})
MAX_CONTEXTS = 4  # crawls served at once by one worker process
REFUSAL_LOG_SECONDS = 60.0
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
        self.trusted = trusted_config(self.config, WorkerEnvironment.from_environ())
        self.settings = self.trusted.settings  # proxy and address guard: the worker's own
        self.store = open_store(worker_store_url(self.trusted.store_url))
        self.frontier, self.ledger = redis_backends(registry, crawl_id, self.settings)
        self.frontier.defer = self._defer
        prefix = registry.qtable_prefix(crawl_id)  # one copy per machine of each version
        self.qtables = RedisQTableStore(registry.client, prefix,
                                        cache=MachineCache.for_prefix(prefix))
        self.worker_name = f"{os.environ.get('JLSE_WORKER_NAME') or socket.gethostname()}:" \
                           f"{os.getpid()}"
        self._reported_version = -1

    @cached_property
    def qtable_source(self) -> RedisQTableSource:
        return RedisQTableSource(self.qtables)

    @cached_property
    def engine(self) -> CrawlEngine:
        self.trusted.check_fetching()
        settings = self.settings
        blob = self.registry.model_bytes(self.crawl_id)
        model = topic_model_from_bytes(blob, f"crawl {self.crawl_id} model") if blob else None
        strategy = make_strategy(settings.strategy, settings, model, self.qtable_source)
        pages_dir = os.environ.get("JLSE_PAGES_DIR")  # the page repository is per machine
        on_targets = self._maybe_learn if strategy.learns == "qtable" else None
        # without the shared page store, WARC files are per machine (default: next to the page
        # repository, or ./warc)
        warc_dir = os.environ.get("JLSE_WARC_DIR") or (None if pages_dir else "warc")
        robots = RedisRobotsStore(self.registry.client, self.registry.prefix(self.crawl_id),
                                  self.crawl_id, settings.frontier_shards)
        return build_engine(settings, self.store, self.frontier, self.ledger, strategy, model,
                            pages_dir, on_targets=on_targets, warc_dir=warc_dir,
                            shared_robots=robots, page_store=self._page_store())

    def _page_store(self) -> Path | None:
        """The shared page store this crawl's pages go to (None: off); its folder is noted in
        the crawl database for ``jlse export``."""
        directory = page_store.store_dir() if self.settings.pages_store else None
        if directory is not None:
            page_store.check_writable(directory)
            with self.store.autocommit():
                self.store.set_meta(page_store.META_KEY, str(directory))
        return directory

    def close(self) -> None:
        if "engine" in self.__dict__:
            self.engine.close()
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
                                        deadline=self.frontier.now() + hold,
                                        shards=settings.frontier_shards)

    def process(self, task: LeasedTask, start: TaskStart) -> str:
        """Fetch and write one leased URL; a word saying what became of it."""
        word = self._before(task, start)
        if word is not None:
            return word
        result = self.engine.process(task)
        self._report_qtable()
        return self.engine.write(result)

    def process_batch(self, tasks: list[LeasedTask], starts: list[TaskStart]) -> list[str]:
        """Fetch leased URLs together (a thread each), then write them together
        (``CrawlEngine.write_batch``); per URL, what became of it."""
        words: list[str] = []
        todo = []
        for task, start in zip(tasks, starts, strict=True):
            word = self._before(task, start)
            if word is None:
                todo.append(task)
            else:
                words.append(word)
        if todo:
            with ThreadPoolExecutor(len(todo), thread_name_prefix="jlse-batch") as pool:
                results = list(pool.map(self.engine.process, todo))
            self._report_qtable()
            words += self.engine.write_batch(results)
        return words

    def _before(self, task: LeasedTask, start: TaskStart) -> str | None:
        """What became of a URL that is not to be fetched (stale, written already, refused
        by the checks before a fetch); None for one to fetch."""
        if not start.lease_current:
            log.info("dropped %s: its lease ended (reaped or handed out again)", task.url)
            return "stale"
        with self.store.autocommit():
            link = self.store.get_link(task.url_id)
        if link is None or link.status is not LinkStatus.QUEUED:
            self.frontier.ack(task)  # a redelivered task: its result is already written
            return "already done"
        task.anchor_text, task.context = link.anchor_text, link.context  # not kept in Redis
        refused = refusal(self.settings, start.host_fetched, start.robots_failures)
        if refused is not None:
            self.engine.reject(task, *refused)
            return "rejected"
        return None

    def _maybe_learn(self, targets: int) -> None:
        """``targets``: the results of one shard so far. With one shard, a learning round per
        ``cf`` of them; with n, each shard adds its results to the crawl's count by steps of
        ``cf / n`` (one write per step, not per page) and the round is claimed on that."""
        settings = self.settings
        shards = settings.frontier_shards
        if shards == 1:
            claimed = self.registry.claim_learning(self.crawl_id, targets, settings.cf)
        else:
            step = max(1, settings.cf // shards)
            claimed = targets % step == 0 and \
                self.registry.claim_learning_step(self.crawl_id, step, settings.cf)
        if claimed:
            from jlse.workers.celery_app import LEARN_QUEUE, app

            app.send_task("jlse.learn", args=[self.crawl_id], queue=LEARN_QUEUE)
            log.info("crawl %s: %d results, learning round sent", self.crawl_id, targets)

    def _report_qtable(self) -> None:
        version = self.qtable_source.version
        if version != self._reported_version:
            self.registry.note_worker(self.crawl_id, self.worker_name, version)
            self._reported_version = version

    def refill(self, shard: int) -> int:
        """Bring back the URLs of a shard that wait in the crawl database: deferred while it
        was unavailable, and spilled by its hosts (``jlse.refill``)."""
        with self.store.autocommit():
            return self.frontier.refill(self.store, [shard])

    def _defer(self, shard: int, tasks: list) -> None:
        """URLs a shard could not take now wait in the crawl database for its next refill."""
        with self.store.autocommit():
            self.store.defer_pushes(shard, [task.url_id for task in tasks])

    # --- learning ------------------------------------------------------------------------
    @cached_property
    def learner(self) -> IncrementalLearner:
        """G_w of this crawl, kept between the learn tasks this process runs: read whole from
        PostgreSQL on the first (after a restart, or a context rebuilt), then only what is new."""
        return IncrementalLearner(self.settings)

    def learn(self) -> int:
        """One learning round from PostgreSQL, published to Redis; the version (0 if none)."""
        table = self.learner.learn(self.store, version=self.qtables.next_version())
        if table is None:
            return 0
        self.qtables.publish(table)
        return int(table.version)


def preload() -> None:
    """Warm what every crawl needs, once per worker before Celery forks its pool: the modules
    imported here, jieba's dictionary with its array form and the compiled link search (about
    3.5 s of CPU that each prefork child would otherwise spend on its first task)."""
    from jlse.models import link_index, tokenizer
    from jlse.scheduler.metrics import serve_worker

    tokenizer.prepare(["中文"])
    link_index.prepare_search()  # the compiled link search (numba), loaded once
    global _metrics
    _metrics = serve_worker()  # JLSE_WORKER_METRICS_PORT: Prometheus, before the pool forks


# --- the per-process cache -------------------------------------------------------------------
_registry: CrawlRegistry | None = None
_metrics = None  # the worker's Prometheus endpoint (main process)
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


def close_contexts() -> None:
    """Close every crawl context of this process (its WARC files are sealed): at its exit."""
    for crawl_id in list(_contexts):
        drop_context(crawl_id)


def drop_context(crawl_id: str) -> None:
    context = _contexts.pop(crawl_id, None)
    if context is not None:
        try:
            context.close()
        except Exception:  # noqa: BLE001 - closing a broken connection may fail too
            log.debug("closing the context of %s failed", crawl_id, exc_info=True)


def process_task(crawl_id: str, task: dict[str, Any]) -> str:
    """The ``jlse.fetch`` task body (see ``_guarded`` for a crawl it cannot serve)."""
    leased = LeasedTask.from_dict(task)

    def body() -> str:
        context, [start] = _started(crawl_id, [leased])
        return context.process(leased, start)

    return _guarded(crawl_id, body, "refused")


def process_batch(crawl_id: str, tasks: list[dict[str, Any]]) -> str:
    """The ``jlse.fetch_batch`` task body: what became of each URL, in a word each."""
    leased = [LeasedTask.from_dict(task) for task in tasks]

    def body() -> str:
        context, starts = _started(crawl_id, leased)
        return " ".join(context.process_batch(leased, starts))

    return _guarded(crawl_id, body, "refused")


def _started(crawl_id: str, tasks: list[LeasedTask]) -> tuple[CrawlContext, list[TaskStart]]:
    """The crawl's context and the checks before each task (``CrawlContext.start``)."""
    context = get_context(crawl_id)
    starts = [context.start(task) for task in tasks]
    if None in starts:  # registered again since the context was built (--resume)
        drop_context(crawl_id)
        context = get_context(crawl_id)
        starts = [context.start(task) for task in tasks]
        if None in starts:
            raise RegistryError(f"crawl {crawl_id!r}: its config keeps changing")
    return context, starts


def refill_shard(crawl_id: str, shard: int) -> int:
    """The ``jlse.refill`` task body: spilled URLs of one shard back into Redis."""
    return _guarded(crawl_id, lambda: get_context(crawl_id).refill(shard), 0)


def learn_qtable(crawl_id: str) -> int:
    """The ``jlse.learn`` task body (rare: the config is read again each time)."""

    def body() -> int:
        context = get_context(crawl_id)
        context.registry.learning_started(crawl_id)  # results from now on send the next round
        raw = context.registry.config_raw(crawl_id)
        if raw is None or config_sha1(raw) != context.config_sha1:  # registered again
            drop_context(crawl_id)
            context = get_context(crawl_id)
        return context.learn()

    return _guarded(crawl_id, body, 0)


def _guarded(crawl_id: str, body: Callable[[], T], refused: T) -> T:
    """``body()``, for a task of ``crawl_id``. A crawl this worker must not serve (an untrusted
    config) or cannot (gone from Redis) gives ``refused``, logged once a minute: a fetch's lease
    runs out and its URL stays queued in the crawl database. A store failure drops the context
    (the task's retry reconnects)."""
    try:
        return body()
    except UntrustedConfig as exc:
        _log_refusal(crawl_id, exc)
        return refused
    except RegistryError as exc:
        _log_refusal(crawl_id, exc, "skipped", logging.WARNING)
        return refused
    except StoreError:
        drop_context(crawl_id)
        raise


_refusals: dict[str, tuple[float, str]] = {}  # crawl id -> when its refusal was last logged


def _log_refusal(crawl_id: str, exc: Exception, verb: str = "refused",
                 level: int = logging.ERROR) -> None:
    """One line per crawl and reason a minute (a refused crawl's URLs keep coming back)."""
    now, reason = time.monotonic(), str(exc)
    last = _refusals.get(crawl_id)
    if last is None or last[1] != reason or now - last[0] >= REFUSAL_LOG_SECONDS:
        _refusals[crawl_id] = (now, reason)
        log.log(level, "crawl %s %s: %s", crawl_id, verb, reason)
        if isinstance(exc, UntrustedConfig):  # the crawl's own screen says it, not only here
            try:
                get_registry().note_refusal(crawl_id, f"{socket.gethostname()}:{os.getpid()}",
                                            reason)
            except Exception:  # noqa: BLE001 - Redis away: the log line above still says it
                log.debug("could not note the refusal of %s", crawl_id, exc_info=True)
