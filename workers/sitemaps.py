"""Sitemaps (sitemaps.org) as a source of URLs: the ``Sitemap:`` lines of robots.txt.

With ``sitemaps`` on, the robots.txt fetch of a host queues the host's sitemap files (same host
only, at most ``sitemap_max_files``, index files included). Each file is fetched in the place of
one of the host's pages (``SitemapSource.take_turn``): the page waits in the frontier for the
host's delay, so a sitemap request is as polite as a page request, through the same fetcher
(address guard, robots.txt, byte caps, deadline). The URLs a sitemap lists (at most
``sitemap_max_urls`` per host) go to the writer as new links without a parent, through the same
rules as any link: canonicalisation, scope and traps, dedup, and robots.txt when fetched.

Formats: XML ``urlset`` and ``sitemapindex`` (any namespace), plain text (one URL a line), each
optionally gzipped (``.xml.gz``; inflated up to ``max_decompressed_bytes``). XML is parsed
without entities, DTDs or network access.

The queue is per process: in a cluster, each worker process that fetches a host's robots.txt
reads its sitemaps once (dedup drops the URLs seen twice).
"""

from __future__ import annotations

import io
import logging
import threading
import zlib
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from urllib.parse import urljoin

from lxml import etree

from jlse.models.strategies import Strategy
from jlse.records import CrawlTask, NewLink, Outcome
from jlse.scheduler.robots import RobotsCache, robots_origin
from jlse.scheduler.urls import canonicalize
from jlse.settings import Settings
from jlse.workers.fetcher import Fetcher

log = logging.getLogger(__name__)

GZIP_MAGIC = b"\x1f\x8b"
# score(urls, depth, parent_priority) -> one priority per URL (the crawl's strategy)
Scorer = Callable[[list[str], int, float], Sequence[float]]


class SitemapTooLarge(ValueError):
    """A gzipped sitemap inflates past ``max_decompressed_bytes``."""


@dataclass
class Sitemap:
    """What one sitemap file lists: page URLs, or (an index) other sitemap files."""

    is_index: bool = False
    locations: list[str] = field(default_factory=list)


def parse_sitemap(body: bytes, max_bytes: int) -> Sitemap:
    """The locations of a sitemap file (XML or text, maybe gzipped)."""
    if body.startswith(GZIP_MAGIC):
        body = gunzip(body, max_bytes)
    if not body.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"<"):
        lines = body.decode("utf-8", "replace").splitlines()
        return Sitemap(False, [line.strip() for line in lines if line.strip()])
    parser = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False,
                             recover=True, remove_comments=True, remove_pis=True)
    root = etree.parse(io.BytesIO(body), parser).getroot()
    if root is None:
        return Sitemap()
    locations = [element.text.strip() for element in root.iter("{*}loc")
                 if element.text and element.text.strip()]
    return Sitemap(etree.QName(root).localname == "sitemapindex", locations)


def gunzip(body: bytes, max_bytes: int) -> bytes:
    """``body`` inflated, refusing more than ``max_bytes`` (gzip bombs)."""
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    data = inflater.decompress(body, max_bytes + 1)
    if len(data) > max_bytes:
        raise SitemapTooLarge(f"inflates past max_decompressed_bytes ({max_bytes})")
    return data


@dataclass
class _HostSitemaps:
    queue: deque[str]
    seen: set[str]
    files: int = 0  # files fetched
    urls: int = 0  # URLs handed to the writer


