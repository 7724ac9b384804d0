"""The incremental learner: G_w and Q kept between rounds, each round adds only what is new.

The first round (and the first after a restart: a new learner object) reads G_w whole from the
crawl database, as :class:`learner.learner.Learner` does. Later rounds read only the links
fetched since the last round (crawl-history ids above a watermark, less ``LOOKBACK`` ids so
that a transaction that committed late is not missed), add the new vertices and the ancestors
they bring, tokenise only the new vertices (:mod:`learner.field_tokens`) and raise Q up the
new vertices' parent chains (:mod:`learner.vertex_table`): O(new pages), and Q equal to a
from-scratch solve. The link index is reassembled from the kept term counts, with no
tokenising, while G_w is small (``full_index_below`` vertices) and afterwards each time G_w has
grown by ``index_growth``; in between, a round's table reuses the last index and its Q-values
are those of the indexed vertices (docs/algorithms.md §1.11).
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid

import numpy as np

from jlse.learner.field_tokens import FieldTokens
from jlse.learner.growable import release_memory
from jlse.learner.vertex_table import VertexTable
from jlse.models.link_index import LinkIndex
from jlse.models.link_tokens import text_tokens_many, url_tokens_many
from jlse.models.qtable import QTable
from jlse.scheduler.store import CrawlStore
from jlse.scheduler.store.base import LearningGraphRows
from jlse.settings import Settings

log = logging.getLogger(__name__)

LOOKBACK = 5_000  # crawl-history ids read again each round (late commits of parallel writers)
FULL_INDEX_BELOW = 200_000  # vertices: below, the index is reassembled every round
INDEX_GROWTH = 0.1  # above, when G_w has grown by this share since the last assembly
MAX_ANCESTOR_STEPS = 200  # parent look-ups per round (bounds a corrupt, endless parent chain)
# Rows per batch of a full read: its strings (~60 MB) and one pass over the vertex index per
# batch (VertexTable.add keeps link ids sorted: at 1e8 vertices 500 batches, a minute of copying).
READ_BATCH = 200_000


class IncrementalLearner:
    """Learns the Q-table of a crawl round after round, keeping G_w in memory in between.

    ``learn(store, version)`` is the same call as ``Learner.learn``; one object serves one
    crawl database (its state is that crawl's G_w)."""

    def __init__(self, settings: Settings, *, full_index_below: int = FULL_INDEX_BELOW,
                 index_growth: float = INDEX_GROWTH, lookback: int = LOOKBACK,
                 read_batch: int = READ_BATCH) -> None:
        self.settings = settings
        self.dead_ends = settings.strategy == "jlse" and settings.dead_end_vertices
        self.full_index_below = full_index_below
        self.index_growth = index_growth
        self.lookback = lookback
        self.read_batch = read_batch  # rows per batch of a full read
        self.rebuilds = 0  # full reads of the crawl database (1 unless reset)
        self.reset()

    def reset(self) -> None:
        """Forget G_w: the next round reads it whole again."""
        self.graph = VertexTable(self.settings.gamma, self.settings.reward)
        self.fields = [FieldTokens(text_tokens_many), FieldTokens(url_tokens_many),
                       FieldTokens(text_tokens_many)]  # FIELDS order: anchor, url, context
        self.watermark: int | None = None  # crawl-history id read up to; None: nothing read
        self.n_results = 0
        self.last_steps = 0  # steps Q was raised up the parent chains in the last round
        self._index: LinkIndex | None = None

    @property
    def n_indexed(self) -> int:
        return 0 if self._index is None else int(self._index.n_vertices_)

    @property
    def nbytes(self) -> int:
        """Memory of the kept graph and term counts (the last index not included)."""
        return self.graph.nbytes + sum(field.nbytes for field in self.fields)

    def learn(self, store: CrawlStore, version: int) -> QTable | None:
        """The Q-table of the current crawl as ``version``; None while ResultTable is empty."""
        started = time.perf_counter()
        full = self.watermark is None
        try:
            self._read(store, full)
        except BaseException:
            self.reset()  # a round cut short leaves G_w half updated: read it whole next time
            raise
        read_seconds = time.perf_counter() - started
        if not self.n_results:
            log.info("learner: no result pages yet, no Q-table v%d", version)
            return None
        table = self.table(version)
        log.info("learner: Q-table v%d (%s) from %d vertices (%d results, %d indexed), "
                 "%.2f s (%.2f s reading the crawl database and updating G_w)",
                 version, "full read" if full else "incremental", len(self.graph),
                 self.n_results, self.n_indexed, time.perf_counter() - started, read_seconds)
        return table

    def _read(self, store: CrawlStore, full: bool) -> None:
        if full:
            self.reset()
            top = store.fetch_watermark()  # before the read: what commits meanwhile comes again
            self._read_whole(store)
            self.rebuilds += 1
        else:
            rows, top = store.learning_rows_since(max(0, self.watermark - self.lookback),
                                                  self.dead_ends)
            self.add_rows(rows, store)
        self.watermark = top if full else max(self.watermark, top)

    def _read_whole(self, store: CrawlStore) -> None:
        """G_w read batch by batch (``read_batch`` rows): each batch's vertices are added as it
        comes, so the read holds one batch of strings, never the whole result; parent edges,
        missing ancestors and Q once all are in (a parent may come in a later batch)."""
        grown = _Grown()
        store.learning_graph_batches(lambda rows: self._collect(rows, grown), self.dead_ends,
                                     self.read_batch)
        self._finish(grown, store)

    def add_rows(self, rows: LearningGraphRows, store: CrawlStore | None = None) -> int:
        """Add G_w rows (new vertices, new results), the ancestors they lack (read from
        ``store``), and raise Q; the number of vertices added. Without a store, a row's parent
        must already be a vertex or come in ``rows`` (else the row gets no parent edge)."""
        grown = _Grown()
        self._collect(rows, grown)
        return self._finish(grown, store)

    def _collect(self, rows: LearningGraphRows, grown: _Grown) -> None:
        """Mark the known vertices among ``rows`` that became results; append the others."""
        ids, first = np.unique(np.asarray(rows.ids, dtype=np.int64), return_index=True)
        is_result = np.asarray(rows.is_result, dtype=bool)[first]
        known = self.graph.vertices_of(ids)
        grown.changed.append(self.graph.mark_leaves(known[(known >= 0) & is_result]))
        pending = _take(rows, first[known < 0])
        if len(pending):
            grown.added.append(self._append(pending))
            grown.parents.append(pending.parent_ids)

    def _finish(self, grown: _Grown, store: CrawlStore | None) -> int:
        """The ancestors the new vertices lack (from ``store``), their parent edges, Q raised;
        the number of vertices added."""
        added, parents, changed = grown.added, grown.parents, grown.changed
        if added:
            missing = np.unique(np.concatenate(parents))
        for _ in range(MAX_ANCESTOR_STEPS - 1):
            if not added or store is None:
                break
            missing = missing[missing >= 0]
            missing = missing[self.graph.vertices_of(missing) < 0]
            if not len(missing):
                break
            pending = _unique(store.learning_rows_by_id(missing.tolist()))
            if not len(pending):
                break
            added.append(self._append(pending))
            parents.append(pending.parent_ids)
            missing = np.unique(pending.parent_ids)
        if added:
            vertices = np.concatenate(added)
            self.graph.link_parents(vertices, np.concatenate(parents))
            changed.append(vertices[self.graph.leaves.view()[vertices]])
        changed = np.concatenate(changed) if changed else np.zeros(0, dtype=np.int64)
        self.n_results += len(changed)
        self.last_steps = self.graph.propagate(changed)
        release_memory()
        return sum(map(len, added))

    def _append(self, rows: LearningGraphRows) -> np.ndarray:
        vertices = self.graph.add(rows.ids, rows.is_result)
        for field, texts in zip(self.fields, (rows.anchors, rows.urls, rows.contexts),
                                strict=True):
            field.add(texts)
        return vertices

    def table(self, version: int) -> QTable:
        """The Q-table of G_w now (the index reassembled if due, see the module docstring)."""
        n_vertices = len(self.graph)
        indexed = self.n_indexed
        if indexed != n_vertices and (n_vertices <= self.full_index_below or self._index is None
                                      or n_vertices >= indexed * (1.0 + self.index_growth)):
            self._index = self._assemble_index()
        s = self.settings
        q = self.graph.q.view()[: self.n_indexed].copy()
        meta = {"n_vertices": self.n_indexed, "n_graph_vertices": n_vertices,
                "n_edges": int(np.count_nonzero(self.graph.parents.view() >= 0)),
                "n_results": self.n_results, "iterations": self.last_steps,
                "gamma": s.gamma, "reward": s.reward, "numpy": np.__version__}
        return QTable(version=version, index=self._index, q=q, created_at=time.time(), meta=meta)

    def _assemble_index(self) -> LinkIndex:
        """The link index of every vertex so far, without its search structures (built by
        ``LinkIndex.prepare`` where the table is searched: the embedded learner thread, a fetch
        worker loading it; a published table does not need them)."""
        s = self.settings
        self._index = None  # the old index's memory is free for the new one (unless a table
        release_memory()  # still being served holds it: the embedded crawl)
        fields = [field.bm25(s.bm25_k1, s.bm25_b) for field in self.fields]
        index = LinkIndex.from_fields(fields, tuple(s.field_weights),
                                      max_postings=tuple(s.link_search_postings),
                                      rescore=s.link_search_rescore, search=False)
        index.uid = uuid.uuid4().hex  # the tables of the rounds until the next assembly share it
        release_memory()
        return index


@dataclasses.dataclass
class _Grown:
    """What a round added so far: new vertices and their parents' link ids (per batch), and
    the vertices that became results."""

    added: list[np.ndarray] = dataclasses.field(default_factory=list)
    parents: list[np.ndarray] = dataclasses.field(default_factory=list)
    changed: list[np.ndarray] = dataclasses.field(default_factory=list)


def _take(rows: LearningGraphRows, at: np.ndarray) -> LearningGraphRows:
    positions = at.tolist()
    return LearningGraphRows(
        ids=np.asarray(rows.ids, dtype=np.int64)[at],
        parent_ids=np.asarray(rows.parent_ids, dtype=np.int64)[at],
        urls=[rows.urls[i] for i in positions], anchors=[rows.anchors[i] for i in positions],
        contexts=[rows.contexts[i] for i in positions],
        is_result=np.asarray(rows.is_result, dtype=bool)[at])


def _unique(rows: LearningGraphRows) -> LearningGraphRows:
    _, first = np.unique(rows.ids, return_index=True)
    return _take(rows, first)
