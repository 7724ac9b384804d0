"""Crawl strategies: link priorities on hand-made link triples, and picking them by name."""

from __future__ import annotations

import numpy as np
import pytest

from jlse.models.opic import CashSplit
from jlse.models.strategies import (
    AnchorTextAnalysis,
    BayesContext,
    KeywordCosine,
    KeywordVSM,
    share_by_similarity,
)
from jlse.models.strategy_catalog import (
    StrategyError,
    UnknownStrategy,
    available_strategies,
    make_strategy,
    strategy_class,
)
from jlse.models.topic_model import TopicModel, TopicSamples
from jlse.settings import Settings, SettingsError
from jlse.topic import TopicError, load_topic

ANCHORS = ["phone review", "pasta recipe", "contact us"]
URLS = ["http://a.test/1", "http://a.test/2", "http://a.test/3"]
CONTEXTS = ["the best smartphone of the year", "cooking at home", "footer"]


def table_similarity(values: dict[str, float]):
    """A fixed anchor -> similarity function (stands in for a fitted anchor NB)."""
    return lambda anchors: np.array([values[a] for a in anchors], dtype=float)


SIMS = table_similarity({"phone review": 0.9, "pasta recipe": 0.01, "contact us": 0.09})


@pytest.fixture(scope="module")
def phone_model() -> TopicModel:
    phones = ["smartphone review battery camera screen android phone",
              "new phone launch 5g handset price battery life",
              "手机 评测 电池 屏幕 拍照 智能手机"]
    others = ["pasta recipe tomato sauce cooking dinner",
              "football match goal league season team",
              "travel hotel beach holiday flight"]
    anchors = [("phone review", 1), ("smartphone deals", 1), ("手机评测", 1),
               ("pasta recipe", 0), ("football scores", 0), ("cheap flights", 0)]
    samples = TopicSamples(relevant=phones * 3, irrelevant=others * 3, anchors=anchors,
                           keywords=["smartphone", "mobile phone"])
    return TopicModel().fit(samples)


# --- formula (10) and the JLSE family ---

def test_share_by_similarity_sums_to_page_relevance() -> None:
    priorities = share_by_similarity(0.8, np.array([0.9, 0.01, 0.09]))
    assert priorities.sum() == pytest.approx(0.8)
    assert priorities == pytest.approx([0.8 * 0.9, 0.8 * 0.01, 0.8 * 0.09])


def test_share_by_similarity_zero_sum_and_empty() -> None:
    assert share_by_similarity(0.7, np.zeros(3)).tolist() == [0.0, 0.0, 0.0]
    assert share_by_similarity(0.7, np.zeros(0)).shape == (0,)
    # a page without a relevance counts as relevant
    assert share_by_similarity(None, np.array([1.0, 3.0])) == pytest.approx([0.25, 0.75])


def test_ata_is_formula_10_with_anchor_similarity() -> None:
    ata = AnchorTextAnalysis(SIMS)
    priorities = ata.score_links(0.6, 2, ANCHORS, URLS, CONTEXTS)
    assert priorities == pytest.approx([0.6 * 0.9, 0.6 * 0.01, 0.6 * 0.09])
    # fewer out-links: each gets a bigger share of the same relevance
    two = ata.score_links(0.6, 2, ANCHORS[:2], URLS[:2], CONTEXTS[:2])
    assert two[0] > priorities[0] and two.sum() == pytest.approx(0.6)


def test_ata_equals_jlse_paper_without_a_qtable(phone_model: TopicModel) -> None:
    settings = Settings()
    ata = make_strategy("ata", settings, phone_model)
    jlse = make_strategy("jlse-paper", settings, phone_model, qtable=lambda: None)
    args = (0.75, 1, ANCHORS, URLS, CONTEXTS)
    assert jlse.score_links(*args) == pytest.approx(ata.score_links(*args))
    assert jlse.score_links(*args).sum() == pytest.approx(0.75)


def test_jlse_product_variant_is_relevance_times_similarity(phone_model: TopicModel) -> None:
    product = make_strategy("jlse-product", Settings(), phone_model)
    sims = phone_model.anchor_similarity(ANCHORS)
    assert product.score_links(0.5, 0, ANCHORS, URLS, CONTEXTS) == pytest.approx(0.5 * sims)


