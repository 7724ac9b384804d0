"""Requests that bring nothing new: redirects to pages the crawl already knows, learnt per URL
shape (docs/strategies.md, "Redirects to known pages").

A short link (``/s/1234``), a tracking or a canonicalising redirect costs a request and gives
no page; when its target is a URL the crawl has already queued or fetched, it gives nothing at
all. Such links look like any other to the link evidence (their anchors are the story's), so
the crawl learns, per URL shape (host and path with every run of digits made ``N``), the share
of its requests that were redirects to known URLs: ``w_s = d_s / (n_s + 1)``, with ``n_s`` the
requests of shape s written so far and ``d_s`` the wasted ones, and a link of shape s gets its
priority multiplied by ``1 - w_s``. A shape no request of its host has had yet borrows the
figures of its path shape over every host (short links look alike across sites). A shape that
never redirected keeps its links' priorities; one whose every request so far was wasted falls
towards 0 as evidence grows (1/2 after one, 1/5 after four).
"""

from __future__ import annotations

import re
import threading
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


class RedirectWaste:
    """Per URL shape: requests written and redirects among them to already known URLs."""

    def __init__(self, max_shapes: int = MAX_SHAPES) -> None:
        self.max_shapes = max_shapes
        self._shapes: OrderedDict[str, list[int]] = OrderedDict()  # shape -> [requests, wasted]
        self.wasted = 0  # no lift is computed until a request was wasted
        self._lock = threading.Lock()

    def observe(self, url: str, wasted: bool) -> None:
        """A request of ``url`` was written; ``wasted``: a redirect to a URL already known."""
        with self._lock:
            for shape in url_shapes(url):
                counts = self._counts(shape)
                counts[0] += 1
                counts[1] += wasted
            self.wasted += wasted

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

    def _counts(self, shape: str) -> list[int]:
        counts = self._shapes.get(shape)
        if counts is None:
            counts = self._shapes[shape] = [0, 0]
            if len(self._shapes) > self.max_shapes:
                self._shapes.popitem(last=False)
        else:
            self._shapes.move_to_end(shape)
        return counts
