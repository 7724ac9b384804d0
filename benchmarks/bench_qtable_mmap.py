"""Memory of the worker processes of one machine serving one Q-table from the machine's cache
(``learner/qtable_cache.py``), and their load and link-scoring times.

The benchmark publishes a synthetic Q-table of ``--vertices`` vertices (``bench_qtable_cache
.synthetic_table``; built once and kept in ``--table-file``) on a private ``redis-server``,
then starts ``--processes`` worker processes together, each with an empty machine cache shared
by them (under /dev/shm, as in production). Each loads the current version through
``RedisQTableStore(cache=...)`` (one downloads it, the others wait for its copy), then scores
``--batches`` batches of 100 links it has never seen (after 3 batches of warm-up). Printed per
process, while all of them still hold the table: USS (``Private_Clean + Private_Dirty``) and PSS
from /proc/PID/smaps_rollup, the USS before loading (the interpreter and its imports), the load
time and the median time to score 100 links (the processes score one after the other); then the
sums, the cache directory's size, and the machine's memory: the PSS outside the cache's files
(each process's share of everything else) plus the cache's size (its files are in memory on
/dev/shm, mapped or not).

``--compare-scoring`` only times the link scoring, in one process: the table mapped and the
table read into memory score the same batches alternately (medians and quartiles).

``--code DIR`` runs the workers on another checkout of jlse (``DIR/jlse`` importable as the
package, as ``make lint``'s import tree): main's code for the "before" figures.

    .venv/bin/python benchmarks/bench_qtable_mmap.py [--vertices 1000000] [--processes 4]
        [--batches 30] [--code /tmp/jlse-main-tree] [--compare-scoring]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

PREFIX = "jlsebench:mmap:"
LINKS_PER_BATCH = 100
WARM_UP = 3
SHM = Path("/dev/shm") if Path("/dev/shm").is_dir() else None


def memory(pid: int | str = "self") -> dict[str, int]:
    """Rss, Pss, USS (private clean + dirty) and anonymous memory (the process's own: its heap,
    not files) of a process, in bytes."""
    fields = {}
    with open(f"/proc/{pid}/smaps_rollup") as rollup:
        for line in rollup:
            parts = line.split()
            if len(parts) == 3 and parts[2] == "kB":
                fields[parts[0].rstrip(":")] = int(parts[1]) * 1024
    return {"rss": fields["Rss"], "pss": fields["Pss"], "anonymous": fields["Anonymous"],
            "uss": fields["Private_Clean"] + fields["Private_Dirty"]}


def pss_under(pid: int, directory: str) -> int:
    """The PSS of a process's mappings of files under ``directory``, in bytes."""
    total, inside = 0, False
    with open(f"/proc/{pid}/smaps") as smaps:
        for line in smaps:
            parts = line.split()
            if parts and "-" in parts[0] and not parts[0].endswith(":"):  # a mapping's line
                inside = len(parts) >= 6 and parts[5].startswith(directory)
            elif inside and parts[0] == "Pss:":
                total += int(parts[1]) * 1024
    return total


def link_batches(count: int, seed: int) -> list[tuple[list[str], list[str], list[str]]]:
    """Batches of 100 links in the synthetic table's words, none repeated (the index
    remembers the answers for links it saw)."""
    rng = np.random.default_rng(seed)
    batches = []
    for batch in range(count):
        anchors = [" ".join(f"word{w}" for w in rng.integers(0, 5200, 4))
                   for _ in range(LINKS_PER_BATCH)]
        urls = [f"http://site{rng.integers(0, 600)}.test/p/{rng.integers(0, 10**7)}/{batch}"
                for _ in range(LINKS_PER_BATCH)]
        contexts = [" ".join(f"word{w}" for w in rng.integers(0, 5200, 10))
                    for _ in range(LINKS_PER_BATCH)]
        batches.append((anchors, urls, contexts))
    return batches


def worker(port: int, cache_dir: str, batches: int, seed: int) -> None:
    """One worker process: load, score, report (a JSON line), hold the table until stdin
    closes."""
    import redis

    from jlse.learner.publish import RedisQTableStore
    from jlse.learner.qtable_cache import MachineCache
    from jlse.models import qtable

    links = link_batches(WARM_UP + batches, seed)
    idle = memory()
    start = time.perf_counter()
    cache = MachineCache.for_prefix(PREFIX, Path(cache_dir))
    table = RedisQTableStore(redis.Redis(port=port), PREFIX, cache=cache).load()
    load_seconds = time.perf_counter() - start
    print(json.dumps({"idle": idle, "load_s": load_seconds, "code": qtable.__file__,
                      "version": table.version}), flush=True)
    sys.stdin.readline()  # scored one process at a time: 2 cores, no contention in the timing
    times = []
    for number, batch in enumerate(links):
        start = time.perf_counter()
        table.predicted(*batch)
        if number >= WARM_UP:
            times.append(time.perf_counter() - start)
    print(json.dumps({"score_ms_per_100": 1000 * float(np.median(times))}), flush=True)
    sys.stdin.read()


