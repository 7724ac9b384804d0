"""Q-tables published through the real Redis (``REDIS_URL``, default 127.0.0.1:6379).

Each test uses its own key prefix, deleted afterwards. An unreachable Redis fails the tests.
"""

from __future__ import annotations

import io
import logging
import os
import pickle
import tempfile
import threading
import uuid

import numpy as np
import pytest
import redis

from jlse.learner.background import QTableHolder
from jlse.learner.publish import RedisQTableSource, RedisQTableStore
from jlse.models.qtable import QTable, build_qtable

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
CLOSED_PORT_URL = "redis://127.0.0.1:1/0"

# G_w: seed 0 -> list page 1 -> detail page 2 (a result); seed 0 -> 3 (a dead end).
ANCHORS = ["phone news", "smartphone reviews", "battery test of the new phone", "cooking recipes"]
URLS = ["http://phones.test/", "http://phones.test/reviews/", "http://phones.test/reviews/battery",
        "http://food.test/recipes/"]
CONTEXTS = ["latest phone news", "all smartphone reviews list", "battery life charging review",
            "pasta soup dinner"]
SRC, DST, IS_LEAF = np.array([0, 1, 0]), np.array([1, 2, 3]), np.array([False, False, True, False])
LINKS = (["more smartphone reviews", "battery charging test", "zebra"],
         ["http://phones.test/reviews/page2", "http://phones.test/battery", "http://zoo.test/z"],
         ["smartphone reviews list", "battery life", "animals"])


def make_table(version: int, reward: float = 1.0) -> QTable:
    return build_qtable(version, ANCHORS, URLS, CONTEXTS, SRC, DST, IS_LEAF, reward=reward)


@pytest.fixture(scope="module")
def redis_client():
    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=5)
    try:
        client.ping()
    except redis.RedisError as exc:
        pytest.fail(f"Redis is not reachable at {REDIS_URL} ({exc}). "
                    "Start it with `make services` or set REDIS_URL.", pytrace=False)
    yield client
    client.close()


@pytest.fixture()
def make_store(redis_client):
    made: list[RedisQTableStore] = []

    def make(keep_versions: int = 3) -> RedisQTableStore:
        store = RedisQTableStore(redis_client, f"jlse:test:qtable:{uuid.uuid4().hex}:",
                                 keep_versions=keep_versions)
        made.append(store)
        return store

    yield make
    for store in made:
        store.clear()
        assert list(redis_client.scan_iter(match=store.prefix + "*")) == []


@pytest.fixture()
def store(make_store) -> RedisQTableStore:
    return make_store()


# --- the store ------------------------------------------------------------------------------

def test_publish_load_round_trip_predicts_the_same(store):
    table = make_table(1)
    assert store.current_version() == 0 and store.load() is None
    assert store.publish(table) == 1
    loaded = store.load(1)
    assert loaded is not None and loaded.version == 1
    np.testing.assert_array_equal(loaded.q, table.q)
    np.testing.assert_allclose(loaded.predicted(*LINKS), table.predicted(*LINKS))
    assert table.predicted(*LINKS)[:2].min() > 0  # the comparison is not of zeros only
    assert store.load().version == 1 and store.current_version() == 1 and store.versions() == [1]


def test_the_blob_is_a_plain_npz_archive_not_a_pickle(store, redis_client):
    store.publish(make_table(4))
    blob = redis_client.get(store.blob_key(4))
    assert blob.startswith(b"PK")  # a zip (.npz) archive
    with np.load(io.BytesIO(blob), allow_pickle=False) as archive:
        assert all(archive[key].dtype != object for key in archive.files)


def test_current_only_moves_forward_and_a_late_older_version_is_kept_in_the_window(store):
    assert store.publish(make_table(3)) == 3
    assert store.publish(make_table(2, reward=2.0)) == 3
    assert store.current_version() == 3 and store.load().version == 3
    assert store.versions() == [2, 3]  # ranked among the newest keep_versions (3): stored
    assert store.load(2).version == 2


def test_a_late_version_older_than_the_window_is_collected_at_once(make_store):
    store = make_store(keep_versions=1)
    store.publish(make_table(3))
    assert store.publish(make_table(2)) == 3
    assert store.versions() == [3] and store.load(2) is None and store.load(3).version == 3


