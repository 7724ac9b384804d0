"""The incremental learner: rounds that add only what is new give a from-scratch solve's Q."""

from __future__ import annotations

import numpy as np
import pytest

from jlse.learner.incremental import IncrementalLearner
from jlse.learner.learner import Learner
from jlse.learner.vertex_table import VertexTable
from jlse.models.qlearning import q_learning
from jlse.models.qtable import QTable
from jlse.records import FetchRecord, NewLink, Outcome
from jlse.scheduler.store import StoreError, open_store
from jlse.settings import Settings

GAMMA = 0.9
WORDS = ("phone", "camera", "review", "price", "laptop", "news", "forum", "shop", "deal", "spec")


class RandomCrawl:
    """A crawl database grown at random, round by round: a tree of links, some fetched, some
    of the fetched ones results (a result is never expanded)."""

    def __init__(self, store, seed: int) -> None:
        self.store = store
        self.rng = np.random.default_rng(seed)
        self.fetched: list[int] = []
        self.queued: list[int] = []
        self.n = 0

    def link(self, parent: int | None) -> int:
        words = self.rng.choice(WORDS, 4)
        [(link_id, _)] = self.store.add_links([NewLink(
            url=f"http://site{self.n % 3}.test/{words[0]}/{self.n}", parent_id=parent,
            depth=0, anchor_text=f"{words[1]} {words[2]} {self.n}",
            context=f"{words[3]} context {self.n % 7}")])
        self.n += 1
        self.queued.append(link_id)
        return link_id

    def fetch_some(self, count: int, result_share: float = 0.3) -> None:
        for _ in range(min(count, len(self.queued))):
            link_id = self.queued.pop(int(self.rng.integers(len(self.queued))))
            target = bool(self.rng.random() < result_share)
            self.store.record_fetch(FetchRecord(url_id=link_id, url="", outcome=Outcome.OK,
                                                status_code=200, relevance=0.5,
                                                is_target=target))
            if not target:
                self.fetched.append(link_id)
                for _ in range(int(self.rng.integers(1, 5))):
                    self.link(link_id)

    def grow(self, seeds: int = 0, fetches: int = 8) -> None:
        for _ in range(seeds):
            self.link(None)
        self.fetch_some(fetches)


def q_by_link(table, link_ids: np.ndarray) -> dict[int, float]:
    return dict(zip(link_ids.tolist(), table.q.tolist(), strict=True))


def from_scratch(settings: Settings, store):
    """The from-scratch Q-table and its vertices' link ids (vertex i is the i-th smallest id)."""
    table = Learner(settings).learn(store, version=1)
    ids = np.sort(store.learning_graph(settings.strategy == "jlse").ids)
    return table, ids


def assert_same_as_from_scratch(learner: IncrementalLearner, store, table) -> None:
    expected, ids = from_scratch(learner.settings, store)
    indexed = learner.graph.link_ids.view()[: learner.n_indexed]
    assert sorted(indexed.tolist()) == ids.tolist()  # the same vertex set
    got = q_by_link(table, indexed)
    want = q_by_link(expected, ids)
    assert got == pytest.approx(want, abs=1e-12)
    assert table.meta["n_results"] == expected.meta["n_results"]
    # The same index: a link's best vertex (by link id) and its score, exact search.
    anchors, urls, contexts = ["phone review 3", "deal spec"], \
        ["http://site1.test/shop/4", "http://site0.test/x"], ["price context 2", "forum"]
    best, score = table.index.best_vertices(anchors, urls, contexts, exact=True)
    best_expected, score_expected = expected.index.best_vertices(anchors, urls, contexts,
                                                                 exact=True)
    assert score == pytest.approx(score_expected, rel=1e-6)
    assert indexed[best].tolist() == ids[best_expected].tolist()


@pytest.mark.parametrize("strategy", ["jlse", "jlse-paper"])
@pytest.mark.parametrize("lookback", [0, 5_000])
def test_incremental_rounds_equal_a_from_scratch_solve(store, strategy, lookback):
    crawl = RandomCrawl(store, seed=3)
    settings = Settings(strategy=strategy, gamma=GAMMA)
    learner = IncrementalLearner(settings, lookback=lookback)
    crawl.grow(seeds=3, fetches=3)
    while store.result_count() == 0:
        crawl.grow(fetches=2)
    for version in range(1, 7):
        table = learner.learn(store, version)
        assert table.version == version
        assert_same_as_from_scratch(learner, store, table)
        crawl.grow(seeds=int(version % 2), fetches=10)
    assert learner.rebuilds == 1  # one full read, then only what was fetched since
    assert len(learner.graph) > 20 and learner.n_results > 5


