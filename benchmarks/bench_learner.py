"""G_w rebuild and Q-learning time on a synthetic crawl database of 1,000,000 links.

A crawl-shaped tree (20 seeds, depth up to 8, about 30 out-links per expanded page, ~5% of the
links are result pages, which are not expanded) is bulk-loaded into a private PostgreSQL
database (COPY; created and dropped here) and into a SQLite file. Per backend it times
``learning_graph()``, ``build_link_graph`` and a full ``Learner.learn``. Target: rebuild
(learning_graph + build_link_graph) < 30 s on PostgreSQL. Each backend is measured in a fresh
process (cold caches, its own peak RSS). ``--result-share 0.9`` makes nearly every link part
of G_w (a stress test of streaming a million rows).

    python benchmarks/bench_learner.py [--links 1000000] [--quick] [--result-share 0.05]
                                       [--pg ADMIN_URL] [--no-sqlite]
"""

from __future__ import annotations

import argparse
import io
import json
import multiprocessing
import resource
import sqlite3
import tempfile
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from jlse.learner.graph import build_link_graph
from jlse.learner.learner import Learner
from jlse.models.tokenizer import tokenize
from jlse.sandbox import vocab_en, vocab_zh
from jlse.scheduler.store import open_store
from jlse.scheduler.store.pg_writes import url_fingerprint
from jlse.settings import Settings

RESULTS_FILE = Path(__file__).resolve().parent / "results" / "learner.json"
LEVEL_SHARES = (0.00002, 0.0004, 0.004, 0.02, 0.06, 0.14, 0.24, 0.30)  # depth 8 takes the rest
FANOUT = 30  # out-links per expanded page
RESULT_SHARE = 0.05  # default share of links that are result pages
CHUNK = 100_000  # rows per COPY / executemany batch
COLUMNS = ("id", "url", "host", "parent_id", "depth", "anchor_text", "context", "priority",
           "status", "discovered_at", "fetched_at", "relevance", "is_target")


@dataclass
class SyntheticCrawl:
    parent_ids: np.ndarray  # int64 per link, -1 for seeds; link i has id i + 1
    depths: np.ndarray
    fetched: np.ndarray  # bool: expanded pages and results
    results: np.ndarray  # link ids of the ResultTable rows


