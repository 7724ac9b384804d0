"""A learner's restart: its first round reads G_w whole from PostgreSQL. Peak RSS and time.

The crawl is ``bench_learner_incremental``'s (``--vertices`` vertices of G_w, dead ends
included, anchors and contexts from pools of distinct strings, URLs distinct), bulk-loaded once
into a private database that is kept (``--db``: reuse it) so that several codes can be measured
on the same rows. Each measurement runs in a fresh process: ``IncrementalLearner.learn(store,
1)``, the first round after a restart (the read, the tokenising of every vertex, Q, the index):
its wall time, its CPU time (this process's: the machine's other work moves it less) and the
process's peak RSS (``ru_maxrss``), beside the RSS before the round.

``--code DIR`` runs the measuring process on another checkout of jlse (``DIR/jlse`` importable
as the package, as ``make lint``'s import tree): main's code for the "before" figures.

    .venv/bin/python benchmarks/bench_learner_restart.py [--vertices 1000000] [--db NAME]
        [--code DIR] [--drop]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"


def measure(url: str) -> None:
    """In the measuring process: the first round, printed as one JSON line."""
    from jlse.learner.incremental import IncrementalLearner
    from jlse.models.tokenizer import tokenize
    from jlse.scheduler.store import open_store
    from jlse.settings import Settings

    tokenize("价格 review")  # the tokenizer's dictionary, loaded before the baseline
    with open_store(url) as store:
        store.result_count()
        baseline = _rss_mb()
        learner = IncrementalLearner(Settings(strategy="jlse"))
        started, cpu = time.perf_counter(), time.process_time()
        table = learner.learn(store, 1)
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"vertices": len(learner.graph), "results": learner.n_results,
                      "version": table.version, "seconds": round(seconds, 1), "cpu_s": round(cpu, 1),
                      "baseline_mb": round(baseline), "peak_rss_mb": round(peak),
                      "code": sys.modules["jlse.learner.incremental"].__file__}))


def _rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def load(url: str, admin: str, name: str, vertices: int) -> None:
    """The synthetic crawl into a new database ``name``."""
    import psycopg2

    sys.path.insert(0, str(Path(__file__).parent))
    from bench_learner_incremental import Texts, crawl_of, held_out, load_postgres

    connection = psycopg2.connect(admin)
    connection.autocommit = True
    connection.cursor().execute(f'CREATE DATABASE "{name}"')
    connection.close()
    started = time.perf_counter()
    crawl = crawl_of(vertices)
    before, _ = held_out(crawl, 0)
    try:
        load_postgres(url, crawl, Texts(crawl), before)
    except BaseException:
        drop(admin, name)  # not left half loaded for the next run to reuse
        raise
    print(f"loaded {len(before):,} fetched links into {name} in "
          f"{time.perf_counter() - started:.0f} s", flush=True)


def exists(admin: str, name: str) -> bool:
    import psycopg2

    connection = psycopg2.connect(admin)
    with connection.cursor() as cur:
        cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
        found = cur.fetchone() is not None
    connection.close()
    return found


def main() -> None:
    if sys.argv[1:2] == ["--measure"]:
        measure(sys.argv[2])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vertices", type=int, default=1_000_000)
    parser.add_argument("--admin", default=ADMIN, help="PostgreSQL admin URL")
    parser.add_argument("--db", default=None, help="database name (default: by vertices)")
    parser.add_argument("--code", default=None, help="measure on this jlse checkout")
    parser.add_argument("--drop", action="store_true", help="drop the database afterwards")
    args = parser.parse_args()
    name = args.db or f"jlse_bench_restart_{args.vertices}"
    url = f"{args.admin.rsplit('/', 1)[0]}/{name}"
    if not exists(args.admin, name):
        load(url, args.admin, name, args.vertices)
    env = dict(os.environ)
    if args.code:
        env["PYTHONPATH"] = args.code
    output = subprocess.run([sys.executable, __file__, "--measure", url], env=env, check=True,
                            stdout=subprocess.PIPE, text=True).stdout
    figures = json.loads(output.strip().splitlines()[-1])
    print(f"{figures['code']}: first round after a restart, {figures['vertices']:,} vertices "
          f"({figures['results']:,} results): {figures['seconds']} s ({figures['cpu_s']} s CPU), peak RSS "
          f"{figures['peak_rss_mb']} MB ({figures['baseline_mb']} MB before the round)")
    if args.drop:
        drop(args.admin, name)


def drop(admin: str, name: str) -> None:
    import psycopg2

    connection = psycopg2.connect(admin)
    connection.autocommit = True
    connection.cursor().execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    connection.close()


if __name__ == "__main__":
    main()
