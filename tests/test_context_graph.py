"""The context-graph crawler (cfc): layers, the layer model, the page log, the learner, a crawl."""

from __future__ import annotations

import numpy as np
import pytest

from jlse.eval import run_eval
from jlse.learner.context_graph import ContextGraphLearner
from jlse.models.context_graph import (
    ContextGraphStrategy,
    LayerModel,
    PageLog,
    context_layers,
    hashed_counts,
    layer_priority,
    url_keys,
)
from jlse.models.strategy_catalog import make_strategy
from jlse.models.topic_model import TopicModel, TopicSamples
from jlse.settings import Settings, SettingsError

PHONE = "smartphone review battery camera screen android phone 手机 评测"
HUB = "directory of sites portal links categories partners"
COOKING = "pasta recipe tomato sauce cooking dinner kitchen"


def keys(*urls: str) -> np.ndarray:
    return url_keys(list(urls))


def test_layers_count_links_to_the_nearest_relevant_page() -> None:
    # hub -> list -> detail (relevant); portal -> hub; blog -> portal; lone links nowhere
    pages = keys("hub", "list", "detail", "portal", "blog", "lone")
    edges = [(0, "list"), (1, "detail"), (1, "hub"), (3, "hub"), (4, "portal"), (5, "nowhere")]
    edge_pages = np.array([page for page, _ in edges])
    edge_keys = keys(*[url for _, url in edges])
    layers = context_layers(pages, edge_pages, edge_keys, keys("detail"), n_layers=2)
    # detail 0, list 1, hub 2, portal would be 3 > n_layers: other (3), blog and lone other
    assert layers.tolist() == [2, 1, 0, 3, 3, 3]
    deeper = context_layers(pages, edge_pages, edge_keys, keys("detail"), n_layers=4)
    assert deeper.tolist() == [2, 1, 0, 3, 4, 5]


def test_a_relevant_page_outside_the_log_still_makes_layer_one() -> None:
    pages = keys("list")
    layers = context_layers(pages, np.array([0]), keys("detail"), keys("detail"), n_layers=3)
    assert layers.tolist() == [1]


def test_no_pages_no_layers() -> None:
    empty = np.zeros(0, dtype=np.int64)
    assert context_layers(empty, empty, empty, keys("x"), n_layers=3).shape == (0,)


def test_priority_orders_layers_then_expected_distance() -> None:
    n = 3
    confident = np.eye(n + 2)  # rows: sure of layer 0, 1, 2, 3, other
    priorities = layer_priority(confident, n)
    assert priorities[0] == pytest.approx(1.0)
    assert np.all(np.diff(priorities) < 0)  # layer 0 > 1 > 2 > 3 > other
    assert priorities[-1] == pytest.approx(0.0)
    # same most probable layer (1): the page with more weight on layer 0 comes first
    near = np.array([[0.4, 0.6, 0, 0, 0]])
    far = np.array([[0.0, 0.6, 0, 0, 0.4]])
    assert layer_priority(near, n)[0] > layer_priority(far, n)[0]
    # but the layer decides before the expectation does
    layer_two = np.array([[0.0, 0.0, 1.0, 0, 0]])
    assert layer_priority(far, n)[0] > layer_priority(layer_two, n)[0]


def fitted_layers() -> LayerModel:
    texts = [PHONE] * 4 + [HUB] * 4 + [COOKING] * 4
    layers = [0] * 4 + [1] * 4 + [4] * 4  # layers 2 and 3 have no page
    return LayerModel(n_layers=3, version=7).fit(hashed_counts(texts), np.array(layers))


def test_layer_model_predicts_the_layer_of_similar_text() -> None:
    model = fitted_layers()
    probabilities = model.probabilities(hashed_counts([PHONE, HUB, COOKING, ""]))
    assert probabilities.shape == (4, 5)
    assert probabilities.sum(axis=1) == pytest.approx(np.ones(4))
    assert probabilities.argmax(axis=1)[:3].tolist() == [0, 1, 4]
    assert np.all(probabilities[:, [2, 3]] == 0.0)  # no training page, no probability
    assert probabilities[3] == pytest.approx([1 / 3, 1 / 3, 0, 0, 1 / 3])  # the prior
    assert model.version == 7 and model.layer_counts_.tolist() == [4, 4, 0, 0, 4]


def test_layer_model_posteriors_are_tempered_on_long_pages() -> None:
    counts = hashed_counts([" ".join([PHONE, COOKING] * 40 + [PHONE])])
    tempered = fitted_layers().probabilities(counts)[0]
    plain = fitted_layers()
    plain.evidence_tokens = 10**9  # no temperature: plain NB
    assert plain.probabilities(counts)[0][0] == 1.0  # hundreds of tokens: exactly 0 or 1
    assert tempered.argmax() == 0 and tempered[0] < 0.99  # the same decision, still a ranking


def test_layer_model_needs_two_layers() -> None:
    with pytest.raises(ValueError, match="two layers"):
        LayerModel(3).fit(hashed_counts([PHONE, PHONE]), np.array([0, 0]))
    with pytest.raises(ValueError, match="0..4"):
        LayerModel(3).fit(hashed_counts([PHONE, HUB]), np.array([0, 9]))


