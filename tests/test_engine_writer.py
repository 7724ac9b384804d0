"""One result-writer suite, run under both runners' assemblies.

``embedded``: the engine as ``jlse crawl`` builds it (SQLite, LocalFrontier, LocalHostLedger).
``distributed``: the engine as a Celery worker builds it from a registered crawl
(``CrawlContext``: PostgreSQL, RedisFrontier, RedisHostLedger). The results are written by hand
(no fetch), so each test pins what the writer does, not what the web answered.
"""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from jlse.models.redirect_waste import KNOWN_TARGET, NEW_TARGET, NO_PAGE
from jlse.models.strategies import BreadthFirst
from jlse.records import CrawlTask, FetchRecord, LinkStatus, NewLink, Outcome
from jlse.scheduler.store import open_store
from jlse.scheduler.store.base import StoreError
from jlse.settings import Settings
from jlse.workers.engine import CrawlEngine, build_engine, local_backends
from jlse.workers.pipeline import PageResult

SETTINGS = Settings(strategy="bfs", politeness_delay=0.0, obey_robots=False, max_depth=2,
                    max_pages_per_host=2, robots_unavailable_retries=1, domain_diversity=1)


@pytest.fixture(params=["embedded", "distributed"])
def engine(request, tmp_path) -> CrawlEngine:
    if request.param == "embedded":
        store = open_store(f"sqlite:///{tmp_path / 'crawl.db'}")
        frontier, ledger = local_backends(SETTINGS)
        made = build_engine(SETTINGS, store, frontier, ledger, BreadthFirst(), None)
    else:
        from jlse.workers.distributed import CrawlContext

        registry = request.getfixturevalue("registry")
        config = {"crawl_id": "w1", "settings": SETTINGS.to_dict(), "status": "running",
                  "store_url": request.getfixturevalue("pg_store_url"), "max_pages": 100}
        registry.register("w1", config, None, {})
        made = CrawlContext("w1", registry).engine
    yield made
    made.close()
    made.store.close()


def seed_and_pop(engine: CrawlEngine, url: str = "http://a.test/") -> CrawlTask:
    engine.add_seeds([url], 1.0)
    task = engine.frontier.pop()
    assert task is not None and task.url == url
    return task


def fetched(task: CrawlTask, relevance: float = 0.9, target: bool = False) -> FetchRecord:
    return FetchRecord(task.url_id, task.url, Outcome.OK, fetched_at=time.time(),
                       status_code=200, relevance=relevance, is_target=target)


def link(url: str, parent: CrawlTask, priority: float = 0.5, depth: int = 1) -> NewLink:
    return NewLink(url=url, parent_id=parent.url_id, depth=depth, priority=priority)


def status(engine: CrawlEngine, url_id: int) -> LinkStatus:
    return engine.store.get_link(url_id).status


def test_a_page_writes_its_links_its_row_and_counts(engine):
    task = seed_and_pop(engine)
    result = PageResult(task, fetch=fetched(task, target=True), cpu={"fetch": 0.001},
                        links=[link("http://a.test/1", task), link("http://b.test/1", task)])
    assert engine.write(result) == "ok"
    assert status(engine, task.url_id) is LinkStatus.FETCHED
    assert engine.store.stats().targets == 1
    counters = engine.frontier.counters()
    assert (counters["fetched"], counters["relevant"], counters["targets"]) == (1, 1, 1)
    assert counters["cpu_fetch_us"] == 1000 and "cpu_store_us" in counters
    assert len(engine.frontier) == 2 and engine.frontier.in_flight() == 0


def test_trap_filter_and_host_budget_apply_to_links(engine):
    task = seed_and_pop(engine)
    engine.ledger.fetch_counts("b.test", [])
    engine.ledger.fetch_counts("b.test", [])  # b.test's budget (2) is spent
    links = [link("http://a.test/deep", task, depth=3), link("http://b.test/2", task),
             link("http://c.test/1", task)]
    engine.write(PageResult(task, fetch=fetched(task), links=links))
    assert engine.frontier.counters()["trap_refused"] == 2
    assert engine.store.get_link_id("http://a.test/deep") is None
    assert engine.store.get_link_id("http://b.test/2") is None
    assert engine.frontier.pop().url == "http://c.test/1"


def test_checks_before_a_fetch_reject_a_spent_host(engine):
    task = seed_and_pop(engine)
    engine.ledger.fetch_counts("a.test", [])
    engine.ledger.fetch_counts("a.test", [])
    assert engine.admit(task) is False
    assert status(engine, task.url_id) is LinkStatus.REJECTED
    assert engine.frontier.counters()["rejected"] == 1 and engine.frontier.in_flight() == 0


