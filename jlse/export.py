"""``jlse export``: fetched pages with their scores and, on request, their content, as JSON
lines or CSV.

The default columns are those of earlier releases (``DEFAULT_FIELDS``); ``fields`` picks any of
``ALL_FIELDS``. ``text`` and ``html`` come from the page repository or, failing that, the
crawl's WARC files: the record the crawl database names (file, offset, length; a distributed
crawl's page store, ``jlse.workers.page_store``), else the last one of the URL in the folder. Every text cell is made safe to show: control characters (terminal escape
sequences) become U+FFFD, and in CSV a cell starting with ``=``, ``+``, ``-``, ``@``, a tab or
a carriage return gets a leading ``'`` (formula injection, as OWASP recommends).
"""

from __future__ import annotations

import csv
import json
import os
import re
from collections.abc import Iterable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

from jlse.scheduler.store.base import CrawlStore
from jlse.scheduler.store.pages import PageRepository
from jlse.workers import page_store
from jlse.workers.charset import decode_html
from jlse.workers.page_store import read_body
from jlse.workers.parser import parse_html
from jlse.workers.warc import WarcIndex

DEFAULT_FIELDS = ("url", "title", "relevance", "is_target", "depth", "fetched_at", "status_code",
                  "content_type", "parent_url")
CONTENT_FIELDS = DEFAULT_FIELDS + ("final_url", "outcome", "n_bytes", "discovered_at",
                                   "anchor_text", "context", "text")
ALL_FIELDS = CONTENT_FIELDS + ("elapsed", "error", "html")
TIME_FIELDS = frozenset({"fetched_at", "discovered_at"})
BODY_FIELDS = frozenset({"text", "html"})
TIME_FORMATS = ("unix", "iso")
FORMATS = ("jsonl", "csv")
WORKDIR_META = "workdir"  # crawl database meta: the embedded crawl's folder (pages/, warc/)

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # all but tab and newline
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


class ExportError(ValueError):
    """An export that cannot be done as asked (unknown field or format)."""


def parse_fields(spec: str) -> tuple[str, ...]:
    """``"url,title,text"`` as a tuple of known field names (an unknown one is an error)."""
    names = tuple(name.strip() for name in spec.split(",") if name.strip())
    unknown = [name for name in names if name not in ALL_FIELDS]
    if unknown or not names:
        raise ExportError(f"unknown export field {', '.join(unknown) or '(none)'}; "
                          f"choose from: {', '.join(ALL_FIELDS)}")
    return names


class PageContents:
    """A page's stored body: the page repository first, then the crawl's WARC files (the
    record its database row names, else a scan of the folder)."""

    def __init__(self, pages_dir: Path | None, warc_dir: Path | None) -> None:
        self.looked_in = [folder for folder in (pages_dir, warc_dir) if folder is not None]
        self.pages = PageRepository(pages_dir) if pages_dir and pages_dir.is_dir() else None
        self.warc_dir = warc_dir if warc_dir and warc_dir.is_dir() else None
        self._warc: WarcIndex | None = None
        self.missing = 0  # pages asked for whose body was nowhere

    def html(self, url: str, warc: tuple[str, int, int] | None = None) -> str | None:
        body = self.pages.load(url) if self.pages is not None else None
        content_type = None
        if body is None and warc is not None and self.warc_dir is not None:
            found = read_body(self.warc_dir, warc)
            body, content_type = found if found else (None, None)
        if body is None and self.warc_dir is not None:
            if self._warc is None:
                self._warc = WarcIndex(self.warc_dir)  # read once, on first need
            found = self._warc.body(url)
            body, content_type = found if found else (None, None)
        if body is None:
            self.missing += 1
            return None
        return decode_html(body, content_type)[0]


def warc_folder(given: str | None, store_url: str, workdir: Path, store: CrawlStore) -> Path:
    """Where export reads WARC records: ``--warc``; an embedded crawl's ``WORKDIR/warc``; a
    distributed crawl's page store (``JLSE_PAGES_STORE``, else the folder its workers noted in
    the crawl database)."""
    if given:
        return Path(given)
    if store_url.startswith("sqlite:///"):
        return workdir / "warc"
    noted = store.get_meta(page_store.META_KEY)
    if not noted:  # no worker wrote a page store: an embedded crawl into PostgreSQL
        return workdir / "warc"
    if os.environ.get(page_store.ENV):
        return page_store.store_dir() or Path(noted)
    return Path(noted)


