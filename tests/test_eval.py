"""``jlse eval``: ground-truth metrics on a hand-made fetch order, and a small sandbox run."""

from __future__ import annotations

import json
import logging
import sqlite3
from pathlib import Path

import pytest

from jlse.eval import (
    EvalError,
    EvalReport,
    GroundTruth,
    fetched_urls,
    harvest_curve,
    load_truth,
    measure,
    recall_curve,
    run_eval,
    run_label,
    sites_curve,
    truth_key,
)
from jlse.eval_losses import page_losses
from jlse.eval_report import base_label, markdown_table
from jlse.records import FetchRecord, NewLink, Outcome
from jlse.scheduler.store import open_store

A, B, C, D, E = (f"http://p.test/{name}" for name in "abcde")
UNKNOWN = "http://p.test/redirect"


@pytest.fixture()
def truth() -> GroundTruth:
    truth = GroundTruth()
    truth.add(A, "phones", True)
    truth.add(B, "phones", False)
    truth.add(C, "cooking", True)
    truth.add(D, "phones", True)  # never fetched
    truth.add(E, "phones", True)
    return truth


FETCH_ORDER = [A, C, B, E, UNKNOWN]


def test_harvest_and_recall_curves_exact(truth: GroundTruth) -> None:
    assert harvest_curve(FETCH_ORDER, truth, "phones") == pytest.approx([1, 1 / 2, 2 / 3, 3 / 4, 3 / 5])
    assert recall_curve(FETCH_ORDER, truth, "phones") == pytest.approx([1 / 3, 1 / 3, 1 / 3, 2 / 3, 2 / 3])
    # the other topic: C is its only page and only target
    assert harvest_curve(FETCH_ORDER, truth, "cooking") == pytest.approx([0, 1 / 2, 1 / 3, 1 / 4, 1 / 5])
    assert recall_curve(FETCH_ORDER, truth, "cooking")[-1] == 1.0


def test_relevant_sites_count_registered_domains_with_a_relevant_page(truth) -> None:
    other_host, same_domain = "http://q.test/f", "http://www.q.test/g"
    truth.add(other_host, "phones", False)
    truth.add(same_domain, "phones", False)
    order = [C, A, UNKNOWN, B, other_host, same_domain]
    assert sites_curve(order, truth, "phones").tolist() == [0, 1, 1, 1, 2, 2]
    assert sites_curve(order, truth, "cooking").tolist() == [1, 1, 1, 1, 1, 1]
    result = measure("phones", "bfs", order, truth, [1, 5, 100])
    assert result.sites_at == {1: 0, 5: 2, 100: 2}  # the crawl ended: the count holds
    assert "| bfs | 6 |" in markdown_table([result], [1, 5, 100])
    assert markdown_table([result], [1, 5, 100]).splitlines()[2].endswith("| 0 | 2 | 2 |")


def test_a_target_fetched_twice_counts_once(truth: GroundTruth) -> None:
    assert recall_curve([A, A, E], truth, "phones") == pytest.approx([1 / 3, 1 / 3, 2 / 3])


def test_measure_at_checkpoints(truth: GroundTruth) -> None:
    result = measure("phones", "bfs", FETCH_ORDER, truth, [2, 5, 10])
    assert result.fetched == 5 and result.n_targets == 3
    assert result.harvest_at == {2: pytest.approx(0.5), 5: pytest.approx(0.6), 10: None}
    assert result.recall_at == {2: pytest.approx(1 / 3), 5: pytest.approx(2 / 3),
                                10: pytest.approx(2 / 3)}  # the crawl ended: recall holds
    table = markdown_table([result], [2, 5, 10])
    assert "| bfs | 5 | 0.500 | 0.600 | - | 0.333 | 0.667 | 0.667 |" in table


def test_truth_matches_canonical_urls_and_reordered_queries() -> None:
    truth = GroundTruth()
    truth.add("HTTP://Shop.test:80/list?page=2&cat=5#top", "phones", False)
    assert truth.is_relevant("http://shop.test/list?cat=5&page=2", "phones")
    assert truth_key("http://shop.test/index.html") == truth_key("http://shop.test/")
    assert not truth.is_relevant("http://shop.test/list?page=3&cat=5", "phones")


def test_load_truth_skips_malformed_lines(tmp_path: Path, caplog) -> None:
    path = tmp_path / "truth.jsonl"
    rows = [json.dumps({"url": A, "topic": "phones", "target": True}), "{not json",
            json.dumps({"topic": "phones"}), "", json.dumps({"url": B, "topic": "phones"})]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="jlse.eval"):
        truth = load_truth(path)
    assert truth.is_relevant(B, "phones") and truth.targets == {"phones": {truth_key(A)}}
    assert "2 malformed lines skipped" in caplog.text
    with pytest.raises(EvalError, match="not found"):
        load_truth(tmp_path / "missing.jsonl")


