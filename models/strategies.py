"""Crawl strategies: how a fetched page's out-links are prioritised.

A strategy is a small, pure component the pipeline calls once per page. It sees the page's
relevance and its out-links' link triples (anchor, URL, context) and returns one priority per
link; it also says whether a page is expanded at all (hard focus). Strategies are picked by name
with ``jlse.models.strategy_catalog.make_strategy`` (``--strategy``) and all run through the same pipeline. They hold no
mutable state, so one instance serves every worker thread; the exception is ``cfc``, whose page
log and layer model are thread-safe (a lock, an atomic swap).

| name           | link priority                                              | focus |
|----------------|------------------------------------------------------------|-------|
| ``bfs``        | 1 (discovery order)                                        | none  |
| ``best-first`` | P(relevant \\| page)                                        | soft  |
| ``ata``        | formula (10) with sim = anchor similarity                  | hard  |
| ``jlse``       | (P(relevant \\| page) or tunnel) · max(anchor, Q-learned) | soft  |
| ``jlse-paper`` | formula (10) with sim = max(anchor, Q-learned) (§1.10)    | hard  |
| ``jlse-product`` | P(relevant \\| page) · sim                                | hard  |
| ``opic``       | the page's cash split by anchor relevance (``models.opic``) | none  |
| ``bayes``      | KDE-NB P(relevant \\| anchor + context) (§2.7)            | hard  |
| ``vsm``        | page relevance × (0.5 + 0.5 · cos(keywords, anchor + context)) | hard |
| ``cfc``        | the page's context layer (``models.context_graph``)        | soft  |
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

from jlse.models.known_titles import KnownTitles
from jlse.models.link_outcomes import LinkOutcomes
from jlse.models.link_tokens import anchor_tokens, link_texts, text_tokens
from jlse.models.redirect_waste import RedirectWaste
from jlse.models.shape_harvest import ShapeHarvest
from jlse.models.site_harvest import (
    OFF_SITE,
    PROSPECT,
    TUNNEL_OFF_SITE,
    SiteHarvest,
    is_home,
    site_of,
)
from jlse.models.tokenizer import tokenize
from jlse.models.url_shapes import url_shapes
from jlse.records import NewLink

SimilarityFn = Callable[[Sequence[str]], np.ndarray]
# (anchors, contexts) of a page's links -> P(relevant | anchor + context) of each
LinkTextFn = Callable[[Sequence[str], Sequence[str]], np.ndarray]

VSM_LINK_TEXT_SHARE = 0.5  # vsm: priority = relevance * (1 - share + share * cosine)


class Strategy(ABC):
    name: str = ""
    focused: bool = True  # hard focus: irrelevant pages are not expanded
    # What the crawl must run beside the strategy: None, "qtable" (the learner builds Q-tables
    # from the crawl database and publishes them: embedded thread or Celery task) or "pages"
    # (it learns from the pages it sees, in the crawl process).
    learns: ClassVar[str | None] = None
    embedded_only: ClassVar[bool] = False  # cannot run on a cluster (state in one process)

    def __init__(self, relevance_threshold: float = 0.5, expand_targets: bool = False,
                 hard_focus: bool = True) -> None:
        self.relevance_threshold = relevance_threshold
        self.expand_targets = expand_targets
        self.hard_focus = hard_focus

    def seed_priority(self) -> float:
        return 1.0

    def should_expand(self, relevance: float | None, is_target: bool) -> bool:
        """Whether the out-links of a page are followed at all."""
        if not self.focused:
            return True
        if is_target and not self.expand_targets:
            return False
        if not self.hard_focus:
            return True
        return relevance is None or relevance >= self.relevance_threshold

    def section_link_floor(self, relevance: float | None) -> float | None:
        """The least priority of a listing's next pages on this page
        (``jlse.workers.section_links``), or None: no floor."""
        return None

    @abstractmethod
    def score_links(
        self,
        page_relevance: float | None,
        depth: int,
        anchors: Sequence[str],
        urls: Sequence[str],
        contexts: Sequence[str],
        parent_priority: float = 1.0,
        page_text: str = "",
        page_url: str = "",
    ) -> np.ndarray:
        """One priority per out-link (higher is fetched first).

        ``page_relevance`` is P(relevant | page) of the page the links are on (None when no
        topic model), ``depth`` its depth, ``parent_priority`` the priority it was fetched at,
        ``page_text`` its visible text (only ``cfc`` reads it), ``page_url`` its canonical URL
        ("" when unknown; only ``jlse`` reads it, to tell links to other sites)."""

    def observe_page(self, url: str, page_text: str, relevance: float | None,
                     link_urls: Sequence[str]) -> None:
        """Called once per parsed page before ``score_links`` (``url`` and its out-links are
        canonical); a strategy that learns from the pages it sees (``cfc``) keeps what it
        needs, the others ignore it."""
        return None

    def observe_followed_link(self, anchor_text: str, relevance: float | None) -> None:
        """Called once per parsed page with the anchor of the link the crawl followed to it and
        the page's relevance; a strategy that learns which links pay (``jlse``) keeps it."""
        return None

    def learn_link_text(self, link_text: LinkTextFn) -> None:
        """Called by the page pipeline with a link-text model that learns from the crawl's own
        pages (``models.self_training``); a strategy that reads one (``jlse``, with
        ``link_text_model = "crawl"``) reads this one instead of the samples'."""
        return None

    def score_links_and_sites(self, page_relevance: float | None, depth: int,
                              anchors: Sequence[str], urls: Sequence[str],
                              contexts: Sequence[str], parent_priority: float = 1.0,
                              page_text: str = "", page_url: str = "",
                              ) -> tuple[np.ndarray, np.ndarray | None]:
        """``score_links`` and, for a strategy with a site bandit, each link's site
        group (``NewLink.site_group``: > 0 on the links :meth:`observe_result` ranks); None:
        none."""
        return self.score_links(page_relevance, depth, anchors, urls, contexts,
                                parent_priority=parent_priority, page_text=page_text,
                                page_url=page_url), None

    def pop_lift(self, url: str) -> float:
        """What a popped URL's priority is multiplied by before it is fetched, for a runner
        that re-ranks at pop (:meth:`lift_at_pop`); 1.0 unless a strategy learns it."""
        return 1.0

    def lift_at_pop(self) -> None:
        """The runner re-ranks popped URLs by :meth:`pop_lift`, so the links are queued without
        that lift (the embedded runner; a distributed crawl's dispatcher cannot ask)."""
        return None

    def observe_request(self, url: str, waste: float) -> None:
        """Called where the crawl's results are written, for every request written, after its
        links were queued; ``waste``: what it fell short of a page (0 for a page; a redirect:
        ``models.redirect_waste.NEW_TARGET`` or ``KNOWN_TARGET``). A strategy that learns from
        it (``jlse``) overrides it."""
        return None

    def observe_result(self, url: str, relevance: float | None, links: list[Any],
                       detail: bool | None = None, title: str = "") -> None:
        """Called where the crawl's results are written (the embedded crawl's process, which
        sees every page; in distributed mode the worker that wrote it), before its links
        (``NewLink``) are queued: a strategy with a site bandit learns the page's outcome and
        sets the priority of the links with a site group (or drops them). The others ignore it.
        ``detail``: whether the page is a detail page by its structure (None: not known);
        ``title``: the page's title."""
        return None


