"""A worker machine's copy of each published Q-table, shared by its processes.

Every fetch worker process serves the newest Q-table (``publish.RedisQTableSource``). Without
this cache each process downloads every new version's blob from Redis: P processes on a
machine, P copies of each version. With it, the first process of the machine that needs a
version downloads it under a file lock into the machine's cache directory and the others read
that file, so Redis sends one copy per machine and version. A version stored in chunks
(``publish``) is streamed chunk by chunk into the file, which appears (by a rename) only once
it is whole: a process switches to a version only when all of it is on the machine.

The directory is this user's alone (created 0700; one with other permissions or another owner
is not used), and a file is parsed like a blob from Redis (arrays and JSON, never unpickled).
It lives in ``JLSE_QTABLE_CACHE``, else in /dev/shm (memory) where it exists, else in the
temporary directory; the newest ``KEEP`` versions of a crawl stay there.

**Mapped, not read.** The store (``publish.RedisQTableStore``) asks for a version unpacked
(:meth:`MachineCache.fetch_mapped`): the process that downloads it also unpacks it, under the
same lock, into a directory of ``.npy`` files (``models/qtable_files.py``, with the search
postings and the vocabularies' term tables it derives once for all), which appears by a rename
once whole, and removes the archive. Every process then memory-maps those files read-only: the
machine holds one copy of the arrays and vocabularies (the page cache's, in memory on
/dev/shm), shared by its processes, where each process used to read the archive into memory of
its own and make dictionaries of its terms.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from jlse.models.qtable_files import unpack_archive

log = logging.getLogger(__name__)

KEEP = 3  # versions kept per crawl
KEEP_INDEXES = 2  # shared link indexes kept per crawl (the newest)
MAPPED_SUFFIX = ".npys"  # an archive unpacked into a directory of .npy files


def default_root() -> Path:
    """Where the machine's Q-table copies live (see the module)."""
    configured = os.environ.get("JLSE_QTABLE_CACHE")
    if configured:
        return Path(configured)
    shm = Path("/dev/shm")
    base = shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())
    return base / f"jlse-qtables-{os.getuid()}"


