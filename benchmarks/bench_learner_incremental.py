"""An incremental learning round on a large G_w: 10,000 new results into 1e6 and 1e7 vertices.

The graph comes from ``bench_learner.synthetic_crawl`` with ``--result-share 0.9`` (nearly every
fetched link is a vertex; the strategy is ``jlse``, dead ends included). Its anchors and
contexts are drawn from pools of ``POOL`` distinct strings made of the same vocabulary (each
distinct string is tokenised once, so loading 1e7 vertices takes minutes, not an hour); URLs
are distinct per link, as in ``bench_learner``. ``--new`` of the result links are held out;
the round adds them.

Per size, in a fresh process (its own peak RSS):

* PostgreSQL (sizes up to ``--pg-max``): the crawl is bulk-loaded (COPY) into a private
  database; the learner's first round reads it whole; the held-out results are then written
  (links fetched, history and ResultTable rows) and the incremental round is timed, database
  read included. The from-scratch ``Learner.learn`` is timed on the same database.
* Direct (larger sizes): the rows are handed to the learner (``IncrementalLearner.add_rows``)
  without PostgreSQL, then the round adds the held-out rows the same way: the time of a round
  less its database read (which reads only the new rows).

Each writes the round's Q-table archives as a publication does (whole, and Q alone for a
version sharing an index already published) and times a reassembly of the link index from the kept term counts (what a round does
each time G_w has grown by ``index_growth``, 10%), after dropping the round's table, as the
distributed learner does once it has published it (the embedded crawl keeps serving the old
table while the new index is made: both indexes at once). The peak RSS includes the generated
crawl (``generator_rss_mb``: the process's RSS once it is generated, before the learner).

    python benchmarks/bench_learner_incremental.py [--sizes 1000000,10000000] [--new 10000]
                                                   [--pg-max 1000000] [--scratch-max 1000000]
                                                   [--quick]
"""

from __future__ import annotations

import argparse
import io
import json
import multiprocessing
import os
import tempfile
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from bench_learner import (
    CHUNK,
    COLUMNS,
    SyntheticCrawl,
    copy_text,
    peak_rss_mb,
    synthetic_crawl,
    vocabulary,
)

from jlse.learner.incremental import IncrementalLearner
from jlse.learner.learner import Learner
from jlse.models.tokenizer import tokenize
from jlse.scheduler.store import open_store
from jlse.scheduler.store.base import LearningGraphRows
from jlse.scheduler.store.pg_writes import url_fingerprint
from jlse.settings import Settings

RESULTS_FILE = Path(__file__).resolve().parent / "results" / "learner_incremental.json"
RESULT_SHARE = 0.9
VERTEX_SHARE = 0.933  # fetched links per link at RESULT_SHARE (results + expanded pages)
POOL = 200_000  # distinct anchors and contexts
LOAD_BATCH = 250_000  # rows handed to the learner at once


class Texts:
    """Anchor and context of each link from pools of distinct strings; URLs per link."""

    def __init__(self, crawl: SyntheticCrawl, seed: int = 11) -> None:
        rng = np.random.default_rng(seed)
        words = np.array(vocabulary(), dtype=object)
        self.anchors = [" ".join(w) for w in words[rng.integers(0, len(words), (POOL, 3))]]
        self.contexts = [" ".join(w) for w in words[rng.integers(0, len(words), (POOL, 15))]]
        n_links = len(crawl.parent_ids)
        self.anchor_of = rng.integers(0, POOL, n_links)
        self.context_of = rng.integers(0, POOL, n_links)
        self.depths = crawl.depths

    def url(self, row: int) -> str:
        return f"http://site{row % 997}.test/d{self.depths[row]}/p{row}.html"

    def rows(self, crawl: SyntheticCrawl, link_ids: np.ndarray,
             results: np.ndarray) -> LearningGraphRows:
        """G_w rows of ``link_ids`` (``results``: which are results)."""
        rows = link_ids - 1
        parents = crawl.parent_ids[rows]
        return LearningGraphRows(
            ids=link_ids.astype(np.int64), parent_ids=np.where(parents > 0, parents, -1),
            urls=[self.url(row) for row in rows.tolist()],
            anchors=[self.anchors[i] for i in self.anchor_of[rows].tolist()],
            contexts=[self.contexts[i] for i in self.context_of[rows].tolist()],
            is_result=results)


def held_out(crawl: SyntheticCrawl, n_new: int) -> tuple[np.ndarray, np.ndarray]:
    """(vertices before the round, the results the round adds), as link ids."""
    rng = np.random.default_rng(5)
    new = np.sort(rng.choice(crawl.results, n_new, replace=False))
    vertices = np.flatnonzero(crawl.fetched) + 1
    return np.setdiff1d(vertices, new), new


def crawl_of(n_vertices: int) -> SyntheticCrawl:
    return synthetic_crawl(round(n_vertices / VERTEX_SHARE), RESULT_SHARE)


