"""The PostgreSQL crawl database beyond the shared contract: the 64-bit URL key and its
collisions, the conversion of a schema-1 database, HOT fetch updates, grouped add_links
(partitioned links: test_store_partitions.py)."""

from __future__ import annotations

import threading
import time

import psycopg2
import pytest

from jlse.records import FetchRecord, LinkStatus, NewLink, Outcome
from jlse.scheduler.store import StoreError, open_store
from jlse.scheduler.store.postgres import url_fingerprint
from jlse.scheduler.store.sql import MAX_URL_BYTES

# The columns a fetch (record_fetch, record_fetch_once) changes in links.
FETCH_COLUMNS = ("status", "fetched_at", "relevance", "is_target", "title")


def new(url: str, parent_id: int | None = None, priority: float = 1.0) -> NewLink:
    return NewLink(url=url, parent_id=parent_id, depth=0 if parent_id is None else 1,
                   priority=priority)


def fetched(url_id: int) -> FetchRecord:
    return FetchRecord(url_id=url_id, url="", outcome=Outcome.OK, fetched_at=1000.0,
                       status_code=200, relevance=0.7, title="a title")


def sql(url: str, statement: str, params: tuple = ()) -> list[tuple]:
    conn = psycopg2.connect(url)
    try:
        with conn, conn.cursor() as cur:
            cur.execute(statement, params)
            return cur.fetchall() if cur.description else []
    finally:
        conn.close()


def test_fingerprint_matches_the_sql_expression_of_the_migration(pg_store_url):
    urls = ["http://a.test/", "http://例子.测试/路径?q=体育", "https://b.test/" + "x" * 2000]
    [(computed,)] = sql(pg_store_url, "SELECT array_agg(('x' || left(md5(u), 16))::bit(64)::bigint"
                        " ORDER BY n) FROM unnest(%s::text[]) WITH ORDINALITY AS t(u, n)", (urls,))
    assert computed == [url_fingerprint(url) for url in urls]
    assert len({url_fingerprint("http://a.test/", probe) for probe in range(4)}) == 4


def plant_collision(url: str, other_url: str) -> int:
    """A row of ``other_url`` under the key of ``url``: what a 64-bit collision looks like to
    ``url`` (that row is not found by its own URL: no real collision does that). Its id."""
    fp = url_fingerprint(other_url)
    with open_store(url) as store:
        layout = store.layout
    if not layout.partitioned:
        [(other,)] = sql(url, "INSERT INTO links (url_fp, url, priority, discovered_at) "
                         "VALUES (%s, %s, 1.0, 0) RETURNING id", (fp, "http://other.test/"))
        return other
    parts, mask = layout.partitions, layout.mask
    [(other,)] = sql(url, "INSERT INTO links (id, url_fp, part, url, priority, discovered_at) VALUES "
                     "(nextval('links_id_seq') * %s + (%s & %s), %s, %s & %s, %s, 1.0, 0) RETURNING id",
                     (parts, fp, mask, fp, fp, mask, "http://other.test/"))
    return other


def test_a_url_whose_key_another_url_holds_gets_the_next_probe(pg_store_url):
    other = plant_collision(pg_store_url, "http://a.test/")
    with open_store(pg_store_url) as store:
        [(a_id, created)] = store.add_links([new("http://a.test/", priority=0.2)])
        assert created and a_id != other
        assert store.get_link_id("http://a.test/") == a_id
        assert store.add_links([new("http://a.test/", priority=0.9), new("http://b.test/")])[0] \
            == (a_id, False)
        assert store.get_link(a_id).priority == pytest.approx(0.9)
        assert store.get_link(other).priority == pytest.approx(1.0)  # left alone
    [(fp,)] = sql(pg_store_url, "SELECT url_fp FROM links WHERE id = %s", (a_id,))
    assert fp == url_fingerprint("http://a.test/", 1)


