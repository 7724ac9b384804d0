"""Versioned Q-tables in Redis: the learner worker publishes, the fetch workers' evaluators read.

Keys (all under the prefix P, default ``jlse:qtable:``):

==================  ======  ==================================================================
P + "v" + N         string  Q-table version N: ``QTable.to_bytes()``, an ``.npz`` of raw numeric
                            arrays plus a UTF-8 JSON header (a ``uint8`` array), when it fits
                            in one chunk (``chunk_bytes``, default 64 MiB); else a manifest
                            (``MANIFEST`` then JSON: number of chunks, bytes, SHA-256)
P + "i" + uid       string  a link index shared by versions (``models.qtable.write_index``), or
                            its manifest; a version naming it holds Q alone (``to_arrays``)
key + ":" + i       string  chunk i of a larger archive stored under key (i = 0, 1, ...)
P + "chunks"        hash    version, or "i" + uid -> its number of chunks (chunked ones only)
P + "indexes"       hash    version -> the uid of the index it shares (those sharing one)
P + "current"       string  the newest published version, as decimal text; absent = none yet
P + "versions"      zset    every version whose blob is stored (member and score = N)
P + "next"          string  counter behind ``next_version`` (INCR: unique across learners)
==================  ======  ==================================================================

**Shared indexes.** The incremental learner keeps one link index for several rounds (until G_w
has grown by 10%) and names it (``LinkIndex.uid``). The first version with that index stores it
under P + "i" + uid (expiring until the publishing script keeps it, as chunks); that version and
the next ones store Q alone, naming it. A reader keeps the last index it read, so a version
sharing it costs the read of Q alone; the machine's cache keeps the index file for the other
processes. The script drops an index with the last stored version that names it.

**Chunks.** A Redis string holds at most 512 MB, and a Q-table of 1e7 vertices is larger. A
table above ``chunk_bytes`` is written chunk by chunk first (plain SETs with a one-hour expiry,
so that the chunks of a publication that dies midway go away by themselves), read from a
temporary file (the publisher never holds the archive twice in memory); the publishing script
then checks that every chunk is there, removes their expiry and stores the manifest. A reader
takes the manifest, reads the chunks one by one into the machine's cache file (or memory),
checks their length and SHA-256 and parses the whole; a chunk gone meanwhile (the version was
collected) is "not stored", as a missing blob.

Why not pickle: a fetch worker loads whatever sits in Redis, and anyone who can write to that
Redis could otherwise run code on every worker. The blob is read with
``numpy.load(allow_pickle=False)`` and every array is checked against its header
(``models.qtable``), so a forged or damaged blob is a ValueError, never code execution.

Publishing is one Lua script (atomic), in this order: check the chunks and index written before
it, write the blob (or the manifest of the chunks), add N to ``versions``, move ``current`` to N
only if N is newer than it (a late, older publication never goes back in time), then
garbage-collect. Since the blob exists before ``current`` names it, a reader (GET
``current``, then GET the blob) never finds the pointer ahead of a complete table.

GC policy: ``versions`` keeps the newest ``keep_versions`` by number; older blobs (and their
chunks, and the indexes no kept version names) are deleted in the same script. ``current`` is
the newest, so it is never collected. A late publication older than ``current`` is stored if it ranks among the newest ``keep_versions`` (and never
becomes current), else deleted at once. A reader that read ``current`` just before
``keep_versions`` newer publications may find the blob gone: ``load`` gives None and
``RedisQTableSource`` tries again at its next check.

The scripts declare ``current`` (a Redis Cluster routes them by it) and build the other key
names from the prefix: on a cluster the prefix carries a hash tag (``CrawlRegistry
.qtable_prefix``), so they all sit in one slot.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import re
import tempfile
import threading
import time
from collections.abc import Callable
from typing import IO, TypeVar

import redis

from jlse.learner.background import QTableHolder
from jlse.learner.publish_scripts import NEXT_VERSION_SCRIPT, PUBLISH_SCRIPT
from jlse.learner.qtable_cache import MachineCache
from jlse.models.link_index import LinkIndex
from jlse.models.qtable import QTable, index_from_archive, read_archive, write_index
from jlse.models.qtable_files import map_directory

log = logging.getLogger(__name__)
Built = TypeVar("Built")

DEFAULT_PREFIX = "jlse:qtable:"
KEEP_VERSIONS = 3
CHUNK_BYTES = 64 * 2**20  # a larger archive is stored as chunks of this size
CHUNK_TTL = 3600  # seconds a chunk lives until its publication's script keeps it
MAX_CHUNKS = 1 << 16  # a manifest naming more is refused (forged or damaged)
_REF = re.compile(r"[0-9A-Za-z_-]{1,64}")  # a shared index's name (LinkIndex.uid)
MANIFEST = b"jlse-qtable-chunks\n"  # the first bytes of a chunked version's P + "v" + N

class RedisQTableStore:
    """Publishes, lists and loads versioned Q-tables under one key prefix (layout above).

    Redis errors (``redis.RedisError``) are raised to the caller; a blob that is not a valid
    Q-table is a ValueError.
    """

    def __init__(self, client: redis.Redis, prefix: str = DEFAULT_PREFIX,
                 keep_versions: int = KEEP_VERSIONS, cache: MachineCache | None = None,
                 chunk_bytes: int = CHUNK_BYTES) -> None:
        if client.get_connection_kwargs().get("decode_responses"):
            raise ValueError("RedisQTableStore needs a client without decode_responses "
                             "(Q-tables are binary)")
        if keep_versions < 1:
            raise ValueError(f"keep_versions must be at least 1, not {keep_versions}")
        if chunk_bytes < 1:
            raise ValueError(f"chunk_bytes must be at least 1, not {chunk_bytes}")
        self.client = client
        self.prefix = prefix
        self.keep_versions = keep_versions
        self.cache = cache  # this machine's copies, shared by its processes (``load``)
        self.chunk_bytes = chunk_bytes
        self.current_key = prefix + "current"
        self.versions_key = prefix + "versions"
        self.last_published_bytes = 0  # bytes written to Redis by the last publish
        self._last_index: tuple[str, LinkIndex] | None = None  # the last shared index read
        self._publish = client.register_script(PUBLISH_SCRIPT)
        self._next_version = client.register_script(NEXT_VERSION_SCRIPT)

    def blob_key(self, version: int) -> str:
        return f"{self.prefix}v{int(version)}"

    def index_key(self, ref: str) -> str:
        return f"{self.prefix}i{ref}"

    def chunk_key(self, version: int, chunk: int) -> str:
        return f"{self.blob_key(version)}:{int(chunk)}"

    def next_version(self) -> int:
        """A version number no other caller of this prefix ever gets (atomic)."""
        return int(self._next_version(keys=[self.current_key], args=[self.prefix]))

    def publish(self, table: QTable) -> int:
        """Store ``table`` as its version, make it current if newest, GC; the current version.

        A table whose index has a ``uid`` (the incremental learner's) stores that index once,
        under its own key, and the version as Q alone naming it; archives go to Redis in
        chunks above ``chunk_bytes`` (module docstring)."""
        version = int(table.version)
        if version < 1:
            raise ValueError(f"Q-table version must be at least 1, not {version}")
        ref = getattr(table.index, "uid", None)
        if ref is not None and not _REF.fullmatch(ref):
            raise ValueError(f"Q-table index name {ref!r}: 1-64 letters, digits, _ or -")
        index_chunks, index_size = -1, 0
        if ref is not None and self.client.ttl(self.index_key(ref)) != -1:  # not kept yet
            index_chunks, index_size, _ = self._stage(
                self.index_key(ref), lambda out: write_index(table.index, out), expire=True)
        n_chunks, size, payload = self._stage(self.blob_key(version),
                                              lambda out: table.write_to(out, ref))
        current = self._publish(keys=[self.current_key],
                                args=[self.prefix, version, payload, self.keep_versions,
                                      n_chunks, ref or "", index_chunks])
        self.last_published_bytes = size + index_size
        log.info("published Q-table v%d (%d bytes%s%s) under %s; current is v%d", version, size,
                 f" in {n_chunks} chunks" if n_chunks else "",
                 "" if ref is None else f", index {ref}: " + (
                     "stored before" if index_chunks < 0 else f"{index_size} bytes"),
                 self.prefix, int(current))
        return int(current)

    def _stage(self, key: str, write: Callable[[IO[bytes]], None],
               expire: bool = False) -> tuple[int, int, bytes | None]:
        """Write an archive to a temporary file, then to Redis: chunks first if it is larger
        than ``chunk_bytes`` (expiring until the publishing script keeps them). Returns (chunks,
        bytes, what the script stores under ``key``); with ``expire`` the script expects
        ``key`` itself written, expiring, and the third item is None."""
        with tempfile.TemporaryFile() as archive:
            write(archive)
            size = archive.tell()
            archive.seek(0)
            if size <= self.chunk_bytes:
                n_chunks, payload = 0, archive.read()
            else:
                n_chunks, payload = self._write_chunks(key, archive, size)
        if expire:
            self.client.set(key, payload, ex=CHUNK_TTL)
            return n_chunks, size, None
        return n_chunks, size, payload

    def _write_chunks(self, key: str, archive: IO[bytes], size: int) -> tuple[int, bytes]:
        """SET each chunk of ``archive`` (expiring until the publishing script keeps it); the
        number of chunks and the manifest naming them."""
        digest = hashlib.sha256()
        chunk = 0
        while True:
            data = archive.read(self.chunk_bytes)
            if not data:
                break
            digest.update(data)
            self.client.set(f"{key}:{chunk}", data, ex=CHUNK_TTL)
            chunk += 1
            del data
        manifest = {"chunks": chunk, "bytes": size, "sha256": digest.hexdigest()}
        return chunk, MANIFEST + json.dumps(manifest).encode()

    def current_version(self) -> int:
        """The current version, 0 when none was published."""
        value = self.client.get(self.current_key)
        return int(value) if value is not None else 0

    def versions(self) -> list[int]:
        """The stored versions, oldest first."""
        return [int(member) for member in self.client.zrange(self.versions_key, 0, -1)]

    def load(self, version: int | None = None) -> QTable | None:
        """Version ``version`` (default: the current one); None if it is not stored.

        ValueError if the blob is not a valid Q-table of that version (never unpickled). A
        version that shares the index of the last one this store loaded reuses that index
        object: only Q is read."""
        if version is None:
            version = self.current_version()
            if version == 0:
                return None
        key = self.blob_key(version)

        def build(arrays: dict, header: dict) -> QTable | None:
            index = None
            ref = header.get("index")
            if ref is not None:
                index = self._index(str(ref))
                if index is None:
                    return None
            try:
                table = QTable.from_arrays(arrays, header, index)
            except ValueError as exc:
                raise ValueError(f"{key}: {exc}") from None
            if table.version != version:
                raise ValueError(f"{key}: holds Q-table version {table.version}")
            return table

        return self._archive(key, f"v{int(version)}.qtable", version, build)

    def _index(self, ref: str) -> LinkIndex | None:
        """The shared index ``ref``: the last one loaded if it is that one, else read."""
        if self._last_index is not None and self._last_index[0] == ref:
            return self._last_index[1]
        if not _REF.fullmatch(ref):
            raise ValueError(f"Q-table: invalid index name {ref!r}")
        key = self.index_key(ref)

        def build(arrays: dict, header: dict) -> LinkIndex:
            try:
                return index_from_archive(arrays, header)
            except ValueError as exc:
                raise ValueError(f"{key}: {exc}") from None

        index = self._archive(key, f"i{ref}.qtable", None, build)
        if index is not None:
            index.uid = ref
            self._last_index = (ref, index)
        return index

    def _archive(self, key: str, file_name: str, version: int | None,
                 build: Callable[[dict, dict], Built | None]) -> Built | None:
        """``build(arrays, header)`` of the archive under ``key``: through the machine's cache
        (as ``file_name``, unpacked and memory-mapped, read-only), else from Redis; None if it
        is not stored. A machine's copy that does not build is discarded and Redis's read."""
        if self.cache is None:
            return self._build_from_redis(key, build)
        try:
            directory = self.cache.fetch_mapped(file_name, lambda out: self.download(key, out),
                                                version)
            if directory is None:
                return None
            return build(*map_directory(directory))  # shared with the machine's processes
        except ValueError:  # a bad copy on this machine: Redis's own, once more
            self.cache.discard_file(file_name)
            return self._build_from_redis(key, build)
        except OSError as exc:  # the cache's disk: this process downloads its own
            log.warning("Q-table cache %s failed (%s); reading %s from Redis",
                        self.cache.directory, exc, key)
            return self._build_from_redis(key, build)

    def _build_from_redis(self, key: str,
                          build: Callable[[dict, dict], Built | None]) -> Built | None:
        archive = self._archive_from_redis(key)
        return None if archive is None else build(*archive)

    def download(self, key: str | int, out: IO[bytes]) -> bool:
        """Write the archive under ``key`` (a key, or a version number) into ``out``
        (reassembled from its chunks if it has some); False if it is not stored (or was
        collected midway). ValueError if the chunks do not match their manifest."""
        if not isinstance(key, str):
            key = self.blob_key(key)
        head = self.client.get(key)
        if head is None:
            return False
        if not head.startswith(MANIFEST):
            out.write(head)
            return True
        n_chunks, size, expected = _manifest(key, head[len(MANIFEST):])
        digest, written = hashlib.sha256(), 0
        for chunk in range(n_chunks):
            data = self.client.get(f"{key}:{chunk}")
            if data is None:
                return False
            digest.update(data)
            out.write(data)
            written += len(data)
        if written != size or digest.hexdigest() != expected:
            raise ValueError(f"{key}: its chunks do not match its manifest ({written} bytes "
                             f"of {size}, or another SHA-256)")
        return True

    def _archive_from_redis(self, key: str) -> tuple[dict, dict] | None:
        buffer = io.BytesIO()
        if not self.download(key, buffer):
            return None
        buffer.seek(0)
        return _read(key, buffer)

    def clear(self) -> int:
        """Delete every key under the prefix (counter included); how many."""
        pattern = _glob_escape(self.prefix) + "*"
        keys = list(self.client.scan_iter(match=pattern, count=1000))
        deleted = 0
        for start in range(0, len(keys), 1000):
            deleted += self.client.unlink(*keys[start:start + 1000])
        return deleted


class RedisQTableSource:
    """The newest published Q-table, as a callable for ``JLSEEvaluator(qtable=...)``.

    At most every ``check_every`` seconds one caller reads ``current`` (one GET); on a new
    version that caller loads it and swaps it into ``holder``. The other threads never wait:
    they get the table in the holder. Failures (Redis down, a corrupt blob, a blob collected
    meanwhile) are logged and the previous table keeps serving; nothing is raised.
    """

    def __init__(self, store: RedisQTableStore, holder: QTableHolder | None = None,
                 check_every: float = 2.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.holder = holder if holder is not None else QTableHolder()
        self.check_every = check_every
        self.clock = clock
        self.last_error: str | None = None
        self._next_check = float("-inf")
        self._reload_lock = threading.Lock()
        self._bad_version = 0  # a version whose blob failed to load: not retried
        self._failing = False  # inside a run of Redis failures (warn once per run)

    def __call__(self) -> QTable | None:
        if self.clock() >= self._next_check and self._reload_lock.acquire(blocking=False):
            try:
                if self.clock() >= self._next_check:  # another thread may just have checked
                    self._refresh()
            finally:
                self._reload_lock.release()
        return self.holder.get()

    @property
    def version(self) -> int:
        """Version of the table being served, 0 when none."""
        return self.holder.version

    def refresh(self) -> bool:
        """Check ``current`` now (waiting for a check in progress) and switch to it if it
        changed; True if switched. Never raises."""
        with self._reload_lock:
            return self._refresh()

    def _refresh(self) -> bool:
        self._next_check = self.clock() + self.check_every
        try:
            return self._switch_to_current()
        except redis.RedisError as exc:
            self._note_redis_failure(exc)
        except Exception as exc:  # noqa: BLE001 - the crawl goes on with the previous table
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.warning("Q-table source: refresh failed; still serving v%d", self.version,
                        exc_info=True)
        return False

    def _switch_to_current(self) -> bool:
        version = self.store.current_version()
        self._note_redis_ok()
        if version in (0, self.version, self._bad_version):
            return False  # none published yet (or Redis lost it: keep what we have)
        try:
            table = self.store.load(version)
        except ValueError as exc:
            self._bad_version = version
            self.last_error = str(exc)
            log.warning("Q-table source: v%d is not a valid Q-table (%s); still serving v%d",
                        version, exc, self.version)
            return False
        if table is None:
            log.info("Q-table source: v%d vanished before it was read (collected); "
                     "retrying at the next check", version)
            return False
        self.holder.set(table)
        log.info("Q-table source: switched to v%d", version)
        return True

    def _note_redis_failure(self, exc: redis.RedisError) -> None:
        self.last_error = f"{type(exc).__name__}: {exc}"
        if self._failing:
            log.debug("Q-table source: Redis still failing: %s", exc)
            return
        self._failing = True
        log.warning("Q-table source: cannot read Q-tables from Redis (%s); still serving v%d",
                    exc, self.version)

    def _note_redis_ok(self) -> None:
        if self._failing:
            self._failing = False
            log.info("Q-table source: Redis reachable again")


def _read(key: str, source: IO[bytes]) -> tuple[dict, dict]:
    try:
        return read_archive(source)
    except ValueError as exc:
        raise ValueError(f"{key}: {exc}") from None


def _manifest(key: str, text: bytes) -> tuple[int, int, str]:
    """(chunks, bytes, SHA-256) of a chunked version's manifest; ValueError if malformed."""
    try:
        manifest = json.loads(text.decode("utf-8"))
        n_chunks, size, digest = manifest["chunks"], manifest["bytes"], manifest["sha256"]
    except (UnicodeDecodeError, ValueError, TypeError, KeyError) as exc:
        raise ValueError(f"{key}: unreadable chunk manifest ({exc!r})") from None
    if not (isinstance(n_chunks, int) and 0 < n_chunks <= MAX_CHUNKS and isinstance(size, int)
            and size > 0 and isinstance(digest, str)):
        raise ValueError(f"{key}: invalid chunk manifest {manifest!r}")
    return n_chunks, size, digest


def _glob_escape(text: str) -> str:
    return "".join("\\" + char if char in "*?[]\\" else char for char in text)