def test_gc_keeps_the_newest_keep_versions(store, redis_client):
    for version in range(1, 7):
        assert store.publish(make_table(version)) == version
    assert store.versions() == [4, 5, 6]
    for version in (1, 2, 3):
        assert redis_client.exists(store.blob_key(version)) == 0
        assert store.load(version) is None
    assert [store.load(version).version for version in (4, 5, 6)] == [4, 5, 6]


def test_next_version_is_unique_across_threads(store):
    got: list[list[int]] = [[] for _ in range(4)]
    barrier = threading.Barrier(4)

    def take(out: list[int]) -> None:
        barrier.wait()
        out.extend(store.next_version() for _ in range(50))

    threads = [threading.Thread(target=take, args=(out,)) for out in got]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    numbers = [number for out in got for number in out]
    assert sorted(numbers) == list(range(1, 201))


def test_next_version_stays_above_a_version_published_without_it(store):
    assert store.next_version() == 1
    store.publish(make_table(10))
    assert store.next_version() == 11
    assert store.next_version() == 12


def test_a_blob_of_another_version_or_garbage_is_a_value_error(store, redis_client):
    redis_client.set(store.blob_key(5), make_table(4).to_bytes())
    with pytest.raises(ValueError, match="version 4"):
        store.load(5)
    redis_client.set(store.blob_key(6), b"\x00garbage" * 10)
    with pytest.raises(ValueError, match="v6"):
        store.load(6)


def test_invalid_arguments_are_refused(redis_client, store):
    with pytest.raises(ValueError, match="decode_responses"):
        RedisQTableStore(redis.Redis.from_url(REDIS_URL, decode_responses=True))
    with pytest.raises(ValueError, match="keep_versions"):
        RedisQTableStore(redis_client, store.prefix, keep_versions=0)
    with pytest.raises(ValueError, match="at least 1"):
        store.publish(make_table(0))
    assert store.versions() == []


# --- nothing is unpickled -------------------------------------------------------------------

UNPICKLED: list[str] = []


def _record_unpickling(tag: str) -> str:
    UNPICKLED.append(tag)
    return tag


class Canary:
    """An object whose unpickling leaves a trace in UNPICKLED."""

    def __reduce__(self):
        return (_record_unpickling, ("canary",))


def pickled_object_npz() -> bytes:
    buffer = io.BytesIO()
    canary_array = np.empty(1, dtype=object)
    canary_array[0] = Canary()
    np.savez(buffer, header=np.frombuffer(b"{}", np.uint8), q=canary_array)
    return buffer.getvalue()


def test_pickled_blobs_are_refused_without_being_unpickled(store, redis_client):
    raw_pickle = pickle.dumps({"q": Canary()})
    pickle.loads(raw_pickle)  # the canary works: unpickling leaves a trace
    assert UNPICKLED == ["canary"]
    UNPICKLED.clear()
    for version, blob in ((7, raw_pickle), (8, pickled_object_npz())):
        redis_client.set(store.blob_key(version), blob)
        with pytest.raises(ValueError, match="Q-table"):
            store.load(version)
    assert UNPICKLED == []


# --- the source -----------------------------------------------------------------------------

def test_source_switches_to_a_new_version_within_check_every(store, clock):
    source = RedisQTableSource(store, check_every=2.0, clock=clock)
    assert source() is None
    store.publish(make_table(1))
    clock.advance(1.0)
    assert source() is None  # not checked yet
    clock.advance(1.0)
    assert source().version == 1
    store.publish(make_table(2, reward=2.0))
    clock.advance(1.9)
    assert source().version == 1
    clock.advance(0.1)
    table = source()
    assert table.version == 2 and source.holder.get() is table
    np.testing.assert_allclose(table.predicted(*LINKS), make_table(2, reward=2.0).predicted(*LINKS))


def test_source_keeps_the_old_table_on_a_corrupt_blob_and_warns_once(store, redis_client, caplog,
                                                                     clock):
    source = RedisQTableSource(store, check_every=2.0, clock=clock)
    store.publish(make_table(1))
    assert source().version == 1
    redis_client.set(store.blob_key(2), b"not an npz at all")
    redis_client.set(store.current_key, b"2")
    with caplog.at_level(logging.WARNING, logger="jlse.learner.publish"):
        clock.advance(2.0)
        assert source().version == 1
        clock.advance(2.0)
        assert source().version == 1
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "v2 is not a valid Q-table" in warnings[0].getMessage()
    assert "v2" in source.last_error
    store.publish(make_table(3))
    clock.advance(2.0)
    assert source().version == 3


