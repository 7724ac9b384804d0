"""The per-page pipeline: robots.txt -> fetch -> parse -> classify -> score out-links.

One ``PagePipeline.process(task)`` call handles one URL and returns a ``PageResult`` that says
what to write (history row, new links). It never touches the crawl database or the frontier, so
the embedded crawl runs it in a thread pool and the distributed mode in a Celery task. It never
raises: anything unexpected becomes ``Outcome.ERROR`` with the reason logged.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from jlse.models.self_training import SelfTrainedRelevance
from jlse.models.strategies import Strategy
from jlse.models.topic_model import TopicModel
from jlse.records import CrawlTask, FetchRecord, Link, NewLink, Outcome
from jlse.scheduler.robots import RobotsCache
from jlse.scheduler.store.pages import PageRepository
from jlse.scheduler.urls import canonicalize
from jlse.settings import Settings
from jlse.workers.charset import decode_html
from jlse.workers.fetcher import Fetcher, FetchResult, is_retryable, retry_wait
from jlse.workers.parser import ParsedPage, parse_html
from jlse.workers.section_links import is_next_page
from jlse.workers.sitemaps import SitemapSource

log = logging.getLogger(__name__)

MAX_CLASSIFIER_CHARS = 20_000
PARSES_AT_ONCE = 2  # per process (a pipeline is forked into each page process)


def page_text(page: ParsedPage) -> str:
    """The text the page classifier sees: title, meta and visible text."""
    parts = (page.title, page.description, page.keywords, page.text)
    return " ".join(part for part in parts if part)[:MAX_CLASSIFIER_CHARS]


def _reused_page(url: str, body: bytes) -> FetchResult:
    """A page from the repository, as if fetched (no bytes on the wire)."""
    text, codec = decode_html(body, None)
    return FetchResult(url=url, outcome=Outcome.OK, status_code=200, content_type="text/html",
                       body=body, text=text, encoding=codec)


@dataclass
class PageResult:
    """What one pipeline run produced; the writer turns it into database rows."""

    task: CrawlTask
    fetch: FetchRecord | None = None  # a page request was made (counts against the budget)
    rejected: tuple[Outcome, str] | None = None  # refused before any page request
    requeue_after: float | None = None  # robots.txt unavailable: try the host again later
    retry_in: float | None = None  # the request failed (5xx, network): retry after this wait
    postpone: float | None = None  # not fetched yet (robots.txt pending or just fetched)
    # the host's robots.txt rules were at hand (True), are still awaited (False: pending or
    # unavailable), or were not consulted (None); the embedded runner counts a host's pages
    # in flight against the budget only once its robots.txt is at hand
    robots_ready: bool | None = None
    crawl_delay: float | None = None
    links: list[NewLink] = field(default_factory=list)
    cpu: dict[str, float] = field(default_factory=dict)  # CPU seconds per stage
    notes: dict[str, int] = field(default_factory=dict)  # counter deltas (parser's cuts)
    # the page is a detail page by its structure (the topic's target model), relevant or not;
    # None without a model: the site bandit learns a site's harvest from its detail pages
    detail: bool | None = None

    def to_json(self) -> bytes:
        """JSON for another process (a page process to the crawl's writer): no pickle."""
        return json.dumps({
            "task": self.task.to_dict(),
            "fetch": None if self.fetch is None else self.fetch.to_dict(),
            "rejected": None if self.rejected is None else [self.rejected[0].value,
                                                             self.rejected[1]],
            "requeue_after": self.requeue_after, "crawl_delay": self.crawl_delay,
            "retry_in": self.retry_in, "postpone": self.postpone,
            "robots_ready": self.robots_ready,
            "links": [[link.url, link.parent_id, link.depth, link.anchor_text, link.context,
                       link.priority, link.pattern_run, link.redirect_hops, link.site_group]
                      for link in self.links],
            "cpu": self.cpu, "notes": self.notes, "detail": self.detail,
        }, ensure_ascii=False, allow_nan=True).encode("utf-8", "surrogatepass")

    @classmethod
    def from_json(cls, raw: bytes) -> PageResult:
        data = json.loads(raw.decode("utf-8", "surrogatepass"))
        rejected = data["rejected"]
        return cls(
            task=CrawlTask.from_dict(data["task"]),
            fetch=None if data["fetch"] is None else FetchRecord.from_dict(data["fetch"]),
            rejected=None if rejected is None else (Outcome(rejected[0]), rejected[1]),
            requeue_after=data["requeue_after"], crawl_delay=data["crawl_delay"],
            retry_in=data["retry_in"], postpone=data["postpone"],
            robots_ready=data["robots_ready"],
            links=[NewLink(*fields) for fields in data["links"]],
            cpu=data["cpu"], notes=data.get("notes") or {}, detail=data.get("detail"),
        )


class _Stopwatch:
    """CPU time per stage of one page, measured on the worker thread."""

    def __init__(self) -> None:
        self.cpu: dict[str, float] = {}
        self._last = time.thread_time()

    def lap(self, stage: str) -> None:
        now = time.thread_time()
        self.cpu[stage] = self.cpu.get(stage, 0.0) + now - self._last
        self._last = now


class PagePipeline:
    def __init__(
        self,
        settings: Settings,
        fetcher: Fetcher,
        robots: RobotsCache | None,
        strategy: Strategy,
        model: TopicModel | None,
        child_pattern_run: Callable[[str, int, str], int],
        pages: PageRepository | None = None,
        robots_turn: bool = False,
        judge: Callable[[str], float] | None = None,
    ) -> None:
        self.settings = settings
        # URL -> relevance in place of the classifier's (jlse eval's ground-truth ablation)
        self.judge = judge
        # a task that fetches its host's robots.txt ends there, its page going back to the
        # frontier (the embedded runner; see jlse.embedded.RobotsKnownHosts), or goes on to
        # the page when the host's delay allows (a distributed worker: the next task of the
        # host may go to another worker, which would fetch robots.txt again)
        self.robots_turn = robots_turn
        self.fetcher = fetcher
        self.robots = robots
        self.strategy = strategy
        self.model = model
        self.self_training = SelfTrainedRelevance.of(model) if settings.self_training else None
        if self.self_training is not None and settings.link_text_model == "crawl":
            strategy.learn_link_text(self.self_training.link_text_relevance)
        self.child_pattern_run = child_pattern_run
        self.pages = pages
        self.sitemaps: SitemapSource | None = None  # set by build_engine when sitemaps is on
        # A tree and its walk take ~40 MB for a page at the tag cap, and threads that parse
        # at once under the GIL all hold theirs to the end: 16 such pages in one page process
        # peaked at 660 MB. More parses at once than this gain no speed.
        self._parsing = threading.BoundedSemaphore(PARSES_AT_ONCE)

    def process(self, task: CrawlTask) -> PageResult:
        watch = _Stopwatch()
        try:
            result = self._process(task, watch)
        except Exception as exc:  # a bug or a pathological page must not stop the crawl
            log.exception("unexpected error on %s", task.url)
            record = FetchRecord(task.url_id, task.url, Outcome.ERROR, fetched_at=time.time(),
                                 error=f"{type(exc).__name__}: {exc}"[:500])
            result = PageResult(task, fetch=record)
        result.cpu = watch.cpu
        return result

    def _process(self, task: CrawlTask, watch: _Stopwatch) -> PageResult:
        result = PageResult(task, robots_ready=True if self.robots is None else None)
        if self.robots is not None and not self._robots_allow(task, result):
            return result
        if self.sitemaps is not None and self._sitemap_turn(task, result):
            return result
        started = time.time()
        fetched = self._fetch(task.url)
        watch.lap("fetch")
        if is_retryable(fetched) and task.attempt < self.settings.max_retries:
            result.retry_in = retry_wait(self.settings, fetched, task.attempt)
            log.info("%s: %s; retry %d in %.1f s or more", task.url, fetched.error,
                     task.attempt + 1, result.retry_in)
            return result
        record = FetchRecord(
            url_id=task.url_id, url=task.url, outcome=fetched.outcome, fetched_at=started,
            status_code=fetched.status_code, content_type=fetched.content_type,
            n_bytes=fetched.n_bytes, elapsed=fetched.elapsed, error=fetched.error,
        )
        if fetched.warc is not None:
            record.warc_file, record.warc_offset, record.warc_length = fetched.warc
        result.fetch = record
        if fetched.outcome is Outcome.REDIRECT:
            self._follow_redirect(task, fetched, result)
        elif fetched.outcome is Outcome.OK and fetched.text is not None:
            fetched.body = b""  # kept already (repository, WARC): not held while pages wait
            self._handle_page(task, fetched.text, result, watch)
        return result

    def _robots_allow(self, task: CrawlTask, result: PageResult) -> bool:
        verdict = self.robots.check(task.url)
        if verdict.sitemaps and self.sitemaps is not None:
            self.sitemaps.found(task.url, verdict.sitemaps)
        result.crawl_delay = verdict.crawl_delay
        result.robots_ready = not (verdict.pending or verdict.unavailable)
        if verdict.pending:  # every robots.txt slot is busy: the URL waits in the frontier
            result.postpone = verdict.retry_after or self.settings.robots_deadline
            return False
        if verdict.unavailable:
            result.requeue_after = verdict.retry_after or self.settings.robots_retry_after
            return False
        if not verdict.allowed:
            result.rejected = (Outcome.ROBOTS_DISALLOWED, "disallowed by robots.txt")
            return False
        delay = max(self.settings.politeness_delay, verdict.crawl_delay or 0.0)
        if verdict.fetched and (delay > 0 or self.robots_turn):  # robots.txt was just
            result.postpone = delay  # requested: the page waits the host's delay in the frontier
            return False
        return True

    def _sitemap_turn(self, task: CrawlTask, result: PageResult) -> bool:
        """Read one of the host's sitemap files in the page's place; the page waits in the
        frontier for the host's delay, like after any request."""
        turn = self.sitemaps.take_turn(task)
        if turn is None:
            return False
        result.links, _ = turn
        result.postpone = self.settings.politeness_delay
        return True

    def _fetch(self, url: str) -> FetchResult:
        """Fetch ``url``, or reuse its page from the repository (docs/algorithms.md §2.2)."""
        if self.pages is not None:
            body = self.pages.load(url)
            if body is not None:
                return _reused_page(url, body)
        fetched = self.fetcher.fetch(url)
        if self.pages is not None and fetched.outcome is Outcome.OK and fetched.body:
            try:
                self.pages.save(url, fetched.body)
            except OSError as exc:
                log.warning("page repository: cannot save %s: %s", url, exc)
        return fetched

    def _follow_redirect(self, task: CrawlTask, fetched: FetchResult, result: PageResult) -> None:
        """A redirect target goes back to the frontier so every hop is re-checked."""
        hops = task.redirect_hops + 1
        target = canonicalize(fetched.redirect_to or "")
        record = result.fetch
        record.final_url = target or (fetched.redirect_to or "")
        if hops > self.settings.max_redirects:
            record.outcome = Outcome.TOO_MANY_REDIRECTS
            record.error = f"more than {self.settings.max_redirects} redirects"
            return
        if target is None:
            record.error = f"redirect to an invalid URL: {fetched.redirect_to!r}"
            return
        result.links.append(NewLink(
            url=target, parent_id=task.url_id, depth=task.depth, anchor_text=task.anchor_text,
            context=task.context, priority=task.priority, pattern_run=task.pattern_run,
            redirect_hops=hops,
        ))

    def _handle_page(self, task: CrawlTask, html: str, result: PageResult,
                     watch: _Stopwatch) -> None:
        with self._parsing:
            page = parse_html(html, task.url, context_distance=self.settings.context_distance,
                              max_links=self.settings.max_links_per_page,
                              max_tags=self.settings.max_page_tags)
        result.notes = page.notes
        watch.lap("parse")
        record = result.fetch
        record.title = page.title[:500]
        relevance = None
        text = page_text(page)
        if self.model is not None:
            relevance = (self.self_training.relevance(text) if self.self_training is not None
                         else float(self.model.relevance_page(text, page.blocks)))
            if self.judge is not None:  # an ablation (jlse eval's "+truth" strategies)
                relevance = self.judge(task.url)
            # a target (result) is a relevant detail page
            result.detail = bool(self.model.is_target(page.stats))
            record.is_target = result.detail and relevance >= self.settings.relevance_threshold
        record.relevance = relevance
        if task.anchor_text:
            self.strategy.observe_followed_link(task.anchor_text, relevance)
        self.strategy.observe_page(task.url, text, relevance, [link.url for link in page.links])
        if self.strategy.should_expand(relevance, record.is_target):
            floor = self.strategy.section_link_floor(relevance)  # see workers/section_links.py
            result.links = self._score_links(task, page.links, relevance, text, floor)
        watch.lap("classify")

    def _score_links(self, task: CrawlTask, page_links: list[Link], relevance: float | None,
                     text: str, floor: float | None = None) -> list[NewLink]:
        """The links as the strategy scores them; a listing's next pages at least ``floor``."""
        links = [link for link in page_links if link.url != task.url]
        if not links:
            return []
        priorities, site_groups = self.strategy.score_links_and_sites(
            relevance, task.depth,
            [link.anchor_text for link in links],
            [link.url for link in links],
            [link.context for link in links],
            parent_priority=task.priority,
            page_text=text,
            page_url=task.url,
        )
        if site_groups is None:
            site_groups = [0] * len(links)
        return [
            NewLink(
                url=link.url, parent_id=task.url_id, depth=task.depth + 1,
                anchor_text=link.anchor_text, context=link.context,
                priority=float(priority) if floor is None or not is_next_page(task.url, link)
                else max(float(priority), floor),
                pattern_run=self.child_pattern_run(task.url, task.pattern_run, link.url),
                site_group=int(group),
            )
            for link, priority, group in zip(links, priorities, site_groups, strict=True)
        ]
