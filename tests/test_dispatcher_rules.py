"""The dispatcher's low-priority rule against a real Redis frontier (no Celery).

``Dispatcher.serve`` sends through a recording callable; the test plays the workers by
acknowledging the oldest task in flight, as a worker finishing it would. Keys live under a
private prefix, deleted afterwards.
"""

from __future__ import annotations

import os
import time

import pytest
import redis

from jlse.records import CrawlTask
from jlse.scheduler.crawl_registry import CrawlRegistry
from jlse.scheduler.dispatcher import Dispatcher
from jlse.scheduler.redis_frontier import LeasedTask, RedisFrontier
from jlse.settings import Settings, apply_overrides

REDIS_URL = os.environ.get("JLSE_TEST_REDIS", "redis://127.0.0.1:6379/0")
CRAWL = "rules1"
SLACK = 0.5
HOT = [f"http://hot.test/{i}" for i in range(4)]  # one host, priorities 1.0 .. 0.7
LOW_HOSTS = [f"low{i}.test" for i in range(6)]  # junk on many hosts, ready at once


class Recorder:
    """The dispatcher's ``send``: remembers every task and which are still in flight."""

    def __init__(self, crawl: str = CRAWL) -> None:
        self.crawl = crawl
        self.sent: list[dict] = []
        self.in_flight: list[dict] = []

    def __call__(self, crawl_id: str, task: dict) -> None:
        assert crawl_id == self.crawl
        self.sent.append(task)
        self.in_flight.append(task)


def _register(registry: CrawlRegistry, low_slots: int, hot: bool = True, crawl: str = CRAWL,
              max_pages: int = 1000, delay: float = 0.0, share: float = 1.0,
              **values) -> RedisFrontier:
    """A crawl whose low URLs are limited by ``low_slots`` alone unless ``share`` < 1."""
    settings = apply_overrides(Settings(), {
        "low_priority_slots": low_slots, "priority_slack": SLACK, "max_outstanding": 8,
        "politeness_delay": delay, "max_pages": max_pages, "low_priority_share": share,
        **values}, source="test")
    config = {"crawl_id": crawl, "settings": settings.to_dict(), "status": "running",
              "reason": "", "max_pages": settings.max_pages}
    registry.register(crawl, config, None, {})
    frontier = RedisFrontier(registry.client, registry.frontier_prefix(crawl),
                             lease_seconds=settings.lease_seconds)
    tasks = [CrawlTask(url=url, url_id=i, priority=1.0 - 0.1 * i) for i, url in enumerate(HOT)
             if hot]
    tasks += [CrawlTask(url=f"http://{host}/{n}", url_id=100 + 10 * h + n, priority=0.1)
              for h, host in enumerate(LOW_HOSTS) for n in range(2)]
    frontier.push_many(tasks)
    return frontier


def _low_in_flight(frontier: RedisFrontier, recorder: Recorder) -> int | None:
    """Tasks in flight below slack x the best queued priority; None once nothing better waits
    (the hot host's queue is empty, so no URL is "low" any more)."""
    best = frontier.best_priority()
    if best is None or best < 0.7:
        return None
    return sum(task["priority"] < SLACK * best for task in recorder.in_flight)


def _play(dispatcher: Dispatcher, recorder: Recorder, frontier: RedisFrontier) -> list[int]:
    """Serve and acknowledge until every URL was sent; the low count after each serve."""
    lows: list[int] = []
    deadline = time.monotonic() + 20
    while len(frontier) or recorder.in_flight:
        assert time.monotonic() < deadline, (recorder.sent, frontier.stats())
        dispatcher.serve(CRAWL)
        low = _low_in_flight(frontier, recorder)
        if low is not None:
            lows.append(low)
        if recorder.in_flight:
            assert frontier.ack(LeasedTask.from_dict(recorder.in_flight.pop(0)))
    return lows


def test_one_low_url_in_flight_while_better_ones_wait_for_their_host(registry):
    frontier = _register(registry, low_slots=1)
    recorder = Recorder()
    dispatcher = Dispatcher(registry, recorder)
    dispatcher.serve(CRAWL)
    # the hot host's best URL, then one junk URL in the free slot, and nothing more: the other
    # 7 slots stay free for the hot host's next URLs rather than filling with junk
    assert [task["priority"] for task in recorder.sent] == [1.0, 0.1]
    assert frontier.in_flight() == 2 and frontier.in_flight_below(0.45) == 1

    lows = _play(dispatcher, recorder, frontier)
    assert lows and max(lows) == 1, lows
    assert sorted(task["url"] for task in recorder.sent) == sorted(
        HOT + [f"http://{host}/{n}" for host in LOW_HOSTS for n in range(2)])  # none starved
    assert recorder.sent[0]["url"] == HOT[0]


def test_more_low_slots_let_more_junk_through(registry):
    """The control: the same frontier with 3 low slots has 3 junk URLs in flight."""
    frontier = _register(registry, low_slots=3)
    recorder = Recorder()
    dispatcher = Dispatcher(registry, recorder)
    dispatcher.serve(CRAWL)
    assert [task["priority"] for task in recorder.sent] == [1.0, 0.1, 0.1, 0.1]
    lows = _play(dispatcher, recorder, frontier)
    assert max(lows) == 3, lows


