"""Per-host politeness for the embedded crawl: one request in flight per host, and a delay.

The delay between two requests to a host is ``max(politeness_delay, Crawl-delay)`` counted from
the end of the previous request, so start-to-start intervals are never shorter. A host whose
robots.txt could not be read is blocked until its retry time.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class HostPoliteness:
    def __init__(self, delay: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.delay = delay
        self._clock = clock
        self._busy: set[str] = set()
        self._ready_at: dict[str, float] = {}
        self._crawl_delay: dict[str, float] = {}

    def is_ready(self, host: str) -> bool:
        return host not in self._busy and self._ready_at.get(host, 0.0) <= self._clock()

    def acquire(self, host: str) -> None:
        """Mark a request to ``host`` as in flight."""
        self._busy.add(host)

    def release(self, host: str, crawl_delay: float | None = None, blocked_for: float = 0.0) -> None:
        """The request to ``host`` ended; it may be contacted again after its delay."""
        self._busy.discard(host)
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
