"""URL shapes: what the crawl learns per kind of URL rather than per URL.

A site's URLs of one kind differ only in their numbers (``/business/story-4014.html``,
``/s/1234``, ``/markets/index7.html``), and the same kinds recur on other sites built alike.
So what a request of a URL gave (a page or a redirect, a relevant page or not) is counted under
two shapes: its host and path with every run of digits made ``N``, and the same path over
every host (``*/business/story-N.html``), which serves as a prior for a host's shape that has
few requests of its own. ``models.redirect_waste`` counts what requests yield;
``models.shape_harvest`` what pages are worth.
"""

from __future__ import annotations

import re
from collections import OrderedDict

MAX_SHAPES = 100_000  # shapes remembered (least recently written dropped first)
_DIGITS = re.compile(r"\d+")


def url_shapes(url: str) -> tuple[str, str]:
    """(``host/path?query`` of ``url`` with each run of digits made ``N``, the same for any
    host: ``*/path?query``)."""
    rest = (url.partition("//")[2] or url).partition("#")[0]
    host, slash, path = rest.partition("/")
    path_shape = _DIGITS.sub("N", slash + path)
    return host.lower() + path_shape, "*" + path_shape


class ShapeCounts:
    """Per shape, a pair of running sums (what was counted, what it amounted to), the least
    recently written shapes dropped past ``max_shapes``. Not locked: its owner locks."""

    def __init__(self, max_shapes: int = MAX_SHAPES) -> None:
        self.max_shapes = max_shapes
        self._counts: OrderedDict[str, list[float]] = OrderedDict()

    def add(self, shape: str, count: float, amount: float) -> None:
        counts = self._counts.get(shape)
        if counts is None:
            counts = self._counts[shape] = [0.0, 0.0]
            if len(self._counts) > self.max_shapes:
                self._counts.popitem(last=False)
        else:
            self._counts.move_to_end(shape)
        counts[0] += count
        counts[1] += amount

    def get(self, shape: str) -> tuple[float, float]:
        """(count, amount) of ``shape``; (0, 0) for a shape never written (or dropped)."""
        counts = self._counts.get(shape)
        return (0.0, 0.0) if counts is None else (counts[0], counts[1])

    def __len__(self) -> int:
        return len(self._counts)
