"""A bandit over sites and link groups for the default ``jlse`` strategy: how much a link to
another site is worth, learnt from the crawl's own outcomes.

The link evidence of ``jlse`` (anchor similarity, the Q-table of G_w) is learnt from the
sites the crawl has already walked; on its own it keeps the crawl on the first sites it found
(their URL patterns match G_w). With the bandit, every link to another site than its page's
has its priority (its evidence, as for any link) multiplied by
two learnt lifts, each an estimate over the crawl's harvest ρ (the share of its pages judged
relevant so far):

- the site's: U(s) / ρ, with U(s) = (k_s + a·ρ_new) / (n_s + a) + c / sqrt(1 + n_s + g_s):
  ``n_s`` detail pages fetched from s, ``k_s`` of them judged relevant, ``ρ_new`` the share of
  the sites entered whose first detail page was relevant (what a site nobody fetched from is
  expected to give; a = 1 page), ``c`` the optimism (``site_optimism``) and ``g_s`` the links to
  s already ranked: a site's first links carry the optimism, later ones less, so a site linked
  from many pages before its first fetch does not flood the frontier, and a site whose pages
  turn out irrelevant falls back to its observed harvest. Hub pages (a home page, a section
  listing: not detail pages by the topic's target model) count in ρ and in their group's
  harvest, not in their site's: a forum's home page judged irrelevant says little of its
  threads, and a seed's home page judged so had kept a site of 268 relevant pages out of a
  crawl (docs/strategies.md, "Hub pages do not judge their site");
- the link group's: γ_g / ρ, γ_g = the share of relevant pages among those fetched through
  links of group g, a uniform prior. One group holds the links to other sites of pages judged
  relevant, another those of pages judged irrelevant (hubs, aggregators:
  ``LearnedTunnelling``'s ``tunnel_share``), held to a share of the pages fetched
  (:meth:`SiteHarvest.over_share`) and not lifted by its harvest (:meth:`SiteHarvest.group_lift`).

A relevant page's link to a site with no detail page judged relevant yet is a *prospect*
(``site_prospects``, :meth:`SiteHarvest.prospect`) until a page of the site has been fetched
as one: the strategy keeps its lift at 1 or above, so a site whose first pages were hubs or
off the topic gets one of its links tried on its evidence, and its outcome counts in a group
of its own, held to a share of the pages fetched.

A site whose pages led the crawl to new relevant sites is a *discoverer* (``site_discovery``,
off by default; :meth:`SiteHarvest.discovery_lift`): a site whose first page judged relevant
was reached by a link of one of its pages is credited to that page's site, and every link of
its pages judged relevant is lifted by max(1, d_s / d)^½, d_s = the sites it is
credited with per page fetched from it (+1), d = the new relevant sites per page of the crawl.
A portal carrying every topic links each topic's sites, so the topic's stories there lead to
the sites where its posts are few; without the lift the crawl read the portals no more than
their harvest asked. It costs newswire harvest (issue 27's eighteenth round).

The state lives where the results are written (``Strategy.observe_result``): the embedded
crawl's own process, which sees every page; in distributed mode each worker learns from the
pages it writes itself. A lock guards a few dict updates per page.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

PRIOR_PAGES = 1.0  # a: the weight of the new sites' harvest as a site's prior, in pages
OFF_SITE, TUNNEL_OFF_SITE = 1, 3  # the link groups (``NewLink.site_group``)
PROSPECT = 4  # a relevant page's off-site links taken as prospects (:meth:`SiteHarvest.prospect`)
PROBES = 5  # pages a group may take before its share is held to (:meth:`SiteHarvest.over_share`)
PENDING_LINKS = 200_000  # ranked links remembered until fetched: their group, the site linking them
DISCOVERY_POWER = 0.5  # a discoverer's lift: its new sites per page over the crawl's, to this power


def site_of(url: str) -> str:
    """The site of a canonical URL: its ``host[:port]`` ("" if it has none)."""
    rest = url.partition("//")[2]
    return rest.partition("/")[0].partition("?")[0].partition("#")[0].lower()


def is_home(url: str) -> bool:
    """Whether a canonical URL is its site's home page (path ``/`` or ``/index.html``, no query)."""
    rest = url.partition("//")[2]
    path = rest.partition("/")[2].partition("#")[0]
    return path in ("", "index.html")


