"""WARC files of a crawl's responses (ISO 28500, WARC/1.1, written and read with warcio).

Every response the fetcher receives (pages, robots.txt, sitemaps) becomes a ``request`` and a
``response`` record, HTTP headers included, in gzipped WARC files that ACHE, Heritrix, pywb and
the other web-archiving tools read. ``ArchivingFetcher`` is the fetcher of a crawl with
``warc`` on; ``build_engine`` picks it, so the embedded crawl and the distributed workers write
through the same code.

Files are named ``jlse-<UTC time>-<serial>-<host>-<pid>-<random>.warc.gz``: every page process
and every Celery worker process writes its own files, so two writers never share a name, even
on one machine. A file is closed and the next one begun once it holds ``warc_max_bytes``. Each
record pair is written with one ``write`` and flushed, so a process that is killed leaves
readable files; a file whose write failed (a full disk) is left as it is and the next record
begins a new one, so a torn record can only be a file's last. ``write`` returns where the
response record is (file name, offset, length), so the crawl database can point at it
(``jlse.workers.page_store``). A writer with ``sealing`` on (the distributed page store) writes
to ``<name>.open`` and renames the file to ``<name>`` once it is closed: a file without
``.open`` is complete, and only a killed writer's ``.open`` file may end in a torn record, which
no database row points at. The payload is stored as the crawler read it: decompressed, so the
``Content-Encoding`` and ``Transfer-Encoding`` headers are dropped and ``Content-Length`` is the
stored length; a body that was not read (not HTML, too large, an error page) is stored empty
with ``WARC-Truncated``.
"""

from __future__ import annotations

import io
import logging
import os
import secrets
import socket
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import BinaryIO
from urllib.parse import urlsplit

from warcio.archiveiterator import ArchiveIterator
from warcio.exceptions import ArchiveLoadFailed
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from jlse.records import Outcome
from jlse.settings import Settings
from jlse.workers.fetcher import Fetcher, FetchResult

log = logging.getLogger(__name__)

SUFFIX = ".warc.gz"
OPEN_SUFFIX = ".open"  # a file still being written (sealing writers)
_DROPPED_HEADERS = frozenset({"content-encoding", "transfer-encoding", "content-length"})


class WarcWriter:
    """Appends request/response pairs to size-rotated WARC files in ``directory``.

    Thread-safe. A writer created before a fork opens its own file in the child (the process
    id is part of the name).
    """

    def __init__(self, directory: Path | str, max_bytes: int, software: str = "jlse",
                 sealing: bool = False) -> None:
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self.software = software
        self.sealing = sealing
        self.host = _name_part(os.environ.get("JLSE_WORKER_NAME") or socket.gethostname())
        self._lock = threading.Lock()
        self._file: BinaryIO | None = None
        self._name = ""  # the current file's final name
        self._pid = 0
        self._serial = 0
        self.paths: list[Path] = []  # files this process wrote, oldest first

    def write(self, fetched: FetchResult) -> tuple[str, int, int] | None:
        """Archive one response (a result without an HTTP status is skipped); where its
        response record is, (file name, offset, length), once it is flushed to the OS."""
        if fetched.status_code is None:
            return None
        data, response_length = _record_pair(fetched)
        with self._lock:
            handle = self._current_file()
            offset, name = handle.tell(), self._name
            try:
                handle.write(data)
                handle.flush()
            except OSError:
                self._abandon_file()
                raise
            if handle.tell() >= self.max_bytes:
                self._close_file()
        return name, offset, response_length

    def close(self) -> None:
        with self._lock:
            self._close_file()

    def _current_file(self) -> BinaryIO:
        if self._file is not None and self._pid == os.getpid():
            return self._file
        self._file, self._pid = None, os.getpid()  # a forked child never writes its parent's
        self.directory.mkdir(parents=True, exist_ok=True)
        self._serial += 1
        stamp = datetime.now(timezone.utc).strftime("%Y%m%d%H%M%S")
        name = (f"jlse-{stamp}-{self._serial:05d}-{self.host}-{self._pid}-"
                f"{secrets.token_hex(3)}{SUFFIX}")
        path = self.directory / name
        handle = Path(f"{path}{OPEN_SUFFIX}" if self.sealing else path).open("xb")
        handle.write(_warcinfo(name, self.software))
        self._file, self._name = handle, name
        self.paths.append(path)
        log.info("WARC file %s", path)
        return handle

    def _abandon_file(self) -> None:
        """Leave the current file as it is (its last record may be torn; not renamed)."""
        try:
            self._file.close()
        except OSError:
            pass
        self._file = None

    def _close_file(self) -> None:
        if self._file is not None and self._pid == os.getpid():
            self._file.close()
            if self.sealing:
                path = self.directory / self._name
                os.replace(f"{path}{OPEN_SUFFIX}", path)
        self._file = None


class ArchivingFetcher(Fetcher):
    """A ``Fetcher`` that archives every response it receives in WARC files."""

    def __init__(self, settings: Settings, archive: WarcWriter) -> None:
        super().__init__(settings)
        self.archive = archive

    def fetch(self, url: str) -> FetchResult:
        return self._archived(super().fetch(url))

    def fetch_robots(self, url: str) -> FetchResult:
        return self._archived(super().fetch_robots(url))

    def fetch_document(self, url: str) -> FetchResult:
        return self._archived(super().fetch_document(url))

    def close(self) -> None:
        super().close()
        self.archive.close()

    def _archived(self, fetched: FetchResult) -> FetchResult:
        try:
            fetched.warc = self.archive.write(fetched)
        except OSError as exc:  # a full disk must not stop the crawl
            log.warning("WARC: cannot archive %s: %s", fetched.url, exc)
        except Exception:  # noqa: BLE001 - nor may a bug here lose the fetch
            log.exception("WARC: cannot archive %s", fetched.url)
        return fetched


