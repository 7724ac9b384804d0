"""Write speed of the crawl database: pages/s for record_fetch + add_links(80 links).

Each simulated page is fetched (record_fetch) and yields 80 out-links: 60 new URLs and 20
site-wide navigation links already known (as on real sites). Also times iter_links over all rows.

    python benchmarks/bench_store.py [--pages 2000] [--pg postgresql://postgres@127.0.0.1/postgres]
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from pathlib import Path

from jlse.records import FetchRecord, NewLink, Outcome
from jlse.scheduler.store import CrawlStore, open_store

NEW_PER_PAGE = 60
NAV_LINKS = 20


def crawl(store: CrawlStore, pages: int) -> float:
    """Simulated crawl of ``pages`` pages; returns pages per second."""
    nav = [NewLink(f"http://site.test/nav/{n}", None, 0, f"nav {n}") for n in range(NAV_LINKS)]
    [(page_id, _)] = store.add_links([NewLink("http://site.test/", None, 0)])
    store.add_links(nav)
    queue = [page_id]
    started = time.perf_counter()
    for page in range(pages):
        url_id = queue.pop(0)
        store.record_fetch(FetchRecord(
            url_id=url_id, url="", outcome=Outcome.OK, fetched_at=time.time(), status_code=200,
            content_type="text/html", n_bytes=20_000, elapsed=0.2, relevance=0.6,
            is_target=page % 10 == 0, title=f"page {page}"))
        links = [NewLink(f"http://site.test/p{page}/{n}", url_id, 1, f"anchor {n} 体育新闻",
                         "some context words around the link " * 3, priority=0.5)
                 for n in range(NEW_PER_PAGE)]
        answers = store.add_links(links + nav)
        queue.extend(link_id for link_id, created in answers if created)
    return pages / (time.perf_counter() - started)


def iterate(store: CrawlStore) -> tuple[int, float]:
    started = time.perf_counter()
    count = sum(1 for _ in store.iter_links())
    return count, count / (time.perf_counter() - started)


def run(name: str, url: str, pages: int) -> None:
    with open_store(url) as store:
        rate = crawl(store, pages)
        rows, row_rate = iterate(store)
    print(f"{name:<11} {rate:8.0f} pages/s   ({rate * (NEW_PER_PAGE + NAV_LINKS):8.0f} links/s)"
          f"   iter_links: {rows} rows at {row_rate:,.0f} rows/s")


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
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        run("sqlite", f"sqlite:///{Path(workdir).resolve()}/crawl.db", args.pages)
    if args.pg:
        conn, schema, url = temporary_pg_schema(args.pg)
        try:
            run("postgresql", url, args.pages)
        finally:
            conn.cursor().execute(f'DROP SCHEMA "{schema}" CASCADE')
            conn.close()


if __name__ == "__main__":
    main()
