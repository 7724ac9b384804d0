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
from jlse.scheduler.store.link_text import clean_text, clean_texts
from jlse.scheduler.store.pg_writes import number_array, text_array


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


def test_clean_texts_cleans_a_column_as_clean_text_does_each_value():
    clean = ["plain", "体育", ""]
    assert clean_texts(clean) is clean  # nothing to clean: the same list, the same objects
    for dirty in (["ok", "a\x00b"], ["ok", "体\ud800"], ["ok", None], ["\ud83d", "\ude00"]):
        assert clean_texts(dirty) == [clean_text(value) for value in dirty]
