"""PostgreSQL's partitioned links (schema 3, scheduler/store/partitions.py), opt-in through
JLSE_LINK_PARTITIONS: where rows land, what ids look like, lookups by id and by URL, collisions,
the plans of the hot statements; a new database without the variable is schema 2, as before,
a bad value is refused, and an existing database keeps its layout."""

from __future__ import annotations

import logging
import re

import pytest
from test_store_postgres import plant_collision, sql

from jlse.errors import EXIT_USAGE
from jlse.errors import explain as explain_error
from jlse.records import FetchRecord, LinkStatus, NewLink, Outcome
from jlse.scheduler.store import open_store
from jlse.scheduler.store.base import StoreError
from jlse.scheduler.store.partitions import LINK_PARTITIONS, PARTITIONS_ENV
from jlse.scheduler.store.pg_writes import add_links_sql, group_params, link_params
from jlse.scheduler.store.postgres import _RECORD_ONCE_SQL, url_fingerprint

MASK = LINK_PARTITIONS - 1


@pytest.fixture()
def part_url(pg_partitioned_store_url: str) -> str:
    """A crawl database made with JLSE_LINK_PARTITIONS=16 (conftest)."""
    return pg_partitioned_store_url


def new(url: str, parent_id: int | None = None, priority: float = 1.0) -> NewLink:
    return NewLink(url=url, parent_id=parent_id, depth=0 if parent_id is None else 1,
                   priority=priority)


def fetched(url_id: int, target: bool = False) -> FetchRecord:
    return FetchRecord(url_id=url_id, url="", outcome=Outcome.OK, fetched_at=1000.0,
                       status_code=200, relevance=0.7, is_target=target, title="t")


def urls_of_partition(part: int, count: int) -> list[str]:
    found, n = [], 0
    while len(found) < count:
        url = f"http://p.test/{n}"
        if url_fingerprint(url) & MASK == part:
            found.append(url)
        n += 1
    return found


def partitions_in(plan: str) -> set[str]:
    return set(re.findall(r"\blinks_p\d+\b", plan))


def test_a_database_made_with_partitions_is_split_by_the_fingerprint(part_url):
    with open_store(part_url) as store:
        assert (store.schema_version, store.layout.partitions) == ("3", LINK_PARTITIONS)
        answers = store.add_links([new(f"http://h{n % 7}.test/{n}") for n in range(400)])
    rows = sql(part_url, "SELECT tableoid::regclass::text, id, part, url_fp, url FROM links")
    assert len(rows) == 400 == len({link_id for link_id, _ in answers})
    assert len({table for table, *_ in rows}) == LINK_PARTITIONS
    for table, link_id, part, fp, url in rows:
        assert fp == url_fingerprint(url) and part == fp & MASK == link_id & MASK
        assert table == f"links_p{part}"
    [(kind,)] = sql(part_url, "SELECT relkind::text FROM pg_class WHERE oid = 'links'::regclass")
    assert kind == "p"


