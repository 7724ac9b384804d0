"""``SandboxWeb``: the sandbox web as data (ground truth, robots rules) and as answers to
requests (``respond``), rendering each page once on first use.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator
from functools import cached_property
from pathlib import Path
from urllib.parse import parse_qsl, urlencode

from jlse.sandbox import extras, search, topicdir
from jlse.sandbox import response as r
from jlse.sandbox.generator import PageSpec, SitePlan, WebPlan, plan_web
from jlse.sandbox.layout import UTF8_META, content_type, declared_meta, encode
from jlse.sandbox.longtail import plan_discovery_web
from jlse.sandbox.render_hub import render_hub_page
from jlse.sandbox.render_site import render_site_page
from jlse.sandbox.served import PageTruth, ServedWeb, SiteTruth, split_url
from jlse.sandbox.vocab import CRAWL_TOPICS, DISTRACTOR_TOPICS

log = logging.getLogger(__name__)

__all__ = ["PageTruth", "SandboxWeb", "SiteTruth", "build_web", "split_url"]

UNCRAWLABLE_KINDS = ("admin", "print")  # disallowed by every robots.txt (a 404 allows all)


class SandboxWeb(ServedWeb):
    """The sandbox web: sites, pages, ground truth, and the answer to any request."""

    def __init__(self, plan: WebPlan) -> None:
        self.plan = plan
        self.seed = plan.seed
        self.scale = plan.scale
        self.topics: list[str] = list(CRAWL_TOPICS)
        self.distractor_topics: list[str] = list(DISTRACTOR_TOPICS)
        self.sites: list[str] = [site.host for site in plan.sites]
        self.discovery = any(site.spec.longtail for site in plan.sites)
        self.search_engine = search.SearchEngine(self.search_pages)
        self._cache: dict[str, bytes] = {}

    # --- ground truth ---
    def _find(self, url: str) -> tuple[SitePlan, PageSpec] | None:
        host, path = split_url(url)
        site = self.plan.by_host.get(host)
        if site is None:
            return None
        page = site.pages.get(path)
        if page is None and "?" in path:  # tolerate reordered query arguments
            base, _, query = path.partition("?")
            page = site.pages.get(f"{base}?{urlencode(sorted(parse_qsl(query)))}")
        return None if page is None else (site, page)

    @staticmethod
    def _truth_of(site: SitePlan, page: PageSpec) -> PageTruth:
        return PageTruth(
            url=site.url(page.path),
            site=site.host,
            topic=site.page_topic(page),
            is_target=page.is_target,
            lang=site.language.lang,
            crawlable=site.spec.crawlable and (
                page.kind not in UNCRAWLABLE_KINDS or site.spec.robots == "404"),
        )

    @cached_property
    def _site_truth(self) -> dict[str, SiteTruth]:
        truths = {}
        for site in self.plan.sites:
            counts = Counter(map(site.page_topic, site.pages.values()))
            topic, count = max(counts.items(),  # a tie goes to the site's own topic
                               key=lambda pair, own=site.spec.topic: (pair[1], pair[0] == own))
            truths[site.host] = SiteTruth(site.host, topic, count / len(site.pages),
                                          len(site.pages), site.language.lang, site.spec.longtail)
        return truths

    def is_trap(self, url: str) -> bool:
        host, path = split_url(url)
        return host in self.plan.by_host and extras.is_trap_path(path)

    def _site_robots(self, site: SitePlan) -> str | None:
        """None when its robots.txt answers 404/500/nothing."""
        return extras.robots_text(site.spec)

    def write_topic_dir(self, topic: str, out_dir: str | Path, n_samples: int = 20,
                        keywords_only: bool = False) -> Path:
        """Write a topic directory (seeds, topic.toml, samples) for ``topic``; with
        ``keywords_only`` seeds and topic.toml only (no samples/)."""
        return topicdir.write_topic_dir(self, build_web, topic, Path(out_dir), n_samples,
                                        keywords_only)

    # --- rendering and serving ---
    def render_html(self, site: SitePlan, page: PageSpec, head_meta: str) -> str:
        """The HTML text of a page with the given charset declaration in its head."""
        if site.spec.kind == "hub":
            return render_hub_page(self.plan, site, page, head_meta)
        return render_site_page(self.plan, site, page, head_meta)

    def page_bytes(self, url: str) -> bytes | None:
        """The bytes served for an HTML page of the web (rendered once, then cached)."""
        found = self._find(url)
        if found is None:
            return None
        site, page = found
        key = site.url(page.path)
        body = self._cache.get(key)
        if body is None:
            body = encode(site.spec, self.render_html(site, page, declared_meta(site.spec)))
            self._cache[key] = body
        return body

    def search_pages(self) -> Iterator[tuple[str, str]]:
        """(URL, HTML) of every page a search engine indexes: the pages robots.txt lets the
        ``*`` user agent fetch (so jlse-blocked sites are in, robots-500 sites are out)."""
        for site in self.plan.sites:
            if site.spec.robots == "500":
                continue
            for page in site.pages.values():
                if site.spec.robots == "404" or page.kind not in UNCRAWLABLE_KINDS:
                    yield site.url(page.path), self.render_html(site, page, UTF8_META)

    def respond(self, host: str, path_qs: str, state: r.ServerState) -> r.Response | None:
        """The answer to ``GET http://host/path_qs``; None when the host does not exist."""
        host = host.lower()
        path, _, query = path_qs.partition("?")
        service, answer = self.service_response(host, path, query, state)
        if service:
            return answer
        site = self.plan.by_host.get(host)
        if site is None:
            return None
        body = self.page_bytes(f"http://{host}{path_qs}")
        if body is not None:
            return r.Response(200, body, content_type(site.spec))
        return extras.special_route(self.plan, site, path, path_qs) or r.not_found()


def build_web(seed: int = 7, scale: float = 1.0, discovery: bool = False) -> SandboxWeb:
    """The sandbox web for ``(seed, scale)``: same arguments, same web, byte for byte.

    ``discovery`` adds the long tail (``longtail``): ~170 small sites that the seeds barely
    link to, for domain discovery; without it the web is the default one, unchanged."""
    web = SandboxWeb(plan_discovery_web(seed, scale) if discovery else plan_web(seed, scale))
    log.debug("sandbox web: %d sites, %d pages (seed=%s, scale=%s)",
              len(web.sites), web.n_pages, seed, scale)
    return web
