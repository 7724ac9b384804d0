"""Section links (workers/section_links.py): which links they are, and how a page handled by
the pipeline with the ``jlse`` strategy floors them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from jlse.models.strategy_catalog import make_strategy
from jlse.records import CrawlTask, FetchRecord, Link, Outcome
from jlse.scheduler.urls import host_of
from jlse.topic import build_topic_model, load_topic
from jlse.workers.charset import decode_html
from jlse.workers.pipeline import PagePipeline, PageResult, _Stopwatch
from jlse.workers.section_links import is_next_page, is_up_link


@pytest.mark.parametrize(("page", "link", "up"), [
    ("http://h.test/forum/sale/msg340.html", "http://h.test/forum/sale/", True),
    ("http://h.test/forum/sale/msg340.html", "http://h.test/forum/", True),
    ("http://h.test/forum/sale/msg340.html", "http://h.test/", False),  # the home page
    ("http://H.test/a/b/", "http://h.test/a/", True),  # a section page's parent section
    ("http://h.test/a/b.html", "http://h.test/c/", False),  # another branch
    ("http://h.test/a/b.html", "http://other.test/a/", False),  # another host
    ("http://h.test/a/b.html", "http://h.test/a/?page=2", False),  # a listing with a query
    ("http://h.test/a/b.html", "http://h.test/a/c.html", False),  # a sibling, not a section
    ("http://h.test/a/", "http://h.test/a/", False),  # the page itself
    ("http://h.test/a/b.html", "http://[::1/a/", False),  # unparseable
])
def test_up_links(page: str, link: str, up: bool) -> None:
    assert is_up_link(page, link) is up


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


def handled(topic, model, url: str, html: str, **settings) -> PageResult:
    settings = replace(topic.settings, **settings)
    strategy = make_strategy("jlse", settings, model)
    pipeline = PagePipeline(settings, None, None, strategy, model, lambda *_: 0)
    task = CrawlTask(url=url, url_id=1, priority=1.0, depth=2)
    result = PageResult(task, fetch=FetchRecord(1, url, Outcome.OK, fetched_at=0.0))
    pipeline._handle_page(task, html, result, _Stopwatch())
    return result


def test_without_the_site_bandit_a_relevant_target_gives_its_up_links_only(phones):
    topic, model, pages = phones
    climbed = 0
    for url, html in pages.items():
        result = handled(topic, model, url, html, site_optimism=-1.0)
        record = result.fetch
        if not (record.is_target and record.relevance >= topic.settings.relevance_threshold):
            continue  # expanded whole (or judged irrelevant): not what this test is about
        assert all(is_up_link(url, link.url) for link in result.links)
        floor = record.relevance ** topic.settings.relevance_exponent * topic.settings.section_links
        assert all(link.priority >= floor - 1e-12 for link in result.links)
        climbed += bool(result.links)
    assert climbed >= 3, "too few relevant target pages with an up-link"


def test_with_the_site_bandit_a_target_gives_its_links_to_other_sites_too(phones):
    topic, model, pages = phones
    left = 0
    for url, html in pages.items():
        result = handled(topic, model, url, html, site_optimism=0.3)
        record = result.fetch
        if not (record.is_target and record.relevance >= topic.settings.relevance_threshold):
            continue
        host = host_of(url)
        up = [link for link in result.links if is_up_link(url, link.url)]
        off = [link for link in result.links if host_of(link.url) != host]
        assert len(up) + len(off) == len(result.links)  # no other link of its own site
        floor = record.relevance ** topic.settings.relevance_exponent * topic.settings.section_links
        assert all(link.priority >= floor - 1e-12 for link in up)
        left += bool(off)
    assert left >= 3, "too few relevant target pages with a link to another site"


def test_no_up_links_when_turned_off(phones):
    topic, model, pages = phones
    results = [handled(topic, model, url, html, section_links=0.0)
               for url, html in pages.items()]
    targets = [result for result in results if result.fetch.is_target]
    assert len(targets) >= 5
    assert all(result.links == [] for result in targets)


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