# --- through PostgreSQL --------------------------------------------------------------------
def load_postgres(url: str, crawl: SyntheticCrawl, texts: Texts, before: np.ndarray) -> None:
    import psycopg2

    open_store(url).close()
    conn = psycopg2.connect(url)
    fetched = np.zeros(len(crawl.parent_ids), dtype=bool)
    fetched[before - 1] = True
    is_result = np.zeros(len(crawl.parent_ids), dtype=bool)
    is_result[crawl.results - 1] = True
    with conn, conn.cursor() as cur:
        for start in range(0, len(crawl.parent_ids), CHUNK):
            stop = min(start + CHUNK, len(crawl.parent_ids))
            rows = _link_rows(crawl, texts, fetched & is_result, fetched, start, stop)
            cur.copy_expert(f"COPY links ({', '.join((*COLUMNS, 'url_fp'))}) FROM STDIN",
                            copy_text([(*row, url_fingerprint(row[1])) for row in rows]))
        done = before.tolist()
        cur.copy_expert("COPY fetches (url_id, fetched_at, outcome) FROM STDIN",
                        io.StringIO("".join(f"{i}\t2000\tok\n" for i in done)))
        results = [i for i in done if is_result[i - 1]]
        cur.copy_expert("COPY results (url_id, relevance, stored_at) FROM STDIN",
                        io.StringIO("".join(f"{i}\t0.9\t3000\n" for i in results)))
    conn.autocommit = True
    conn.cursor().execute("VACUUM ANALYZE")
    conn.close()


def _link_rows(crawl: SyntheticCrawl, texts: Texts, targets: np.ndarray, fetched: np.ndarray,
               start: int, stop: int) -> Iterator[tuple]:
    for row in range(start, stop):
        parent = int(crawl.parent_ids[row])
        done = bool(fetched[row])
        yield (row + 1, texts.url(row), f"site{row % 997}.test", parent if parent > 0 else None,
               int(crawl.depths[row]), texts.anchors[texts.anchor_of[row]],
               texts.contexts[texts.context_of[row]], 0.5, "fetched" if done else "queued",
               1000.0 + row, 2000.0 if done else None, 0.8 if done else None,
               int(targets[row]))


def write_results(url: str, new: np.ndarray) -> None:
    """The round's new results, as the crawl writes them (link, history row, ResultTable)."""
    import psycopg2

    ids = new.tolist()
    conn = psycopg2.connect(url)
    with conn, conn.cursor() as cur:
        cur.execute("UPDATE links SET status = 'fetched', fetched_at = 4000, is_target = 1 "
                    "WHERE id = ANY(%s)", (ids,))
        cur.execute("INSERT INTO fetches (url_id, fetched_at, outcome) "
                    "SELECT unnest(%s::bigint[]), 4000, 'ok'", (ids,))
        cur.execute("INSERT INTO results (url_id, relevance, stored_at) "
                    "SELECT unnest(%s::bigint[]), 0.9, 4000", (ids,))
    conn.close()


def measure_postgres(admin_url: str, n_vertices: int, n_new: int, scratch: bool) -> dict:
    import psycopg2

    tokenize("价格 review")
    crawl = crawl_of(n_vertices)
    texts = Texts(crawl)
    before, new = held_out(crawl, n_new)
    name = f"jlse_bench_incr_{uuid.uuid4().hex[:8]}"
    admin = psycopg2.connect(admin_url)
    admin.autocommit = True
    admin.cursor().execute(f'CREATE DATABASE "{name}"')
    try:
        url = f"{admin_url.rsplit('/', 1)[0]}/{name}"
        started = time.perf_counter()
        load_postgres(url, crawl, texts, before)
        load_s = time.perf_counter() - started
        del crawl, texts
        settings = Settings(strategy="jlse")
        learner = IncrementalLearner(settings)
        with open_store(url) as store:
            started = time.perf_counter()
            learner.learn(store, 1)
            first = time.perf_counter() - started
            write_results(url, new)
            started = time.perf_counter()
            table = learner.learn(store, 2)
            round_s = time.perf_counter() - started
            figures = _figures("postgresql", learner, first, round_s, table, load_s)
            del table  # published and dropped, as by the distributed learner
            if scratch:
                started = time.perf_counter()
                Learner(settings).learn(store, 3)
                figures["from_scratch_s"] = round(time.perf_counter() - started, 2)
        figures.update(_reassembly(learner))
        return figures
    finally:
        admin.cursor().execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


