"""The processes of a worker machine map one copy of a Q-table (``models/qtable_files.py``):
through the machine's cache (``learner/qtable_cache.py``) their arrays are read-only views of
shared files, they score as a table read into memory does, and a damaged file is refused.

Needs the real Redis (``REDIS_URL``, default 127.0.0.1:6379), as tests/test_qtable_publish.py.
"""

from __future__ import annotations

import io
import mmap
import multiprocessing
import os
import uuid
from pathlib import Path

import numpy as np
import pytest
import redis

from jlse.learner.publish import RedisQTableStore
from jlse.learner.qtable_cache import MachineCache
from jlse.models.bm25 import FieldBM25
from jlse.models.link_index import LinkIndex
from jlse.models.link_tokens import field_tokens
from jlse.models.qtable import QTable, build_qtable, read_archive
from jlse.models.qtable_files import map_directory, unpack_archive

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
CAPS = (8, 8, 2)  # small caps, so that the saved search postings are cut ones


def synthetic_table(version: int, vertices: int = 3000, seed: int = 5) -> QTable:
    rng = np.random.default_rng(seed)
    words = np.array([f"w{i}" for i in range(300)])
    anchors = [" ".join(rng.choice(words, 3)) for _ in range(vertices)]
    contexts = [" ".join(rng.choice(words, 8)) for _ in range(vertices)]
    urls = [f"http://s{i % 40}.test/{words[i % 300]}/{i}" for i in range(vertices)]
    src, dst = np.arange(vertices - 1), np.arange(1, vertices)
    return build_qtable(version, anchors, urls, contexts, src, dst, rng.random(vertices) < 0.3,
                        max_postings=CAPS)


def links(count: int = 200, seed: int = 9) -> tuple[list[str], list[str], list[str]]:
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(320)]  # a few words the index does not know
    return ([" ".join(rng.choice(words, 3)) for _ in range(count)],
            [f"http://s{i % 50}.test/{words[i % 320]}/x" for i in range(count)],
            [" ".join(rng.choice(words, 6)) for _ in range(count)])


def big_arrays(table: QTable) -> dict[str, np.ndarray]:
    arrays = {"q": table.q, "postings.data": table.index.postings_.data,
              "postings.indices": table.index.postings_.indices}
    for number, field in enumerate(table.index.fields_):
        weights = field.doc_weights_
        arrays.update({f"{number}.data": weights.data, f"{number}.indices": weights.indices,
                       f"{number}.indptr": weights.indptr})
    return arrays


def is_mapped(array: np.ndarray) -> bool:
    base = array
    while base is not None and not isinstance(base, mmap.mmap):
        base = getattr(base, "base", None)
    return isinstance(base, mmap.mmap)


def load_in_process(url: str, prefix: str, cache_dir: str, version: int, results) -> None:
    """A worker process (spawned): load ``version`` through the machine's cache; report
    whether its big arrays are mapped read-only and its scores."""
    store = RedisQTableStore(redis.Redis.from_url(url), prefix,
                             cache=MachineCache.for_prefix(prefix, Path(cache_dir)))
    table = store.load(version)
    arrays = big_arrays(table)
    with open("/proc/self/maps") as maps:
        mapped_files = maps.read()
    directory = str(store.cache.mapped_path(f"v{version}.qtable"))
    results.put({
        "mapped": sorted(name for name, array in arrays.items() if is_mapped(array)),
        "writeable": sorted(name for name, array in arrays.items() if array.flags.writeable),
        "in_maps": directory in mapped_files,
        "predicted": table.predicted(*links()).tolist(),
    })


@pytest.fixture()
def store():
    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=5)
    try:
        client.ping()
    except redis.RedisError as exc:
        pytest.fail(f"Redis is not reachable at {REDIS_URL} ({exc})", pytrace=False)
    made = RedisQTableStore(client, f"jlse:test:mmap:{uuid.uuid4().hex}:")
    yield made
    made.clear()
    client.close()


