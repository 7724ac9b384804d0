"""Server CPU and WAL per link row of add_links's writes, for layouts of PostgreSQL's links table.

Each layout gets a schema of its own (the crawl database's tables as the store creates them,
then changed as the layout says), 64 pages of links written first, then rounds: in each round
every layout writes ``--batches`` batches of ``--pages-per-batch`` pages of the bench_store
workload (per page 60 new links and 20 an earlier page found), the layouts taking turns so
the machine's load falls on each alike. Per batch and layout: CPU of the server's backend
(from /proc: server and benchmark share the machine) and WAL bytes (``pg_current_wal_lsn``)
per link row, every statement of the write counted.

Layouts:

* ``store``: the store's own schema and statement (``pg_writes.upsert_links``) on a new
  database as it makes one by default (schema 2: one unpartitioned links table, ids straight
  from the sequence);
* ``partitioned``: the same with links in 16 partitions (schema 3, what
  ``JLSE_LINK_PARTITIONS=16`` makes: ``scheduler/store/partitions.py``);
* ``arrays``: only reading the batch's arrays (``SELECT count(*) FROM unnest(...)``), the floor
  of any statement that takes them;
* ``no-host-index``: the store without ``(host, priority DESC, id)``, the index only a refill of
  spilled URLs reads;
* ``fp-id``: the link's id is its 64-bit fingerprint (no sequence, no second unique index),
  the known rows read by a second statement;
* ``fp-id-hashN``: the same, hash-partitioned on the id into N partitions (``--partitions``);
  the known rows are read one probe per key, each in its own partition (``--known-by any``:
  ``id = ANY(keys)``);
* ``from-file``: a schema-2 database written by the ``upsert_links`` of another checkout's
  ``scheduler/store/pg_writes.py`` (``--writes-from FILE``, e.g. main's before schema 3).

    python benchmarks/bench_link_layouts.py [--pg postgresql://postgres@127.0.0.1/postgres]
        [--rounds 5] [--batches 30] [--pages-per-batch 16] [--partitions 16,64] [--only a,b]
        [--insert-only] [--known-by lateral|any] [--writes-from ../prev/scheduler/store/pg_writes.py]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg2

from jlse.records import NewLink
from jlse.scheduler.store import open_store, pg_writes
from jlse.scheduler.store.partitions import LINK_PARTITIONS, PARTITIONS_ENV, LinkLayout
from jlse.scheduler.store.sql import merge_duplicates

NEW_PER_PAGE, KNOWN_LINKS, KNOWN_FROM = 60, 20, 64
INSERT_ONLY = False  # --insert-only: the fp-id layouts skip their read of the known rows

_COLUMNS = (
    "url TEXT NOT NULL, host TEXT NOT NULL DEFAULT '', parent_id BIGINT,"
    " depth INTEGER NOT NULL DEFAULT 0, anchor_text TEXT NOT NULL DEFAULT '',"
    " context TEXT NOT NULL DEFAULT '', priority DOUBLE PRECISION NOT NULL DEFAULT 0,"
    " status TEXT NOT NULL DEFAULT 'queued' CHECK (status IN ('queued', 'fetched', 'rejected')),"
    " pattern_run INTEGER NOT NULL DEFAULT 0, redirect_hops INTEGER NOT NULL DEFAULT 0,"
    " discovered_at DOUBLE PRECISION NOT NULL, fetched_at DOUBLE PRECISION,"
    " relevance DOUBLE PRECISION, is_target INTEGER NOT NULL DEFAULT 0,"
    " title TEXT NOT NULL DEFAULT ''")
_ARRAYS = ("unnest(%(fp)s::bigint[], %(url)s::text[], %(host)s::text[], %(parent)s::bigint[],"
           " %(depth)s::int[], %(anchor)s::text[], %(context)s::text[], %(priority)s::float8[],"
           " %(run)s::int[], %(hops)s::int[])")
_FP_ID_INSERT = (
    "INSERT INTO links (id, url, host, parent_id, depth, anchor_text, context, priority,"
    " pattern_run, redirect_hops, discovered_at) SELECT b.*, %(now)s::float8 FROM "
    + _ARRAYS + " AS b ORDER BY 1 ON CONFLICT (id) DO NOTHING RETURNING id")
# The fp-id layouts' read of the known rows: by default one probe per key, each in its own
# partition (a nested loop, pruned at run time); with --known-by any, id = ANY(keys), which a
# partitioned table runs in every partition with every key.
_FP_ID_KNOWN = {
    "lateral": ("SELECT l.id, l.url FROM unnest(%s::bigint[]) AS k(id) CROSS JOIN LATERAL"
                " (SELECT id, url FROM links WHERE id = k.id OFFSET 0) AS l"),
    "any": "SELECT id, url FROM links WHERE id = ANY(%s::bigint[])",
}
KNOWN_BY = "lateral"


def page_links(page: int) -> list[NewLink]:
    return [NewLink(f"http://site{page % 4}.test/p{page}/{n}", 7, 1,
                    f"anchor {n} 体育新闻", "some context words around the link " * 3,
                    priority=0.5)
            for n in range(NEW_PER_PAGE)]


def batch(first: int, pages: int) -> list[NewLink]:
    links = []
    for page in range(first, first + pages):
        links += page_links(page) + page_links(page - KNOWN_FROM)[:KNOWN_LINKS]
    return list(merge_duplicates(links).values())


def store_write(cur: Any, links: list[NewLink], sequence: str, layout: LinkLayout) -> None:
    pg_writes.upsert_links(cur, links, time.time(), sequence, layout)


def arrays_only(cur: Any, links: list[NewLink], sequence: str, layout: LinkLayout) -> None:
    by_fp = {pg_writes.url_fingerprint(link.url): link for link in links}
    cur.execute("SELECT count(*) FROM " + _ARRAYS + " AS b",
                pg_writes.link_params(by_fp, time.time(), sequence))
    cur.fetchall()


def fp_id_write(cur: Any, links: list[NewLink], sequence: str, layout: LinkLayout) -> None:
    by_fp = {pg_writes.url_fingerprint(link.url): link for link in links}
    cur.execute(_FP_ID_INSERT, pg_writes.link_params(by_fp, time.time(), sequence))
    created = {row[0] for row in cur.fetchall()}
    others = [fp for fp in by_fp if fp not in created]
    if others and not INSERT_ONLY:
        cur.execute(_FP_ID_KNOWN[KNOWN_BY], (pg_writes.number_array(others),))
        cur.fetchall()


def fp_id_ddl(partitions: int) -> list[str]:
    ddl = ["DROP TABLE links CASCADE"]
    if partitions:
        ddl.append(f"CREATE TABLE links (id BIGINT PRIMARY KEY, {_COLUMNS}) PARTITION BY HASH (id)")
        ddl += [f"CREATE TABLE links_{k} PARTITION OF links FOR VALUES WITH (MODULUS "
                f"{partitions}, REMAINDER {k}) WITH (fillfactor = 80)" for k in range(partitions)]
    else:
        ddl.append(f"CREATE TABLE links (id BIGINT PRIMARY KEY, {_COLUMNS}) WITH (fillfactor = 80)")
    ddl.append("CREATE INDEX links_host_priority_idx ON links (host, priority DESC, id)")
    return ddl


def layouts(partitions: list[int]) -> dict[str, tuple[list[str], Callable, int]]:
    """name -> (DDL after the store made its schema, write, the store's link partitions)."""
    found = {
        "store": ([], store_write, 0),
        "partitioned": ([], store_write, LINK_PARTITIONS),
        "arrays": ([], arrays_only, 0),
        "no-host-index": (["DROP INDEX links_host_priority_idx"], store_write, 0),
        "fp-id": (fp_id_ddl(0), fp_id_write, 0),
    }
    for count in partitions:
        found[f"fp-id-hash{count}"] = (fp_id_ddl(count), fp_id_write, 0)
    return found


def writes_from(path: str) -> Callable:
    """``store_write`` with the ``upsert_links`` of the pg_writes module at ``path``."""
    spec = importlib.util.spec_from_file_location("other_pg_writes", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return lambda cur, links, sequence, layout: module.upsert_links(cur, links, time.time(),
                                                                    sequence)


def backend_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def open_with_partitions(url: str, partitions: int) -> Any:
    """A new crawl database made as ``JLSE_LINK_PARTITIONS=partitions`` asks (0: the default)."""
    saved = os.environ.get(PARTITIONS_ENV)
    os.environ[PARTITIONS_ENV] = str(partitions)
    try:
        return open_store(url)
    finally:
        if saved is None:
            del os.environ[PARTITIONS_ENV]
        else:
            os.environ[PARTITIONS_ENV] = saved


class Layout:
    def __init__(self, admin: Any, pg: str, name: str, ddl: list[str], write: Callable,
                 pages: int, partitions: int) -> None:
        self.name, self.write, self.pages = name, write, pages
        self.schema = f"layout_{uuid.uuid4().hex[:8]}"
        admin.cursor().execute(f'CREATE SCHEMA "{self.schema}"')
        separator = "&" if "?" in pg else "?"
        self.store = open_with_partitions(f"{pg}{separator}options=-csearch_path%3D{self.schema}",
                                          partitions)
        self.conn = self.store._conn  # the store's own session: its sequence, its search path
        self.conn.autocommit = True
        self.cur = self.conn.cursor()
        for statement in ddl:
            self.cur.execute(statement)
        self.sequence, self.layout = self.store._id_sequence, self.store.layout
        self.server: list[float] = []
        self.wal: list[float] = []
        for first in range(-KNOWN_FROM, 0, pages):
            write(self.cur, batch(first, pages), self.sequence, self.layout)

    def measure(self, first: int, batches: int) -> None:
        work = [batch(first + self.pages * n, self.pages) for n in range(batches)]
        rows = sum(map(len, work))
        pid = self.conn.get_backend_pid()
        self.cur.execute("SELECT pg_current_wal_lsn()")
        lsn = self.cur.fetchone()[0]
        began = backend_cpu(pid)
        for links in work:
            self.write(self.cur, links, self.sequence, self.layout)
        self.server.append(1e6 * (backend_cpu(pid) - began) / rows)
        self.cur.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", (lsn,))
        self.wal.append(float(self.cur.fetchone()[0]) / rows)

    def close(self, admin: Any) -> None:
        self.store.close()
        admin.cursor().execute(f'DROP SCHEMA "{self.schema}" CASCADE')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", type=int, default=30, help="batches per layout and round")
    parser.add_argument("--pages-per-batch", type=int, default=16)
    parser.add_argument("--partitions", default="16,64",
                        help="hash partition counts of the fp-id layout ('' for none)")
    parser.add_argument("--only", default="", help="comma-separated layout names")
    parser.add_argument("--writes-from", default="",
                        help="another checkout's pg_writes.py: a layout 'from-file' writes with it")
    parser.add_argument("--known-by", choices=sorted(_FP_ID_KNOWN), default="lateral",
                        help="how the fp-id layouts read the known rows")
    parser.add_argument("--insert-only", action="store_true",
                        help="the fp-id layouts write without reading the known rows")
    args = parser.parse_args()
    global INSERT_ONLY, KNOWN_BY
    INSERT_ONLY, KNOWN_BY = args.insert_only, args.known_by
    counts = [int(n) for n in args.partitions.split(",") if n]
    chosen = layouts(counts)
    if args.writes_from:
        chosen["from-file"] = ([], writes_from(args.writes_from), 0)
    if args.only:
        chosen = {name: chosen[name] for name in args.only.split(",")}
    admin = psycopg2.connect(args.pg)
    admin.autocommit = True
    made: list[Layout] = []
    try:
        for name, (ddl, write, partitions) in chosen.items():
            made.append(Layout(admin, args.pg, name, ddl, write, args.pages_per_batch, partitions))
        first = 0
        for _ in range(args.rounds):
            for layout in made:
                layout.measure(first, args.batches)
            first += args.pages_per_batch * args.batches
        rows = args.pages_per_batch * (NEW_PER_PAGE + KNOWN_LINKS)
        print(f"{rows} link rows a batch ({args.pages_per_batch} pages), {args.batches} batches "
              f"a round, {args.rounds} rounds; per link row, round by round:")
        for layout in made:
            print(f"{layout.name:<15} server CPU {statistics.median(layout.server):5.1f} us "
                  f"(median; {' '.join(f'{x:.1f}' for x in layout.server)})   "
                  f"WAL {statistics.median(layout.wal):4.0f} B", flush=True)
    finally:
        for layout in made:
            layout.close(admin)
        admin.close()


if __name__ == "__main__":
    main()
