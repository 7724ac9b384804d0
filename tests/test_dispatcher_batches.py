"""The dispatcher's batches (``fetch_batch`` N > 1) fill: a round holds its pops back while
fewer than N could be made, at most ``BATCH_WAIT``. Real Redis (one, or a Redis Cluster of 3
masters) under a private prefix; the test plays the workers by acknowledging leases."""

from __future__ import annotations

import time
import uuid

import pytest
from test_sharded_frontier import hosts_of_shard

from jlse.records import CrawlTask
from jlse.scheduler import dispatcher as dispatcher_module
from jlse.scheduler.crawl_registry import CrawlRegistry
from jlse.scheduler.dispatcher import BATCH_WAIT, Dispatcher
from jlse.scheduler.redis_frontier import LeasedTask
from jlse.settings import Settings, apply_overrides

CRAWL = "batches1"


class Messages:
    """The dispatcher's ``send`` and ``send_batch``: every message, and the URLs in flight."""

    def __init__(self) -> None:
        self.sizes: list[int] = []
        self.in_flight: list[dict] = []

    def one(self, crawl_id: str, task: dict) -> None:
        self.batch(crawl_id, [task])

    def batch(self, crawl_id: str, tasks: list[dict]) -> None:
        assert crawl_id == CRAWL
        self.sizes.append(len(tasks))
        self.in_flight += tasks


def _register(registry: CrawlRegistry, urls: list[str], **values):
    settings = apply_overrides(Settings(), {
        "fetch_batch": 8, "max_outstanding": 16, "politeness_delay": 0.0, "max_pages": 1000,
        "low_priority_share": 1.0, **values}, source="test")
    registry.register(CRAWL, {"crawl_id": CRAWL, "settings": settings.to_dict(),
                              "status": "running", "reason": "",
                              "max_pages": settings.max_pages}, None, {})
    frontier = registry.frontier(CRAWL)
    frontier.push_many([CrawlTask(url=url, url_id=i, priority=1 - i / 1000) for i, url in
                        enumerate(urls)])
    return frontier


def _dispatcher(registry: CrawlRegistry, messages: Messages, **kwargs) -> Dispatcher:
    return Dispatcher(registry, messages.one, send_batch=messages.batch, **kwargs)


def _ack(frontier, messages: Messages) -> None:
    assert frontier.finish(LeasedTask.from_dict(messages.in_flight.pop(0)),
                           deltas={"fetched": 1})


def _sites(count: int, prefix: str = "site") -> list[str]:
    return [f"http://{prefix}{i}.test/" for i in range(count)]


def test_acknowledgements_one_by_one_fill_whole_messages(registry, monkeypatch):
    """Many ready hosts, slots freed one at a time: a round per acknowledgement sent one URL
    a message before; now each message waits for its 8 free slots."""
    monkeypatch.setattr(dispatcher_module, "BATCH_WAIT", 5.0)  # the acks here beat any wait
    frontier = _register(registry, _sites(80))
    messages = Messages()
    dispatcher = _dispatcher(registry, messages)
    dispatcher.serve(CRAWL)
    assert messages.sizes == [8, 8]  # nothing in flight yet: no hold
    for _ in range(24):
        _ack(frontier, messages)
        dispatcher.serve(CRAWL)
    assert messages.sizes == [8, 8, 8, 8, 8]
    assert frontier.in_flight() == 16


def test_a_held_round_sends_what_it_has_after_the_wait(registry):
    """Fewer ready hosts than a batch: the round holds, tells the run loop when to come back,
    and then sends a partial batch: no stall."""
    frontier = _register(registry, _sites(11))
    messages = Messages()
    dispatcher = _dispatcher(registry, messages)
    dispatcher.serve(CRAWL)
    assert messages.sizes == [8, 3]
    frontier.push_many([CrawlTask(url=url, url_id=100 + i, priority=0.5)
                        for i, url in enumerate(_sites(3, "late"))])
    sent, wait = dispatcher.serve(CRAWL)
    assert sent == 0 and 0 < wait <= BATCH_WAIT  # 11 in flight, 3 ready: held
    time.sleep(wait)
    assert dispatcher.serve(CRAWL)[0] == 3
    assert messages.sizes == [8, 3, 3]


