"""Ranking discovered pages (jlse.discovery.ranking), PageRank (jlse.discovery.pagerank) and the
operator choosers (jlse.discovery.bandit): each similarity function on sandbox pages, the
combination formula, site ranking, UCB1 and the round reward, on hand-computed examples."""

from __future__ import annotations

import json
import math
from itertools import islice

import numpy as np
import pytest
from lxml import html

from jlse.discovery.bandit import (
    SEARCHES_FIRST,
    UCB1,
    FixedChooser,
    RandomChooser,
    chooser_from_dict,
    make_chooser,
    round_reward,
)
from jlse.discovery.engine import Discovery
from jlse.discovery.fetching import Page
from jlse.discovery.pagerank import pagerank
from jlse.discovery.ranking import (
    FUNCTIONS,
    PAGERANK,
    PageRanker,
    Ranking,
    combine,
    home_pages,
    page_features,
    positions_of,
    rank_sites,
)
from jlse.discovery.state import DiscoveryState, StateFiles
from jlse.sandbox.vocab import DISTRACTOR_TOPICS
from jlse.sandbox.web import build_web
from jlse.scheduler.urls import home_page_url
from jlse.settings import Settings

OPERATORS = ["forward", "backward", "keyword", "related"]


# --- sandbox pages ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def corpus() -> dict[str, list[str]]:
    """Phones pages (samples and others, half English, half Chinese), pages of the distractor
    topics to rank, and other distractor pages as negatives."""
    web = build_web()
    texts: dict[tuple[str, str], list[str]] = {}
    for truth in web.iter_truth():
        topic = "phones" if truth.topic == "phones" else "off" if truth.topic in DISTRACTOR_TOPICS \
            else None
        body = web.page_bytes(truth.url) if topic and truth.is_target else None
        if body is not None:
            page = body.decode(web.plan.by_host[truth.site].spec.encoding, errors="replace")
            texts.setdefault((topic, truth.lang), []).append(html.fromstring(page).text_content())

    def take(topic: str, start: int, count: int) -> list[str]:
        return [text for lang in ("en", "zh") for text in
                islice(texts[(topic, lang)], start, start + count)]

    return {"samples": take("phones", 0, 10), "on": take("phones", 10, 20),
            "off": take("off", 0, 20), "negatives": take("off", 100, 30)}


def _auc(ranking: Ranking, n_on: int) -> float:
    """The share of (on-topic, off-topic) page pairs the ranking orders right; on-topic pages
    are the first ``n_on``."""
    position = ranking.position
    on, off = position[:n_on], position[n_on:]
    return float((on[:, None] < off[None, :]).mean())


@pytest.mark.parametrize("function", [*FUNCTIONS, "all"])
def test_each_function_ranks_topic_pages_above_off_topic_pages(corpus, function) -> None:
    functions = FUNCTIONS if function == "all" else (function,)
    ranker = PageRanker(functions=functions, alpha=0.0).fit(corpus["samples"], corpus["negatives"])
    ranking = ranker.rank(corpus["on"] + corpus["off"], [])
    assert ranking.functions_used == functions
    assert _auc(ranking, len(corpus["on"])) >= 0.95
    assert sorted(ranking.order.tolist()) == list(range(len(ranking)))


def test_without_negatives_lr_and_nb_are_skipped(corpus) -> None:
    ranker = PageRanker().fit(corpus["samples"], [])
    ranking = ranker.rank(corpus["on"] + corpus["off"], [])
    assert ranker.functions_used_ == ranking.functions_used == ("ocsvm", "cosine", "jaccard")
    assert set(ranking.positions) == {"ocsvm", "cosine", "jaccard", PAGERANK}
    assert _auc(ranking, len(corpus["on"])) >= 0.95
    with pytest.raises(ValueError, match="need negatives"):
        PageRanker(functions=("lr", "nb")).fit(corpus["samples"], [])


def test_features_or_texts_rank_alike(corpus) -> None:
    pages = corpus["on"][:5] + corpus["off"][:5]
    ranker = PageRanker().fit(corpus["samples"], corpus["negatives"])
    from_texts = ranker.rank(pages, [(0, 1), (2, 1)])
    from_rows = PageRanker().fit(page_features(corpus["samples"]),
                                 page_features(corpus["negatives"])).rank(page_features(pages),
                                                                          [(0, 1), (2, 1)])
    assert from_texts.order.tolist() == from_rows.order.tolist()
    np.testing.assert_allclose(from_texts.combined, from_rows.combined)