def share_by_similarity(page_relevance: float | None, similarities: np.ndarray) -> np.ndarray:
    """Formula (10): the page's relevance shared among its out-links in proportion to ``sim``.

    ``priority(i) = P(relevant | page) * sim(i) / sum_v sim(v)``; all zeros when every sim is 0
    (as the JLSE evaluator does). A page without a relevance counts as relevant (1).
    """
    sims = np.clip(np.nan_to_num(np.asarray(similarities, dtype=float)), 0.0, None)
    total = float(sims.sum())
    if total <= 0.0:
        return np.zeros(len(sims))
    return _relevance_or_one(page_relevance) * sims / total


def _relevance_or_one(page_relevance: float | None) -> float:
    return 1.0 if page_relevance is None else float(page_relevance)


class BreadthFirst(Strategy):
    """Every link the same priority: the frontier's discovery order makes it breadth-first."""

    name = "bfs"
    focused = False

    def score_links(self, page_relevance, depth, anchors, urls, contexts,
                    parent_priority=1.0, page_text="", page_url="") -> np.ndarray:
        return np.ones(len(urls))


class BestFirst(Strategy):
    """Chakrabarti's baseline: a link inherits its page's relevance."""

    name = "best-first"
    focused = False  # soft focus: low-relevance pages still pass on their (low) priority

    def score_links(self, page_relevance, depth, anchors, urls, contexts,
                    parent_priority=1.0, page_text="", page_url="") -> np.ndarray:
        score = 0.0 if page_relevance is None else page_relevance
        return np.full(len(urls), score)


