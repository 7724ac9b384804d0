"""Contract tests of the crawl database, run on both backends (SQLite file, PostgreSQL schema)."""

from __future__ import annotations

import threading
import time

import psycopg2
import pytest

from jlse.records import FetchRecord, LinkStatus, NewLink, Outcome
from jlse.scheduler.store import StoreError, open_store
from jlse.scheduler.store.sql import MAX_URL_BYTES


def new(url: str, parent_id: int | None = None, priority: float = 1.0, **kwargs) -> NewLink:
    return NewLink(url=url, parent_id=parent_id, depth=0 if parent_id is None else 1,
                   priority=priority, **kwargs)


def fetched(url_id: int, url: str = "", relevance: float | None = 0.8, **kwargs) -> FetchRecord:
    values = dict(outcome=Outcome.OK, fetched_at=1000.0 + url_id, status_code=200,
                  content_type="text/html", n_bytes=123, elapsed=0.1, relevance=relevance)
    values.update(kwargs)
    return FetchRecord(url_id=url_id, url=url, **values)


# --- add_links ---
def test_same_url_twice_is_one_row_and_priority_rises_only_while_queued(store):
    [(first_id, created)] = store.add_links([new("http://a.test/", priority=0.3)])
    assert created
    assert store.add_links([new("http://a.test/", priority=0.2)]) == [(first_id, False)]
    assert store.get_link(first_id).priority == pytest.approx(0.3)
    assert store.add_links([new("http://a.test/", priority=0.7)]) == [(first_id, False)]
    assert store.get_link(first_id).priority == pytest.approx(0.7)
    store.record_fetch(fetched(first_id))
    store.add_links([new("http://a.test/", priority=0.95)])
    assert store.get_link(first_id).priority == pytest.approx(0.7)
    assert store.stats().links == 1


def test_batch_with_duplicates_first_wins_with_max_priority(store):
    answers = store.add_links([
        new("http://z.test/", priority=0.2, anchor_text="first"),
        new("http://b.test/"),
        new("http://z.test/", priority=0.9, anchor_text="second"),
    ])
    (z_id, z_created), (b_id, b_created), (z_again, z_again_created) = answers
    assert (z_created, b_created, z_again_created) == (True, True, False)
    assert z_again == z_id != b_id
    link = store.get_link(z_id)
    assert link.anchor_text == "first"
    assert link.priority == pytest.approx(0.9)


def test_answers_follow_input_order_in_a_mixed_batch(store):
    [(old_id, _)] = store.add_links([new("http://m.test/")])
    urls = [f"http://{name}.test/" for name in "yxwm"]
    answers = store.add_links([new(url) for url in urls])
    assert [store.get_link_id(url) for url in urls] == [link_id for link_id, _ in answers]
    assert [created for _, created in answers] == [True, True, True, False]
    assert answers[3][0] == old_id


def test_known_urls_in_a_batch_of_new_ones_rise_only_while_queued_and_higher(store):
    answers = store.add_links([new(f"http://k.test/{n}", priority=0.5) for n in range(3)])
    (low, _), (high, _), (done, _) = answers
    store.record_fetch(fetched(done))
    again = store.add_links([new("http://k.test/new1", priority=0.1),
                             new("http://k.test/0", priority=0.2),
                             new("http://k.test/1", priority=0.8),
                             new("http://k.test/2", priority=0.9),
                             new("http://k.test/new2", priority=0.1)])
    assert [created for _, created in again] == [True, False, False, False, True]
    assert [link_id for link_id, _ in again[1:4]] == [low, high, done]
    assert [store.get_link(i).priority for i in (low, high, done)] == \
        pytest.approx([0.5, 0.8, 0.5])


def test_add_links_leaves_the_callers_links_as_they_were(store):
    first = new("http://c.test/a", priority=1, anchor_text="a\x00b")
    second = new("http://c.test/a", priority=0.75)
    plain = new("http://c.test/b", priority=0.25, anchor_text="体育", context="ctx")
    answers = store.add_links([first, second, plain])
    assert (first.priority, first.anchor_text, second.priority) == (1, "a\x00b", 0.75)
    assert (plain.priority, plain.anchor_text, plain.context) == (0.25, "体育", "ctx")
    link = store.get_link(answers[0][0])
    assert (link.priority, link.anchor_text) == (1.0, "ab")
    assert isinstance(link.priority, float)
    assert store.get_link(answers[2][0]).anchor_text == "体育"


