"""Self-training of the page NB on the crawl's own pages (models/self_training.py)."""

from __future__ import annotations

import logging
import random
from dataclasses import replace

import numpy as np
import pytest
from sklearn.naive_bayes import MultinomialNB

from jlse.models import self_training
from jlse.models.persist import load_topic_model, save_topic_model
from jlse.models.self_training import SelfTrainedRelevance, refit
from jlse.models.strategy_catalog import make_strategy
from jlse.models.topic_model import TopicModel, TopicSamples
from jlse.sandbox import build_web
from jlse.topic import build_topic_model, load_topic
from jlse.workers.pipeline import PagePipeline

METALS = "gold copper zinc smelter ounces mine output tonnes prices exports producers said".split()
FOOTBALL = "football match goal league season coach players fans stadium said".split()
SOFTS = "coffee sugar cocoa crop harvest weather growers rain beans prices".split()  # no keyword
COMMON = "market report week company group year trading news official statement".split()


def _page(words: list[str], rng: random.Random, n: int = 20) -> str:
    """``n`` words of a class among 40 words every class uses."""
    return " ".join([rng.choice(words) for _ in range(n)] + [rng.choice(COMMON) for _ in range(40)])


@pytest.fixture()
def blind_topic() -> TopicModel:
    """Metals samples whose irrelevant samples lack the neighbouring softs class."""
    rng = random.Random(3)
    samples = TopicSamples(relevant=[_page(METALS, rng) for _ in range(20)],
                           irrelevant=[_page(FOOTBALL, rng) for _ in range(20)],
                           keywords=["gold", "copper", "zinc", "smelter"])
    return TopicModel().fit(samples)


def test_a_class_the_samples_lack_is_learnt_from_the_crawl(blind_topic) -> None:
    rng = random.Random(5)
    softs = _page(SOFTS, rng)
    assert blind_topic.relevance(softs) > 0.5  # the blind spot: shared words decide
    learner = SelfTrainedRelevance.of(blind_topic)
    for _ in range(120):  # the crawl meets both classes
        learner.relevance(_page(METALS, rng))
        learner.relevance(_page(SOFTS, rng))
    assert learner.labelled[0] >= 30 and learner.labelled[1] >= 100
    assert learner.relevance(_page(SOFTS, rng)) < 0.5
    assert learner.relevance(_page(METALS, rng)) > 0.5
    assert learner.relevance(_page(FOOTBALL, rng)) < 0.5
    assert blind_topic.relevance(softs) > 0.5  # the topic's own model is left as it was


def test_labels_come_from_the_sample_model_and_both_views(blind_topic) -> None:
    learner = SelfTrainedRelevance.of(blind_topic)
    rng = random.Random(8)
    assert learner._label(0.2, _page(METALS, rng)) == 0  # the NB says no: irrelevant
    assert learner._label(0.8, _page(METALS, rng)) == 1  # both say yes
    assert learner._label(0.8, _page(SOFTS, rng)) == 0  # no keyword: irrelevant
    assert learner._label(0.99, _page(SOFTS, rng)) == 0  # however sure the NB is


def test_refit_equals_a_fit_on_samples_and_pages(blind_topic) -> None:
    rng = random.Random(11)
    base = blind_topic.relevance_model_
    pages = {0: [_page(SOFTS, rng) for _ in range(5)], 1: [_page(METALS, rng) for _ in range(5)]}
    counts = ({}, {})
    for label, texts in pages.items():
        for text in texts:
            for token in text.split():
                counts[label][token] = counts[label].get(token, 0) + 1
    from collections import Counter
    model = refit(base, (Counter(counts[0]), Counter(counts[1])))
    vocabulary = model.vectorizer_.vocabulary_
    matrix = np.zeros((10, len(vocabulary)))
    for row, text in enumerate(pages[0] + pages[1]):
        for token in text.split():
            matrix[row, vocabulary[token]] += 1
    expected = MultinomialNB(alpha=base.alpha).fit(
        np.vstack([np.pad(base.class_counts_, ((0, 0), (0, len(vocabulary) - base.class_counts_.shape[1]))), matrix]),
        [0, 1] + [0] * 5 + [1] * 5)
    ratio = expected.feature_log_prob_[1] - expected.feature_log_prob_[0]
    assert np.allclose(model.word_log_ratio_, ratio)
    assert model.prior_log_odds_ == base.prior_log_odds_
    assert base.vectorizer_.vocabulary_ is not vocabulary  # the base is untouched


def test_refits_every_so_many_labelled_pages(blind_topic, monkeypatch) -> None:
    monkeypatch.setattr(self_training, "REFIT_EVERY", 10)
    learner = SelfTrainedRelevance.of(blind_topic)
    rng = random.Random(2)
    for _ in range(9):
        learner.relevance(_page(FOOTBALL, rng))
    assert learner.current is learner.base
    learner.relevance(_page(FOOTBALL, rng))
    assert learner.current is not learner.base


