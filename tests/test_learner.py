"""The learner: G_w from the crawl database (SQLite and PostgreSQL), Q-learning, background mode."""

from __future__ import annotations

import logging
import statistics
import threading
import time

import numpy as np
import pytest

import jlse.scheduler.store.sql as store_sql
from jlse.learner.background import BackgroundLearner, QTableHolder
from jlse.learner.graph import build_link_graph
from jlse.learner.learner import Learner
from jlse.models.qtable import QTable
from jlse.records import FetchRecord, NewLink, Outcome
from jlse.scheduler.store.base import LearningGraphRows
from jlse.settings import Settings

GAMMA = 0.9


class Crawl:
    """Builds a crawl database by hand: links by name, results by fetching with is_target."""

    def __init__(self, store) -> None:
        self.store = store
        self.ids: dict[str, int] = {}

    def link(self, name: str, parent: str | None = None) -> int:
        parent_id = self.ids[parent] if parent else None
        depth = 0 if parent is None else self.store.get_link(parent_id).depth + 1
        [(link_id, _)] = self.store.add_links([NewLink(
            url=f"http://site.test/{name}", parent_id=parent_id, depth=depth,
            anchor_text=f"anchor {name}", context=f"context {name}")])
        self.ids[name] = link_id
        return link_id

    def fetch(self, name: str, target: bool = False) -> None:
        self.store.record_fetch(FetchRecord(
            url_id=self.ids[name], url="", outcome=Outcome.OK, status_code=200,
            relevance=0.9 if target else 0.4, is_target=target))

    def chain(self, *names: str, parent: str | None = None) -> None:
        """Links ``names`` each the child of the one before; the first hangs from ``parent``."""
        for name in names:
            self.link(name, parent)
            parent = name

    def name_of(self, link_id: int) -> str:
        return {v: k for k, v in self.ids.items()}[int(link_id)]


def graph_by_name(crawl: Crawl, rows: LearningGraphRows) -> dict[str, tuple[str | None, bool]]:
    """name -> (parent name or None, is_result), asserting each vertex appears once."""
    names = [crawl.name_of(link_id) for link_id in rows.ids]
    assert len(names) == len(set(names)), f"a vertex appears twice: {sorted(names)}"
    parents = [None if p == -1 else crawl.name_of(p) for p in rows.parent_ids]
    return {name: (parent, bool(result))
            for name, parent, result in zip(names, parents, rows.is_result, strict=True)}


# --- CrawlStore.learning_graph ---
def test_graph_holds_exactly_the_links_on_result_to_seed_paths(store):
    crawl = Crawl(store)
    crawl.chain("s", "hub", "list", "r1")  # s -> hub -> list -> r1
    crawl.link("r2", "list")  # shares s, hub, list with r1
    crawl.link("nav", "hub")  # fetched, no result below: not in G_w
    crawl.link("queued", "list")  # never fetched
    crawl.chain("other", "deep")  # a second seed with no result
    for name in ("s", "hub", "list", "nav", "other", "deep"):
        crawl.fetch(name)
    crawl.fetch("r1", target=True)
    crawl.fetch("r2", target=True)

    rows = store.learning_graph()

    assert graph_by_name(crawl, rows) == {
        "s": (None, False), "hub": ("s", False), "list": ("hub", False),
        "r1": ("list", True), "r2": ("list", True),
    }
    assert rows.ids.dtype == np.int64 and rows.parent_ids.dtype == np.int64
    assert rows.is_result.dtype == bool
    by_id = dict(zip(rows.ids.tolist(), zip(rows.urls, rows.anchors, rows.contexts, strict=True),
                     strict=True))
    assert by_id[crawl.ids["list"]] == ("http://site.test/list", "anchor list", "context list")


def test_dead_ends_join_the_graph_when_asked(store):
    crawl = Crawl(store)
    crawl.chain("s", "hub", "list", "r1")
    crawl.link("nav", "hub")  # fetched, no result below: a dead end
    crawl.link("queued", "list")  # never fetched: not a vertex either way
    for name in ("s", "hub", "list", "nav"):
        crawl.fetch(name)
    crawl.fetch("r1", target=True)

    graph = graph_by_name(crawl, store.learning_graph(dead_ends=True))

    assert graph == {"s": (None, False), "hub": ("s", False), "list": ("hub", False),
                     "r1": ("list", True), "nav": ("hub", False)}
    assert "nav" not in graph_by_name(crawl, store.learning_graph())