def test_junk_fills_every_slot_once_nothing_better_is_queued(registry):
    _register(registry, low_slots=1, hot=False)  # 0.1 is the best priority queued
    recorder = Recorder()
    Dispatcher(registry, recorder).serve(CRAWL)
    assert [task["priority"] for task in recorder.sent] == [0.1] * 6  # one per host, all ready


def test_a_host_sleeping_long_does_not_hold_the_ready_hosts_back(registry):
    """The hot host's best URL waits 10 minutes (robots.txt unavailable: released with a
    retry time): nothing better may go within LOW_AFTER_IDLE, so the junk is not "low" and
    takes every ready host at once, not one low slot and then one URL per LOW_AFTER_IDLE."""
    frontier = _register(registry, low_slots=1, share=0.1)
    hot = frontier.pop()
    assert hot.url == HOT[0] and frontier.release(hot, retry_after=600.0)
    recorder = Recorder()
    Dispatcher(registry, recorder).serve(CRAWL)
    assert [task["priority"] for task in recorder.sent] == [0.1] * len(LOW_HOSTS)


@pytest.mark.parametrize("diversity", [1, 3])
def test_rounds_follow_domain_diversity(registry, diversity):
    """The round's pops apply the frontier's soft diversity rule (the last k - 1 hosts popped
    are passed over for a host within ``priority_slack`` of the best), as ``POP`` does."""
    frontier = _register(registry, low_slots=8, hot=False, max_outstanding=1,
                         domain_diversity=diversity)
    frontier.push_many([CrawlTask(url=url, url_id=i, priority=0.9) for i, url in enumerate(HOT)]
                       + [CrawlTask(url=f"http://{h}.test/", url_id=50, priority=0.8)
                          for h in ("b", "c")])
    recorder = Recorder()
    dispatcher = Dispatcher(registry, recorder)
    for _ in range(4):
        dispatcher.serve(CRAWL)
        assert frontier.ack(LeasedTask.from_dict(recorder.in_flight.pop()))
    hosts = [task["url"].split("/")[2] for task in recorder.sent]
    if diversity == 1:
        assert hosts == ["hot.test"] * 4
    else:
        assert hosts == ["hot.test", "b.test", "c.test", "hot.test"]


class InterleavingRedis(redis.Redis):
    """Runs ``between`` once, right after the ``after``-th command: a worker acting between
    two of the dispatcher's round trips."""

    calls = 0
    after = 0
    between = None

    def execute_command(self, *args, **options):
        result = super().execute_command(*args, **options)
        self.calls += 1
        if self.calls == self.after and self.between is not None:
            self.between()
        return result


def test_budget_is_never_overshot_whenever_a_task_finishes(registry):
    """A worker finishes a task (counter bumped, lease acked) after each of the dispatcher's
    Redis commands in turn: the budget of 3 pages never gets a 4th task."""
    client = InterleavingRedis.from_url(REDIS_URL, socket_connect_timeout=5)
    spy = CrawlRegistry(client, registry.root)
    for after in range(1, 60):
        crawl = f"budget{after}"
        frontier = _register(registry, low_slots=8, hot=False, crawl=crawl, max_pages=3)
        recorder = Recorder(crawl)
        dispatcher = Dispatcher(spy, recorder)
        dispatcher.serve(crawl)
        assert len(recorder.sent) == 3  # the whole budget is in flight
        first = LeasedTask.from_dict(recorder.in_flight.pop(0))

        def finish(crawl=crawl, frontier=frontier, task=first) -> None:
            registry.bump(crawl, fetched=1)
            assert frontier.ack(task)

        client.calls, client.after, client.between = 0, after, finish
        dispatcher.serve(crawl)
        fetched = int(registry.counters(crawl)["fetched"])
        assert (len(recorder.sent), frontier.in_flight() + fetched) == (3, 3), after
        if client.calls < after:  # every point of the round was tried
            break
    else:
        pytest.fail("a dispatcher round took more than 60 Redis commands")
    client.close()


def test_low_urls_are_at_most_their_share_of_the_urls_sent(registry):
    """low_priority_share 0.25: a low URL starts only while low ones are under a quarter of
    the URLs sent, however many low slots are free (politeness does not change the share)."""
    frontier = _register(registry, low_slots=8, share=0.25, delay=0.0)
    recorder = Recorder()
    dispatcher = Dispatcher(registry, recorder)
    dispatcher.serve(CRAWL)
    assert [task["priority"] for task in recorder.sent] == [1.0, 0.1]  # 1 of 2 < 0.25 x 3
    for _ in range(3):  # the hot host's next URLs, one at a time
        hot = next(task for task in recorder.in_flight if task["priority"] >= 0.5)
        recorder.in_flight.remove(hot)
        assert frontier.ack(LeasedTask.from_dict(hot))
        dispatcher.serve(CRAWL)
    # sent: 1.0, 0.1, 0.9, 0.8, then a second low one once 1 of 4 < 0.25 x 5, then 0.7
    assert [task["priority"] for task in recorder.sent] == [1.0, 0.1, 0.9, 0.8, 0.1, 0.7]