def missing_note(contents: PageContents, crawl_workdir: str | None) -> str:
    """Why ``contents.missing`` pages have an empty text/html, and where their bodies may be:
    the folder the embedded crawl recorded (``WORKDIR_META``), when export looked elsewhere."""
    looked = " and ".join(f"{folder}{'' if folder.is_dir() else ' (not there)'}"
                          for folder in contents.looked_in)
    note = (f"note: {contents.missing} pages have no stored copy in {looked}, so their "
            "text/html is empty")
    looked_dirs = {folder.resolve() for folder in contents.looked_in}
    if crawl_workdir and Path(crawl_workdir, "pages").resolve() not in looked_dirs:
        return (f"{note}; the crawl kept its pages in {crawl_workdir}: add --workdir "
                f"{crawl_workdir} (or --pages DIR, --warc DIR)")
    return f"{note}; point export at the pages with --workdir, --pages DIR or --warc DIR"


def export_pages(store: CrawlStore, out: TextIO, fmt: str = "jsonl",
                 min_relevance: float | None = 0.5, targets_only: bool = False,
                 fields: Iterable[str] = DEFAULT_FIELDS, times: str = "unix",
                 contents: PageContents | None = None) -> int:
    """Write the selected pages to ``out``; returns how many were written."""
    fields = tuple(fields)
    if fmt not in FORMATS:
        raise ExportError(f"unknown export format {fmt!r}: use jsonl or csv")
    if times not in TIME_FORMATS:
        raise ExportError(f"unknown time format {times!r}: use unix or iso")
    rows = store.export_rows(min_relevance=min_relevance, targets_only=targets_only)
    cells = (_cells(row, fields, times, contents) for row in rows)
    if fmt == "jsonl":
        return _write_jsonl(out, cells)
    return _write_csv(out, fields, cells)


def _write_jsonl(out: TextIO, rows: Iterator[dict[str, Any]]) -> int:
    count = 0
    for row in rows:
        out.write(json.dumps(row, ensure_ascii=False))
        out.write("\n")
        count += 1
    return count


def _write_csv(out: TextIO, fields: tuple[str, ...], rows: Iterator[dict[str, Any]]) -> int:
    writer = csv.DictWriter(out, fieldnames=fields, extrasaction="ignore")
    writer.writeheader()
    count = 0
    for row in rows:
        writer.writerow({key: neutralise_formula(value) for key, value in row.items()})
        count += 1
    return count


def _cells(row: dict[str, Any], fields: tuple[str, ...], times: str,
           contents: PageContents | None) -> dict[str, Any]:
    """The exported values of one page, made safe to show."""
    if BODY_FIELDS & set(fields):  # only an "ok" page had its body kept
        ok = row.get("outcome") == "ok"
        row.update(_body_cells(row["url"], contents if ok else None, row.get("warc")))
    cells = {}
    for name in fields:
        value = row.get(name)
        if name in TIME_FIELDS and times == "iso":
            value = iso_time(value)
        cells[name] = printable(value) if isinstance(value, str) else value
    return cells


def _body_cells(url: str, contents: PageContents | None,
                warc: tuple[str, int, int] | None) -> dict[str, str]:
    html = contents.html(url, warc) if contents is not None else None
    if html is None:
        return {"text": "", "html": ""}
    return {"text": parse_html(html, url).text, "html": html}


def iso_time(timestamp: float | None) -> str | None:
    """ISO 8601 in UTC with milliseconds, e.g. ``2026-11-25T09:34:00.123+00:00``."""
    if timestamp is None:
        return None
    return datetime.fromtimestamp(timestamp, timezone.utc).isoformat(timespec="milliseconds")


def printable(text: str) -> str:
    """``text`` with control characters (terminal escapes, C1 codes) replaced by U+FFFD;
    tabs and newlines stay (a CRLF becomes a newline)."""
    return _CONTROL.sub("\ufffd", text.replace("\r\n", "\n"))


def neutralise_formula(value: Any) -> Any:
    """A CSV cell a spreadsheet will not run as a formula."""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value