def _undecided(rng: random.Random, words: list[str]) -> str:
    """A page the two views disagree on: the sample NB judges it relevant (the samples know
    none of its own words), and it holds a keyword, too few for the VSM."""
    return _page(words, rng) + " copper"


def _cotraining_crawl(learner: SelfTrainedRelevance, rng: random.Random,
                      undecided_words: list[str], pages: int = 30) -> None:
    for i in range(pages):
        learner.relevance(_page(METALS, rng))
        learner.relevance(_undecided(rng, undecided_words))
        if i < 3:
            learner.relevance(_page(SOFTS, rng))  # no keyword: a pseudo-negative
    while learner._since_refit:  # end on a refit: it has judged every undecided page
        learner.relevance(_page(METALS, rng))


def test_undecided_pages_judged_irrelevant_teach_only_the_crawls_nb(blind_topic, monkeypatch) -> None:
    monkeypatch.setattr(self_training, "REFIT_EVERY", 10)
    learner = SelfTrainedRelevance.of(blind_topic)
    rng = random.Random(4)
    assert blind_topic.relevance(_undecided(rng, SOFTS)) > 0.5
    assert learner._label(0.9, _undecided(rng, SOFTS)) is None
    _cotraining_crawl(learner, rng, SOFTS)
    assert len(learner.undecided) == 30
    current, cotrained = learner.current, learner.cotrained
    assert current is not cotrained
    assert cotrained.predict_proba_tokens(list(learner.undecided)).max() < 0.5
    coffee = sum(tokens.count("coffee") for tokens in learner.undecided)
    assert coffee > 0

    def counts(model, word):  # noqa: ANN001, ANN202
        return model.class_counts_[:, model.vectorizer_.vocabulary_[word]]
    # the crawl's NB = the co-trained NB + the undecided pages, as irrelevant pages
    assert counts(current, "coffee")[0] == counts(cotrained, "coffee")[0] + coffee
    assert counts(current, "coffee")[1] == counts(cotrained, "coffee")[1]
    assert np.array_equal(current.class_counts_[1, :cotrained.class_counts_.shape[1]],
                          cotrained.class_counts_[1])


def test_undecided_pages_judged_relevant_teach_nothing(blind_topic, monkeypatch) -> None:
    """Above the cut (here the threshold: the crawl's positives' quantile is the next test's)."""
    monkeypatch.setattr(self_training, "REFIT_EVERY", 10)
    monkeypatch.setattr(self_training, "UNDECIDED_QUANTILE", 0.0)
    learner = SelfTrainedRelevance.of(blind_topic)
    rng = random.Random(9)
    ores = [word for word in METALS if word not in ("gold", "copper", "zinc", "smelter")]
    _cotraining_crawl(learner, rng, ores + ["ingot"])  # metals pages with one keyword
    assert len(learner.undecided) == 30
    assert learner.cotrained.predict_proba_tokens(list(learner.undecided)).min() >= 0.5
    assert "ingot" not in learner.current.vectorizer_.vocabulary_


def test_undecided_pages_less_relevant_than_the_crawls_positives_teach_the_irrelevant_side(
        blind_topic, monkeypatch) -> None:
    """A neighbour that shares some of the topic's words: the co-trained NB rates many of its
    pages relevant, but below nearly every page both views agreed on, so they are taken for
    irrelevant as well as those below the threshold."""
    monkeypatch.setattr(self_training, "REFIT_EVERY", 10)
    mixed = METALS[4:9] + SOFTS  # softs pages with a few metals words, none a keyword

    def irrelevant_cocoa(quantile: float) -> tuple[float, SelfTrainedRelevance]:
        monkeypatch.setattr(self_training, "UNDECIDED_QUANTILE", quantile)
        learner = SelfTrainedRelevance.of(blind_topic)
        _cotraining_crawl(learner, random.Random(6), mixed)
        model = learner.current
        return model.class_counts_[0, model.vectorizer_.vocabulary_["cocoa"]], learner

    with_quantile, learner = irrelevant_cocoa(self_training.UNDECIDED_QUANTILE)
    undecided = learner.cotrained.predict_proba_tokens(list(learner.undecided))
    assert learner.cut > 0.5
    assert ((undecided >= 0.5) & (undecided < learner.cut)).sum() >= 5  # the quantile's own
    threshold_only, learner = irrelevant_cocoa(0.0)
    assert learner.cut == 0.5
    assert with_quantile > threshold_only > 0


def test_the_oldest_undecided_pages_are_settled_past_the_words_kept(blind_topic, monkeypatch) -> None:
    monkeypatch.setattr(self_training, "REFIT_EVERY", 10)
    monkeypatch.setattr(self_training, "MAX_WORDS", 500)
    learner = SelfTrainedRelevance.of(blind_topic)
    rng = random.Random(4)
    _cotraining_crawl(learner, rng, SOFTS)
    kept = sum(map(len, learner.undecided))
    assert kept == learner._undecided_words <= 500
    assert 0 < len(learner.undecided) < 30
    assert learner.settled["coffee"] > 0  # settled as irrelevant by the co-trained NB
    assert learner.current.class_counts_[0, learner.current.vectorizer_.vocabulary_["coffee"]] \
        >= learner.settled["coffee"]


