"""The oracle crawl (``jlse.oracle``): its fetch order on hand-made graphs, its link graph, and
the oracle row and efficiencies of ``jlse eval`` on the sandbox web."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jlse.eval import EvalReport, run_eval, truth_key
from jlse.eval_report import efficiency
from jlse.oracle import link_graph, oracle_for_web, oracle_order, web_graph
from jlse.topic import read_seeds


def order(graph: dict[str, list[str]], relevant: str, seeds: str = "S", budget: int = 100,
          fetchable: set[str] | None = None, **kwargs) -> list[str]:
    nodes = set(graph) | {t for targets in graph.values() for t in targets} | set(seeds)
    return oracle_order(graph, set(relevant), nodes if fetchable is None else fetchable,
                        list(seeds), budget, **kwargs)


def test_relevant_pages_in_sight_come_first_in_discovery_order() -> None:
    graph = {"S": ["A", "B", "C", "D"], "B": ["E"], "A": ["F"]}
    # B, C relevant: fetched before A and D; E (relevant, seen on B) before A too
    assert order(graph, "BCE") == ["S", "B", "C", "E", "A", "D", "F"]


def test_the_link_nearest_a_relevant_page_goes_first() -> None:
    graph = {"S": ["X", "Y", "Z"], "X": ["X2"], "X2": ["R1"], "Y": ["R2"], "Z": ["R3"]}
    # Y and Z are one hop from a relevant page, X two: Y (seen first), R2, Z, R3, then X
    assert order(graph, ["R1", "R2", "R3"]) == ["S", "Y", "R2", "Z", "R3", "X", "X2", "R1"]


def test_unreachable_pages_are_never_fetched_and_the_order_ends_early() -> None:
    graph = {"S": ["A"], "A": ["R"], "U": ["R2", "S"]}  # nothing links to U
    assert order(graph, ["R", "R2"], budget=50) == ["S", "A", "R"]
    assert order(graph, ["R", "R2"], budget=2) == ["S", "A"]
    assert order({}, "R", seeds="S", budget=5, fetchable=set()) == []  # a seed it cannot fetch


def test_only_fetchable_pages_are_fetched_or_walked_through() -> None:
    # N is not fetchable (robots.txt): R1 behind it is out of reach, so A (only a path through
    # N) is no nearer a relevant page than any junk; B leads to R2 in three hops and goes first
    graph = {"S": ["A", "B", "D"], "A": ["N"], "N": ["R1"], "B": ["B2"], "B2": ["B3"],
             "B3": ["R2"]}
    fetchable = {"S", "A", "B", "B2", "B3", "R1", "R2"}  # D and N are not
    got = order(graph, ["R1", "R2", "D"], fetchable=fetchable)
    assert got == ["S", "B", "B2", "B3", "R2", "A"]


def test_distances_are_recomputed_when_relevant_pages_are_fetched() -> None:
    # X only leads to R1; once R1 is fetched (through A), X leads nowhere: the exact oracle
    # takes Y towards R2 first, one that keeps the first distances wastes a fetch on X
    graph = {"S": ["A", "X", "Y"], "A": ["R1"], "X": ["R1"], "Y": ["Y2"], "Y2": ["R2"]}
    assert order(graph, ["R1", "R2"]) == ["S", "A", "R1", "Y", "Y2", "R2", "X"]
    assert order(graph, ["R1", "R2"], refresh=None) == ["S", "A", "R1", "X", "Y", "Y2", "R2"]


def test_the_order_is_deterministic() -> None:
    edges = {f"p{i}": [f"p{(i * 7 + k) % 60}" for k in range(1, 4)] for i in range(60)}
    relevant = {f"p{i}" for i in range(0, 60, 9)}
    first = oracle_order(edges, relevant, set(edges), ["p1", "p2"], 40)
    shuffled = dict(reversed(list(edges.items())))
    again = oracle_order(shuffled, set(sorted(relevant, reverse=True)),
                         set(sorted(edges, reverse=True)), ["p1", "p2"], 40)
    assert first == again and len(first) == 40 and len(set(first)) == 40


def test_link_graph_keeps_links_to_known_pages_as_the_parser_reads_them() -> None:
    page = (b'<html><head><base href="http://h.test/dir/"></head><body>'
            b'<a href="a?y=2&x=1">a</a> <a href="/b#top">b</a> <a href="/b">b again</a>'
            b'<a href="http://other.test/">unknown</a> <a href="../self">self</a></body></html>')
    known = {truth_key(u) for u in ("http://h.test/dir/a?x=1&y=2", "http://h.test/b",
                                    "http://h.test/self")}
    graph = link_graph([("http://H.test:80/self", page)], known, truth_key)
    assert graph == {"http://h.test/self": ["http://h.test/dir/a?x=1&y=2", "http://h.test/b"]}


def test_efficiency_is_none_without_both_rates() -> None:
    assert efficiency(0.3, 0.6) == pytest.approx(0.5)
    assert efficiency(None, 0.6) is None and efficiency(0.3, None) is None
    assert efficiency(0.3, 0.0) is None


# --- on the sandbox web ---

@pytest.fixture(scope="module")
def short_eval(tmp_path_factory, sandbox_web) -> tuple[EvalReport, Path]:
    out = tmp_path_factory.mktemp("oracle-eval")
    report = run_eval(["phones"], ["bfs", "jlse"], budget=500, out_dir=out,
                      checkpoints=(100, 250, 500), web=sandbox_web)
    return report, out


def test_the_oracle_bounds_every_strategy_on_the_sandbox(short_eval) -> None:
    report, _ = short_eval
    [oracle] = report.oracle
    assert oracle.strategy == "oracle" and oracle.fetched == 500
    assert [r.strategy for r in report.results] == ["bfs", "jlse"]
    for result in report.results:
        assert result.fetched == 500
        for n in (100, 250, 500):
            assert oracle.harvest_at[n] >= result.harvest_at[n], (result.strategy, n)
            assert result.efficiency_at[n] == pytest.approx(
                result.harvest_at[n] / oracle.harvest_at[n])
            assert 0 < result.efficiency_at[n] <= 1
    bfs, jlse = report.results
    assert jlse.efficiency_at[500] > bfs.efficiency_at[500]
    assert oracle.efficiency_at[500] == pytest.approx(1.0)


def test_oracle_for_web_matches_the_eval_and_stays_in_the_truth(short_eval, sandbox_web,
                                                                tmp_path) -> None:
    report, out = short_eval
    seeds = read_seeds(out / "topics" / "phones" / "seeds.txt")
    urls = oracle_for_web(sandbox_web, "phones", seeds, 500, key=truth_key)
    assert len(urls) == len(set(urls)) == 500
    truths = [sandbox_web.truth(url) for url in urls]
    assert all(t is not None and t.crawlable for t in truths)
    relevant = sum(t.topic == "phones" for t in truths)
    assert report.oracle[0].harvest_at[500] == pytest.approx(relevant / 500)
    assert urls[0] in {truth_key(seed) for seed in seeds}
    assert web_graph(sandbox_web, truth_key) is web_graph(sandbox_web, truth_key)  # cached


def test_the_report_shows_the_oracle_and_the_efficiencies(short_eval) -> None:
    report, out = short_eval
    markdown = (out / "report.md").read_text()
    assert markdown == report.render()
    assert "| oracle | 500 |" in markdown
    assert "### phones: efficiency = HR@N / oracle HR@N" in markdown
    assert "| strategy | eff@100 | eff@250 | eff@500 |" in markdown
    assert "## efficiency, mean over 1 topics" in markdown
    data = json.loads((out / "report.json").read_text())
    assert data["oracle"][0]["strategy"] == "oracle" and data["oracle_note"] == ""
    assert set(data["results"][0]["efficiency_at"]) == {"100", "250", "500"}
    assert data["mean_efficiency"]["jlse"]["500"] == pytest.approx(
        report.results[1].efficiency_at[500])
    assert (out / "phones-harvest.png").read_bytes()[:4] == b"\x89PNG"