def test_source_survives_an_unreachable_redis(caplog, clock):
    client = redis.Redis.from_url(CLOSED_PORT_URL, socket_connect_timeout=1)
    previous = make_table(5)
    source = RedisQTableSource(RedisQTableStore(client, "jlse:test:unreachable:"),
                               holder=QTableHolder(previous), check_every=2.0, clock=clock)
    with caplog.at_level(logging.WARNING, logger="jlse.learner.publish"):
        assert source() is previous
        clock.advance(2.0)
        assert source() is previous
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "cannot read Q-tables from Redis" in warnings[0].getMessage()
    assert "ConnectionError" in source.last_error
    assert source.refresh() is False
    with pytest.raises(redis.ConnectionError):
        source.store.current_version()  # the store itself raises; only the source absorbs


def test_source_retries_a_version_whose_blob_is_missing(store, redis_client, clock):
    source = RedisQTableSource(store, check_every=2.0, clock=clock)
    store.publish(make_table(1))
    assert source().version == 1
    redis_client.set(store.current_key, b"9")  # as if v9 were collected between the two GETs
    clock.advance(2.0)
    assert source().version == 1
    store.publish(make_table(9))
    clock.advance(2.0)
    assert source().version == 9


def test_only_one_thread_reloads_and_the_others_never_wait(store):
    class SlowStore(RedisQTableStore):
        """The real store, with a load that waits for a signal and counts its calls."""

        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.loads = 0
            self.entered, self.release = threading.Event(), threading.Event()

        def load(self, version=None):
            self.loads += 1
            if self.loads == 1:  # the first load is held until the main thread has looked
                self.entered.set()
                self.release.wait(5)
            return super().load(version)

    slow = SlowStore(store.client, store.prefix)
    store.publish(make_table(1))
    source = RedisQTableSource(slow, holder=QTableHolder(make_table(1)), check_every=0.0)
    store.publish(make_table(2))
    reloader = threading.Thread(target=source)
    reloader.start()
    assert slow.entered.wait(10)
    seen = [source().version for _ in range(20)]  # would block (or reload) if not skipped
    slow.release.set()
    reloader.join(10)
    assert seen == [1] * 20 and slow.loads == 1
    assert source().version == 2 and slow.loads == 1


def test_publish_and_versions_on_a_redis_cluster(redis_cluster_client):
    """A crawl's Q-table prefix carries a hash tag: the publishing scripts run on a cluster."""
    from jlse.scheduler.crawl_registry import CrawlRegistry

    prefix = CrawlRegistry(redis_cluster_client, f"jlsetest{uuid.uuid4().hex[:6]}:") \
        .qtable_prefix("c1")
    store = RedisQTableStore(redis_cluster_client, prefix, keep_versions=2)
    versions = [store.next_version() for _ in range(3)]
    assert versions == [1, 2, 3]
    for version in versions:
        store.publish(make_table(version))
    assert store.current_version() == 3 and store.versions() == [2, 3]
    np.testing.assert_array_equal(store.load().q, make_table(3).q)
    chunked = RedisQTableStore(redis_cluster_client, prefix, keep_versions=2, chunk_bytes=1024)
    for version in (4, 5):  # in chunks: their keys share the prefix's slot
        chunked.publish(make_table(version))
    assert chunked.versions() == [4, 5] and chunked.load().version == 5
    np.testing.assert_array_equal(chunked.load(4).q, make_table(4).q)
    shared = make_table(6)
    shared.index.uid = "e5"  # an index shared by versions: its key in the same slot
    chunked.publish(shared)
    chunked.publish(QTable(version=7, index=shared.index, q=shared.q, created_at=7.0))
    assert RedisQTableStore(redis_cluster_client, prefix).load(7).index.n_vertices_ == 4
    store.clear()


# --- one copy per machine ---------------------------------------------------------------------

class _CountingGets:
    """A Redis client whose GETs of Q-table blobs are counted (one per download)."""

    def __init__(self, client: redis.Redis) -> None:
        self._client, self.blob_gets = client, 0

    def __getattr__(self, name: str):
        return getattr(self._client, name)

    def get(self, key):
        if ":v" in str(key).rsplit("qtable", 1)[-1]:
            self.blob_gets += 1
        return self._client.get(key)


