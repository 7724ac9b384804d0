"""Redirects to known URLs, learnt per URL shape (models/redirect_waste.py)."""

from __future__ import annotations

import pytest

from jlse.models.redirect_waste import (
    KNOWN_TARGET,
    NEW_TARGET,
    PRIOR_REQUESTS,
    RedirectWaste,
    url_shapes,
)
from jlse.records import NewLink


def test_shapes_keep_the_host_and_make_digits_n() -> None:
    assert url_shapes("http://Wire.test/s/1234") == ("wire.test/s/N", "*/s/N")
    assert url_shapes("https://a.test/world/story-12.html?p=7#top") == (
        "a.test/world/story-N.html?p=N", "*/world/story-N.html?p=N")
    assert url_shapes("http://a.test") == ("a.test", "*")


def test_no_waste_no_lift() -> None:
    waste = RedirectWaste()
    for i in range(20):
        waste.observe(f"http://a.test/s/{i}", waste=0.0)
    assert waste.lift("http://a.test/s/99") == 1.0


def _expected(host: tuple[float, float], path: tuple[float, float]) -> float:
    path_yield = 1 - path[1] / (path[0] + 1)
    return (host[0] - host[1] + PRIOR_REQUESTS * path_yield) / (host[0] + PRIOR_REQUESTS)


def test_lift_is_the_pages_per_request() -> None:
    waste = RedirectWaste()
    waste.observe("http://a.test/s/1", waste=KNOWN_TARGET)
    assert waste.lift("http://a.test/s/2") == pytest.approx(_expected((1, 1), (1, 1)))
    for i in range(2, 5):
        waste.observe(f"http://a.test/s/{i}", waste=KNOWN_TARGET)
    assert waste.lift("http://a.test/s/9") == pytest.approx(_expected((4, 4), (4, 4)))
    assert waste.lift("http://a.test/s/9") < 0.1
    for i in range(5, 9):
        waste.observe(f"http://a.test/s/{i}", waste=0.0)
    assert waste.lift("http://a.test/s/9") == pytest.approx(_expected((8, 4), (8, 4)))
    assert waste.lift("http://a.test/world/story-3.html") == 1.0  # another shape
    waste.observe("http://a.test/s/9", waste=NEW_TARGET)  # one page for two requests
    assert waste.lift("http://a.test/s/10") == pytest.approx(_expected((9, 4.5), (9, 4.5)))


def test_a_host_shape_starts_from_its_path_shape_over_every_host() -> None:
    waste = RedirectWaste()
    for i in range(3):
        waste.observe(f"http://a.test/s/{i}", waste=KNOWN_TARGET)
    assert waste.lift("http://b.test/s/7") == pytest.approx(0.25)  # b: a's path shape alone
    waste.observe("http://b.test/s/7", waste=0.0)  # b's own request weighs in
    assert waste.lift("http://b.test/s/8") == pytest.approx(_expected((1, 0), (4, 3)))
    assert 0.25 < waste.lift("http://b.test/s/8") < 1.0


def test_shapes_are_bounded() -> None:
    waste = RedirectWaste(max_shapes=4)
    waste.observe("http://a.test/s/1", waste=KNOWN_TARGET)
    for name in "bcdefg":
        waste.observe(f"http://a.test/{name}", waste=0.0)
    assert len(waste._shapes) == 4
    assert waste.lift("http://a.test/s/2") == 1.0  # forgotten


def test_the_jlse_strategy_lowers_links_of_wasteful_shapes(tmp_path) -> None:
    from jlse.models.strategies import LearnedTunnelling

    strategy = LearnedTunnelling(evaluator=None, redirect_waste=True)
    for i in range(4):
        strategy.observe_request(f"http://a.test/s/{i}", KNOWN_TARGET)
    strategy.observe_request("http://a.test/news/1.html", 0.0)
    links = [NewLink(url="http://a.test/s/77", parent_id=1, depth=1, priority=0.5),
             NewLink(url="http://a.test/news/2.html", parent_id=1, depth=1, priority=0.5)]
    strategy.observe_result("http://a.test/", 0.9, links)
    assert links[0].priority == pytest.approx(0.5 * _expected((4, 4), (4, 4)))
    assert links[1].priority == 0.5
