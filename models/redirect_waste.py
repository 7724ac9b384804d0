"""Requests that bring no page of their own: redirects and failed requests, learnt per URL
shape (docs/strategies.md, "Self-training and redirects").

A short link (``/s/1234``), a tracking or a canonicalising redirect costs a request and gives
no page: its target takes a second request, and when the target is a URL the crawl already
queued or fetched, the redirect gave nothing at all. Such links look like any other to the link
evidence (their anchors are the story's), so the crawl learns, per URL shape (host and path with
every run of digits made ``N``), the pages its requests yield: a page 1, a redirect to a new URL
1/2 (one page for two requests), a redirect to a known URL 0, and so does a request that
failed (an HTTP error after its retries, a broken redirect: a site's dead links, such as
``/missing/N.html``, look alike too; a timeout or a refused connection is its host's trouble,
left to the host ledger). Short links look alike across
sites, so the estimate is hierarchical: over every host, a path shape p (``*/s/N``) yields
``y_p = 1 - w_p / (n_p + 1)`` pages per request (``n_p`` requests written so far, ``w_p`` the
sum of what they fell short of a page, one request of yield 1 as the prior), and a host's shape
s yields ``(n_s - w_s + A y_p) / (n_s + A)``, its path shape's yield weighing as A = 2 requests.
A link of shape s gets its priority multiplied by that yield. A shape that never redirected
keeps its links' priorities; one whose every request redirected to known URLs falls towards 0
as evidence grows.
"""

from __future__ import annotations

import threading

from jlse.models.url_shapes import MAX_SHAPES, ShapeCounts, url_shapes

__all__ = ["KNOWN_TARGET", "NEW_TARGET", "NO_PAGE", "RedirectWaste", "url_shapes"]

KNOWN_TARGET, NEW_TARGET = 1.0, 0.5  # what a redirect's request falls short of a page
NO_PAGE = 1.0  # what a failed request (an HTTP error, a broken redirect) falls short of one
PRIOR_REQUESTS = 2.0  # A: the weight of a path shape's yield in a host's shape's estimate


class RedirectWaste:
    """Per URL shape: requests written and what they fell short of a page each."""

    def __init__(self, max_shapes: int = MAX_SHAPES) -> None:
        self._shapes = ShapeCounts(max_shapes)  # shape -> (requests, waste)
        self.wasted = 0.0  # no lift is computed until a request fell short
        self._lock = threading.Lock()

    def observe(self, url: str, waste: float) -> None:
        """A request of ``url`` was written; ``waste``: what it fell short of a page (0 for a
        page, :data:`NEW_TARGET` or :data:`KNOWN_TARGET` for a redirect)."""
        with self._lock:
            for shape in url_shapes(url):
                self._shapes.add(shape, 1.0, waste)
            self.wasted += waste

    def lift(self, url: str, shapes: tuple[str, str] | None = None) -> float:
        """The pages per request of the shape of ``url`` (module docstring); 1.0 while no
        request fell short. ``shapes``: ``url_shapes(url)`` when the caller has them."""
        if not self.wasted:
            return 1.0
        host_shape, path_shape = shapes or url_shapes(url)
        requests, waste = self._shapes.get(path_shape)
        path_yield = 1.0 - waste / (requests + 1.0)
        requests, waste = self._shapes.get(host_shape)
        return (requests - waste + PRIOR_REQUESTS * path_yield) / (requests + PRIOR_REQUESTS)