def test_keyword_samples_and_no_pages() -> None:
    ranker = PageRanker().fit(["phone battery screen camera"], ["pasta recipe tomato sauce"])
    ranking = ranker.rank(["a phone with a big battery", "tomato pasta"], [])
    assert ranking.order.tolist() == [0, 1]
    assert len(ranker.rank([], [])) == 0
    with pytest.raises(ValueError, match="no usable words"):
        PageRanker().fit(["", "the of"], [])


# --- the scores, exactly ---------------------------------------------------------------------

TOY_SAMPLES = ["apple banana apple", "banana cherry"]
TOY_NEGATIVES = ["durian eggplant", "eggplant fig fig"]
TOY_PAGES = ["apple apple cherry", "banana", "fig durian apple", "grape", ""]


def test_cosine_and_jaccard_are_the_means_over_samples() -> None:
    ranker = PageRanker(functions=("cosine", "jaccard")).fit(TOY_SAMPLES, TOY_NEGATIVES)
    ranking = ranker.rank(TOY_PAGES, [])
    # cos(page 0 = {apple: 2, cherry: 1}, {apple: 2, banana: 1}) = 4/5, with {banana, cherry}: 1/sqrt(10)
    cosine = [(4 / 5 + 1 / math.sqrt(10)) / 2, (1 / math.sqrt(5) + 1 / math.sqrt(2)) / 2,
              (2 / math.sqrt(15)) / 2, 0.0, 0.0]
    # J({apple, cherry}, {apple, banana}) = 1/3, with {banana, cherry}: 1/3
    jaccard = [1 / 3, (1 / 2 + 1 / 2) / 2, (1 / 4) / 2, 0.0, 0.0]
    np.testing.assert_allclose(ranking.scores["cosine"], cosine)
    np.testing.assert_allclose(ranking.scores["jaccard"], jaccard)
    np.testing.assert_array_equal(ranking.positions["jaccard"], [1, 0, 2, 3.5, 3.5])


def test_lr_ocsvm_nb_scores_are_their_sklearn_models() -> None:
    ranker = PageRanker().fit(TOY_SAMPLES, TOY_NEGATIVES)
    ranking = ranker.rank(TOY_PAGES, [])
    tfidf = ranker.tfidf_.transform(page_features(TOY_PAGES))
    counts = page_features(TOY_PAGES)[:, ranker.columns_]
    np.testing.assert_allclose(ranking.scores["ocsvm"], ranker.ocsvm_.decision_function(tfidf))
    np.testing.assert_allclose(ranking.scores["lr"],
                               ranker.lr_.predict_proba(tfidf[:, ranker.columns_])[:, 1])
    log_proba = ranker.nb_.predict_log_proba(counts)
    np.testing.assert_allclose(ranking.scores["nb"], log_proba[:, 1] - log_proba[:, 0])


def test_positions_share_ties() -> None:
    np.testing.assert_array_equal(positions_of(np.array([0.5, 0.9, 0.5, 0.1])), [1.5, 0, 1.5, 3])


def test_combination_formula_on_known_positions() -> None:
    positions = {"a": np.array([0.0, 1, 2, 3]), "b": np.array([2.0, 0, 3, 1]),
                 PAGERANK: np.array([3.0, 2, 1, 0])}
    combined, order = combine(positions, ("a", "b"), alpha=0.2)
    # means 1, 0.5, 2.5, 2 -> 0.8 * mean + 0.2 * PageRank position
    np.testing.assert_allclose(combined, [1.4, 0.8, 2.2, 1.6])
    assert order.tolist() == [1, 0, 3, 2]
    # equal combined scores: the lower mean position first, then input order
    tied = {"a": np.array([1.0, 0, 0]), "b": np.array([1.0, 0, 0]), PAGERANK: np.array([0.0, 4, 4])}
    combined, order = combine(tied, ("a", "b"), alpha=0.2)
    np.testing.assert_allclose(combined, [0.8, 0.8, 0.8])
    assert order.tolist() == [1, 2, 0]