# --- straight into the learner ---------------------------------------------------------------
def measure_direct(n_vertices: int, n_new: int) -> dict:
    tokenize("价格 review")
    crawl = crawl_of(n_vertices)
    texts = Texts(crawl)
    before, new = held_out(crawl, n_new)
    is_result = np.zeros(len(crawl.parent_ids) + 1, dtype=bool)
    is_result[crawl.results] = True
    generator_rss = current_rss_mb()
    learner = IncrementalLearner(Settings(strategy="jlse"))
    started = time.perf_counter()
    for start in range(0, len(before), LOAD_BATCH):
        ids = before[start:start + LOAD_BATCH]
        learner.add_rows(texts.rows(crawl, ids, is_result[ids]))
    loaded_rss = peak_rss_mb()
    learner.table(1)
    first = time.perf_counter() - started
    rows = texts.rows(crawl, new, np.ones(len(new), dtype=bool))
    del crawl, texts
    started = time.perf_counter()
    learner.add_rows(rows)
    table = learner.table(2)
    round_s = time.perf_counter() - started
    figures = _figures("direct", learner, first, round_s, table)
    figures["peak_rss_mb_loaded"] = loaded_rss  # before the first index
    figures["generator_rss_mb"] = generator_rss
    del table  # published and dropped, as by the distributed learner
    figures.update(_reassembly(learner))
    return figures


def _published(table) -> dict:
    """The archives a publication writes (``learner/publish.py``, into a temporary file): the
    round's Q-table whole (its index and Q: the first version of an index) and Q alone (a
    version sharing an index already published)."""
    sizes = {}
    started = time.perf_counter()
    for name, ref in (("whole", None), ("q_only", table.index.uid)):
        with tempfile.TemporaryFile() as archive:
            table.write_to(archive, ref)
            sizes[f"archive_mb_{name}"] = round(archive.tell() / 2**20, 1)
    sizes["archive_write_s"] = round(time.perf_counter() - started, 2)
    return sizes


def _figures(how: str, learner: IncrementalLearner, first: float, round_s: float, table,
             load_s: float | None = None) -> dict:
    return {**_published(table),"loaded": how, "vertices": len(learner.graph), "results": learner.n_results,
            "load_s": None if load_s is None else round(load_s, 1),
            "first_round_s": round(first, 2), "round_s": round(round_s, 3),
            "round_steps_up": learner.last_steps, "indexed": learner.n_indexed,
            "table_q": len(table.q), "learner_mb": round(learner.nbytes / 2**20),
            "peak_rss_mb_after_round": peak_rss_mb()}


def current_rss_mb() -> int:
    with open("/proc/self/statm") as statm:
        return round(int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20)


def _reassembly(learner: IncrementalLearner) -> dict:
    started = time.perf_counter()
    learner._index = learner._assemble_index()  # the round after 10% growth does this
    return {"index_reassembly_s": round(time.perf_counter() - started, 2),
            "peak_rss_mb": peak_rss_mb()}


def in_child(function, *args) -> dict:
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        return pool.submit(function, *args).result()


def show(figures: dict) -> None:
    scratch = figures.get("from_scratch_s")
    loaded = figures.get("peak_rss_mb_loaded")
    loaded = "" if loaded is None else f", {loaded} MB before the first index"
    if figures.get("generator_rss_mb") is not None:
        loaded += f"; the generated crawl {figures['generator_rss_mb']} MB of it"
    print(f"{figures['vertices']:>11,} vertices ({figures['loaded']:<10}) "
          f"round +{figures['new']:,} results {figures['round_s']:7.3f} s   "
          f"from scratch {'-' if scratch is None else f'{scratch:7.2f} s'}   "
          f"first round {figures['first_round_s']:7.2f} s   "
          f"index reassembly {figures['index_reassembly_s']:6.2f} s   "
          f"learner {figures['learner_mb']} MB   peak RSS {figures['peak_rss_mb']} MB "
          f"({figures['peak_rss_mb_after_round']} MB before the reassembly"
          f"{loaded}); archive {figures['archive_mb_whole']} MB whole, "
          f"{figures['archive_mb_q_only']} MB Q alone", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000000,10000000", help="vertices, comma-separated")
    parser.add_argument("--quick", action="store_true", help="100,000 and 200,000 vertices")
    parser.add_argument("--new", type=int, default=10_000, help="results the round adds")
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/postgres",
                        help="PostgreSQL admin URL (a private database is made)")
    parser.add_argument("--pg-max", type=int, default=1_000_000,
                        help="largest size loaded through PostgreSQL (larger: direct)")
    parser.add_argument("--scratch-max", type=int, default=1_000_000,
                        help="largest size whose from-scratch round is timed too")
    args = parser.parse_args()
    sizes = "100000,200000" if args.quick else args.sizes
    runs = []
    for size in (int(s) for s in sizes.split(",")):
        if args.pg and size <= args.pg_max:
            figures = in_child(measure_postgres, args.pg, size, args.new,
                               size <= args.scratch_max)
        else:
            figures = in_child(measure_direct, size, args.new)
        figures["new"] = args.new
        show(figures)
        runs.append(figures)
    RESULTS_FILE.parent.mkdir(exist_ok=True)
    RESULTS_FILE.write_text(json.dumps({"new": args.new, "runs": runs}, indent=2) + "\n")
    print(f"round target <= 5 s at every size, peak RSS <= 4 GB at 1e7; figures in {RESULTS_FILE}")


if __name__ == "__main__":
    main()
