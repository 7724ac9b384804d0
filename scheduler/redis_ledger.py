"""A cluster's host ledger (``HostLedger``): pages fetched per host and per registered domain,
robots.txt failures, in hashes of the crawl's shards (S + "hosts", S + "robots_failures":
``CrawlRegistry``). A host's keys, and its domain's (``ledger.domain_keys``), live in the
host's shard.

The counts of a page's link hosts (the trap filter's figures) are read in every shard they live
in, so a worker keeps what it read for ``CACHE_SECONDS``: most links of a page point to hosts
its process met a moment ago, and the trap filter's limits (``max_pages_per_host``,
``max_pages_per_domain``, ``max_hosts_per_domain``) then cost no round trip to another shard.
A count read that late lets a few more links of a host over its limit into the crawl database;
the page budget per host itself is checked, fresh, before each fetch (``task_start``). While a
shard is down its hosts' counts read 0 (the trap filter is lenient for that while, rather than
every page that links there waiting).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from jlse.scheduler.ledger import (
    DOMAIN_HOSTS,
    DOMAIN_PAGES,
    HostLedger,
    domain_keys,
    with_domain_counts,
)
from jlse.scheduler.redis_client import UNAVAILABLE
from jlse.scheduler.shards import shard_of, shard_of_domain

if TYPE_CHECKING:
    from jlse.scheduler.crawl_registry import CrawlRegistry

CACHE_SECONDS = 5.0
CACHE_KEYS = 100_000


def ledger_shard(name: str, shards: int) -> int:
    """The shard of a ledger key: a host's, or for ``@domain`` / ``#domain`` the domain's."""
    if name[:1] in (DOMAIN_PAGES, DOMAIN_HOSTS):
        return shard_of_domain(name[1:], shards) if shards > 1 else 0
    return shard_of(name, shards)


def set_host_counts(registry: CrawlRegistry, crawl_id: str, counts: dict[str, int],
                    shards: int | None = None) -> None:
    """The ledger from a crawl database's counts (on resume and rebuild), each key in its
    shard."""
    shards = registry.shard_count(crawl_id, shards)
    by_shard: dict[int, dict[str, int]] = {shard: {} for shard in range(shards)}
    for name, value in with_domain_counts(counts).items():
        by_shard[ledger_shard(name, shards)][name] = value
    pipe = registry.client.pipeline(transaction=False)
    for shard, mapping in by_shard.items():
        key = registry.shard_prefix(crawl_id, shard) + "hosts"
        pipe.delete(key)
        if mapping:
            pipe.hset(key, mapping=mapping)
    pipe.execute()


class RedisHostLedger(HostLedger):
    def __init__(self, registry: CrawlRegistry, crawl_id: str, shards: int | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.registry = registry
        self.client = registry.client
        self.crawl_id = crawl_id
        self.shards = registry.shard_count(crawl_id, shards)
        self.clock = clock
        self._cache: OrderedDict[str, tuple[float, int]] = OrderedDict()  # key -> (read, count)

    def _key(self, shard: int, name: str) -> str:
        return self.registry.shard_prefix(self.crawl_id, shard) + name

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
            fresh = self._read(fetched_host, missing)
            counts.update(fresh)
            self._remember(fresh, now)
        return {key: counts[key] for key in hosts}

    def _read(self, fetched: str | None, keys: list[str]) -> dict[str, int]:
        """The fetch counted (unless None), then ``keys`` read, each in its shard: one
        pipelined round trip (two on a host's first page); one shard at a time while one is
        down."""
        try:
            return self._read_pipelined(fetched, keys)
        except UNAVAILABLE:
            if self.shards == 1:
                raise
        counts = self._read_pipelined(fetched, []) if fetched else {}
        for shard, names in self._by_shard(keys).items():
            try:
                values = self.client.hmget(self._key(shard, "hosts"), names)
            except UNAVAILABLE:
                values = [None] * len(names)
            counts.update({name: int(value or 0) for name, value in zip(names, values,
                                                                        strict=True)})
        return {name: counts[name] for name in keys}

    def _read_pipelined(self, fetched: str | None, keys: list[str]) -> dict[str, int]:
        pipe = self.client.pipeline(transaction=False)
        if fetched is not None:  # the host, and its registered domain's pages
            own = self._key(shard_of(fetched, self.shards), "hosts")
            pipe.hincrby(own, fetched.lower(), 1)
            pipe.hincrby(own, domain_keys(fetched)[0], 1)
        by_shard = self._by_shard(keys)
        for shard, names in by_shard.items():
            pipe.hmget(self._key(shard, "hosts"), names)
        replies = pipe.execute()  # also when only counting: a page without links counts too
        if fetched is not None and replies[0] == 1:  # the host's first page: one more host
            self.client.hincrby(own, domain_keys(fetched)[1], 1)
        values = replies[2:] if fetched is not None else replies
        counts: dict[str, int] = {}
        for names, answer in zip(by_shard.values(), values, strict=True):
            counts.update({name: int(value or 0) for name, value in zip(names, answer,
                                                                        strict=True)})
        return {name: counts[name] for name in keys}

    def _by_shard(self, keys: list[str]) -> dict[int, list[str]]:
        by_shard: dict[int, list[str]] = {}
        for name in keys:
            by_shard.setdefault(ledger_shard(name, self.shards), []).append(name)
        return by_shard

    def _remember(self, counts: dict[str, int], now: float) -> None:
        for key, count in counts.items():
            self._cache[key] = (now, count)
            self._cache.move_to_end(key)
        while len(self._cache) > CACHE_KEYS:
            self._cache.popitem(last=False)

    def robots_failures(self, host: str) -> int:
        key = self._key(shard_of(host, self.shards), "robots_failures")
        return int(self.client.hget(key, host) or 0)

    def note_robots_failure(self, host: str) -> int:
        key = self._key(shard_of(host, self.shards), "robots_failures")
        return int(self.client.hincrby(key, host, 1))
