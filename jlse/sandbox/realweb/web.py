"""``RealWeb``: the real-text web as data (ground truth, robots rules) and as answers to
requests, with the interface of ``SandboxWeb`` that the server, ``jlse eval`` and the topic
directory writer use. ``build_real_web(seed, fraction)`` builds it.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, OrderedDict
from collections.abc import Iterator
from functools import cached_property
from pathlib import Path
from threading import Lock

from jlse.sandbox import response as r
from jlse.sandbox import search
from jlse.sandbox.realweb import topicdir
from jlse.sandbox.realweb.corpus import TOPICS, Doc, load_corpus
from jlse.sandbox.realweb.links import neighbours
from jlse.sandbox.realweb.plan import Page, RealPlan, SitePlan, plan_sites, stratified_slice
from jlse.sandbox.realweb.render import render_page
from jlse.sandbox.served import PageTruth, ServedWeb, SiteTruth, split_url

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/html; charset=utf-8"
CACHED_PAGES = 4096  # rendered pages kept (rendering is cheap; a full web is ~12,000 pages)
SHADOW_SEED_SALT = 1_000_003
LINK_PAGE_KINDS = ("home", "about", "category", "offer")  # topic "hub"


class RealWeb(ServedWeb):
    """The real-text web: 20 Newsgroups posts on ~25 ``*.real`` sites."""

    web_name = "real"  # ``--web`` of ``jlse sandbox serve`` and ``jlse eval``
    document_kinds: tuple[str, ...] = ("article",)  # pages on their document's topic
    section_kind = "section"  # pages on their section's topic (every other page is a hub)

    def __init__(self, plan: RealPlan, test_docs: list[Doc] | None = None) -> None:
        self.plan = plan
        self.seed = plan.seed
        self.fraction = plan.fraction
        self.topics: list[str] = list(TOPICS)
        self.distractor_topics: list[str] = []
        self.sites: list[str] = [site.host for site in plan.sites]
        self.discovery = False
        self.search_engine = search.SearchEngine(self.search_pages)
        self._test_docs = test_docs or []
        self._cache: OrderedDict[str, bytes] = OrderedDict()
        self._lock = Lock()
        # how topic directories draw their 20 irrelevant samples: "random" from the other
        # topics' pages (some topic may have none), or "stratified" (as many from each)
        self.negatives = "random"

    # --- ground truth ---
    def _find(self, url: str) -> tuple[SitePlan, Page] | None:
        host, path = split_url(url)
        site = self.plan.by_host.get(host)
        page = None if site is None else site.pages.get(path)
        return None if page is None else (site, page)

    def _truth_of(self, site: SitePlan, page: Page) -> PageTruth:
        if page.kind in self.document_kinds:
            topic = self.plan.docs[page.key].topic
        elif page.kind == self.section_kind:
            topic = site.sections[page.key].topic
        else:
            topic = "hub"
        return PageTruth(url=site.url(page.path), site=site.host, topic=topic,
                         is_target=page.kind == "article", lang="en",
                         crawlable=not site.disallowed(page.path))

    def is_trap(self, url: str) -> bool:
        return False  # the real web has no spider traps

    @cached_property
    def _site_truth(self) -> dict[str, SiteTruth]:
        truths = {}
        for site in self.plan.sites:
            counts = Counter(self._truth_of(site, page).topic for page in site.pages.values())
            topic, count = max(counts.items(), key=lambda pair: (pair[1], pair[0]))
            truths[site.host] = SiteTruth(site.host, topic, count / len(site.pages),
                                          len(site.pages), "en")
        return truths

    def _site_robots(self, site: SitePlan) -> str | None:
        lines = ["User-agent: *"]
        if site.site.crawl_delay:
            lines.append(f"Crawl-delay: {site.site.crawl_delay}")
        lines += [f"Disallow: {path}" for path in site.site.disallow] or ["Disallow:"]
        return "\n".join(lines) + "\n"

    # --- topic directories ---
    @cached_property
    def shadow(self) -> RealWeb:
        """The web built the same way from the test split: where sample pages come from."""
        return _build(self._test_docs, self.seed * 7919 + SHADOW_SEED_SALT, self.fraction)

    def write_topic_dir(self, topic: str, out_dir: str | Path, n_samples: int = 20,
                        keywords_only: bool = False) -> Path:
        """Write a topic directory (seeds, topic.toml, samples) for ``topic``; with
        ``keywords_only`` seeds and topic.toml only (no samples/)."""
        return topicdir.write_topic_dir(self, lambda: self.shadow, topic, Path(out_dir),
                                        n_samples, keywords_only, self.negatives)

    # --- rendering and serving ---
    def render(self, site: SitePlan, page: Page) -> str:
        """The HTML text of a page."""
        return render_page(self.plan, site, page)

    def page_bytes(self, url: str) -> bytes | None:
        """The bytes served for an HTML page of the web (recent ones cached)."""
        found = self._find(url)
        if found is None:
            return None
        site, page = found
        key = site.url(page.path)
        with self._lock:
            body = self._cache.get(key)
            if body is not None:
                self._cache.move_to_end(key)
                return body
        body = self.render(site, page).encode("utf-8")
        with self._lock:
            self._cache[key] = body
            while len(self._cache) > CACHED_PAGES:
                self._cache.popitem(last=False)
        return body

    def search_pages(self) -> Iterator[tuple[str, str]]:
        """(URL, HTML) of every page robots.txt lets the ``*`` user agent fetch."""
        for site in self.plan.sites:
            for page in site.pages.values():
                if not site.disallowed(page.path):
                    yield site.url(page.path), self.render(site, page)

    def respond(self, host: str, path_qs: str, state: r.ServerState) -> r.Response | None:
        """The answer to ``GET http://host/path_qs``; None when the host does not exist."""
        host = host.lower()
        path, _, query = path_qs.partition("?")
        service, answer = self.service_response(host, path, query, state)
        if service:
            return answer
        if host not in self.plan.by_host:
            return None
        if path == "/robots.txt":
            return r.plain(200, self.robots_rules(host) or "")
        body = self.page_bytes(f"http://{host}{path_qs}")
        return r.not_found() if body is None else r.Response(200, body, CONTENT_TYPE)


def _build(docs: list[Doc], seed: int, fraction: float, test_docs: list[Doc] | None = None,
           ) -> RealWeb:
    kept = stratified_slice(docs, fraction, seed)
    by_id = {doc.id: doc for doc in kept}
    sites = plan_sites(kept, seed)
    return RealWeb(RealPlan(seed, fraction, sites, by_id, neighbours(sites, by_id)), test_docs)


def build_real_web(seed: int = 7, fraction: float = 1.0) -> RealWeb:
    """The real-text web for ``(seed, fraction)``: same arguments, same web, byte for byte.

    ``fraction`` < 1 keeps a stratified slice of every newsgroup (tests use 0.05-0.1). The
    first use downloads and caches the corpus (``make corpus``; see ``corpus``)."""
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    started = time.monotonic()
    docs = load_corpus()
    train = [doc for doc in docs if doc.split == "train"]
    test = [doc for doc in docs if doc.split == "test"]
    web = _build(train, seed, fraction, test)
    log.debug("real web: %d sites, %d pages (seed=%s, fraction=%s) in %.1f s", len(web.sites),
              web.n_pages, seed, fraction, time.monotonic() - started)
    return web
