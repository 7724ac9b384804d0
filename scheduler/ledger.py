"""Per-host figures the checks before a fetch and the trap filter read.

``HostLedger`` is the narrow interface: pages fetched per host (the per-host page budget) and
robots.txt failures per host (give up on a host whose robots.txt stays unavailable). The
embedded crawl keeps them in this process (``LocalHostLedger``); a cluster keeps them in Redis
hashes (``jlse.scheduler.crawl_registry.RedisHostLedger``) so every worker sees every fetch.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Sequence


class HostLedger(ABC):
    @abstractmethod
    def fetch_counts(self, fetched_host: str | None, hosts: Sequence[str]) -> dict[str, int]:
        """Count one page fetched from ``fetched_host`` (unless None), then return the pages
        fetched so far from each of ``hosts``."""

    @abstractmethod
    def robots_failures(self, host: str) -> int:
        """How many times the host's robots.txt was unavailable."""

    @abstractmethod
    def note_robots_failure(self, host: str) -> int:
        """Count one more robots.txt failure of ``host``; the new count."""


class LocalHostLedger(HostLedger):
    def __init__(self, fetched: dict[str, int] | None = None) -> None:
        self._fetched: Counter[str] = Counter({h.lower(): n for h, n in (fetched or {}).items()})
        self._robots_failures: Counter[str] = Counter()

    def fetch_counts(self, fetched_host: str | None, hosts: Sequence[str]) -> dict[str, int]:
        if fetched_host is not None:
            self._fetched[fetched_host.lower()] += 1
        return {host: self._fetched[host.lower()] for host in hosts}

    def robots_failures(self, host: str) -> int:
        return self._robots_failures[host]

    def note_robots_failure(self, host: str) -> int:
        self._robots_failures[host] += 1
        return self._robots_failures[host]