def test_the_link_text_model_of_the_crawl_learns_the_class_the_samples_lack(blind_topic) -> None:
    learner = SelfTrainedRelevance.of(blind_topic)
    anchors = ["copper smelter output rises", "coffee sugar crop harvest", "football league coach"]
    contexts = ["coffee sugar cocoa crop"] * 3  # not read: a listing's neighbours' headlines
    before = learner.link_text_relevance(anchors, contexts)
    assert before[0] > 0.5 and before[2] < 0.5
    rng = random.Random(6)
    for _ in range(120):
        learner.relevance(_page(METALS, rng))
        learner.relevance(_page(SOFTS, rng))
    after = learner.link_text_relevance(anchors, contexts)
    assert after[1] < 0.5 < after[0]  # the softs anchor, unknown to the samples, now ranks low
    assert after[1] < before[1]
    assert learner.link_text_relevance([], []).shape == (0,)


@pytest.mark.parametrize("choice", ["crawl", "samples"])
def test_the_pipeline_gives_jlse_the_link_text_model_the_settings_choose(phones, choice) -> None:
    topic, model = phones
    settings = replace(topic.settings, link_text_model=choice)
    strategy = make_strategy("jlse", settings, model)
    pipeline = PagePipeline(settings, None, None, strategy, model, lambda *_: 0)
    expected = (pipeline.self_training.link_text_relevance if choice == "crawl"
                else model.link_text_relevance)
    assert strategy.link_text_relevance == expected
    keywordless = replace(settings, self_training=False)  # nothing learns: the samples' model
    strategy = make_strategy("jlse", keywordless, model)
    PagePipeline(keywordless, None, None, strategy, model, lambda *_: 0)
    assert strategy.link_text_relevance == model.link_text_relevance


@pytest.fixture(scope="module")
def phones(sandbox_web, tmp_path_factory):
    topic = load_topic(sandbox_web.write_topic_dir(
        "phones", tmp_path_factory.mktemp("topic") / "phones"))
    return topic, build_topic_model(topic)


def test_no_self_training_without_keywords_or_a_page_nb() -> None:
    rng = random.Random(4)
    samples = TopicSamples(relevant=[_page(METALS, rng) for _ in range(10)],
                           irrelevant=[_page(FOOTBALL, rng) for _ in range(10)])
    assert SelfTrainedRelevance.of(TopicModel().fit(samples)) is None
    samples.keywords = ["gold"]
    assert SelfTrainedRelevance.of(TopicModel(page_classifier="kde-nb").fit(samples)) is None
    assert SelfTrainedRelevance.of(TopicModel(page_classifier="vsm").fit(samples)) is None
    assert SelfTrainedRelevance.of(None) is None


def test_saved_model_keeps_what_self_training_needs(tmp_path) -> None:
    directory = tmp_path / "phones"
    build_web().write_topic_dir("phones", directory)
    model = TopicModel().fit(load_topic(directory).samples)
    save_topic_model(model, tmp_path / "model")
    loaded = load_topic_model(tmp_path / "model")
    assert np.array_equal(loaded.relevance_model_.class_counts_, model.relevance_model_.class_counts_)
    assert loaded.keyword_view_ is not None
    assert SelfTrainedRelevance.of(loaded) is not None


def test_a_model_saved_before_self_training_is_stale(tmp_path, caplog) -> None:
    directory = tmp_path / "phones"
    build_web().write_topic_dir("phones", directory)
    topic = load_topic(directory)
    model = TopicModel().fit(topic.samples)
    model.keyword_view_ = None  # as a model saved before self-training
    save_topic_model(model, directory / "model")
    with caplog.at_level(logging.WARNING, logger="jlse.topic"):
        fresh = build_topic_model(topic)
    assert "trained before self-training" in caplog.text
    assert fresh.keyword_view_ is not None
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="jlse.topic"):  # off: the old model serves
        build_topic_model(load_topic(directory, {"self_training": False}))
    assert "stale" not in caplog.text


def test_the_crawl_log_says_whether_and_why_not_self_training_runs(blind_topic) -> None:
    from jlse.run import self_training_status
    from jlse.settings import Settings

    assert self_training_status(Settings(), blind_topic).startswith("on")
    assert self_training_status(Settings(self_training=False), blind_topic) == \
        "off (self_training = false)"
    rng = random.Random(3)
    samples = TopicSamples(relevant=[_page(METALS, rng) for _ in range(20)],
                           irrelevant=[_page(FOOTBALL, rng) for _ in range(20)])
    status = self_training_status(Settings(), TopicModel().fit(samples))
    assert status.startswith("off: the topic has no keywords") and "topic.toml" in status