def _machine_processes(store, cache_dir, count: int = 4) -> list:
    """(counting client, Q-table source) of ``count`` worker processes of one machine, each
    with its own client and the machine's shared cache."""
    from jlse.learner.qtable_cache import MachineCache

    processes = []
    for _ in range(count):
        counting = _CountingGets(store.client)
        reader = RedisQTableStore(counting, store.prefix,
                                  cache=MachineCache.for_prefix(store.prefix, cache_dir))
        processes.append((counting, RedisQTableSource(reader)))
    return processes


def test_processes_of_a_machine_download_a_version_once(store, tmp_path):

    store.publish(make_table(1))
    processes = _machine_processes(store, tmp_path)
    for _, source in processes:
        assert source.refresh() and source.version == 1
    assert [counting.blob_gets for counting, _ in processes] == [1, 0, 0, 0]
    store.publish(make_table(2))
    for _, source in reversed(processes):
        assert source.refresh() and source.version == 2
    assert sum(counting.blob_gets for counting, _ in processes) == 2  # one per version


def test_a_bad_copy_on_the_machine_is_read_from_redis_again(store, tmp_path):
    from jlse.learner.qtable_cache import MachineCache

    cache = MachineCache.for_prefix(store.prefix, tmp_path)
    store.publish(make_table(1))
    cache.path(1).write_bytes(b"not a q-table")
    reader = RedisQTableStore(store.client, store.prefix, cache=cache)
    assert reader.load(1).version == 1
    assert not cache.path(1).exists()  # discarded; the next process downloads it again


