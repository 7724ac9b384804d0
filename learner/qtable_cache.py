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
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

log = logging.getLogger(__name__)

KEEP = 3  # versions kept per crawl
KEEP_INDEXES = 2  # shared link indexes kept per crawl (the newest)


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
            handle, temporary = tempfile.mkstemp(dir=self.directory, suffix=".part")
            try:
                with os.fdopen(handle, "wb") as file:
                    stored = download(file)
                if not stored:
                    Path(temporary).unlink(missing_ok=True)
                    return None
                os.replace(temporary, path)  # readers see all of it or nothing
            except BaseException:
                Path(temporary).unlink(missing_ok=True)
                raise
            if version is not None:
                self._trim(version)
            else:
                self._trim_indexes()
            return path

    def discard(self, version: int) -> None:
        """Forget a copy (it did not parse)."""
        self.path(version).unlink(missing_ok=True)

    def discard_file(self, name: str) -> None:
        (self.directory / name).unlink(missing_ok=True)

    def _trim_indexes(self) -> None:
        indexes = sorted(self.directory.glob("i*.qtable"), key=_modified, reverse=True)
        for path in indexes[KEEP_INDEXES:]:
            path.unlink(missing_ok=True)

    def _trim(self, newest: int) -> None:
        for path in self.directory.glob("v*.qtable"):
            try:
                version = int(path.stem[1:])
            except ValueError:
                continue
            if version <= newest - self.keep:
                path.unlink(missing_ok=True)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with open(self.directory / "lock", "a+b") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)


def _modified(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return 0.0
