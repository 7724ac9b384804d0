"""The page repository: raw fetched pages on disk, named by the md5 of their URL (docs/algorithms.md §2.2)."""

from __future__ import annotations

import gzip
import hashlib
import logging
import os
import threading
import zlib
from pathlib import Path

log = logging.getLogger(__name__)

SUFFIX = ".gz"


class PageRepository:
    """Pages under ``root/<md5[:2]>/<md5>.gz``, gzip-compressed, written atomically."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._made_dirs: set[str] = set()  # sub-folders known to exist (one mkdir each)

    def path_for(self, url: str) -> Path:
        """Where the page of ``url`` is (or would be) stored."""
        digest = hashlib.md5(url.encode("utf-8", "surrogatepass")).hexdigest()
        return self.root / digest[:2] / (digest + SUFFIX)

    def save(self, url: str, body: bytes) -> Path:
        """Store ``body`` for ``url``; readers see the old page or the new one, never a part.

        Raises ``OSError`` (after removing its temporary file) if the disk refuses the write.
        """
        path = self.path_for(url)
        folder = str(path.parent)
        if folder not in self._made_dirs:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._made_dirs.add(folder)
        # mtime=0: the same body always gives the same file. Level 1: less CPU than the default,
        # files about 5% larger.
        data = gzip.compress(bytes(body), compresslevel=1, mtime=0)
        # one temporary name per process and thread: a writer never meets another's file
        temp_name = f"{folder}/.tmp-{os.getpid()}-{threading.get_ident()}"
        try:
            handle = os.open(temp_name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            with os.fdopen(handle, "wb") as temp:
                temp.write(data)
            os.replace(temp_name, path)
        except BaseException as exc:
            log.error("could not save the page of %s to %s: %s", url, path, exc)
            _remove_quietly(temp_name)
            raise
        return path

    def load(self, url: str) -> bytes | None:
        """The stored body of ``url``; None if there is none or it is unreadable (logged)."""
        path = self.path_for(url)
        try:
            return gzip.decompress(path.read_bytes())
        except FileNotFoundError:
            return None
        except (OSError, EOFError, zlib.error) as exc:
            log.warning("stored page of %s at %s is unreadable: %s", url, path, exc)
            return None

    def __contains__(self, url: object) -> bool:
        return isinstance(url, str) and self.path_for(url).is_file()


def _remove_quietly(name: str) -> None:
    try:
        os.unlink(name)
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("could not remove temporary file %s: %s", name, exc)