def _make_schema_1(url: str) -> int:
    """A database as jlse made it before the 64-bit key (schema version 1); a link's id."""
    with open_store(url) as store:
        [(root, _)] = store.add_links([new("http://a.test/")])
        store.add_links([new("http://a.test/child", root, priority=0.4)])
        store.record_fetch(fetched(root))
    for statement in (
        "DROP INDEX links_url_fp_key", "DROP INDEX links_host_priority_idx",
        "ALTER TABLE links DROP COLUMN url_fp",
        "ALTER TABLE links ADD CONSTRAINT links_url_key UNIQUE (url)",
        "ALTER TABLE links ADD CONSTRAINT links_parent_id_fkey FOREIGN KEY (parent_id) "
        "REFERENCES links (id)",
        "CREATE INDEX links_status_idx ON links (status, id)",
        "CREATE INDEX links_parent_idx ON links (parent_id)",
        "CREATE INDEX links_host_idx ON links (host)",
        "CREATE INDEX links_queued_host_idx ON links (host, priority DESC) "
        "WHERE status = 'queued'",
        "UPDATE meta SET value = '1' WHERE key = 'schema_version'",
    ):
        sql(url, statement)
    return root


def test_a_schema_1_database_is_refused_read_only_and_converted_by_a_writer(pg_store_url):
    root = _make_schema_1(pg_store_url)
    with pytest.raises(StoreError, match="version '1'.*open it once for writing"):
        open_store(pg_store_url, read_only=True)
    with open_store(pg_store_url) as store:
        assert store.get_meta("schema_version") == "2"
        assert store.get_link_id("http://a.test/") == root
        assert store.get_link(root).status is LinkStatus.FETCHED
        child = store.get_link_id("http://a.test/child")
        assert store.add_links([new("http://a.test/child", root, priority=0.8)]) == \
            [(child, False)]
        assert store.get_link(child).priority == pytest.approx(0.8)
        assert [link.id for link in store.queued_links_of_host("a.test", 10)] == [child]
    indexes = {name for (name,) in sql(pg_store_url, "SELECT indexname FROM pg_indexes "
                                       "WHERE tablename = 'links' AND schemaname = current_schema()")}
    assert indexes == {"links_pkey", "links_url_fp_key", "links_host_priority_idx"}
    with open_store(pg_store_url, read_only=True) as store:
        assert store.get_link_id("http://a.test/child") == child


def test_a_known_url_is_neither_locked_nor_rewritten(pg_store_url):
    with open_store(pg_store_url) as store:
        [(known, _)] = store.add_links([new("http://k.test/", priority=0.5)])
        [(version, locker)] = sql(pg_store_url, "SELECT xmin::text, xmax::text FROM links "
                                  "WHERE id = %s", (known,))
        answers = store.add_links([new("http://k.test/new"), new("http://k.test/", priority=0.2)])
        assert answers[1] == (known, False)
        # ON CONFLICT DO UPDATE locked the row (xmax set, a WAL record) even when its WHERE
        # left it alone; DO NOTHING and a read of the known rows touch nothing.
        assert sql(pg_store_url, "SELECT xmin::text, xmax::text FROM links WHERE id = %s",
                   (known,)) == [(version, locker)] == [(version, "0")]
        store.add_links([new("http://k.test/", priority=0.9)])  # a rise writes a new version
        [(risen, priority)] = sql(pg_store_url, "SELECT xmin::text, priority FROM links "
                                  "WHERE id = %s", (known,))
        assert risen != version and priority == 0.9


def test_no_index_of_links_covers_what_a_fetch_changes(pg_store_url):
    open_store(pg_store_url).close()
    rows = sql(pg_store_url, "SELECT indexdef FROM pg_indexes "
               "WHERE tablename = 'links' AND schemaname = current_schema()")
    for (definition,) in rows:
        assert not any(column in definition for column in FETCH_COLUMNS), definition


def test_fetch_updates_are_hot(pg_store_url):
    open_store(pg_store_url).close()
    # room on every page for the rows' new versions, whatever holds back the pruning of the
    # old ones (another session's snapshot): what is tested is that no indexed column changes
    sql(pg_store_url, "ALTER TABLE links SET (fillfactor = 10)")
    with open_store(pg_store_url) as store:
        answers = store.add_links([new(f"http://h.test/{n}") for n in range(50)])
        with store.autocommit():
            for link_id, _ in answers[:25]:
                assert store.record_fetch_once(fetched(link_id))
        for link_id, _ in answers[25:]:
            store.record_fetch(fetched(link_id))
    counts = (0, 0)
    for _ in range(200):  # the closed connection's counters reach the statistics shortly
        [counts] = sql(pg_store_url, "SELECT sum(n_tup_upd), sum(n_tup_hot_upd) "
                       "FROM pg_stat_user_tables WHERE relid IN (SELECT relid FROM "
                       "pg_partition_tree('links') UNION SELECT 'links'::regclass)")
        if counts[0] >= 50:
            break
        time.sleep(0.1)
    assert counts[0] == 50 and counts[1] >= 45, counts


