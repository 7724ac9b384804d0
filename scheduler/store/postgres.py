"""The crawl database in PostgreSQL (distributed mode), through psycopg2."""

from __future__ import annotations

import functools
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

import psycopg2
import psycopg2.errors
import psycopg2.extensions
import psycopg2.sql

from jlse.records import FetchRecord, NewLink, Outcome
from jlse.scheduler.store.base import StoreError, redact_url
from jlse.scheduler.store.partitions import PARTITIONS_ENV, requested_partitions
from jlse.scheduler.store.pg_copy import IdReserve, copy_new_links
from jlse.scheduler.store.pg_writes import (  # noqa: F401  (url_fingerprint: re-exported)
    FINGERPRINT_PROBES,
    record_pages,
    upsert_links,
    url_fingerprint,
)
from jlse.scheduler.store.sql import STREAM_BATCH, SqlCrawlStore, check_url_lengths, clean_text

log = logging.getLogger(__name__)

T = TypeVar("T")

CONNECT_TIMEOUT = 5  # seconds; a connect_timeout parameter in the URL wins
_SCHEMA_LOCK_KEY = 0x6A6C7365  # advisory lock: workers starting together create tables once
# record_fetch_once in one statement. The link row and the ResultTable change only if the link
# was still queued; the history row is always added. A missing link fails its foreign key;
# partitioned links have none, so there the history row is written only if the link exists and
# record_fetch_once refuses a missing one. The link is named by id and partition.
_RECORD_ONCE_SQL = (
    "WITH updated AS ("
    " UPDATE links SET status = 'fetched', fetched_at = %(at)s, relevance = %(relevance)s,"
    " is_target = %(target)s, title = %(title)s WHERE id = %(id)s[[ AND part = %(part)s]]"
    " AND status = 'queued' RETURNING id"
    "), history AS ("
    " INSERT INTO fetches (url_id, fetched_at, status_code, content_type, n_bytes, elapsed,"
    " outcome, final_url, relevance, is_target, error, warc_file, warc_offset, warc_length)"
    " SELECT %(id)s, %(at)s, %(status)s, %(type)s, %(bytes)s, %(elapsed)s, %(outcome)s,"
    " %(final)s, %(relevance)s, %(target)s, %(error)s, %(wfile)s, %(woffset)s, %(wlength)s"
    "[[ WHERE EXISTS (SELECT 1 FROM links WHERE id = %(id)s AND part = %(part)s)]]"
    " RETURNING 1"
    "), result AS ("
    " INSERT INTO results (url_id, relevance, stored_at)"
    " SELECT id, %(relevance)s, %(now)s FROM updated WHERE %(target)s = 1"
    " ON CONFLICT (url_id) DO NOTHING"
    ") SELECT (SELECT COUNT(*) FROM updated), (SELECT COUNT(*) FROM history)"
)
# A URL's link under any of its fingerprints' probes, each in its own partition.
_LINK_ID_SQL = ("SELECT id FROM links WHERE url_fp = ANY(%(fps)s::bigint[])"
                "[[ AND part = ANY(%(parts)s::smallint[])]] AND url = %(url)s")
_RETRYABLE = (psycopg2.OperationalError, psycopg2.InterfaceError)


class _LinkRequest:
    """One caller's ``add_links``, waiting for the group write that carries it."""

    def __init__(self, links: list[NewLink]) -> None:
        self.links = links
        self.done = False
        self.answers: list[tuple[int, bool]] = []
        self.error: BaseException | None = None

    def result(self) -> list[tuple[int, bool]]:
        if self.error is not None:
            raise self.error
        return self.answers


