"""``SandboxWeb``: the sandbox web as data (ground truth, robots rules) and as answers to
requests (``respond``), rendering each page once on first use.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit

from jlse.sandbox import extras, faults, hostile, search, sitemaps, stalls, topicdir
from jlse.sandbox import response as r
from jlse.sandbox.generator import PageSpec, SitePlan, WebPlan, plan_web
from jlse.sandbox.layout import UTF8_META, content_type, declared_meta, encode
from jlse.sandbox.longtail import plan_discovery_web
from jlse.sandbox.render_hub import render_hub_page
from jlse.sandbox.render_site import render_site_page
from jlse.sandbox.vocab import CRAWL_TOPICS, DISTRACTOR_TOPICS

log = logging.getLogger(__name__)

UNCRAWLABLE_KINDS = ("admin", "print")  # disallowed by every robots.txt (a 404 allows all)


@dataclass(frozen=True)
class PageTruth:
    """What a page really is, independent of any classifier.

    ``topic`` is a crawl topic, a distractor topic or "hub"; ``is_target`` marks detail pages
    (products, reviews, recipes, articles...); ``crawlable`` is False when robots.txt keeps the
    ``jlse`` user agent away (admin and print pages, the robots-500 and jlse-blocked sites).
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


class SandboxWeb:
    """The sandbox web: sites, pages, ground truth, and the answer to any request."""

    def __init__(self, plan: WebPlan) -> None:
        self.plan = plan
        self.seed = plan.seed
        self.scale = plan.scale
        self.topics: list[str] = list(CRAWL_TOPICS)
        self.distractor_topics: list[str] = list(DISTRACTOR_TOPICS)
        self.sites: list[str] = [site.host for site in plan.sites]
        self.fault_hosts: list[str] = [faults.FAULT_HOST, *faults.ROBOTS_HOSTS]
        self.discovery = any(site.spec.longtail for site in plan.sites)
        self.search_engine = search.SearchEngine(self.search_pages)
        self._cache: dict[str, bytes] = {}

    # --- ground truth ---
    @property
    def n_pages(self) -> int:
        return sum(len(site.pages) for site in self.plan.sites)

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

    def truth(self, url: str) -> PageTruth | None:
        """The truth of an HTML page of the web; None for traps, faults and unknown URLs."""
        found = self._find(url)
        return None if found is None else self._truth_of(*found)

    def iter_truth(self) -> Iterator[PageTruth]:
        for site in self.plan.sites:
            for page in site.pages.values():
                yield self._truth_of(site, page)

    def is_relevant(self, url: str, topic: str) -> bool:
        found = self.truth(url)
        return found is not None and found.topic == topic

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

    def site_truth(self) -> dict[str, SiteTruth]:
        """Every site's truth, by host (hubs have the topic "hub")."""
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

    def is_trap(self, url: str) -> bool:
        host, path = split_url(url)
        return host in self.plan.by_host and extras.is_trap_path(path)

    def write_truth(self, path: str | Path) -> Path:
        """JSON lines: url, site, topic, target, lang, crawlable."""
        out = Path(path)
        with out.open("w", encoding="utf-8") as handle:
            for truth in self.iter_truth():
                row = asdict(truth)
                row["target"] = row.pop("is_target")
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
        return out

    def robots_rules(self, host: str) -> str | None:
        """The robots.txt text that applies to ``host``; None when it answers 404/500/nothing."""
        host = host.lower()
        if host in self.fault_hosts:
            return faults.fault_robots_rules(host)
        if stalls.serves(host):
            return stalls.robots_rules(host)
        if sitemaps.serves(host):
            return sitemaps.robots_rules(host)
        site = self.plan.by_host.get(host)
        return None if site is None else extras.robots_text(site.spec)

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
        if search.serves(host):
            return self.search_engine.respond(path, query, state)
        if host == faults.FAULT_HOST:
            return faults.fault_response(path, query, state)
        if host in faults.ROBOTS_HOSTS:
            return faults.robots_host_response(host, path)
        if stalls.serves(host):
            return stalls.respond(host, path, query, state)
        if sitemaps.serves(host):
            return sitemaps.respond(path)
        if hostile.serves(host):
            return hostile.respond(host, path, query, state)
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
