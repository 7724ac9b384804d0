"""A crawl's distributed frontier over its shards: each URL goes to its host's shard.

``ShardedFrontier`` is the ``Frontier`` the workers' crawl engine uses in distributed mode. It
routes every call by URL to the ``RedisFrontier`` of the URL's shard (``scheduler.shards``), so
each step touches one shard, and sums what a caller asks of the whole crawl (sizes, counters).
The dispatcher does not pop through it: it runs one script per shard (``scheduler.dispatcher``),
so each shard is ordered by priority on its own. ``pop`` here (tests, tools) takes the shard
whose best ready URL is best, which keeps the global order for a single caller.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from jlse.records import CrawlTask, LinkStatus
from jlse.scheduler.frontier import Frontier
from jlse.scheduler.redis_client import UNAVAILABLE
from jlse.scheduler.redis_frontier import LeasedTask, RedisFrontier, rebuild_from
from jlse.scheduler.shards import shard_of
from jlse.scheduler.store.base import CrawlStore
from jlse.scheduler.urls import host_of

T = TypeVar("T")
log = logging.getLogger(__name__)
DEFERRED_BATCH = 1000  # deferred URLs read from the crawl database at a time


class ShardedFrontier(Frontier):
    def __init__(self, shards: Sequence[RedisFrontier],
                 defer: Callable[[int, list[CrawlTask]], None] | None = None) -> None:
        if not shards:
            raise ValueError("a frontier needs at least one shard")
        self.shards = list(shards)
        # where URLs go that a shard cannot take now (its Redis down or failing over): the
        # crawl database, until the shard's next refill (``refill``); None: the error is raised
        self.defer = defer

    # -- routing ---------------------------------------------------------------------------

    def shard_index(self, url: str) -> int:
        return shard_of(host_of(url), len(self.shards))

    def shard_for(self, url: str) -> RedisFrontier:
        return self.shards[self.shard_index(url)]

    def _grouped(self, items: Sequence[T], url: Callable[[T], str]) -> dict[int, list[int]]:
        """Positions of ``items`` per shard index."""
        groups: dict[int, list[int]] = defaultdict(list)
        for position, item in enumerate(items):
            groups[self.shard_index(url(item))].append(position)
        return groups

    def _per_shard(self, tasks: Sequence[CrawlTask],
                   call: Callable[[RedisFrontier, list[CrawlTask]], list[bool]]) -> list[bool]:
        results = [False] * len(tasks)
        for index, positions in self._grouped(tasks, lambda task: task.url).items():
            group = [tasks[p] for p in positions]
            for position, answer in zip(positions, self._call(index, group, call), strict=True):
                results[position] = answer
        return results

    def _call(self, index: int, tasks: list[CrawlTask],
              call: Callable[[RedisFrontier, list[CrawlTask]], list[bool]]) -> list[bool]:
        try:
            return call(self.shards[index], tasks)
        except UNAVAILABLE as exc:
            if self.defer is None:
                raise
            log.warning("frontier shard %d unavailable (%s): %d URLs wait in the crawl "
                        "database for its next refill", index, exc, len(tasks))
            self.defer(index, tasks)
            return [True] * len(tasks)

    # -- adding URLs -----------------------------------------------------------------------

    def push_many(self, tasks: Sequence[CrawlTask]) -> list[bool]:
        return self._per_shard(tasks, RedisFrontier.push_many)

    def add_new(self, tasks: Sequence[CrawlTask]) -> list[bool]:
        return self._per_shard(tasks, RedisFrontier.add_new)

    def add_discovered(self, tasks: Sequence[CrawlTask], created: Sequence[bool]) -> None:
        self.add_new(tasks)

    def mark_seen(self, urls: Iterable[str]) -> int:
        listed = list(urls)
        return sum(self.shards[index].mark_seen([listed[p] for p in positions])
                   for index, positions in self._grouped(listed, str).items())

    # -- leases ----------------------------------------------------------------------------

    def pop(self, min_priority: float | None = None) -> LeasedTask | None:
        """The best ready URL over every shard (one round trip per shard, then the pop)."""
        if len(self.shards) == 1:
            return self.shards[0].pop(min_priority)
        bests = [(best, index) for index, shard in enumerate(self.shards)
                 if (best := shard.ready_best()) is not None]
        for _, index in sorted(bests, key=lambda pair: (-pair[0], pair[1])):
            task = self.shards[index].pop(min_priority)
            if task is not None:
                return task
        return None

    def finish(self, task: CrawlTask, *, requeue: bool = False, delay: float | None = None,
               deltas: dict[str, int] | None = None) -> tuple[bool, dict[str, int]]:
        return self.shard_for(task.url).finish(task, requeue=requeue, delay=delay,
                                               deltas=deltas)

    def ack(self, task: CrawlTask, delay: float | None = None) -> bool:
        return self.shard_for(task.url).ack(task, delay)

    def release(self, task: CrawlTask, retry_after: float = 0.0) -> bool:
        return self.shard_for(task.url).release(task, retry_after)

    def lease_current(self, task: CrawlTask) -> bool:
        return self.shard_for(task.url).lease_current(task)

    def renew(self, leases: Sequence[tuple[str, str]], seconds: float) -> int:
        return sum(self.shards[index].renew([leases[p] for p in positions], seconds)
                   for index, positions in self._grouped(leases, lambda lease: lease[0]).items())

    def reap(self) -> int:
        return sum(shard.reap() for shard in self.shards)

    def refill(self, store: CrawlStore, shards: Iterable[int] | None = None) -> int:
        """URLs back from the crawl database, for every shard (or ``shards``): those deferred
        while the shard was unavailable, then those its hosts spilled
        (``RedisFrontier.refill``). How many were queued."""
        queued = 0
        for index in range(len(self.shards)) if shards is None else shards:
            shard = self.shards[index]
            while links := store.deferred_pushes(index, DEFERRED_BATCH):
                queued += sum(shard.add_new([link.to_task() for link in links
                                             if link.status is LinkStatus.QUEUED]))
                store.clear_deferred([link.id for link in links])
            queued += shard.refill(store)
        return queued

    def now(self) -> float:
        return self.shards[0].now()

    # -- the whole crawl -------------------------------------------------------------------

    def best_priority(self, within: float | None = None) -> float | None:
        bests = [best for shard in self.shards
                 if (best := shard.best_priority(within)) is not None]
        return max(bests) if bests else None

    def in_flight(self) -> int:
        return sum(shard.in_flight() for shard in self.shards)

    def in_flight_below(self, priority: float) -> int:
        return sum(shard.in_flight_below(priority) for shard in self.shards)

    def next_ready_in(self) -> float | None:
        waits = [wait for shard in self.shards if (wait := shard.next_ready_in()) is not None]
        return min(waits) if waits else None

    def counters(self) -> dict[str, int]:
        total: dict[str, int] = defaultdict(int)
        for shard in self.shards:
            for name, value in shard.counters().items():
                total[name] += value
        return dict(total)

    def stats(self) -> dict[str, int]:
        total: dict[str, int] = defaultdict(int)
        for shard in self.shards:
            for name, value in shard.stats().items():
                total[name] += value
        return dict(total)

    def __len__(self) -> int:
        return sum(len(shard) for shard in self.shards)

    # -- recovery --------------------------------------------------------------------------

    def rebuild(self, store: CrawlStore, batch: int = 5000) -> int:
        """``RedisFrontier.rebuild`` for every shard, reading the crawl database once."""
        return rebuild_from(self, store, batch)

    def stranded(self, store: CrawlStore, batch: int = 1000) -> list[str]:
        """Queued URLs of the crawl database that no shard will ever hand out (neither queued,
        leased nor spilled by their host): a frontier that loses nothing has none."""
        lost: list[str] = []
        urls = (link.url for link in store.iter_links(LinkStatus.QUEUED, batch=batch))
        chunk: list[str] = []
        for url in urls:
            chunk.append(url)
            if len(chunk) >= batch:
                lost += self._unaccounted(chunk)
                chunk = []
        return lost + self._unaccounted(chunk)

    def _unaccounted(self, urls: list[str]) -> list[str]:
        lost = []
        for index, positions in self._grouped(urls, str).items():
            group = [urls[p] for p in positions]
            lost += [url for url, held in zip(group, self.shards[index].accounts_for(group),
                                              strict=True) if not held]
        return lost

    def clear(self) -> int:
        return sum(shard.clear() for shard in self.shards)