def test_rank_follows_the_combination_formula(corpus) -> None:
    pages = corpus["on"][:6] + corpus["off"][:6]
    links = [(i, (i * 5 + 1) % 12) for i in range(12)] + [(3, 0), (7, 0), (9, 4)]
    ranking = PageRanker().fit(corpus["samples"], corpus["negatives"]).rank(pages, links)
    mean = np.mean([ranking.positions[name] for name in FUNCTIONS], axis=0)
    np.testing.assert_allclose(ranking.combined, 0.8 * mean + 0.2 * ranking.positions[PAGERANK])
    assert np.all(np.diff(ranking.combined[ranking.order]) >= 0)
    assert ranking.position[ranking.order].tolist() == list(range(12))
    assert ranking.top(3) == ranking.order[:3].tolist()


def test_alpha_zero_ignores_pagerank_and_alpha_one_is_pagerank_order(corpus) -> None:
    pages = corpus["on"][:4] + corpus["off"][:4]
    ranker = PageRanker(alpha=0.0).fit(corpus["samples"], corpus["negatives"])
    chain = [(i, i + 1) for i in range(7)]
    star = [(i, 0) for i in range(1, 8)]
    assert ranker.rank(pages, chain).order.tolist() == ranker.rank(pages, star).order.tolist()
    by_pagerank = PageRanker(alpha=1.0).fit(corpus["samples"], corpus["negatives"])
    # a chain: each page ranks above the one linking to it; the first has no in-links
    assert by_pagerank.rank(pages, chain).order.tolist() == list(range(7, -1, -1))
    ranking = by_pagerank.rank(pages, star)
    assert ranking.order[0] == 0  # the rest tie on PageRank: similarity orders them
    others = ranking.order[1:].tolist()
    mean = np.mean([ranking.positions[name] for name in FUNCTIONS], axis=0)
    assert others == sorted(others, key=lambda i: (mean[i], i))


# --- PageRank --------------------------------------------------------------------------------

def test_pagerank_of_a_hand_solved_graph() -> None:
    # 0 -> 1, 0 -> 2, 1 -> 2, page 2 dangling (its rank spread over all three), d = 0.85:
    # r0 = 0.05 + 0.85 r2/3, r1 = 0.05 + 0.85 (r0/2 + r2/3) = 1.425 r0, r2 = 1 - r0 - r1,
    # so r0 = (0.05 + 0.85/3) / (1 + 0.85 * 2.425/3)
    r0 = (0.05 + 0.85 / 3) / (1 + 0.85 * 2.425 / 3)
    expected = [r0, 1.425 * r0, 1 - 2.425 * r0]
    rank = pagerank(3, [(0, 1), (0, 2), (1, 2)], tol=1e-12, max_iter=1000)
    np.testing.assert_allclose(rank, expected, rtol=1e-9)
    np.testing.assert_allclose(expected, [0.19757965, 0.28155100, 0.52086935], rtol=1e-7)


def test_pagerank_sums_to_one_dangling_duplicates_self_links() -> None:
    assert pagerank(4, []).tolist() == [0.25] * 4
    rank = pagerank(5, [(0, 1), (0, 1), (1, 1), (2, 1), (3, 4)])
    assert rank.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(rank, pagerank(5, [(0, 1), (2, 1), (3, 4)]))
    assert rank[1] > rank[4] > rank[0] == pytest.approx(rank[2]) == pytest.approx(rank[3])
    assert pagerank(0, []).shape == (0,)
    with pytest.raises(ValueError, match="outside"):
        pagerank(2, [(0, 2)])


# --- sites -----------------------------------------------------------------------------------

def _ranking(order: list[int]) -> Ranking:
    position = np.empty(len(order), dtype=np.int64)
    position[order] = np.arange(len(order))
    return Ranking(np.array(order), position, position.astype(float), {}, {}, (), 0.0)