def test_only_one_process_downloads_while_the_others_wait(tmp_path):
    """Processes racing for a new version: the file lock lets one download it."""
    import multiprocessing

    from jlse.learner.qtable_cache import MachineCache

    def race(marker: str, results) -> None:
        cache = MachineCache.for_prefix("jlse:race:", tmp_path)

        def download() -> bytes:
            with open(marker, "a") as handle:
                handle.write("x")
            import time
            time.sleep(0.2)
            return b"blob"

        results.put(cache.get(7, download))

    context = multiprocessing.get_context("fork")
    results = context.Queue()
    marker = str(tmp_path / "downloads")
    workers = [context.Process(target=race, args=(marker, results)) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(30)
    assert [results.get(timeout=5) for _ in workers] == [b"blob"] * 4
    assert open(marker).read() == "x"


def test_a_cache_others_can_write_is_not_used(tmp_path, caplog):
    from jlse.learner.qtable_cache import MachineCache

    tmp_path.chmod(0o777)
    with caplog.at_level(logging.WARNING):
        assert MachineCache.for_prefix("jlse:x:", tmp_path) is None
    assert "not this user's alone" in caplog.text
    tmp_path.chmod(0o700)
    cache = MachineCache.for_prefix("jlse:x:", tmp_path)
    assert cache is not None and oct(cache.directory.stat().st_mode & 0o777) == "0o700"
    for version in range(1, 6):
        cache.get(version, lambda: b"blob")
    assert sorted(path.name for path in cache.directory.glob("v*")) == \
        ["v3.qtable", "v4.qtable", "v5.qtable"]  # the newest KEEP


# --- tables larger than a Redis string: chunks --------------------------------------------------

def chunked_store(store: RedisQTableStore, chunk_bytes: int = 1024, **kwargs) -> RedisQTableStore:
    """A store of the same prefix whose tables go to Redis in chunks of ``chunk_bytes``."""
    return RedisQTableStore(store.client, store.prefix, chunk_bytes=chunk_bytes, **kwargs)


def test_a_table_larger_than_a_chunk_is_stored_in_chunks_and_reassembled(store, redis_client,
                                                                         tmp_path):
    from jlse.learner.publish import MANIFEST
    from jlse.learner.qtable_cache import MachineCache

    table = make_table(1)
    size = len(table.to_bytes())
    writer = chunked_store(store)
    assert writer.publish(table) == 1
    n_chunks = -(-size // 1024)
    assert n_chunks >= 3  # the test table spans several chunks
    assert redis_client.get(store.blob_key(1)).startswith(MANIFEST)
    chunks = [redis_client.get(store.chunk_key(1, i)) for i in range(n_chunks)]
    assert all(len(chunk) == 1024 for chunk in chunks[:-1]) and 0 < len(chunks[-1]) <= 1024
    assert b"".join(chunks)[:2] == b"PK" and len(b"".join(chunks)) == size
    assert all(redis_client.ttl(store.chunk_key(1, i)) == -1 for i in range(n_chunks))
    assert redis_client.exists(store.chunk_key(1, n_chunks)) == 0
    # Read back without a cache (in memory) and through a machine cache (a file).
    for reader in (store, RedisQTableStore(store.client, store.prefix,
                                           cache=MachineCache.for_prefix(store.prefix, tmp_path))):
        loaded = reader.load()
        assert loaded.version == 1
        np.testing.assert_array_equal(loaded.q, table.q)
        np.testing.assert_allclose(loaded.predicted(*LINKS), table.predicted(*LINKS))
    cache = MachineCache.for_prefix(store.prefix, tmp_path)
    assert not cache.path(1).exists()  # reassembled, then unpacked for the processes to map
    unpacked = cache.mapped_path(cache.path(1).name)
    with np.load(io.BytesIO(table.to_bytes()), allow_pickle=False) as archive:
        assert {path.name for path in unpacked.glob("*.npy")} >= {f"{key}.npy"
                                                                   for key in archive.files}


def test_collected_versions_take_their_chunks_with_them(store, redis_client):
    writer = chunked_store(store, keep_versions=1)
    writer.publish(make_table(1))
    assert redis_client.hget(store.prefix + "chunks", "1") is not None
    writer.publish(make_table(2))
    assert writer.versions() == [2]
    assert list(redis_client.scan_iter(match=store.prefix + "v1*")) == []
    assert redis_client.hget(store.prefix + "chunks", "1") is None
    writer.publish(make_table(3))
    # v4 in one piece (the default chunk size): v3's chunks go all the same
    RedisQTableStore(store.client, store.prefix, keep_versions=1).publish(make_table(4))
    assert sorted(key.decode() for key in redis_client.scan_iter(match=store.prefix + "v[0-9]*")) \
        == [store.blob_key(4)]
    assert redis_client.hlen(store.prefix + "chunks") == 0


def test_a_publication_cut_short_is_never_seen_and_its_chunks_expire(store, redis_client,
                                                                     tmp_path, clock):
    from jlse.learner.qtable_cache import MachineCache

    writer = chunked_store(store)
    writer.publish(make_table(1))
    reader = RedisQTableStore(store.client, store.prefix,
                              cache=MachineCache.for_prefix(store.prefix, tmp_path))
    source = RedisQTableSource(reader, check_every=2.0, clock=clock)
    assert source().version == 1
    # The learner dies after writing v2's chunks, before the script that publishes them.
    with tempfile.TemporaryFile() as archive:
        make_table(2).write_to(archive)
        size = archive.tell()
        archive.seek(0)
        writer._write_chunks(store.blob_key(2), archive, size)
    assert 0 < redis_client.ttl(store.chunk_key(2, 0)) <= 3600
    clock.advance(2.0)
    assert source().version == 1 and store.current_version() == 1 and reader.load(2) is None
    # The script refuses a manifest whose chunks are not all there.
    redis_client.delete(store.chunk_key(2, 1))
    with pytest.raises(redis.ResponseError, match="chunk 1 of .*v2 is missing"):
        writer._publish(keys=[store.current_key], args=[store.prefix, 2, b"x", 3, 2, "", -1])
    assert store.current_version() == 1
    writer.publish(make_table(2, reward=2.0))
    clock.advance(2.0)
    table = source()
    assert table.version == 2 and redis_client.ttl(store.chunk_key(2, 0)) == -1
    np.testing.assert_allclose(table.predicted(*LINKS), make_table(2, reward=2.0).predicted(*LINKS))


def test_a_chunk_gone_or_damaged_midway_keeps_the_previous_table(store, redis_client, tmp_path,
                                                                 clock):
    from jlse.learner.qtable_cache import MachineCache

    writer = chunked_store(store)
    writer.publish(make_table(1))
    cache = MachineCache.for_prefix(store.prefix, tmp_path)
    source = RedisQTableSource(RedisQTableStore(store.client, store.prefix, cache=cache),
                               check_every=2.0, clock=clock)
    assert source().version == 1
    writer.publish(make_table(2))
    redis_client.delete(store.chunk_key(2, 2))  # as if collected while being read
    clock.advance(2.0)
    assert source().version == 1 and not cache.path(2).exists()
    assert list(cache.directory.glob("*.part")) == []  # no half-written file left behind
    writer.publish(make_table(3))
    redis_client.setrange(store.chunk_key(3, 1), 10, b"\xff\xfe")  # damaged in place
    with pytest.raises(ValueError, match="do not match its manifest"):
        store.load(3)
    clock.advance(2.0)
    assert source().version == 1 and "manifest" in source.last_error
    writer.publish(make_table(4))
    clock.advance(2.0)
    assert source().version == 4


def test_processes_of_a_machine_download_a_chunked_version_once(store, tmp_path):

    chunked_store(store).publish(make_table(1))
    n_chunks = int(store.client.hget(store.prefix + "chunks", "1"))
    processes = _machine_processes(store, tmp_path)
    for _, source in processes:
        assert source.refresh() and source.version == 1
    # The manifest and each chunk once, by the first process; the others read its file.
    assert [counting.blob_gets for counting, _ in processes] == [1 + n_chunks, 0, 0, 0]


# --- versions sharing one index: Q alone per version ----------------------------------------------

def sharing(table: QTable, uid: str) -> QTable:
    table.index.uid = uid  # as the incremental learner names the index its rounds share
    return table


def test_versions_sharing_an_index_store_it_once_and_send_q_alone(store, redis_client, tmp_path):
    from jlse.learner.qtable_cache import MachineCache

    first = sharing(make_table(1), "a1")
    store.publish(first)
    whole = store.last_published_bytes
    assert redis_client.ttl(store.index_key("a1")) == -1
    second = QTable(version=2, index=first.index, q=first.q * 0.5, created_at=2.0)
    store.publish(second)
    assert store.last_published_bytes < whole / 3  # Q and a header, no index
    with np.load(io.BytesIO(redis_client.get(store.blob_key(2))), allow_pickle=False) as archive:
        assert sorted(archive.files) == ["header", "q"]
    counting = _CountingGets(store.client)
    reader = RedisQTableStore(counting, store.prefix,
                              cache=MachineCache.for_prefix(store.prefix, tmp_path))
    loaded = reader.load(1)
    np.testing.assert_allclose(loaded.predicted(*LINKS), first.predicted(*LINKS))
    gets = counting.blob_gets
    loaded_2 = reader.load(2)
    assert counting.blob_gets == gets + 1  # the version's blob; the index is the one in memory
    assert loaded_2.index is loaded.index
    np.testing.assert_allclose(loaded_2.predicted(*LINKS), second.predicted(*LINKS))
    other = RedisQTableStore(store.client, store.prefix,
                             cache=MachineCache.for_prefix(store.prefix, tmp_path))
    assert other.load(2).q.tolist() == second.q.tolist()  # another process: the machine's file


def test_an_index_goes_with_the_last_version_that_shares_it(make_store, redis_client):
    store = make_store(keep_versions=1)
    chunked = chunked_store(store, keep_versions=1)
    shared = sharing(make_table(1), "b2")
    chunked.publish(shared)  # index and version in chunks
    assert redis_client.hget(store.prefix + "chunks", "ib2") is not None
    chunked.publish(QTable(version=2, index=shared.index, q=shared.q, created_at=2.0))
    assert redis_client.exists(store.index_key("b2")) == 1  # v2 still shares it
    store.publish(sharing(make_table(3), "c3"))
    assert store.versions() == [3] and store.load().version == 3
    assert list(redis_client.scan_iter(match=store.prefix + "ib2*")) == []
    assert redis_client.hget(store.prefix + "chunks", "ib2") is None
    assert redis_client.hkeys(store.prefix + "indexes") == [b"3"]
    store.publish(make_table(4))  # a table of its own (no uid): the index c3 goes too
    assert list(redis_client.scan_iter(match=store.prefix + "ic3*")) == []
    assert redis_client.hlen(store.prefix + "indexes") == 0
    assert store.load().version == 4


def test_a_version_whose_index_is_missing_is_not_published(store, redis_client):
    table = sharing(make_table(1), "d4")
    store.publish(table)
    redis_client.delete(store.index_key("d4"))
    redis_client.hdel(store.prefix + "indexes", "1")
    with pytest.raises(redis.ResponseError, match="index d4 is missing"):
        store._publish(keys=[store.current_key], args=[store.prefix, 2, b"x", 3, 0, "d4", -1])
    store.publish(QTable(version=2, index=table.index, q=table.q, created_at=2.0))  # writes it
    assert store.load(2).version == 2 and redis_client.ttl(store.index_key("d4")) == -1
