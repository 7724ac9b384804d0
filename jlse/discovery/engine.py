"""The discovery loop (docs/algorithms.md §3): seeds -> operator -> fetch -> rank -> top k ->
choose the next operator -> ... until the page budget.

Each round the chosen operator proposes URLs from the current top pages; the pages fetched are
ranked with all pages found so far (``ranking``); the operator's reward is how high its new
pages rank (pages found before earn nothing); the chooser (UCB1 by default) picks the next one.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import scipy.sparse as sp

from jlse.discovery.bandit import round_reward
from jlse.discovery.fetching import Page, PageFetcher
from jlse.discovery.operators import Operators
from jlse.discovery.ranking import (
    HASHED_FEATURES,
    PageRanker,
    Ranking,
    SiteRank,
    home_pages,
    page_features,
    rank_sites,
)
from jlse.discovery.state import DiscoveryState, StateFiles
from jlse.models.vsm import PositionVSM
from jlse.scheduler.urls import home_page_url

log = logging.getLogger(__name__)

PSEUDO_SAMPLES = 20  # keyword-only topics: the best pages by keyword relevance stand in
RANDOM_NEGATIVES = 100  # discovered pages drawn as negatives each round
EMPTY_ROUNDS_TO_STOP = 8  # rounds in a row that fetched nothing new end the run
HOME_PAGES = "home"  # the "operator" of the home pages fetched to judge the sites


@dataclass
class RoundOutcome:
    operator: str
    proposed: int
    fetched: int
    reward: float

    def to_dict(self) -> dict:
        return {"operator": self.operator, "proposed": self.proposed, "fetched": self.fetched,
                "reward": round(self.reward, 6)}


@dataclass
class Corpus:
    """The discovered pages, in discovery order, with their link graph."""

    pages: list[Page] = field(default_factory=list)
    index: dict[str, int] = field(default_factory=dict)

    def add(self, pages: list[Page]) -> list[Page]:
        """Add the pages not there yet; the ones added."""
        added = []
        for page in pages:
            if page.url not in self.index:
                self.index[page.url] = len(self.pages)
                self.pages.append(page)
                added.append(page)
        return added

    def links(self) -> list[tuple[int, int]]:
        index = self.index
        return [(source, index[url]) for source, page in enumerate(self.pages)
                for url in page.links if url in index and index[url] != source]

    def in_links(self, url: str) -> list[str]:
        return [page.url for page in self.pages if url in page.links]


def page_document(page: Page) -> str:
    return " ".join(part for part in (page.title, page.description, page.keywords, page.text)
                    if part)


class Discovery:
    """One discovery run over a topic."""

    def __init__(self, fetcher: PageFetcher, operators: Operators, chooser, files: StateFiles,
                 state: DiscoveryState, samples: list[str], negatives: list[str],
                 keywords: list[str], settings) -> None:
        self.fetcher = fetcher
        self.operators = operators
        self.chooser = chooser
        self.files = files
        self.state = state
        self._sample_rows = page_features(samples) if samples else None
        self._negative_rows = page_features(negatives) if negatives else \
            sp.csr_matrix((0, HASHED_FEATURES))
        self._rows: sp.csr_matrix | None = None
        self._keyword_scores: list[float] = []  # keyword-only topics: VSM score per page
        self.keywords = keywords
        self.settings = settings
        self.corpus = Corpus()
        self.ranking: Ranking | None = None
        self.attempted: set[str] = set()  # URLs proposed before (fetched or not)
        self.on_round: Callable[[int, str, int], None] | None = None  # (round, operator, pages)

    # --- the loop --------------------------------------------------------------------------
    def run(self, seeds: list[str]) -> str:
        """Rounds until the budget; why it ended."""
        if self.state.round == 0 and seeds:
            self._fetch_round("seeds", seeds)
        empty = 0
        while True:
            left = self.settings.max_pages - self.fetcher.fetched()
            if left <= 0:
                return "page budget reached"
            if self.fetcher.interrupted:
                return "interrupted"
            if empty >= EMPTY_ROUNDS_TO_STOP:
                return "nothing more to discover"
            outcome = self._round(min(left, self.settings.discovery_round_pages))
            empty = empty + 1 if outcome.fetched == 0 else 0

    def _round(self, budget: int) -> RoundOutcome:
        operator = self.chooser.choose() if self.corpus.pages else "keyword"
        plan = self.operators.plan(operator, self.top_pages(), budget)
        before = set(self.corpus.index)
        returned = [url for url in plan.urls if self._new_for(operator, url)]
        added = self._fetch(operator, returned, budget)
        if plan.expand and added:  # backward crawl: then the out-links of the pages found
            extra = [url for page in added for url in page.links if url not in self.attempted]
            extra = list(dict.fromkeys(extra))[: budget - len(added)]
            added += self._fetch(operator, extra, budget - len(added))
            returned += extra
        self._fetch_home_pages()
        self._rank()
        outcome = RoundOutcome(operator, len(returned), len(added),
                               self._reward(returned, before))
        self.chooser.update(operator, outcome.reward, outcome.proposed)
        self._end_round(outcome)
        return outcome

    def restore(self, pages: list[Page], store) -> None:
        """Continue a run: its pages, and those a cut-short round fetched but did not list."""
        self.corpus.add(pages)
        missing = []
        for link in store.iter_links():
            if link.status.value != "queued":  # queued: an out-link never tried, or one to retry
                self.attempted.add(link.url)
            if link.status.value == "fetched" and link.url not in self.corpus.index:
                page = self.fetcher.load(link.url, link.relevance)
                if page is not None:
                    page.operator, page.round = "unknown", self.state.round
                    missing.append(page)
        self.files.append_pages(self.corpus.add(missing))
        if missing:
            log.info("resume: %d pages fetched by the cut-short round recovered", len(missing))
        self._rank()

    def _new_for(self, operator: str, url: str) -> bool:
        """Forward crawl proposes only URLs not tried before; search operators' answers count
        as they are (a known page in them earns nothing)."""
        return operator != "forward" or url not in self.attempted

    def _fetch_round(self, operator: str, urls: list[str]) -> None:
        budget = min(self.settings.max_pages - self.fetcher.fetched(), max(len(urls), 1))
        self._fetch(operator, urls, budget)
        self._fetch_home_pages()
        self._rank()
        self._end_round(RoundOutcome(operator, len(urls), len(self.corpus.pages), 0.0))

    def _fetch(self, operator: str, urls: list[str], budget: int) -> list[Page]:
        self.attempted.update(urls)
        pages = self.fetcher.fetch(urls, budget) if budget > 0 else []
        for page in pages:
            page.operator, page.round = operator, self.state.round + 1
        added = self.corpus.add(pages)
        self.files.append_pages(added)
        return added

    def _fetch_home_pages(self) -> None:
        """With ``discovery_home_pages``: the home page of every site found that has none yet,
        as far as the page budget goes (counted as fetches; the operator earns nothing)."""
        if not self.settings.discovery_home_pages:
            return
        known = self.site_homes()
        wanted = {}
        for page in self.corpus.pages:
            if page.host not in known and page.host not in wanted:
                url = home_page_url(page.url)
                if url is not None and url not in self.attempted:
                    wanted[page.host] = url
        left = self.settings.max_pages - self.fetcher.fetched()
        if wanted and left > 0:
            self._fetch(HOME_PAGES, list(wanted.values()), left)

    def _end_round(self, outcome: RoundOutcome) -> None:
        self.state.round += 1
        self.state.chooser = self.chooser.to_dict()
        self.state.memory = self.operators.memory.to_dict()
        self.state.history.append({"round": self.state.round, **outcome.to_dict(),
                                   "pages": len(self.corpus.pages), "at": round(time.time(), 3)})
        self.files.save(self.state)
        if self.on_round is not None:
            self.on_round(self.state.round, outcome.operator, len(self.corpus.pages))
        log.info("round %d: %s proposed %d URLs, %d new pages (%d in all), reward %.3f",
                 self.state.round, outcome.operator, outcome.proposed, outcome.fetched,
                 len(self.corpus.pages), outcome.reward)

    # --- ranking ---------------------------------------------------------------------------
    def top_pages(self) -> list[Page]:
        """The k best pages the operators start from; the home pages fetched to judge the sites
        are not among them (an operator's results are)."""
        k = self.settings.discovery_top_k
        pages = self.corpus.pages
        order = range(len(pages)) if self.ranking is None else self.ranking.order.tolist()
        return [pages[index] for index in order if pages[index].operator != HOME_PAGES][:k]

    def ranked_pages(self) -> list[Page]:
        if self.ranking is None:
            return list(self.corpus.pages)
        return [self.corpus.pages[index] for index in self.ranking.order]

    def site_homes(self) -> dict[str, int]:
        """Host -> index of its home page among the pages, when discovery fetches home pages;
        else none: a home page found by chance must not count against its site alone."""
        if not self.settings.discovery_home_pages:
            return {}
        pages = self.corpus.pages
        return home_pages([page.url for page in pages], [page.host for page in pages])

    def ranked_sites(self) -> list[SiteRank]:
        """The sites best first (:func:`jlse.discovery.ranking.rank_sites`)."""
        if self.ranking is None:
            return []
        return rank_sites([page.host for page in self.corpus.pages], self.ranking,
                          homes=self.site_homes())

    def _rank(self) -> None:
        if not self.corpus.pages:
            return
        rows, samples, negatives = self.rank_inputs(self.state.round)
        ranker = PageRanker(alpha=self.settings.discovery_alpha)
        self.ranking = ranker.fit(samples, negatives).rank(rows, self.corpus.links())

    def rank_inputs(self, round_number: int) -> tuple[sp.csr_matrix, sp.csr_matrix,
                                                       sp.csr_matrix]:
        """The feature rows of every page, the samples' and the negatives' of the ranking
        made in round ``round_number`` (its random negatives are drawn from that number)."""
        pages = self.corpus.pages
        rows = self._page_rows()
        samples = self._sample_rows if self._sample_rows is not None else \
            self._pseudo_samples(pages, rows)
        rng = random.Random(f"negatives|{round_number}")
        drawn = rng.sample(range(len(pages)), min(RANDOM_NEGATIVES, len(pages)))
        negatives = sp.vstack([self._negative_rows, rows[drawn]], format="csr")
        return rows, samples, negatives

    def _page_rows(self) -> sp.csr_matrix:
        """The feature rows of every page, each page tokenised once."""
        done = self._rows.shape[0] if self._rows is not None else 0
        fresh = [page_document(page) for page in self.corpus.pages[done:]]
        if fresh:
            new = page_features(fresh)
            self._rows = new if self._rows is None else sp.vstack([self._rows, new],
                                                                   format="csr")
        return self._rows

    def _pseudo_samples(self, pages: list[Page], rows: sp.csr_matrix) -> sp.csr_matrix:
        """A keyword-only topic's stand-in samples: the keywords, and the pages the
        position-weighted VSM (docs §4; tf weights, each page scored once) finds most relevant
        to them."""
        vsm = PositionVSM(self.keywords)
        self._keyword_scores += [
            vsm.relevance_blocks({"title": page.title, "body": page.text,
                                  "meta": f"{page.description} {page.keywords}"})
            for page in pages[len(self._keyword_scores):]]
        scores = self._keyword_scores
        best = [index for index in sorted(range(len(pages)), key=lambda index: -scores[index])
                if scores[index] > 0][:PSEUDO_SAMPLES]
        return sp.vstack([page_features([" ".join(self.keywords)]), rows[best]], format="csr")

    def _reward(self, returned: list[str], before: set[str]) -> float:
        """The round's reward: how high the operator's new pages rank (docs §3)."""
        if self.ranking is None or not returned:
            return 0.0
        positions, found_before = [], []
        for url in dict.fromkeys(returned):
            index = self.corpus.index.get(url)
            if index is None or url in before:
                positions.append(0)
                found_before.append(True)  # known before, or not a page: earns nothing
            else:
                positions.append(int(self.ranking.position[index]))
                found_before.append(False)
        return round_reward(positions, found_before, len(self.corpus.pages))