@pytest.mark.parametrize("name", ["jlse", "jlse-paper", "jlse-product"])
def test_jlse_ranks_topical_anchor_first(name: str, phone_model: TopicModel) -> None:
    jlse = make_strategy(name, Settings(), phone_model)
    priorities = jlse.score_links(1.0, 0, ANCHORS, URLS, CONTEXTS)
    assert int(np.argmax(priorities)) == 0


class FixedEvidence:
    """A JLSE evaluator stand-in with fixed (sim_anchor, sim_predicted)."""

    def __init__(self, sim_anchor, sim_predicted) -> None:
        self.values = (np.array(sim_anchor, dtype=float), np.array(sim_predicted, dtype=float))

    def evidence(self, anchors, urls, contexts):
        return self.values


def test_default_jlse_scales_joint_similarity_by_relevance_with_a_floor() -> None:
    from jlse.models.strategies import LearnedTunnelling

    jlse = LearnedTunnelling(FixedEvidence([0.9, 0.01, 0.2], [0.1, 0.8, 0.0]), tunnel_weight=0.1)
    relevant = jlse.score_links(0.7, 0, ANCHORS, URLS, CONTEXTS)
    assert relevant == pytest.approx([0.7 * 0.9, 0.7 * 0.8, 0.7 * 0.2])  # not shared out
    hub = jlse.score_links(0.001, 0, ANCHORS, URLS, CONTEXTS)  # an irrelevant page
    assert hub == pytest.approx([0.1 * 0.9, 0.1 * 0.8, 0.1 * 0.2])  # the tunnel floor
    near = jlse.score_links(0.45, 0, ANCHORS, URLS, CONTEXTS)  # judged irrelevant, just below
    assert near == pytest.approx(hub)  # passes on the tunnel weight, not its own P


def test_default_jlse_is_soft_focused(phone_model: TopicModel) -> None:
    jlse = make_strategy("jlse", Settings(relevance_threshold=0.6), phone_model)
    assert jlse.should_expand(0.01, is_target=False)  # irrelevant pages are expanded
    assert jlse.should_expand(0.99, is_target=True)  # targets too (the paper: not)
    assert not make_strategy("jlse-paper", Settings(), phone_model).should_expand(
        0.99, is_target=True)


def test_jlse_floors_the_section_links_of_relevant_pages_only(phone_model: TopicModel) -> None:
    jlse = make_strategy("jlse", Settings(relevance_threshold=0.6), phone_model)
    assert jlse.section_link_floor(0.9) == pytest.approx(0.9 ** 4 * 0.5)  # the defaults
    assert jlse.section_link_floor(0.5) is None  # judged irrelevant: no floor
    assert jlse.section_link_floor(None) is None
    off = make_strategy("jlse", Settings(section_links=0.0), phone_model)
    assert off.section_link_floor(0.9) is None
    paper = make_strategy("jlse-paper", Settings(), phone_model)
    assert paper.section_link_floor(0.9) is None  # the paper's rules stay


def test_tunnel_weight_reaches_the_strategy(phone_model: TopicModel) -> None:
    assert make_strategy("jlse", Settings(tunnel_weight=0.3), phone_model).tunnel_weight == 0.3


def test_relevance_exponent_ranks_the_surer_pages_links_first(phone_model: TopicModel) -> None:
    from jlse.models.strategies import LearnedTunnelling

    evidence = FixedEvidence([0.5, 0.2, 0.1], [0.0, 0.0, 0.0])
    sharp = LearnedTunnelling(evidence, tunnel_weight=0.01, relevance_exponent=4.0)
    sure, unsure = sharp.score_links(0.99, 0, ANCHORS, URLS, CONTEXTS), sharp.score_links(
        0.8, 0, ANCHORS, URLS, CONTEXTS)
    assert sure == pytest.approx(0.99 ** 4 * np.array([0.5, 0.2, 0.1]))
    assert unsure == pytest.approx(0.8 ** 4 * np.array([0.5, 0.2, 0.1]))
    assert unsure[0] < 0.8 * 0.5  # plain r would give the unsure page's best link 0.4
    assert sharp.score_links(0.45, 0, ANCHORS, URLS, CONTEXTS) == pytest.approx(
        [0.01 * 0.5, 0.01 * 0.2, 0.01 * 0.1])  # judged irrelevant: the tunnel weight, unraised
    assert sharp.page_weight(None) == 1.0  # no topic model: every page counts as relevant
    assert make_strategy("jlse", Settings(), phone_model).relevance_exponent == 4.0
    assert make_strategy("jlse", Settings(relevance_exponent=1.0), phone_model).page_weight(
        0.7) == pytest.approx(0.7)
    with pytest.raises(SettingsError, match="relevance_exponent"):
        Settings(relevance_exponent=0.5).validate()