def test_a_restart_rebuilds_once_from_the_database_then_goes_on_incrementally(store):
    crawl = RandomCrawl(store, seed=5)
    settings = Settings(strategy="jlse", gamma=GAMMA)
    first = IncrementalLearner(settings)
    crawl.grow(seeds=3, fetches=12)
    first.learn(store, 1)
    crawl.grow(fetches=10)
    first.learn(store, 2)

    restarted = IncrementalLearner(settings)  # a worker or learner restart: nothing in memory
    crawl.grow(fetches=10)
    table = restarted.learn(store, 3)
    assert restarted.rebuilds == 1
    assert_same_as_from_scratch(restarted, store, table)
    # Read whole, vertices and terms come in a fit's order: the very same BM25 weights.
    expected, _ = from_scratch(settings, store)
    for got, want in zip(table.index.fields_, expected.index.fields_, strict=True):
        assert got.vocabulary_ == want.vocabulary_ and got.avgdl_ == want.avgdl_
        assert np.array_equal(got.idf_, want.idf_)
        assert (got.doc_weights_ != want.doc_weights_).nnz == 0
    watermark = restarted.watermark
    for version in (4, 5):
        crawl.grow(seeds=1, fetches=10)
        table = restarted.learn(store, version)
        assert_same_as_from_scratch(restarted, store, table)
    assert restarted.rebuilds == 1 and restarted.watermark > watermark


def test_the_index_is_reassembled_only_when_the_graph_has_grown_enough(store):
    crawl = RandomCrawl(store, seed=8)
    settings = Settings(strategy="jlse", gamma=GAMMA)
    learner = IncrementalLearner(settings, full_index_below=0, index_growth=10.0)
    crawl.grow(seeds=2, fetches=10)
    while store.result_count() == 0:
        crawl.grow(fetches=2)
    table = learner.learn(store, 1)
    indexed = learner.n_indexed
    assert indexed == len(learner.graph)
    crawl.grow(fetches=10)
    table = learner.learn(store, 2)
    assert len(learner.graph) > indexed  # new vertices, not yet in the index ...
    assert learner.n_indexed == indexed and len(table.q) == indexed
    link_ids = learner.graph.link_ids.view()[:indexed]
    expected, ids = from_scratch(settings, store)  # ... but Q of the indexed ones is current
    want = q_by_link(expected, ids)
    assert q_by_link(table, link_ids) == pytest.approx({i: want[i] for i in link_ids.tolist()})


def test_without_results_there_is_no_table_until_the_first_one(store):
    crawl = RandomCrawl(store, seed=1)
    learner = IncrementalLearner(Settings(strategy="jlse"))
    crawl.link(None)
    assert learner.learn(store, 1) is None
    crawl.fetch_some(1, result_share=0.0)
    assert learner.learn(store, 2) is None and learner.rebuilds == 1
    crawl.fetch_some(5, result_share=1.0)
    table = learner.learn(store, 3)
    assert table is not None and table.meta["n_results"] >= 1
    assert_same_as_from_scratch(learner, store, table)


def test_vertex_table_propagation_matches_q_learning_on_random_forests():
    rng = np.random.default_rng(0)
    n = 2_000
    parents = np.array([-1 if i < 20 else int(rng.integers(0, i)) for i in range(n)])
    leaves = rng.random(n) < 0.05
    table = VertexTable(gamma=GAMMA)
    for start in range(0, n, 300):  # in rounds; a later round's leaf raises earlier vertices
        stop = min(start + 300, n)
        vertices = table.add(np.arange(start, stop) + 100, leaves[start:stop])
        table.link_parents(vertices, np.where(parents[start:stop] >= 0,
                                              parents[start:stop] + 100, -1))
        table.propagate(vertices[leaves[start:stop]])
    src, dst = table.edges()
    expected, _ = q_learning(n, src, dst, leaves, gamma=GAMMA)
    assert table.q.view() == pytest.approx(expected, abs=1e-12)
    late = np.flatnonzero(~leaves & (table.q.view() == 0))[:5]  # results found late
    table.propagate(table.mark_leaves(late))
    leaves[late] = True
    expected, _ = q_learning(n, src, dst, leaves, gamma=GAMMA)
    assert table.q.view() == pytest.approx(expected, abs=1e-12)


def test_a_round_that_fails_midway_reads_the_graph_whole_next_time(store_url):
    settings = Settings(strategy="jlse", gamma=GAMMA)
    learner = IncrementalLearner(settings)
    with open_store(store_url) as store:
        crawl = RandomCrawl(store, seed=4)
        crawl.grow(seeds=3, fetches=12)
        learner.learn(store, 1)
        crawl.grow(fetches=10)
    with pytest.raises(StoreError):
        learner.learn(store, 2)  # the connection is closed
    assert learner.watermark is None and len(learner.graph) == 0
    with open_store(store_url) as store:
        table = learner.learn(store, 2)
        assert learner.rebuilds == 2
        assert_same_as_from_scratch(learner, store, table)


