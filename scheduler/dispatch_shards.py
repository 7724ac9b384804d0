"""A crawl's frontier shards as the dispatcher sees them, and how a round spreads over them.

A crawl's frontier is ``frontier_shards`` shards (``scheduler.shards``), each ordered by priority
on its own. A dispatcher serves every shard, or with ``--shard i/k`` the shards ``s`` with
``s % k == i``: k dispatchers split the work, each running the round script of its shards only
(on a Redis Cluster, spread over the masters). The page budget and ``max_outstanding`` are the
crawl's: at the start of a round one pipelined read takes every shard's figures (fetched, in
flight, queued, spilled, its best and its best ready priorities), and a shard's pops are bounded
by what the others hold, so several dispatchers may overshoot them by at most the pops of one of
their rounds.

A round merges the shards' orders: the shard whose best ready URL is best pops every URL down
to the best ready URL of any other shard (its floor) and tells what it has left; again, while a
served shard is best (at most ``MERGE_CALLS`` calls per served shard). Then every served shard
not called yet is called with the others' best as its floor: its reap, refills and figures, and
the hosts whose politeness delay ended since (its script promotes them) if they beat that
floor. So one dispatcher serving every shard hands out URLs in the crawl's order, as with one
shard; a dispatcher serving some shards pops only what beats the others' best ready URLs. "Low"
is below ``priority_slack`` x the crawl's best URL, and the low slots are the crawl's.

(Measured against a floor at the n-th best ready URL over every shard with one call per shard,
which cost the dispatcher less: on the acceptance web the harvest fell from 0.967 to 0.90-0.92;
docs/benchmarks.md, "Sharded frontier".)
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from jlse.scheduler.crawl_registry import CrawlRegistry
from jlse.scheduler.redis_frontier import RedisFrontier
from jlse.settings import Settings

REAP_EVERY = 0.5  # seconds between reaps of a shard's expired leases
REFILL_EVERY = 1.0  # seconds between refill tasks of one shard
MERGE_CALLS = 3  # a round's calls per served shard at most, while merging their orders


@dataclass
class ShardState:
    """One shard this dispatcher serves."""

    frontier: RedisFrontier
    last_reap: float = 0.0
    last_refill: float = -float("inf")
    failing: bool = False  # its Redis did not answer the last round
    rate_sample: tuple[float, float] = field(default_factory=lambda: (time.monotonic(), -1.0))


@dataclass
class CrawlState:
    """A crawl as the dispatcher caches it between rounds."""

    config_sha1: str
    settings: Settings
    shards: dict[int, ShardState]  # the shards this dispatcher serves
    max_outstanding: int  # the crawl's, over all its shards
    # per shard of the crawl: (fetched, in flight, queued, hosts with spilled URLs), as last seen
    seen: dict[int, tuple[int, int, int, int]] = field(default_factory=dict)
    # per shard: its best queued priority and its low URLs in flight, as last read
    best: dict[int, float] = field(default_factory=dict)
    low: dict[int, int] = field(default_factory=dict)
    # per shard: the best priority of its ready hosts (the round's read, then what its call
    # left)
    ready: dict[int, float] = field(default_factory=dict)
    down: set[int] = field(default_factory=set)  # shards whose Redis did not answer lately
    others_read: float = -float("inf")

    def merge_order(self) -> Iterator[tuple[int, float | None]]:
        """The round's calls, (served shard, floor), as the module says."""
        called: set[int] = set()
        for _ in range(MERGE_CALLS * len(self.shards)):
            best = max(self.ready.items(), key=lambda item: item[1], default=None)
            if best is None or best[0] not in self.shards:
                break  # nothing ready, or another dispatcher's shard is best
            index, before = best
            called.add(index)
            yield index, self._others_best(index)
            if self.ready.get(index) == before:  # nothing taken (slots, budget, low rule)
                break
        for index in sorted(self.shards):
            if index not in called:
                yield index, self._others_best(index)

    def _others_best(self, index: int) -> float | None:
        return max((score for shard, score in self.ready.items() if shard != index),
                   default=None)


def parse_shard_spec(spec: str | None) -> tuple[int, int]:
    """``"i/k"`` (serve the shards s with s % k == i) as (i, k); None or "" is (0, 1): all."""
    if not spec:
        return 0, 1
    try:
        index, _, count = spec.partition("/")
        pair = int(index), int(count)
    except ValueError:
        raise ValueError(f"--shard {spec!r}: use i/k, e.g. 0/3 (serve shards 0, 3, 6...)") \
            from None
    if not 0 <= pair[0] < pair[1]:
        raise ValueError(f"--shard {spec!r}: i must lie in 0 .. k - 1")
    return pair


def read_figures(registry: CrawlRegistry, crawl_id: str, crawl: CrawlState,
                 indexes: list[int]) -> None:
    """Per shard in ``indexes``, one pipelined read: fetched, in flight, queued, spilled, its
    best priority, its low URLs in flight (below priority_slack x the crawl's best as last read)
    and its best ready priority."""
    bests = list(crawl.best.values())
    low_bound = crawl.settings.priority_slack * max(bests) if bests else None
    pipe = registry.client.pipeline(transaction=False)
    for index in indexes:
        frontier = registry.frontier_prefix(crawl_id, index)
        pipe.hget(registry.shard_prefix(crawl_id, index) + "counters", "fetched")
        pipe.hlen(frontier + "lease")
        pipe.get(frontier + "queued")
        pipe.hlen(frontier + "spill")
        pipe.zrevrange(frontier + "best", 0, 0, withscores=True)
        pipe.zcount(frontier + "lease_priority", "-inf",
                    "-inf" if low_bound is None else f"({low_bound!r}")
        pipe.zrevrange(frontier + "ready", 0, 0, withscores=True)
    replies = pipe.execute()
    for position, index in enumerate(indexes):
        fetched, in_flight, queued, spilled, best, low, ready = \
            replies[7 * position:7 * position + 7]
        if ready:
            crawl.ready[index] = float(ready[0][1])
        else:
            crawl.ready.pop(index, None)
        crawl.seen[index] = (int(float(fetched or 0)), int(in_flight), int(queued or 0),
                             int(spilled))
        if best:
            crawl.best[index] = float(best[0][1])
        else:
            crawl.best.pop(index, None)
        crawl.low[index] = int(low)