def synthetic_crawl(n_links: int, result_share: float = RESULT_SHARE,
                    seed: int = 7) -> SyntheticCrawl:
    """A breadth-first crawl tree: each level hangs from a random subset of the level above."""
    rng = np.random.default_rng(seed)
    sizes = [max(1, round(share * n_links)) for share in LEVEL_SHARES]
    sizes.append(n_links - sum(sizes))
    starts = np.concatenate([[0], np.cumsum(sizes)])
    parents = np.full(n_links, -1, dtype=np.int64)
    depths = np.zeros(n_links, dtype=np.int64)
    expanded = np.zeros(n_links, dtype=bool)
    for depth in range(1, len(sizes)):
        above = np.arange(starts[depth - 1], starts[depth])
        n_expanded = min(len(above), -(-sizes[depth] // FANOUT))
        pages = rng.choice(above, n_expanded, replace=False)
        expanded[pages] = True
        level = slice(starts[depth], starts[depth + 1])
        parents[level] = rng.choice(pages, sizes[depth]) + 1  # ids start at 1
        depths[level] = depth
    candidates = np.flatnonzero(~expanded & (depths >= 2))
    n_results = min(len(candidates), round(result_share * n_links))
    result_rows = np.sort(rng.choice(candidates, n_results, replace=False))
    fetched = expanded.copy()
    fetched[result_rows] = True
    return SyntheticCrawl(parents, depths, fetched, result_rows + 1)


def vocabulary() -> list[str]:
    english = [w.strip() for text in (vocab_en.ADJECTIVES, vocab_en.OVERLAP)
               for w in text.split(",") if w.strip()]
    chinese = (vocab_zh.ADJECTIVES + " " + vocab_zh.OVERLAP).split()
    models = [f"x{n}" for n in range(2000)]  # model numbers widen the vocabulary
    return english + chinese + models


def link_rows(crawl: SyntheticCrawl, start: int, stop: int, rng: np.random.Generator,
              words: np.ndarray) -> Iterator[tuple]:
    """Rows (in ``COLUMNS`` order) of links start..stop-1."""
    anchors = words[rng.integers(0, len(words), (stop - start, 3))]
    contexts = words[rng.integers(0, len(words), (stop - start, 15))]
    is_result = np.zeros(stop - start, dtype=bool)
    in_chunk = crawl.results[(crawl.results > start) & (crawl.results <= stop)]
    is_result[in_chunk - 1 - start] = True
    for offset, row in enumerate(range(start, stop)):
        parent = int(crawl.parent_ids[row])
        fetched = bool(crawl.fetched[row])
        host = f"site{row % 997}.test"
        yield (
            row + 1, f"http://{host}/d{crawl.depths[row]}/p{row}.html", host,
            parent if parent > 0 else None, int(crawl.depths[row]), " ".join(anchors[offset]),
            " ".join(contexts[offset]), 0.5, "fetched" if fetched else "queued", 1000.0 + row,
            2000.0 + row if fetched else None, 0.8 if fetched else None, int(is_result[offset]),
        )


def chunks(crawl: SyntheticCrawl) -> Iterator[list[tuple]]:
    rng = np.random.default_rng(11)
    words = np.array(vocabulary(), dtype=object)
    n_links = len(crawl.parent_ids)
    for start in range(0, n_links, CHUNK):
        yield list(link_rows(crawl, start, min(start + CHUNK, n_links), rng, words))


def copy_text(rows: list[tuple]) -> io.StringIO:
    def field(value: object) -> str:
        return "\\N" if value is None else str(value)

    return io.StringIO("".join("\t".join(map(field, row)) + "\n" for row in rows))


def load_postgres(url: str, crawl: SyntheticCrawl) -> None:
    import psycopg2

    open_store(url).close()  # creates the schema
    conn = psycopg2.connect(url)
    with conn, conn.cursor() as cur:
        for rows in chunks(crawl):
            cur.copy_expert(f"COPY links ({', '.join((*COLUMNS, 'url_fp'))}) FROM STDIN",
                            copy_text([(*row, url_fingerprint(row[1])) for row in rows]))
        results = "".join(f"{url_id}\t0.9\t3000\n" for url_id in crawl.results.tolist())
        cur.copy_expert("COPY results (url_id, relevance, stored_at) FROM STDIN",
                        io.StringIO(results))
    conn.autocommit = True
    conn.cursor().execute("VACUUM ANALYZE")  # as autovacuum would have done in a long crawl
    conn.close()


def load_sqlite(path: Path, crawl: SyntheticCrawl) -> None:
    open_store(f"sqlite:///{path}").close()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN")
    marks = ", ".join("?" * len(COLUMNS))
    for rows in chunks(crawl):
        conn.executemany(f"INSERT INTO links ({', '.join(COLUMNS)}) VALUES ({marks})", rows)
    conn.executemany("INSERT INTO results (url_id, relevance, stored_at) VALUES (?, 0.9, 3000)",
                     [(url_id,) for url_id in crawl.results.tolist()])
    conn.execute("COMMIT")
    conn.execute("ANALYZE")
    conn.close()


def peak_rss_mb() -> int:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def measure_in_child(name: str, url: str, settings: Settings) -> dict:
    """``measure`` in a fresh process: cold caches, and its own peak RSS."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        return pool.submit(measure, name, url, settings).result()


def measure(name: str, url: str, settings: Settings) -> dict:
    tokenize("价格 review")  # jieba's dictionary loads once per process, before any crawl
    start_rss = peak_rss_mb()
    with open_store(url) as store:
        started = time.perf_counter()
        rows = store.learning_graph()
        read = time.perf_counter() - started
        graph = build_link_graph(rows)
        rebuild = time.perf_counter() - started
        rebuild_rss = peak_rss_mb()
        del rows
        started = time.perf_counter()
        table = Learner(settings).learn(store, version=1)
        learn = time.perf_counter() - started
    figures = {
        "backend": name, "vertices": graph.n_vertices, "edges": graph.n_edges,
        "results": int(graph.is_leaf.sum()), "learning_graph_s": round(read, 2),
        "rebuild_s": round(rebuild, 2), "learn_s": round(learn, 2),
        "iterations": table.meta.get("iterations") if table is not None else None,
        "start_rss_mb": start_rss, "rebuild_peak_rss_mb": rebuild_rss, "peak_rss_mb": peak_rss_mb(),
    }
    print(f"{name:<11} G_w {figures['vertices']:>8,} vertices {figures['edges']:>8,} edges   "
          f"learning_graph {read:6.2f} s   rebuild {rebuild:6.2f} s   "
          f"learn {learn:6.2f} s   RSS {start_rss} MB at start, {rebuild_rss} MB after rebuild, "
          f"{figures['peak_rss_mb']} MB after learn", flush=True)
    return figures


def with_private_pg_database(admin_url: str, crawl: SyntheticCrawl, settings: Settings) -> dict:
    import psycopg2

    name = f"jlse_bench_learner_{uuid.uuid4().hex[:8]}"
    admin = psycopg2.connect(admin_url)
    admin.autocommit = True
    admin.cursor().execute(f'CREATE DATABASE "{name}"')
    try:
        url = f"{admin_url.rsplit('/', 1)[0]}/{name}"
        started = time.perf_counter()
        load_postgres(url, crawl)
        print(f"postgresql  loaded in {time.perf_counter() - started:.0f} s (COPY)", flush=True)
        return measure_in_child("postgresql", url, settings)
    finally:
        admin.cursor().execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


def with_sqlite_file(crawl: SyntheticCrawl, settings: Settings) -> dict:
    with tempfile.TemporaryDirectory() as workdir:
        path = Path(workdir).resolve() / "crawl.db"
        started = time.perf_counter()
        load_sqlite(path, crawl)
        print(f"sqlite      loaded in {time.perf_counter() - started:.0f} s", flush=True)
        return measure_in_child("sqlite", f"sqlite:///{path}", settings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--links", type=int, default=1_000_000)
    parser.add_argument("--quick", action="store_true", help="100,000 links")
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/postgres",
                        help="PostgreSQL admin URL (a private database is made); '' to skip")
    parser.add_argument("--result-share", type=float, default=RESULT_SHARE,
                        help="share of links that are result pages (G_w grows with it)")
    parser.add_argument("--no-sqlite", action="store_true")
    args = parser.parse_args()
    n_links = 100_000 if args.quick else args.links
    crawl = synthetic_crawl(n_links, args.result_share)
    print(f"synthetic crawl: {n_links:,} links, {int(crawl.fetched.sum()):,} fetched, "
          f"{len(crawl.results):,} results, depth <= {int(crawl.depths.max())}", flush=True)
    settings = Settings()
    figures = []
    if args.pg:
        figures.append(with_private_pg_database(args.pg, crawl, settings))
    if not args.no_sqlite:
        figures.append(with_sqlite_file(crawl, settings))
    RESULTS_FILE.parent.mkdir(exist_ok=True)
    summary = {"links": n_links, "results": len(crawl.results), "runs": figures}
    RESULTS_FILE.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"rebuild target < 30 s; figures in {RESULTS_FILE}")


if __name__ == "__main__":
    main()
