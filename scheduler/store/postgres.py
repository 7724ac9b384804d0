"""The crawl database in PostgreSQL (distributed mode), through psycopg2."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar
from urllib.parse import urlsplit

import psycopg2
from psycopg2.extras import execute_values

from jlse.records import FetchRecord, NewLink, Outcome
from jlse.scheduler.store.base import StoreError, redact_url
from jlse.scheduler.store.sql import (
    LINK_INSERT_COLUMNS,
    STREAM_BATCH,
    SqlCrawlStore,
    clean_text,
    link_row,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

CONNECT_TIMEOUT = 5  # seconds; a connect_timeout parameter in the URL wins
_SCHEMA_LOCK_KEY = 0x6A6C7365  # advisory lock: workers starting together create tables once
# Rows that exist and are not updated (not queued, or priority not higher) are not RETURNed:
# _upsert_links selects them afterwards.
_UPSERT_SQL = (
    f"INSERT INTO links (id, {LINK_INSERT_COLUMNS}) VALUES %s "
    "ON CONFLICT (url) DO UPDATE SET priority = EXCLUDED.priority "
    "WHERE links.status = 'queued' AND links.priority < EXCLUDED.priority "
    "RETURNING id, url, (xmax = 0) AS created"
)
_ALLOCATE_IDS_SQL = "SELECT nextval(%s::regclass) FROM generate_series(1, %s)"
# record_fetch_once in one statement. The link row and the ResultTable change only if the link
# was still queued; the history row is always added (a missing link fails its foreign key).
_RECORD_ONCE_SQL = (
    "WITH updated AS ("
    " UPDATE links SET status = 'fetched', fetched_at = %(at)s, relevance = %(relevance)s,"
    " is_target = %(target)s, title = %(title)s WHERE id = %(id)s AND status = 'queued'"
    " RETURNING id"
    "), history AS ("
    " INSERT INTO fetches (url_id, fetched_at, status_code, content_type, n_bytes, elapsed,"
    " outcome, final_url, relevance, is_target, error, warc_file, warc_offset, warc_length)"
    " VALUES (%(id)s, %(at)s, %(status)s, %(type)s, %(bytes)s, %(elapsed)s, %(outcome)s,"
    " %(final)s, %(relevance)s, %(target)s, %(error)s, %(wfile)s, %(woffset)s, %(wlength)s)"
    "), result AS ("
    " INSERT INTO results (url_id, relevance, stored_at)"
    " SELECT id, %(relevance)s, %(now)s FROM updated WHERE %(target)s = 1"
    " ON CONFLICT (url_id) DO NOTHING"
    ") SELECT COUNT(*) FROM updated"
)
_RETRYABLE = (psycopg2.OperationalError, psycopg2.InterfaceError)


class PostgresStore(SqlCrawlStore):
    """One psycopg2 connection shared by threads under a lock; reconnects once if dropped."""

    dialect = "postgresql"
    placeholder = "%s"

    def __init__(self, url: str, read_only: bool = False) -> None:
        super().__init__()
        self.url = url
        self._shown_url = redact_url(url)
        self._read_only = read_only  # every transaction READ ONLY; nothing created
        self._id_sequence = ""  # schema-qualified name of the links.id sequence
        self._conn = self._connect()
        try:
            self._run(self._check_schema if read_only else self._create_schema_locked, "open")
        except StoreError:
            self.close()
            raise

    def _connect(self) -> Any:
        extra = {} if "connect_timeout" in self.url else {"connect_timeout": CONNECT_TIMEOUT}
        try:
            conn = psycopg2.connect(self.url, application_name="jlse", **extra)
            if self._read_only:
                conn.set_session(readonly=True)  # every transaction READ ONLY
            return conn
        except psycopg2.Error as exc:
            message = self._scrub(exc)
            log.info("cannot connect to PostgreSQL at %s: %s", self._shown_url, message)
            raise StoreError(f"cannot connect to PostgreSQL at {self._shown_url}: {message}") from None

    def _scrub(self, exc: BaseException) -> str:
        """First line of an error message, without the password should libpq echo it."""
        message = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        try:
            password = urlsplit(self.url).password
        except ValueError:
            password = None
        return message.replace(password, "***") if password else message

    def _create_schema_locked(self, cur: Any) -> None:
        cur.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK_KEY,))
        self._create_schema(cur)
        cur.execute("SELECT pg_get_serial_sequence('links', 'id')")
        self._id_sequence = cur.fetchone()[0]

    def _run(self, work: Callable[[Any], T], what: str, write: bool = True) -> T:
        # Reads commit too, so the connection never idles inside a transaction.
        with self._lock:
            if self._closed:
                raise StoreError(f"{what}: the crawl database {self._shown_url} is closed")
            for attempt in (1, 2):
                try:
                    return self._attempt(work)
                except _RETRYABLE as exc:
                    if attempt == 2:
                        raise self._failure(what, exc) from None
                    log.warning("%s: %s; retrying once on %s", what, self._scrub(exc),
                                self._shown_url)
                    self._recover()
                except psycopg2.Error as exc:
                    raise self._failure(what, exc) from None
            raise AssertionError("unreachable")

    def _failure(self, what: str, exc: BaseException) -> StoreError:
        message = self._scrub(exc)
        log.error("%s failed on %s: %s", what, self._shown_url, message)
        return StoreError(f"{what} failed on PostgreSQL {self._shown_url}: {message}")

    def _attempt(self, work: Callable[[Any], T]) -> T:
        try:
            with self._conn.cursor() as cur:
                result = work(cur)
            self._conn.commit()
            return result
        except _RETRYABLE:
            raise  # _run recovers and retries
        except BaseException:
            # Also on KeyboardInterrupt: half-done work must not ride along with the next commit.
            self._rollback()
            raise

    def _recover(self) -> None:
        """After a dropped connection reconnect; after e.g. a deadlock just roll back."""
        self._rollback()
        if self._conn.closed:
            self._conn = self._connect()

    def _rollback(self) -> None:
        if self._conn.closed:
            return
        try:
            self._conn.rollback()
        except psycopg2.Error as exc:
            log.warning("rollback failed on %s: %s", self._shown_url, self._scrub(exc))

    def _run_streaming(self, work: Callable[[Any], T], what: str) -> T:
        # A named (server-side) cursor: fetchmany pulls rows in batches instead of libpq
        # holding the whole result in memory at once.
        def with_server_cursor(cur: Any) -> T:
            # JIT compiling costs ~0.4 s and pays off only on far bigger scans than ours.
            cur.execute("SET LOCAL jit = off")
            with self._conn.cursor(name="jlse_stream") as stream:
                stream.itersize = STREAM_BATCH
                return work(stream)

        return self._run(with_server_cursor, what, write=False)

    def _upsert_links(self, cur: Any, links: list[NewLink], now: float) -> dict[str, tuple[int, bool]]:
        # Ids are taken in input order (discovery order, as on SQLite), but rows are inserted
        # sorted by URL so concurrent workers lock shared URLs in the same order (no deadlocks).
        # Ids of URLs that turn out to exist are skipped, as a plain upsert would skip them too.
        cur.execute(_ALLOCATE_IDS_SQL, (self._id_sequence, len(links)))
        new_ids = [row[0] for row in cur.fetchall()]
        rows = [(link_id, *link_row(link, now)) for link_id, link in zip(new_ids, links, strict=True)]
        rows.sort(key=lambda row: row[1])
        returned = execute_values(cur, _UPSERT_SQL, rows, page_size=len(rows), fetch=True)
        found = {url: (link_id, bool(created)) for link_id, url, created in returned}
        missing = [link.url for link in links if link.url not in found]
        if missing:
            cur.execute("SELECT id, url FROM links WHERE url = ANY(%s)", (missing,))
            found.update({url: (link_id, False) for link_id, url in cur.fetchall()})
        lost = [url for url in missing if url not in found]
        if lost:
            raise StoreError(f"add_links: {len(lost)} URLs neither inserted nor found, e.g. {lost[0]}")
        return found

    @contextmanager
    def autocommit(self) -> Iterator[None]:
        """Within: every statement is its own transaction, so a call costs no BEGIN and COMMIT
        round trips. Only for calls whose statements are each safe alone: ``get_link``,
        ``add_links`` (ids, then one upsert, then a read of the rows it left alone) and
        ``record_fetch_once``. Holds the store's lock (other threads wait)."""
        with self._lock:
            self._set_autocommit(True)
            try:
                yield
            finally:
                self._set_autocommit(False)

    def _set_autocommit(self, on: bool) -> None:
        # A connection replaced by a reconnect starts with autocommit off (merely slower).
        if not self._closed and not self._conn.closed and self._conn.autocommit != on:
            self._conn.autocommit = on

    def record_fetch_once(self, record: FetchRecord) -> bool:
        """``record_fetch`` for a link that is still queued, in one statement; False (only the
        history row added) if it is not: another worker wrote the page meanwhile (e.g. after
        this one's lease was reaped), so the caller must not count it again."""
        fetched_at = record.fetched_at or time.time()
        params = {
            "id": record.url_id, "at": fetched_at, "relevance": record.relevance,
            "target": int(bool(record.is_target)), "title": clean_text(record.title),
            "status": record.status_code, "type": clean_text(record.content_type),
            "bytes": record.n_bytes, "elapsed": record.elapsed,
            "outcome": Outcome(record.outcome).value, "final": clean_text(record.final_url),
            "error": clean_text(record.error), "now": time.time(),
            "wfile": record.warc_file, "woffset": record.warc_offset,
            "wlength": record.warc_length,
        }

        def work(cur: Any) -> bool:
            cur.execute(_RECORD_ONCE_SQL, params)
            return cur.fetchone()[0] == 1

        return self._run(work, "record_fetch_once")

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._conn.close()
