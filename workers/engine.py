"""The crawl engine: what happens to one URL, whoever runs it.

A runner (the embedded loop in ``jlse.embedded``, a Celery task in ``jlse.workers.distributed``)
only decides where URLs come from and where the work runs. For each URL it calls the engine:

1. ``refusal`` / ``admit``: the checks before a fetch (the host's page budget, a host whose
   robots.txt stays unavailable);
2. ``process``: the per-page pipeline (robots.txt, fetch, parse, classify, score out-links);
3. ``write``: the result writer. Write order is crash-safe: the out-links first (database, then
   frontier), then the page's own row, then the counters and the end of the request in one
   step (``Frontier.finish``); a batch (``write_batch``) takes each step for all its pages at
   once. A runner killed anywhere in between leaves the URL ``queued``:
   ``--resume`` (embedded) or the lease's expiry (cluster) hands it out again, and a page written
   twice is counted once (``CrawlStore.record_fetch_once``).

The backends sit behind narrow interfaces: ``CrawlStore`` (SQLite, PostgreSQL), ``Frontier``
(local, Redis) and ``HostLedger`` (local, Redis). ``build_engine`` assembles a crawl's parts
from its settings; it is the one place they are built.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from jlse.models.redirect_waste import KNOWN_TARGET, NEW_TARGET, NO_PAGE
from jlse.models.strategies import Strategy
from jlse.models.topic_model import TopicModel
from jlse.records import UNCOUNTED_OUTCOMES, CrawlTask, FetchRecord, NewLink, Outcome
from jlse.scheduler.frontier import Frontier, LocalFrontier
from jlse.scheduler.ledger import HostLedger, LocalHostLedger, domain_keys
from jlse.scheduler.metrics import observe_result
from jlse.scheduler.robots import RobotsCache, SharedRobots, robots_slots
from jlse.scheduler.store.base import CrawlStore
from jlse.scheduler.store.pages import PageRepository
from jlse.scheduler.traps import TrapGuard, domain_over_budget
from jlse.scheduler.urls import host_of
from jlse.settings import Settings
from jlse.workers.pipeline import PagePipeline, PageResult
from jlse.workers.sitemaps import SitemapSource, strategy_scorer
from jlse.workers.warc import make_fetcher

if TYPE_CHECKING:
    from jlse.scheduler.crawl_registry import CrawlRegistry

log = logging.getLogger(__name__)

CPU_STAGES = ("fetch", "parse", "classify", "store")  # what ``cpu_counter`` counts
# requests whose URL gave no page (its shape's pages per request learn it: models/redirect_waste.py)
FAILED_REQUESTS = frozenset({Outcome.HTTP_ERROR, Outcome.BAD_REDIRECT, Outcome.TOO_MANY_REDIRECTS})
WRITTEN_LINKS = 50_000  # URLs the writer remembers having written (about 10 MB)


def refusal(settings: Settings, host_fetched: int, robots_failures: int,
            domain_pages: int = 0, domain_hosts: int = 0) -> tuple[Outcome, str] | None:
    """The checks before a fetch: (outcome, reason) to reject the URL with, or None."""
    if host_fetched >= settings.max_pages_per_host:
        return Outcome.TRAP, "host page budget spent"
    if domain_over_budget(settings, host_fetched, domain_pages, domain_hosts):
        return Outcome.TRAP, "domain page or host budget spent"
    if robots_failures > settings.robots_unavailable_retries:
        return Outcome.ROBOTS_UNAVAILABLE, "robots.txt unavailable"
    return None


def cpu_counter(stage: str) -> str:
    """The counter holding a stage's CPU time, in microseconds."""
    return f"cpu_{stage}_us"


@dataclass
class _Plan:
    """How one result is written: its links, its page's row, how its request ends."""

    result: PageResult
    task: CrawlTask
    links: list[NewLink]  # those the trap filter let through
    deltas: dict[str, int]
    delay: float | None = None
    requeue: bool = False
    word: str = "nothing"
    reject: tuple[Outcome, str] | None = None  # the link is rejected with this


def merge_links(links: list[NewLink]) -> list[NewLink]:
    """One link per URL (the first, with the highest priority found), as the store keeps a
    batch's links: the frontier gets each URL once, at that priority."""
    merged: dict[str, NewLink] = {}
    for link in links:
        first = merged.setdefault(link.url, link)
        if link.priority > first.priority:
            merged[link.url] = replace(first, priority=link.priority)
    return list(merged.values())


