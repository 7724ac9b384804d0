"""The embedded crawl: a thread pool fetches, this thread alone owns the frontier and database.

Loop: pop ready URLs from the frontier (politeness and the page budget permitting) into the
pool; as pages come back, write their history rows and new links, and push the new links. A URL
stays ``queued`` in the database until its result is written, so a crash or Ctrl+C loses nothing:
``--resume`` rebuilds the frontier from the database.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

from jlse.progress import CrawlProgress
from jlse.records import CrawlTask, LinkStatus, NewLink, Outcome
from jlse.scheduler.frontier import LocalFrontier
from jlse.scheduler.politeness import HostPoliteness
from jlse.scheduler.store.base import CrawlStore
from jlse.scheduler.traps import TrapGuard
from jlse.scheduler.urls import host_of
from jlse.settings import Settings
from jlse.workers.pipeline import PagePipeline, PageResult

log = logging.getLogger(__name__)

# Outcomes where no page request reached the host: they do not count against the page budget.
UNCOUNTED_OUTCOMES = frozenset({
    Outcome.ROBOTS_DISALLOWED, Outcome.ROBOTS_UNAVAILABLE, Outcome.TRAP, Outcome.OUT_OF_SCOPE,
    Outcome.ADDRESS_REFUSED, Outcome.INVALID_URL,
})


@dataclass
class CrawlCounters:
    fetched: int = 0
    relevant: int = 0
    targets: int = 0
    rejected: int = 0
    trap_refused: int = 0
    requeued: int = 0
    cpu_fetch: float = 0.0
    cpu_parse: float = 0.0
    cpu_classify: float = 0.0
    cpu_store: float = 0.0


class EmbeddedCrawler:
    def __init__(self, settings: Settings, store: CrawlStore, pipeline: PagePipeline,
                 traps: TrapGuard, progress: CrawlProgress | None = None,
                 on_results: Callable[[int], None] | None = None) -> None:
        self.settings = settings
        self.store = store
        self.pipeline = pipeline
        self.traps = traps
        self.progress = progress
        self.on_results = on_results  # told the ResultTable size after each new result (learner)
        self.frontier = LocalFrontier(settings.frontier_size, settings.domain_diversity,
                                      settings.priority_slack)
        self.politeness = HostPoliteness(settings.politeness_delay,
                                         host_concurrency=settings.host_concurrency)
        self.counters = CrawlCounters()
        self._in_flight: dict[Future, CrawlTask] = {}
        self._low_in_flight: set[Future] = set()  # in flight with a "low" priority
        self._next_low_at = 0.0  # monotonic time before which no "low" URL starts
        self._stopping = False
        self._robots_failures: dict[str, int] = {}  # host -> robots.txt unavailable so far

    # --- setup -------------------------------------------------------------------------
    def add_seeds(self, seeds: list[str], priority: float) -> None:
        links = [NewLink(url=url, parent_id=None, depth=0, priority=priority) for url in seeds]
        self._add_links(links, check_traps=False)

    def restore(self) -> None:
        """Continue a crawl: queued URLs back into the frontier, counters from the database."""
        for link in self.store.iter_links(LinkStatus.QUEUED):
            self.frontier.push(link.to_task())
        self.traps.restore_counts(self.store.host_fetch_counts())
        stats = self.store.stats(self.settings.relevance_threshold)
        self.counters.fetched = self._counted_fetches(stats.outcomes)
        self.counters.relevant = stats.relevant
        self.counters.targets = stats.targets

    @staticmethod
    def _counted_fetches(outcomes: dict[str, int]) -> int:
        uncounted = {outcome.value for outcome in UNCOUNTED_OUTCOMES}
        return sum(n for outcome, n in outcomes.items() if outcome not in uncounted)

    # --- the loop ----------------------------------------------------------------------
    def stop(self) -> None:
        """Finish the pages in flight, then return from ``run`` (Ctrl+C)."""
        self._stopping = True

    def run(self) -> str:
        """Crawl until the page budget, an empty frontier or ``stop``; returns why it ended."""
        with ThreadPoolExecutor(self.settings.concurrency, thread_name_prefix="fetch") as pool:
            try:
                reason = self._loop(pool)
            except KeyboardInterrupt:
                self._stopping = True
                reason = "interrupted"
            self._drain()
        return reason

    def _loop(self, pool: ThreadPoolExecutor) -> str:
        while True:
            if self._stopping:
                return "interrupted"
            if self.counters.fetched >= self.settings.max_pages:
                return "page budget reached"
            self._submit_ready(pool)
            if not self._in_flight:
                if len(self.frontier) == 0:
                    return "frontier empty"
                time.sleep(min(max(self.politeness.next_ready_in(), 0.005), 0.2))
                continue
            self._collect(timeout=0.2)

    def _submit_ready(self, pool: ThreadPoolExecutor) -> None:
        while len(self._in_flight) < self.settings.concurrency:
            if self.counters.fetched + len(self._in_flight) >= self.settings.max_pages:
                return
            low_below = self._low_priority_bound()
            task = self.frontier.pop(self.politeness.is_ready,
                                     min_priority=None if self._low_slot_free() else low_below)
            if task is None:
                return
            host = host_of(task.url)
            if self.traps.host_fetches(host) >= self.settings.max_pages_per_host:
                self._reject(task, Outcome.TRAP, "host page budget spent")
                continue
            if self._robots_given_up(host):
                self._reject(task, Outcome.ROBOTS_UNAVAILABLE, "robots.txt unavailable")
                continue
            self.politeness.acquire(host)
            future = pool.submit(self.pipeline.process, task)
            self._in_flight[future] = task
            if task.priority < low_below:
                self._low_in_flight.add(future)
                self._next_low_at = time.monotonic() + self.settings.politeness_delay

    def _low_slot_free(self) -> bool:
        """Whether a "low" URL may start now: fewer than ``low_priority_slots`` are in flight,
        and the last one started ``politeness_delay`` ago or more. The low-priority slots fetch
        like one more polite host; without the pause, on a fast network, one slot fetches junk
        from many hosts while each relevant host waits out its delay (sandbox demo, 0.25 s delay:
        about 60% of the fetches)."""
        if len(self._low_in_flight) >= self.settings.low_priority_slots:
            return False
        return time.monotonic() >= self._next_low_at

    def _low_priority_bound(self) -> float:
        """Priorities below this are "low": they wait while better URLs wait for their host,
        except in ``low_priority_slots`` slots (so a focused crawl with few relevant hosts
        does not fill its idle slots with junk, yet never stalls)."""
        best = self.frontier.best_priority()
        return -math.inf if best is None else self.settings.priority_slack * best

    def _collect(self, timeout: float) -> None:
        done, _ = wait(list(self._in_flight), timeout=timeout, return_when=FIRST_COMPLETED)
        for future in done:
            self._in_flight.pop(future)
            self._low_in_flight.discard(future)
            self._write(future.result())  # PagePipeline.process never raises

    def _drain(self) -> None:
        """Write the results of pages still in flight (each fetch has its own deadline)."""
        while self._in_flight:
            try:
                self._collect(timeout=1.0)
            except KeyboardInterrupt:
                log.warning("second interrupt: %d pages in flight stay queued", len(self._in_flight))
                for future in self._in_flight:
                    future.cancel()
                self._in_flight.clear()
                self._low_in_flight.clear()

    # --- writing results -----------------------------------------------------------------
    def _write(self, result: PageResult) -> None:
        task = result.task
        host = host_of(task.url)
        self.politeness.release(host, result.crawl_delay, blocked_for=result.requeue_after or 0.0)
        started = time.thread_time()
        if result.fetch is not None:
            self.store.record_fetch(result.fetch)
            self.traps.note_fetch(host)
            self._count(result)
        elif result.rejected is not None:
            self._reject(task, *result.rejected)
        elif result.requeue_after is not None:
            self._requeue(task)
        self._add_links(result.links)
        self.counters.cpu_store += time.thread_time() - started
        if self.progress is not None:
            self.progress.update(self.counters, len(self.frontier), counted=result.fetch is not None)

    def _requeue(self, task: CrawlTask) -> None:
        """robots.txt was unavailable: retry the host later, a bounded number of times."""
        host = host_of(task.url)
        self._robots_failures[host] = self._robots_failures.get(host, 0) + 1
        if self._robots_given_up(host):
            log.warning("giving up on %s: robots.txt unavailable %d times", host,
                        self._robots_failures[host])
            self._reject(task, Outcome.ROBOTS_UNAVAILABLE, "robots.txt unavailable")
            return
        self.frontier.push(task)
        self.counters.requeued += 1

    def _robots_given_up(self, host: str) -> bool:
        return self._robots_failures.get(host, 0) > self.settings.robots_unavailable_retries

    def _reject(self, task: CrawlTask, outcome: Outcome, reason: str) -> None:
        self.store.reject(task.url_id, outcome, reason)
        self.counters.rejected += 1

    def _count(self, result: PageResult) -> None:
        record = result.fetch
        c = self.counters
        c.fetched += record.outcome not in UNCOUNTED_OUTCOMES
        if record.relevance is not None and record.relevance >= self.settings.relevance_threshold:
            c.relevant += 1
        if record.is_target:
            c.targets += 1
            if self.on_results is not None:
                self.on_results(c.targets)
        c.cpu_fetch += result.cpu.get("fetch", 0.0)
        c.cpu_parse += result.cpu.get("parse", 0.0)
        c.cpu_classify += result.cpu.get("classify", 0.0)

    def _add_links(self, links: list[NewLink], check_traps: bool = True) -> None:
        if check_traps:
            allowed = []
            for link in links:
                reason = self.traps.refuse_reason(link.url, link.depth, link.pattern_run)
                if reason is None:
                    allowed.append(link)
                else:
                    self.counters.trap_refused += 1
                    log.debug("refused %s: %s", link.url, reason)
            links = allowed
        if not links:
            return
        for link, (url_id, created) in zip(links, self.store.add_links(links), strict=True):
            if created or link.url in self.frontier:
                self.frontier.push(CrawlTask(
                    url=link.url, url_id=url_id, priority=link.priority, depth=link.depth,
                    parent_id=link.parent_id, anchor_text=link.anchor_text, context=link.context,
                    redirect_hops=link.redirect_hops, pattern_run=link.pattern_run,
                ))