def test_page_log_keeps_a_bounded_sample_and_every_relevant_page() -> None:
    log = PageLog(capacity=10, seed=1)
    for i in range(100):
        log.add(f"http://a.test/{i}", hashed_counts([PHONE]), [f"http://a.test/{i + 1}"] * 2,
                relevant=i % 4 == 0)
    snapshot = log.snapshot()
    assert len(log) == 10 and snapshot.counts.shape[0] == 10
    assert len(snapshot.relevant_keys) == 25  # relevant pages are all kept, sampled or not
    assert snapshot.edge_pages.tolist() == np.repeat(np.arange(10), 2).tolist()
    assert len(set(snapshot.page_keys.tolist())) == 10
    sampled = {int(k) for k in snapshot.page_keys}
    assert sampled - set(url_keys([f"http://a.test/{i}" for i in range(10)]).tolist())  # not just the first 10


def test_learner_labels_the_log_and_fits() -> None:
    log = PageLog(capacity=100)
    for i in range(5):
        log.add(f"http://p.test/{i}", hashed_counts([PHONE]), [], relevant=True)
        log.add(f"http://h.test/{i}", hashed_counts([HUB]), [f"http://p.test/{i}"], relevant=False)
        log.add(f"http://c.test/{i}", hashed_counts([COOKING]), ["http://c.test/x"], relevant=False)
    learner = ContextGraphLearner(Settings(cfc_layers=2), log)
    model = learner.learn(None, version=3)
    assert model.version == 3 and model.layer_counts_.tolist() == [5, 5, 0, 5]
    assert model.probabilities(hashed_counts([HUB])).argmax() == 1


def test_learner_waits_for_two_layers() -> None:
    log = PageLog(capacity=100)
    log.add("http://c.test/1", hashed_counts([COOKING]), [], relevant=False)
    assert ContextGraphLearner(Settings(), log).learn(None, version=1) is None


@pytest.fixture(scope="module")
def phone_model() -> TopicModel:
    samples = TopicSamples(relevant=[PHONE] * 4, irrelevant=[COOKING, HUB] * 2)
    return TopicModel().fit(samples)


def test_strategy_uses_relevance_until_a_layer_model_exists(phone_model) -> None:
    strategy = make_strategy("cfc", Settings(), phone_model)
    assert isinstance(strategy, ContextGraphStrategy)
    urls = ["http://a.test/1", "http://a.test/2"]
    relevant = strategy.score_links(0.9, 0, ["a", "b"], urls, ["", ""], page_text=COOKING)
    irrelevant = strategy.score_links(0.1, 0, ["a", "b"], urls, ["", ""], page_text=PHONE)
    assert relevant[0] == relevant[1] > 0.8 > 0.2 > irrelevant[0]  # one priority per page
    strategy.layer_model.set(fitted_layers())  # now the page text decides, not the relevance
    by_text = strategy.score_links(0.1, 0, ["a"], urls[:1], [""], page_text=PHONE)
    assert by_text[0] > 0.8
    hub = strategy.score_links(0.9, 0, ["a"], urls[:1], [""], page_text=HUB)
    assert 0.6 < hub[0] < 0.8  # layer 1 of 3: rank 3 of 5


def test_strategy_logs_what_it_observes_and_expands_every_page(phone_model) -> None:
    strategy = make_strategy("cfc", Settings(cfc_page_log=5), phone_model)
    strategy.observe_page("http://a.test/", PHONE, 0.9, ["http://a.test/1"])
    strategy.observe_page("http://b.test/", COOKING, 0.2, [])
    snapshot = strategy.page_log.snapshot()
    assert snapshot.page_keys.tolist() == url_keys(["http://a.test/", "http://b.test/"]).tolist()
    assert snapshot.relevant_keys.tolist() == url_keys(["http://a.test/"]).tolist()
    assert strategy.page_log.capacity == 5
    assert strategy.should_expand(0.01, is_target=True)


def test_cfc_needs_a_topic_model_and_sane_settings() -> None:
    with pytest.raises(ValueError, match="needs a topic model"):
        make_strategy("cfc", Settings(), None)
    for bad in ({"cfc_layers": 0}, {"cfc_layers": 11}, {"cfc_page_log": 0}):
        with pytest.raises(SettingsError, match=next(iter(bad))):
            Settings(**bad).validate()


def test_cfc_is_refused_by_the_distributed_crawl(sandbox_web, tmp_path) -> None:
    from jlse.cluster import register_crawl
    from jlse.run import CrawlSetupError

    topic = sandbox_web.write_topic_dir("phones", tmp_path / "phones")
    with pytest.raises(CrawlSetupError, match="embedded crawl only"):
        register_crawl(topic, {"strategy": "cfc"}, "postgresql://unused/db", "redis://unused:1/0")


def test_cfc_crawl_learns_layers_and_keeps_harvesting(tmp_path) -> None:
    report = run_eval(["phones"], ["cfc"], budget=500, out_dir=tmp_path,
                      checkpoints=(500,), overrides={"cf": 50}, oracle=False)
    cfc = report.results[0]
    assert cfc.fetched == 500
    log = (tmp_path / "phones" / "cfc" / "crawl.log").read_text()
    assert "cfc: layer model v1 from" in log and "Traceback" not in log
    # Harvest at 500 pages depends on timing: cfc's layer model is trained in the background,
    # so on a fast crawl it arrives late (.25-.33 measured on 2026-11-25, when bfs gave
    # .23-.30; bfs has since risen to .35-.44 as a new host's first page waits for its
    # robots.txt in the frontier). What must hold: the crawl used its layers and kept
    # harvesting; how cfc compares with the other strategies is measured by jlse eval
    # (docs/benchmarks.md, "Harvest: strategies compared").
    assert cfc.harvest_at[500] >= 0.2, cfc.harvest_at