class WarcIndex:
    """Where each URL's last response record is in a folder of WARC files (for export)."""

    def __init__(self, directory: Path | str) -> None:
        self._where: dict[str, tuple[Path, int]] = {}
        folder = Path(directory)
        for path in sorted([*folder.glob(f"*{SUFFIX}"), *folder.glob(f"*{SUFFIX}{OPEN_SUFFIX}")]):
            try:
                with path.open("rb") as handle:
                    iterator = ArchiveIterator(handle)
                    for record in iterator:
                        if record.rec_type == "response":
                            uri = record.rec_headers.get_header("WARC-Target-URI")
                            self._where[uri] = (path, iterator.get_record_offset())
            except (OSError, ArchiveLoadFailed) as exc:  # a damaged file: the rest still counts
                log.warning("WARC file %s is unreadable past some point: %s", path, exc)

    def __len__(self) -> int:
        return len(self._where)

    def body(self, url: str) -> tuple[bytes, str] | None:
        """The stored body of ``url`` and its Content-Type header, or None."""
        found = self._where.get(url)
        if found is None:
            return None
        path, offset = found
        with path.open("rb") as handle:
            handle.seek(offset)
            record = next(iter(ArchiveIterator(handle)))
            content_type = record.http_headers.get_header("Content-Type") or ""
            return record.content_stream().read(), content_type


def make_fetcher(settings: Settings, warc_dir: Path | str | None,
                 page_store: Path | str | None = None) -> Fetcher:
    """The crawl's fetcher: archiving to ``page_store`` (a distributed crawl's shared WARC
    files, sealed on close) or else to ``warc_dir`` when ``warc`` is on."""
    if page_store is not None:
        writer = WarcWriter(page_store, settings.warc_max_bytes, sealing=True)
        return ArchivingFetcher(settings, writer)
    if settings.warc == "off" or warc_dir is None:
        return Fetcher(settings)
    return ArchivingFetcher(settings, WarcWriter(warc_dir, settings.warc_max_bytes))


def _record_pair(fetched: FetchResult) -> tuple[bytes, int]:
    """The gzipped response and request records of ``fetched`` (in that order, as warcio's
    ``write_request_response_pair`` writes them), and the response record's length."""
    buffer = io.BytesIO()
    writer = WARCWriter(buffer, gzip=True, warc_version="WARC/1.1")
    date = _warc_date(time.time() - fetched.elapsed)
    response = writer.create_warc_record(
        fetched.url, "response", payload=io.BytesIO(fetched.body), length=len(fetched.body),
        warc_headers_dict=_response_warc_headers(fetched, date),
        http_headers=_response_http_headers(fetched),
    )
    request = writer.create_warc_record(
        fetched.url, "request", warc_headers_dict={"WARC-Date": date},
        http_headers=_request_http_headers(fetched),
    )
    request.rec_headers.replace_header("WARC-Target-URI", fetched.url)
    request.rec_headers.add_header("WARC-Concurrent-To",
                                   response.rec_headers.get_header("WARC-Record-ID"))
    writer.write_record(response)
    response_length = buffer.tell()
    writer.write_record(request)
    return buffer.getvalue(), response_length


def _response_http_headers(fetched: FetchResult) -> StatusAndHeaders:
    headers = [(name, value) for name, value in fetched.headers.items()
               if name.lower() not in _DROPPED_HEADERS]
    headers.append(("Content-Length", str(len(fetched.body))))
    status = f"{fetched.status_code} {fetched.reason}".strip()
    return StatusAndHeaders(status, headers, protocol=fetched.http_version or "HTTP/1.1")


def _response_warc_headers(fetched: FetchResult, date: str) -> dict[str, str]:
    headers = {"WARC-Date": date}
    if not fetched.body and _announced_body(fetched):
        headers["WARC-Truncated"] = "length" if fetched.outcome is Outcome.TOO_LARGE \
            else "unspecified"
    return headers


def _announced_body(fetched: FetchResult) -> bool:
    """Did the server send (or start) a body the crawler did not keep?"""
    lowered = {name.lower(): value for name, value in fetched.headers.items()}
    if "content-length" in lowered:
        return lowered["content-length"].strip() not in ("", "0")
    return "transfer-encoding" in lowered or fetched.n_bytes > 0


def _request_http_headers(fetched: FetchResult) -> StatusAndHeaders:
    parts = urlsplit(fetched.url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    headers = list(fetched.request_headers.items())
    if not any(name.lower() == "host" for name, _ in headers):
        headers.insert(0, ("Host", parts.netloc))
    protocol = fetched.http_version or "HTTP/1.1"
    return StatusAndHeaders(f"GET {target} {protocol}", headers, is_http_request=True)


def _warcinfo(filename: str, software: str) -> bytes:
    buffer = io.BytesIO()
    writer = WARCWriter(buffer, gzip=True, warc_version="WARC/1.1")
    info = {"software": software, "format": "WARC File Format 1.1",
            "hostname": socket.gethostname(), "conformsTo":
            "https://iipc.github.io/warc-specifications/specifications/warc-format/warc-1.1/"}
    writer.write_record(writer.create_warcinfo_record(filename, info))
    return buffer.getvalue()


def _warc_date(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _name_part(text: str) -> str:
    """``text`` safe inside a file name: letters, digits, dots and dashes."""
    cleaned = "".join(char if char.isalnum() or char in ".-" else "-" for char in text)
    return cleaned.strip("-.")[:60] or "host"