def test_fetched_urls_in_fetch_order_without_refusals(tmp_path: Path) -> None:
    db = tmp_path / "crawl.db"
    with open_store(f"sqlite:///{db}") as store:
        ids = [link_id for link_id, _ in store.add_links(
            [NewLink(url, None, 0) for url in (A, B, C, D)])]
        store.record_fetch(FetchRecord(ids[2], C, Outcome.OK))
        store.reject(ids[1], Outcome.ROBOTS_DISALLOWED, "robots.txt")
        store.record_fetch(FetchRecord(ids[0], A, Outcome.HTTP_ERROR, status_code=500))
        store.reject(ids[3], Outcome.TRAP, "trap")
    assert fetched_urls(db) == [C, A]  # a 500 is a page request, refusals are not
    with pytest.raises(EvalError, match="not found"):
        fetched_urls(tmp_path / "none.db")


def test_where_the_pages_went(tmp_path: Path, truth: GroundTruth) -> None:
    """Each request in one kind: on the topic (and missed when judged irrelevant), taken for
    the topic from another, judged off it, no page; the topic's other pages known or not."""
    off_judged = "http://p.test/f"
    truth.add(off_judged, "cooking", True)
    db = tmp_path / "crawl.db"
    with open_store(f"sqlite:///{db}") as store:
        urls = (A, B, C, E, UNKNOWN, off_judged)
        added = store.add_links([NewLink(url, None, 0) for url in urls])
        ids = {url: link_id for url, (link_id, _) in zip(urls, added, strict=True)}
        judged = {A: 0.9, C: 0.8, B: 0.2, off_judged: 0.1}
        for url, relevance in judged.items():
            store.record_fetch(FetchRecord(ids[url], url, Outcome.OK, relevance=relevance))
        store.record_fetch(FetchRecord(ids[UNKNOWN], UNKNOWN, Outcome.REDIRECT, status_code=301))
    losses = page_losses(db, truth.topic_of, truth_key, "phones", pages=10, threshold=0.5)
    assert losses == {"pages": 5, "on_topic": 2, "taken_for_topic": 1,
                      "taken_from": {"cooking": 1}, "judged_off_topic": 1, "no_page": 1,
                      "missed": 1, "topic_pages": 4, "known_not_fetched": 1, "unknown": 1}
    first_two = page_losses(db, truth.topic_of, truth_key, "phones", pages=2, threshold=0.85)
    assert (first_two["pages"], first_two["on_topic"], first_two["judged_off_topic"]) == (2, 1, 1)
    assert first_two["known_not_fetched"] == 2  # B and E: linked, not among the first two


def test_run_eval_rejects_bad_input(tmp_path: Path) -> None:
    with pytest.raises(EvalError, match="unknown strategy"):
        run_eval(["phones"], ["random-walk"], budget=10, out_dir=tmp_path)
    truth = tmp_path / "truth.jsonl"
    truth.write_text(json.dumps({"url": A, "topic": "phones"}) + "\n")
    with pytest.raises(EvalError, match="no topic directory"):
        run_eval(["phones"], ["bfs"], budget=10, out_dir=tmp_path, truth_file=truth)


def test_a_failed_crawl_is_reported_not_raised(tmp_path: Path, caplog) -> None:
    topic_dir = tmp_path / "bare"  # seeds only: no topic model, so "ata" cannot run
    topic_dir.mkdir()
    (topic_dir / "seeds.txt").write_text(A + "\n")
    truth = tmp_path / "truth.jsonl"
    truth.write_text(json.dumps({"url": A, "topic": "bare", "target": True}) + "\n")
    with caplog.at_level(logging.ERROR, logger="jlse.eval"):
        report = run_eval(["bare"], ["ata"], budget=5, out_dir=tmp_path / "out",
                          checkpoints=(5,), truth_file=truth, topic_dirs={"bare": topic_dir})
    [result] = report.results
    assert result.fetched == 0 and result.reason.startswith("failed: strategy 'ata' needs")
    assert "bare/ata failed" in caplog.text
    markdown = (tmp_path / "out" / "report.md").read_text()
    assert "| ata (failed) | 0 | - | 0.000 |" in markdown
    assert "oracle: n/a (needs the web's link graph)" in markdown and report.oracle == []


