"""How many relevant pages a kind of URL gives, learnt during the crawl per URL shape
(docs/strategies.md, "URL shapes learn their harvest").

A link's evidence (its anchor, the Q-table's vertices like it) and its text's relevance judge
the link, not what its kind of URL has given so far. A relevant story's "Business" link leads
to a page of a mixed business section: a listing, judged irrelevant, whose links then wait at
0, and the next such link looks the same to the evidence. So the crawl counts, per URL shape
(``models.url_shapes``), the pages fetched and those judged relevant, and a link's priority is
multiplied by its shape's harvest over the crawl's: ``lift = h_s / ρ`` with ρ the share of the
crawl's pages judged relevant (a uniform prior), a path shape over every host
``h_p = (k_p + B ρ) / (n_p + B)`` and a host's shape ``h_s = (k_s + A h_p) / (n_s + A)``
(``n`` pages, ``k`` judged relevant; B = 1 page as the site bandit's prior, A = 2 as the
redirect model's). A shape as good as the crawl keeps its links' priorities; a shape whose
pages are judged irrelevant falls towards 0 as evidence grows.

A host none of whose pages has been judged relevant gets no lift: links to a site that has
not paid yet are the site bandit's to rank (``models.site_harvest``), and a path shape learnt
on other sites would otherwise hold back the first relevant page of a new one (20 Newsgroups'
comp crawls found 14-16 relevant sites where that rule was "a host with a page judged", 15-17
with this one: docs/strategies.md).
"""

from __future__ import annotations

import threading

from jlse.models.site_harvest import site_of
from jlse.models.url_shapes import MAX_SHAPES, ShapeCounts, url_shapes

PRIOR_PATH_PAGES = 1.0  # B: the crawl's harvest as a path shape's prior, in pages
PRIOR_HOST_PAGES = 2.0  # A: a path shape's harvest as a host's shape's prior, in pages


class ShapeHarvest:
    """Pages fetched and judged relevant per URL shape, and the lift a link gets from them."""

    def __init__(self, max_shapes: int = MAX_SHAPES) -> None:
        self._shapes = ShapeCounts(max_shapes)  # shape -> (pages judged, relevant)
        self._hosts = ShapeCounts(max_shapes)  # host -> (pages judged, relevant)
        self._crawl = [0, 0]  # pages judged, relevant
        self._lock = threading.Lock()

    def observe(self, url: str, relevant: bool) -> None:
        """A page of ``url`` was fetched and judged."""
        with self._lock:
            for shape in url_shapes(url):
                self._shapes.add(shape, 1.0, float(relevant))
            self._hosts.add(site_of(url), 1.0, float(relevant))
            self._crawl[0] += 1
            self._crawl[1] += int(relevant)

    def lift(self, url: str, shapes: tuple[str, str] | None = None) -> float:
        """The harvest of the shape of ``url`` over the crawl's (module docstring); 1.0 on a
        host none of whose pages has been judged relevant. ``shapes``: ``url_shapes(url)``
        when the caller has them."""
        if self._hosts.get(site_of(url))[1] == 0:
            return 1.0
        crawl = (self._crawl[1] + 1.0) / (self._crawl[0] + 2.0)
        host_shape, path_shape = shapes or url_shapes(url)
        pages, relevant = self._shapes.get(path_shape)
        path_harvest = (relevant + PRIOR_PATH_PAGES * crawl) / (pages + PRIOR_PATH_PAGES)
        pages, relevant = self._shapes.get(host_shape)
        harvest = (relevant + PRIOR_HOST_PAGES * path_harvest) / (pages + PRIOR_HOST_PAGES)
        return harvest / crawl