class MachineCache:
    """The Q-table blobs of one crawl (one key prefix) on this machine."""

    def __init__(self, directory: Path, keep: int = KEEP) -> None:
        self.directory = directory
        self.keep = keep

    @classmethod
    def for_prefix(cls, prefix: str, root: Path | None = None) -> MachineCache | None:
        """The cache of the Q-tables under ``prefix``; None (no cache) where the directory
        cannot be made this user's alone."""
        root = default_root() if root is None else root
        directory = root / hashlib.sha1(prefix.encode()).hexdigest()[:16]
        try:
            for path in (root, directory):
                path.mkdir(mode=0o700, exist_ok=True)
                info = path.stat()
                if info.st_uid != os.getuid() or info.st_mode & 0o077:
                    log.warning("Q-table cache %s is not this user's alone; each process "
                                "downloads its own copies", path)
                    return None
        except OSError as exc:
            log.warning("no Q-table cache (%s); each process downloads its own copies", exc)
            return None
        return cls(directory)

    def path(self, version: int) -> Path:
        return self.directory / f"v{int(version)}.qtable"

    def get(self, version: int, download: Callable[[], bytes | None]) -> bytes | None:
        """Version ``version``'s blob: this machine's copy, else ``download()``'s (kept for the
        other processes). None if the download found none."""

        def write(out: IO[bytes]) -> bool:
            blob = download()
            if blob is None:
                return False
            out.write(blob)
            return True

        path = self.fetch(version, write)
        return None if path is None else path.read_bytes()

    def fetch(self, version: int, download: Callable[[IO[bytes]], bool]) -> Path | None:
        """The file of version ``version``: this machine's copy, else one that
        ``download(file)`` writes (True: it did; False: not stored), kept for the other
        processes. None if the download found none. A large version (chunks) streams to the
        file: the download never holds it whole in memory."""
        return self.fetch_file(self.path(version).name, download, version)

    def fetch_file(self, name: str, download: Callable[[IO[bytes]], bool],
                   version: int | None = None) -> Path | None:
        """:meth:`fetch` of any file of the cache (a version's, ``version``, or a shared
        index's: the newest ``KEEP_INDEXES`` of those stay)."""
        path = self.directory / name
        if path.exists():
            return path
        with self._locked():  # one process downloads, the others wait and read its file
            if path.exists():
                return path
            if not self._download(path, download):
                return None
            self._trim_after(version)
            return path

    def mapped_path(self, name: str) -> Path:
        """The directory holding archive ``name`` unpacked (:meth:`fetch_mapped`)."""
        return self.directory / (name.split(".", 1)[0] + MAPPED_SUFFIX)

    def fetch_mapped(self, name: str, download: Callable[[IO[bytes]], bool],
                     version: int | None = None) -> Path | None:
        """:meth:`fetch_file`'s archive unpacked into a directory of ``.npy`` files for the
        processes to map (``models.qtable_files.map_directory``); the archive goes once
        unpacked. None if the download found none; ValueError if the archive is invalid."""
        directory = self.mapped_path(name)
        if directory.is_dir():
            return directory
        with self._locked():
            if directory.is_dir():
                return directory
            archive = self.directory / name
            if not archive.exists() and not self._download(archive, download):
                return None
            work = Path(tempfile.mkdtemp(dir=self.directory, suffix=".part"))
            try:
                unpack_archive(archive, work)
                os.replace(work, directory)  # readers see all of it or nothing
            except BaseException:
                shutil.rmtree(work, ignore_errors=True)
                raise
            archive.unlink(missing_ok=True)  # one copy on the machine
            self._trim_after(version)
            return directory

    def _download(self, path: Path, download: Callable[[IO[bytes]], bool]) -> bool:
        """``download`` into ``path`` through a temporary file (under the lock); False if it
        stored nothing."""
        handle, temporary = tempfile.mkstemp(dir=self.directory, suffix=".part")
        try:
            with os.fdopen(handle, "wb") as file:
                stored = download(file)
            if not stored:
                Path(temporary).unlink(missing_ok=True)
                return False
            os.replace(temporary, path)  # readers see all of it or nothing
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
        return True

    def _trim_after(self, version: int | None) -> None:
        if version is not None:
            self._trim(version)
        else:
            self._trim_indexes()

    def discard(self, version: int) -> None:
        """Forget a copy (it did not parse)."""
        self.path(version).unlink(missing_ok=True)

    def discard_file(self, name: str) -> None:
        """Forget a file, and its unpacked directory (it did not parse)."""
        (self.directory / name).unlink(missing_ok=True)
        shutil.rmtree(self.mapped_path(name), ignore_errors=True)

    def _trim_indexes(self) -> None:
        paths = [*self.directory.glob("i*.qtable"), *self.directory.glob("i*" + MAPPED_SUFFIX)]
        newest: dict[str, float] = {}
        for path in paths:
            stem = path.name.split(".", 1)[0]
            newest[stem] = max(newest.get(stem, 0.0), _modified(path))
        kept = set(sorted(newest, key=newest.__getitem__, reverse=True)[:KEEP_INDEXES])
        for path in paths:
            if path.name.split(".", 1)[0] not in kept:
                _remove(path)

    def _trim(self, newest: int) -> None:
        for path in [*self.directory.glob("v*.qtable"), *self.directory.glob("v*" + MAPPED_SUFFIX)]:
            try:
                version = int(path.name.split(".", 1)[0][1:])
            except ValueError:
                continue
            if version <= newest - self.keep:
                _remove(path)  # a process mapping it keeps its pages until it lets go

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with open(self.directory / "lock", "a+b") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _modified(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return 0.0
