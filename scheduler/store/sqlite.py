"""The crawl database in one SQLite file (embedded mode)."""

from __future__ import annotations

import logging
import sqlite3
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

from jlse.records import NewLink
from jlse.scheduler.store.base import StoreError
from jlse.scheduler.store.sql import LINK_INSERT_COLUMNS, SqlCrawlStore, link_row

log = logging.getLogger(__name__)

T = TypeVar("T")

BUSY_TIMEOUT = 30.0  # seconds to wait for another process's write lock
_IN_CHUNK = 500  # URLs per "IN (...)" lookup, well under SQLite's variable limit
_INSERT_SQL = (
    f"INSERT INTO links ({LINK_INSERT_COLUMNS}) "
    f"VALUES ({', '.join('?' * len(LINK_INSERT_COLUMNS.split(',')))})"
)


class SqliteStore(SqlCrawlStore):
    """One connection in WAL mode, shared by threads under a lock.

    ``read_only``: opened with ``mode=ro`` (nothing is created or written, so a read-only file
    or folder is fine); a WAL database in a read-only folder is opened ``immutable``.
    """

    dialect = "sqlite"
    placeholder = "?"

    def __init__(self, path: str, read_only: bool = False) -> None:
        super().__init__()
        self.path = path
        self._conn = _connect_read_only(path) if read_only else self._connect(path)
        try:
            if read_only:
                self._run(self._check_schema, "open", write=False)
            else:
                self._run(self._create_schema, "open")
        except StoreError:
            self.close()
            raise

    @staticmethod
    def _connect(path: str) -> sqlite3.Connection:
        try:
            if path != ":memory:":
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            # isolation_level=None: transactions are opened explicitly in _run.
            conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT, isolation_level=None,
                                   check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
        except (OSError, sqlite3.Error) as exc:
            log.error("cannot open SQLite crawl database %s: %s", path, exc)
            raise StoreError(f"cannot open SQLite crawl database {path}: {exc}") from exc
        return conn

    def _run(self, work: Callable[[Any], T], what: str, write: bool = True) -> T:
        with self._lock:
            if self._closed:
                raise StoreError(f"{what}: the crawl database {self.path} is closed")
            cur = self._conn.cursor()
            try:
                if write:
                    cur.execute("BEGIN IMMEDIATE")
                result = work(cur)
                if write:
                    cur.execute("COMMIT")
                return result
            except StoreError:
                self._rollback()
                raise
            except sqlite3.Error as exc:
                self._rollback()
                log.error("%s failed on %s: %s", what, self.path, exc)
                raise StoreError(f"{what} failed on SQLite crawl database {self.path}: {exc}") from exc
            except BaseException:  # Ctrl+C (or any other error) mid-transaction: end it
                self._rollback()
                raise
            finally:
                cur.close()

    def _has_table(self, cur: Any, table: str) -> bool:
        cur.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,))
        return cur.fetchone() is not None

    def _rollback(self) -> None:
        if self._conn.in_transaction:
            try:
                self._conn.execute("ROLLBACK")
            except sqlite3.Error as exc:  # the error that got us here matters more
                log.warning("rollback failed on %s: %s", self.path, exc)

    def _upsert_links(self, cur: Any, links: list[NewLink], now: float) -> dict[str, tuple[int, bool]]:
        # One writer at a time (BEGIN IMMEDIATE), so select-then-insert cannot race.
        found = self._existing_ids(cur, [link.url for link in links])
        cur.executemany(
            "UPDATE links SET priority = ? WHERE id = ? AND status = 'queued' AND priority < ?",
            [(link.priority, found[link.url][0], link.priority)
             for link in links if link.url in found],
        )
        for link in links:
            if link.url not in found:
                cur.execute(_INSERT_SQL, link_row(link, now))
                found[link.url] = (cur.lastrowid, True)
        return found

    @staticmethod
    def _existing_ids(cur: Any, urls: list[str]) -> dict[str, tuple[int, bool]]:
        found: dict[str, tuple[int, bool]] = {}
        for start in range(0, len(urls), _IN_CHUNK):
            chunk = urls[start:start + _IN_CHUNK]
            marks = ", ".join("?" * len(chunk))
            cur.execute(f"SELECT id, url FROM links WHERE url IN ({marks})", chunk)
            found.update({url: (link_id, False) for link_id, url in cur.fetchall()})
        return found

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._conn.close()


def _connect_read_only(path: str) -> sqlite3.Connection:
    """A connection that cannot write: ``mode=ro``, or ``immutable`` when SQLite cannot set
    up WAL reading (its ``-shm`` file) because the folder is read-only."""
    resolved = Path(path).resolve()
    if not resolved.is_file():
        raise StoreError(f"no crawl database at {path}")
    uri = f"file:{quote(str(resolved))}?mode=ro"
    try:
        return _open_uri(uri)
    except sqlite3.Error as exc:
        log.info("read-only open of %s failed (%s): trying it as immutable", path, exc)
    wal = Path(f"{resolved}-wal")
    if wal.is_file() and wal.stat().st_size > 0:
        log.warning("%s: its -wal file cannot be read here; the last writes may be missing", path)
    try:
        return _open_uri(uri + "&immutable=1")
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open SQLite crawl database {path} read-only: {exc}") from None


def _open_uri(uri: str) -> sqlite3.Connection:
    conn = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT, isolation_level=None,
                           check_same_thread=False)
    try:
        conn.execute("PRAGMA query_only=ON")
        conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
    except sqlite3.Error:
        conn.close()
        raise
    return conn


def check_resumable(path: str) -> None:
    """Refuse to resume from a SQLite crawl database that is missing, empty, damaged or holds
    no crawl: a ``StoreError`` saying which and what to do. Reads only (``quick_check``)."""
    file = Path(path)
    if not file.is_file():
        raise StoreError(f"cannot resume: there is no crawl database at {path} (deleted, or "
                         "another --workdir?); start a new crawl without --resume")
    if file.stat().st_size == 0:
        raise StoreError(f"cannot resume: the crawl database {path} is empty (0 bytes); "
                         "start over with --fresh")
    try:
        conn = _open_uri(f"file:{quote(str(file.resolve()))}?mode=ro")
        try:
            verdict = conn.execute("PRAGMA quick_check(1)").fetchone()[0]
            has_links = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' "
                                     "AND name = 'links'").fetchone() is not None
            crawled = has_links and conn.execute("SELECT 1 FROM links LIMIT 1").fetchone()
        finally:
            conn.close()
    except sqlite3.Error as exc:
        verdict = str(exc)
    if verdict != "ok":
        verdict = "; ".join(line for line in verdict.splitlines() if "***" not in line)[:200]
        raise StoreError(f"cannot resume: the crawl database {path} is damaged ({verdict}); "
                         "restore it from a backup, or start over with --fresh")
    if not crawled:
        raise StoreError(f"cannot resume: {path} holds no crawl; start a new crawl without "
                         "--resume")


def check_writable(directory: Path | str) -> None:
    """A ``StoreError`` naming the reason when files cannot be created in ``directory`` (a
    crawl writes its database, pages and log there)."""
    try:
        Path(directory).mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as exc:
        raise StoreError(f"cannot write to the crawl's folder {directory}: "
                         f"{exc.strerror or exc}; use a writable --workdir") from None
