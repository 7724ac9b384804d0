"""The oracle crawl: the best-possible reference of ``jlse eval``.

A crawl from the same seeds with the same budget that knows every page's label and the whole
link graph: it fetches the relevant pages it can see first, then the links nearest, over the
true graph, to a relevant page it has not fetched yet. Strategies are compared to it by their
efficiency, HR@N / oracle HR@N (docs/algorithms.md §1.12).

The graph is the web's own: every crawlable page's out-links as the crawl pipeline extracts them
(``workers.charset`` + ``workers.parser``, the page's URL as base), keyed like the ground truth
(``key``, ``jlse.eval.truth_key``), keeping only links to known pages of the truth: the oracle
never gains from traps, faults, redirects or unknown pages, and never fetches a page robots.txt
keeps ``jlse`` away from (``crawlable`` False).

Distances are hops over the true graph to the nearest relevant page not yet fetched, through
fetchable pages only: a multi-source breadth-first search from those pages backwards along the
links (one sparse product per hop). They change only when a relevant page is fetched; they are
recomputed before the next pick of a non-relevant page whenever that happened
(``refresh=1``, exact greedy; a larger ``refresh`` recomputes at most every ``refresh`` fetches,
``None`` never; measured in docs/benchmarks.md: the exact greedy harvests the most).
"""

from __future__ import annotations

import heapq
import logging
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from scipy import sparse

from jlse.workers.charset import decode_html
from jlse.workers.parser import parse_html

log = logging.getLogger(__name__)

REFRESH = 1  # recompute distances after every relevant fetch (see the module docstring)
_FAR = np.iinfo(np.int32).max  # no relevant page reachable


class PageTruth(Protocol):
    """What the oracle reads of a page's ground truth."""

    url: str
    topic: str
    crawlable: bool


class Web(Protocol):
    """A web known in process (``jlse.sandbox.SandboxWeb`` and the like)."""

    def iter_truth(self) -> Iterator[PageTruth]: ...

    def page_bytes(self, url: str) -> bytes | None: ...


# --- the graph ---

def link_graph(pages: Iterable[tuple[str, bytes]], known: set[str],
               key: Callable[[str], str]) -> dict[str, list[str]]:
    """``key(url)`` of each page -> the keys of its out-links to ``known`` pages, in document
    order, without duplicates or self-links. Links are extracted as the crawl does."""
    graph: dict[str, list[str]] = {}
    for url, body in pages:
        source = key(url)
        html, _ = decode_html(body, None)
        out = graph.setdefault(source, [])
        seen = set(out)
        for link in parse_html(html, url).links:
            target = key(link.url)
            if target in known and target != source and target not in seen:
                seen.add(target)
                out.append(target)
    return graph


@dataclass
class WebGraph:
    """A web's link graph with what the oracle needs of its truth."""

    graph: dict[str, list[str]]
    topic_of: dict[str, str]  # key -> topic of every known page
    fetchable: set[str]  # keys of the crawlable pages

    def relevant(self, topic: str) -> set[str]:
        return {url for url, of in self.topic_of.items() if of == topic}


_GRAPHS: weakref.WeakKeyDictionary[Any, tuple[Callable[[str], str], WebGraph]] = \
    weakref.WeakKeyDictionary()


def web_graph(web: Web, key: Callable[[str], str]) -> WebGraph:
    """The link graph of ``web``, built once per web object (and key function)."""
    try:
        cached = _GRAPHS.get(web)
    except TypeError:  # not weakly referable: no cache
        cached = None
    if cached is not None and cached[0] is key:
        return cached[1]
    started = time.monotonic()
    truths = list(web.iter_truth())
    topic_of = {key(t.url): t.topic for t in truths}
    fetchable = {key(t.url) for t in truths if t.crawlable}
    pages = ((t.url, body) for t in truths
             if t.crawlable and (body := web.page_bytes(t.url)) is not None)
    built = WebGraph(link_graph(pages, set(topic_of), key), topic_of, fetchable)
    log.info("oracle: link graph of %d pages, %d links in %.1f s", len(built.graph),
             sum(map(len, built.graph.values())), time.monotonic() - started)
    try:
        _GRAPHS[web] = (key, built)
    except TypeError:
        pass
    return built


# --- the fetch order ---

def _distances(adjacency: sparse.csr_matrix, targets: np.ndarray) -> np.ndarray:
    """Hops from every node to the nearest target (``_FAR`` if none): BFS backwards."""
    dist = np.full(len(targets), _FAR, dtype=np.int64)
    frontier, hops = targets, 0
    while frontier.any():
        dist[frontier] = hops
        hops += 1
        frontier = (adjacency @ frontier.astype(np.float32) > 0) & (dist == _FAR)
    return dist


def oracle_order(graph: dict[str, list[str]], relevant: set[str], fetchable: set[str],
                 seeds: Sequence[str], budget: int, refresh: int | None = REFRESH) -> list[str]:
    """The oracle's fetch order (at most ``budget`` pages): at each step, of the fetchable URLs
    seen (seeds, out-links of the pages fetched) and not fetched yet, a relevant one if any,
    else one with the fewest hops to a relevant page not fetched yet; ties go to the URL seen
    first. Ends early when nothing fetchable is left. Every argument is in ``graph``'s keys."""
    nodes = sorted(fetchable)
    index = {url: i for i, url in enumerate(nodes)}
    rows: list[int] = []
    cols: list[int] = []
    for source, targets in graph.items():
        s = index.get(source)
        if s is not None:
            for j in (index.get(t) for t in targets):
                if j is not None:
                    rows.append(s)
                    cols.append(j)
    n = len(nodes)
    adjacency = sparse.csr_matrix((np.ones(len(rows), dtype=np.float32), (rows, cols)),
                                  shape=(n, n))
    is_relevant = np.array([url in relevant for url in nodes], dtype=bool)
    targets = is_relevant.copy()  # relevant and not fetched
    dist = _distances(adjacency, targets)
    stale, since = False, 0  # a relevant page was fetched since; fetches since computed
    seen: dict[int, int] = {}  # node -> discovery order
    heap: list[tuple[int, int, int]] = []  # (hops, discovery order, node); relevant: hops 0

    def see(url: str) -> None:
        i = index.get(url)
        if i is not None and i not in seen:
            seen[i] = len(seen)
            heapq.heappush(heap, (int(dist[i]), seen[i], i))

    for url in seeds:
        see(url)
    order: list[str] = []
    while heap and len(order) < budget:
        hops, _, i = heap[0]
        if hops > 0 and stale and refresh is not None and since >= refresh:
            dist = _distances(adjacency, targets)
            stale, since = False, 0
            heap = [(int(dist[j]), rank, j) for _, rank, j in heap]
            heapq.heapify(heap)
            continue
        heapq.heappop(heap)
        order.append(nodes[i])
        since += 1
        if is_relevant[i]:
            targets[i], stale = False, True
        for url in graph.get(nodes[i], ()):
            see(url)
    return order


def oracle_for_web(web: Web, topic: str, seeds: Sequence[str], budget: int,
                   key: Callable[[str], str], refresh: int | None = REFRESH) -> list[str]:
    """The oracle's fetch order on ``web`` for ``topic`` from ``seeds``: URLs as ``key`` gives
    them. ``web``: anything with ``iter_truth()`` (items with url, topic, crawlable) and
    ``page_bytes(url)``; its graph is built on the first call and kept while ``web`` lives."""
    built = web_graph(web, key)
    return oracle_order(built.graph, built.relevant(topic), built.fetchable,
                        [key(url) for url in seeds], budget, refresh)