def test_jlse_weighs_each_link_by_its_own_text() -> None:
    from jlse.models.strategies import LearnedTunnelling

    seen = []

    def link_text(anchors, contexts):
        seen.append((list(anchors), list(contexts)))
        return np.array([1.0, 0.0, 0.4])

    evidence = FixedEvidence([0.5, 0.5, 0.5], [0.0, 0.0, 0.0])  # the siblings look alike
    jlse = LearnedTunnelling(evidence, link_text_relevance=link_text, link_text_weight=0.5)
    assert jlse.score_links(0.8, 0, ANCHORS, URLS, CONTEXTS) == pytest.approx(
        [0.8 * 0.5 * 1.0, 0.8 * 0.5 * 0.5, 0.8 * 0.5 * 0.7])
    assert seen == [(ANCHORS, CONTEXTS)]
    assert jlse.score_links(0.1, 0, ANCHORS, URLS, CONTEXTS).tolist() == [0.0] * 3
    assert len(seen) == 1  # an irrelevant page's links (tunnel weight 0) are not read
    jlse.link_text_weight = 0.0
    assert jlse.score_links(0.8, 0, ANCHORS, URLS, CONTEXTS) == pytest.approx([0.4] * 3)


def test_link_text_model_reaches_jlse_only(phone_model: TopicModel) -> None:
    jlse = make_strategy("jlse", Settings(), phone_model)
    assert jlse.link_text_weight == 1.0
    assert jlse.link_text_relevance == phone_model.link_text_relevance
    anchors, contexts = ["the best smartphone", "pasta recipe"], ["camera review", "cooking at home"]
    on, off = jlse.link_text_relevance(anchors, contexts)
    assert on > 0.5 > off
    texts = [f"{anchor} {context}" for anchor, context in zip(anchors, contexts, strict=True)]
    assert [on, off] == pytest.approx(phone_model.context_relevance(texts))
    assert not hasattr(make_strategy("jlse-paper", Settings(), phone_model), "link_text_weight")


# --- OPIC ---

def test_opic_splits_the_page_cash_by_anchor_relevance() -> None:
    opic = CashSplit(SIMS, relevance_weight=2.0)
    priorities = opic.score_links(None, 3, ANCHORS, URLS, CONTEXTS, parent_priority=0.3)
    weights = np.array([1 + 2 * 0.9, 1 + 2 * 0.01, 1 + 2 * 0.09])
    assert priorities == pytest.approx(0.3 * weights / weights.sum())
    assert priorities.sum() == pytest.approx(0.3)  # cash is conserved


def test_opic_without_a_model_is_plain_opic() -> None:
    opic = make_strategy("opic", Settings(), None)
    priorities = opic.score_links(None, 0, ANCHORS, URLS, CONTEXTS, parent_priority=0.9)
    assert priorities == pytest.approx([0.3, 0.3, 0.3])
    assert opic.should_expand(0.0, is_target=True)  # not focused


# --- Bayes and VSM ---

def test_bayes_scores_anchor_plus_context() -> None:
    seen: list[list[str]] = []

    def link_text_relevance(anchors, contexts):
        texts = [f"{a} {c}" for a, c in zip(anchors, contexts, strict=True)]
        seen.append(texts)
        return np.array([0.9 if "smartphone" in t else 0.1 for t in texts])

    bayes = BayesContext(link_text_relevance)
    priorities = bayes.score_links(0.2, 0, ANCHORS, URLS, CONTEXTS)
    assert priorities.tolist() == [0.9, 0.1, 0.1]  # page relevance plays no part
    assert seen == [["phone review the best smartphone of the year", "pasta recipe cooking at home",
                     "contact us footer"]]


def test_bayes_with_a_topic_model_prefers_topical_links(phone_model: TopicModel) -> None:
    bayes = make_strategy("bayes", Settings(), phone_model)
    priorities = bayes.score_links(1.0, 0, ANCHORS, URLS, CONTEXTS)
    assert priorities[0] > priorities[1]
    assert np.all((priorities >= 0) & (priorities <= 1))