def test_link_fields_and_parent_round_trip(store):
    [(root, _)] = store.add_links([new("http://a.test/")])
    [(child, _)] = store.add_links([NewLink("http://a.test/x", root, 1, "anchor", "ctx", 0.4, 2, 1)])
    link = store.get_link(child)
    assert (link.url, link.parent_id, link.depth, link.anchor_text, link.context) == (
        "http://a.test/x", root, 1, "anchor", "ctx")
    assert (link.pattern_run, link.redirect_hops, link.status) == (2, 1, LinkStatus.QUEUED)
    assert link.extra["host"] == "a.test" and link.extra["fetched_at"] is None
    assert store.get_link(child + 100) is None and store.get_link_id("http://none.test/") is None


def test_has_links(store):
    assert not store.has_links()
    store.add_links([new("http://h.test/")])
    assert store.has_links()


def test_empty_batch_and_overlong_url(store):
    assert store.add_links([]) == []
    with pytest.raises(StoreError, match="longer than"):
        store.add_links([new("http://a.test/ok"), new("http://a.test/" + "x" * MAX_URL_BYTES)])
    assert store.get_link_id("http://a.test/ok") is None  # nothing of the batch was written
    assert store.add_links([new("http://a.test/ok")])[0][1]


# --- fetches, rejects, results ---
def test_record_fetch_updates_link_history_and_results(store):
    [(page, _), (target, _)] = store.add_links([new("http://a.test/"), new("http://a.test/d")])
    store.record_fetch(fetched(page, relevance=0.4, title="Index"))
    store.record_fetch(fetched(target, relevance=0.9, is_target=True, title="Detail"))
    link = store.get_link(target)
    assert (link.status, link.relevance, link.is_target, link.title) == (
        LinkStatus.FETCHED, pytest.approx(0.9), True, "Detail")
    assert link.extra["fetched_at"] == pytest.approx(1000.0 + target)
    assert store.get_link(page).is_target is False
    assert store.result_count() == 1
    store.record_fetch(fetched(target, relevance=0.9, is_target=True))
    assert store.result_count() == 1
    assert store.stats().outcomes == {"ok": 3}


def test_record_fetch_of_unknown_link_is_a_store_error_and_writes_nothing(store):
    with pytest.raises(StoreError, match="no link with id 4242"):
        store.record_fetch(fetched(4242, is_target=True))
    assert store.stats().outcomes == {} and store.result_count() == 0
    store.set_meta("still", "works")
    assert store.get_meta("still") == "works"


def test_reject_and_requeue(store):
    [(link_id, _)] = store.add_links([new("http://a.test/private")])
    store.reject(link_id, Outcome.ROBOTS_DISALLOWED, "disallowed by robots.txt")
    assert store.get_link(link_id).status == LinkStatus.REJECTED
    stats = store.stats()
    assert (stats.rejected, stats.queued, stats.outcomes) == (1, 0, {"robots_disallowed": 1})
    store.requeue(link_id)
    assert store.get_link(link_id).status == LinkStatus.QUEUED
    with pytest.raises(StoreError):
        store.requeue(link_id + 1000)


# --- reading ---
def add_many(store, count: int) -> list[int]:
    return [i for i, _ in store.add_links([new(f"http://h{n % 3}.test/{n}") for n in range(count)])]


def test_iter_links_orders_by_id_and_filters_status_across_batches(store):
    ids = add_many(store, 25)
    for link_id in ids[::3]:
        store.record_fetch(fetched(link_id))
    assert [link.id for link in store.iter_links(batch=4)] == sorted(ids)
    assert [link.id for link in store.iter_links(LinkStatus.FETCHED, batch=4)] == ids[::3]
    queued = [link.id for link in store.iter_links(LinkStatus.QUEUED, batch=4)]
    assert queued == [i for i in ids if i not in ids[::3]]
    assert sorted(store.iter_urls()) == sorted(f"http://h{n % 3}.test/{n}" for n in range(25))
    with pytest.raises(ValueError):
        list(store.iter_links(batch=0))


def test_iter_links_streams_and_lets_the_caller_write_in_between(store):
    add_many(store, 10)
    seen = []
    for link in store.iter_links(LinkStatus.QUEUED, batch=3):
        seen.append(link.url)
        store.record_fetch(fetched(link.id))
        if link.url.endswith("/0"):
            store.add_links([new("http://late.test/")])  # added after the first page was read
    assert seen[-1] == "http://late.test/" and len(seen) == 11
    assert store.stats().fetched == 11


def test_host_fetch_counts(store):
    ids = add_many(store, 9)
    for link_id in ids[:5]:
        store.record_fetch(fetched(link_id))
    assert store.host_fetch_counts() == {"h0.test": 2, "h1.test": 2, "h2.test": 1}