def test_dead_end_vertices_learn_zero(store):
    crawl = Crawl(store)
    crawl.chain("s", "hub", "list", "r1")
    crawl.chain("nav", "deeper", parent="hub")
    for name in ("s", "hub", "list", "nav", "deeper"):
        crawl.fetch(name)
    crawl.fetch("r1", target=True)
    table = Learner(Settings(strategy="jlse", gamma=GAMMA)).learn(store, version=1)
    paper = Learner(Settings(strategy="jlse-paper", gamma=GAMMA)).learn(store, version=1)
    assert table.index.n_vertices_ == 6 and paper.index.n_vertices_ == 4
    # r1 (leaf) 1, list 1 (its edge is rewarded), hub gamma, s gamma^2; nav and deeper 0
    assert sorted(table.q.tolist()) == pytest.approx([0.0, 0.0, GAMMA**2, GAMMA, 1.0, 1.0])
    assert sorted(paper.q.tolist()) == pytest.approx([GAMMA**2, GAMMA, 1.0, 1.0])


def test_result_above_another_result_and_a_seed_that_is_a_result(store):
    crawl = Crawl(store)
    crawl.chain("s", "upper", "lower")  # upper (a result, expanded) leads to lower (a result)
    crawl.link("lone")  # a seed that is itself a result
    crawl.fetch("s")
    for name in ("upper", "lower", "lone"):
        crawl.fetch(name, target=True)

    assert graph_by_name(crawl, store.learning_graph()) == {
        "s": (None, False), "upper": ("s", True), "lower": ("upper", True), "lone": (None, True),
    }


def test_empty_result_table_gives_empty_columns(store):
    crawl = Crawl(store)
    crawl.chain("s", "a")
    crawl.fetch("s")
    rows = store.learning_graph()
    assert len(rows) == 0 and rows.urls == [] and rows.ids.dtype == np.int64
    assert rows.is_result.dtype == bool and rows.parent_ids.shape == (0,)


def test_parent_cycle_in_a_corrupt_database_ends(store):
    crawl = Crawl(store)
    crawl.chain("a", "b", "c")
    crawl.fetch("c", target=True)
    # a's parent becomes c: a -> b -> c -> a, which the crawler itself never writes.
    store._run(lambda cur: cur.execute(store._q("UPDATE links SET parent_id = ? WHERE id = ?"),
                                       (crawl.ids["c"], crawl.ids["a"])), "corrupt")
    rows = store.learning_graph()
    assert graph_by_name(crawl, rows) == {"a": ("c", False), "b": ("a", False), "c": ("b", True)}


def test_rows_are_read_in_batches_without_losing_any(store, monkeypatch):
    crawl = Crawl(store)
    crawl.link("s")
    for n in range(7):
        crawl.link(f"r{n}", "s")
        crawl.fetch(f"r{n}", target=True)
    expected = graph_by_name(crawl, store.learning_graph())
    monkeypatch.setattr(store_sql, "STREAM_BATCH", 2)
    assert graph_by_name(crawl, store.learning_graph()) == expected
    assert len(expected) == 8


# --- build_link_graph ---
def rows_of(ids, parents, results) -> LearningGraphRows:
    return LearningGraphRows(
        ids=np.array(ids, dtype=np.int64), parent_ids=np.array(parents, dtype=np.int64),
        urls=[f"u{i}" for i in ids], anchors=[f"a{i}" for i in ids],
        contexts=[f"c{i}" for i in ids], is_result=np.array(results, dtype=bool))


def edges_by_id(graph) -> set[tuple[int, int]]:
    return set(zip(graph.ids[graph.src].tolist(), graph.ids[graph.dst].tolist(), strict=True))


def test_graph_indexes_vertices_by_sorted_id_and_keeps_triples_aligned():
    graph = build_link_graph(rows_of([30, 10, 20, 40], [20, -1, 10, 20], [True, False, False, True]))
    assert graph.ids.tolist() == [10, 20, 30, 40]
    assert graph.urls == ["u10", "u20", "u30", "u40"]
    assert graph.anchors == ["a10", "a20", "a30", "a40"]
    assert graph.contexts == ["c10", "c20", "c30", "c40"]
    assert graph.is_leaf.tolist() == [False, False, True, True]
    assert edges_by_id(graph) == {(10, 20), (20, 30), (20, 40)}
    assert graph.src.dtype == np.int64 and graph.dst.dtype == np.int64


