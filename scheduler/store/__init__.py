"""The crawl database (LinkTable, ResultTable, crawl history, meta) and the page repository.

``open_store(url)`` picks the backend from the URL: ``sqlite:///crawl.db`` (relative path),
``sqlite:////abs/path/crawl.db`` (absolute), ``postgresql://user@host/db`` (psycopg2).
"""

from __future__ import annotations

from jlse.scheduler.store.base import CrawlStats, CrawlStore, StoreError, redact_url
from jlse.scheduler.store.pages import PageRepository

__all__ = ["CrawlStats", "CrawlStore", "PageRepository", "StoreError", "open_store"]

SQLITE_PREFIX = "sqlite:///"
SUPPORTED_SCHEMES = ("sqlite", "postgresql", "postgres")


def open_store(url: str, read_only: bool = False) -> CrawlStore:
    """Open (and create if missing) the crawl database at ``url``; ``read_only``: open an
    existing one without writing anything (a read-only file or folder is fine).

    An unknown scheme is a ``ValueError``; a database that cannot be opened is a ``StoreError``.
    """
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme == "sqlite":
        return _open_sqlite(url, read_only)
    if scheme in ("postgresql", "postgres"):
        return _open_postgres(url, read_only)
    raise ValueError(
        f"unsupported crawl database URL scheme {scheme or '(none)'!r} in {redact_url(url)!r}; "
        f"use one of: {', '.join(s + '://' for s in SUPPORTED_SCHEMES)}"
    )


def _open_sqlite(url: str, read_only: bool) -> CrawlStore:
    from jlse.scheduler.store.sqlite import SqliteStore

    if not url.startswith(SQLITE_PREFIX) or len(url) == len(SQLITE_PREFIX):
        raise ValueError(f"SQLite URL needs a file path, like sqlite:///crawl.db: got {url!r}")
    return SqliteStore(url[len(SQLITE_PREFIX):], read_only=read_only)


def _open_postgres(url: str, read_only: bool) -> CrawlStore:
    try:
        from jlse.scheduler.store.postgres import PostgresStore
    except ImportError as exc:
        raise StoreError(
            f"PostgreSQL crawl databases need psycopg2 ({exc}): pip install 'jlse[distributed]'"
        ) from None
    return PostgresStore(url, read_only=read_only)