def test_stats_and_harvest_rate(store):
    assert store.stats().harvest_rate == 0.0
    ids = add_many(store, 6)
    for link_id, relevance in zip(ids[:4], [0.9, 0.6, 0.2, None], strict=True):
        store.record_fetch(fetched(link_id, relevance=relevance, is_target=relevance == 0.9))
    store.reject(ids[4], Outcome.TRAP, "repeated segments")
    stats = store.stats()
    assert (stats.links, stats.queued, stats.fetched, stats.rejected) == (6, 1, 4, 1)
    assert (stats.relevant, stats.targets) == (2, 1)
    assert stats.harvest_rate == pytest.approx(0.5)
    assert stats.outcomes == {"ok": 4, "trap": 1}
    assert store.stats(relevance_threshold=0.7).relevant == 1


EXPORT_ROW_KEYS = ("url", "title", "relevance", "is_target", "depth", "fetched_at", "status_code",
                   "content_type", "parent_url", "outcome", "final_url", "anchor_text", "context",
                   "error")


def test_export_rows_and_filters(store):
    [(root, _)] = store.add_links([new("http://a.test/")])
    kids = [i for i, _ in store.add_links([new(f"http://a.test/{n}", root) for n in range(4)])]
    store.record_fetch(fetched(root, relevance=0.7, title="Root"))
    store.record_fetch(fetched(kids[0], relevance=0.95, is_target=True, title="Target"))
    store.record_fetch(fetched(kids[1], relevance=0.1))
    store.record_fetch(fetched(kids[2], relevance=None, outcome=Outcome.HTTP_ERROR,
                               status_code=404, content_type=""))
    rows = list(store.export_rows())
    assert [row["url"] for row in rows] == ["http://a.test/", "http://a.test/0"]
    target = rows[1]
    assert {key: target[key] for key in EXPORT_ROW_KEYS} == {
        "url": "http://a.test/0", "title": "Target", "relevance": pytest.approx(0.95),
        "is_target": True, "depth": 1, "fetched_at": pytest.approx(1000.0 + kids[0]),
        "status_code": 200, "content_type": "text/html", "parent_url": "http://a.test/",
        "outcome": "ok", "final_url": "http://a.test/0", "anchor_text": "", "context": "",
        "error": ""}
    assert target["discovered_at"] > 0 and target["n_bytes"] >= 0
    assert rows[0]["parent_url"] is None
    assert [r["url"] for r in store.export_rows(targets_only=True)] == ["http://a.test/0"]
    assert [r["url"] for r in store.export_rows(min_relevance=0.8)] == ["http://a.test/0"]
    every = list(store.export_rows(min_relevance=None))
    assert len(every) == 4 and every[-1]["status_code"] == 404  # queued kids[3] excluded


def test_export_uses_the_latest_fetch(store):
    [(link_id, _)] = store.add_links([new("http://a.test/")])
    store.record_fetch(fetched(link_id, status_code=503, outcome=Outcome.HTTP_ERROR))
    store.record_fetch(fetched(link_id, status_code=200))
    [row] = store.export_rows()
    assert row["status_code"] == 200


# --- meta, text, persistence ---
def test_meta_round_trip(store):
    assert store.get_meta("strategy") is None
    assert store.get_meta("schema_version") == store.schema_version
    store.set_meta("strategy", "jlse")
    store.set_meta("strategy", "bfs")
    store.set_meta("settings", '{"名字": "体育", "cf": 150}')
    assert store.get_meta("strategy") == "bfs"
    assert store.get_meta("settings") == '{"名字": "体育", "cf": 150}'


def test_unicode_urls_and_anchors(store):
    url = "http://例子.test/新闻/体育?q=足球"
    [(link_id, _)] = store.add_links([new(url, anchor_text="中国足球新闻", context="上下文 — «ok»")])
    assert store.get_link_id(url) == link_id
    link = store.get_link(link_id)
    assert (link.url, link.anchor_text, link.context) == (url, "中国足球新闻", "上下文 — «ok»")
    assert link.extra["host"] == "例子.test"
    store.record_fetch(fetched(link_id, title="体育新闻 - 首页"))
    assert next(store.export_rows())["title"] == "体育新闻 - 首页"
    assert list(store.iter_urls()) == [url]