def test_add_links_of_waiting_threads_go_in_one_write(pg_store_url):
    with open_store(pg_store_url) as store:
        [(shared, _)] = store.add_links([new("http://g.test/shared", priority=0.1)])
        results: dict[int, list] = {}

        def call(n: int) -> None:
            links = [new(f"http://g.test/{n}/{k}") for k in range(5)]
            results[n] = store.add_links([*links, new("http://g.test/shared", priority=n / 10)])

        groups = store.link_groups
        threads = [threading.Thread(target=call, args=(n,)) for n in range(6)]
        with store._lock:  # the store busy: one call leads, waiting for it; 5 queue up
            for thread in threads:
                thread.start()
            deadline = time.monotonic() + 10
            while len(store._waiting) < 5 and time.monotonic() < deadline:
                time.sleep(0.01)
        for thread in threads:
            thread.join(30)
        assert store.link_groups == groups + 2
        for n in range(6):
            ids = [store.get_link_id(f"http://g.test/{n}/{k}") for k in range(5)]
            assert results[n] == [*[(i, True) for i in ids], (shared, False)]
        assert store.get_link(shared).priority == pytest.approx(0.5)
        assert store.stats().links == 31


def test_add_links_inside_autocommit_while_other_threads_write(pg_store_url):
    with open_store(pg_store_url) as store:
        errors: list[BaseException] = []

        def call(n: int) -> None:
            try:
                for k in range(20):
                    store.add_links([new(f"http://w.test/{n}/{k}")])
            except BaseException as exc:  # pragma: no cover - shown by the assert
                errors.append(exc)

        threads = [threading.Thread(target=call, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for k in range(20):
            with store.autocommit():
                store.add_links([new(f"http://w.test/main/{k}")])
        for thread in threads:
            thread.join(30)
        assert not errors and not any(thread.is_alive() for thread in threads)
        assert store.stats().links == 100


def test_stores_adding_the_same_urls_at_once_agree_and_create_each_once(pg_store_url):
    # Two workers (a connection each) writing overlapping batches together: no deadlock, one
    # row per URL, each URL created by one of them, both given its id. A row the other
    # committed after a statement's snapshot is found by the read after the statement.
    stores = [open_store(pg_store_url) for _ in range(2)]
    answers: dict[int, list] = {0: [], 1: []}
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def write(n: int) -> None:
        try:
            start.wait(10)
            for round_ in range(30):
                urls = [f"http://s.test/{round_}/{k}" for k in range(40)]
                batch = urls if n == 0 else urls[::-1]  # the same keys, in another order
                links = [new(url, priority=0.1 + n / 10) for url in batch]
                with stores[n].autocommit():
                    answers[n] += zip(batch, stores[n].add_links(links), strict=True)
        except BaseException as exc:  # pragma: no cover - shown by the assert
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    try:
        assert not errors, errors
        ids = [{url: link_id for url, (link_id, _) in answers[n]} for n in range(2)]
        assert ids[0] == ids[1] and len(ids[0]) == 30 * 40
        created = [url for n in range(2) for url, (_, made) in answers[n] if made]
        assert sorted(created) == sorted(ids[0])
        assert stores[0].stats().links == 30 * 40
        # the higher priority of the two, whichever store inserted the row
        assert sql(pg_store_url, "SELECT count(*) FROM links WHERE priority <> 0.2") == [(0,)]
    finally:
        for store in stores:
            store.close()


def test_an_overlong_url_fails_its_own_call_not_the_group(pg_store_url):
    with open_store(pg_store_url) as store:
        too_long = "http://l.test/" + "x" * MAX_URL_BYTES
        with pytest.raises(StoreError, match="longer than the store accepts"):
            store.add_links([new(too_long)])
        assert store.add_links([new("http://l.test/ok")])[0][1]
