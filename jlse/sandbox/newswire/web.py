"""``NewswireWeb``: the newswire web as data (ground truth, robots rules) and as answers to
requests, with the interface of ``RealWeb`` (whose serving, caching and site truth it keeps).
``build_newswire_web(seed, fraction)`` builds it.
"""

from __future__ import annotations

import logging
import re
import time
from functools import cached_property
from pathlib import Path

from jlse.sandbox import response as r
from jlse.sandbox.newswire import topicdir
from jlse.sandbox.newswire.corpus import CORPORATE, CRAWL_TOPICS, Story, load_corpus
from jlse.sandbox.newswire.links import neighbours, partner_blocks
from jlse.sandbox.newswire.plan import (
    SLOW_HOST,
    SLOW_PATH,
    SLOW_SECONDS,
    Page,
    SitePlan,
    WirePlan,
    plan_sites,
)
from jlse.sandbox.newswire.render import render_page
from jlse.sandbox.realweb import topicdir as real_topicdir
from jlse.sandbox.realweb.plan import stratified_slice
from jlse.sandbox.realweb.web import SHADOW_SEED_SALT, RealWeb

log = logging.getLogger(__name__)

SHORT_LINK = re.compile(r"/s/(\d+)")


class NewswireWeb(RealWeb):
    """The newswire web: Reuters-21578 stories on 96 ``*.wire`` sites."""

    web_name = "newswire"
    document_kinds = ("article", "print")
    section_kind = "category"

    def __init__(self, plan: WirePlan, test_docs: list[Story] | None = None) -> None:
        super().__init__(plan, test_docs)
        self.topics = list(CRAWL_TOPICS)
        self.distractor_topics = list(CORPORATE)

    @cached_property
    def shadow(self) -> NewswireWeb:
        """The web built the same way from the test split (without print pages): where sample
        pages come from."""
        return _build(self._test_docs, self.seed * 7919 + SHADOW_SEED_SALT, self.fraction,
                      prints=False)

    def write_topic_dir(self, topic: str, out_dir: str | Path, n_samples: int = 20,
                        keywords_only: bool = False) -> Path:
        """Write a topic directory (seeds, topic.toml, samples) for ``topic``; with
        ``keywords_only`` seeds and topic.toml only (no samples/)."""
        return real_topicdir.write_topic_dir(self, lambda: self.shadow, topic, Path(out_dir),
                                             n_samples, keywords_only, self.negatives,
                                             topicdir.RULES)

    def render(self, site: SitePlan, page: Page) -> str:
        """The HTML text of a page."""
        return render_page(self.plan, site, page)

    def respond(self, host: str, path_qs: str, state: r.ServerState) -> r.Response | None:
        """As ``RealWeb.respond``, plus the ``/s/ID`` short links (301 to the story, wherever
        it is) and the slow live page."""
        host = host.lower()
        short = SHORT_LINK.fullmatch(path_qs)
        if short and host in self.plan.by_host and int(short[1]) in self.plan.host_of:
            doc_id = int(short[1])  # to this site's copy, else to the original
            carried = doc_id in self.plan.by_host[host].section_of
            return r.redirect(301, self.plan.copy_url(host, doc_id) if carried
                              else self.plan.article_url(doc_id))
        answer = super().respond(host, path_qs, state)
        if host == SLOW_HOST and path_qs == SLOW_PATH and answer is not None:
            answer.delay = SLOW_SECONDS
        return answer


def _build(docs: list[Story], seed: int, fraction: float,
           test_docs: list[Story] | None = None, prints: bool = True) -> NewswireWeb:
    kept = stratified_slice(docs, fraction, seed)
    by_id = {doc.id: doc for doc in kept}
    sites = plan_sites(kept, seed, fraction, prints)
    plan = WirePlan(seed, fraction, sites, by_id, neighbours(sites, by_id),
                    partner_blocks([site.site for site in sites]))
    return NewswireWeb(plan, test_docs)


def build_newswire_web(seed: int = 7, fraction: float = 1.0) -> NewswireWeb:
    """The newswire web for ``(seed, fraction)``: same arguments, same web, byte for byte.

    ``fraction`` < 1 keeps a stratified slice of every R52 label (tests use 0.1-0.2). The
    first use downloads and caches the corpus (``make corpus``; see ``corpus``)."""
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    started = time.monotonic()
    docs = load_corpus()
    train = [doc for doc in docs if doc.split == "train"]
    test = [doc for doc in docs if doc.split == "test"]
    web = _build(train, seed, fraction, test)
    log.debug("newswire web: %d sites, %d pages (seed=%s, fraction=%s) in %.1f s",
              len(web.sites), web.n_pages, seed, fraction, time.monotonic() - started)
    return web
