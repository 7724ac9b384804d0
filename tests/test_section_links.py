"""Section links (workers/section_links.py): which links are a listing's next pages, how a page
handled by the pipeline with the ``jlse`` strategy floors them, and which pages it expands."""

from __future__ import annotations

from dataclasses import replace

import pytest

from jlse.models.strategy_catalog import make_strategy
from jlse.records import CrawlTask, FetchRecord, Link, Outcome
from jlse.scheduler.urls import host_of
from jlse.topic import build_topic_model, load_topic
from jlse.workers.charset import decode_html
from jlse.workers.pipeline import PagePipeline, PageResult, _Stopwatch
from jlse.workers.section_links import is_next_page


@pytest.mark.parametrize(("link_url", "anchor", "next_page"), [
    ("http://h.test/forum/graphics/page-2.html", "2 Next", True),
    ("http://h.test/forum/graphics/page-3.html", "3", True),
    ("http://h.test/mac/?page=4", " 4 ", True),
    ("http://h.test/list?p=2", "Next »", True),
    ("http://h.test/list?p=2", "下一页", True),
    ("http://h.test/list?p=2", "›", True),
    ("http://other.test/list?p=2", "2", False),  # another host
    ("http://h.test/story/1993.html", "1993", False),  # a year, not a page number
    ("http://h.test/news/rec/", "Recreation More posts", False),
    ("http://h.test/thread/12.html", "Re: Next generation graphics", False),
])
def test_next_pages(link_url: str, anchor: str, next_page: bool) -> None:
    link = Link(url=link_url, anchor_text=anchor)
    assert is_next_page("http://h.test/forum/graphics/", link) is next_page


@pytest.fixture(scope="module")
def phones(sandbox_web, tmp_path_factory):
    """The sandbox's phones topic and the HTML of 4 target pages of each phones site, by URL
    (site layouts differ: some put articles in sections, /budget/4002.html, some do not)."""
    topic = load_topic(sandbox_web.write_topic_dir(
        "phones", tmp_path_factory.mktemp("topic") / "phones"))
    per_site: dict[str, list[str]] = {}
    for truth in sandbox_web.iter_truth():
        if truth.topic == "phones" and truth.is_target and truth.crawlable:
            per_site.setdefault(truth.site, []).append(truth.url)
    targets = [url for urls in per_site.values() for url in urls[:4]]
    pages = {url: decode_html(sandbox_web.page_bytes(url), None)[0] for url in targets}
    return topic, build_topic_model(topic), pages


def handled(topic, model, url: str, html: str, strategy_name: str = "jlse",
            **settings) -> PageResult:
    settings = replace(topic.settings, **settings)
    strategy = make_strategy(strategy_name, settings, model)
    pipeline = PagePipeline(settings, None, None, strategy, model, lambda *_: 0)
    task = CrawlTask(url=url, url_id=1, priority=1.0, depth=2)
    result = PageResult(task, fetch=FetchRecord(1, url, Outcome.OK, fetched_at=0.0))
    pipeline._handle_page(task, html, result, _Stopwatch())
    return result


def test_jlse_expands_a_relevant_target_page_whole(phones):
    """The paper follows no link of a target page; jlse follows them all, its own site's
    articles included (on news and forum sites the articles a story resembles)."""
    topic, model, pages = phones
    expanded = 0
    for url, html in pages.items():
        for site_optimism in (0.3, -1.0):  # with and without the site bandit
            result = handled(topic, model, url, html, site_optimism=site_optimism)
            record = result.fetch
            if not (record.is_target and record.relevance >= topic.settings.relevance_threshold):
                continue
            own_site = [link for link in result.links if host_of(link.url) == host_of(url)]
            assert len(own_site) >= 3, f"{url}: its own site's links were not followed"
            expanded += 1
    assert expanded >= 6, "too few relevant target pages"


def test_the_papers_strategies_follow_no_link_of_a_target_page(phones):
    topic, model, pages = phones
    results = [handled(topic, model, url, html, strategy_name="jlse-paper")
               for url, html in pages.items()]
    targets = [result for result in results if result.fetch.is_target]
    assert len(targets) >= 5
    assert all(result.links == [] for result in targets)
    assert any(handled(topic, model, url, html, strategy_name="jlse-paper",
                       expand_targets=True).links for url, html in pages.items())


LISTING = """<html><head><title>Flagship phones: reviews</title></head><body>
<h1>Flagship phones</h1><p>smartphone review battery camera screen android phone 5g handset</p>
<ul><li><a href="/flagship/1.html">Phone review: a new 5g handset</a></li>
<li><a href="/about.html">Contact us</a></li></ul>
<div class="pager"><a href="/flagship/?page=2">2</a> <a href="/flagship/?page=3">3</a>
<a href="/flagship/?page=2">Next</a></div></body></html>"""


def test_a_relevant_listing_gives_its_next_pages_the_floor(phones):
    topic, model, _ = phones
    url = "http://shop.test/flagship/"
    result = handled(topic, model, url, LISTING)
    relevance = result.fetch.relevance
    assert relevance >= topic.settings.relevance_threshold and not result.fetch.is_target
    by_url = {link.url: link.priority for link in result.links}
    floor = relevance ** topic.settings.relevance_exponent * topic.settings.section_links
    assert by_url["http://shop.test/flagship/?page=2"] >= floor - 1e-12
    assert by_url["http://shop.test/flagship/?page=3"] >= floor - 1e-12
    off = {link.url: link.priority
           for link in handled(topic, model, url, LISTING, section_links=0.0).links}
    assert off["http://shop.test/flagship/?page=3"] < floor  # what the anchor "3" earns alone
    assert by_url["http://shop.test/about.html"] == off["http://shop.test/about.html"]  # as scored


PASTA = ("<html><head><title>Pasta</title></head><body><article><h1>Fresh pasta at home</h1>"
         + "<p>" + " ".join(["Knead the flour and eggs into a smooth dough, rest it, roll it thin"
                            " and cut it into ribbons for a tomato sauce."] * 12) + "</p>"
         + '</article><a href="/recipes/">Recipes</a></body></html>')


def test_every_page_is_told_detail_or_hub_and_targets_stay_relevant_details(phones):
    """The site bandit learns a site's harvest from its detail pages (``PageResult.detail``),
    relevant or not; ``is_target`` is still a relevant detail page."""
    topic, model, pages = phones
    article = handled(topic, model, "http://food.test/pasta.html", PASTA)
    assert article.fetch.relevance < topic.settings.relevance_threshold
    assert article.detail is True and article.fetch.is_target is False
    listing = handled(topic, model, "http://shop.test/flagship/", LISTING)
    assert listing.detail is False and listing.fetch.is_target is False
    relevant = [handled(topic, model, url, html) for url, html in pages.items()]
    assert all(result.fetch.is_target == (result.detail and result.fetch.relevance
                                          >= topic.settings.relevance_threshold)
               for result in relevant)
    assert any(result.fetch.is_target for result in relevant)
