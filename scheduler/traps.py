"""Spider-trap and scope defences: the checks a URL passes before it may be queued."""

from __future__ import annotations

import functools
from collections import Counter
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from jlse.scheduler.urls import canonicalize, host_of, hostname_of, url_pattern

if TYPE_CHECKING:
    from jlse.settings import Settings


def _domain_list(domains: list[str]) -> tuple[str, ...]:
    """Setting values as canonical host names: ``*.Example.com.`` -> ``example.com``,
    ``bücher.de`` -> ``xn--bcher-kva.de``."""
    names = []
    for domain in domains:
        name = domain.strip().lower().removeprefix("*").strip(".")
        canonical = canonicalize(f"http://{name}/") if name else None
        names.append(hostname_of(host_of(canonical)) if canonical else name)
    return tuple(name for name in names if name)


def _matches(hostname: str, domains: tuple[str, ...]) -> bool:
    """Whether ``hostname`` is one of ``domains`` or a subdomain of one."""
    return any(hostname == d or hostname.endswith("." + d) for d in domains)


class TrapGuard:
    """Refuses URLs that are too long, too deep, repetitive, out of scope or over a host budget.

    Stateless after construction, so one guard serves every thread.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._allowed = _domain_list(settings.allowed_domains)
        self._denied = _domain_list(settings.denied_domains)

    def refuse_reason(self, url: str, depth: int, pattern_run: int,
                      host_fetched: int = 0) -> str | None:
        """None if ``url`` may be queued, else a short reason (the caller logs it).
        ``host_fetched``: pages fetched so far from the URL's host (``HostLedger``)."""
        settings = self.settings
        if len(url) > settings.max_url_length:
            return "url too long"
        if depth > settings.max_depth:
            return "too deep"
        host = host_of(url)
        if not host:
            return "invalid url"
        if not self.in_scope(host):
            return "out of scope"
        if self._has_repeated_segments(url):
            return "repeated path segments"
        if pattern_run > settings.max_pattern_run:
            return "pattern run"
        if host_fetched >= settings.max_pages_per_host:
            return "host budget"
        return None

    def in_scope(self, host: str) -> bool:
        """Whether ``host`` (``host[:port]``) is allowed by allowed_domains/denied_domains."""
        hostname = hostname_of(host.lower())
        if self._denied and _matches(hostname, self._denied):
            return False
        return not self._allowed or _matches(hostname, self._allowed)

    def _has_repeated_segments(self, url: str) -> bool:
        try:
            path = urlsplit(url).path
        except ValueError:
            return False
        counts = Counter(segment for segment in path.split("/") if segment)
        return any(n > self.settings.max_repeated_segments for n in counts.values())

    def child_pattern_run(self, parent_url: str, parent_run: int, child_url: str) -> int:
        """``parent_run + 1`` if the child has the parent's URL pattern, else 0."""
        return parent_run + 1 if _pattern(child_url) == _pattern(parent_url) else 0


@functools.lru_cache(maxsize=65536)  # a page's own pattern is asked once per out-link
def _pattern(url: str) -> str:
    return url_pattern(url)