def test_a_refused_page_is_rejected_and_not_counted(engine):
    task = seed_and_pop(engine)
    result = PageResult(task, rejected=(Outcome.ROBOTS_DISALLOWED, "disallowed by robots.txt"))
    assert engine.write(result) == "rejected"
    assert status(engine, task.url_id) is LinkStatus.REJECTED
    assert engine.frontier.counters().get("fetched", 0) == 0


def test_robots_unavailable_requeues_then_gives_up(engine):
    task = seed_and_pop(engine)
    assert engine.write(PageResult(task, requeue_after=60.0)) == "requeued"
    assert status(engine, task.url_id) is LinkStatus.QUEUED
    assert len(engine.frontier) == 1 and engine.frontier.counters()["requeued"] == 1
    assert engine.frontier.pop() is None  # the host waits out the retry time
    other = seed_and_pop(engine, "http://b.test/")
    engine.ledger.note_robots_failure("b.test")  # a second failure passes the retries (1)
    assert engine.write(PageResult(other, requeue_after=60.0)) == "rejected"
    assert status(engine, other.url_id) is LinkStatus.REJECTED


def test_a_link_found_again_raises_its_queued_priority(engine):
    first = seed_and_pop(engine)
    engine.write(PageResult(first, fetch=fetched(first), links=[
        link("http://c.test/x", first, 0.2), link("http://c.test/y", first, 0.5)]))
    second = seed_and_pop(engine, "http://b.test/")
    engine.write(PageResult(second, fetch=fetched(second),
                            links=[link("http://c.test/x", second, 0.9)]))
    assert [engine.frontier.pop().url, len(engine.frontier)] == ["http://c.test/x", 1]


def test_a_result_written_twice_counts_once(engine):
    task = seed_and_pop(engine)
    result = PageResult(task, fetch=fetched(task))
    engine.write(result)
    engine.write(replace(result, links=[]))  # a late duplicate: no longer in flight
    assert engine.frontier.counters()["fetched"] == 1


def test_a_store_failure_mid_write_leaves_the_url_queued(engine, monkeypatch):
    task = seed_and_pop(engine)

    def broken(record):
        raise StoreError("disk full")

    monkeypatch.setattr(engine.store, "record_fetch_once", broken)
    result = PageResult(task, fetch=fetched(task), links=[link("http://a.test/1", task)])
    with pytest.raises(StoreError):
        engine.write(result)
    assert status(engine, task.url_id) is LinkStatus.QUEUED  # fetched again after a restart
    assert engine.store.get_link_id("http://a.test/1") is not None  # links went first
    assert engine.frontier.counters().get("fetched", 0) == 0


def test_a_redirect_is_a_request_short_of_a_page(engine, monkeypatch):
    seen: list[tuple[str, float]] = []
    monkeypatch.setattr(engine.pipeline.strategy, "observe_request",
                        lambda url, waste: seen.append((url, waste)))
    task = seed_and_pop(engine)
    page = PageResult(task, fetch=fetched(task), links=[link("http://b.test/story-1", task),
                                                         link("http://c.test/s/1", task),
                                                         link("http://d.test/s/2", task)])
    engine.write(page)
    for short, target in (("http://c.test/s/1", "http://b.test/story-1"),
                          ("http://d.test/s/2", "http://e.test/story-2")):
        hop = next(t for t in iter(engine.frontier.pop, None) if t.url == short)
        redirect = FetchRecord(hop.url_id, hop.url, Outcome.REDIRECT, fetched_at=time.time(),
                               status_code=301)
        engine.write(PageResult(hop, fetch=redirect,
                                links=[replace(link(target, hop), redirect_hops=1)]))
    assert seen == [("http://a.test/", 0.0), ("http://c.test/s/1", KNOWN_TARGET),
                    ("http://d.test/s/2", NEW_TARGET)]


def test_a_failed_request_gives_no_page(engine, monkeypatch):
    seen: list[tuple[str, float]] = []
    monkeypatch.setattr(engine.pipeline.strategy, "observe_request",
                        lambda url, waste: seen.append((url, waste)))
    task = seed_and_pop(engine)
    engine.write(PageResult(task, fetch=fetched(task), links=[link("http://b.test/missing/1", task),
                                                               link("http://b.test/slow", task)]))
    for url, outcome, code in (("http://b.test/missing/1", Outcome.HTTP_ERROR, 404),
                               ("http://b.test/slow", Outcome.TIMEOUT, None)):
        hop = next(t for t in iter(engine.frontier.pop, None) if t.url == url)
        engine.write(PageResult(hop, fetch=FetchRecord(hop.url_id, hop.url, outcome,
                                                       fetched_at=time.time(), status_code=code)))
    # a timeout is the host's trouble (the host ledger's), not its URL shape's
    assert seen == [("http://a.test/", 0.0), ("http://b.test/missing/1", NO_PAGE),
                    ("http://b.test/slow", 0.0)]