class AnchorTextAnalysis(Strategy):
    """ATA, the paper's baseline: JLSE with sim = anchor similarity only (no learned evidence)."""

    name = "ata"

    def __init__(self, anchor_similarity: SimilarityFn, **base: Any) -> None:
        super().__init__(**base)
        self.anchor_similarity = anchor_similarity

    def score_links(self, page_relevance, depth, anchors, urls, contexts,
                    parent_priority=1.0, page_text="", page_url="") -> np.ndarray:
        if len(urls) == 0:
            return np.zeros(0)
        return share_by_similarity(page_relevance, self.anchor_similarity(anchors))


class JointLinkSimilarity(Strategy):
    """JLSE as published (docs/algorithms.md §1.10): sim = max(sim_anchor, sim_predicted), formula (10)."""

    name = "jlse-paper"
    product = False
    learns = "qtable"

    def __init__(self, evaluator: Any, **base: Any) -> None:
        super().__init__(**base)
        self.evaluator = evaluator  # a models.jlse_evaluator.JLSEEvaluator

    def score_links(self, page_relevance, depth, anchors, urls, contexts,
                    parent_priority=1.0, page_text="", page_url="") -> np.ndarray:
        if len(urls) == 0:
            return np.zeros(0)
        priorities = self.evaluator.priorities(_relevance_or_one(page_relevance),
                                               anchors, urls, contexts)
        return np.asarray(priorities, dtype=float)


class JointLinkSimilarityProduct(JointLinkSimilarity):
    """The named variant of formula (10): ``P(relevant | page) * sim(i)``, not shared out."""

    name = "jlse-product"
    product = True


