"""A bandit over sites for the default ``jlse`` strategy: how much a link to another site is
worth, learnt from the crawl's own outcomes.

The link evidence of ``jlse`` (anchor similarity, the Q-table of G_w) is learnt from the
sites the crawl has already walked, so a link to a site it has not fetched from rarely looks
promising, and the crawl stays on the first sites it found. ``SiteHarvest`` keeps, per site
(the URL's host), the pages fetched and those judged relevant, and gives a link to *another
site* than its page's an upper confidence bound on that site's harvest:

    U(s) = (k_s + a·ρ) / (n_s + a) + c / sqrt(1 + n_s + g_s)

``n_s`` pages fetched from s, ``k_s`` of them judged relevant, ``ρ`` the harvest of the whole
crawl so far (the prior: a site nobody fetched from is taken for as good as the crawl's
average; a = 1 pseudo-page), ``c`` the optimism (``site_optimism``) and ``g_s`` the links to s
already offered the bound: a site's first links carry the optimism, later ones less, so a
site linked from many pages before its first fetch does not flood the frontier, and a site
whose pages turn out irrelevant falls back to its observed harvest. The strategy ranks the
link by max(its evidence, U(s)) times the page's relevance (``models.strategies``).

The state is per process (thread-safe, a lock around a few dict updates): in distributed
mode each worker learns from the pages it processes itself.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence

import numpy as np

PRIOR_PAGES = 1.0  # a: the weight of the crawl's harvest as a site's prior, in pages


def site_of(url: str) -> str:
    """The site of a canonical URL: its ``host[:port]`` ("" if it has none)."""
    rest = url.partition("//")[2]
    return rest.partition("/")[0].partition("?")[0].partition("#")[0].lower()


class SiteHarvest:
    """Observed harvest per site, the optimistic bound a link to it gets and its lift."""

    def __init__(self, optimism: float, prior_pages: float = PRIOR_PAGES) -> None:
        self.optimism = float(optimism)
        self.prior_pages = float(prior_pages)
        self._lock = threading.Lock()
        self._fetched: dict[str, int] = {}
        self._relevant: dict[str, int] = {}
        self._offered: dict[str, int] = {}
        self._total = [0, 0]  # pages fetched, judged relevant
        self._entered = [0, 0]  # sites entered (first page fetched), first page relevant

    def observe(self, url: str, relevant: bool) -> None:
        """A page of ``url``'s site was fetched and judged (relevant or not)."""
        site = site_of(url)
        with self._lock:
            fetched = self._fetched.get(site, 0)
            self._fetched[site] = fetched + 1
            self._total[0] += 1
            if fetched == 0:
                self._entered[0] += 1
            if relevant:
                self._relevant[site] = self._relevant.get(site, 0) + 1
                self._total[1] += 1
                if fetched == 0:
                    self._entered[1] += 1

    def crawl_harvest(self) -> float:
        """The share of the crawl's pages judged relevant (1/2 before any: a uniform prior)."""
        return (self._total[1] + 1.0) / (self._total[0] + 2.0)

    def new_site_harvest(self) -> float:
        """The share of the sites entered whose first page was judged relevant: what a site
        nobody fetched from is expected to give (1/2 before any)."""
        return (self._entered[1] + 1.0) / (self._entered[0] + 2.0)

    def harvest(self, site: str) -> float:
        """The site's harvest estimate without optimism (the new sites' harvest as prior)."""
        with self._lock:
            return self._mean(site, self.new_site_harvest())

    def _mean(self, site: str, prior: float) -> float:
        fetched = self._fetched.get(site, 0)
        return (self._relevant.get(site, 0) + self.prior_pages * prior) / (fetched + self.prior_pages)

    def offer(self, sites: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(U(s), lift(s)) of each link's site, counting each link as an offer to its site:
        U capped at 1, lift = min(1, the site's harvest / the crawl's)."""
        bounds, lifts = np.empty(len(sites)), np.empty(len(sites))
        with self._lock:
            prior, crawl = self.new_site_harvest(), self.crawl_harvest()
            for i, site in enumerate(sites):
                fetched = self._fetched.get(site, 0)
                offered = self._offered.get(site, 0)
                self._offered[site] = offered + 1
                mean = self._mean(site, prior)
                bounds[i] = mean + self.optimism / math.sqrt(1.0 + fetched + offered)
                lifts[i] = mean / crawl
        return np.minimum(bounds, 1.0), np.minimum(lifts, 1.0)

    def sites_seen(self) -> int:
        with self._lock:
            return len(self._fetched)