def test_a_batch_writes_its_links_then_its_pages_then_ends_each(engine):
    engine.add_seeds(["http://a.test/", "http://b.test/", "http://c.test/"], 1.0)
    tasks = [engine.frontier.pop() for _ in range(3)]
    fetch, refused, retried = sorted(tasks, key=lambda task: task.url)
    results = [
        PageResult(fetch, fetch=fetched(fetch, target=True),
                   links=[link("http://d.test/1", fetch, 0.2), link("http://e.test/2", fetch)]),
        PageResult(refused, rejected=(Outcome.ROBOTS_DISALLOWED, "disallowed by robots.txt")),
        PageResult(retried, retry_in=0.0, links=[link("http://d.test/1", retried, 0.9)]),
    ]
    assert engine.write_batch(results) == ["ok", "rejected", "retried"]
    assert [status(engine, task.url_id) for task in (fetch, refused, retried)] == \
        [LinkStatus.FETCHED, LinkStatus.REJECTED, LinkStatus.QUEUED]
    counters = engine.frontier.counters()
    assert (counters["fetched"], counters["rejected"], counters["retried"]) == (1, 1, 1)
    assert engine.store.stats().targets == 1
    # a URL two pages of the batch found is queued once, at the higher priority
    assert engine.store.get_link(engine.store.get_link_id("http://d.test/1")).priority == 0.9
    popped = {engine.frontier.pop().url for _ in range(3)}
    assert popped == {"http://d.test/1", "http://e.test/2", "http://c.test/"}
    assert engine.frontier.pop() is None


def spy(monkeypatch, target: object, name: str) -> list[tuple]:
    """The positional arguments of every call of ``target.name`` from now on."""
    calls: list[tuple] = []
    inner = getattr(target, name)

    def wrapped(*args, **kwargs):
        calls.append(args)
        return inner(*args, **kwargs)

    monkeypatch.setattr(target, name, wrapped)
    return calls


def test_a_batch_pushes_its_links_once_and_reads_and_ends_each_page(engine, monkeypatch):
    """The frontier's requests of a batch (what ``bench_frontier_scale.py --fetch-batch``
    simulates): every page's links merged in one push, the host ledger read per page, each
    URL ended once."""
    engine.add_seeds(["http://a.test/", "http://b.test/", "http://c.test/"], 1.0)
    tasks = [engine.frontier.pop() for _ in range(3)]
    pushes = spy(monkeypatch, engine.frontier, "add_discovered")
    reads = spy(monkeypatch, engine.ledger, "fetch_counts")
    ends = spy(monkeypatch, engine.frontier, "finish")
    results = [PageResult(task, fetch=fetched(task),
                          links=[link(f"http://d.test/{i}", task, 0.1 * i),
                                 link("http://e.test/menu", task, 0.1 * i)])
               for i, task in enumerate(tasks, 1)]
    assert engine.write_batch(results) == ["ok", "ok", "ok"]
    assert len(pushes) == 1
    pushed = {pushed_task.url: pushed_task.priority for pushed_task in pushes[0][0]}
    assert len(pushes[0][0]) == len(pushed) == 4  # the menu link once, at its best priority
    assert pushed["http://e.test/menu"] == pytest.approx(0.3)
    assert len(reads) == 3
    assert sorted(end[0].url for end in ends) == sorted(task.url for task in tasks)


def test_a_store_failure_on_a_batch_leaves_every_page_queued(engine, monkeypatch):
    engine.add_seeds(["http://a.test/", "http://b.test/"], 1.0)
    tasks = [engine.frontier.pop() for _ in range(2)]

    def broken(records, rejects=()):
        raise StoreError("disk full")

    monkeypatch.setattr(engine.store, "write_pages", broken)
    with pytest.raises(StoreError):
        engine.write_batch([PageResult(task, fetch=fetched(task),
                                       links=[link(task.url + "x", task)]) for task in tasks])
    assert {status(engine, task.url_id) for task in tasks} == {LinkStatus.QUEUED}
    assert engine.store.get_link_id("http://a.test/x") is not None  # links went first
    assert engine.frontier.counters().get("fetched", 0) == 0