class LearnedTunnelling(JointLinkSimilarity):
    """The default JLSE: the product variant with soft focus.

    ``priority(i) = r * max(sim_anchor(i), sim_predicted(i)) * (1 - w + w * t(i))`` with
    r = P(relevant | page) ** γ on a page judged relevant (γ = ``relevance_exponent``, 4 in the
    settings: a page the classifier is less sure of leads less; the pages it takes for relevant
    by mistake score lower than the ones it is right about) and r = ``tunnel_weight`` (default
    0) on one judged irrelevant; t(i) = P(relevant | link i's text) by the link-text model
    (the samples' KDE-NB on anchor + context, or, with ``link_text_model = "crawl"``, the page
    NB as self-training refits it on the crawl's pages, on the anchor: :meth:`learn_link_text`),
    w = ``link_text_weight`` (1 in the settings: the factor is t(i) itself):
    among a relevant listing's links, whose anchors the anchor model mostly leaves at its floor
    and whose URLs look alike to the Q-table, the ones whose own text is off the topic (a
    cross-post from another group, another topic's story in a mixed markets section) wait.
    Every page is expanded, target pages too: the paper follows no link of a target (a result
    page), but an article's links to the articles it resembles are the shortest way to more
    of them, and the link-text factor and the site bandit hold back the ones off the topic
    (docs/strategies.md, "Target pages are expanded"). On a relevant page a listing's next
    pages (``jlse.workers.section_links``) get at least ``section_links`` x r, so a relevant
    listing is read to its end. Irrelevant pages are expanded too, but their links wait below
    every link of a relevant page (at 0, where a relevant page's are at least ``relevance_threshold`` ** γ x the anchor floor
    x t(i) > 0): they are fetched when those run out, or in the low-priority slot, which is how the crawl tunnels
    through hubs to sites its relevant pages do not link to. A larger tunnel weight (0.02 until
    2026-11-26) let a link of an irrelevant page with strong evidence (0.02 x 0.8) outrank one
    of a relevant page with the anchor floor (1.0 x 0.01): on the real-text web the crawl left
    its topic's sites after 100 pages (docs/strategies.md, "Why the defaults are what they are").
    With the site bandit (``site_optimism`` >= 0, ``models.site_harvest``), the links to
    another site than their page's get their priority multiplied, where the crawl's results
    are written (:meth:`observe_result`), by their site's and their link group's learnt lift:
    the link evidence, learnt on the sites already walked, otherwise keeps the crawl on its
    first sites. A relevant page's link to the home page of a site the crawl has not entered
    (``site_entries``) is ranked at least by the page's weight x what the bandit expects of
    the site (its lift without the optimism): its anchor is the site's name and its evidence
    was learnt on other sites, so it would wait however well the site pays. A relevant page's
    link to a site where no relevant page has been found yet (``prospect_share`` > 0) is not
    lowered by the site's lift, until a page of the site has been fetched so, while such
    links have taken less than that share of the pages: the first relevant page found there
    is a relevant site found (issue 27's thirteenth round). A relevant page's links are also
    lifted by how many new relevant sites its site's pages have led to, per page
    (``site_discovery``, off by default): a portal's stories link the topic's other sites
    (eighteenth round). Every link's priority is also multiplied by what the crawl has learnt
    of its URL shape (:meth:`url_lift`): the pages its requests give
    (``models.redirect_waste``) and the share of its pages judged relevant
    (``models.shape_harvest``), when it is popped in the embedded crawl, else when it is
    queued.
    An irrelevant page's links to other sites (``tunnel_share`` > 0) join the bandit too, in a
    group of their own, at their evidence x their link-text P instead of 0: hubs judged
    irrelevant are often the only pages that link to a topic's other sites. The group takes at
    most ``tunnel_share`` of the pages fetched: past it, its links are ranked at 0 and, popped,
    wait again (:meth:`pop_lift`), so a crawl whose own links run dry does not spend itself on them.
    Such a link to the home page of a site not entered (``tunnel_entries``) is ranked at least
    by the group's harvest x what the bandit expects of the site: a blogroll or a portal's
    partner list is how some sites are reached at all. A link whose anchor names a page the
    crawl has judged (``known_titles``) is ranked by that page's weight (:meth:`observe_result`).
    Why it differs from formula (10), measured in docs/strategies.md: sharing P among the out-links
    ranks a link by how few siblings it has; and hard focus never fetches the hubs on the way
    to hub-only sites, so the crawl runs dry and G_w never learns them.
    """

    name = "jlse"

    def __init__(self, evaluator: Any, tunnel_weight: float = 0.0,
                 section_links: float = 0.0, link_text_relevance: LinkTextFn | None = None,
                 link_text_weight: float = 0.0, relevance_exponent: float = 1.0,
                 site_optimism: float | None = None, redirect_waste: bool = False,
                 link_outcomes: bool = False, tunnel_share: float = 0.0,
                 shape_harvest: bool = False, site_entries: bool = False,
                 prospect_share: float = 0.0, known_titles: bool = False,
                 tunnel_entries: bool = False, site_discovery: bool = False,
                 **base: Any) -> None:
        super().__init__(evaluator, **base)
        self.titles = KnownTitles() if known_titles else None
        self.tunnel_share = tunnel_share
        self.prospect_share = prospect_share
        self.tunnel_weight = tunnel_weight
        self.relevance_exponent = relevance_exponent
        self.section_links = section_links
        self.link_text_relevance = link_text_relevance
        self.link_text_weight = link_text_weight
        # None: no site bandit (links to other sites are scored like the others)
        self.sites = None if site_optimism is None else SiteHarvest(site_optimism)
        self.redirects = RedirectWaste() if redirect_waste else None
        self.shapes = ShapeHarvest() if shape_harvest else None
        self.site_entries = site_entries
        self.tunnel_entries = tunnel_entries
        self.site_discovery = site_discovery
        self.lifts_at_pop = False  # True: the runner applies the URL lifts (lift_at_pop)
        self.outcomes = LinkOutcomes() if link_outcomes else None

    def observe_result(self, url: str, relevance: float | None, links: list[Any],
                       detail: bool | None = None, title: str = "") -> None:
        """Learn the page's outcome, then lift its links: each by its URL shape's pages per
        request (``models.redirect_waste``) and harvest (``models.shape_harvest``) unless the
        runner lifts URLs when they are popped; each link to another site by its site's and its
        group's lift (the site bandit, ``models.site_harvest``), a link that enters a site at
        least to the page's weight x what the bandit expects of the site; last, a link whose
        anchor names a page already judged by that page's weight (``models.known_titles``)."""
        self._lift_links(url, relevance, links, detail)
        if self.titles is None or relevance is None:
            return
        self.titles.fetched(url)
        weight = self.page_weight(relevance)
        self.titles.observe(title, weight)
        for link, known in zip(links, self.titles.name(links), strict=True):
            if not np.isnan(known):
                self._name(link, float(known))
        if weight > 0:  # the links queued before, which name this page: raised
            links.extend(self._name(NewLink(url, parent, depth), weight)
                         for url, parent, depth in self.titles.named_by(title))

    def _name(self, link: Any, weight: float) -> Any:
        """Rank a link whose anchor names a judged page by that page's weight (times its URL
        shape's pages per request where the runner does not lift at pop)."""
        waste = 1.0 if self.lifts_at_pop or self.redirects is None \
            else self.redirects.lift(link.url)
        link.priority = min(1.0, weight * waste)
        self.titles.rank(link.url)
        return link

    def _lift_links(self, url: str, relevance: float | None, links: list[Any],
                    detail: bool | None) -> None:
        if self.shapes is not None and relevance is not None:
            self.shapes.observe(url, relevance >= self.relevance_threshold)
        if not self.lifts_at_pop and (self.redirects is not None or self.shapes is not None):
            for link in links:
                link.priority = min(1.0, link.priority * self.url_lift(link.url))
        if self.sites is None:
            return
        if relevance is not None:
            # a hub page (home, listing) tells the crawl's harvest, not its site's
            self.sites.observe(url, relevance >= self.relevance_threshold,
                               of_site=detail is not False)
        if self.site_discovery and relevance is not None and relevance >= self.relevance_threshold:
            self._lift_discoverer(url, links)
        offered = [link for link in links if link.site_group]
        if not offered:
            return
        groups = self._groups(offered)
        lifts = self.sites.offer([link.url for link in offered], groups,
                                 site_of(url) if self.site_discovery else "")
        capped = self.tunnel_share > 0 and self.sites.over_share(TUNNEL_OFF_SITE, self.tunnel_share)
        entry_weight = self._entry_weight(relevance)
        for link, group, lift in zip(offered, groups, lifts, strict=True):
            if group == PROSPECT:
                lift = max(1.0, float(lift))
            link.priority = min(1.0, link.priority * float(lift))
            if capped and link.site_group == TUNNEL_OFF_SITE:
                link.priority = 0.0
            elif entry_weight > 0 and self._enters_a_site(link):
                expected = self.sites.expected_lift(site_of(link.url))
                link.priority = max(link.priority, min(1.0, entry_weight * expected))

    def _lift_discoverer(self, url: str, links: list[Any]) -> None:
        """A relevant page's links, lifted by what its site's pages have led to: new relevant
        sites (``models.site_harvest``, :meth:`SiteHarvest.discovery_lift`)."""
        lift = self.sites.discovery_lift(site_of(url))
        if lift > 1.0:
            for link in links:
                link.priority = min(1.0, link.priority * lift)

    def _entry_weight(self, relevance: float | None) -> float:
        """What a link of this page that enters a site is ranked by, times what the bandit
        expects of the site: a relevant page's weight (``site_entries``); for an irrelevant
        page's (``tunnel_entries``), the share of relevant pages its link group has led to."""
        weight = self.page_weight(relevance)
        if weight > 0:
            return weight if self.site_entries else 0.0
        return self.sites.group_harvest(TUNNEL_OFF_SITE) if self.tunnel_entries else 0.0

    def _groups(self, offered: list[Any]) -> list[int]:
        """Each link's bandit group: its own, or ``PROSPECT`` for a relevant page's link to a
        site with no page judged relevant yet, not tried as a prospect, while prospects are
        under their share: the first relevant page found there is a relevant site found,
        which the site's harvest so far (hubs, a few pages off the topic) does not tell of."""
        if self.prospect_share <= 0 or self.sites.over_share(PROSPECT, self.prospect_share):
            return [link.site_group for link in offered]
        return [PROSPECT if link.site_group == OFF_SITE and self.sites.prospect(site_of(link.url))
                else link.site_group for link in offered]

    def _enters_a_site(self, link: Any) -> bool:
        """A link to the home page of a site the crawl has not entered: its anchor is the
        site's name, and the link evidence was learnt on other sites."""
        return (link.site_group in (OFF_SITE, TUNNEL_OFF_SITE) and is_home(link.url)
                and not self.sites.entered(site_of(link.url)))

    def learn_link_text(self, link_text: LinkTextFn) -> None:
        if self.link_text_relevance is not None:
            self.link_text_relevance = link_text

    def observe_followed_link(self, anchor_text: str, relevance: float | None) -> None:
        if self.outcomes is not None and relevance is not None:
            # the page's weight as a soft label: a page the classifier is less sure of
            # teaches less, as it passes less to its own links
            self.outcomes.observe(text_tokens(anchor_text), min(1.0, self.page_weight(relevance)))

    def observe_request(self, url: str, waste: float) -> None:
        if self.redirects is not None:
            self.redirects.observe(url, waste)

    def url_lift(self, url: str) -> float:
        """What the crawl has learnt of ``url``'s shape: its pages per request x its
        harvest."""
        shapes = url_shapes(url) if self.redirects is not None and self.shapes is not None \
            else None  # both read them: made once
        lift = 1.0 if self.redirects is None else self.redirects.lift(url, shapes)
        return lift if self.shapes is None else lift * self.shapes.lift(url, shapes)

    def pop_lift(self, url: str) -> float:
        if self.titles is not None and self.titles.ranked(url):  # only its pages per request
            return 1.0 if self.redirects is None else self.redirects.lift(url)
        lift = self.url_lift(url)
        if self.tunnel_share > 0 and self.sites is not None \
                and self.sites.group_of(url) == TUNNEL_OFF_SITE \
                and self.sites.over_share(TUNNEL_OFF_SITE, self.tunnel_share):
            return 0.0  # not 1% of it: that still came before every link at 0 (forsale .507)
        return lift

    def lift_at_pop(self) -> None:
        self.lifts_at_pop = True

    def should_expand(self, relevance: float | None, is_target: bool) -> bool:
        """Every page, target pages too (the paper follows no link of a target page: see the
        class docstring)."""
        return True

    def section_link_floor(self, relevance: float | None) -> float | None:
        if relevance is None or relevance < self.relevance_threshold or self.section_links <= 0:
            return None
        return self.page_weight(relevance) * self.section_links

    def page_weight(self, page_relevance: float | None) -> float:
        """What a page passes on to its links: r^γ when judged relevant, else the tunnel weight."""
        relevance = _relevance_or_one(page_relevance)
        if relevance < self.relevance_threshold:
            return self.tunnel_weight
        return relevance ** self.relevance_exponent

    def score_links(self, page_relevance, depth, anchors, urls, contexts,
                    parent_priority=1.0, page_text="", page_url="") -> np.ndarray:
        return self.score_links_and_sites(page_relevance, depth, anchors, urls, contexts,
                                          page_url=page_url)[0]

    def score_links_and_sites(self, page_relevance, depth, anchors, urls, contexts,
                              parent_priority=1.0, page_text="", page_url=""):
        """The links' evidence priorities; with the site bandit, group 1 on the links to
        another site than ``page_url``'s (0 elsewhere)."""
        if len(urls) == 0:
            return np.zeros(0), None
        sim_anchor, sim_predicted = self.evaluator.evidence(anchors, urls, contexts)
        relevance = self.page_weight(page_relevance)
        weights = np.full(len(urls), relevance)
        if relevance > 0 and self.link_text_weight > 0 and self.link_text_relevance is not None:
            text = self._link_text(anchors, contexts)
            weights *= 1.0 - self.link_text_weight + self.link_text_weight * text
        evidence = np.maximum(sim_anchor, sim_predicted)
        priorities = weights * evidence
        if self.sites is None or not page_url:
            return priorities, None
        tunnels = relevance <= 0
        if tunnels and (self.tunnel_share <= 0 or self.link_text_relevance is None):
            return priorities, None
        page_site = site_of(page_url)
        off_site = np.array([site_of(url) != page_site for url in urls])
        if not tunnels:
            return priorities, off_site.astype(int)
        away = np.flatnonzero(off_site)  # the link-text model only where it is read
        if away.size:
            priorities[away] = evidence[away] * self._link_text(
                [anchors[i] for i in away], [contexts[i] for i in away])
        return priorities, off_site * TUNNEL_OFF_SITE

    def _link_text(self, anchors: Sequence[str], contexts: Sequence[str]) -> np.ndarray:
        """P(relevant | each link's anchor + context): the samples' link-text model, with the
        crawl's own link outcomes (``models.link_outcomes``) once they can tell."""
        text = np.asarray(self.link_text_relevance(anchors, contexts), dtype=float)
        if self.outcomes is None:
            return text
        learnt = self.outcomes.relevance(anchor_tokens(anchors))
        return text if learnt is None else (text + learnt) / 2


