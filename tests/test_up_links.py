"""A relevant target page (not expanded) gives only its up-links, at the strategy's floor."""

from __future__ import annotations

from dataclasses import replace

import pytest

from jlse.models.strategy_catalog import make_strategy
from jlse.records import CrawlTask, FetchRecord, Outcome
from jlse.scheduler.urls import is_up_link
from jlse.topic import build_topic_model, load_topic
from jlse.workers.charset import decode_html
from jlse.workers.pipeline import PagePipeline, PageResult, _Stopwatch


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


def test_a_relevant_target_gives_its_up_links_only(phones):
    topic, model, pages = phones
    climbed = 0
    for url, html in pages.items():
        result = handled(topic, model, url, html)
        record = result.fetch
        if not (record.is_target and record.relevance >= topic.settings.relevance_threshold):
            continue  # expanded whole (or judged irrelevant): not what this test is about
        assert all(is_up_link(url, link.url) for link in result.links)
        floor = record.relevance * topic.settings.target_up_links
        assert all(link.priority >= floor - 1e-12 for link in result.links)
        climbed += bool(result.links)
    assert climbed >= 3, "too few relevant target pages with an up-link"


def test_no_up_links_when_turned_off(phones):
    topic, model, pages = phones
    results = [handled(topic, model, url, html, target_up_links=0.0)
               for url, html in pages.items()]
    targets = [result for result in results if result.fetch.is_target]
    assert len(targets) >= 5
    assert all(result.links == [] for result in targets)
