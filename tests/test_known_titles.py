"""Links that name a page the crawl has already judged (models/known_titles.py) and how the
default jlse strategy ranks them."""

from __future__ import annotations

import math

import numpy as np

from jlse.models.known_titles import KnownTitles, title_words
from jlse.models.strategies import LearnedTunnelling
from jlse.models.strategy_catalog import make_strategy
from jlse.models.topic_model import TopicModel, TopicSamples
from jlse.records import NewLink
from jlse.settings import Settings


def test_title_words_drop_reply_markers_and_split_han_characters() -> None:
    assert title_words("Re: RE: Buying a high-speed modem") == ["buying", "a", "high", "speed",
                                                                "modem"]
    assert title_words("Fwd: 2 GB disk") == ["2", "gb", "disk"]
    assert title_words("铜价上涨 copper") == ["铜", "价", "上", "涨", "copper"]


def anchors(*texts: str) -> list[NewLink]:
    return [NewLink(f"http://b.test/{n}", 7, 2, anchor_text=text) for n, text in enumerate(texts)]


def test_an_anchor_names_a_title_it_begins_or_that_begins_it_even_cut_mid_word() -> None:
    titles = KnownTitles()
    titles.observe("Thai tin exports rise in January", 1.0)
    titles.observe("Re: Can I put a floppy in an old PC", 0.0)
    found = titles.name(anchors("Thai tin exports rise in january thailand said",  # longer
                                "Thai tin exports rise in janu",  # cut short, mid-word
                                "Can I put a floppy",  # a reply's anchor without the marker
                                "Thai tin exports fall in January",  # another story
                                "Thai tin exports"))  # too few words to name a page
    assert found[0] == 1.0 and found[1] == 1.0 and found[2] == 0.0
    assert math.isnan(found[3]) and math.isnan(found[4])


def test_short_titles_name_nothing_and_conflicting_copies_average() -> None:
    titles = KnownTitles()
    titles.observe("World news", 1.0)
    titles.observe("Oil prices rise on OPEC cut", 1.0)
    titles.observe("Oil prices rise on OPEC cut", 0.0)  # judged again: the newest counts
    titles.observe("Oil prices rise on OPEC cut talks", 1.0)
    found = titles.name(anchors("World news", "Oil prices rise on OPEC"))
    assert math.isnan(found[0]) and found[1] == 0.5


def test_a_han_character_counts_half_a_word() -> None:
    titles = KnownTitles()
    titles.observe("铜价上涨", 1.0)  # four characters: two words, too short to name a page
    titles.observe("智利铜矿产量下降三成", 1.0)
    found = titles.name(anchors("铜价上涨", "智利铜矿产量下降三成", "智利铜矿产量"))
    assert math.isnan(found[0]) and found[1] == 1.0 and math.isnan(found[2])


def test_titles_and_links_are_bounded_oldest_first() -> None:
    titles = KnownTitles(max_titles=2, max_pending=2)
    for n in range(3):
        titles.observe(f"story number {n} of the day", 1.0)
    assert len(titles) == 2
    found = titles.name(anchors(*[f"story number {n} of the day" for n in range(3)]))
    assert math.isnan(found[0]) and found[1] == 1.0 and found[2] == 1.0
    titles.name(anchors("first link of the page", "second link of the page",
                        "third link of the page"))
    assert titles.named_by("first link of the page") == []
    assert titles.named_by("third link of the page") == [("http://b.test/2", 7, 2)]
    for n in range(3):
        titles.rank(f"http://c.test/{n}")
    assert [titles.ranked(f"http://c.test/{n}") for n in range(3)] == [False, True, True]


def link(url: str, anchor: str, priority: float = 0.05) -> NewLink:
    return NewLink(url, 7, 2, anchor_text=anchor, context="more on this", priority=priority)


