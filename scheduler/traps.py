"""Spider-trap and scope defences: the checks a URL passes before it may be queued.

Beyond depth, length, repeated segments, pattern runs, scope and the per-host budget:

- registered domains (``HostLedger.domain_keys``, public-suffix aware): a page budget per
  domain over all its hosts, and at most ``max_hosts_per_domain`` hosts fetched from, so a
  site that puts every page on a new subdomain costs that many pages, not the crawl;
- query variants: a page whose links have its own shape (``pattern_run`` >= 1, e.g.
  ``/item?id=…`` linking to more ``/item?id=…``) may add at most ``max_query_variants``
  distinct query strings of one host + path + parameter names; a catalogue's list pages, whose
  shape differs from the items', are not counted. Counted in this process (a cluster's workers
  each count their own, so the bound there is per worker).
"""

from __future__ import annotations

import functools
import threading
from collections import Counter, OrderedDict
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


VARIANT_SHAPES = 4096  # host + path + keys shapes whose query variants are remembered


class TrapGuard:
    """Refuses URLs that are too long, too deep, repetitive, out of scope, over a host or
    domain budget, or one query variant too many. Thread-safe; one guard serves every thread.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._allowed = _domain_list(settings.allowed_domains)
        self._denied = _domain_list(settings.denied_domains)
        self._variants: OrderedDict[str, set[str]] = OrderedDict()  # shape -> queries seen
        self._variants_lock = threading.Lock()

    def refuse_reason(self, url: str, depth: int, pattern_run: int, host_fetched: int = 0,
                      domain_pages: int = 0, domain_hosts: int = 0) -> str | None:
        """None if ``url`` may be queued, else a short reason (the caller logs it).
        ``host_fetched``: pages fetched so far from the URL's host; ``domain_pages`` /
        ``domain_hosts``: pages and hosts fetched from its registered domain (``HostLedger``)."""
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
        if domain_over_budget(settings, host_fetched, domain_pages, domain_hosts):
            return "domain budget"
        if pattern_run > 0 and self._one_variant_too_many(url):
            return "query variants"
        return None

    def _one_variant_too_many(self, url: str) -> bool:
        """Whether ``url`` is a new query string of a host + path + keys shape that already
        has ``max_query_variants`` (it is remembered otherwise)."""
        shape, _, query = url.partition("?")
        if not query:
            return False
        query = query.partition("#")[0]
        shape += "?" + "&".join(sorted({pair.partition("=")[0] for pair in query.split("&")}))
        limit = self.settings.max_query_variants
        with self._variants_lock:
            seen = self._variants.get(shape)
            if seen is None:
                seen = self._variants[shape] = set()
                if len(self._variants) > VARIANT_SHAPES:
                    self._variants.popitem(last=False)
            else:
                self._variants.move_to_end(shape)
            if query in seen:
                return False
            if len(seen) >= limit:
                return True
            seen.add(query)
            return False

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


def domain_over_budget(settings: Settings, host_fetched: int, domain_pages: int,
                       domain_hosts: int) -> bool:
    """A registered domain's page budget is spent, or the host would be one host too many."""
    if domain_pages >= settings.max_pages_per_domain:
        return True
    return host_fetched == 0 and domain_hosts >= settings.max_hosts_per_domain


@functools.lru_cache(maxsize=65536)  # a page's own pattern is asked once per out-link
def _pattern(url: str) -> str:
    return url_pattern(url)
