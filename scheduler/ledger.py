"""Per-host and per-domain figures the checks before a fetch and the trap filter read.

``HostLedger`` is the narrow interface: pages fetched per host (the per-host page budget), per
registered domain (``registered_domain``: public-suffix aware) and how many hosts of a domain
were fetched from (a trap that puts every page on a new subdomain), and robots.txt failures per
host (give up on a host whose robots.txt stays unavailable). The embedded crawl keeps them in
this process (``LocalHostLedger``); a cluster keeps them in Redis hashes
(``jlse.scheduler.redis_ledger.RedisHostLedger``) so every worker sees every fetch.

One counter space holds all of them: a host's key is the host; ``domain_keys(host)`` gives the
keys of its domain's pages (``@example.com``) and hosts (``#example.com``), which no host name
can collide with.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Mapping, Sequence

from jlse.scheduler.urls import registered_domain

DOMAIN_PAGES = "@"  # key prefix: pages fetched from a registered domain
DOMAIN_HOSTS = "#"  # key prefix: hosts of a registered domain fetched from


def domain_keys(host: str) -> tuple[str, str]:
    """(pages key, hosts key) of ``host``'s registered domain in the ledger."""
    domain = registered_domain(host)
    return DOMAIN_PAGES + domain, DOMAIN_HOSTS + domain


def with_domain_counts(host_counts: Mapping[str, int]) -> dict[str, int]:
    """Per-host page counts plus the per-domain counts they imply (a resumed crawl)."""
    counts = {host.lower(): n for host, n in host_counts.items() if n > 0}
    derived: Counter[str] = Counter()
    for host, n in counts.items():
        pages, hosts = domain_keys(host)
        derived[pages] += n
        derived[hosts] += 1
    counts.update(derived)
    return counts


class HostLedger(ABC):
    @abstractmethod
    def fetch_counts(self, fetched_host: str | None, keys: Sequence[str]) -> dict[str, int]:
        """Count one page fetched from ``fetched_host`` (unless None; its domain's pages, and
        its domain's hosts if it is the host's first), then return the counts of ``keys``
        (hosts, or ``domain_keys``)."""

    @abstractmethod
    def robots_failures(self, host: str) -> int:
        """How many times the host's robots.txt was unavailable."""

    @abstractmethod
    def note_robots_failure(self, host: str) -> int:
        """Count one more robots.txt failure of ``host``; the new count."""


class LocalHostLedger(HostLedger):
    def __init__(self, fetched: dict[str, int] | None = None) -> None:
        self._fetched: Counter[str] = Counter(with_domain_counts(fetched or {}))
        self._robots_failures: Counter[str] = Counter()

    def fetch_counts(self, fetched_host: str | None, keys: Sequence[str]) -> dict[str, int]:
        if fetched_host is not None:
            host = fetched_host.lower()
            pages, hosts = domain_keys(host)
            self._fetched[host] += 1
            self._fetched[pages] += 1
            if self._fetched[host] == 1:
                self._fetched[hosts] += 1
        return {key: self._fetched.get(key.lower(), 0) for key in keys}

    def robots_failures(self, host: str) -> int:
        return self._robots_failures[host]

    def note_robots_failure(self, host: str) -> int:
        self._robots_failures[host] += 1
        return self._robots_failures[host]
