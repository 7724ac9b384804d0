"""Per-host politeness for the embedded crawl: requests in flight per host, and a delay.

At most ``host_concurrency`` requests (default 1) are in flight to one host; a value above 1 is
for crawls of servers the user runs (politeness off), and needs ``politeness_delay=0``.

The wait after a request is ``max(politeness_delay, wait)``, where ``wait`` is the request's own
(Crawl-delay, or the retry time of a host whose robots.txt could not be read), counted from the
end of the request, so start-to-start intervals are never shorter. Nothing is remembered from
one request to the next: the caller passes the host's Crawl-delay with every request (the
Redis frontier does the same, so both frontiers wait alike).
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

    def is_ready(self, host: str) -> bool:
        return self._busy[host] < self.host_concurrency and \
            self._ready_at.get(host, 0.0) <= self._clock()

    def waits_longer_than(self, host: str, seconds: float) -> bool:
        """Whether ``host``'s delay ends more than ``seconds`` from now (requests in flight
        aside: they end when they end)."""
        return self._ready_at.get(host, 0.0) > self._clock() + seconds

    def acquire(self, host: str) -> None:
        """Mark a request to ``host`` as in flight."""
        self._busy[host] += 1

    def release(self, host: str, wait: float | None = None) -> None:
        """The request to ``host`` ended; it may be contacted again after
        ``max(delay, wait)`` seconds."""
        self._busy[host] -= 1
        if self._busy[host] <= 0:
            del self._busy[host]
        wait = max(self.delay, wait or 0.0)
        if wait > 0:
            self._ready_at[host] = self._clock() + wait
        else:
            self._ready_at.pop(host, None)

    def cancel(self, host: str) -> None:
        """A request marked in flight was not made: ``host`` waits no longer for it."""
        self._busy[host] -= 1
        if self._busy[host] <= 0:
            del self._busy[host]

    def blocked(self) -> dict[str, float | None]:
        """Hosts that may not be contacted now: seconds until each may be (None: requests in
        flight hold it). Forgets the waits that are over."""
        now = self._clock()
        for host in [h for h, t in self._ready_at.items() if t <= now]:
            del self._ready_at[host]
        blocked: dict[str, float | None] = {h: t - now for h, t in self._ready_at.items()}
        for host, busy in self._busy.items():
            if busy >= self.host_concurrency:
                blocked[host] = None
        return blocked

    def next_ready_in(self) -> float:
        """Seconds until the earliest waiting (not busy) host becomes ready; 0 if none waits."""
        waits = [w for w in self.blocked().values() if w is not None]
        return max(0.0, min(waits)) if waits else 0.0

    @property
    def busy_hosts(self) -> int:
        return len(self._busy)