def test_processes_of_a_machine_map_one_copy_and_score_as_a_read_table(store, tmp_path):
    table = synthetic_table(1)
    store.publish(table)
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    workers = [context.Process(target=load_in_process,
                               args=(REDIS_URL, store.prefix, str(tmp_path), 1, results))
               for _ in range(3)]
    for worker in workers:
        worker.start()
    reports = [results.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(30)
    in_memory = QTable.from_bytes(table.to_bytes())  # read, not mapped
    assert not any(is_mapped(array) for array in big_arrays(in_memory).values())
    expected = in_memory.predicted(*links())
    assert np.count_nonzero(expected) > 50
    for report in reports:
        assert report["mapped"] == sorted(big_arrays(in_memory))
        assert report["writeable"] == [] and report["in_maps"]
        np.testing.assert_array_equal(report["predicted"], expected)
    np.testing.assert_array_equal(expected, table.predicted(*links()))


def test_mapped_search_postings_are_the_ones_a_process_builds(store, tmp_path):
    table = synthetic_table(1)
    store.publish(table)
    cache = MachineCache.for_prefix(store.prefix, tmp_path)
    mapped = RedisQTableStore(store.client, store.prefix, cache=cache).load(1)
    assert (cache.mapped_path("v1.qtable") / "search.indptr.npy").exists()
    built = table.index.capped_postings()
    assert (mapped.index.postings_ != built).nnz == 0
    assert mapped.index.postings_.nnz < sum(f.doc_weights_.nnz for f in table.index.fields_)


def test_a_damaged_file_in_the_machine_cache_is_refused_not_crashed_on(store, tmp_path):
    table = synthetic_table(1)
    store.publish(table)
    cache = MachineCache.for_prefix(store.prefix, tmp_path)
    RedisQTableStore(store.client, store.prefix, cache=cache).load(1)
    directory = cache.mapped_path("v1.qtable")
    data = directory / "anchor.data.npy"
    data.write_bytes(data.read_bytes()[:200])  # cut short
    with pytest.raises(ValueError, match="anchor.data"):
        map_directory(directory)
    reader = RedisQTableStore(store.client, store.prefix, cache=cache)
    loaded = reader.load(1)  # the bad copy goes; this process reads Redis's own
    assert not directory.exists() and not is_mapped(loaded.q)
    np.testing.assert_array_equal(loaded.predicted(*links()), table.predicted(*links()))
    # Mapped whole, but an array that does not fit the header: refused by the checks.
    reader = RedisQTableStore(store.client, store.prefix, cache=cache)
    reader.load(1)
    assert directory.is_dir()
    indices = directory / "url.indices.npy"
    np.save(indices, np.full(np.load(indices).shape, 10**6, dtype=np.int32))
    with pytest.raises(ValueError, match="inconsistent sparse"):
        QTable.from_arrays(*map_directory(directory))
    assert reader.load(1).version == 1 and not directory.exists()


def test_an_archive_cannot_supply_search_postings_or_odd_members(tmp_path):
    arrays, header = synthetic_table(1, vertices=50).to_arrays()
    header_bytes = np.frombuffer(__import__("json").dumps(header).encode(), np.uint8)
    forged = io.BytesIO()
    np.savez(forged, header=header_bytes, **arrays, **{"search.indptr": np.zeros(3, np.int64)})
    forged.seek(0)
    read, _ = read_archive(forged)
    assert not any(key.startswith("search.") for key in read)
    archive = tmp_path / "forged.npz"
    archive.write_bytes(forged.getvalue())
    (tmp_path / "out").mkdir()
    with pytest.raises(ValueError, match="unexpected archive member"):
        unpack_archive(archive, tmp_path / "out")
    object_array = tmp_path / "objects.npz"
    np.savez(object_array, header=header_bytes, q=np.array([{"a": 1}], dtype=object))
    (tmp_path / "out2").mkdir()
    with pytest.raises(ValueError):
        unpack_archive(object_array, tmp_path / "out2")


WORDS = ["手机", "téléphone", "smartphone", "e\u0301", "ab" * 9, "x" * 16, "y" * 8, "mobile",
         *(f"w{i}" for i in range(200))]


def multilingual_table(vertices: int = 2000, seed: int = 3) -> QTable:
    rng = np.random.default_rng(seed)
    words = np.array(WORDS)
    anchors = [" ".join(rng.choice(words, 3)) for _ in range(vertices)]
    contexts = [" ".join(rng.choice(words, 8)) for _ in range(vertices)]
    urls = [f"http://s{i % 30}.test/{words[i % len(words)]}/{i}" for i in range(vertices)]
    src, dst = np.arange(vertices - 1), np.arange(1, vertices)
    return build_qtable(1, anchors, urls, contexts, src, dst, rng.random(vertices) < 0.3,
                        max_postings=CAPS)


def multilingual_links(count: int = 300) -> tuple[list[str], list[str], list[str]]:
    rng = np.random.default_rng(4)
    words = np.array([*WORDS, "手", "telephone", "ab" * 8, "x" * 17, "unknown", "mobiles"])
    return ([" ".join(rng.choice(words, 3)) for _ in range(count)],
            [f"http://s{i % 40}.test/{words[i % len(words)]}/q{i}" for i in range(count)],
            [" ".join(rng.choice(words, 7)) for _ in range(count)])


def test_the_mapped_vocabularies_give_a_dictionarys_ids_and_scores(tmp_path):
    """The machine's copy looks its terms up in mapped arrays (no dictionary of strings in the
    process), with the same ids, query values and scores as a table read into memory."""
    table = multilingual_table()
    (tmp_path / "archive").write_bytes(table.to_bytes())
    (tmp_path / "unpacked").mkdir()
    unpack_archive(tmp_path / "archive", tmp_path / "unpacked")
    mapped = QTable.from_arrays(*map_directory(tmp_path / "unpacked"))
    read = QTable.from_bytes(table.to_bytes())
    mapped.index.prepare()
    read.index.prepare()
    assert mapped.index._stacked.tables is not None and read.index._stacked.tables is None
    assert not hasattr(mapped.index._stacked, "words")
    assert all(field.__dict__.get("_vocabulary") is None and field.__dict__.get("_terms") is None
               for field in mapped.index.fields_)
    assert all(is_mapped(t.hashes) and is_mapped(t.chars) for t in mapped.index._stacked.tables)
    links = multilingual_links()
    tokens = field_tokens(*links)
    in_mapped = mapped.index._stacked.query_entries(tokens, table.index.weights)
    in_memory = read.index._stacked.query_entries(tokens, table.index.weights)
    for got, expected in zip(in_mapped, in_memory, strict=True):
        np.testing.assert_array_equal(got, expected)
    expected = read.predicted(*links)
    assert np.count_nonzero(expected) > 250
    np.testing.assert_array_equal(mapped.predicted(*links), expected)
    for got, wanted in zip(mapped.index.best_vertices(*links, exact=True),
                           read.index.best_vertices(*links, exact=True), strict=True):
        np.testing.assert_array_equal(got, wanted)
    assert mapped.index.fields_[1].terms_ == read.index.fields_[1].terms_  # still there


def _cut_short(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:100])


