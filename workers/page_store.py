"""The page store of a distributed crawl: WARC files in one folder every machine shares.

Each worker process appends the responses it fetches to WARC files of its own in the store
(``WarcWriter`` with sealing: ``<name>.open`` while written, renamed to ``<name>`` once closed,
rotated at ``warc_max_bytes``; names carry the host, the process id and a serial, so machines
never collide). Where a page's response record is, (file, offset, length), goes into its row of
the crawl database with the page's own write (``FetchRecord.warc_*``); ``read_body`` reads it
back on any machine that mounts the store, from ``<name>`` or, while its writer lives (or after
it was killed), from ``<name>.open``.

A record is flushed to the OS before the write returns, so before the database names it. A
worker killed mid-write leaves an ``.open`` file whose last record may be torn and is named by
no row; ``seal`` cuts such a file back to its last whole gzip member and gives it its final
name (``python -m jlse.workers.page_store seal DIR``, once the workers that wrote there are
stopped). ``warcio check`` passes on every sealed file.

The store is ``JLSE_PAGES_STORE`` (a folder; ``off``: none), by default ``./pages-store`` in
the worker's working folder: right for workers of one machine (``make cluster-up``); workers of
several machines need a folder they share (NFS, CephFS, a bind mount).
"""

from __future__ import annotations

import argparse
import io
import logging
import os
import socket
import zlib
from collections.abc import Mapping
from pathlib import Path

from warcio.archiveiterator import ArchiveIterator
from warcio.exceptions import ArchiveLoadFailed

from jlse.workers.warc import OPEN_SUFFIX

log = logging.getLogger(__name__)

ENV = "JLSE_PAGES_STORE"
DEFAULT_DIR = "pages-store"
META_KEY = "pages_store"  # crawl database meta: the store's folder, as the workers saw it
_CHUNK = 1 << 20


class PageStoreError(RuntimeError):
    """A page store a worker cannot write to."""


def store_dir(environ: Mapping[str, str] = os.environ) -> Path | None:
    """The page store's folder from ``JLSE_PAGES_STORE`` (absolute), None if it is ``off``."""
    value = environ.get(ENV, "").strip() or DEFAULT_DIR
    if value.lower() == "off":
        return None
    return Path(value).expanduser().absolute()


def check_writable(directory: Path) -> None:
    """Create ``directory`` and write a file there, or raise ``PageStoreError`` saying why."""
    probe = directory / f".probe-{socket.gethostname()}-{os.getpid()}"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"jlse")
        probe.unlink()
    except OSError as exc:
        raise PageStoreError(
            f"the page store {directory} is not writable ({exc.strerror or exc}): set {ENV} to "
            f"a folder every worker machine shares and can write, or {ENV}=off to keep no "
            "page content") from None


def read_body(directory: Path, location: tuple[str, int, int]) -> tuple[bytes, str] | None:
    """The body and Content-Type of the response record at ``location`` (file, offset,
    length) in ``directory``; None if the file is not there or the record is not whole."""
    name, offset, length = location
    if not name or Path(name).name != name or name.startswith("."):  # a plain file name only
        log.warning("page store: refusing the file name %r", name)
        return None
    data = _read_range(directory, name, offset, length)
    if data is None or len(data) < length:
        return None
    try:
        record = next(iter(ArchiveIterator(io.BytesIO(data))))
        content_type = record.http_headers.get_header("Content-Type") or ""
        return record.content_stream().read(), content_type
    except (StopIteration, ArchiveLoadFailed, OSError, zlib.error) as exc:
        log.warning("page store: no record at %s:%d: %s", name, offset, exc)
        return None


def _read_range(directory: Path, name: str, offset: int, length: int) -> bytes | None:
    # the final name first; its writer may be renaming it from .open meanwhile, so once more
    for candidate in (name, name + OPEN_SUFFIX, name):
        try:
            with (directory / candidate).open("rb") as handle:
                handle.seek(offset)
                return handle.read(length)
        except FileNotFoundError:
            continue
    return None


def whole_length(path: Path) -> int:
    """How many leading bytes of the gzip file ``path`` are whole gzip members (up to the
    first member that ends early or is damaged)."""
    whole = consumed = 0
    member = zlib.decompressobj(zlib.MAX_WBITS | 16)
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            while chunk:
                try:
                    member.decompress(chunk)
                except zlib.error:
                    return whole
                if not member.eof:
                    consumed += len(chunk)
                    break
                rest = member.unused_data
                consumed += len(chunk) - len(rest)
                whole, chunk = consumed, rest
                member = zlib.decompressobj(zlib.MAX_WBITS | 16)
    return whole


def seal(path: Path) -> Path:
    """Cut an ``.open`` file of a stopped writer back to its whole records and give it its
    final name; the sealed file's path. Only for files no live process writes to."""
    if not path.name.endswith(OPEN_SUFFIX):
        raise ValueError(f"{path} is not an {OPEN_SUFFIX} file")
    whole = whole_length(path)
    torn = path.stat().st_size - whole
    if torn:
        log.warning("page store: %s ends in %d bytes of a torn record; cut", path, torn)
        os.truncate(path, whole)
    final = path.with_name(path.name[: -len(OPEN_SUFFIX)])
    os.replace(path, final)
    return final


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m jlse.workers.page_store",
        description="Seal the .open WARC files that stopped (killed) workers left in a page store.")
    parser.add_argument("command", choices=["seal"])
    parser.add_argument("directory", type=Path)
    args = parser.parse_args(argv)
    for path in sorted(args.directory.glob(f"*{OPEN_SUFFIX}")):
        print(f"sealed {seal(path)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
