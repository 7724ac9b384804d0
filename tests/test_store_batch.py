"""The pages of a batch written together (``write_pages``) and the batch statements' array
literals (``scheduler/store/pg_writes.py``), on real SQLite and PostgreSQL."""

from __future__ import annotations

import math
import time

import psycopg2
import pytest

from jlse.records import FetchRecord, LinkStatus, NewLink, Outcome
from jlse.scheduler.store import open_store
from jlse.scheduler.store.base import StoreError
from jlse.scheduler.store.pg_writes import STAGED_MIN_ROWS, number_array, text_array
from jlse.scheduler.store.sql import clean_text, clean_texts


def fetched(url_id: int, target: bool = False, title: str = "") -> FetchRecord:
    return FetchRecord(url_id, "", Outcome.OK, fetched_at=time.time(), status_code=200,
                       relevance=0.7, is_target=target, title=title, content_type="text/html",
                       warc_file="a.warc.gz", warc_offset=10, warc_length=20)


def seeds(store, count: int) -> list[int]:
    links = [NewLink(f"http://s{n}.test/", None, 0) for n in range(count)]
    return [link_id for link_id, _ in store.add_links(links)]


def test_write_pages_writes_fetches_and_rejects(store):
    ids = seeds(store, 4)
    store.record_fetch_once(fetched(ids[2]))  # written meanwhile by another worker
    written = store.write_pages([fetched(ids[0], target=True), fetched(ids[1]), fetched(ids[2])],
                                [(ids[3], Outcome.ROBOTS_DISALLOWED, "disallowed")])
    # SQLite, owned by one process, is never written meanwhile: it says True
    assert written == [True, True, store.dialect == "sqlite"]
    assert [store.get_link(i).status for i in ids] == [LinkStatus.FETCHED] * 3 + \
        [LinkStatus.REJECTED]
    stats = store.stats()
    assert (stats.targets, stats.fetched, stats.rejected) == (1, 3, 1)
    assert stats.outcomes == {"ok": 4, "robots_disallowed": 1}  # a history row per call
    assert store.write_pages([]) == []


def _xmins(url: str, table: str, column: str, ids: list[int]) -> set[int]:
    conn = psycopg2.connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT xmin::text FROM {table} WHERE {column} = ANY(%s)", (ids,))
            return {row[0] for row in cur.fetchall()}
    finally:
        conn.close()


def test_postgresql_writes_a_batch_in_one_transaction(pg_store_url):
    with open_store(pg_store_url) as store:
        ids = seeds(store, 5)
        store.write_pages([fetched(i, target=True) for i in ids[:4]],
                          [(ids[4], Outcome.TRAP, "host page budget spent")])
    links = _xmins(pg_store_url, "links", "id", ids)
    history = _xmins(pg_store_url, "fetches", "url_id", ids)
    results = _xmins(pg_store_url, "results", "url_id", ids)
    assert len(links) == 1 and links == history == results


def test_postgresql_batch_is_all_or_nothing(pg_store_url):
    with open_store(pg_store_url) as store:
        ids = seeds(store, 3)
        with pytest.raises(StoreError):  # no such link: its history row fails its key
            store.write_pages([fetched(ids[0]), fetched(ids[1]), fetched(10**12)])
        with pytest.raises(StoreError):
            store.write_pages([fetched(ids[0])], [(10**12, Outcome.TRAP, "x")])
        assert {store.get_link(i).status for i in ids} == {LinkStatus.QUEUED}
        assert store.stats().outcomes == {}
        with store.autocommit():  # inside autocommit() too: still one transaction
            with pytest.raises(StoreError):
                store.write_pages([fetched(ids[2])], [(10**12, Outcome.TRAP, "x")])
        assert store.get_link(ids[2]).status is LinkStatus.QUEUED


AWKWARD = ['a "quoted" \\ back\\slash', "{braces}, commas", "", "NULL", "new\nline\ttab",
           "体育新闻 ünïcode", "'single'", "\\", '"', "trailing space "]


def test_batch_literals_keep_every_value(store):
    links = [NewLink(f"http://x.test/{n}?q=\"{n}\"&b=\\", None, n, anchor_text=text,
                     context=text[::-1], priority=priority)
             for n, (text, priority) in enumerate(zip(AWKWARD, [0.1, 1e-300, 1e300, -0.0, 0.5,
                                                                1 / 3, 2.0, 7.0, 0.25, 9.5],
                                                      strict=True))]
    ids = [link_id for link_id, _ in store.add_links(links)]
    for link_id, link in zip(ids, links, strict=True):
        stored = store.get_link(link_id)
        assert (stored.url, stored.anchor_text, stored.context, stored.depth) == \
            (link.url, link.anchor_text, link.context, link.depth)
        assert stored.priority == link.priority
    [(child, _)] = store.add_links([NewLink("http://y.test/", ids[0], 1, priority=math.inf)])
    assert store.get_link(child).parent_id == ids[0]
    assert store.get_link(child).priority == math.inf
    titles = store.write_pages([fetched(link_id, title=text)
                                for link_id, text in zip(ids, AWKWARD, strict=True)])
    assert all(titles)
    assert [store.get_link(link_id).title for link_id in ids] == AWKWARD