def test_links_queued_before_their_namesake_is_judged_are_named_by_it_once() -> None:
    titles = KnownTitles()
    titles.name(anchors("Copper output falls in Chile", "Sugar crop seen lower this year"))
    titles.fetched("http://b.test/1")
    assert titles.named_by("Sugar crop seen lower this year") == []  # fetched: forgotten
    assert titles.named_by("Copper output falls in Chile, miners say") == [("http://b.test/0", 7, 2)]
    assert titles.named_by("Copper output falls in Chile, miners say") == []


class FixedEvidence:
    def evidence(self, anchors, urls, contexts):
        return np.full(len(urls), 0.2), np.zeros(len(urls))


def jlse(**options) -> LearnedTunnelling:
    return LearnedTunnelling(FixedEvidence(), site_optimism=0.3, known_titles=True,
                             relevance_exponent=4, **options)


def test_a_link_naming_a_page_judged_relevant_is_ranked_by_that_pages_weight() -> None:
    strategy = jlse()
    strategy.observe_result("http://a.test/s/1", 0.9, [], title="Gold mine reopens in Ghana")
    strategy.observe_result("http://a.test/s/2", 0.1, [], title="Bank raises its dividend again")
    links = [link("http://b.test/s/1", "Gold mine reopens in Ghana"),
             link("http://b.test/s/2", "Bank raises its dividend again", priority=0.5),
             link("http://b.test/s/3", "Zinc stocks climb at the LME")]
    strategy.observe_result("http://b.test/", 0.9, links, title="Markets")
    assert [round(item.priority, 4) for item in links] == [round(0.9 ** 4, 4), 0.0, 0.05]


def test_a_queued_link_is_raised_when_the_page_it_names_is_judged_relevant() -> None:
    strategy = jlse()
    waiting = [link("http://b.test/s/9", "Zinc stocks climb at the LME")]
    strategy.observe_result("http://b.test/", 0.9, waiting, title="Markets")
    found = [link("http://c.test/s/4", "Nickel prices ease")]
    strategy.observe_result("http://a.test/s/9", 0.99, found, title="Zinc stocks climb at the LME")
    raised = found[1:]
    assert [item.url for item in raised] == ["http://b.test/s/9"]
    assert raised[0].priority == 0.99 ** 4 and raised[0].parent_id == 7
    assert waiting[0].priority == 0.05  # the queued row is raised by a new add, not in place
    strategy.observe_result("http://a.test/s/10", 0.99, [], title="Zinc stocks climb at the LME")
    assert len(found) == 2  # named once


def test_a_page_judged_irrelevant_raises_nothing() -> None:
    strategy = jlse()
    strategy.observe_result("http://b.test/", 0.9, [link("http://b.test/s/9", "Zinc stocks climb at the LME")],
                            title="Markets")
    found: list[NewLink] = []
    strategy.observe_result("http://a.test/s/9", 0.2, found, title="Zinc stocks climb at the LME")
    assert found == []


def test_a_named_link_is_not_lowered_by_its_url_shapes_harvest_at_pop() -> None:
    strategy = jlse(redirect_waste=True, shape_harvest=True)
    strategy.lift_at_pop()
    for n in range(30):  # the shape /markets/N.html judged irrelevant on a.test
        strategy.observe_result(f"http://a.test/markets/{n}.html", 0.01, [])
    strategy.observe_result("http://a.test/story/1.html", 0.99, [], title="Tin council talks resume")
    shape_lift = strategy.pop_lift("http://a.test/markets/100.html")
    named = [link("http://a.test/markets/101.html", "Tin council talks resume")]
    strategy.observe_result("http://a.test/story/2.html", 0.99, named, title="Tin market quiet")
    assert shape_lift < 0.5
    assert strategy.pop_lift("http://a.test/markets/101.html") == 1.0


def test_known_titles_are_on_by_default() -> None:
    model = TopicModel().fit(TopicSamples(relevant=["smartphone review battery camera"] * 3,
                                          irrelevant=["pasta recipe tomato sauce"] * 3,
                                          anchors=[("phone review", 1), ("pasta", 0)]))
    assert make_strategy("jlse", Settings(), model).titles is not None
    assert make_strategy("jlse", Settings(known_titles=False), model).titles is None