def test_very_long_and_dirty_strings(store):
    anchor, context = "锚" * 100_000, "context " * 60_000
    [(long_id, _), (dirty_id, _)] = store.add_links([
        new("http://a.test/long", anchor_text=anchor, context=context),
        new("http://a.test/dirty", anchor_text="nul\x00here \ud800lone"),
    ])
    link = store.get_link(long_id)
    assert link.anchor_text == anchor and link.context == context
    dirty = store.get_link(dirty_id).anchor_text
    assert "\x00" not in dirty and dirty.startswith("nulhere ")
    store.record_fetch(fetched(dirty_id, title="t\x00itle", error="e\udcff"))
    assert store.get_link(dirty_id).title == "title"


def test_reopen_finds_the_data(store_url):
    with open_store(store_url) as first:
        [(root, _)] = first.add_links([new("http://a.test/")])
        first.record_fetch(fetched(root, is_target=True))
        first.set_meta("topic", "sports")
    with open_store(store_url) as again:
        assert again.get_link(root).status == LinkStatus.FETCHED
        assert again.get_meta("topic") == "sports" and again.result_count() == 1
        [(child, created)] = again.add_links([new("http://a.test/next", root)])
        assert created and child > root


def test_schema_version_mismatch_is_refused(store_url):
    with open_store(store_url) as store:
        store.set_meta("schema_version", "999")
    with pytest.raises(StoreError, match="schema version '999'"):
        open_store(store_url)


def test_closed_store_raises(store_url):
    store = open_store(store_url)
    store.close()
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.get_meta("x")


# --- concurrency ---
def test_two_connections_adding_overlapping_links(store_url):
    urls = [f"http://c.test/{n}" for n in range(200)]
    stores = [open_store(store_url), open_store(store_url)]
    answers: list[list[tuple[int, bool]]] = [[], []]

    def work(index: int) -> None:
        order = urls if index == 0 else urls[::-1]
        for start in range(0, len(order), 20):
            answers[index] += stores[index].add_links([new(u) for u in order[start:start + 20]])

    threads = [threading.Thread(target=work, args=(i,)) for i in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    ids_first = dict(zip(urls, [i for i, _ in answers[0]], strict=True))
    ids_second = dict(zip(urls[::-1], [i for i, _ in answers[1]], strict=True))
    assert ids_first == ids_second
    assert sum(c for _, c in answers[0]) + sum(c for _, c in answers[1]) == 200
    assert stores[0].stats().links == 200
    for opened in stores:
        opened.close()


def test_readers_in_other_threads_while_writing(store):
    errors: list[BaseException] = []
    done = threading.Event()

    def read() -> None:
        try:
            while not done.is_set():
                store.stats()
                store.result_count()
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    for n in range(30):
        [(link_id, _)] = store.add_links([new(f"http://t.test/{n}")])
        store.record_fetch(fetched(link_id))
    done.set()
    reader.join(10)
    assert errors == [] and store.stats().fetched == 30


# --- opening ---
def test_unknown_scheme_names_it_and_the_supported_ones():
    with pytest.raises(ValueError, match=r"'mysql'.*sqlite://.*postgresql://"):
        open_store("mysql://root:pw@localhost/db")
    with pytest.raises(ValueError, match="file path"):
        open_store("sqlite://")


def test_sqlite_paths_relative_absolute_and_bad(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    open_store("sqlite:///rel/dir/crawl.db").close()
    assert (tmp_path / "rel" / "dir" / "crawl.db").is_file()
    open_store(f"sqlite:///{tmp_path}/abs/crawl.db").close()
    assert (tmp_path / "abs" / "crawl.db").is_file()
    (tmp_path / "junk.db").write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError, match="junk.db"):
        open_store("sqlite:///junk.db")
    (tmp_path / "afile").write_text("x")
    with pytest.raises(StoreError):
        open_store("sqlite:///afile/crawl.db")


def test_unreachable_postgresql_is_a_quick_store_error_without_password():
    started = time.monotonic()
    with pytest.raises(StoreError) as caught:
        open_store("postgresql://jlse:s3cretpw@127.0.0.1:1/crawl?password=s3cretpw")
    assert time.monotonic() - started < 10
    message = str(caught.value)
    assert "127.0.0.1" in message and "s3cretpw" not in message


def test_postgresql_reconnects_once_after_a_dropped_connection(pg_store_url):
    with open_store(pg_store_url) as store:
        store.set_meta("k", "v")
        admin = psycopg2.connect(pg_store_url)
        admin.autocommit = True
        with admin.cursor() as cur:
            cur.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE application_name = 'jlse' AND datname = current_database()")
        admin.close()
        assert store.get_meta("k") == "v"
        [(link_id, created)] = store.add_links([new("http://after.test/")])
        assert created and store.get_link(link_id).url == "http://after.test/"
