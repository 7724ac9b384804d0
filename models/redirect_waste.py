"""Requests that bring no page of their own: redirects, learnt per URL shape
(docs/strategies.md, "Redirects").

A short link (``/s/1234``), a tracking or a canonicalising redirect costs a request and gives
no page: its target takes a second request, and when the target is a URL the crawl already
queued or fetched, the redirect gave nothing at all. Such links look like any other to the link
evidence (their anchors are the story's), so the crawl learns, per URL shape (host and path with
every run of digits made ``N``), the pages its requests yield: a page 1, a redirect to a new URL
1/2 (one page for two requests), a redirect to a known URL 0. With ``n_s`` the requests of shape
s written so far and ``w_s`` the sum of what they fell short of 1, a link of shape s gets its
priority multiplied by ``1 - w_s / (n_s + 1)`` (one request of yield 1 as the prior). A shape no
request of its host has had yet borrows the figures of its path shape over every host (short
links look alike across sites). A shape that never redirected keeps its links' priorities; one
whose every request redirected to known URLs falls towards 0 as evidence grows (1/2 after one,
1/5 after four).
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict

MAX_SHAPES = 100_000  # shapes remembered (least recently written dropped first)
KNOWN_TARGET, NEW_TARGET = 1.0, 0.5  # what a redirect's request falls short of a page
_DIGITS = re.compile(r"\d+")


def url_shapes(url: str) -> tuple[str, str]:
    """(``host/path?query`` of ``url`` with each run of digits made ``N``, the same for any
    host: ``*/path?query``)."""
    rest = (url.partition("//")[2] or url).partition("#")[0]
    host, slash, path = rest.partition("/")
    path_shape = _DIGITS.sub("N", slash + path)
    return host.lower() + path_shape, "*" + path_shape


class RedirectWaste:
    """Per URL shape: requests written and what they fell short of a page each."""

    def __init__(self, max_shapes: int = MAX_SHAPES) -> None:
        self.max_shapes = max_shapes
        self._shapes: OrderedDict[str, list[float]] = OrderedDict()  # shape -> [requests, waste]
        self.wasted = 0.0  # no lift is computed until a request fell short
        self._lock = threading.Lock()

    def observe(self, url: str, waste: float) -> None:
        """A request of ``url`` was written; ``waste``: what it fell short of a page (0 for a
        page, :data:`NEW_TARGET` or :data:`KNOWN_TARGET` for a redirect)."""
        with self._lock:
            for shape in url_shapes(url):
                counts = self._counts(shape)
                counts[0] += 1
                counts[1] += waste
            self.wasted += waste

    def lift(self, url: str) -> float:
        """``1 - w_s`` for the shape of ``url``, or of its path shape when its host has no
        request of that shape yet; 1.0 while no request was wasted."""
        if not self.wasted:
            return 1.0
        host_shape, path_shape = url_shapes(url)
        counts = self._shapes.get(host_shape) or self._shapes.get(path_shape)
        if counts is None or counts[1] == 0:
            return 1.0
        return 1.0 - counts[1] / (counts[0] + 1)

    def _counts(self, shape: str) -> list[float]:
        counts = self._shapes.get(shape)
        if counts is None:
            counts = self._shapes[shape] = [0.0, 0.0]
            if len(self._shapes) > self.max_shapes:
                self._shapes.popitem(last=False)
        else:
            self._shapes.move_to_end(shape)
        return counts
