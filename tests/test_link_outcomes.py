"""Link outcomes: the crawl learns which link texts led to relevant pages
(models/link_outcomes.py)."""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest
from sklearn.feature_extraction.text import CountVectorizer
from sklearn.naive_bayes import MultinomialNB

from jlse.models.link_outcomes import MIN_PER_CLASS, LinkOutcomes
from jlse.models.link_tokens import link_text_tokens
from jlse.models.strategies import LearnedTunnelling
from jlse.models.strategy_catalog import make_strategy
from jlse.records import CrawlTask, FetchRecord, Outcome
from jlse.topic import build_topic_model, load_topic
from jlse.workers.pipeline import PagePipeline, PageResult, _Stopwatch

METALS = ["gold", "copper", "silver", "zinc", "nickel", "mine", "ounce", "tonnes"]
OTHERS = ["football", "cup", "election", "vote", "film", "actor", "tonnes", "week"]


def _headlines(words: list[str], count: int, rng: random.Random) -> list[list[str]]:
    return [rng.sample(words, 4) for _ in range(count)]


def test_not_ready_until_both_classes_hold_enough_links() -> None:
    outcomes = LinkOutcomes()
    for _ in range(MIN_PER_CLASS):
        outcomes.observe(["gold", "price"], 1.0)
    for _ in range(MIN_PER_CLASS - 1):
        outcomes.observe(["football"], 0.0)
    assert outcomes.relevance([("gold",)]) is None
    outcomes.observe([], 0.0)  # a link without text teaches nothing
    assert outcomes.relevance([("gold",)]) is None
    outcomes.observe(["football"], 0.0)
    assert outcomes.relevance([("gold",)]) is not None


def test_posteriors_are_a_multinomial_nb_of_the_followed_links() -> None:
    """Soft labels: a link weighs w for the relevant class and 1 - w for the other, as a
    weighted multinomial NB counts it."""
    rng = random.Random(3)
    links = _headlines(METALS, 40, rng) + _headlines(OTHERS, 60, rng)
    labels = [1.0] * 30 + [0.6] * 10 + [0.0] * 55 + [0.25] * 5
    outcomes = LinkOutcomes()
    for tokens, label in zip(links, labels, strict=True):
        outcomes.observe(tokens, label)
    vectorizer = CountVectorizer(analyzer=lambda tokens: tokens)
    counts = vectorizer.fit_transform(links + links)
    classes = [1] * len(links) + [0] * len(links)
    weights = labels + [1.0 - label for label in labels]
    reference = MultinomialNB(alpha=1.0).fit(counts, classes, sample_weight=weights)
    queries = [("gold", "mine"), ("football", "cup", "tonnes"), ("tonnes",), ("silver", "vote")]
    expected = reference.predict_proba(vectorizer.transform(queries))[:, 1]
    assert outcomes.relevance(queries) == pytest.approx(expected, rel=1e-9)
    # a word no followed link held counts for neither class: only the prior is left
    assert outcomes.relevance([("unheard",)])[0] == pytest.approx(sum(labels) / len(labels))


def test_each_token_keeps_its_own_evidence() -> None:
    outcomes = LinkOutcomes()
    for i in range(3000):
        outcomes.observe([f"word{i}", "common"], float(i % 2 == 0))
    posteriors = outcomes.relevance([("word0",), ("word1",), ("word2998",)])
    assert posteriors[0] > 0.5 > posteriors[1]
    assert posteriors[2] > 0.5


class _SamplesCannotTell:
    """A link-text model that judges every link alike (the samples lack the crawl's words)."""

    def __call__(self, anchors, contexts) -> np.ndarray:
        link_text_tokens(anchors, contexts)  # as the real model, it reads the cached tokens
        return np.full(len(anchors), 0.5)


class _Evidence:
    def evidence(self, anchors, urls, contexts):
        return np.full(len(urls), 0.2), np.zeros(len(urls))


def _strategy(link_outcomes: bool) -> LearnedTunnelling:
    return LearnedTunnelling(_Evidence(), link_text_relevance=_SamplesCannotTell(),
                             link_text_weight=0.7, link_outcomes=link_outcomes)


def test_jlse_ranks_links_by_where_links_like_them_led() -> None:
    anchors = ["copper mine output rises", "cup final tickets sold"]
    contexts = ["", ""]
    urls = ["http://a.test/1", "http://a.test/2"]
    rng = random.Random(5)
    learning, fixed = _strategy(True), _strategy(False)
    for strategy in (learning, fixed):
        for tokens in _headlines(METALS, 30, rng):
            strategy.observe_followed_link(" ".join(tokens), 1.0)
        for tokens in _headlines(OTHERS, 30, rng):
            strategy.observe_followed_link(" ".join(tokens), 0.0)
        strategy.observe_followed_link("gold gold gold", None)  # not judged: not learnt
    assert learning.outcomes.links == [30, 30]
    learnt = learning.score_links(0.9, 1, anchors, urls, contexts)
    assert learnt[0] > learnt[1]
    plain = fixed.score_links(0.9, 1, anchors, urls, contexts)
    assert plain[0] == plain[1]


@pytest.fixture(scope="module")
def phones(sandbox_web, tmp_path_factory):
    topic = load_topic(sandbox_web.write_topic_dir(
        "phones", tmp_path_factory.mktemp("topic") / "phones"))
    truth = next(t for t in sandbox_web.iter_truth()
                 if t.topic == "phones" and t.is_target and t.crawlable)
    return topic, build_topic_model(topic), truth.url, sandbox_web.page_bytes(truth.url)


@pytest.mark.parametrize("enabled", [True, False])
def test_the_pipeline_teaches_the_link_that_led_to_each_page(phones, enabled) -> None:
    topic, model, url, body = phones
    settings = replace(topic.settings, link_outcomes=enabled)
    strategy = make_strategy("jlse", settings, model)
    pipeline = PagePipeline(settings, None, None, strategy, model, lambda *_: 0)
    for anchor in ("new phone review", ""):
        task = CrawlTask(url=url, url_id=1, depth=2, anchor_text=anchor, context="")
        result = PageResult(task, fetch=FetchRecord(1, url, Outcome.OK, fetched_at=0.0))
        pipeline._handle_page(task, body.decode("utf-8", "replace"), result, _Stopwatch())
    if not enabled:
        assert strategy.outcomes is None
        return
    weight = min(1.0, strategy.page_weight(result.fetch.relevance))  # the soft label
    assert strategy.outcomes.links == pytest.approx([1 - weight, weight])  # the seed: no text
    assert set(strategy.outcomes.counts) == {"new", "phone", "review"}
