"""The crawl database in one SQLite file (embedded mode)."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

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
    """One connection in WAL mode, shared by threads under a lock."""

    dialect = "sqlite"
    placeholder = "?"

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path
        self._conn = self._connect(path)
        try:
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
