"""A cluster's host ledger (``HostLedger``): pages fetched per host and per registered domain,
robots.txt failures, in the Redis hashes of the crawl's shards (``CrawlRegistry``).

The counts of a page's link hosts (the trap filter's figures) are read in every shard they live
in, so a worker keeps what it read for ``CACHE_SECONDS``: most links of a page point to hosts
its process met a moment ago, and the trap filter's limits (``max_pages_per_host``,
``max_pages_per_domain``, ``max_hosts_per_domain``) then cost no round trip to another shard.
A count read that late lets a few more links of a host over its limit into the crawl database;
the page budget per host itself is checked, fresh, before each fetch (``task_start``).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from jlse.scheduler.ledger import HostLedger, domain_keys

if TYPE_CHECKING:
    from jlse.scheduler.crawl_registry import CrawlRegistry

CACHE_SECONDS = 5.0
CACHE_KEYS = 100_000


class RedisHostLedger(HostLedger):
    def __init__(self, registry: CrawlRegistry, crawl_id: str, shards: int | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.registry = registry
        self.crawl_id = crawl_id
        self.shards = registry.shard_count(crawl_id, shards)
        self.clock = clock
        self._cache: OrderedDict[str, tuple[float, int]] = OrderedDict()  # key -> (read, count)

    def fetch_counts(self, fetched_host: str | None, hosts: Sequence[str]) -> dict[str, int]:
        """Count the fetch (fresh), then the counts of ``hosts``: the fetched host's own keys
        fresh, the others from the cache when read in the last ``CACHE_SECONDS``."""
        now = self.clock()
        own = {fetched_host.lower(), *domain_keys(fetched_host)} if fetched_host else set()
        counts, missing = {}, []
        for key in hosts:
            cached = self._cache.get(key)
            if key not in own and cached is not None and now - cached[0] < CACHE_SECONDS:
                counts[key] = cached[1]
            else:
                missing.append(key)
        if missing or fetched_host is not None:
            fresh = self.registry.fetch_counts(self.crawl_id, fetched_host, missing,
                                               self.shards)
            counts.update(fresh)
            self._remember(fresh, now)
        return {key: counts[key] for key in hosts}

    def _remember(self, counts: dict[str, int], now: float) -> None:
        for key, count in counts.items():
            self._cache[key] = (now, count)
            self._cache.move_to_end(key)
        while len(self._cache) > CACHE_KEYS:
            self._cache.popitem(last=False)

    def robots_failures(self, host: str) -> int:
        return self.registry.robots_failures(self.crawl_id, host, self.shards)

    def note_robots_failure(self, host: str) -> int:
        return self.registry.note_robots_failure(self.crawl_id, host, self.shards)