def test_run_eval_on_the_sandbox(tmp_path: Path, sandbox_web) -> None:
    report = run_eval(["phones"], ["bfs", "best-first"], budget=150, out_dir=tmp_path,
                      checkpoints=(50, 100, 150, 2000), web=sandbox_web, oracle=False)
    assert isinstance(report, EvalReport) and report.checkpoints == [50, 100, 150]
    assert [r.strategy for r in report.results] == ["bfs", "best-first"]
    for result in report.results:
        assert result.fetched == 150
        urls = fetched_urls(tmp_path / "phones" / result.strategy / "crawl.db")
        on_topic = sum(sandbox_web.is_relevant(url, "phones") for url in urls)
        assert result.harvest_at[150] == pytest.approx(on_topic / 150)
        assert 0 < result.recall_at[150] < 1
        sites = {host for url in urls if sandbox_web.is_relevant(url, "phones")
                 for host in [url.split("/")[2]]}
        assert result.sites_at[150] == len(sites) > 0
        losses = result.losses
        assert losses["on_topic"] == on_topic and losses["pages"] == 150
        assert sum(losses[kind] for kind in ("on_topic", "taken_for_topic", "judged_off_topic",
                                             "no_page")) == 150
        assert losses["known_not_fetched"] + losses["unknown"] < losses["topic_pages"]
    markdown = (tmp_path / "report.md").read_text()
    assert "## phones" in markdown and "| best-first | 150 |" in markdown
    assert "### phones: where the first 150 pages went" in markdown
    assert "oracle: not computed (--no-oracle)" in markdown and "eff@" not in markdown
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["budget"] == 150 and len(data["results"]) == 2
    assert data["web"] == {"name": "sandbox", "seed": sandbox_web.seed}  # what replays rebuild
    assert markdown.startswith(f"# jlse eval: budget 150 pages on the sandbox web (seed {sandbox_web.seed})")
    assert len(data["results"][0]["harvest"]) == 15  # every 10th point of the curve
    for name in ("phones-harvest.png", "phones-recall.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert report.render() == markdown


def test_polite_focused_crawl_waits_for_relevant_hosts(tmp_path: Path) -> None:
    # With a per-host delay and only 4-5 relevant hosts, the low-priority slot must fetch like
    # one more polite host; without its pause it fetched junk from 25 hosts while the relevant
    # ones waited (HR@250 .45 instead of .76 at politeness_delay=0.05).
    report = run_eval(["phones"], ["jlse"], budget=250, out_dir=tmp_path, checkpoints=(250,),
                      overrides={"politeness_delay": 0.05}, oracle=False)
    [result] = report.results
    assert result.fetched == 250
    assert result.harvest_at[250] > 0.6, result.harvest_at


def test_truth_judged_strategy_records_the_ground_truth_as_relevance(tmp_path: Path,
                                                                     sandbox_web) -> None:
    report = run_eval(["phones"], ["best-first+truth"], budget=60, out_dir=tmp_path,
                      checkpoints=(60,), web=sandbox_web, oracle=False)
    [result] = report.results
    assert result.strategy == "best-first+truth" and result.fetched == 60
    db = sqlite3.connect(tmp_path / "phones" / "best-first+truth" / "crawl.db")
    judged = db.execute("SELECT l.url, f.relevance FROM fetches f JOIN links l "
                        "ON l.id = f.url_id WHERE f.relevance IS NOT NULL").fetchall()
    assert len(judged) >= 50
    assert {relevance for _, relevance in judged} == {0.0, 1.0}
    for url, relevance in judged:
        assert relevance == float(sandbox_web.is_relevant(url, "phones")), url
    with pytest.raises(EvalError, match=r"unknown strategy \['best-first\+oracle'\]"):
        run_eval(["phones"], ["best-first+oracle"], budget=10, out_dir=tmp_path)


def test_repeated_runs_report_their_mean_and_range(tmp_path: Path) -> None:
    report = run_eval(["phones"], ["bfs"], budget=40, out_dir=tmp_path, checkpoints=(20, 40),
                      oracle=False, repeats=2)
    assert [r.strategy for r in report.results] == ["bfs #1", "bfs #2"]
    assert (tmp_path / "phones" / "bfs-1" / "crawl.db").is_file()
    assert (tmp_path / "phones" / "bfs-2" / "crawl.db").is_file()
    harvest = [r.harvest_at[40] for r in report.results]
    sites = [r.sites_at[40] for r in report.results]
    [row] = report.spread()  # no oracle: no mean efficiency over the topics
    assert row == {"strategy": "bfs", "topic": "phones", "values": harvest, "sites": sites}
    rendered = report.render()
    assert "## spread over 2 runs at 40 pages: harvest rate and relevant sites" in rendered
    mean = sum(harvest) / 2
    assert f"| bfs | phones | {mean:.3f} ({min(harvest):.3f}-{max(harvest):.3f}) |" in rendered
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved["repeats"] == 2 and saved["spread"] == [row]


def test_run_labels_and_their_strategy() -> None:
    assert run_label("jlse", 1, 1) == ("jlse", "jlse")
    assert run_label("jlse+truth", 3, 4) == ("jlse+truth #3", "jlse+truth-3")
    assert base_label("jlse+truth #3") == "jlse+truth"
    assert base_label("jlse cf=50") == "jlse cf=50"


def test_repeats_must_be_at_least_one(tmp_path: Path) -> None:
    with pytest.raises(EvalError, match="repeats"):
        run_eval(["phones"], ["bfs"], budget=10, out_dir=tmp_path, repeats=0)