class CrawlEngine:
    def __init__(self, settings: Settings, store: CrawlStore, frontier: Frontier,
                 ledger: HostLedger, pipeline: PagePipeline, traps: TrapGuard,
                 on_targets: Callable[[int], None] | None = None) -> None:
        self.settings = settings
        self.store = store
        self.frontier = frontier
        self.ledger = ledger
        self.pipeline = pipeline
        self.traps = traps
        self.on_targets = on_targets  # told the ResultTable size when it grows (learning)
        # told each result once it is written, with its word (discovery collects its pages)
        self.on_written: Callable[[PageResult, str], None] | None = None
        # URL -> highest priority it was written with. The store keeps a known URL's row and
        # the frontier only raises a queued URL's priority, so writing it again with no higher
        # priority changes nothing: site menus repeat on every page, and most out-links skip
        # the database and the frontier.
        self._written: OrderedDict[str, float] = OrderedDict()
        self._written_lock = threading.Lock()  # a Celery thread pool shares the engine

    # --- before the fetch ------------------------------------------------------------------
    def admit(self, task: CrawlTask) -> bool:
        """Run the checks before a fetch on a popped task; a refused one is written off."""
        host = host_of(task.url)
        keys = [host, *domain_keys(host)]
        fetched, pages, hosts = (self.ledger.fetch_counts(None, keys)[key] for key in keys)
        refused = refusal(self.settings, fetched, self.ledger.robots_failures(host), pages,
                          hosts)
        if refused is None:
            return True
        self.reject(task, *refused)
        return False

    def reject(self, task: CrawlTask, outcome: Outcome, reason: str) -> None:
        """Refuse a popped task without fetching it."""
        self.store.reject(task.url_id, outcome, reason)
        self._finish(task, {"rejected": 1})

    # --- the page --------------------------------------------------------------------------
    def process(self, task: CrawlTask) -> PageResult:
        """The per-page pipeline (never raises; thread-safe)."""
        return self.pipeline.process(task)

    def write(self, result: PageResult) -> str:
        """Write one result; a word saying what became of the URL."""
        return self.write_batch([result])[0]

    def write_batch(self, results: list[PageResult]) -> list[str]:
        """Write results together (a distributed worker's batch, ``fetch_batch``): the links
        of them all in one ``add_links`` (database, then frontier), then their pages in one
        ``write_pages``, then each request ends; per result, what became of its URL. The
        order of ``write`` (see the module), with every step taken for the batch at once: a
        runner killed anywhere in between leaves every URL not yet ended ``queued``."""
        if not results:
            return []
        started = time.thread_time()
        plans = [self._plan(result) for result in results]
        links = [link for plan in plans for link in plan.links]
        created = self._store_links(links if len(plans) == 1 else merge_links(links))
        for plan in plans:
            self._observe_request(plan, created)
        self._store_pages(plans)
        store_cpu = (time.thread_time() - started) / len(plans)
        return [self._end(plan, store_cpu) for plan in plans]

    def _plan(self, result: PageResult) -> _Plan:
        """What writing ``result`` takes (the host ledger and the trap filter asked)."""
        task = result.task
        if result.fetch is not None:  # the site bandit learns here: this process sees every page
            self.pipeline.strategy.observe_result(task.url, result.fetch.relevance, result.links,
                                                  detail=result.detail, title=result.fetch.title)
        link_hosts = sorted({host_of(link.url) for link in result.links} - {""})
        fetched_host = host_of(task.url) if result.fetch is not None else None
        domains = sorted({key for host in link_hosts for key in domain_keys(host)})
        host_counts = self.ledger.fetch_counts(fetched_host, link_hosts + domains)
        allowed = self._allowed(result.links, host_counts)
        plan = _Plan(result, task, allowed, {"trap_refused": len(result.links) - len(allowed)},
                     delay=result.crawl_delay)
        if result.fetch is not None:
            plan.word = result.fetch.outcome.value
        elif result.rejected is not None:
            plan.reject, plan.word = result.rejected, "rejected"
            plan.deltas["rejected"] = 1
        elif result.requeue_after is not None:
            self._robots_unavailable(plan)
        elif result.retry_in is not None:  # a failed request: again after the host's delay
            plan.task = replace(task, attempt=task.attempt + 1)
            plan.requeue, plan.word = True, "retried"
            plan.delay = max(result.retry_in, plan.delay or 0.0)
            plan.deltas["retried"] = 1
        elif result.postpone is not None:
            plan.requeue, plan.word = True, "postponed"
            plan.delay = max(result.postpone, plan.delay or 0.0)
        plan.deltas.update(result.notes)  # what the parser cut (links_cut, tags_cut, deep_nesting)
        plan.deltas.update({cpu_counter(stage): round(1e6 * seconds)
                            for stage, seconds in result.cpu.items()})
        return plan

    def _store_pages(self, plans: list[_Plan]) -> None:
        """The pages' rows: one page in one statement, a batch's in one transaction. A page
        written meanwhile by a worker whose lease was reaped keeps that row; the counters
        still move, but only with the live lease (``Frontier.finish``), so it counts once."""
        fetched = [plan for plan in plans if plan.result.fetch is not None]
        rejects = [(plan.task.url_id, *plan.reject) for plan in plans if plan.reject]
        records = [plan.result.fetch for plan in fetched]
        if len(records) == 1 and not rejects:
            with self.store.autocommit():
                written = [self.store.record_fetch_once(records[0])]
        elif len(rejects) == 1 and not records:
            self.store.reject(*rejects[0])
            written = []
        else:
            written = self.store.write_pages(records, rejects)
        for plan, record, fresh in zip(fetched, records, written, strict=True):
            if not fresh:
                log.info("%s was written meanwhile by another worker", record.url)
            plan.deltas.update(self._fetch_counts(record))

    def _end(self, plan: _Plan, store_cpu: float) -> str:
        """The request ends (counters in the same step); ``plan``'s word."""
        plan.deltas[cpu_counter("store")] = round(1e6 * store_cpu)
        self._finish(plan.task, plan.deltas, plan.delay, plan.requeue)
        fetch = plan.result.fetch
        observe_result(plan.word, fetch and fetch.outcome.value, fetch.elapsed if fetch else 0.0,
                       bool(plan.deltas.get("relevant")))
        if self.on_written is not None:
            self.on_written(plan.result, plan.word)
        return plan.word

    def add_links(self, links: list[NewLink], host_counts: dict[str, int]) -> int:
        """Trap-check, store and queue new links; how many the trap filter refused."""
        allowed = self._allowed(links, host_counts)
        self._store_links(allowed)
        return len(links) - len(allowed)

    def _allowed(self, links: list[NewLink], host_counts: dict[str, int]) -> list[NewLink]:
        """The links the trap filter lets through."""
        allowed = []
        for link in links:
            host = host_of(link.url)
            pages, hosts = domain_keys(host) if host else ("", "")
            reason = self.traps.refuse_reason(link.url, link.depth, link.pattern_run,
                                              host_counts.get(host, 0), host_counts.get(pages, 0),
                                              host_counts.get(hosts, 0))
            if reason is None:
                allowed.append(link)
            else:
                log.debug("refused %s: %s", link.url, reason)
        return allowed

    def _store_links(self, links: list[NewLink]) -> set[str]:
        """Links into the database, then into the frontier; the URLs new to the crawl."""
        fresh = [link for link in links
                 if not self._written.get(link.url, -math.inf) >= link.priority]  # NaN: raise
        if fresh:
            # Not inside store.autocommit(), which would hold the store: PostgreSQL's add_links
            # commits on its own, the calls of a pool's threads together (PostgresStore).
            ids = self.store.add_links(fresh)
            self.frontier.add_discovered([task_of(link, url_id) for link, (url_id, _) in
                                          zip(fresh, ids, strict=True)],
                                         [created for _, created in ids])
            self._remember(fresh)
            return {link.url for link, (_, new) in zip(fresh, ids, strict=True) if new}
        return set()

    def _observe_request(self, plan: _Plan, created: set[str]) -> None:
        """Tell the strategy what the request gave: a redirect no page of its own, its target
        a second request, or nothing if the crawl knew the target already; a failed request
        (an HTTP error after retries, a broken redirect) nothing."""
        fetch = plan.result.fetch
        if fetch is None:
            return
        waste = 0.0
        if fetch.outcome is Outcome.REDIRECT:
            new = any(link.url in created for link in plan.links)
            waste = NEW_TARGET if new else KNOWN_TARGET
        elif fetch.outcome in FAILED_REQUESTS:
            waste = NO_PAGE
        self.pipeline.strategy.observe_request(plan.task.url, waste)

    def add_seeds(self, seeds: list[str], priority: float) -> None:
        links = [NewLink(url=url, parent_id=None, depth=0, priority=priority) for url in seeds]
        ids = self.store.add_links(links)
        self.frontier.add_discovered([task_of(link, url_id) for link, (url_id, _) in
                                      zip(links, ids, strict=True)],
                                     [created for _, created in ids])

    # --- writing ---------------------------------------------------------------------------
    def _fetch_counts(self, record: FetchRecord) -> dict[str, int]:
        relevant = record.relevance is not None and \
            record.relevance >= self.settings.relevance_threshold
        return {"fetched": int(record.outcome not in UNCOUNTED_OUTCOMES),
                "relevant": int(relevant), "targets": int(record.is_target)}

    def _robots_unavailable(self, plan: _Plan) -> None:
        """Retry the host later, a bounded number of times."""
        host = host_of(plan.task.url)
        failures = self.ledger.note_robots_failure(host)
        if failures > self.settings.robots_unavailable_retries:
            log.warning("giving up on %s: robots.txt unavailable %d times", host, failures)
            plan.reject = (Outcome.ROBOTS_UNAVAILABLE, "robots.txt unavailable")
            plan.deltas["rejected"], plan.word = 1, "rejected"
            return
        plan.deltas["requeued"] = 1
        plan.requeue, plan.word = True, "requeued"
        plan.delay = plan.result.requeue_after

    def _finish(self, task: CrawlTask, deltas: dict[str, int], delay: float | None = None,
                requeue: bool = False) -> None:
        """Counters, then the request ends (one step); maybe a learning round."""
        live, counters = self.frontier.finish(task, requeue=requeue, delay=delay,
                                              deltas=deltas)
        if not live:
            log.info("the end of %s found it no longer in flight (reaped meanwhile)", task.url)
        if "targets" in counters and self.on_targets is not None:
            self.on_targets(counters["targets"])

    def _remember(self, links: list[NewLink]) -> None:
        written = self._written
        with self._written_lock:
            for link in links:
                written[link.url] = max(link.priority, written.get(link.url, -math.inf))
                written.move_to_end(link.url)
            while len(written) > WRITTEN_LINKS:
                written.popitem(last=False)

    def close(self) -> None:
        self.pipeline.fetcher.close()