def test_the_learners_index_gets_its_search_structures_only_where_it_is_searched(store):
    crawl = RandomCrawl(store, seed=2)
    crawl.grow(seeds=3, fetches=12)
    while store.result_count() == 0:
        crawl.grow(fetches=2)
    table = IncrementalLearner(Settings(strategy="jlse", gamma=GAMMA)).learn(store, 1)
    assert not table.index.prepared  # published as it is: no term-major postings, no dict
    published = QTable.from_bytes(table.to_bytes())
    assert published.index.prepared  # a worker loading it is ready to search
    assert not table.index.prepared
    links = (["phone review 3"], ["http://site1.test/shop/4"], ["price context 2"])
    best, score = table.index.best_vertices(*links)  # the first search prepares it
    assert table.index.prepared
    assert (best.tolist(), score.tolist()) == tuple(
        x.tolist() for x in published.index.best_vertices(*links))


def test_field_tokens_number_terms_as_a_fit_and_count_hash_collisions():
    from jlse.learner.field_tokens import FieldTokens
    from jlse.models.link_tokens import text_tokens_many

    field = FieldTokens(text_tokens_many)
    field.add(["phone review", "camera phone", "phone"])
    field.add(["deal review", "camera"])
    assert [field.term(i) for i in range(field.n_terms)] == ["phone", "review", "camera", "deal"]
    assert field.doc_freq.view().tolist() == [3, 2, 2, 1]
    # Make "zebra" hash like "deal": it is taken for "deal", and counted.
    field._hashes[np.flatnonzero(field._ids == 3)] = hash("zebra")
    order = np.argsort(field._hashes, kind="stable")
    field._hashes, field._ids = field._hashes[order], field._ids[order]
    field.add(["zebra"])
    assert field.collisions == 1 and field.n_terms == 4
    assert field.bm25(2.0, 0.75).terms_ == ["phone", "review", "camera", "deal"]


def graph_by_link(learner: IncrementalLearner) -> dict[int, tuple[int, float, bool]]:
    """Each vertex's link id -> (its parent's link id or -1, Q, whether a result)."""
    graph = learner.graph
    n = len(graph)
    ids, parents = graph.link_ids.view()[:n], graph.parents.view()[:n]
    parent_ids = np.where(parents >= 0, ids[np.maximum(parents, 0)], -1)
    return {int(link): (int(parent), float(q), bool(leaf)) for link, parent, q, leaf in
            zip(ids, parent_ids, graph.q.view()[:n], graph.leaves.view()[:n], strict=True)}


@pytest.mark.parametrize("strategy", ["jlse", "jlse-paper"])
def test_a_restart_read_in_small_batches_builds_the_same_graph_and_q(store, strategy):
    crawl = RandomCrawl(store, seed=8)
    settings = Settings(strategy=strategy, gamma=GAMMA)
    crawl.grow(seeds=4, fetches=3)
    while store.result_count() < 10:
        crawl.grow(seeds=1, fetches=8)
    batches: list[int] = []
    counted = store.learning_graph_batches(lambda rows: batches.append(len(rows)),
                                           strategy == "jlse", batch_rows=7)
    assert counted == sum(batches) == len(store.learning_graph(strategy == "jlse"))
    assert len(batches) >= 4 and max(batches) == 7
    whole = IncrementalLearner(settings, read_batch=10**6)
    batched = IncrementalLearner(settings, read_batch=7)
    one, seven = whole.learn(store, 1), batched.learn(store, 1)
    got, want = graph_by_link(batched), graph_by_link(whole)
    assert {link: (parent, leaf) for link, (parent, _, leaf) in got.items()} == \
        {link: (parent, leaf) for link, (parent, _, leaf) in want.items()}
    assert {link: q for link, (_, q, _) in got.items()} == \
        pytest.approx({link: q for link, (_, q, _) in want.items()}, abs=1e-12)
    assert batched.n_results == whole.n_results and batched.rebuilds == 1
    assert q_by_link(seven, batched.graph.link_ids.view()[: batched.n_indexed]) == \
        pytest.approx(q_by_link(one, whole.graph.link_ids.view()[: whole.n_indexed]), abs=1e-12)
    # Vertex numbers follow the order rows arrive in (PostgreSQL's, batch by batch), so a tie
    # between two vertices' scores may go to another link; the scores are the same.
    anchors, urls, contexts = ["phone review 3", "deal spec price"], \
        ["http://site1.test/shop/4", "http://site0.test/x"], ["price context 2", "forum"]
    assert seven.index.best_vertices(anchors, urls, contexts, exact=True)[1] == pytest.approx(
        one.index.best_vertices(anchors, urls, contexts, exact=True)[1], rel=1e-6)
