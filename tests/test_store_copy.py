"""PostgreSQL's add_links by COPY (scheduler/store/pg_copy.py): the new rows as written, a URL
another worker writes between the read and the COPY, and the host-hash index the rows feed."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg2
import psycopg2.extensions
import pytest

from jlse.records import NewLink
from jlse.scheduler.store import open_store
from jlse.scheduler.store.partitions import LinkLayout
from jlse.scheduler.store.pg_copy import IdReserve, copy_new_links
from jlse.scheduler.store.pg_writes import fast_hosts, upsert_links, url_fingerprints
from jlse.scheduler.store.sql import host_of

LAYOUTS = ["pg_store_url", "pg_partitioned_store_url"]
TEXT_COLUMNS = "url, host, parent_id, depth, anchor_text, context, priority, pattern_run, " \
    "redirect_hops, status"


@pytest.fixture(params=LAYOUTS)
def url(request) -> str:
    return request.getfixturevalue(request.param)


def rows(url: str, urls: list[str]) -> dict[str, tuple]:
    conn = psycopg2.connect(url)
    try:
        with conn, conn.cursor() as cur:
            cur.execute(f"SELECT id, {TEXT_COLUMNS} FROM links WHERE url = ANY(%s)", (urls,))
            return {row[1]: row for row in cur.fetchall()}
    finally:
        conn.close()


def test_new_links_are_copied_as_written_with_ids_in_input_order(url):
    links = [
        NewLink("http://a.test/tab", None, 0, "an\tanchor", "a\nline\r\nbreak", 0.25),
        NewLink("http://b.test/slash", 7, 2, "back\\slash \\N", 'quote " and \\t', 2.5,
                pattern_run=3),
        NewLink("http://例子.测试/路径?q=体育", 7, 1, "体育新闻", "", 1e-9, redirect_hops=2),
        NewLink("HTTP://C.test:8080/x", None, 0, "", "", float("inf")),
    ]
    with open_store(url) as store, store.autocommit():
        answers = store.add_links(links)
        assert store.add_links(links[:1]) == [(answers[0][0], False)]
        assert store.copy_races == 0
        partitions = store.layout.partitions
    assert all(created for _, created in answers)
    ids = [link_id for link_id, _ in answers]
    written = rows(url, [link.url for link in links])
    for link, link_id in zip(links, ids, strict=True):
        assert written[link.url] == (
            link_id, link.url, host_of(link.url), link.parent_id, link.depth, link.anchor_text,
            link.context, link.priority, link.pattern_run, link.redirect_hops, "queued")
    # ids drawn in input order (partitioned: the sequence's value is the id's high part)
    drawn = [link_id // partitions for link_id in ids]
    assert drawn == sorted(drawn) and len(set(drawn)) == len(links)


class RacingCursor(psycopg2.extensions.cursor):
    """A cursor that has another worker write ``race_url`` just before its COPY."""

    race: tuple[str, list[int]] | None = None

    def copy_expert(self, sql, file, size=8192):
        if self.race is not None:
            store_url, answer = self.race
            with open_store(store_url) as other, other.autocommit():
                answer.extend(other.add_links([NewLink(RACE_URL, None, 0)]))
        return super().copy_expert(sql, file, size)


RACE_URL = "http://race.test/b"
RACE_LINKS = [NewLink(f"http://race.test/{name}", None, 0) for name in "abc"]


@contextmanager
def racing_cursor(url: str) -> Iterator[tuple[RacingCursor, str, LinkLayout, list]]:
    """An autocommit cursor on ``url`` whose next COPY another store races (it writes
    ``RACE_URL``; its answer lands in the yielded list), with the database's id sequence and
    layout."""
    with open_store(url) as store:
        sequence, layout = store._id_sequence, store.layout
    conn = psycopg2.connect(url, cursor_factory=RacingCursor)
    conn.autocommit = True
    other: list = []
    try:
        cur = conn.cursor()
        cur.race = (url, other)
        yield cur, sequence, layout, other
    finally:
        conn.close()


def test_a_url_another_worker_writes_before_the_copy_writes_nothing_and_falls_back(url):
    with racing_cursor(url) as (cur, sequence, layout, other):
        reserve = IdReserve()
        by_fp = dict(zip(url_fingerprints([link.url for link in RACE_LINKS]), RACE_LINKS,
                         strict=True))
        assert copy_new_links(cur, by_fp, time.time(), sequence, layout, reserve) is None
        assert reserve.races == 1
        assert list(rows(url, [link.url for link in RACE_LINKS])) == [RACE_URL]  # the other's
        [(raced_id, made)] = other
        assert made

        cur.race = None  # the same batch again, as upsert_links retries it
        found = upsert_links(cur, RACE_LINKS, time.time(), sequence, layout,
                             lambda c, batch: None)
    assert found[RACE_URL] == (raced_id, False)
    assert found["http://race.test/a"][1] and found["http://race.test/c"][1]
    assert len(rows(url, [link.url for link in RACE_LINKS])) == 3


def test_a_race_inside_add_links_is_settled_by_the_one_statement_insert(url):
    reserve = IdReserve()
    with racing_cursor(url) as (cur, sequence, layout, other):
        now = time.time()
        found = upsert_links(cur, RACE_LINKS, now, sequence, layout,
                             lambda c, batch: copy_new_links(c, batch, now, sequence, layout,
                                                             reserve))
    assert reserve.races == 1
    [(raced_id, _)] = other
    assert found[RACE_URL] == (raced_id, False)
    assert sorted(made for _, made in found.values()) == [False, True, True]
    assert len(rows(url, [link.url for link in RACE_LINKS])) == 3


def test_a_hosts_queued_links_are_read_by_the_host_hash_index_or_the_old_one(pg_store_url):
    with open_store(pg_store_url) as store, store.autocommit():
        store.add_links([NewLink(f"http://{host}.test/{n}", None, 0, priority=n / 10)
                         for host in ("a", "b") for n in range(5)])
    conn = psycopg2.connect(pg_store_url)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT indexdef FROM pg_indexes WHERE indexname = "
                        "'links_host_priority_idx'")
            assert "hashtextextended(host, (0)::bigint), priority DESC, id" in cur.fetchone()[0]
            cur.execute("SET enable_seqscan = off")
            cur.execute("EXPLAIN SELECT id FROM links l WHERE hashtextextended(l.host, 0) = "
                        "hashtextextended('a.test', 0) AND l.host = 'a.test' AND "
                        "l.status = 'queued' ORDER BY l.priority DESC, l.id LIMIT 3")
            plan = " ".join(row[0] for row in cur.fetchall())
            assert "links_host_priority_idx" in plan and "Sort" not in plan
    finally:
        conn.close()
    with open_store(pg_store_url) as store:
        best = [link.url for link in store.queued_links_of_host("a.test", 3)]
    assert best == ["http://a.test/4", "http://a.test/3", "http://a.test/2"]
    # a database made before the hash index keeps (host, priority DESC, id): read the same
    conn = psycopg2.connect(pg_store_url)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("DROP INDEX links_host_priority_idx")
        cur.execute("CREATE INDEX links_host_priority_idx ON links (host, priority DESC, id)")
    conn.close()
    with open_store(pg_store_url) as store:
        assert [link.url for link in store.queued_links_of_host("a.test", 3)] == best


def test_fast_hosts_are_the_hosts_urlsplit_finds():
    urls = ["http://a.test/x", "HTTPS://B.Test/", "http://c.test:80/", "http://d.test",
            "http://e.test?x", "mailto:x@y.test", "http://[::1]/", "http://ü.test/",
            "http://user@f.test/", "//g.test/", ""]
    assert fast_hosts(urls) == [host_of(url) for url in urls]
    assert fast_hosts(["http://a.test/a\nb", "http://b.test/"]) == ["a.test", "b.test"]
    assert fast_hosts([]) == []