class PostgresStore(SqlCrawlStore):
    """One psycopg2 connection shared by threads under a lock; reconnects once if dropped.

    ``add_links`` commits in groups: the calls of threads that arrive while a write is under
    way go together in the next one (one statement, one commit), and each returns once the
    write carrying its links has committed.
    """

    dialect = "postgresql"
    placeholder = "%s"
    # A database made since the host-hash index reads by the hash, one made before by the host
    # (schema.LINK_INDEXES); the other condition is a filter on the rows found.
    _HOST_IS = "hashtextextended(l.host, 0) = hashtextextended(?, 0) AND l.host = ?"
    _HOST_PARAMS = 2

    def __init__(self, url: str, read_only: bool = False) -> None:
        super().__init__()
        self.url = url
        self._shown_url = redact_url(url)
        self._read_only = read_only  # every transaction READ ONLY; nothing created
        # Checked before connecting: a bad value is the operator's one-line error.
        self.asked_partitions = 1 if read_only else requested_partitions()
        self._id_sequence = ""  # schema-qualified name of the links.id sequence
        self._id_reserve = IdReserve()  # ids drawn ahead for the links add_links copies
        self._waiting: list[_LinkRequest] = []  # add_links calls not yet written
        self._group_turn = threading.Condition()  # guards _waiting and _group_writing
        self._group_writing = False  # a group write is under way
        self._autocommit_owner: int | None = None  # the thread inside autocommit()
        self.link_groups = 0  # group writes of add_links so far (calls / groups: the grouping)
        self._conn = self._connect()
        try:
            self._run(self._check_schema if read_only else self._create_schema_locked, "open")
        except StoreError:
            self.close()
            raise

    def _connect(self) -> Any:
        extra = {} if "connect_timeout" in self.url else {"connect_timeout": CONNECT_TIMEOUT}
        try:
            try:
                conn = psycopg2.connect(self.url, application_name="jlse", **extra)
            except psycopg2.OperationalError as exc:
                if self._read_only or not self._create_database(exc, extra):
                    raise
                conn = psycopg2.connect(self.url, application_name="jlse", **extra)
            if self._read_only:
                conn.set_session(readonly=True)  # every transaction READ ONLY
            self._check_search_path(conn)
            return conn
        except psycopg2.Error as exc:
            message = self._scrub(exc)
            log.info("cannot connect to PostgreSQL at %s: %s", self._shown_url, message)
            raise StoreError(f"cannot connect to PostgreSQL at {self._shown_url}: {message}") from None

    def _create_database(self, refused: psycopg2.OperationalError, extra: dict) -> bool:
        """If ``refused`` says the URL's database does not exist, create it (through the
        server's ``postgres`` database), as a SQLite store creates its file; whether it now
        exists. A writer only: ``jlse status`` or ``export`` on a wrong name says so instead."""
        name = psycopg2.extensions.parse_dsn(self.url).get("dbname")
        if not name or f'database "{name}" does not exist' not in str(refused):
            return False
        try:
            admin = psycopg2.connect(self.url, dbname="postgres", application_name="jlse",
                                     **extra)
        except psycopg2.Error:
            return False  # no way in to create it: the caller reports the database missing
        try:
            admin.autocommit = True
            with admin.cursor() as cur:
                cur.execute(psycopg2.sql.SQL("CREATE DATABASE {}").format(
                    psycopg2.sql.Identifier(name)))
            log.warning("created the PostgreSQL database %s at %s (it did not exist)", name,
                        self._shown_url)
        except psycopg2.errors.DuplicateDatabase:
            pass  # another process created it meanwhile
        except psycopg2.Error as exc:
            log.info("cannot create the PostgreSQL database %s: %s", name, self._scrub(exc))
            return False
        finally:
            admin.close()
        return True

    def _check_search_path(self, conn: Any) -> None:
        """A schema asked for in the URL's ``options`` is in effect: a pooler (pgbouncer)
        drops ``options``, and the store would then work in another schema."""
        wanted = _search_path_option(self.url)
        if wanted is None:
            return
        with conn.cursor() as cur:
            cur.execute("SELECT current_setting('search_path')")
            found = cur.fetchone()[0]
        conn.rollback()
        if found.replace('"', "").replace(" ", "") != wanted.replace('"', "").replace(" ", ""):
            conn.close()
            raise StoreError(
                f"PostgreSQL at {self._shown_url} ignored the URL's search_path {wanted!r} "
                f"(found {found!r}): a connection pooler such as pgbouncer drops 'options'; "
                "give the crawl a database of its own instead of a schema")

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
        existed = self._stored_version(cur) is not None
        self._create_schema(cur)
        if existed and self.asked_partitions not in (1, self.layout.partitions):
            log.warning("%s=%d changes nothing: the crawl database %s exists, %s", PARTITIONS_ENV,
                        self.asked_partitions, self._shown_url, self._layout_said())
        cur.execute("SELECT pg_get_serial_sequence('links', 'id')")
        self._id_sequence = cur.fetchone()[0]

    def _layout_said(self) -> str:
        if self.layout.partitioned:
            return f"links in {self.layout.partitions} partitions (schema {self.schema_version})"
        return f"links unpartitioned (schema {self.schema_version})"

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

    def add_links(self, links: Sequence[NewLink]) -> list[tuple[int, bool]]:
        if not links:
            return []
        check_url_lengths([link.url for link in links])  # fails this call alone
        request = _LinkRequest(list(links))
        if self._autocommit_owner == threading.get_ident():
            self._write_group([request])  # this thread holds the store: waiting could deadlock
            return request.result()
        with self._group_turn:
            self._waiting.append(request)
            while self._group_writing and not request.done:
                self._group_turn.wait()  # the write under way may carry it; if not, the next
            if request.done:
                return request.result()
            self._group_writing = True  # lead the next group: every call waiting now
            group, self._waiting = self._waiting, []
        try:
            with self._lock:
                self._write_group(group)
        finally:
            for taken in group:  # never left waiting, whatever stopped the write
                if not taken.done:
                    taken.error = StoreError("add_links: the write of this group was interrupted")
                    taken.done = True
            with self._group_turn:
                self._group_writing = False
                self._group_turn.notify_all()
        return request.result()

    def _write_group(self, group: list[_LinkRequest]) -> None:
        """The links of ``group`` in one statement, committed alone (autocommit); the answers
        split back per request, as if the calls had run one after the other."""
        autocommit = self._closed or self._conn.closed or self._conn.autocommit
        try:
            self._set_autocommit(True)
            answers = super().add_links([link for request in group for link in request.links])
            self.link_groups += 1
        except BaseException as exc:  # every request of the group gets it
            shared = exc if isinstance(exc, StoreError) else \
                StoreError(f"add_links: the write of this group failed: {exc!r}")
            for request in group:
                request.error, request.done = shared, True
            raise
        finally:
            self._set_autocommit(autocommit)
        start = 0
        for request in group:
            request.answers = answers[start:start + len(request.links)]
            request.done = True
            start += len(request.links)

    def _has_table(self, cur: Any, table: str) -> bool:
        cur.execute("SELECT to_regclass(%s) IS NOT NULL", (table,))
        return bool(cur.fetchone()[0])

    @property
    def copy_races(self) -> int:
        """Batches of add_links whose ``COPY`` met a URL another worker wrote meanwhile (each
        then written by the one-statement insert instead; pg_copy.py)."""
        return self._id_reserve.races

    def _upsert_links(self, cur: Any, links: list[NewLink], now: float) -> dict[str, tuple[int, bool]]:
        copy = None
        if cur.connection.autocommit:  # a COPY that meets a race writes nothing alone
            copy = functools.partial(copy_new_links, now=now, sequence=self._id_sequence,
                                     layout=self.layout, reserve=self._id_reserve)
        return upsert_links(cur, links, now, self._id_sequence, self.layout, copy)

    def get_link_id(self, url: str) -> int | None:
        url = clean_text(url)
        probes = [url_fingerprint(url, probe) for probe in range(FINGERPRINT_PROBES)]
        params = {"fps": probes, "parts": self.layout.parts_of(probes), "url": url}
        sql = self.layout.sql(_LINK_ID_SQL)

        def work(cur: Any) -> tuple | None:
            cur.execute(sql, params)
            return cur.fetchone()

        row = self._run(work, "get_link_id", write=False)
        return row[0] if row else None

    @contextmanager
    def autocommit(self) -> Iterator[None]:
        """Within: every statement is its own transaction, so a call costs no BEGIN and COMMIT
        round trips. Only for calls whose statements are each safe alone: ``get_link``,
        ``add_links`` (one insert that also reads the rows it left alone; then, rarely, a
        priority that rises and a read of rows committed meanwhile) and
        ``record_fetch_once``. Holds the store's lock (other threads wait)."""
        with self._lock:
            outer, self._autocommit_owner = self._autocommit_owner, threading.get_ident()
            self._set_autocommit(True)
            try:
                yield
            finally:
                self._autocommit_owner = outer
                self._set_autocommit(outer is not None)

    def _set_autocommit(self, on: bool) -> None:
        # A connection replaced by a reconnect starts with autocommit off (merely slower).
        # A read-only store keeps its transactions: in autocommit psycopg2 would make READ
        # ONLY a session setting, which a pooler's next client would inherit.
        if not self._read_only and not self._closed and not self._conn.closed and self._conn.autocommit != on:
            self._conn.autocommit = on

    def record_fetch_once(self, record: FetchRecord) -> bool:
        """``record_fetch`` for a link that is still queued, in one statement; False (only the
        history row added) if it is not: another worker wrote the page meanwhile (e.g. after
        this one's lease was reaped), so the caller must not count it again."""
        fetched_at = record.fetched_at or time.time()
        params = {
            "id": record.url_id, "part": self.layout.part(record.url_id), "at": fetched_at, "relevance": record.relevance,
            "target": int(bool(record.is_target)), "title": clean_text(record.title),
            "status": record.status_code, "type": clean_text(record.content_type),
            "bytes": record.n_bytes, "elapsed": record.elapsed,
            "outcome": Outcome(record.outcome).value, "final": clean_text(record.final_url),
            "error": clean_text(record.error), "now": time.time(),
            "wfile": record.warc_file, "woffset": record.warc_offset,
            "wlength": record.warc_length,
        }

        sql = self.layout.sql(_RECORD_ONCE_SQL)

        def work(cur: Any) -> bool:
            cur.execute(sql, params)
            updated, history = cur.fetchone()
            if not history:
                raise StoreError(f"record_fetch_once: no link with id {record.url_id}")
            return updated == 1

        return self._run(work, "record_fetch_once")

    def write_pages(self, fetches: Sequence[FetchRecord],
                    rejects: Sequence[tuple[int, Outcome, str]] = ()) -> list[bool]:
        """The fetches in one statement, the rejects after it, in one transaction."""
        if not fetches and not rejects:
            return []
        now = time.time()

        def work(cur: Any) -> list[bool]:
            written = record_pages(cur, fetches, now, self.layout) if fetches else []
            for url_id, outcome, reason in rejects:
                self._reject(cur, url_id, outcome, reason)
            return written

        with self._lock:  # one transaction even inside autocommit()
            autocommit = not self._closed and not self._conn.closed and self._conn.autocommit
            self._set_autocommit(False)
            try:
                return self._run(work, "write_pages")
            finally:
                self._set_autocommit(autocommit)

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._conn.close()


def _search_path_option(url: str) -> str | None:
    """The ``search_path`` a libpq URL sets in its ``options`` (``-csearch_path=x`` or
    ``-c search_path=x``), or None."""
    options = " ".join(parse_qs(urlsplit(url).query).get("options", []))
    found = re.search(r"-c\s*search_path=(\S+)", options)
    return found.group(1) if found else None

