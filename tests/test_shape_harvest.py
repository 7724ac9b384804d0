"""The harvest of URL shapes, learnt during the crawl (models/shape_harvest.py)."""

from __future__ import annotations

import pytest

from jlse.models.shape_harvest import PRIOR_HOST_PAGES, PRIOR_PATH_PAGES, ShapeHarvest
from jlse.models.strategies import LearnedTunnelling
from jlse.records import NewLink


def _crawl_harvest(pages: int, relevant: int) -> float:
    return (relevant + 1.0) / (pages + 2.0)


def _stories_and_listings(shapes: ShapeHarvest, host: str = "a.test") -> None:
    """Six relevant stories and four irrelevant listings of ``host``."""
    for i in range(6):
        shapes.observe(f"http://{host}/business/story-{i}.html", relevant=True)
    for i in range(4):
        shapes.observe(f"http://{host}/business/index{i}.html", relevant=False)


def test_a_shape_judged_irrelevant_is_lowered_and_a_good_one_kept() -> None:
    shapes = ShapeHarvest()
    _stories_and_listings(shapes)
    crawl = _crawl_harvest(10, 6)
    path = PRIOR_PATH_PAGES * crawl / (4 + PRIOR_PATH_PAGES)  # */business/indexN.html: 0 of 4
    listing = PRIOR_HOST_PAGES * path / (4 + PRIOR_HOST_PAGES) / crawl
    assert shapes.lift("http://a.test/business/index9.html") == pytest.approx(listing)
    assert listing < 0.1
    assert shapes.lift("http://a.test/business/story-99.html") > 1.0  # better than the crawl


def test_a_path_shape_learnt_on_one_site_is_the_prior_of_another_site_that_paid() -> None:
    shapes = ShapeHarvest()
    _stories_and_listings(shapes, "a.test")
    shapes.observe("http://b.test/", relevant=True)  # b has given a relevant page
    crawl = _crawl_harvest(11, 7)
    path = PRIOR_PATH_PAGES * crawl / (4 + PRIOR_PATH_PAGES)
    assert shapes.lift("http://b.test/business/index2.html") == pytest.approx(path / crawl)


def test_a_site_that_has_not_paid_is_left_to_the_site_bandit() -> None:
    shapes = ShapeHarvest()
    _stories_and_listings(shapes, "a.test")
    shapes.observe("http://b.test/business/story-1.html", relevant=False)
    assert shapes.lift("http://b.test/business/index2.html") == 1.0  # entered, none relevant
    assert shapes.lift("http://c.test/business/index2.html") == 1.0  # not entered
    assert ShapeHarvest().lift("http://a.test/anything") == 1.0  # nothing judged yet


def test_shapes_are_bounded() -> None:
    shapes = ShapeHarvest(max_shapes=4)
    for i in range(10):
        shapes.observe(f"http://a.test/kind{chr(97 + i)}/1.html", relevant=False)
    assert len(shapes._shapes) == 4


def _links() -> list[NewLink]:
    return [NewLink(url="http://a.test/business/index7.html", parent_id=1, depth=1, priority=0.6),
            NewLink(url="http://a.test/business/story-70.html", parent_id=1, depth=1,
                    priority=0.6)]


def test_the_jlse_strategy_lowers_links_of_shapes_judged_irrelevant_when_queued() -> None:
    """A distributed worker lifts links when it writes them (its dispatcher pops in Redis)."""
    strategy = LearnedTunnelling(evaluator=None, shape_harvest=True)
    for i in range(6):
        strategy.observe_result(f"http://a.test/business/story-{i}.html", 0.9, [])
    for i in range(4):
        strategy.observe_result(f"http://a.test/business/index{i}.html", 0.1, [])
    links = _links()
    strategy.observe_result("http://a.test/business/story-6.html", 0.9, links)
    assert links[0].priority < 0.1
    assert 0.6 < links[1].priority <= 1.0  # a shape better than the crawl's, capped at 1


def test_the_embedded_runner_lifts_shapes_at_pop_only() -> None:
    strategy = LearnedTunnelling(evaluator=None, shape_harvest=True)
    strategy.lift_at_pop()
    for i in range(4):
        strategy.observe_result(f"http://a.test/business/index{i}.html", 0.1, [])
    links = _links()
    strategy.observe_result("http://a.test/business/story-6.html", 0.9, links)
    assert [link.priority for link in links] == [0.6, 0.6]  # queued as scored
    assert strategy.pop_lift("http://a.test/business/index8.html") < 0.5
    assert LearnedTunnelling(evaluator=None).pop_lift("http://a.test/business/index8.html") == 1.0