def task_of(link: NewLink, url_id: int) -> CrawlTask:
    return CrawlTask(url=link.url, url_id=url_id, priority=link.priority, depth=link.depth,
                     parent_id=link.parent_id, anchor_text=link.anchor_text,
                     context=link.context, redirect_hops=link.redirect_hops,
                     pattern_run=link.pattern_run)


def local_backends(settings: Settings, resumed: CrawlStore | None = None
                   ) -> tuple[LocalFrontier, LocalHostLedger]:
    """The embedded crawl's frontier and host ledger (per-host counts from ``resumed``)."""
    frontier = LocalFrontier(settings.frontier_size, settings.domain_diversity,
                             settings.priority_slack, delay=settings.politeness_delay,
                             host_concurrency=settings.host_concurrency)
    counts = resumed.host_fetch_counts() if resumed is not None else None
    return frontier, LocalHostLedger(counts)


def redis_backends(registry: CrawlRegistry, crawl_id: str, settings: Settings
                   ) -> tuple[Frontier, HostLedger]:
    """A cluster crawl's frontier and host ledger, shared through Redis."""
    from jlse.scheduler.redis_ledger import RedisHostLedger  # redis: the distributed extra

    return (registry.frontier(crawl_id, settings),
            RedisHostLedger(registry, crawl_id, settings.frontier_shards))


