"""The four discovery operators (docs/algorithms.md §3): each turns the current top pages into
URLs to fetch.

* ``forward``: the out-links of the top pages.
* ``backward``: the pages linking to the top pages (``link:`` search, and the in-links the crawl
  database already holds), then their out-links.
* ``keyword``: search queries from the topic's keywords and the titles, meta descriptions and
  meta keywords of the samples and of the top pages.
* ``related``: ``related:`` search for the top pages.

A search that fails is logged and gives nothing; the bandit then learns the operator is poor.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from jlse.discovery.fetching import Page
from jlse.discovery.search import SearchClient, SearchError, SearchSkipped
from jlse.settings import DISCOVERY_OPERATORS

log = logging.getLogger(__name__)

OPERATORS = DISCOVERY_OPERATORS
QUERY_WORDS = 8  # a title or description becomes a query of at most this many words
SEARCHES_PER_ROUND = 5  # link:/related: searches, or keyword queries, per round


@dataclass
class Plan:
    """What an operator proposes: URLs to fetch, and whether to fetch their out-links next."""

    urls: list[str]
    expand: bool = False


@dataclass
class OperatorMemory:
    """What the operators used before (saved with the discovery state for ``--resume``)."""

    queries: dict[str, int] = field(default_factory=dict)  # query -> next page (0: no more)
    searched: dict[str, list[str]] = field(default_factory=dict)  # "link:"/"related:" -> URLs
    warned: list[str] = field(default_factory=list)  # search problems already shown

    def to_dict(self) -> dict:
        return {"queries": self.queries, "searched": self.searched, "warned": self.warned}

    @classmethod
    def from_dict(cls, data: dict) -> OperatorMemory:
        return cls(dict(data.get("queries", {})), {key: list(value) for key, value in
                                                   data.get("searched", {}).items()},
                   list(data.get("warned", [])))


class Operators:
    """The operators of one discovery run."""

    def __init__(self, search: SearchClient | None, memory: OperatorMemory,
                 topic_queries: list[str], in_links: Callable[[str], list[str]]) -> None:
        self.search = search
        self.memory = memory
        self.topic_queries = topic_queries  # from keywords and samples, best first
        self.in_links = in_links  # URL -> pages of the crawl database linking to it
        self.is_known: Callable[[str], bool] = lambda url: False  # proposed in an earlier round

    def plan(self, operator: str, top: list[Page], limit: int) -> Plan:
        make = {"forward": self.forward, "backward": self.backward, "keyword": self.keyword,
                "related": self.related}[operator]
        return make(top, limit)

    def forward(self, top: list[Page], limit: int) -> Plan:
        return Plan(self._first(limit, (url for page in top for url in page.links)))

    def backward(self, top: list[Page], limit: int) -> Plan:
        urls: list[str] = []
        for page in self._unsearched("link:", top):
            urls += self.in_links(page.url)
            urls += self._search_page("link:", page)
        return Plan(self._first(limit, urls), expand=True)

    def keyword(self, top: list[Page], limit: int) -> Plan:
        urls: list[str] = []
        for query in self._next_queries(top):
            page = self.memory.queries.get(query, 1)
            found = self._search(query, page)
            if found is not None:  # a failed search is asked again in a later round
                self.memory.queries[query] = page + 1 if found else 0  # 0: no more results
                urls += found
        return Plan(self._first(limit, urls))

    def related(self, top: list[Page], limit: int) -> Plan:
        urls = [url for page in self._unsearched("related:", top)
                for url in self._search_page("related:", page)]
        return Plan(self._first(limit, urls))

    # --- helpers -------------------------------------------------------------------------
    def _first(self, limit: int, urls: Iterable[str]) -> list[str]:
        """The URLs up to the ``limit``-th one not proposed before (known ones stay in: they
        earn the operator nothing, and with little budget left they must not fill it)."""
        chosen: list[str] = []
        new = 0
        for url in dict.fromkeys(urls):
            if new >= limit:
                break
            chosen.append(url)
            new += not self.is_known(url)
        return chosen

    def _unsearched(self, form: str, top: list[Page]) -> list[Page]:
        done = self.memory.searched.setdefault(form, [])
        fresh = [page for page in top if page.url not in done][:SEARCHES_PER_ROUND]
        done += [page.url for page in fresh]
        return fresh

    def _next_queries(self, top: list[Page]) -> list[str]:
        """Queries never sent first (the topic's, then the top pages' titles and meta); then
        the next result page of queries sent before that still had results."""
        candidates = self.topic_queries + [query for page in top for query in page_queries(page)]
        fresh = [query for query in dict.fromkeys(candidates) if query not in self.memory.queries]
        again = sorted((query for query, page in self.memory.queries.items() if page > 0),
                       key=self.memory.queries.__getitem__)
        return (fresh + again)[:SEARCHES_PER_ROUND]

    def _search_page(self, form: str, page: Page) -> list[str]:
        """``link:`` or ``related:`` search for ``page``; a failed one is asked again later."""
        found = self._search(f"{form}{page.url}")
        if found is None:
            self.memory.searched[form].remove(page.url)
        return found or []

    def _search(self, query: str, page: int = 1) -> list[str] | None:
        """The result URLs; None when the search failed."""
        if self.search is None:
            return []
        try:
            return [result.url for result in self.search.search(query, page)]
        except SearchError as exc:
            self._warn_once(exc)
            return None

    def _warn_once(self, exc: SearchError) -> None:
        """One warning per kind of problem for the run (--resume included), not per search
        nor per number of tries; a search skipped while the engine is down is only logged."""
        if isinstance(exc, SearchSkipped) or exc.problem in self.memory.warned:
            log.info("%s", exc)
            return
        self.memory.warned.append(exc.problem)
        log.warning("search failed: %s; discovery goes on with what still works", exc)


def page_queries(page: Page) -> list[str]:
    """Search queries from a page's title, meta description and meta keywords."""
    return [query for query in (_query(page.title), _query(page.keywords.replace(",", " ")),
                                _query(page.description)) if query]


def topic_queries(keywords: Iterable[str], name: str, sample_pages: Iterable[Page]) -> list[str]:
    """The topic's own queries: each keyword, each keyword with the topic's name (the paper:
    a keyword alone carries too little context), then the samples' titles and meta."""
    keywords = [" ".join(word.split()) for word in keywords if word.strip()]
    name = " ".join(name.replace("-", " ").replace("_", " ").split())
    queries = list(keywords)
    queries += [f"{name} {word}" for word in keywords if name and name.lower() not in word.lower()]
    queries += [query for page in sample_pages for query in page_queries(page)]
    return list(dict.fromkeys(queries))


def _query(text: str) -> str:
    return " ".join(text.split()[:QUERY_WORDS])
