"""A crawl's frontier shards as the dispatcher sees them, and how a round spreads over them.

A crawl's frontier is ``frontier_shards`` shards (``scheduler.shards``), each ordered by priority
on its own. A dispatcher serves every shard, or with ``--shard i/k`` the shards ``s`` with
``s % k == i``: k dispatchers split the work, each running the round script of its shards only
(on a Redis Cluster, spread over the masters). The page budget and ``max_outstanding`` are the
crawl's: at the start of a round one pipelined read takes every shard's figures (fetched, in
flight, queued, spilled, its best and its best ready priorities), and a shard's pops are bounded
by what the others hold, so several dispatchers may overshoot them by at most the pops of one of
their rounds.

The crawl's order across shards is kept by a floor: with ``free`` slots, the round's calls pop
only what is at or above the ``free``-th best ready priority over every shard (at most
``MERGE_TOP`` at a time), best shard first, one call per shard, and the round's tasks are sent
best first. A shard with nothing above the floor is not called unless it has work due: a reap
(every ``REAP_EVERY``), a sleeping host waking up, a refill (every ``REFILL_EVERY``). "Low" is
below ``priority_slack`` x the crawl's best URL, and the low slots are the crawl's.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from jlse.scheduler.crawl_registry import CrawlRegistry
from jlse.scheduler.redis_frontier import RedisFrontier
from jlse.settings import Settings

REAP_EVERY = 0.5  # seconds between reaps of a shard's expired leases
REFILL_EVERY = 1.0  # seconds between refill tasks of one shard
MERGE_TOP = 64  # ready URLs read per shard in a round, to place the round's floor
READ_SLACK = 16  # of them, beyond the slots free at the last read


@dataclass
class ShardState:
    """One shard this dispatcher serves."""

    frontier: RedisFrontier
    last_reap: float = 0.0
    last_refill: float = -float("inf")
    failing: bool = False  # its Redis did not answer the last round
    called: bool = False  # its round script ran at least once
    wake_at: float | None = None  # when a sleeping host of it is ready again (its last reply)
    refill_due: int = 0  # hosts due a refill (its last reply)
    rate_sample: tuple[float, float] = field(default_factory=lambda: (time.monotonic(), -1.0))

    def due(self, now: float) -> bool:
        """Work to do whatever its ready URLs: never called, a reap, a waking host, a refill."""
        return (not self.called or now - self.last_reap >= REAP_EVERY
                or (self.wake_at is not None and now >= self.wake_at)
                or (self.refill_due > 0 and now - self.last_refill >= REFILL_EVERY))


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
    # per shard: the best priorities of its ready hosts, best first (the round's read, then
    # the best left after its call)
    ready: dict[int, list[float]] = field(default_factory=dict)
    down: set[int] = field(default_factory=set)  # shards whose Redis did not answer lately
    others_read: float = -float("inf")

    def free_slots(self) -> int:
        """Tasks the crawl may send now: ``max_outstanding`` less what is in flight (a down
        shard's stuck tasks take no slot)."""
        in_flight = sum(figures[1] for shard, figures in self.seen.items()
                        if shard not in self.down)
        return max(0, self.max_outstanding - in_flight)

    def merge_order(self, free: int, now: float) -> Iterator[tuple[int, float | None]]:
        """The round's calls, (served shard, floor), best shard first (see the module)."""
        if self.settings.frontier_shards == 1:
            yield from ((index, None) for index in self.shards)
            return
        merged = sorted((score for scores in self.ready.values() for score in scores),
                        reverse=True)
        wanted = min(free, MERGE_TOP)
        floor = merged[wanted - 1] if 0 < wanted <= len(merged) else None
        for index in sorted(self.shards, key=self._best_ready, reverse=True):
            scores = self.ready.get(index)
            holds_some = bool(scores) and wanted > 0 and (floor is None or scores[0] >= floor)
            if holds_some or self.shards[index].due(now):
                yield index, floor

    def _best_ready(self, index: int) -> float:
        scores = self.ready.get(index)
        return scores[0] if scores else -math.inf


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
    and its best ready priorities (as many as the slots free at the last read, and some more
    for the slots freed since, at most ``MERGE_TOP``)."""
    tops = min(MERGE_TOP, crawl.free_slots() + READ_SLACK)
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
        pipe.zrevrange(frontier + "ready", 0, tops - 1, withscores=True)
    replies = pipe.execute()
    for position, index in enumerate(indexes):
        fetched, in_flight, queued, spilled, best, low, ready = \
            replies[7 * position:7 * position + 7]
        if ready:
            crawl.ready[index] = [float(score) for _, score in ready]
        else:
            crawl.ready.pop(index, None)
        crawl.seen[index] = (int(float(fetched or 0)), int(in_flight), int(queued or 0),
                             int(spilled))
        if best:
            crawl.best[index] = float(best[0][1])
        else:
            crawl.best.pop(index, None)
        crawl.low[index] = int(low)