def build_engine(settings: Settings, store: CrawlStore, frontier: Frontier, ledger: HostLedger,
                 strategy: Strategy, model: TopicModel | None,
                 pages_dir: Path | str | None = None,
                 on_targets: Callable[[int], None] | None = None,
                 warc_dir: Path | str | None = None, robots_turn: bool = False,
                 shared_robots: SharedRobots | None = None,
                 page_store: Path | str | None = None,
                 judge: Callable[[str], float] | None = None) -> CrawlEngine:
    """A crawl's engine from its settings and backends: fetcher (archiving to WARC files in
    ``warc_dir``, default ``pages_dir``'s sibling ``warc``, when ``warc`` is on), robots.txt
    cache, trap filter, page repository and pipeline (``robots_turn``: see PagePipeline; the
    embedded runner needs it, and its robots.txt fetches have slots of their own;
    ``shared_robots``: robots.txt answers of the crawl's other processes; ``page_store``: the
    distributed crawl's shared WARC folder, written in place of ``warc_dir``; ``judge``: URL ->
    relevance in place of the classifier's, an evaluation's ablation)."""
    if warc_dir is None and pages_dir:
        warc_dir = Path(pages_dir).parent / "warc"
    fetcher = make_fetcher(settings, warc_dir, page_store)
    traps = TrapGuard(settings)
    robots = (RobotsCache(settings, fetcher.fetch_robots, robots_slots(settings, robots_turn),
                          shared_robots) if settings.obey_robots else None)
    keep_pages = pages_dir and settings.store_pages and settings.warc != "only"
    pages = PageRepository(pages_dir) if keep_pages else None
    pipeline = PagePipeline(settings, fetcher, robots, strategy, model,
                            traps.child_pattern_run, pages, robots_turn, judge)
    if settings.sitemaps:
        pipeline.sitemaps = SitemapSource(settings, fetcher, robots, strategy_scorer(strategy))
    return CrawlEngine(settings, store, frontier, ledger, pipeline, traps, on_targets)