def test_a_restarted_dispatcher_keeps_the_hold_it_found(registry, monkeypatch):
    """The hold's start is in Redis: a second (or restarted) dispatcher neither sends what the
    first holds nor waits longer than the first would have."""
    monkeypatch.setattr(dispatcher_module, "BATCH_WAIT", 0.15)  # below IDLE_SLEEP: seen in wait
    frontier = _register(registry, _sites(11))
    messages = Messages()
    _dispatcher(registry, messages).serve(CRAWL)
    frontier.push_many([CrawlTask(url=url, url_id=100 + i, priority=0.5)
                        for i, url in enumerate(_sites(2, "late"))])
    first = _dispatcher(registry, messages)
    _, wait = first.serve(CRAWL)
    second = _dispatcher(registry, messages)
    sent, then = second.serve(CRAWL)
    assert sent == 0 and then < wait  # the first's hold, not one of its own
    time.sleep(then)
    assert second.serve(CRAWL)[0] == 2 and messages.sizes == [8, 3, 2]


def test_a_crawl_with_fewer_urls_in_flight_than_a_batch_is_not_held(registry):
    """One host, one URL in flight at a time: every round sends at once."""
    frontier = _register(registry, [f"http://one.test/{i}" for i in range(5)])
    messages = Messages()
    dispatcher = _dispatcher(registry, messages)
    for _ in range(5):
        assert dispatcher.serve(CRAWL)[0] == 1
        _ack(frontier, messages)
    assert messages.sizes == [1] * 5


def test_batches_stay_within_the_budget_and_the_crawl_ends(registry, monkeypatch):
    monkeypatch.setattr(dispatcher_module, "BATCH_WAIT", 5.0)  # the acks here beat any wait
    frontier = _register(registry, _sites(60), max_pages=29)
    messages = Messages()
    dispatcher = _dispatcher(registry, messages)
    deadline = time.monotonic() + 20
    while registry.config(CRAWL)["status"] == "running":
        assert time.monotonic() < deadline, messages.sizes
        _, wait = dispatcher.serve(CRAWL)
        assert frontier.in_flight() <= 16
        if messages.in_flight:
            _ack(frontier, messages)
        else:
            time.sleep(wait)
    assert sum(messages.sizes) == 29 and registry.counters(CRAWL)["fetched"] == 29
    assert max(messages.sizes) <= 8
    assert messages.sizes[:4] == [8, 8, 8, 5]  # the last 5 of the budget go without a wait


def test_fetch_batch_1_sends_each_url_as_it_is_freed(registry):
    """The default is not held: a round per acknowledgement sends that one URL."""
    frontier = _register(registry, _sites(40), fetch_batch=1, max_outstanding=8)
    messages = Messages()
    dispatcher = _dispatcher(registry, messages)
    dispatcher.serve(CRAWL)
    for _ in range(5):
        _ack(frontier, messages)
        assert dispatcher.serve(CRAWL)[0] == 1
    assert messages.sizes == [1] * 13


@pytest.fixture(params=["redis", "cluster"])
def shard_registry(request):
    """A registry on one Redis, or on a Redis Cluster of 3 masters (each shard on its own)."""
    if request.param == "redis":
        yield request.getfixturevalue("registry")
        return
    client = request.getfixturevalue("redis_cluster_client")
    registry = CrawlRegistry(client, f"jlsetest{uuid.uuid4().hex[:6]}:")
    yield registry
    registry.clear(CRAWL)


def test_a_dispatcher_per_shard_fills_its_messages(shard_registry, monkeypatch):
    """Three dispatchers, one per shard (as ``make cluster-up SHARDS=3``): each holds its
    shard's round until a batch of its share is free."""
    monkeypatch.setattr(dispatcher_module, "BATCH_WAIT", 5.0)
    # the shards' hosts take turns in the crawl's order: every shard has a share of the slots
    hosts = [host for trio in zip(*(hosts_of_shard(shard, 3, 30) for shard in range(3)),
                                  strict=True) for host in trio]
    frontier = _register(shard_registry, [f"http://{host}/" for host in hosts],
                         fetch_batch=4, max_outstanding=24, frontier_shards=3)
    messages = Messages()
    dispatchers = [_dispatcher(shard_registry, messages, shard_spec=f"{i}/3") for i in range(3)]
    for dispatcher in dispatchers:
        dispatcher.serve(CRAWL)
    first = len(messages.sizes)
    for _ in range(36):
        _ack(frontier, messages)
        for dispatcher in dispatchers:
            dispatcher.serve(CRAWL)
    later = messages.sizes[first:]
    assert later and set(later) == {4}, messages.sizes
    assert frontier.in_flight() <= 24