class BayesContext(Strategy):
    """The Bayes crawler (docs/algorithms.md §2.7): a link's priority is
    P(relevant | anchor + context) by KDE-NB."""

    name = "bayes"

    def __init__(self, link_text_relevance: LinkTextFn, **base: Any) -> None:
        super().__init__(**base)
        self.link_text_relevance = link_text_relevance

    def score_links(self, page_relevance, depth, anchors, urls, contexts,
                    parent_priority=1.0, page_text="", page_url="") -> np.ndarray:
        if len(urls) == 0:
            return np.zeros(0)
        return np.asarray(self.link_text_relevance(anchors, contexts), dtype=float)


class KeywordCosine:
    """Cosine of a keyword query with texts, on raw term counts (no corpus, so no idf)."""

    def __init__(self, keywords: Sequence[str]) -> None:
        self.query_ = Counter(token for keyword in keywords for token in tokenize(keyword))
        self.query_norm_ = math.sqrt(sum(count * count for count in self.query_.values()))

    def cosines(self, texts: Sequence[str]) -> np.ndarray:
        return np.array([self._cosine(text) for text in texts], dtype=float)

    def _cosine(self, text: str) -> float:
        counts = Counter(tokenize(text))
        dot = sum(count * self.query_.get(token, 0) for token, count in counts.items())
        if dot == 0:
            return 0.0
        norm = math.sqrt(sum(count * count for count in counts.values()))
        return dot / (norm * self.query_norm_)


class KeywordVSM(Strategy):
    """Keyword topics: the page's relevance, raised for links whose text matches the keywords."""

    name = "vsm"

    def __init__(self, keywords: Sequence[str], **base: Any) -> None:
        super().__init__(**base)
        self.cosine = KeywordCosine(keywords)

    def score_links(self, page_relevance, depth, anchors, urls, contexts,
                    parent_priority=1.0, page_text="", page_url="") -> np.ndarray:
        if len(urls) == 0:
            return np.zeros(0)
        cosines = self.cosine.cosines(link_texts(anchors, contexts))
        share = VSM_LINK_TEXT_SHARE
        return _relevance_or_one(page_relevance) * ((1.0 - share) + share * cosines)