def compare_scoring(archive: bytes, batches: int, root: Path | None) -> None:
    """In one process, the table mapped (unpacked as a machine's cache does) and read into
    memory score the same batches of links, alternately: the median time of each."""
    from jlse.models.qtable import QTable
    from jlse.models.qtable_files import map_directory, unpack_archive

    with tempfile.TemporaryDirectory(dir=root) as directory:
        (Path(directory) / "archive").write_bytes(archive)
        (Path(directory) / "unpacked").mkdir()
        unpack_archive(Path(directory) / "archive", Path(directory) / "unpacked")
        mapped = QTable.from_arrays(*map_directory(Path(directory) / "unpacked"))
        read = QTable.from_bytes(archive)
        times: dict[str, list[float]] = {"mapped": [], "read": []}
        for number, batch in enumerate(link_batches(WARM_UP + batches, 11)):
            order = [("mapped", mapped), ("read", read)][:: 1 if number % 2 else -1]
            for name, table in order:
                start = time.perf_counter()
                scores = table.predicted(*batch)
                if number >= WARM_UP:
                    times[name].append(time.perf_counter() - start)
            assert np.array_equal(scores, mapped.predicted(*batch))
    print(", ".join(f"{name}: {1000 * np.median(values):.2f} ms per 100 links (quartiles "
                    f"{1000 * np.quantile(values, 0.25):.2f}-{1000 * np.quantile(values, 0.75):.2f})"
                    for name, values in times.items()) + f", {batches} batches each, alternated")


def table_archive(path: Path, vertices: int) -> bytes:
    """The synthetic table's archive: built once, then read from ``path``."""
    if path.exists():
        return path.read_bytes()
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_qtable_cache import synthetic_table

    start = time.perf_counter()
    data = synthetic_table(1, vertices).to_bytes()
    print(f"built the table of {vertices:,} vertices in {time.perf_counter() - start:.0f} s",
          flush=True)
    path.write_bytes(data)
    return data


def publish(port: int, archive: bytes) -> None:
    import redis

    from jlse.learner.publish import RedisQTableStore
    from jlse.models.qtable import QTable

    RedisQTableStore(redis.Redis(port=port), PREFIX).publish(QTable.from_bytes(archive))


def run_workers(args: argparse.Namespace, port: int, cache_dir: str) -> list[dict]:
    env = dict(os.environ)
    if args.code:
        env["PYTHONPATH"] = args.code
    command = [sys.executable, __file__, "--worker", str(port), cache_dir, str(args.batches)]
    workers = [subprocess.Popen([*command, str(seed)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True, env=env)
               for seed in range(args.processes)]
    reports = [json.loads(worker.stdout.readline()) for worker in workers]
    for worker, report in zip(workers, reports, strict=True):
        worker.stdin.write("score\n")
        worker.stdin.flush()
        report.update(json.loads(worker.stdout.readline()))
    for worker, report in zip(workers, reports, strict=True):
        report.update(memory(worker.pid))  # all of them alive, each holding the table
        report["cache_pss"] = pss_under(worker.pid, cache_dir)
    for worker in workers:
        worker.stdin.close()
        worker.wait(60)
    return reports


def print_reports(reports: list[dict], cache_dir: Path, archive_bytes: int) -> None:
    mib = 2**20
    print(f"code: {reports[0]['code']}")
    for number, report in enumerate(reports):
        print(f"process {number}: USS {report['uss'] / mib:8.1f} MiB (before loading "
              f"{report['idle']['uss'] / mib:.1f}), PSS {report['pss'] / mib:8.1f} MiB, "
              f"load {report['load_s']:.2f} s, score 100 links {report['score_ms_per_100']:.2f} ms")
    cached = sum(path.stat().st_size for path in cache_dir.rglob("*") if path.is_file())
    pss = sum(r["pss"] for r in reports)
    outside = pss - sum(r["cache_pss"] for r in reports)
    print(f"sum of {len(reports)}: USS {sum(r['uss'] for r in reports) / mib:.1f} MiB, PSS "
          f"{pss / mib:.1f} MiB; machine cache {cached / mib:.1f} MiB "
          f"(archive {archive_bytes / mib:.1f} MiB)")
    # The cache's files are in memory (tmpfs) whether mapped or not: counted whole, once.
    print(f"machine memory: {(outside + cached) / mib:.1f} MiB (the processes' PSS outside "
          f"the cache {outside / mib:.1f} MiB + the cache)")


def main() -> None:
    if sys.argv[1:2] == ["--worker"]:
        worker(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vertices", type=int, default=1_000_000)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--table-file", type=Path, default=None,
                        help="where the built table is kept (default: /tmp, by vertices)")
    parser.add_argument("--code", default=None, help="run the workers on this jlse checkout")
    parser.add_argument("--cache-root", type=Path, default=SHM,
                        help="where the machine cache lives (default /dev/shm)")
    parser.add_argument("--compare-scoring", action="store_true",
                        help="only time the scoring of a mapped and a read table, one process")
    args = parser.parse_args()
    table_file = args.table_file or Path(tempfile.gettempdir()) / f"jlse-bench-{args.vertices}.npz"
    archive = table_archive(table_file, args.vertices)
    if args.compare_scoring:
        compare_scoring(archive, args.batches, args.cache_root)
        return
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_qtable_cache import free_port

    port = free_port()
    with tempfile.TemporaryDirectory() as workdir, \
            tempfile.TemporaryDirectory(dir=args.cache_root) as cache_dir:
        server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                                   "--save", "", "--appendonly", "no", "--dir", workdir],
                                  stdout=subprocess.DEVNULL)
        try:
            time.sleep(0.5)
            publish(port, archive)
            del archive
            reports = run_workers(args, port, cache_dir)
            print_reports(reports, Path(cache_dir), table_file.stat().st_size)
        finally:
            server.terminate()
            server.wait(10)


if __name__ == "__main__":
    main()
