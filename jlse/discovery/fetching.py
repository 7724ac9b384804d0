"""Discovery fetches pages through the crawl's own engine, so every fetch obeys robots.txt,
politeness, Crawl-delay, the address guard, the byte caps, canonicalisation and dedup, and every
page lands in the crawl database and the page repository like a crawled one.

The difference from a crawl: only the URLs discovery asks for are fetched. The out-links the
writer stores stay ``queued`` in the database (they are the forward-crawl operator's material)
but never enter the frontier, except redirect targets (the same request, moved).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from jlse.embedded import EmbeddedCrawler
from jlse.models.strategy_catalog import make_strategy
from jlse.models.topic_model import TopicModel
from jlse.progress import CrawlProgress
from jlse.records import LinkStatus, NewLink, Outcome
from jlse.scheduler.frontier import LocalFrontier
from jlse.scheduler.ledger import LocalHostLedger
from jlse.scheduler.robots import robots_slots
from jlse.scheduler.store.base import CrawlStore
from jlse.scheduler.store.pages import PageRepository
from jlse.scheduler.urls import canonicalize, host_of
from jlse.settings import Settings
from jlse.workers.charset import decode_html
from jlse.workers.engine import build_engine, task_of
from jlse.workers.parser import parse_html
from jlse.workers.pipeline import PageResult

log = logging.getLogger(__name__)

ROUND_WAIT = 2.0  # seconds a round waits for a host's turn; later URLs stay queued
MAX_PAGE_TEXT = 20_000  # characters of a page kept for ranking (the classifier's own cap)


@dataclass
class Page:
    """A page discovery fetched: what ranking and the operators need of it."""

    url: str
    host: str
    title: str = ""
    description: str = ""
    keywords: str = ""
    text: str = ""
    links: list[str] = field(default_factory=list)  # canonical out-links
    operator: str = ""  # the operator whose results it was
    round: int = 0
    relevance: float | None = None  # the topic model's P(relevant | page), as crawls store it

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Page:
        return cls(**{key: data[key] for key in cls.__dataclass_fields__ if key in data})


class RequestFrontier(LocalFrontier):
    """A frontier that queues what discovery pushes, and redirect targets; nothing else."""

    def add_discovered(self, tasks, created) -> None:  # noqa: ANN001 - the Frontier API
        moved = [(task, new) for task, new in zip(tasks, created, strict=True)
                 if task.redirect_hops > 0]
        super().add_discovered([task for task, _ in moved], [new for _, new in moved])


def parse_stored(url: str, body: bytes, settings: Settings) -> Page:
    """A ``Page`` from a fetched body (as the repository keeps it)."""
    text, _ = decode_html(body, None)
    parsed = parse_html(text, url, max_links=settings.max_links_per_page,
                        max_tags=settings.max_page_tags)
    return Page(url=url, host=host_of(url), title=parsed.title[:500],
                description=parsed.description[:1000], keywords=parsed.keywords[:500],
                text=parsed.text[:MAX_PAGE_TEXT],
                links=list(dict.fromkeys(link.url for link in parsed.links)))


class PageFetcher:
    """Fetches batches of URLs with the crawl engine; returns the pages that came back OK."""

    def __init__(self, settings: Settings, store: CrawlStore, workdir: Path,
                 progress: CrawlProgress | None = None, model: TopicModel | None = None) -> None:
        # robots_slots: a round asks for a few pages of many new hosts and waits ROUND_WAIT at
        # most; a host that finds every robots.txt slot busy is put off for seconds, longer
        # than a round waits, so a round gets the embedded crawl's many (they wait on threads
        # of their own, each bounded by robots_deadline)
        self.settings = replace(settings, page_processes=0, store_pages=True,
                                robots_slots=robots_slots(settings, embedded=True),
                                warc="also" if settings.warc == "only" else settings.warc)
        self.store = store
        self.frontier = RequestFrontier(
            self.settings.frontier_size, self.settings.domain_diversity,
            self.settings.priority_slack, delay=self.settings.politeness_delay,
            host_concurrency=self.settings.host_concurrency)
        ledger = LocalHostLedger(store.host_fetch_counts())
        strategy = make_strategy("bfs", self.settings)
        self.pages_dir = workdir / "pages"
        self.engine = build_engine(self.settings, store, self.frontier, ledger, strategy, model,
                                   self.pages_dir, robots_turn=True)
        self.engine.on_written = self._written
        self.repository = PageRepository(self.pages_dir)
        self.progress = progress
        self._fetched_ok: dict[str, float | None] = {}  # this batch's pages -> relevance
        self.interrupted = False

    def restore_counters(self) -> None:
        stats = self.store.stats()
        self.frontier.restore_counters({"fetched": stats.fetched})

    def fetched(self) -> int:
        return self.frontier.counter("fetched")

    def fetch(self, urls: Sequence[str], budget: int) -> list[Page]:
        """Fetch the URLs not fetched before (at most ``budget`` pages); the OK pages, parsed."""
        queued = self._queue(urls, budget)
        if not queued and len(self.frontier) == 0:  # URLs of earlier rounds may still wait
            return []
        self._fetched_ok = {}
        limit = replace(self.settings, max_pages=self.fetched() + budget)
        crawler = EmbeddedCrawler(limit, self.engine, self.progress)
        crawler.idle_return = ROUND_WAIT  # a host retried in a minute does not hold the round
        if crawler.run() == "interrupted":
            self.interrupted = True
        pages = [self.load(url, relevance) for url, relevance in self._fetched_ok.items()]
        return [page for page in pages if page is not None]

    def load(self, url: str, relevance: float | None = None) -> Page | None:
        """The stored page of ``url`` (None if the repository has none)."""
        body = self.repository.load(url)
        if body is None:
            return None
        page = parse_stored(url, body, self.settings)
        page.relevance = relevance
        return page

    def close(self) -> None:
        self.engine.close()

    def _queue(self, urls: Sequence[str], budget: int) -> int:
        """Register the URLs in the database; queue those never fetched nor refused."""
        canonical = list(dict.fromkeys(url for url in map(canonicalize, urls) if url))
        if not canonical:
            return 0
        links = [NewLink(url=url, parent_id=None, depth=0, priority=1.0) for url in canonical]
        with self.store.autocommit():
            ids = self.store.add_links(links)
        queued = 0
        for link, (url_id, _created) in zip(links, ids, strict=True):
            if queued >= budget:
                break
            stored = self.store.get_link(url_id)
            if stored is None or stored.status is not LinkStatus.QUEUED or link.url in self.frontier:
                continue
            if self.frontier.push(task_of(link, url_id)):
                queued += 1
        return queued

    def _written(self, result: PageResult, word: str) -> None:
        fetch = result.fetch
        if fetch is not None and fetch.outcome is Outcome.OK:
            self._fetched_ok[result.task.url] = fetch.relevance
