"""Q-table bytes Redis sends per new version to one worker machine, with and without the
machine's cache (``learner/qtable_cache.py``).

``--processes`` fetch-worker processes of one machine (forked here) each serve the newest
Q-table through ``RedisQTableSource``; the benchmark publishes ``--versions`` versions of a
synthetic Q-table of ``--vertices`` vertices on a private ``redis-server`` and, after each, has
every process switch to it. Printed: Redis's output bytes per version (``INFO stats``
``total_net_output_bytes``) without the cache (each process downloads its own copy) and with it.
``--chunk-bytes`` stores a table larger than that in chunks (as the learner does with tables
over 64 MiB, ``learner/publish.py``): the bytes per version are then the chunks and the manifest.
``--share-index`` makes the versions share the first one's link index, as the incremental
learner's rounds do between two assemblies of the index: the first version sends the index
once, the others Q alone.

    .venv/bin/python benchmarks/bench_qtable_cache.py [--processes 4] [--versions 3]
        [--vertices 20000] [--chunk-bytes N] [--share-index]
"""

from __future__ import annotations

import argparse
import multiprocessing
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import redis

from jlse.learner.publish import CHUNK_BYTES, RedisQTableSource, RedisQTableStore
from jlse.learner.qtable_cache import MachineCache
from jlse.models.qtable import QTable, build_qtable

PREFIX = "jlsebench:qtable:"


def synthetic_table(version: int, vertices: int, seed: int = 3) -> QTable:
    """A Q-table over a chain of ``vertices`` links with made-up anchor and context words."""
    rng = np.random.default_rng(seed)
    words = np.array([f"word{i}" for i in range(5000)])
    anchors = [" ".join(rng.choice(words, 4)) for _ in range(vertices)]
    contexts = [" ".join(rng.choice(words, 10)) for _ in range(vertices)]
    urls = [f"http://site{i % 500}.test/p/{i}" for i in range(vertices)]
    src, dst = np.arange(vertices - 1), np.arange(1, vertices)
    return build_qtable(version, anchors, urls, contexts, src, dst, rng.random(vertices) < 0.5)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def worker(port: int, cache_root: str | None, barrier, versions: int) -> None:
    client = redis.Redis(port=port)
    cache = MachineCache.for_prefix(PREFIX, Path(cache_root)) if cache_root else None
    source = RedisQTableSource(RedisQTableStore(client, PREFIX, cache=cache))
    served = []
    for _ in range(versions):
        barrier.wait()  # a version was published
        source.refresh()
        served.append(source.version)
        barrier.wait()  # every process serves it
    raise SystemExit(0 if served == list(range(1, versions + 1)) else 1)


def bytes_out(client: redis.Redis) -> int:
    return int(client.info("stats")["total_net_output_bytes"])


def run(port: int, tables: list[QTable], processes: int, cache_root: str | None,
        chunk_bytes: int = CHUNK_BYTES) -> list[int]:
    client = redis.Redis(port=port)
    store = RedisQTableStore(client, PREFIX, chunk_bytes=chunk_bytes)
    store.clear()
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(processes + 1)
    workers = [context.Process(target=worker, args=(port, cache_root, barrier, len(tables)))
               for _ in range(processes)]
    for process in workers:
        process.start()
    sent = []
    for table in tables:
        store.publish(table)
        before = bytes_out(client)
        barrier.wait()
        barrier.wait()
        sent.append(bytes_out(client) - before)
    for process in workers:
        process.join(60)
    if any(process.exitcode != 0 for process in workers):
        raise RuntimeError("a worker process did not serve every version")
    return sent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--versions", type=int, default=3)
    parser.add_argument("--vertices", type=int, default=20_000)
    parser.add_argument("--chunk-bytes", type=int, default=CHUNK_BYTES,
                        help="tables above this size are published in chunks of it")
    parser.add_argument("--share-index", action="store_true",
                        help="the versions share the first one's index (the learner's rounds)")
    args = parser.parse_args()
    if args.share_index:
        first = synthetic_table(1, args.vertices)
        first.index.uid = "bench1"
        rng = np.random.default_rng(9)
        tables = [first] + [QTable(version=version, index=first.index,
                                   q=rng.random(args.vertices), created_at=time.time())
                            for version in range(2, args.versions + 1)]
    else:
        tables = [synthetic_table(version, args.vertices) for version in
                  range(1, args.versions + 1)]
    blob = len(tables[0].to_bytes())
    port = free_port()
    with tempfile.TemporaryDirectory() as workdir:
        server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                                   "--save", "", "--appendonly", "no", "--dir", workdir],
                                  stdout=subprocess.DEVNULL)
        try:
            for _ in range(50):
                try:
                    redis.Redis(port=port).ping()
                    break
                except redis.ConnectionError:
                    time.sleep(0.1)
            without = run(port, tables, args.processes, None, args.chunk_bytes)
            with_cache = run(port, tables, args.processes, str(Path(workdir) / "cache"),
                             args.chunk_bytes)
        finally:
            server.terminate()
            server.wait(10)
    per_version = [sum(sent) / len(sent) for sent in (without, with_cache)]
    if args.share_index:
        print(f"versions sharing one index; Redis output bytes per version, with the machine "
              f"cache: {', '.join(f'{sent:,}' for sent in with_cache)} (the first sends the "
              f"index); without: {', '.join(f'{sent:,}' for sent in without)}")
    chunks = -(-blob // args.chunk_bytes) if blob > args.chunk_bytes else 0
    print(f"Q-table of {args.vertices} vertices: {blob:,} bytes"
          f"{f' in {chunks} chunks' if chunks else ' (one piece)'}; {args.processes} processes "
          f"on one machine, {args.versions} versions")
    print(f"Redis output bytes per version: without the machine cache {per_version[0]:,.0f}, "
          f"with it {per_version[1]:,.0f} ({per_version[1] / per_version[0]:.2f}x)")


if __name__ == "__main__":
    main()
