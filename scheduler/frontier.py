"""The frontier: which URL to fetch next.

``Frontier`` is the narrow interface both modes implement (in-process here, Redis in distributed
mode). ``LocalFrontier`` is the bounded priority queue of docs/algorithms.md §2.1:

- highest priority first, ties in discovery order;
- a URL pushed again while queued keeps its highest priority (and that push's payload);
- when full, the lowest-priority URL is evicted, among equals the latest discovered (it stays
  ``queued`` in the crawl database);
- politeness (``HostPoliteness``): only URLs whose host is ready are popped; a popped host is
  busy until ``finish``, then waits ``max(delay, politeness delay)``; a requeued URL keeps its
  place in the discovery order;
- domain diversity (soft): prefer a host whose registered domain is not among the last
  ``k - 1`` popped (so any ``k`` consecutive pops come from ``k`` domains when possible; a
  trap's fresh subdomains are one domain), but only among hosts whose best URL
  has at least ``slack`` times the best ready priority (and at least ``min_priority``);
  otherwise take the best ready URL anyway, so a crawl of few hosts never stalls and
  diversity never trades a relevant URL for a junk one (the paper's strict rule, docs/algorithms.md §2.1, would: on a web of
  30 hosts it is a round robin). ``RedisFrontier`` applies the same rule in its Lua pops.

Internally: one heap per host, a heap of hosts keyed by their best URL, and a min-heap for
eviction. Superseded heap entries are skipped lazily.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from abc import ABC, abstractmethod
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from jlse.records import CrawlTask
from jlse.scheduler.politeness import HostPoliteness
from jlse.scheduler.urls import host_of, registered_domain

# ``best_priority(within=)`` passes over at most this many hosts that wait longer, best first
# (the Redis frontier's Lua reads the same value): a few long sleepers are looked past, and the
# walk stays short whatever they number.
FAR_SKIPS = 16


@dataclass(frozen=True)
class HoldUps:
    """Why queued URLs are not started (``LocalFrontier.hold_ups``)."""

    hosts: int  # hosts with URLs queued
    waiting: int  # of which busy or in their politeness delay / Crawl-delay
    low_hosts: int  # ready hosts whose every queued URL is "low" (below the bound)
    low_urls: int  # the URLs of those hosts


class Frontier(ABC):
    """Where discovered URLs wait to be fetched: the seam between a crawl's runners and its
    queue. The crawl engine (``jlse.workers.engine``) calls only these methods, so the embedded
    crawl (``LocalFrontier``) and a cluster (``RedisFrontier``) run the same code.

    Politeness lives in the frontier: ``pop`` hands out a URL only when its host is ready, and
    the host stays busy until ``finish``. The crawl's running counters end with the request
    (``finish(deltas=...)``), so "fetched + in flight" never exceeds what was handed out.

    Both implementations pass one contract suite (``tests/test_frontier_contract.py``). Where
    they differ: ``host_concurrency > 1`` (several requests in flight to one host) exists only
    in ``LocalFrontier``; ``RedisFrontier`` always keeps one per host. A NaN priority is
    refused with ValueError by both (nothing of the batch is queued).
    """

    @abstractmethod
    def push_many(self, tasks: Sequence[CrawlTask]) -> list[bool]:
        """Queue each task; a URL already queued keeps the higher priority. True per task
        added or raised."""

    def push(self, task: CrawlTask) -> bool:
        return self.push_many([task])[0]

    @abstractmethod
    def add_discovered(self, tasks: Sequence[CrawlTask], created: Sequence[bool]) -> None:
        """Queue links just found: a URL new to the crawl (``created`` by the store) is
        queued; a known one only raises its priority if it is still queued."""

    @abstractmethod
    def pop(self, min_priority: float | None = None) -> CrawlTask | None:
        """The best task whose host is ready (and whose priority is at least
        ``min_priority``), now in flight; None if there is none right now."""

    @abstractmethod
    def finish(self, task: CrawlTask, *, requeue: bool = False, delay: float | None = None,
               deltas: dict[str, int] | None = None) -> tuple[bool, dict[str, int]]:
        """End ``task``'s request: its host may be contacted again after
        ``max(delay, politeness delay)``; with ``requeue`` the URL is queued again, in its old
        place, as ``task`` (its ``attempt`` count included), and its host waits ``delay``
        (robots.txt unavailable, a retry). Adds ``deltas`` to the crawl's counters.
        Returns (the task was still in flight, the new values of the counters in ``deltas``);
        a task no longer in flight (its lease was reaped) changes nothing."""

    @abstractmethod
    def best_priority(self, within: float | None = None) -> float | None:
        """The highest priority queued, whether or not its host is ready; None when empty.

        With ``within`` (seconds), only hosts that may be contacted by then count: ready, busy
        or waiting less than that (the low-priority rule's figure: a host that waits out a
        failed robots.txt must not make every ready URL "low"). Hosts are walked best first,
        passing over at most ``FAR_SKIPS`` that wait longer; past them, the best ready host's
        priority counts (Redis reads its ``ready`` index; ``LocalFrontier`` walks on, as a
        ``pop`` does)."""

    @abstractmethod
    def in_flight(self) -> int:
        """Tasks popped and not yet finished."""

    @abstractmethod
    def in_flight_below(self, priority: float) -> int:
        """Tasks in flight whose priority is below ``priority`` (strictly)."""

    @abstractmethod
    def next_ready_in(self) -> float | None:
        """Seconds until some waiting host may be contacted (0: one may now); None if no
        host with queued URLs waits."""

    @abstractmethod
    def counters(self) -> dict[str, int]:
        """The crawl's running counters (``finish``'s deltas summed)."""

    @abstractmethod
    def __len__(self) -> int:
        """URLs queued (not in flight)."""


class LocalFrontier(Frontier):
    def __init__(self, max_size: int = 100_000, diversity: int = 100, slack: float = 0.5, *,
                 delay: float = 0.0, host_concurrency: int = 1,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_size = max_size
        self.diversity = diversity
        self.slack = slack
        self.politeness = HostPoliteness(delay, clock=clock, host_concurrency=host_concurrency)
        # url -> (discovery seq, task) popped, not yet finished: a requeue keeps its place
        self._in_flight: dict[str, tuple[int, CrawlTask]] = {}
        self._counters: Counter[str] = Counter()
        self._seq = itertools.count()
        self._queued: dict[str, tuple[float, int, CrawlTask]] = {}  # url -> current entry
        self._host_count: Counter[str] = Counter()  # host -> URLs queued
        self._host_heaps: dict[str, list[tuple[float, int, str]]] = {}
        self._hosts: list[tuple[float, int, str]] = []  # (-best priority, seq, host)
        self._lowest: list[tuple[float, int, str]] = []  # (priority, -seq, url) for eviction
        self._recent: deque[str] = deque()
        self._recent_count: Counter[str] = Counter()
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._queued)

    def __contains__(self, url: str) -> bool:
        return url in self._queued

    def push_many(self, tasks: Sequence[CrawlTask]) -> list[bool]:
        _refuse_nan(tasks)
        return [self._enqueue(task) for task in tasks]

    def push(self, task: CrawlTask) -> bool:
        _refuse_nan([task])
        return self._enqueue(task)

    def add_discovered(self, tasks: Sequence[CrawlTask], created: Sequence[bool]) -> None:
        _refuse_nan(tasks)
        for task, new in zip(tasks, created, strict=True):
            if new or task.url in self._queued:
                self._enqueue(task)

    def best_priority(self, within: float | None = None) -> float | None:
        if within is not None:
            return self._best_within(within)
        while self._hosts:
            entry = self._hosts[0]
            best = self._best_of_host(entry[2])
            if best is not None and best[:2] == entry[:2]:
                return -entry[0]
            heapq.heappop(self._hosts)  # stale host entry
        return None

    def _best_within(self, seconds: float) -> float | None:
        """``best_priority(within=seconds)``: hosts best first (their entries popped, pushed
        back after), in the order the Redis frontier walks its ``best`` index."""
        walked: list[tuple[float, int, str]] = []
        found: float | None = None
        while self._hosts:
            entry = heapq.heappop(self._hosts)
            best = self._best_of_host(entry[2])
            if best is None or best[:2] != entry[:2]:
                continue  # stale host entry
            walked.append(entry)
            if len(walked) <= FAR_SKIPS:
                counts = not self.politeness.waits_longer_than(entry[2], seconds)
            else:
                counts = self.politeness.is_ready(entry[2])
            if counts:
                found = -entry[0]
                break
        for entry in walked:
            heapq.heappush(self._hosts, entry)
        return found

    def pop(self, min_priority: float | None = None) -> CrawlTask | None:
        chosen = self._pop_ready(min_priority)
        if chosen is None:
            return None
        seq, task = chosen
        self.politeness.acquire(host_of(task.url))
        self._in_flight[task.url] = (seq, task)
        return task

    def finish(self, task: CrawlTask, *, requeue: bool = False, delay: float | None = None,
               deltas: dict[str, int] | None = None) -> tuple[bool, dict[str, int]]:
        popped = self._in_flight.pop(task.url, None)
        if popped is None:
            return False, {}
        self.politeness.release(host_of(task.url), delay)
        if requeue:
            seq, _ = popped
            self._enqueue(task, seq)  # ``task`` carries its attempt count
        changed = {name: value for name, value in (deltas or {}).items() if value}
        self._counters.update(changed)
        return True, {name: self._counters[name] for name in changed}

    def put_back(self, task: CrawlTask) -> None:
        """Queue a popped ``task`` again (its priority may differ) as if it had not been
        popped: no request was made, so its host waits no politeness delay for it."""
        popped = self._in_flight.pop(task.url, None)
        if popped is None:
            return
        self.politeness.cancel(host_of(task.url))
        self._enqueue(task, popped[0])

    def restore_counters(self, values: dict[str, int]) -> None:
        """Start the counters from a resumed crawl's figures."""
        self._counters = Counter(values)

    def counters(self) -> dict[str, int]:
        return dict(self._counters)

    def counter(self, name: str) -> int:
        """One counter, without copying them all (the embedded loop reads it per page)."""
        return self._counters[name]

    def in_flight(self) -> int:
        return len(self._in_flight)

    def in_flight_below(self, priority: float) -> int:
        if math.isnan(priority):
            return 0
        return sum(task.priority < priority for _, task in self._in_flight.values())

    def next_ready_in(self) -> float | None:
        hosts = self._host_count
        blocked = {h: wait for h, wait in self.politeness.blocked().items() if h in hosts}
        if len(blocked) < len(hosts):
            return 0.0  # some host with URLs is ready
        waits = [wait for wait in blocked.values() if wait is not None]
        return max(0.0, min(waits)) if waits else None

    def hold_ups(self, low_below: float) -> HoldUps:
        """Why queued URLs are not started now: their hosts wait (politeness), or every URL a
        ready host has is below ``low_below`` (the low-priority rule holds it back). One pass
        over the hosts with URLs queued: for a progress line, not for every pop."""
        blocked = self.politeness.blocked()
        waiting = low_hosts = low_urls = 0
        for host, queued in self._host_count.items():
            if host in blocked:
                waiting += 1
                continue
            best = self._best_of_host(host)
            if best is not None and -best[0] < low_below:
                low_hosts += 1
                low_urls += queued
        return HoldUps(len(self._host_count), waiting, low_hosts, low_urls)

    def _enqueue(self, task: CrawlTask, seq: int | None = None) -> bool:
        """Queue or raise ``task``; a new entry takes ``seq`` (a requeue's old place) or the
        next discovery number."""
        current = self._queued.get(task.url)
        if current is not None and current[0] >= task.priority:
            return False
        host = host_of(task.url)
        if current is not None:
            seq = current[1]
        else:
            seq = next(self._seq) if seq is None else seq
            self._host_count[host] += 1
        self._queued[task.url] = (task.priority, seq, task)
        heapq.heappush(self._host_heaps.setdefault(host, []), (-task.priority, seq, task.url))
        heapq.heappush(self._hosts, (-task.priority, seq, host))
        heapq.heappush(self._lowest, (task.priority, -seq, task.url))
        if len(self._queued) > self.max_size:
            self._evict_lowest()
        self._compact_lowest()
        return True

    def _pop_ready(self, min_priority: float | None) -> tuple[int, CrawlTask] | None:
        """The module docstring's rule: the best ready host, or with diversity the best ready
        host not popped lately among those within ``slack`` of it."""
        skipped: list[tuple[float, int, str]] = []
        fallback: tuple[float, int, str] | None = None
        chosen: tuple[float, int, str] | None = None
        while self._hosts:
            entry = heapq.heappop(self._hosts)
            host = entry[2]
            best = self._best_of_host(host)
            if best is None or best[:2] != entry[:2]:
                continue  # stale host entry
            skipped.append(entry)
            if min_priority is not None and -entry[0] < min_priority:
                break  # hosts come best first: the rest are below the bound too
            if not self.politeness.is_ready(host):
                continue
            if fallback is not None and -entry[0] < self.slack * -fallback[0]:
                break  # the remaining hosts are too far below the best ready URL
            if self.diversity > 1 and self._recent_count[registered_domain(host)]:
                fallback = fallback or entry
                continue
            chosen = entry
            break
        chosen = chosen or fallback
        for entry in skipped:
            if entry is not chosen:
                heapq.heappush(self._hosts, entry)
        return None if chosen is None else self._take_from_host(chosen[2])

    def _best_of_host(self, host: str) -> tuple[float, int, str] | None:
        """The valid top entry of ``host``'s heap, dropping superseded entries on the way."""
        heap = self._host_heaps.get(host)
        while heap:
            neg_priority, seq, url = heap[0]
            current = self._queued.get(url)
            if current is not None and current[0] == -neg_priority and current[1] == seq:
                return heap[0]
            heapq.heappop(heap)
        self._host_heaps.pop(host, None)
        return None

    def _take_from_host(self, host: str) -> tuple[int, CrawlTask]:
        heap = self._host_heaps[host]
        _, _, url = heapq.heappop(heap)
        _, seq, task = self._queued.pop(url)
        self._forget_one(host)
        best = self._best_of_host(host)
        if best is not None:
            heapq.heappush(self._hosts, (best[0], best[1], host))
        self._remember_host(registered_domain(host))
        return seq, task

    def _forget_one(self, host: str) -> None:
        self._host_count[host] -= 1
        if self._host_count[host] <= 0:
            del self._host_count[host]

    def _remember_host(self, host: str) -> None:
        """Keep the last ``diversity - 1`` registered domains popped: with the next pop, k
        different (by domain, so a trap's fresh subdomains are not "new" sites)."""
        if self.diversity <= 1:
            return
        self._recent.append(host)
        self._recent_count[host] += 1
        while len(self._recent) >= self.diversity:
            old = self._recent.popleft()
            self._recent_count[old] -= 1
            if self._recent_count[old] <= 0:
                del self._recent_count[old]

    def _evict_lowest(self) -> None:
        while self._lowest:
            priority, neg_seq, url = heapq.heappop(self._lowest)
            current = self._queued.get(url)
            if current is not None and current[0] == priority and current[1] == -neg_seq:
                del self._queued[url]
                self._forget_one(host_of(url))
                self.evicted += 1
                return

    def _compact_lowest(self) -> None:
        """Drop the eviction heap's superseded entries (popped or raised URLs) once they are
        the majority, so it stays O(queued) over a long crawl."""
        if len(self._lowest) > 2 * len(self._queued) + 1000:
            self._lowest = [(p, -seq, url) for url, (p, seq, _) in self._queued.items()]
            heapq.heapify(self._lowest)


def _refuse_nan(tasks: Sequence[CrawlTask]) -> None:
    """A NaN priority would break every comparison of the queue (both frontiers refuse it)."""
    for task in tasks:
        if math.isnan(task.priority):
            raise ValueError(f"priority of {task.url!r} is NaN")
