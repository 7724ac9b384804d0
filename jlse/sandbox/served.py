"""What every served evaluation web shares (the sandbox web and the real-text web): the records
of its ground truth, the truth as queries and files, and the service hosts - the search engine,
``faults.test`` and the robots hosts, the stall, sitemap and hostile hosts - that answer the
same on every web.

A web subclasses :class:`ServedWeb` and gives ``_find`` (URL -> site and page), ``_truth_of``
(a page's truth) and ``_site_truth`` (its sites' truth by host); the server calls ``respond`` and ``robots_rules``, which the
subclass writes on top of :meth:`ServedWeb.service_response` and
:meth:`ServedWeb.service_robots`.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from jlse.sandbox import faults, hostile, search, sitemaps, stalls
from jlse.sandbox import response as r


@dataclass(frozen=True)
class PageTruth:
    """What a page really is, independent of any classifier.

    ``topic`` is a crawl topic, a distractor topic or "hub"; ``is_target`` marks detail pages
    (products, reviews, recipes, articles...); ``crawlable`` is False when robots.txt keeps the
    ``jlse`` user agent away.
    """

    url: str
    site: str
    topic: str
    is_target: bool
    lang: str
    crawlable: bool = True


@dataclass(frozen=True)
class SiteTruth:
    """What a site is about: the majority ``topic`` of its HTML pages and its ``share`` of them
    (1.0 for a single-topic site); ``longtail`` marks the discovery layout's small sites."""

    site: str
    topic: str
    share: float
    n_pages: int
    lang: str
    longtail: bool = False


def split_url(url: str) -> tuple[str, str]:
    """(host, path with query) of an http URL; lower-case host, default port dropped."""
    parts = urlsplit(url.strip())
    host = (parts.hostname or "").lower()
    if parts.port not in (None, 80):
        host = f"{host}:{parts.port}"
    path = parts.path or "/"
    return host, path + (f"?{parts.query}" if parts.query else "")


class ServedWeb(ABC):
    """Ground truth and service hosts shared by every web the sandbox server serves."""

    fault_hosts: tuple[str, ...] = (faults.FAULT_HOST, *faults.ROBOTS_HOSTS)
    search_engine: search.SearchEngine

    plan: Any  # its sites (``.sites``, each with ``.pages``: path -> page) and ``.by_host``

    @abstractmethod
    def _find(self, url: str) -> tuple[Any, Any] | None:
        """(site, page) of an HTML page of the web; None for any other URL."""

    @abstractmethod
    def _truth_of(self, site: Any, page: Any) -> PageTruth:
        """The truth of a page of a site."""

    def truth(self, url: str) -> PageTruth | None:
        """The truth of an HTML page of the web; None for traps, service hosts and unknown
        URLs."""
        found = self._find(url)
        return None if found is None else self._truth_of(*found)

    def iter_truth(self) -> Iterator[PageTruth]:
        """The truth of every HTML page of the web."""
        for site in self.plan.sites:
            for page in site.pages.values():
                yield self._truth_of(site, page)

    @property
    @abstractmethod
    def _site_truth(self) -> dict[str, SiteTruth]:
        """Every site's truth, by host."""

    # --- ground truth ---
    @property
    def n_pages(self) -> int:
        return sum(len(site.pages) for site in self.plan.sites)

    def is_relevant(self, url: str, topic: str) -> bool:
        found = self.truth(url)
        return found is not None and found.topic == topic

    def write_truth(self, path: str | Path) -> Path:
        """JSON lines: url, site, topic, target, lang, crawlable."""
        out = Path(path)
        with out.open("w", encoding="utf-8") as handle:
            for truth in self.iter_truth():
                row = asdict(truth)
                row["target"] = row.pop("is_target")
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
        return out

    def site_truth(self) -> dict[str, SiteTruth]:
        """Every site's truth, by host: its majority topic and that topic's share of pages."""
        return dict(self._site_truth)

    def is_relevant_site(self, host: str, topic: str) -> bool:
        """Whether most (> 50%) of the pages of ``host`` (a host or a URL) are about ``topic``."""
        if "/" in host:
            host = split_url(host)[0]
        truth = self._site_truth.get(host.lower())
        return truth is not None and truth.topic == topic and truth.share > 0.5

    def write_site_truth(self, path: str | Path) -> Path:
        """JSON lines: site, topic, share, n_pages, lang, longtail."""
        out = Path(path)
        with out.open("w", encoding="utf-8") as handle:
            for truth in self._site_truth.values():
                handle.write(json.dumps(asdict(truth), ensure_ascii=False) + "\n")
        return out

    @abstractmethod
    def _site_robots(self, site: Any) -> str | None:
        """The robots.txt text of one of the web's sites; None when it has none."""

    def robots_rules(self, host: str) -> str | None:
        """The robots.txt text that applies to ``host``; None when there is none."""
        host = host.lower()
        service, rules = self.service_robots(host)
        if service:
            return rules
        site = self.plan.by_host.get(host)
        return None if site is None else self._site_robots(site)

    # --- the service hosts ---
    def service_robots(self, host: str) -> tuple[bool, str | None]:
        """(True, its robots.txt text or None) when ``host`` (lower case) is a service host;
        (False, None) for the web's own sites and unknown hosts."""
        if host in self.fault_hosts:
            return True, faults.fault_robots_rules(host)
        if stalls.serves(host):
            return True, stalls.robots_rules(host)
        if sitemaps.serves(host):
            return True, sitemaps.robots_rules(host)
        return False, None

    def service_response(self, host: str, path: str, query: str,
                         state: r.ServerState) -> tuple[bool, r.Response | None]:
        """(True, the answer) when ``host`` (lower case) is a service host; else (False, None)."""
        if search.serves(host):
            return True, self.search_engine.respond(path, query, state)
        if host == faults.FAULT_HOST:
            return True, faults.fault_response(path, query, state)
        if host in faults.ROBOTS_HOSTS:
            return True, faults.robots_host_response(host, path)
        if stalls.serves(host):
            return True, stalls.respond(host, path, query, state)
        if sitemaps.serves(host):
            return True, sitemaps.respond(path)
        if hostile.serves(host):
            return True, hostile.respond(host, path, query, state)
        return False, None