def test_site_score_is_the_mean_of_its_best_pages_padded_with_the_worst() -> None:
    hosts = ["a", "b", "c", "c", "c", "a", "a", "d", "c"]
    ranking = _ranking([0, 1, 2, 3, 4, 5, 6, 7, 8])  # page i at position i; n = 9
    sites = rank_sites(hosts, ranking, best_m=3, relevant_share=0.25)
    # c: 2, 3, 4 -> 3; a: 0, 5, 6 -> 11/3; b: 1 + 8 + 8 -> 17/3; d: 7 + 8 + 8 -> 23/3
    assert [(s.host, s.rank) for s in sites] == [("c", 0), ("a", 1), ("b", 2), ("d", 3)]
    assert [s.score for s in sites] == pytest.approx([3, 11 / 3, 17 / 3, 23 / 3])
    assert [s.n_pages for s in sites] == [4, 3, 1, 1]
    assert [s.n_relevant for s in sites] == [1, 1, 1, 0]  # positions < ceil(0.25 * 9) = 3
    assert [s.best_pages for s in sites] == [(2, 3, 4), (0, 5, 6), (1,), (7,)]


def test_a_site_ranks_no_higher_than_its_home_page() -> None:
    # a: articles at 0, 1, 2 but its home page (page 7) last; b: 3, 4, 5 and home 6
    hosts = ["a", "a", "a", "b", "b", "b", "b", "a"]
    urls = ["http://a/p/1", "http://a/p/2", "http://a/p/3", "http://b/p/1", "http://b/p/2",
            "http://b/?page=2", "http://b/", "http://a/"]
    ranking = _ranking(list(range(8)))
    assert home_pages(urls, hosts) == {"b": 6, "a": 7}  # "/?page=2" is not a home page
    assert [s.host for s in rank_sites(hosts, ranking)] == ["a", "b"]  # articles only
    sites = rank_sites(hosts, ranking, homes=home_pages(urls, hosts))
    assert [(s.host, s.score) for s in sites] == [("b", 6.0), ("a", 7.0)]
    assert sites[1].best_pages == (0, 1, 2)  # the evidence stays the best pages


def test_home_pages_judge_sites_but_do_not_seed_the_operators(tmp_path) -> None:
    pages = [Page("http://a.test/", "a.test", operator="home"),
             Page("http://a.test/p/1", "a.test", operator="keyword"),
             Page("http://b.test/p/2", "b.test", operator="keyword"),
             Page("http://b.test/", "b.test", operator="home")]
    engine = Discovery(None, None, None, StateFiles(tmp_path), DiscoveryState(), ["phone"], [],
                       [], Settings(discovery_top_k=2))
    engine.corpus.add(pages)
    engine.ranking = _ranking([0, 1, 2, 3])
    assert [page.url for page in engine.top_pages()] == ["http://a.test/p/1", "http://b.test/p/2"]
    assert engine.site_homes() == {"a.test": 0, "b.test": 3}
    assert [site.host for site in engine.ranked_sites()] == ["a.test", "b.test"]
    assert home_page_url("https://b.test:8080/x/y?q=1") == "https://b.test:8080/"
    assert home_page_url("mailto:someone@b.test") is None
    engine.settings = Settings(discovery_home_pages=False)
    assert engine.site_homes() == {}


def test_site_ties_go_to_the_better_best_page() -> None:
    hosts = ["x", "y", "y", "x"]
    ranking = _ranking([1, 0, 2, 3])  # x: positions 1 and 3, y: 0 and 2 -> both mean 2 of m=2
    assert [s.host for s in rank_sites(hosts, ranking, best_m=2)] == ["y", "x"]
    with pytest.raises(ValueError, match="hosts"):
        rank_sites(["x"], ranking)


# --- the round reward and the choosers -------------------------------------------------------

def test_round_reward_exact_values() -> None:
    assert round_reward([0, 5, 9], [False, True, False], 10) == pytest.approx((1 + 0 + 0.1) / 3)
    assert round_reward([0], [False], 4) == 1.0
    assert round_reward([2, 3], [True, True], 4) == 0.0
    assert round_reward([], [], 0) == 0.0
    with pytest.raises(ValueError):
        round_reward([1], [], 4)


def test_ucb1_tries_the_searches_first_when_asked() -> None:
    bandit = UCB1(OPERATORS, try_first=SEARCHES_FIRST)
    chosen = []
    for _ in OPERATORS:
        chosen.append(bandit.choose())
        bandit.update(chosen[-1], 0.1, 10)
    assert chosen == ["keyword", "related", "forward", "backward"]
    restored = chooser_from_dict(json.loads(json.dumps(bandit.to_dict())))
    assert restored.try_first == list(SEARCHES_FIRST)