def _not_a_permutation(path: Path) -> None:
    np.save(path, np.zeros(np.load(path).shape, dtype=np.int32))


def _another_key(path: Path) -> None:
    np.save(path, np.load(path) ^ np.uint64(1))


def _an_object_array(path: Path) -> None:
    np.save(path, np.array([{"a": 1}], dtype=object), allow_pickle=True)


@pytest.mark.parametrize("name, damage", [
    ("search.url.hashes.npy", _cut_short), ("search.context.ids.npy", _not_a_permutation),
    ("search.key.npy", _another_key), ("search.anchor.ends.npy", _an_object_array),
])
def test_a_damaged_vocabulary_file_is_refused_and_the_copy_discarded(store, tmp_path, name,
                                                                     damage):
    table = synthetic_table(1)
    store.publish(table)
    cache = MachineCache.for_prefix(store.prefix, tmp_path)
    RedisQTableStore(store.client, store.prefix, cache=cache).load(1)
    directory = cache.mapped_path("v1.qtable")
    damage(directory / name)
    with pytest.raises(ValueError):
        QTable.from_arrays(*map_directory(directory))
    loaded = RedisQTableStore(store.client, store.prefix, cache=cache).load(1)
    assert not directory.exists() and not is_mapped(loaded.q)  # Redis's own, read
    np.testing.assert_array_equal(loaded.predicted(*links()), table.predicted(*links()))


def test_terms_listed_in_the_header_are_looked_up_in_dictionaries(tmp_path):
    """A term holding a NUL sends its field's terms into the header (a JSON list): the machine's
    copy then saves no term tables, and each process makes its dictionaries as before."""
    table = multilingual_table()
    anchor = table.index.fields_[0]
    odd = {("odd\x00" + term if term == "mobile" else term): column
           for term, column in anchor.vocabulary_.items()}
    field = FieldBM25.from_learned(odd, anchor.idf_, anchor.doc_weights_, anchor.avgdl_,
                                   k1=anchor.k1, b=anchor.b)
    index = LinkIndex.from_fields([field, *table.index.fields_[1:]], table.index.weights,
                                  max_postings=CAPS)
    table = QTable(version=1, index=index, q=table.q, created_at=1.0)
    (tmp_path / "archive").write_bytes(table.to_bytes())
    (tmp_path / "unpacked").mkdir()
    unpack_archive(tmp_path / "archive", tmp_path / "unpacked")
    assert not list((tmp_path / "unpacked").glob("search.*.hashes.npy"))
    mapped = QTable.from_arrays(*map_directory(tmp_path / "unpacked"))
    mapped.index.prepare()
    assert mapped.index._stacked.tables is None
    links = multilingual_links()
    np.testing.assert_array_equal(mapped.predicted(*links), table.predicted(*links))
