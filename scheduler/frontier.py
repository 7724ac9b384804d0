"""The frontier: which URL to fetch next.

``Frontier`` is the narrow interface both modes implement (in-process here, Redis in distributed
mode). ``LocalFrontier`` is SPEC section 2's bounded priority queue:

- highest priority first, ties in discovery order;
- a URL pushed again while queued keeps its highest priority;
- when full, the lowest-priority URL is evicted (it stays ``queued`` in the crawl database);
- politeness: only URLs whose host is ready (the caller's predicate) are popped;
- domain diversity (soft): prefer a host not among the last ``k`` popped, but only among hosts
  whose best URL has at least ``slack`` times the best ready priority; otherwise take the best
  ready URL anyway, so a crawl of few hosts never stalls and diversity never trades a relevant
  URL for a junk one (SPEC's strict rule would: on a web of 30 hosts it is a round robin).

Internally: one heap per host, a heap of hosts keyed by their best URL, and a min-heap for
eviction. Superseded heap entries are skipped lazily.
"""

from __future__ import annotations

import heapq
import itertools
from abc import ABC, abstractmethod
from collections import Counter, deque
from collections.abc import Callable

from jlse.scheduler.urls import host_of

from jlse.records import CrawlTask

HostReady = Callable[[str], bool]


class Frontier(ABC):
    """Where discovered URLs wait to be fetched."""

    @abstractmethod
    def push(self, task: CrawlTask) -> bool:
        """Queue ``task``; if its URL is already queued, keep the higher priority.

        Returns True if the URL was added or its priority raised."""

    @abstractmethod
    def pop(self, host_ready: HostReady | None = None,
            min_priority: float | None = None) -> CrawlTask | None:
        """The best task whose host is ready (and whose priority is at least ``min_priority``),
        or None if there is none right now."""

    def best_priority(self) -> float | None:
        """The highest priority queued, whether or not its host is ready; None when empty
        or unknown (then no URL counts as "low", see ``Settings.priority_slack``)."""
        return None

    @abstractmethod
    def __len__(self) -> int: ...


class LocalFrontier(Frontier):
    def __init__(self, max_size: int = 100_000, diversity: int = 100, slack: float = 0.5) -> None:
        self.max_size = max_size
        self.diversity = diversity
        self.slack = slack
        self._seq = itertools.count()
        self._queued: dict[str, tuple[float, int, CrawlTask]] = {}  # url -> current entry
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

    def push(self, task: CrawlTask) -> bool:
        current = self._queued.get(task.url)
        if current is not None and current[0] >= task.priority:
            return False
        seq = current[1] if current is not None else next(self._seq)
        self._queued[task.url] = (task.priority, seq, task)
        host = host_of(task.url)
        heapq.heappush(self._host_heaps.setdefault(host, []), (-task.priority, seq, task.url))
        heapq.heappush(self._hosts, (-task.priority, seq, host))
        heapq.heappush(self._lowest, (task.priority, -seq, task.url))
        if len(self._queued) > self.max_size:
            self._evict_lowest()
        return True

    def best_priority(self) -> float | None:
        """The highest priority queued, whether or not its host is ready."""
        while self._hosts:
            entry = self._hosts[0]
            best = self._best_of_host(entry[2])
            if best is not None and best[:2] == entry[:2]:
                return -entry[0]
            heapq.heappop(self._hosts)  # stale host entry
        return None

    def pop(self, host_ready: HostReady | None = None,
            min_priority: float | None = None) -> CrawlTask | None:
        skipped: list[tuple[float, int, str]] = []
        fallback: tuple[float, int, str] | None = None
        chosen: tuple[float, int, str] | None = None
        while self._hosts:
            entry = heapq.heappop(self._hosts)
            host = entry[2]
            best = self._best_of_host(host)
            if best is None or best[:2] != entry[:2]:
                continue  # stale host entry
            if host_ready is not None and not host_ready(host):
                skipped.append(entry)
                continue
            if fallback is not None and -entry[0] < self.slack * -fallback[0]:
                skipped.append(entry)
                break  # the remaining hosts are too far below the best ready URL
            if self._recent_count[host] and self.diversity > 1:
                skipped.append(entry)
                if fallback is None:
                    fallback = entry
                continue
            chosen = entry
            break
        if chosen is None and fallback is not None:
            skipped.remove(fallback)
            chosen = fallback
        if chosen is not None and min_priority is not None and -chosen[0] < min_priority:
            skipped.append(chosen)
            chosen = None
        for entry in skipped:
            heapq.heappush(self._hosts, entry)
        if chosen is None:
            return None
        return self._take_from_host(chosen[2])

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

    def _take_from_host(self, host: str) -> CrawlTask:
        heap = self._host_heaps[host]
        _, _, url = heapq.heappop(heap)
        _, _, task = self._queued.pop(url)
        best = self._best_of_host(host)
        if best is not None:
            heapq.heappush(self._hosts, (best[0], best[1], host))
        self._remember_host(host)
        return task

    def _remember_host(self, host: str) -> None:
        if self.diversity <= 1:
            return
        self._recent.append(host)
        self._recent_count[host] += 1
        if len(self._recent) >= self.diversity:
            old = self._recent.popleft()
            self._recent_count[old] -= 1

    def _evict_lowest(self) -> None:
        while self._lowest:
            priority, neg_seq, url = heapq.heappop(self._lowest)
            current = self._queued.get(url)
            if current is not None and current[0] == priority and current[1] == -neg_seq:
                del self._queued[url]
                self.evicted += 1
                return