def test_ucb1_tries_every_operator_first_in_order() -> None:
    bandit = UCB1(OPERATORS)
    chosen = []
    for _ in OPERATORS:
        chosen.append(bandit.choose())
        bandit.update(chosen[-1], 0.9 if chosen[-1] == "forward" else 0.1, 10)
    assert chosen == OPERATORS


def test_ucb1_scores_on_a_hand_example() -> None:
    bandit = UCB1(["a", "b"])
    bandit.update("a", 0.5, 10)
    # 0.5 + sqrt(2 ln 10 / 10); b never tried
    assert bandit.scores() == {"a": pytest.approx(1.1786140424), "b": math.inf}
    assert bandit.choose() == "b"
    bandit.update("b", 0.2, 30)  # n = 40: 0.5 + sqrt(2 ln 40 / 10), 0.2 + sqrt(2 ln 40 / 30)
    assert bandit.scores() == pytest.approx({"a": 1.3589388167, "b": 0.6959085570})
    assert bandit.choose() == "a"
    bandit.update("a", 0.3, 10)  # mean(μ_a) = 0.4 over 2 rounds, n_a = 20, n = 50
    assert bandit.scores() == pytest.approx({"a": 1.0254616699, "b": 0.7106873150})


def _play(chooser, rounds: int) -> list[str]:
    """Rounds where "backward" never returns a page and the others return 20 pages."""
    rewards = {"forward": 0.3, "keyword": 0.5, "related": 0.4}
    chosen = []
    for _ in range(rounds):
        op = chooser.choose()
        chosen.append(op)
        chooser.update(op, rewards.get(op, 0.0), 0 if op == "backward" else 20)
    return chosen


def test_an_operator_returning_no_pages_stops_being_chosen() -> None:
    chosen = _play(UCB1(OPERATORS), 300)
    picks = [i for i, op in enumerate(chosen) if op == "backward"]
    assert picks[0] == 1 and len(picks) <= 3 and picks[-1] < 100
    # counted as one page a round, its bonus is finite but shrinks too slowly against the
    # 20-page rounds of the others: why "mean" is the default
    literal = UCB1(OPERATORS, empty_round="one")
    assert _play(literal, 300).count("backward") > 30
    assert math.isfinite(literal.scores()["backward"])


def test_zero_pages_earn_nothing_and_count_as_pages() -> None:
    bandit = UCB1(["a", "b"])
    bandit.update("a", 0.5, 10)
    bandit.update("a", 0.7, 30)
    bandit.update("b", 0.9, 0)  # reward ignored: no pages
    assert bandit.mean_reward("b") == 0.0
    assert bandit.pages == {"a": 40, "b": 20}  # the mean of the rounds with pages
    assert UCB1(["a"], empty_round="one").empty_round_pages() == 1.0


@pytest.mark.parametrize("chooser", [UCB1(OPERATORS), FixedChooser(OPERATORS, "keyword"),
                                     RandomChooser(OPERATORS, seed=3)])
def test_choosers_survive_a_json_round_trip(chooser) -> None:
    _play(chooser, 12)
    restored = chooser_from_dict(json.loads(json.dumps(chooser.to_dict())))
    assert type(restored) is type(chooser)
    assert restored.to_dict() == chooser.to_dict()
    assert restored.scores() == chooser.scores()
    assert _play(restored, 10) == _play(chooser, 10)


def test_fixed_and_random_choosers() -> None:
    assert set(_play(FixedChooser(OPERATORS, "related"), 5)) == {"related"}
    picks = _play(RandomChooser(OPERATORS, seed=1), 200)
    assert set(picks) == set(OPERATORS)
    assert picks == _play(RandomChooser(OPERATORS, seed=1), 200)
    with pytest.raises(ValueError):
        FixedChooser(OPERATORS, "nowhere")


def test_make_chooser_by_name_keeps_saved_statistics() -> None:
    assert isinstance(make_chooser("ucb1"), UCB1)
    assert isinstance(make_chooser("random"), RandomChooser)
    fixed = make_chooser("backward")
    assert isinstance(fixed, FixedChooser) and fixed.choose() == "backward"
    saved = RandomChooser(OPERATORS, seed=5)
    _play(saved, 8)
    resumed = make_chooser("ucb1", json.loads(json.dumps(saved.to_dict())))
    assert resumed.rounds == saved.rounds and resumed.scores() == saved.scores()
    with pytest.raises(ValueError):
        make_chooser("bogus")