def test_graph_skips_parents_outside_the_vertex_set_self_loops_and_duplicates():
    # 99 and 5 are not vertices (5 is below every id, 99 above); 7 is its own parent.
    graph = build_link_graph(rows_of([8, 7, 6, 8], [99, 7, 5, 6], [True, False, True, True]))
    assert graph.ids.tolist() == [6, 7, 8]
    assert graph.n_edges == 0 and graph.n_vertices == 3
    graph = build_link_graph(rows_of([1, 2, 2], [-1, 1, 1], [False, True, True]))
    assert graph.ids.tolist() == [1, 2] and edges_by_id(graph) == {(1, 2)}


def test_empty_graph():
    graph = build_link_graph(rows_of([], [], []))
    assert graph.n_vertices == 0 and graph.n_edges == 0 and graph.urls == []


# --- Learner ---
def test_learn_gives_gamma_powers_along_a_chain(store):
    crawl = Crawl(store)
    crawl.chain("s", "a", "b", "c", "r")  # r is 1 step from c, 4 from s
    crawl.link("side", "a")  # fetched, no result below: not in G_w
    for name in ("s", "a", "b", "c", "side"):
        crawl.fetch(name)
    crawl.fetch("r", target=True)

    table = Learner(Settings(gamma=GAMMA)).learn(store, version=4)

    assert table.version == 4 and table.meta["n_vertices"] == 5
    assert table.meta["n_edges"] == 4 and table.meta["n_results"] == 1
    q_by_name = dict(zip(["s", "a", "b", "c", "r"], table.q.tolist(), strict=True))  # id order
    assert q_by_name == pytest.approx({"r": 1.0, "c": 1.0, "b": GAMMA, "a": GAMMA ** 2,
                                       "s": GAMMA ** 3})


def test_a_new_link_like_a_vertex_is_predicted_from_that_vertex(store):
    crawl = Crawl(store)
    crawl.chain("seed", "phones", "reviews", "item")
    crawl.fetch("item", target=True)
    table = Learner(Settings(gamma=GAMMA)).learn(store, version=1)
    best, score = table.index.best_vertices(
        ["anchor reviews"], ["http://site.test/reviews"], ["context reviews"])
    assert best.tolist() == [2]  # vertices in id order: seed, phones, reviews, item
    predicted = table.predicted(["anchor reviews"], ["http://site.test/reviews"],
                                ["context reviews"])
    assert predicted[0] == pytest.approx(score[0] * 1.0) and 0 < predicted[0] < 1


def test_learn_uses_the_reward_and_gamma_settings(store):
    crawl = Crawl(store)
    crawl.chain("s", "a", "r")
    crawl.fetch("r", target=True)
    table = Learner(Settings(gamma=0.5, reward=2.0)).learn(store, version=1)
    assert table.q.tolist() == pytest.approx([1.0, 2.0, 2.0])


def test_learn_without_results_is_none(store):
    crawl = Crawl(store)
    crawl.chain("s", "a")
    crawl.fetch("s")
    assert Learner(Settings()).learn(store, version=1) is None


# --- BackgroundLearner ---
CF = 3
WAIT = 30.0


@pytest.fixture()
def background(store_url, store, tmp_path):
    """A started BackgroundLearner on the crawl database of ``store`` (cf = 3), stopped after."""
    holder = QTableHolder()
    learner = BackgroundLearner(Settings(cf=CF), store_url, holder, tmp_path / "qtables")
    learner.start()
    yield learner
    learner.stop(timeout=WAIT)


def add_results(crawl: Crawl, count: int) -> int:
    """``count`` more result pages below one seed; returns the ResultTable size."""
    if "s" not in crawl.ids:
        crawl.link("s")
    start = sum(1 for name in crawl.ids if name.startswith("r"))
    for n in range(start, start + count):
        crawl.link(f"r{n}", "s")
        crawl.fetch(f"r{n}", target=True)
    return crawl.store.result_count()


def saved_versions(background) -> list[int]:
    return sorted(int(p.name[len("qtable-v"):-len(".npz")])
                  for p in background.qtable_dir.glob("qtable-v*.npz"))


