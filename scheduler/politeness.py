"""Per-host politeness for the embedded crawl: requests in flight per host, and a delay.

At most ``host_concurrency`` requests (default 1) are in flight to one host; a value above 1 is
for crawls of servers the user runs (politeness off), and needs ``politeness_delay=0``.

The delay between two requests to a host is ``max(politeness_delay, Crawl-delay)`` counted from
the end of the previous request, so start-to-start intervals are never shorter. A host whose
robots.txt could not be read is blocked until its retry time.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable


class HostPoliteness:
    def __init__(self, delay: float, clock: Callable[[], float] = time.monotonic,
                 host_concurrency: int = 1) -> None:
        self.delay = delay
        self.host_concurrency = host_concurrency
        self._clock = clock
        self._busy: Counter[str] = Counter()  # host -> requests in flight
        self._ready_at: dict[str, float] = {}
        self._crawl_delay: dict[str, float] = {}

    def is_ready(self, host: str) -> bool:
        return self._busy[host] < self.host_concurrency and \
            self._ready_at.get(host, 0.0) <= self._clock()

    def acquire(self, host: str) -> None:
        """Mark a request to ``host`` as in flight."""
        self._busy[host] += 1

    def release(self, host: str, crawl_delay: float | None = None, blocked_for: float = 0.0) -> None:
        """The request to ``host`` ended; it may be contacted again after its delay."""
        self._busy[host] -= 1
        if self._busy[host] <= 0:
            del self._busy[host]
        if crawl_delay is not None:
            self._crawl_delay[host] = crawl_delay
        wait = max(self.delay, self._crawl_delay.get(host, 0.0), blocked_for)
        if wait > 0:
            self._ready_at[host] = self._clock() + wait
        else:
            self._ready_at.pop(host, None)

    def delay_for(self, host: str) -> float:
        return max(self.delay, self._crawl_delay.get(host, 0.0))

    def next_ready_in(self) -> float:
        """Seconds until the earliest waiting (not busy) host becomes ready; 0 if one is."""
        now = self._clock()
        waits = [t - now for h, t in self._ready_at.items() if h not in self._busy]
        return max(0.0, min(waits)) if waits else 0.0

    @property
    def busy_hosts(self) -> int:
        return len(self._busy)