def test_keyword_cosine_exact() -> None:
    cosine = KeywordCosine(["smartphone", "phone review"])
    # query counts: smartphone 1, phone 1, review 1; text "phone phone": dot 2, |t| 2, |q| sqrt 3
    assert cosine.cosines(["phone phone"])[0] == pytest.approx(2 / (2 * np.sqrt(3)))
    assert cosine.cosines(["pasta recipe", ""]).tolist() == [0.0, 0.0]


def test_vsm_priority_is_relevance_times_link_match() -> None:
    vsm = KeywordVSM(["smartphone", "phone review"])
    priorities = vsm.score_links(0.4, 0, ANCHORS, URLS, CONTEXTS)
    cosines = vsm.cosine.cosines([f"{a} {c}" for a, c in zip(ANCHORS, CONTEXTS, strict=True)])
    assert priorities == pytest.approx(0.4 * (0.5 + 0.5 * cosines))
    assert priorities[0] > priorities[2] and priorities[2] == pytest.approx(0.2)


# --- make_strategy ---

def test_make_strategy_unknown_name() -> None:
    with pytest.raises(UnknownStrategy, match="random-walk.*available: ata, auto, bayes"):
        make_strategy("random-walk", Settings())


def test_auto_is_jlse_with_a_model_else_bfs() -> None:
    assert make_strategy("auto", Settings(), None).name == "bfs"


def test_an_unknown_strategy_names_the_key_and_the_choices(tmp_path) -> None:
    (tmp_path / "seeds.txt").write_text("http://a.test/\n")
    with pytest.raises(TopicError, match="strategy: unknown strategy 'nope'; choose one of .*jlse"):
        load_topic(tmp_path, {"strategy": "nope"})


@pytest.mark.parametrize("name", ["ata", "jlse", "jlse-paper", "jlse-product", "bayes", "cfc"])
def test_model_strategies_need_a_model(name: str) -> None:
    with pytest.raises(StrategyError, match="needs a topic model"):
        make_strategy(name, Settings(), None)


def test_vsm_needs_keywords() -> None:
    with pytest.raises(StrategyError, match="keywords"):
        make_strategy("vsm", Settings(keywords=["the", "of"]))  # stop words only
    assert make_strategy("vsm", Settings(keywords=["smartphone"])).name == "vsm"


@pytest.mark.parametrize("name, focused", [
    ("bfs", False), ("best-first", False), ("opic", False), ("ata", True), ("jlse", False),
    ("jlse-paper", True), ("jlse-product", True), ("bayes", True), ("vsm", True), ("cfc", False),
])
def test_focus_per_the_paper(name: str, focused: bool, phone_model: TopicModel) -> None:
    settings = Settings(keywords=["smartphone"], relevance_threshold=0.6)
    strategy = make_strategy(name, settings, phone_model)
    assert strategy.name == name
    assert strategy.should_expand(0.3, is_target=False) is (not focused)
    assert strategy.should_expand(0.7, is_target=False)
    assert strategy.seed_priority() == 1.0


def test_settings_reach_the_strategy(phone_model: TopicModel) -> None:
    settings = Settings(expand_targets=True, hard_focus=False, relevance_threshold=0.9)
    ata = make_strategy("ata", settings, phone_model)
    assert ata.should_expand(0.1, is_target=True)  # soft focus, targets expanded
    strict = make_strategy("ata", Settings(), phone_model)
    assert not strict.should_expand(0.9, is_target=True)  # paper: targets are not expanded


def test_empty_link_lists(phone_model: TopicModel) -> None:
    settings = Settings(keywords=["smartphone"])
    for name in available_strategies():
        assert make_strategy(name, settings, phone_model).score_links(0.5, 0, [], [], []).shape == (0,)


def test_strategies_declare_what_they_need() -> None:
    learners = {name for name in available_strategies()
                if (cls := strategy_class(name)) is not None and cls.learns == "qtable"}
    assert learners == {"jlse", "jlse-paper", "jlse-product"}
    embedded_only = {name for name in available_strategies()
                     if (cls := strategy_class(name)) is not None and cls.embedded_only}
    assert embedded_only == {"cfc"}
    assert all(strategy_class(name) is not None for name in available_strategies() if name != "auto")
