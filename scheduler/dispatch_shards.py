"""A crawl's frontier shards as the dispatcher sees them, and how a round spreads over them.

A crawl's frontier is ``frontier_shards`` shards (``scheduler.shards``), each ordered by priority
on its own. A dispatcher serves every shard, or with ``--shard i/k`` the shards ``s`` with
``s % k == i``: k dispatchers split the work, each running the round script of its shards only
(on a Redis Cluster, spread over the masters). The page budget and ``max_outstanding`` are the
crawl's: a round starts by reading every shard's figures, and a shard's pops are bounded by
what the others hold, so several dispatchers may overshoot them by at most the pops of one of
their rounds.

A round gives the crawl's free slots to its best ready URLs, whichever shard holds them. It
starts with one call per shard (``read_figures``, the ``FIGURES`` script): the shard promotes the
hosts whose delay ended and tells its figures and the priorities of its best ready hosts, as
many as the crawl has slots. The best of them over every shard, as many as there are free slots
(and pages left in the budget; of the low ones only as many as the crawl's low slots left
free), are each shard's share. Then each served shard is called once, best first, to pop at
most its share and nothing below the best ready URL any other shard leaves (its first one
beyond its share; for a shard already called, what its call left). So one dispatcher serving
every shard hands out the URLs one shard would, in two calls per shard whatever the round's
size; a dispatcher serving some shards pops only its shards' share. "Low" is below
``priority_slack`` x the crawl's best URL (at a host that may go within ``LOW_AFTER_IDLE``), and
the low slots are the crawl's.

(Measured against shares blind to the low slots, and a floor at the n-th best ready URL: on
the acceptance web the harvest fell from 0.967 to 0.89-0.92, a shard's low-priority slot going
to junk while a better but low URL waited in another shard; and against merging the shards' orders call
by call, which made 0.90 round-script calls per page instead of 0.04 with one shard;
docs/benchmarks.md, "Sharded frontier".)
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from jlse.scheduler.crawl_registry import CrawlRegistry
from jlse.scheduler.redis_frontier import RedisFrontier
from jlse.settings import LOW_AFTER_IDLE, Settings

REAP_EVERY = 0.5  # seconds between reaps of a shard's expired leases
REFILL_EVERY = 1.0  # seconds between refill tasks of one shard


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
    # per shard: its best queued priority (hosts that may go within LOW_AFTER_IDLE: see
    # ``read_figures``) and its low URLs in flight, as last read
    best: dict[int, float] = field(default_factory=dict)
    low: dict[int, int] = field(default_factory=dict)
    # per shard: the priorities of its best ready hosts, best first (the round's read)
    ready: dict[int, list[float]] = field(default_factory=dict)
    # per shard: the best ready priority it leaves this round (see ``round_calls``)
    left: dict[int, float | None] = field(default_factory=dict)
    down: set[int] = field(default_factory=set)  # shards whose Redis did not answer lately
    others_read: float = -float("inf")

    def free_slots(self) -> int:
        """Pops the crawl may make now: ``max_outstanding`` less the URLs in flight (a down
        shard's tasks are stuck until it is back: they take no slot), within the page budget."""
        in_flight = sum(figures[1] for shard, figures in self.seen.items()
                        if shard not in self.down)
        spent = sum(fetched + in_flight for fetched, in_flight, _, _ in self.seen.values())
        return max(0, min(self.max_outstanding - in_flight, self.settings.max_pages - spent))

    def low_bound(self) -> float | None:
        """Below this a URL is "low": priority_slack x the crawl's best queued priority at
        the hosts that may go within ``LOW_AFTER_IDLE``, as last read (None: none)."""
        bests = list(self.best.values())
        return self.settings.priority_slack * max(bests) if bests else None

    def round_calls(self) -> Iterator[tuple[int, int, float | None]]:
        """The round's calls, (served shard, most pops, floor or None), as the module says;
        ``left`` must hold, once a call is made, the best ready priority its shard left (the
        floors of the calls after it)."""
        counts = Counter(index for _, index in self._chosen())
        self.left = {index: (scores[counts[index]] if len(scores) > counts[index] else None)
                     for index, scores in self.ready.items()}
        for index in sorted(self.shards, key=lambda i: -(self.ready.get(i) or [-math.inf])[0]):
            others = [score for shard, score in self.left.items()
                      if shard != index and score is not None]
            yield index, counts[index], max(others, default=None)

    def _chosen(self) -> list[tuple[float, int]]:
        """The round's pops as (priority, shard): the best ready URLs over every shard, as
        many as there are free slots, the low ones (below priority_slack x the crawl's best)
        only as many as the crawl's low slots left free."""
        ready = sorted(((score, index) for index, scores in self.ready.items()
                        for score in scores), reverse=True)
        low_bound = self.low_bound()
        if low_bound is None:
            low_bound = -math.inf
        slots = self.free_slots()
        chosen = [entry for entry in ready if entry[0] >= low_bound][:slots]
        low_free = self.settings.low_priority_slots - sum(self.low.values())
        low_free = max(0, min(low_free, slots - len(chosen)))
        return chosen + [entry for entry in ready if entry[0] < low_bound][:low_free]


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


def read_figures(registry: CrawlRegistry, script: Any, crawl_id: str, crawl: CrawlState,
                 index: int, now: float) -> None:
    """Shard ``index``'s figures (the ``FIGURES`` script): fetched, in flight, queued, spilled,
    its best priority at the hosts that may go within ``LOW_AFTER_IDLE`` (a host that sleeps
    longer holds no URL back: ``RedisFrontier.best_priority``), its low URLs in flight (below
    priority_slack x the crawl's best as last read) and the priorities of its best ready
    hosts, as many as the crawl has slots, but of those below priority_slack x its own best
    only one more than the crawl's low slots: the round takes no more of them
    (``CrawlState._chosen``), and reading all cost the shard more than the round's pops."""
    low_bound = crawl.low_bound()
    frontier = registry.frontier_prefix(crawl_id, index)
    settings = crawl.settings
    reply = script(keys=[frontier + "ready"],
                   args=[frontier, repr(now),
                         registry.shard_prefix(crawl_id, index) + "counters",
                         "" if low_bound is None else repr(low_bound), crawl.max_outstanding,
                         repr(float(settings.priority_slack)), settings.low_priority_slots + 1,
                         repr(LOW_AFTER_IDLE)])
    fetched, in_flight, queued, spilled, best, low = reply[:6]
    crawl.ready[index] = [float(score) for score in reply[6:]]
    crawl.seen[index] = (int(float(fetched)), int(in_flight), int(queued), int(spilled))
    if best:
        crawl.best[index] = float(best)
    else:
        crawl.best.pop(index, None)
    crawl.low[index] = int(low)
