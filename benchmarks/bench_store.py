"""Write speed of the crawl database, as a worker writes: record_fetch_once + add_links(80 links).

Each simulated page is fetched (``record_fetch_once``) and yields 80 out-links: 60 new URLs and
20 already known (links an earlier page found; a different set per page: site-wide menus, the
same on every page, would be merged within a batch of pages, and a worker skips most of them
anyway, ``CrawlEngine._written``). The calls run inside
``store.autocommit()``, as a distributed worker makes them, on one connection. Reported per
backend:

* pages/s of the whole loop;
* link rows/s of ``add_links`` in that loop (80 rows per call, time spent inside
  ``add_links``): the link insert rate of one connection written by one thread (a prefork
  worker process). With ``--batch N`` the loop writes as a worker with ``fetch_batch`` N
  does: the links of N pages in one ``add_links``, then their pages in one ``write_pages``
  (also shown: the rate over the time of both), and the CPU microseconds per link row of the
  PostgreSQL backend and of this process inside ``add_links``;
* then ``add_links`` alone, from 1 thread and from ``--threads`` threads sharing the store
  (one connection, as a thread-pool worker's threads share it): link rows/s over the wall
  time, and CPU microseconds per link row of the PostgreSQL backend and of the client;
* on PostgreSQL, how many updates of ``links`` were HOT (``pg_stat_user_tables``:
  ``n_tup_hot_upd`` / ``n_tup_upd``) and the bytes per link row (``pg_total_relation_size``
  of ``links``, summed over its partitions, / its rows, indexes and TOAST included);
* the rate of ``iter_links`` over all rows.

    python benchmarks/bench_store.py [--pages 2000] [--pg postgresql://postgres@127.0.0.1/postgres]
        [--only postgresql] [--label NAME] [--batch N]

The script uses only the store's public calls, so the same file measures an older checkout
(run it with that checkout's interpreter) side by side with this one.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
import uuid
from pathlib import Path

from jlse.records import FetchRecord, NewLink, Outcome
from jlse.scheduler.store import CrawlStore, open_store

NEW_PER_PAGE = 60
NAV_LINKS = 20
KNOWN_LINKS = 20  # per page in the crawl: links to pages found before (the page KNOWN_FROM back)
KNOWN_FROM = 64


def crawl(store: CrawlStore, pages: int, batch: int = 1) -> dict[str, float]:
    """Simulated crawl of ``pages`` pages: pages/s and add_links rows/s. With ``batch`` > 1,
    as a worker writes a batch of that many pages (``fetch_batch``): the links of them all in
    one ``add_links``, then their pages in one ``write_pages``."""
    for page in range(-KNOWN_FROM, 0):  # the pages before the first: their links are known
        store.add_links(page_links(page, None))
    seeds = ["http://site0.test/"] + [f"http://site0.test/s{n}" for n in range(1, batch)]
    queue = [page_id for page_id, _ in store.add_links([NewLink(url, None, 0) for url in seeds])]
    in_add_links = in_pages = server = client = 0.0
    started = time.perf_counter()
    for first in range(0, pages, batch):
        taken = [(page, queue.pop(0)) for page in range(first, min(first + batch, pages))]
        records = [fetched(page, url_id) for page, url_id in taken]
        if batch == 1:
            with store.autocommit():
                store.record_fetch_once(records[0])
        links = [link for page, url_id in taken
                 for link in page_links(page, url_id) + known_links(page)]
        begun, server_begun, client_begun = time.perf_counter(), backend_cpu(store), \
            time.process_time()
        with store.autocommit():
            answers = store.add_links(links)
        in_add_links += time.perf_counter() - begun
        server += backend_cpu(store) - server_begun
        client += time.process_time() - client_begun
        if batch > 1:  # after the links, as the worker writes (its crash-safe order)
            begun = time.perf_counter()
            store.write_pages(records)
            in_pages += time.perf_counter() - begun
        queue.extend(link_id for link_id, created in answers if created)
    elapsed = time.perf_counter() - started
    rows = pages * (NEW_PER_PAGE + KNOWN_LINKS)
    return {"pages_per_s": pages / elapsed,
            "link_rows_per_s": rows / in_add_links,
            "server_us": 1e6 * server / rows, "client_us": 1e6 * client / rows,
            "with_pages_per_s": pages * (NEW_PER_PAGE + KNOWN_LINKS) / (in_add_links + in_pages)}


def known_links(page: int) -> list[NewLink]:
    """A page's links to pages already known: some of those an earlier page found (a
    different set per page, so a batch of pages does not merge them into fewer rows)."""
    return page_links(page - KNOWN_FROM, None)[:KNOWN_LINKS]


def fetched(page: int, url_id: int) -> FetchRecord:
    return FetchRecord(url_id=url_id, url="", outcome=Outcome.OK, fetched_at=time.time(),
                       status_code=200, content_type="text/html", n_bytes=20_000, elapsed=0.2,
                       relevance=0.6, is_target=page % 10 == 0, title=f"page {page}")


def page_links(page: int, url_id: int | None) -> list[NewLink]:
    return [NewLink(f"http://site{page % 4}.test/p{page}/{n}", url_id, 1,
                    f"anchor {n} 体育新闻", "some context words around the link " * 3,
                    priority=0.5)
            for n in range(NEW_PER_PAGE)]


def backend_cpu(store: CrawlStore) -> float:
    """CPU seconds the store's PostgreSQL backend has used (from /proc: server and bench
    share this machine); 0.0 for a store without a server."""
    conn = getattr(store, "_conn", None)
    pid = conn.get_backend_pid() if hasattr(conn, "get_backend_pid") else None
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def add_links_only(store: CrawlStore, pages: int, threads: int, tag: str) -> dict[str, float]:
    """``add_links`` alone, called by ``threads`` threads sharing ``store`` (one connection;
    a thread-pool worker's write pattern), ``pages`` calls of 80 links in all: link rows/s
    over the wall time, and CPU per link row of the server's backend and of this process
    (figures the machine's load moves less than wall time)."""
    nav = [NewLink(f"http://{tag}{n % 4}.test/nav/{n}", None, 0, f"nav {n}")
           for n in range(NAV_LINKS)]
    store.add_links(nav)

    def work(first: int) -> None:
        for page in range(first, pages, threads):
            links = [NewLink(f"http://{tag}{page % 4}.test/p{page}/{n}", None, 1,
                             f"anchor {n} 体育新闻", "some context words around the link " * 3,
                             priority=0.5)
                     for n in range(NEW_PER_PAGE)]
            store.add_links(links + nav)

    workers = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
    server, client = backend_cpu(store), time.process_time()
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    rows = pages * (NEW_PER_PAGE + NAV_LINKS)
    return {"rows_per_s": rows / (time.perf_counter() - started),
            "server_us": 1e6 * (backend_cpu(store) - server) / rows,
            "client_us": 1e6 * (time.process_time() - client) / rows}


def iterate(store: CrawlStore) -> tuple[int, float]:
    started = time.perf_counter()
    count = sum(1 for _ in store.iter_links())
    return count, count / (time.perf_counter() - started)


# A table and its partitions, if any (pg_partition_tree lists none of a plain table).
_TREE = "(SELECT relid FROM pg_partition_tree(%s::regclass) UNION SELECT %s::regclass)"


def pg_table_figures(admin_url: str, schema: str) -> str:
    """HOT updates and bytes per row of ``schema.links``."""
    import psycopg2

    time.sleep(1.5)  # the store's closed connection sends its counters as it exits
    conn = psycopg2.connect(admin_url)
    try:
        with conn.cursor() as cur:
            links = f'"{schema}".links'  # partitioned or not: summed over its partitions
            cur.execute("SELECT COALESCE(sum(n_tup_upd), 0), COALESCE(sum(n_tup_hot_upd), 0) "
                        f"FROM pg_stat_user_tables WHERE relid IN {_TREE}", (links, links))
            updates, hot = cur.fetchone()
            cur.execute("SELECT sum(pg_total_relation_size(t)), sum(pg_indexes_size(t)) "
                        f"FROM {_TREE} AS tree(t)", (links, links))
            total, indexes = cur.fetchone()
            cur.execute(f"SELECT COUNT(*) FROM {links}")
            rows = cur.fetchone()[0]
            cur.execute("SELECT i.indexrelid::regclass::text, sum(pg_relation_size(t)) "
                        "FROM pg_index i, LATERAL (SELECT relid FROM pg_partition_tree("
                        "i.indexrelid) UNION SELECT i.indexrelid) AS tree(t) "
                        "WHERE i.indrelid = %s::regclass GROUP BY 1 ORDER BY 1", (links,))
            each = ", ".join(f"{index.rsplit('.', 1)[-1]} {size / rows:.0f}"
                             for index, size in cur.fetchall())
    finally:
        conn.close()
    share = f"{100 * hot / updates:.0f}%" if updates else "-"
    return (f"   links updates: {updates} ({hot} HOT, {share})"
            f"   {total / rows:.0f} B/row ({indexes / rows:.0f} in indexes: {each})")


def run(name: str, url: str, pages: int, threads: int,
        admin: tuple[str, str] | None = None, batch: int = 1) -> None:
    with open_store(url) as store:
        rates = crawl(store, pages, batch)
        rows, row_rate = iterate(store)
        alone = [(n, add_links_only(store, pages, n, f"t{n}-")) for n in sorted({1, threads})]
    extra = pg_table_figures(*admin) if admin else ""
    batched = (f" (batches of {batch} pages; with their write_pages: "
               f"{rates['with_pages_per_s']:.0f})" if batch > 1 else "")
    print(f"{name:<11} {rates['pages_per_s']:7.0f} pages/s   add_links link rows/s per "
          f"connection in the crawl: {rates['link_rows_per_s']:8.0f}{batched}   "
          f"(CPU per link row in add_links: server {rates['server_us']:4.1f} us, client "
          f"{rates['client_us']:4.1f} us)   "
          f"iter_links: {rows} rows at {row_rate:,.0f} rows/s{extra}", flush=True)
    for n, figures in alone:
        print(f"{name:<11}   add_links alone, {n:2d} thread(s) on one connection: "
              f"{figures['rows_per_s']:8.0f} link rows/s   CPU per link row: server "
              f"{figures['server_us']:5.1f} us, client {figures['client_us']:5.1f} us",
              flush=True)


def temporary_pg_schema(admin_url: str):
    import psycopg2

    schema = f"bench_{uuid.uuid4().hex[:8]}"
    conn = psycopg2.connect(admin_url)
    conn.autocommit = True
    conn.cursor().execute(f'CREATE SCHEMA "{schema}"')
    separator = "&" if "?" in admin_url else "?"
    return conn, schema, f"{admin_url}{separator}options=-csearch_path%3D{schema}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/postgres",
                        help="PostgreSQL database to benchmark in (a temporary schema); '' to skip")
    parser.add_argument("--only", choices=("sqlite", "postgresql"), default=None,
                        help="measure one backend only")
    parser.add_argument("--threads", type=int, default=8,
                        help="add_links alone from 1 and from this many threads on one store")
    parser.add_argument("--label", default="", help="a word printed before each line")
    parser.add_argument("--batch", type=int, default=1,
                        help="pages per write in the crawl, as a worker with fetch_batch N "
                             "writes them (needs write_pages: not in checkouts before it)")
    args = parser.parse_args()
    prefix = f"{args.label} " if args.label else ""
    if args.only in (None, "sqlite"):
        with tempfile.TemporaryDirectory() as workdir:
            run(f"{prefix}sqlite", f"sqlite:///{Path(workdir).resolve()}/crawl.db", args.pages,
                args.threads, batch=args.batch)
    if args.pg and args.only in (None, "postgresql"):
        conn, schema, url = temporary_pg_schema(args.pg)
        try:
            run(f"{prefix}postgresql", url, args.pages, args.threads, admin=(args.pg, schema),
                batch=args.batch)
        finally:
            conn.cursor().execute(f'DROP SCHEMA "{schema}" CASCADE')
            conn.close()


if __name__ == "__main__":
    main()