class SiteHarvest:
    """Observed harvest per site and per link group, and the lift a link to a site gets."""

    def __init__(self, optimism: float, prior_pages: float = PRIOR_PAGES,
                 pending_links: int = PENDING_LINKS) -> None:
        self.optimism = float(optimism)
        self.prior_pages = float(prior_pages)
        self.pending_links = pending_links
        self._lock = threading.Lock()
        self._fetched: dict[str, int] = {}
        self._relevant: dict[str, int] = {}
        self._offered: dict[str, int] = {}
        self._total = [0, 0]  # pages fetched, judged relevant
        self._entered = [0, 0]  # sites entered (first page fetched), first page relevant
        self._groups: dict[int, list[int]] = {}  # group -> [pages fetched, relevant]
        # ranked URL -> its group, and the site of the page that offered it ("": not told)
        self._pending: OrderedDict[str, tuple[int, str]] = OrderedDict()
        self._tried: set[str] = set()  # sites a page was fetched from as a prospect
        self._discovered: dict[str, int] = {}  # site -> relevant sites first reached from it
        self._new_sites = 0  # relevant sites whose first relevant page came by a ranked link

    def observe(self, url: str, relevant: bool, of_site: bool = True) -> None:
        """A page of ``url``'s site was fetched and judged (relevant or not); ``of_site``
        False: it tells the crawl's and its link group's harvest, not its site's."""
        site = site_of(url)
        with self._lock:
            counts = [self._total]
            group, linked_from = self._pending.pop(url, (None, ""))
            if group is not None:
                counts.append(self._groups.setdefault(group, [0, 0]))
                if group == PROSPECT:
                    self._tried.add(site)
            if of_site and relevant and linked_from and not self._relevant.get(site, 0):
                self._discovered[linked_from] = self._discovered.get(linked_from, 0) + 1
                self._new_sites += 1
            if of_site:
                fetched = self._fetched.get(site, 0)
                self._fetched[site] = fetched + 1
                if fetched == 0:
                    counts.append(self._entered)
                if relevant:
                    self._relevant[site] = self._relevant.get(site, 0) + 1
            for count in counts:
                count[0] += 1
                count[1] += int(relevant)

    def crawl_harvest(self) -> float:
        """The share of the crawl's pages judged relevant (1/2 before any: a uniform prior)."""
        return _rate(self._total)

    def new_site_harvest(self) -> float:
        """The share of the sites entered whose first page was judged relevant (1/2 before
        any)."""
        return _rate(self._entered)

    def group_harvest(self, group: int) -> float:
        """The share of relevant pages among those fetched through links of ``group``."""
        return _rate(self._groups.get(group, [0, 0]))

    def group_lift(self, group: int, crawl: float) -> float:
        """γ_g / ρ; 1 for the tunnel group, which its share bounds instead: learnt on its first
        pages (a portal's company links), its harvest held every later tunnel link below the
        crawl's level, the links to a topic's journals too (issue 27's twelfth round). The
        prospects are a relevant page's off-site links: that group's lift (their share bounds
        them, and the strategy keeps their lift at 1 or above)."""
        if group == TUNNEL_OFF_SITE:
            return 1.0
        return self.group_harvest(OFF_SITE if group == PROSPECT else group) / crawl

    def over_share(self, group: int, share: float) -> bool:
        """Whether the pages fetched through ``group`` exceed ``share`` of the crawl's pages
        (the first ``PROBES`` excepted)."""
        with self._lock:
            taken = self._groups.get(group, [0, 0])[0]
            return taken >= PROBES + share * self._total[0]

    def group_of(self, url: str) -> int:
        """The group a ranked, not yet fetched URL was offered in (0: none known)."""
        return self._pending.get(url, (0, ""))[0]

    def entered(self, site: str) -> bool:
        """Whether a detail page of ``site`` has been fetched (hub pages do not enter a site)."""
        return self._fetched.get(site, 0) > 0

    def prospect(self, site: str) -> bool:
        """Whether ``site`` is still a prospect: no detail page of it judged relevant yet (a
        relevant site found), and no page of it fetched as a prospect (one try per site)."""
        return self._relevant.get(site, 0) == 0 and site not in self._tried

    def expected_lift(self, site: str) -> float:
        """The site's harvest estimate over the crawl's, without optimism: for a site not
        entered, the share of the sites entered whose first page was relevant over ρ."""
        return self.harvest(site) / self.crawl_harvest()

    def harvest(self, site: str) -> float:
        """The site's harvest estimate without optimism."""
        with self._lock:
            return self._mean(site, self.new_site_harvest())

    def _mean(self, site: str, prior: float) -> float:
        fetched = self._fetched.get(site, 0)
        return (self._relevant.get(site, 0) + self.prior_pages * prior) / (fetched + self.prior_pages)

    def discovery_lift(self, site: str) -> float:
        """What the links of ``site``'s relevant pages are multiplied by: max(1, d_s / d) ** ½,
        d_s the relevant sites first reached from its pages per page fetched from it (+1), d the
        crawl's new relevant sites per page; 1 until a site is so reached."""
        with self._lock:
            if not self._new_sites:
                return 1.0
            own = self._discovered.get(site, 0) / (self._fetched.get(site, 0) + 1.0)
            crawl = self._new_sites / self._total[0]
            return max(1.0, own / crawl) ** DISCOVERY_POWER

    def offer(self, urls: Sequence[str], groups: Sequence[int], page_site: str = "") -> np.ndarray:
        """The lift of each link, U(site) / ρ x its group's lift (:meth:`group_lift`), counting
        it as an offer to its site; its URL is remembered until fetched, for its group's
        harvest, and with ``page_site`` (the site of the page offering it), for the site a new
        relevant site is credited to (:meth:`discovery_lift`)."""
        lifts = np.empty(len(urls))
        with self._lock:
            prior, crawl = self.new_site_harvest(), self.crawl_harvest()
            group_lifts = {group: self.group_lift(group, crawl) for group in set(groups)}
            for i, (url, group) in enumerate(zip(urls, groups, strict=True)):
                site = site_of(url)
                fetched = self._fetched.get(site, 0)
                offered = self._offered.get(site, 0)
                self._offered[site] = offered + 1
                bound = self._mean(site, prior) + self.optimism / math.sqrt(1.0 + fetched + offered)
                lifts[i] = bound / crawl * group_lifts[group]
                if url not in self._pending:
                    self._pending[url] = (group, page_site)
                    if len(self._pending) > self.pending_links:
                        self._pending.popitem(last=False)
        return lifts

def _rate(count: list[int]) -> float:
    return (count[1] + 1.0) / (count[0] + 2.0)
