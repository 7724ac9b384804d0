"""``jlse eval --discovery``: the metrics on hand-made inputs, and a small sandbox run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jlse.cli import main
from jlse.errors import EXIT_USAGE
from jlse.eval import GroundTruth
from jlse.eval_discovery import mean_curves, run_discovery_eval
from jlse.eval_discovery_metrics import (
    ChooserRun,
    RankingResult,
    headline_of,
    mean_rank,
    median_rank,
    precision_at,
    r_precision,
    ranking_methods,
    relevant_ranks,
    site_curve,
    site_metrics,
)

# ranked sites, best first: s1, s2 are seeds; r* relevant, n* not
RANKED = ["s1", "r1", "n1", "s2", "r2", "n2", "n3", "r3"]
RELEVANT = {"s1", "r1", "r2", "r3", "r4"}  # r4 never ranked; s1 a relevant seed
SEEDS = {"s1", "s2"}


def test_precision_at_k_leaves_the_seed_sites_out() -> None:
    # non-seed order: r1 n1 r2 n2 n3 r3
    assert precision_at(RANKED, RELEVANT, 1, SEEDS) == 1.0
    assert precision_at(RANKED, RELEVANT, 2, SEEDS) == 0.5
    assert precision_at(RANKED, RELEVANT, 3, SEEDS) == pytest.approx(2 / 3)
    assert precision_at(RANKED, RELEVANT, 6, SEEDS) == pytest.approx(3 / 6)
    # a list shorter than k: the missing places are not relevant
    assert precision_at(RANKED, RELEVANT, 10, SEEDS) == pytest.approx(3 / 10)
    # without excluding seeds the relevant seed s1 would count
    assert precision_at(RANKED, RELEVANT, 1) == 1.0 and precision_at(RANKED, RELEVANT, 4) == 0.5
    with pytest.raises(ValueError):
        precision_at(RANKED, RELEVANT, 0, SEEDS)


def test_mean_and_median_rank_of_the_relevant_non_seed_sites() -> None:
    ranks = relevant_ranks(RANKED, RELEVANT, SEEDS)
    assert ranks == [1, 3, 6]
    assert mean_rank(ranks) == pytest.approx(10 / 3)
    assert median_rank(ranks) == 3.0
    assert median_rank([1, 2, 4, 9]) == 3.0  # even count: the mean of the middle two
    assert mean_rank([]) is None and median_rank([]) is None
    metrics = site_metrics(RANKED, RELEVANT, SEEDS, ks=(1, 2, 10))
    assert metrics.precision == {1: 1.0, 2: 0.5, 10: pytest.approx(0.3)}
    assert (metrics.n_sites, metrics.n_relevant) == (6, 3)
    assert metrics.mean_rank == pytest.approx(10 / 3) and metrics.median_rank == 3.0


def test_r_precision() -> None:
    assert r_precision([True, False, True, False]) == 0.5  # R = 2: one of the first two
    assert r_precision([True, True, False]) == 1.0
    assert r_precision([False, False]) is None


def test_site_curve_counts_new_relevant_non_seed_sites_with_a_known_page() -> None:
    truth = GroundTruth()
    for url, topic in (("http://a.test/1", "phones"), ("http://a.test/2", "phones"),
                       ("http://b.test/1", "phones"), ("http://seed.test/1", "phones"),
                       ("http://c.test/1", "cooking")):
        truth.add(url, topic, False)
    urls = ["http://seed.test/1", "http://a.test/1", "http://c.test/1", "http://a.test/2",
            "http://b.test/missing", "http://B.test/1"]
    curve = site_curve(urls, truth, {"a.test", "b.test", "seed.test"}, {"seed.test"})
    assert curve.tolist() == [0, 1, 1, 1, 1, 2]  # b.test's unknown page does not count


def _run(chooser: str, new_sites: int, topic: str = "t") -> ChooserRun:
    return ChooserRun(topic, chooser, 100, {}, {}, 0.0, 0.0, None, sites=[0, new_sites])


def test_headline_compares_ucb1_with_the_best_operator_and_random() -> None:
    runs = [_run("ucb1", 19), _run("forward", 20), _run("keyword", 12), _run("random", 18)]
    row = headline_of(runs, [])
    assert row["best_operator"] == "forward" and row["best_operator_new_sites"] == 20
    assert row["ucb1_within_5pct_of_best"] is True  # 19 >= 0.95 * 20
    assert row["ucb1_beats_random"] is True
    row = headline_of([*runs[1:], _run("ucb1", 18)], [])
    assert row["ucb1_within_5pct_of_best"] is False and row["ucb1_beats_random"] is False


def test_headline_compares_means_over_the_repeats() -> None:
    runs = [_run("ucb1", 10), _run("ucb1", 20, "u"), _run("keyword", 12), _run("keyword", 6, "u")]
    repeated = [_run("ucb1", 4), _run("keyword", 30)]
    for run in repeated:
        run.repeat = 1
    row = headline_of([*runs, *repeated], [], summed=True)
    # repeat 0: ucb1 30, keyword 18 (both topics); repeat 1: ucb1 4, keyword 30
    assert row["new_sites"] == {"ucb1": 17.0, "keyword": 24.0}
    assert row["new_sites_range"] == {"ucb1": [4, 30], "keyword": [18, 30]}
    assert row["best_operator"] == "keyword" and row["ucb1_within_5pct_of_best"] is False


def test_mean_curves_over_repeats() -> None:
    first = _run("ucb1", 0)
    first.harvest, first.sites = [1.0, 0.5, 0.5], [0, 1, 2]
    second = _run("ucb1", 0)
    second.harvest, second.sites = [0.0, 0.5], [1, 1]  # ended early: keeps its count
    (curves,) = mean_curves([first, second])
    assert curves.strategy == "ucb1"
    assert curves.harvest == [0.5, 0.5] and curves.sites == [0.5, 1.0, 1.5]


def test_headline_combined_must_beat_every_single_function_on_p20() -> None:
    def ranking(method: str, group: str, p20: float) -> RankingResult:
        metrics = site_metrics([], set(), set())
        metrics.precision[20] = p20
        return RankingResult("t", method, group, [], 0.0, metrics)

    rankings = [ranking("combined", "combined", 0.5), ranking("lr", "single", 0.45),
                ranking("alpha=0.5", "alpha", 0.9)]  # the sweep is not a single function
    assert headline_of([], rankings)["combined_beats_every_single"] is True
    rankings.append(ranking("cosine", "single", 0.5))  # a tie is not a win
    assert headline_of([], rankings)["combined_beats_every_single"] is False


def test_ranking_methods_cover_every_function_and_the_sweep() -> None:
    methods = {m.method: m for m in ranking_methods(0.2, (0.0, 0.5))}
    assert set(methods) == {"combined", "lr", "ocsvm", "cosine", "jaccard", "nb", "pagerank",
                            "alpha=0", "alpha=0.5"}
    assert methods["lr"].functions == ("lr",) and methods["lr"].alpha == 0.0
    assert methods["combined"].alpha == 0.2


def test_discovery_options_that_belong_to_crawls_are_refused(capsys) -> None:
    assert main(["eval", "--discovery", "--truth", "t.jsonl"]) == EXIT_USAGE
    assert "--truth" in capsys.readouterr().err


def test_a_small_discovery_evaluation(tmp_path: Path) -> None:
    """One topic, 60 pages, two choosers: every field of the report, rates in [0, 1]."""
    report = run_discovery_eval(["phones"], budget=60, out_dir=tmp_path,
                                choosers=["ucb1", "random"], alphas=[0.0, 0.5])
    data = json.loads((tmp_path / "discovery-report.json").read_text(encoding="utf-8"))
    assert (tmp_path / "discovery-report.md").read_text(encoding="utf-8") == report.render()
    for name in ("phones-discovery-harvest.png", "phones-discovery-sites.png"):
        assert (tmp_path / name).stat().st_size > 0
    assert {"budget", "checkpoints", "choosers", "alphas", "settings", "truth", "headline",
            "runs", "rankings", "plots", "elapsed"} <= set(data)
    assert data["truth"]["phones"]["relevant_non_seed_sites"] > 20
    assert [(r["topic"], r["chooser"]) for r in data["runs"]] == [("phones", "ucb1"),
                                                                 ("phones", "random")]
    for run in data["runs"]:
        assert not run["reason"].startswith("failed"), run["reason"]
        assert 50 <= run["fetched"] <= 60
        rates = [*run["harvest_at"].values(), run["site_harvest"], run["site_recall"],
                 *run["ranking"]["precision"].values(), *run["harvest"]]
        assert all(0.0 <= value <= 1.0 for value in rates if value is not None), run
        assert run["new_sites"] == run["sites_at"]["60"] <= data["truth"]["phones"][
            "relevant_non_seed_sites"]
        assert set(run["rounds"]) >= {"seeds"}
    methods = [r["method"] for r in data["rankings"]]
    assert methods == ["combined", "lr", "ocsvm", "cosine", "jaccard", "nb", "pagerank",
                       "alpha=0", "alpha=0.5"]
    assert data["rankings"][0]["reproduced"] is True  # the run's own ranking, rebuilt
    for ranking in data["rankings"]:
        metrics = ranking["metrics"]
        assert set(metrics["precision"]) == {"10", "20", "50"}
        assert all(0.0 <= value <= 1.0 for value in metrics["precision"].values())
        assert 0.0 <= metrics["page_r_precision"] <= 1.0
        if metrics["n_relevant"]:
            assert 1 <= metrics["median_rank"] <= metrics["n_sites"]
            assert 1 <= metrics["mean_rank"] <= metrics["n_sites"]
    headline = data["headline"]["phones"]
    assert set(headline["single_p20"]) == {"lr", "ocsvm", "cosine", "jaccard", "nb", "pagerank"}
    assert headline["ucb1_beats_random"] in (True, False)