def test_array_literals_refuse_a_nul_and_keep_empty_values():
    assert text_array([]) == "{}"
    assert text_array([""]) == '{""}'
    assert text_array(iter(["a", "", 'q"\\'])) == '{"a","","q\\"\\\\"}'
    with pytest.raises(ValueError, match="NUL"):
        text_array(["a\x00b"])
    assert number_array([1, 0.5, None, True, math.inf]) == "{1,0.5,NULL,1,inf}"


def test_clean_text_drops_nuls_and_lone_surrogates():
    assert clean_text("plain") == "plain" and clean_text(None) == ""
    assert clean_text("a\x00b") == "ab"
    assert clean_text("体\x00育\ud800") == "体育?"


def _staged_table(store) -> bool:
    """Whether the store's session holds the COPY staging table (a batch went by COPY)."""
    with store._conn.cursor() as cur:
        cur.execute("SELECT to_regclass('pg_temp.jlse_link_batch') IS NOT NULL")
        found = cur.fetchone()[0]
    store._conn.rollback()
    return found


def test_a_large_batch_goes_by_copy_and_keeps_every_value(pg_store_url):
    texts = AWKWARD + ["\\N", "carriage\rreturn", "tab\tand\\t", "\n"]
    with open_store(pg_store_url) as store:
        known = store.add_links([NewLink(f"http://k.test/{n}", None, 0, priority=0.5)
                                 for n in range(3)])
        store.write_pages([fetched(known[2][0])])
        assert not _staged_table(store)  # 3 links: the one autocommitted statement
        links = [NewLink(f"http://x.test/{n}\\N?q=\"{n}\"", None if n % 3 else n + 7, n % 5,
                         anchor_text=texts[n % len(texts)], context=texts[-1 - n % len(texts)],
                         priority=[0.1, 1e-300, 1e300, -0.0, math.inf, 1 / 3][n % 6],
                         pattern_run=n % 4, redirect_hops=n % 2)
                 for n in range(STAGED_MIN_ROWS + 40)]
        batch = links + [NewLink("http://k.test/0", None, 0, priority=0.9),  # rises
                         NewLink("http://k.test/1", None, 0, priority=0.1),  # stays
                         NewLink("http://k.test/2", None, 0, priority=0.9),  # fetched: stays
                         NewLink(links[5].url, None, 0, priority=2e300)]  # again, higher
        answers = store.add_links(batch)
        assert _staged_table(store)
        created = [link_id for link_id, new in answers[:len(links)]]
        assert all(new for _, new in answers[:len(links)]) and created == sorted(created)
        assert answers[len(links):] == [(known[0][0], False), (known[1][0], False),
                                        (known[2][0], False), (created[5], False)]
        for link_id, link in zip(created, links, strict=True):
            stored = store.get_link(link_id)
            assert (stored.url, stored.parent_id, stored.depth, stored.anchor_text,
                    stored.context, stored.pattern_run, stored.redirect_hops) == \
                (link.url, link.parent_id, link.depth, link.anchor_text, link.context,
                 link.pattern_run, link.redirect_hops)
            assert stored.priority == (2e300 if link is links[5] else link.priority)
            assert stored.extra["host"] == "x.test"
        assert [store.get_link(link_id).priority for link_id, _ in known] == [0.9, 0.5, 0.5]
        assert store.add_links(links) == [(link_id, False) for link_id in created]


def test_a_failed_copy_batch_leaves_the_store_usable(pg_store_url):
    with open_store(pg_store_url) as store:
        links = [NewLink(f"http://f.test/{n}", None, 0) for n in range(STAGED_MIN_ROWS)]
        with pytest.raises(StoreError, match="add_links"):  # a parent id beyond BIGINT
            store.add_links(links + [NewLink("http://f.test/bad", 2**70, 1)])
        assert store.get_link_id("http://f.test/0") is None  # nothing of it was written
        answers = store.add_links(links)
        assert all(new for _, new in answers) and store.get_link_id("http://f.test/0")


def test_clean_texts_cleans_a_column_as_clean_text_does_each_value():
    clean = ["plain", "体育", ""]
    assert clean_texts(clean) is clean  # nothing to clean: the same list, the same objects
    for dirty in (["ok", "a\x00b"], ["ok", "体\ud800"], ["ok", None], ["\ud83d", "\ude00"]):
        assert clean_texts(dirty) == [clean_text(value) for value in dirty]