def test_notify_below_cf_does_nothing_and_at_cf_learns_once(store, background):
    crawl = Crawl(store)
    background.notify(add_results(crawl, CF - 1))
    assert background.wait_idle(WAIT)
    assert background.learned_versions == 0 and background.holder.get() is None
    assert saved_versions(background) == []

    background.notify(add_results(crawl, 1))  # cf results
    assert background.wait_idle(WAIT)
    assert background.learned_versions == 1 and background.holder.version == 1
    assert saved_versions(background) == [1]
    assert background.holder.get().meta["n_results"] == CF
    assert background.holder.get().index.prepared  # ready to search before it was swapped in

    background.notify(add_results(crawl, CF - 1))  # grown by less than cf since the last learn
    assert background.wait_idle(WAIT)
    assert background.learned_versions == 1
    assert background.last_error is None


def test_versions_increase_and_only_the_last_three_files_are_kept(store, background):
    crawl = Crawl(store)
    for expected_version in range(1, 6):
        background.notify(add_results(crawl, CF))
        assert background.wait_idle(WAIT)
        assert background.holder.version == expected_version
    assert saved_versions(background) == [3, 4, 5]
    saved = QTable.load(background.qtable_dir / "qtable-v5.npz")
    assert saved.version == 5 and saved.meta["n_results"] == 5 * CF
    # A new learner on the same folder goes on from the newest saved version.
    later = BackgroundLearner(Settings(cf=CF), background.store_url, QTableHolder(),
                              background.qtable_dir)
    later.start()
    try:
        later.notify(crawl.store.result_count())
        assert later.wait_idle(WAIT) and later.holder.version == 6
    finally:
        later.stop(WAIT)
    assert saved_versions(background) == [4, 5, 6]


def test_a_failing_round_is_logged_and_the_previous_table_stays(store, background, caplog):
    crawl = Crawl(store)
    background.notify(add_results(crawl, CF))
    assert background.wait_idle(WAIT) and background.holder.version == 1
    real_learn = background.learner.learn

    def broken_learn(store, version):
        raise RuntimeError("the learner broke")

    background.learner.learn = broken_learn
    with caplog.at_level(logging.ERROR, logger="jlse.learner.background"):
        background.notify(add_results(crawl, CF))
        assert background.wait_idle(WAIT)
    assert "RuntimeError: the learner broke" in background.last_error
    assert any("round failed" in record.getMessage() for record in caplog.records)
    assert background.holder.version == 1 and background.learned_versions == 1

    background.learner.learn = real_learn  # the crawl went on; the next round works again
    background.notify(add_results(crawl, CF))
    assert background.wait_idle(WAIT) and background.holder.version == 2


def test_notify_never_waits_for_a_running_round_and_queues_at_most_one_more(store, background):
    crawl = Crawl(store)
    entered, release = threading.Event(), threading.Event()
    calls = []
    real_learn = background.learner.learn

    def slow_learn(store, version):
        calls.append(version)
        entered.set()
        release.wait(WAIT)
        return real_learn(store, version)

    background.learner.learn = slow_learn
    count = add_results(crawl, CF)
    background.notify(count)
    assert entered.wait(WAIT)
    durations = []
    for _ in range(50):  # each of these asks for one more round
        count += CF
        started = time.perf_counter()
        background.notify(count)
        durations.append(time.perf_counter() - started)
    assert max(durations) < 0.05  # never waited for the round (which is blocked)
    assert statistics.median(durations) < 0.001
    release.set()
    assert background.wait_idle(WAIT)
    assert calls == [1, 2]  # the running round plus exactly one more
    assert background.holder.version == 2


def test_an_unreachable_database_is_a_logged_round_not_a_crash(caplog):
    learner = BackgroundLearner(Settings(cf=1), "postgresql://postgres@127.0.0.1:1/none",
                                QTableHolder())
    learner.start()
    try:
        with caplog.at_level(logging.ERROR):
            learner.notify(1)
            assert learner.wait_idle(WAIT)
        assert learner.last_error.startswith("StoreError")
        assert learner.holder.get() is None and learner._thread.is_alive()
    finally:
        learner.stop(WAIT)
    assert not learner._thread.is_alive()


def test_learning_reads_while_the_crawl_keeps_writing(store, background):
    crawl = Crawl(store)
    add_results(crawl, CF)
    stop_writing = threading.Event()

    def writer():
        n = 0
        while not stop_writing.is_set():
            store.add_links([NewLink(f"http://site.test/w{n}", crawl.ids["s"], 1)])
            n += 1

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        for round_number in range(1, 4):
            background.notify(round_number * CF)
            assert background.wait_idle(WAIT)
    finally:
        stop_writing.set()
        thread.join(WAIT)
    assert background.last_error is None and background.holder.version == 3