class SitemapSource:
    """The sitemap files of the hosts whose robots.txt this process fetched, and their URLs."""

    def __init__(self, settings: Settings, fetcher: Fetcher, robots: RobotsCache | None,
                 score: Scorer) -> None:
        self.settings = settings
        self.fetcher = fetcher
        self.robots = robots
        self.score = score
        self._hosts: dict[str, _HostSitemaps] = {}
        self._lock = threading.Lock()

    def found(self, url: str, sitemap_urls: Sequence[str]) -> None:
        """robots.txt of ``url``'s host was just read and lists ``sitemap_urls``."""
        origin = robots_origin(url)
        if origin is None or not sitemap_urls:
            return
        same_host = _same_host(origin, [urljoin(f"{origin}/robots.txt", sitemap)
                                        for sitemap in sitemap_urls])
        limit = self.settings.sitemap_max_files
        with self._lock:
            self._hosts[origin] = _HostSitemaps(deque(same_host[:limit]), set(same_host))

    def take_turn(self, task: CrawlTask) -> tuple[list[NewLink], str] | None:
        """If ``task``'s host has a sitemap file to read, read it in the place of the page:
        (its URLs as new links, the sitemap URL); None when there is none left."""
        origin = robots_origin(task.url)
        with self._lock:
            host = self._hosts.get(origin) if origin else None
            if host is None:
                return None
            if not host.queue or host.urls >= self.settings.sitemap_max_urls:
                del self._hosts[origin]
                return None
            sitemap_url = host.queue.popleft()
            host.files += 1
        return self._read(task, origin, host, sitemap_url), sitemap_url

    def _read(self, task: CrawlTask, origin: str, host: _HostSitemaps,
              sitemap_url: str) -> list[NewLink]:
        if self.robots is not None and not self.robots.check(sitemap_url).allowed:
            log.info("sitemap %s: disallowed by robots.txt", sitemap_url)
            return []
        fetched = self.fetcher.fetch_document(sitemap_url)
        if fetched.outcome is not Outcome.OK:
            log.info("sitemap %s: %s %s", sitemap_url, fetched.outcome.value, fetched.error)
            return []
        try:
            sitemap = parse_sitemap(fetched.body, self.settings.max_decompressed_bytes)
        except (SitemapTooLarge, zlib.error, EOFError, etree.Error) as exc:
            log.warning("sitemap %s refused: %s", sitemap_url, exc)
            return []
        if sitemap.is_index:
            self._queue_children(origin, host, sitemap.locations)
            return []
        return self._links(task, host, sitemap.locations)

    def _queue_children(self, origin: str, host: _HostSitemaps, locations: list[str]) -> None:
        with self._lock:
            room = self.settings.sitemap_max_files - host.files - len(host.queue)
            for child in _same_host(origin, locations):
                if room <= 0:
                    break
                if child not in host.seen:
                    host.seen.add(child)
                    host.queue.append(child)
                    room -= 1

    def _links(self, task: CrawlTask, host: _HostSitemaps, locations: list[str]) -> list[NewLink]:
        urls = list(dict.fromkeys(url for url in map(canonicalize, locations) if url))
        with self._lock:
            urls = urls[:max(0, self.settings.sitemap_max_urls - host.urls)]
            host.urls += len(urls)
        if not urls:
            return []
        depth = task.depth + 1  # sitemaps never take a crawl deeper than links would
        priorities = self.score(urls, depth, task.priority)
        return [NewLink(url=url, parent_id=None, depth=depth, priority=float(priority))
                for url, priority in zip(urls, priorities, strict=True)]


def strategy_scorer(strategy: Strategy) -> Scorer:
    """Priorities of sitemap URLs from the crawl's strategy: links without anchor or context,
    on a page of unknown relevance."""
    def score(urls: list[str], depth: int, parent_priority: float) -> Sequence[float]:
        blanks = [""] * len(urls)
        return strategy.score_links(None, depth, blanks, urls, blanks,
                                    parent_priority=parent_priority)

    return score


def _same_host(origin: str, urls: list[str]) -> list[str]:
    """The canonical ``urls`` on ``origin`` (sitemaps of other hosts are not read)."""
    kept = []
    for url in urls:
        canonical = canonicalize(url)
        if canonical and robots_origin(canonical) == origin:
            kept.append(canonical)
    return list(dict.fromkeys(kept))
