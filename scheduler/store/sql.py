"""The crawl database in portable SQL; the backends add connections, transactions and upserts.

Queries are written with ``?`` placeholders; a backend with another paramstyle rewrites them
(``_q``). No query here contains a literal ``?`` or ``%``.
"""

from __future__ import annotations

import logging
import threading
import time
from abc import abstractmethod
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar
from urllib.parse import urlsplit

from jlse.records import FetchRecord, LinkStatus, NewLink, Outcome, StoredLink
from jlse.scheduler.store.base import CrawlStats, CrawlStore, LearningGraphRows, StoreError
from jlse.scheduler.store.graph_rows import STREAM_BATCH, graph_rows, read_graph_rows
from jlse.scheduler.store.link_text import clean_text, clean_texts, merge_duplicates
from jlse.scheduler.store.partitions import (
    ID_IS,
    LINK_PARTITIONS,
    PARTITIONS_META_KEY,
    UNPARTITIONED,
    LinkLayout,
)
from jlse.scheduler.store.schema import (
    ADDED_COLUMNS,
    MIGRATIONS,
    PARTITIONED_VERSION,
    SCHEMA_VERSIONS,
    SERVED_VERSIONS,
    added_columns,
    schema_statements,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

# A PostgreSQL btree entry holds at most ~2700 bytes, so the UNIQUE index on url caps URL length.
MAX_URL_BYTES = 2500

LINK_FIELDS = (
    "id", "url", "parent_id", "depth", "anchor_text", "context", "priority", "status",
    "pattern_run", "redirect_hops", "relevance", "is_target", "title", "host", "discovered_at",
    "fetched_at",
)
LINK_COLUMNS = ", ".join(f"l.{name}" for name in LINK_FIELDS)
LINK_INSERT_COLUMNS = (
    "url, host, parent_id, depth, anchor_text, context, priority, status, pattern_run, "
    "redirect_hops, discovered_at"
)
_EXPORT_SQL = (
    "SELECT l.id, l.url, l.title, l.relevance, l.is_target, l.depth, l.fetched_at, "
    "f.status_code, f.content_type, p.url, l.anchor_text, l.context, l.discovered_at, "
    "f.outcome, f.final_url, f.n_bytes, f.elapsed, f.error, {warc} "
    "FROM links l LEFT JOIN links p ON p.id = l.parent_id"
    "[[ AND p.part = (l.parent_id & {mask})::smallint]] "
    "LEFT JOIN fetches f ON f.id = (SELECT MAX(f2.id) FROM fetches f2 WHERE f2.url_id = l.id)"
)

# G_w (docs/algorithms.md §1.6): from each result up the parent chain to a seed. UNION, not UNION ALL: an id
# already on the path is not added again, so shared ancestors come once and a cycle ends (a
# seed adds one NULL id, which the final join drops). The parent is looked up by a scalar
# subquery, an index probe per path row: written as a join, PostgreSQL overestimates the
# recursive part and hashes all of links at every level.
LEARNING_GRAPH_SQL = (
    "WITH RECURSIVE path (id) AS ("
    " SELECT url_id FROM results"
    " UNION"
    " SELECT (SELECT l.parent_id FROM links l WHERE l.id = p.id"
    "[[ AND l.part = (p.id & {mask})::smallint]]) FROM path p"
    "), vertex (id) AS ("
    " SELECT id FROM path"
    " UNION"
    " SELECT id FROM links WHERE status = 'fetched' AND ? = 1"
    ") "
    "SELECT l.id, COALESCE(l.parent_id, -1), l.url, l.anchor_text, l.context,"
    " CASE WHEN r.url_id IS NULL THEN 0 ELSE 1 END "
    "FROM vertex p JOIN links l ON l.id = p.id[[ AND l.part = (p.id & {mask})::smallint]] "
    "LEFT JOIN results r ON r.url_id = l.id"
)
# The incremental learner's reads (learner/incremental.py): the links fetched in a range of
# crawl-history ids that are vertices of G_w (results; with dead ends, every fetched link), and
# links by id (the ancestors a new vertex brings). Same columns as LEARNING_GRAPH_SQL.
_GRAPH_COLUMNS = (
    "SELECT l.id, COALESCE(l.parent_id, -1), l.url, l.anchor_text, l.context,"
    " CASE WHEN r.url_id IS NULL THEN 0 ELSE 1 END "
    "FROM links l LEFT JOIN results r ON r.url_id = l.id "
)
LEARNING_ROWS_SINCE_SQL = (
    _GRAPH_COLUMNS + "WHERE l.id IN (SELECT f.url_id FROM fetches f WHERE f.id > ? AND f.id <= ?)"
    " AND (r.url_id IS NOT NULL OR (? = 1 AND l.status = 'fetched'))"
)
ROWS_BY_ID_BATCH = 500
WARC_COLUMNS = "f.warc_file, f.warc_offset, f.warc_length"


def host_of(url: str) -> str:
    try:
        return urlsplit(url).hostname or ""
    except ValueError:
        return ""


def check_url_lengths(urls: Sequence[str]) -> None:
    for url in urls:
        if len(url) <= MAX_URL_BYTES // 4:  # 4 bytes a character at most in UTF-8
            continue
        size = len(clean_text(url).encode("utf-8"))
        if size > MAX_URL_BYTES:
            log.warning("add_links refused a URL of %d bytes: %s...", size, url[:80])
            raise StoreError(
                f"URL of {size} bytes is longer than the store accepts ({MAX_URL_BYTES}): "
                f"{url[:80]}... (lower the max_url_length setting)"
            )


def link_row(link: NewLink, now: float) -> tuple:
    """Values for ``LINK_INSERT_COLUMNS``."""
    return (
        link.url, host_of(link.url), link.parent_id, link.depth, link.anchor_text,
        link.context, link.priority, LinkStatus.QUEUED.value, link.pattern_run,
        link.redirect_hops, now,
    )


def row_to_link(row: Sequence[Any]) -> StoredLink:
    """A ``LINK_COLUMNS`` row as a StoredLink (host and timestamps go to ``extra``)."""
    return StoredLink(
        id=row[0], url=row[1], parent_id=row[2], depth=row[3], anchor_text=row[4],
        context=row[5], priority=row[6], status=LinkStatus(row[7]), pattern_run=row[8],
        redirect_hops=row[9], relevance=row[10], is_target=bool(row[11]), title=row[12],
        extra={"host": row[13], "discovered_at": row[14], "fetched_at": row[15]},
    )


class SqlCrawlStore(CrawlStore):
    """Everything but connection handling and the link upsert, shared by both backends."""

    dialect = ""
    placeholder = "?"

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._closed = False
        self._warc_columns = True  # fetches has warc_file/offset/length (an old one may not)
        self.layout: LinkLayout = UNPARTITIONED  # read from the database when it is opened
        self.asked_partitions = 1  # a new database's link partitions (PostgreSQL: the env)
        self.schema_version = SCHEMA_VERSIONS[self.dialect]  # the database's, once opened

    # --- what a backend provides ---
    @abstractmethod
    def _run(self, work: Callable[[Any], T], what: str, write: bool = True) -> T:
        """``work(cursor)`` in one transaction under the lock; DB errors become StoreError."""

    @abstractmethod
    def _upsert_links(self, cur: Any, links: list[NewLink], now: float) -> dict[str, tuple[int, bool]]:
        """Insert or update (priority max while queued) deduplicated links: url -> (id, created)."""

    def _q(self, sql: str) -> str:
        return sql if self.placeholder == "?" else sql.replace("?", self.placeholder)

    def _fetchall(self, cur: Any, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        cur.execute(self._q(sql), tuple(params))
        return cur.fetchall()

    def _fetchone(self, cur: Any, sql: str, params: Sequence[Any] = ()) -> tuple | None:
        cur.execute(self._q(sql), tuple(params))
        return cur.fetchone()

    def _sql(self, template: str) -> str:
        """``template`` for this database's layout of links (partitions.py), placeholders
        this backend's."""
        return self._q(self.layout.sql(template))

    @abstractmethod
    def _has_table(self, cur: Any, table: str) -> bool:
        """Whether ``table`` exists (in the schema the store works in)."""

    def _stored_version(self, cur: Any) -> str | None:
        """The schema version a database holds; None for a new (empty) one."""
        if not self._has_table(cur, "meta"):
            return None
        found = self._fetchone(cur, "SELECT value FROM meta WHERE key = ?", ("schema_version",))
        return found[0] if found else None

    def _migrate(self, cur: Any) -> None:
        """Bring a database of an earlier version to this one, or refuse it (StoreError)."""
        found = self._stored_version(cur)
        if found is None or found in SERVED_VERSIONS[self.dialect]:
            return
        statements = MIGRATIONS.get((self.dialect, found))
        if statements is None:
            raise StoreError(
                f"crawl database has schema version {found!r}; this jlse works with "
                f"{_versions(self.dialect)} and cannot convert it (a newer jlse made it?)")
        log.warning("crawl database: converting schema version %s (%d statements, "
                    "in one transaction; on a large database this rewrites links)",
                    found, len(statements))
        for statement in statements:
            cur.execute(statement)

    def _create_schema(self, cur: Any) -> None:
        """Create missing tables, convert an older schema, check the version (part of opening)."""
        self._migrate(cur)
        version, partitions = self._layout_to_create(cur)
        for statement in schema_statements(self.dialect, partitions):
            cur.execute(statement)
        for table in ADDED_COLUMNS:
            for statement in added_columns(self.dialect, table, self._columns(cur, table)):
                cur.execute(statement)
        new_meta = [("schema_version", version)]
        if version == PARTITIONED_VERSION:
            new_meta.append((PARTITIONS_META_KEY, str(partitions)))
        cur.executemany(
            self._q("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO NOTHING"),
            new_meta)
        self._check_schema(cur)

    def _layout_to_create(self, cur: Any) -> tuple[str, int]:
        """Schema version and link partitions: an existing database's own, a new one's as
        asked (``asked_partitions``; unpartitioned unless asked)."""
        stored = self._stored_version(cur)
        if stored is None:
            if self.asked_partitions > 1:
                return PARTITIONED_VERSION, self.asked_partitions
            return SCHEMA_VERSIONS[self.dialect], 1
        if stored != PARTITIONED_VERSION:
            return stored, 1
        return stored, self._stored_partitions(cur) or LINK_PARTITIONS

    def _check_schema(self, cur: Any) -> None:
        """Refuse a database of another schema version (all a read-only open checks)."""
        found = self._fetchone(cur, "SELECT value FROM meta WHERE key = ?", ("schema_version",))
        if found is None or found[0] not in SERVED_VERSIONS[self.dialect]:
            version = found[0] if found else None
            converts = (self.dialect, version) in MIGRATIONS
            raise StoreError(
                f"crawl database has schema version {version!r}; this jlse works with "
                f"{_versions(self.dialect)}"
                + ("; open it once for writing (e.g. jlse crawl --resume) to convert it"
                   if converts else "")
            )
        self.schema_version = found[0]
        partitions = 1
        if found[0] == PARTITIONED_VERSION:
            partitions = self._stored_partitions(cur)
            if partitions is None:
                raise StoreError(f"crawl database of schema version {found[0]!r} lacks "
                                 f"{PARTITIONS_META_KEY!r} in meta (a damaged database?)")
        self.layout = LinkLayout(partitions)
        self._warc_columns = not added_columns(self.dialect, "fetches",
                                               self._columns(cur, "fetches"))

    def _stored_partitions(self, cur: Any) -> int | None:
        found = self._fetchone(cur, "SELECT value FROM meta WHERE key = ?", (PARTITIONS_META_KEY,))
        return int(found[0]) if found else None

    @staticmethod
    def _columns(cur: Any, table: str) -> set[str]:
        cur.execute(f"SELECT * FROM {table} WHERE 1 = 0")
        cur.fetchall()
        return {column[0] for column in cur.description}

    # --- LinkTable ---
    def add_links(self, links: Sequence[NewLink]) -> list[tuple[int, bool]]:
        if not links:
            return []
        urls = clean_texts([link.url for link in links])
        merged = merge_duplicates(links, urls)
        check_url_lengths(list(merged))
        now = time.time()
        ids = self._run(lambda cur: self._upsert_links(cur, list(merged.values()), now), "add_links")
        answers, seen = [], set()
        for url in urls:
            link_id, created = ids[url]
            answers.append((link_id, created and url not in seen))
            seen.add(url)
        return answers

    def record_fetch(self, record: FetchRecord) -> None:
        fetched_at = record.fetched_at or time.time()
        is_target = int(bool(record.is_target))

        def work(cur: Any) -> None:
            cur.execute(
                self._sql("UPDATE links SET status = ?, fetched_at = ?, relevance = ?, "
                          f"is_target = ?, title = ? WHERE {ID_IS}"),
                (LinkStatus.FETCHED.value, fetched_at, record.relevance, is_target,
                 clean_text(record.title), *self.layout.id_key(record.url_id)),
            )
            self._require_row(cur, record.url_id)
            self._insert_fetch(cur, record, fetched_at)
            if is_target:
                cur.execute(
                    self._q("INSERT INTO results (url_id, relevance, stored_at) VALUES (?, ?, ?) "
                            "ON CONFLICT (url_id) DO NOTHING"),
                    (record.url_id, record.relevance, time.time()),
                )

        self._run(work, "record_fetch")

    def _insert_fetch(self, cur: Any, record: FetchRecord, fetched_at: float) -> None:
        cur.execute(
            self._q("INSERT INTO fetches (url_id, fetched_at, status_code, content_type, n_bytes, "
                    "elapsed, outcome, final_url, relevance, is_target, error, warc_file, "
                    "warc_offset, warc_length) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"),
            (record.url_id, fetched_at, record.status_code, clean_text(record.content_type),
             record.n_bytes, record.elapsed, Outcome(record.outcome).value,
             clean_text(record.final_url), record.relevance, int(bool(record.is_target)),
             clean_text(record.error), record.warc_file, record.warc_offset,
             record.warc_length),
        )

    @staticmethod
    def _require_row(cur: Any, url_id: int) -> None:
        if cur.rowcount == 0:
            raise StoreError(f"no link with id {url_id}")

    def reject(self, url_id: int, outcome: Outcome, reason: str) -> None:
        self._run(lambda cur: self._reject(cur, url_id, outcome, reason), "reject")

    def _reject(self, cur: Any, url_id: int, outcome: Outcome, reason: str) -> None:
        cur.execute(self._sql(f"UPDATE links SET status = ? WHERE {ID_IS}"),
                    (LinkStatus.REJECTED.value, *self.layout.id_key(url_id)))
        self._require_row(cur, url_id)
        record = FetchRecord(url_id=url_id, url="", outcome=Outcome(outcome), error=reason)
        self._insert_fetch(cur, record, time.time())

    def requeue(self, url_id: int) -> None:
        def work(cur: Any) -> None:
            cur.execute(self._sql(f"UPDATE links SET status = ? WHERE {ID_IS}"),
                        (LinkStatus.QUEUED.value, *self.layout.id_key(url_id)))
            self._require_row(cur, url_id)

        self._run(work, "requeue")

    def get_link(self, url_id: int) -> StoredLink | None:
        sql = self.layout.sql(f"SELECT {LINK_COLUMNS} FROM links l WHERE l.{ID_IS}")
        row = self._run(lambda cur: self._fetchone(cur, sql, self.layout.id_key(url_id)),
                        "get_link", write=False)
        return row_to_link(row) if row else None

    def get_link_id(self, url: str) -> int | None:
        sql = "SELECT id FROM links WHERE url = ?"
        row = self._run(lambda cur: self._fetchone(cur, sql, (clean_text(url),)), "get_link_id",
                        write=False)
        return row[0] if row else None

    def _paged(self, select: str, conditions: list[str], params: tuple, batch: int,
               what: str) -> Iterator[tuple]:
        """Rows of ``select`` (over ``links l``, ``l.id`` first) by id, ``batch`` at a time.

        Keyset pagination: each page is its own short query, so no lock or transaction is held
        while the caller works on the rows (it may write to the store in between).
        """
        if batch < 1:
            raise ValueError(f"batch must be at least 1, got {batch}")
        where = " AND ".join([*conditions, "l.id > ?"])
        sql = f"{select} WHERE {where} ORDER BY l.id LIMIT ?"
        last_id = -1
        while True:
            page_params = (*params, last_id, batch)
            rows = self._run(lambda cur, p=page_params: self._fetchall(cur, sql, p), what, write=False)
            yield from rows
            if len(rows) < batch:
                return
            last_id = rows[-1][0]

    def iter_links(self, status: LinkStatus | None = None, batch: int = 5000) -> Iterator[StoredLink]:
        conditions, params = (["l.status = ?"], (LinkStatus(status).value,)) if status else ([], ())
        select = f"SELECT {LINK_COLUMNS} FROM links l"
        for row in self._paged(select, conditions, params, batch, "iter_links"):
            yield row_to_link(row)

    # How a query names one host's links: PostgreSQL's index is keyed on the host's hash.
    _HOST_IS = "l.host = ?"
    _HOST_PARAMS = 1

    def queued_links_of_host(self, host: str, limit: int) -> list[StoredLink]:
        sql = (f"SELECT {LINK_COLUMNS} FROM links l WHERE {self._HOST_IS} AND l.status = ? "
               "ORDER BY l.priority DESC, l.id LIMIT ?")
        params = (*[host] * self._HOST_PARAMS, LinkStatus.QUEUED.value, limit)
        rows = self._run(lambda cur: self._fetchall(cur, sql, params), "queued_links_of_host",
                         write=False)
        return [row_to_link(row) for row in rows]

    def defer_pushes(self, shard: int, url_ids: Sequence[int]) -> None:
        sql = self._q("INSERT INTO deferred_pushes (url_id, shard) VALUES (?, ?) "
                      "ON CONFLICT (url_id) DO NOTHING")
        self._run(lambda cur: cur.executemany(sql, [(i, shard) for i in url_ids]),
                  "defer_pushes")

    def deferred_pushes(self, shard: int, limit: int) -> list[StoredLink]:
        sql = self.layout.sql(
            f"SELECT {LINK_COLUMNS} FROM deferred_pushes d JOIN links l ON l.id = d.url_id"
            "[[ AND l.part = (d.url_id & {mask})::smallint]] "
            "WHERE d.shard = ? ORDER BY d.url_id LIMIT ?")
        rows = self._run(lambda cur: self._fetchall(cur, sql, (shard, limit)),
                         "deferred_pushes", write=False)
        return [row_to_link(row) for row in rows]

    def clear_deferred(self, url_ids: Sequence[int]) -> None:
        sql = self._q("DELETE FROM deferred_pushes WHERE url_id = ?")
        self._run(lambda cur: cur.executemany(sql, [(i,) for i in url_ids]), "clear_deferred")

    def count_deferred(self) -> int:
        rows = self._run(lambda cur: self._fetchall(cur, "SELECT COUNT(*) FROM deferred_pushes",
                                                    ()), "count_deferred", write=False)
        return int(rows[0][0])

    def iter_urls(self) -> Iterator[str]:
        for row in self._paged("SELECT l.id, l.url FROM links l", [], (), 5000, "iter_urls"):
            yield row[1]

    def host_fetch_counts(self) -> dict[str, int]:
        sql = "SELECT host, COUNT(*) FROM links WHERE status = ? GROUP BY host"
        rows = self._run(lambda cur: self._fetchall(cur, sql, (LinkStatus.FETCHED.value,)),
                         "host_fetch_counts", write=False)
        return {host: count for host, count in rows}

    def _run_streaming(self, work: Callable[[Any], T], what: str) -> T:
        """Like a read-only ``_run``, with a cursor that streams rows (backends may override)."""
        return self._run(work, what, write=False)

    # --- results, statistics, export ---
    def learning_graph(self, dead_ends: bool = False) -> LearningGraphRows:
        def work(cur: Any) -> LearningGraphRows:
            cur.execute(self._sql(LEARNING_GRAPH_SQL), (1 if dead_ends else 0,))
            return read_graph_rows(cur)

        rows = self._run_streaming(work, "learning_graph")
        log.debug("learning_graph: %d vertices, %d results", len(rows), int(rows.is_result.sum()))
        return rows

    def learning_graph_batches(self, consume: Callable[[LearningGraphRows], None],
                               dead_ends: bool = False, batch_rows: int | None = None) -> int:
        size = STREAM_BATCH if batch_rows is None else int(batch_rows)
        if size < 1:
            raise ValueError(f"learning_graph_batches: batch_rows must be positive, not {size}")

        def work(cur: Any) -> int:
            cur.execute(self._sql(LEARNING_GRAPH_SQL), (1 if dead_ends else 0,))
            count = 0
            while batch := cur.fetchmany(size):
                count += len(batch)
                consume(graph_rows(batch))
            return count

        count = self._run_streaming(work, "learning_graph_batches")
        log.debug("learning_graph_batches: %d vertices in batches of %d", count, size)
        return count

    def fetch_watermark(self) -> int:
        row = self._run(lambda cur: self._fetchone(cur, "SELECT COALESCE(MAX(id), 0) FROM fetches"),
                        "fetch_watermark", write=False)
        return int(row[0]) if row else 0

    def learning_rows_since(self, after: int, dead_ends: bool = False,
                            ) -> tuple[LearningGraphRows, int]:
        top = self.fetch_watermark()

        def work(cur: Any) -> LearningGraphRows:
            cur.execute(self._q(LEARNING_ROWS_SINCE_SQL), (after, top, 1 if dead_ends else 0))
            return read_graph_rows(cur)

        return self._run_streaming(work, "learning_rows_since"), top

    def learning_rows_by_id(self, link_ids: Sequence[int]) -> LearningGraphRows:
        ids = [int(i) for i in link_ids]

        def work(cur: Any) -> list[tuple]:
            rows: list[tuple] = []
            for start in range(0, len(ids), ROWS_BY_ID_BATCH):
                batch = ids[start:start + ROWS_BY_ID_BATCH]
                marks = ", ".join("?" * len(batch))
                rows += self._fetchall(cur, f"{_GRAPH_COLUMNS}WHERE l.id IN ({marks})", batch)
            return rows

        return graph_rows(self._run(work, "learning_rows_by_id", write=False))

    def result_count(self) -> int:
        row = self._run(lambda cur: self._fetchone(cur, "SELECT COUNT(*) FROM results"),
                        "result_count", write=False)
        return int(row[0]) if row else 0

    def has_links(self) -> bool:
        row = self._run(lambda cur: self._fetchone(cur, "SELECT 1 FROM links LIMIT 1"),
                        "has_links", write=False)
        return row is not None

    def stats(self, relevance_threshold: float = 0.5) -> CrawlStats:
        def work(cur: Any) -> CrawlStats:
            by_status = dict(self._fetchall(cur, "SELECT status, COUNT(*) FROM links GROUP BY status"))
            relevant = self._fetchone(
                cur, "SELECT COUNT(*) FROM links WHERE status = ? AND relevance >= ?",
                (LinkStatus.FETCHED.value, relevance_threshold))[0]
            targets = self._fetchone(cur, "SELECT COUNT(*) FROM results")[0]
            outcomes = dict(self._fetchall(cur, "SELECT outcome, COUNT(*) FROM fetches GROUP BY outcome"))
            fetched = int(by_status.get(LinkStatus.FETCHED.value, 0))
            return CrawlStats(
                links=int(sum(by_status.values())),
                queued=int(by_status.get(LinkStatus.QUEUED.value, 0)),
                fetched=fetched,
                rejected=int(by_status.get(LinkStatus.REJECTED.value, 0)),
                relevant=int(relevant), targets=int(targets),
                outcomes={k: int(v) for k, v in outcomes.items()},
                harvest_rate=relevant / fetched if fetched else 0.0,
            )

        return self._run(work, "stats", write=False)

    def export_rows(self, min_relevance: float | None = 0.5, targets_only: bool = False) -> Iterator[dict]:
        conditions, params = ["l.status = 'fetched'"], ()
        if targets_only:
            conditions.append("l.is_target = 1")
        elif min_relevance is not None:
            conditions.append("l.relevance >= ?")
            params = (min_relevance,)
        select = self.layout.sql(_EXPORT_SQL).replace(
            "{warc}", WARC_COLUMNS if self._warc_columns else "'', 0, 0")
        for row in self._paged(select, conditions, params, 5000, "export_rows"):
            yield {
                "url": row[1], "title": row[2], "relevance": row[3], "is_target": bool(row[4]),
                "depth": row[5], "fetched_at": row[6], "status_code": row[7],
                "content_type": row[8] or "", "parent_url": row[9], "anchor_text": row[10],
                "context": row[11], "discovered_at": row[12], "outcome": row[13] or "",
                "final_url": row[14] or row[1], "n_bytes": row[15], "elapsed": row[16],
                "error": row[17] or "", "warc": (row[18], row[19], row[20]) if row[18] else None,
            }

    # --- meta ---
    def set_meta(self, key: str, value: str) -> None:
        sql = ("INSERT INTO meta (key, value) VALUES (?, ?) "
               "ON CONFLICT (key) DO UPDATE SET value = excluded.value")
        self._run(lambda cur: cur.execute(self._q(sql), (clean_text(key), clean_text(value))),
                  "set_meta")

    def get_meta(self, key: str) -> str | None:
        sql = "SELECT value FROM meta WHERE key = ?"
        row = self._run(lambda cur: self._fetchone(cur, sql, (clean_text(key),)), "get_meta",
                        write=False)
        return row[0] if row else None


def _versions(dialect: str) -> str:
    return " or ".join(repr(version) for version in SERVED_VERSIONS[dialect])