def test_ids_come_from_the_sequence_with_the_partition_in_their_low_bits(part_url):
    with open_store(part_url) as store:
        answers = store.add_links([new(f"http://s.test/{n}") for n in range(50)])
    ids = [link_id for link_id, _ in answers]
    assert sorted(link_id // LINK_PARTITIONS for link_id in ids) == list(range(1, 51))
    assert all(0 < link_id < 2 ** 63 for link_id in ids)


def test_lookups_by_id_and_by_url_give_the_same_row(part_url):
    with open_store(part_url) as store:
        [(root, _)] = store.add_links([new("http://a.test/")])
        answers = store.add_links([new(f"http://a.test/{n}", root) for n in range(40)])
        for n, (link_id, created) in enumerate(answers):
            assert created and store.get_link_id(f"http://a.test/{n}") == link_id
            link = store.get_link(link_id)
            assert (link.url, link.parent_id) == (f"http://a.test/{n}", root)
        assert store.get_link(root + LINK_PARTITIONS * 1000) is None
    with open_store(part_url, read_only=True) as reader:
        assert reader.get_link(answers[7][0]).url == "http://a.test/7"


def test_a_url_added_twice_and_a_collision_are_one_row_each(part_url):
    with open_store(part_url) as store:
        [(first, created)] = store.add_links([new("http://twice.test/", priority=0.2)])
        assert created
        assert store.add_links([new("http://twice.test/", priority=0.6)] * 2) == \
            [(first, False), (first, False)]
    other = plant_collision(part_url, "http://c.test/")
    with open_store(part_url) as store:
        [(c_id, created)] = store.add_links([new("http://c.test/")])
        assert created and c_id != other
        assert store.add_links([new("http://c.test/")]) == [(c_id, False)]
        assert store.get_link_id("http://c.test/") == c_id
    probe_fp = url_fingerprint("http://c.test/", 1)
    [(part, fp, table)] = sql(part_url, "SELECT part, url_fp, tableoid::regclass::text "
                              "FROM links WHERE id = %s", (c_id,))
    assert (fp, part, table) == (probe_fp, probe_fp & MASK, f"links_p{probe_fp & MASK}")
    assert c_id & MASK == part
    [(rows,)] = sql(part_url, "SELECT count(*) FROM links WHERE url IN "
                    "('http://twice.test/', 'http://c.test/')")
    assert rows == 2


def test_add_links_reads_each_partitions_known_rows_in_that_partition_only(part_url):
    urls = urls_of_partition(5, 6)
    with open_store(part_url) as store:
        store.add_links([new(url) for url in urls[:3]])
        layout, sequence = store.layout, store._id_sequence
    by_fp = {url_fingerprint(url): new(url) for url in urls}
    groups = layout.groups(by_fp)
    assert list(groups) == [5]
    plan = explain(part_url, add_links_sql(layout, tuple(groups)),
                   {**link_params(by_fp, 0.0, sequence), **group_params(groups)})
    assert partitions_in(plan) == {"links_p5"}, plan
    mixed = {url_fingerprint(url): new(url) for url in ("http://x.test/1", "http://y.test/2")}
    groups = layout.groups(mixed)
    plan = explain(part_url, add_links_sql(layout, tuple(groups)),
                   {**link_params(mixed, 0.0, sequence), **group_params(groups)})
    for branch in plan.split("->  Index Scan")[1:]:  # one partition per branch
        assert len(partitions_in(branch)) == 1, plan
    assert partitions_in(plan) == {f"links_p{part}" for part in groups}


def test_a_fetch_by_id_touches_its_partition_only(part_url):
    with open_store(part_url) as store:
        [(link_id, _)] = store.add_links([new("http://f.test/")])
        layout = store.layout
    params = {"id": link_id, "part": layout.part(link_id), "at": 1.0, "relevance": 0.5,
              "target": 1, "title": "", "status": 200, "type": "", "bytes": 1, "elapsed": 0.1,
              "outcome": "ok", "final": "", "error": "", "now": 1.0, "wfile": "",
              "woffset": 0, "wlength": 0}
    plan = explain(part_url, layout.sql(_RECORD_ONCE_SQL), params)
    assert partitions_in(plan) == {f"links_p{link_id & MASK}"}, plan
    plan = explain(part_url, layout.sql("SELECT * FROM links WHERE id = %s AND part = %s"),
                   (link_id, link_id & MASK))
    assert partitions_in(plan) == {f"links_p{link_id & MASK}"}, plan


def test_a_missing_link_is_refused_without_a_foreign_key(part_url):
    with open_store(part_url) as store:
        [(link_id, _)] = store.add_links([new("http://m.test/")])
        with store.autocommit(), pytest.raises(Exception, match="no link with id"):
            store.record_fetch_once(fetched(link_id + LINK_PARTITIONS))
        assert store.stats().outcomes == {}
        assert store.record_fetch_once(fetched(link_id, target=True))
        assert store.result_count() == 1


@pytest.mark.parametrize("layout", ["unpartitioned", "partitioned"])
def test_a_batch_with_a_missing_link_writes_nothing(layout, request):
    url = request.getfixturevalue("pg_store_url" if layout == "unpartitioned" else "part_url")
    with open_store(url) as store:
        [(link_id, _)] = store.add_links([new("http://w.test/")])
        missing = link_id + LINK_PARTITIONS
        with pytest.raises(StoreError):  # a foreign key, or the statement's own check
            store.write_pages([fetched(link_id), fetched(missing)])
        assert store.stats().outcomes == {}  # the batch is all or none
        with store.autocommit(), pytest.raises(StoreError):
            store.record_fetch_once(fetched(missing))
        assert store.stats().outcomes == {}
        assert store.write_pages([fetched(link_id)]) == [True]


def test_a_new_database_is_unpartitioned_by_default(pg_store_url, monkeypatch):
    monkeypatch.delenv(PARTITIONS_ENV, raising=False)
    with open_store(pg_store_url) as store:
        assert (store.schema_version, store.layout.partitions) == ("2", 1)
        answers = store.add_links([new(f"http://old.test/{n}") for n in range(5)])
        ids = [link_id for link_id, _ in answers]
        assert ids == [1, 2, 3, 4, 5]  # the sequence as before: ids a crawl handed out stay
        assert store.add_links([new("http://old.test/2", priority=2.0)]) == [(3, False)]
        assert store.get_link_id("http://old.test/3") == 4
        with store.autocommit():
            assert store.record_fetch_once(fetched(1, target=True))
        assert store.write_pages([fetched(2)], [(3, Outcome.TRAP, "x")]) == [True]
        store.defer_pushes(0, [4])
        assert [link.id for link in store.deferred_pushes(0, 10)] == [4]
        assert len(store.learning_graph(dead_ends=True)) == 2
    with open_store(pg_store_url, read_only=True) as reader:
        assert reader.get_link(1).status is LinkStatus.FETCHED
        assert [row["url"] for row in reader.export_rows(None)] == \
            ["http://old.test/0", "http://old.test/1"]
    [(kind,)] = sql(pg_store_url, "SELECT relkind::text FROM pg_class WHERE oid = 'links'::regclass")
    columns = {name for (name,) in sql(pg_store_url, "SELECT column_name FROM "
                                       "information_schema.columns WHERE table_name = 'links' "
                                       "AND table_schema = current_schema()")}
    assert kind == "r" and "part" not in columns
    assert sql(pg_store_url, "SELECT key, value FROM meta ORDER BY key") == [("schema_version", "2")]
    keys = sql(pg_store_url, "SELECT conrelid::regclass::text FROM pg_constraint WHERE contype = "
               "'f' AND connamespace = current_schema()::regnamespace ORDER BY 1")
    assert keys == [("deferred_pushes",), ("fetches",), ("results",)]  # schema 2's, as before


@pytest.mark.parametrize("asked", ["0", ""])
def test_zero_or_empty_asks_for_no_partitions(pg_store_url, monkeypatch, asked):
    monkeypatch.setenv(PARTITIONS_ENV, asked)
    with open_store(pg_store_url) as store:
        assert (store.schema_version, store.layout.partitions) == ("2", 1)


def test_asked_partitions_make_a_partitioned_database(pg_store_url, monkeypatch):
    monkeypatch.setenv(PARTITIONS_ENV, "4")
    with open_store(pg_store_url) as store:
        assert (store.schema_version, store.layout.partitions) == ("3", 4)
        answers = store.add_links([new(f"http://four.test/{n}") for n in range(40)])
    assert {link_id & 3 for link_id, _ in answers} == {0, 1, 2, 3}
    assert sql(pg_store_url, "SELECT key, value FROM meta ORDER BY key") == \
        [("link_partitions", "4"), ("schema_version", "3")]
    tables = sql(pg_store_url, "SELECT relid::text FROM pg_partition_tree('links') WHERE isleaf "
                 "ORDER BY 1")
    assert tables == [(f"links_p{part}",) for part in range(4)]


@pytest.mark.parametrize("asked", ["3", "1", "512", "-4", "16x", "many", "0x10"])
def test_a_bad_value_is_refused_in_one_line_naming_the_variable(pg_store_url, monkeypatch, asked):
    monkeypatch.setenv(PARTITIONS_ENV, asked)
    with pytest.raises(ValueError) as refused:
        open_store(pg_store_url)
    code, message = explain_error(refused.value)  # what `jlse` prints, without a traceback
    assert code == EXIT_USAGE and "\n" not in message
    assert message.startswith(f"{PARTITIONS_ENV}={asked!r}: use 0") and "from 2 to 256" in message
    assert sql(pg_store_url, "SELECT to_regclass('links') IS NULL") == [(True,)]  # nothing made


def test_an_existing_database_keeps_its_layout_and_says_so(pg_store_url, monkeypatch, caplog):
    monkeypatch.delenv(PARTITIONS_ENV, raising=False)
    open_store(pg_store_url).close()
    monkeypatch.setenv(PARTITIONS_ENV, "16")
    with caplog.at_level(logging.INFO, logger="jlse.scheduler.store"):
        with open_store(pg_store_url) as store:
            assert (store.schema_version, store.layout.partitions) == ("2", 1)
    said = [record.getMessage() for record in caplog.records if PARTITIONS_ENV in record.getMessage()]
    assert len(said) == 1 and "changes nothing" in said[0] and "unpartitioned" in said[0]
    assert sql(pg_store_url, "SELECT relkind::text FROM pg_class WHERE oid = 'links'::regclass") \
        == [("r",)]


def test_a_partitioned_database_keeps_its_count(part_url, monkeypatch, caplog):
    monkeypatch.setenv(PARTITIONS_ENV, "64")
    with open_store(part_url) as store:
        assert (store.schema_version, store.layout.partitions) == ("3", LINK_PARTITIONS)
    assert any("16 partitions" in record.getMessage() for record in caplog.records)
    monkeypatch.setenv(PARTITIONS_ENV, str(LINK_PARTITIONS))
    caplog.clear()
    open_store(part_url).close()  # what it was made with: nothing to say
    assert not [record for record in caplog.records if PARTITIONS_ENV in record.getMessage()]


def test_read_only_opens_and_sqlite_do_not_read_the_variable(pg_store_url, monkeypatch, tmp_path):
    open_store(pg_store_url).close()
    monkeypatch.setenv(PARTITIONS_ENV, "bad")
    with open_store(pg_store_url, read_only=True) as reader:
        assert reader.layout.partitions == 1
    with open_store(f"sqlite:///{tmp_path}/crawl.db") as store:
        assert store.schema_version == "1"


def explain(url: str, statement: str, params: object) -> str:
    return "\n".join(row[0] for row in sql(url, "EXPLAIN " + statement, params))
