"""The frontier contract: one suite over ``LocalFrontier`` and ``RedisFrontier``.

Every test but the last section runs on both (``make`` builds the backend of the parameter); the
crawl engine calls only the ``Frontier`` interface, so the embedded crawl and a cluster must
behave alike. Time is a fake clock (``clock`` in conftest.py): nothing sleeps. The Redis
frontier runs on the real Redis under a private key prefix, deleted afterwards.

The last section (``REDIS ONLY: leases``) covers what exists only in a cluster: leases that
expire (``reap``), heartbeats (``renew``) and ``lease_current``.
"""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest

from jlse.records import CrawlTask
from jlse.scheduler.frontier import FAR_SKIPS, Frontier, LocalFrontier


def _builder(request, clock):
    def build(max_size: int = 100_000, diversity: int = 1, slack: float = 0.5,
              delay: float = 0.0) -> Frontier:
        if request.param == "local":
            return LocalFrontier(max_size, diversity, slack, delay=delay, clock=clock)
        limits = {"max_size": max_size, "diversity": diversity, "slack": slack,
                  "default_delay": delay}
        if request.param == "redis":
            return request.getfixturevalue("make_redis_frontier")(**limits)
        client = request.getfixturevalue(
            "redis_cluster_client" if request.param == "cluster" else "redis_client")
        return request.getfixturevalue("make_sharded_frontier")(client, 3, **limits)

    return build


@pytest.fixture(params=["local", "redis", "sharded", "cluster"])
def make(request, clock):
    """``make(max_size=, diversity=, slack=, delay=)``: a frontier of the parameter's kind on
    the fake clock; domain diversity off unless asked for. "sharded" is the crawl's frontier
    over 3 shards (``ShardedFrontier``) on one Redis, "cluster" the same on a Redis Cluster of
    3 masters (``redis_cluster``): the tests below hold for them too, except the bounds and
    domain diversity, which are per shard (``make_whole``)."""
    return _builder(request, clock)


@pytest.fixture(params=["local", "redis"])
def make_whole(request, clock):
    """``make`` for the rules that span a whole frontier: the bound (``max_size``) and domain
    diversity. In a sharded frontier both hold within each shard (``test_sharded_frontier``)."""
    return _builder(request, clock)


def task(url: str, priority: float = 1.0, url_id: int = 0, **extra) -> CrawlTask:
    return CrawlTask(url=url, url_id=url_id, priority=priority, **extra)


def drain(frontier: Frontier) -> list[CrawlTask]:
    """Pop everything, finishing each pop at once (its host is then ready again)."""
    popped = []
    while (got := frontier.pop()) is not None:
        popped.append(got)
        assert frontier.finish(got)[0]
    return popped


def urls(tasks: list[CrawlTask]) -> list[str]:
    return [t.url for t in tasks]


# -- priority order -----------------------------------------------------------------------------

def test_priority_order_ties_in_discovery_order_within_a_host(make):
    frontier = make()
    for i, priority in enumerate([0.5, 0.9, 0.5, 0.9, 0.1]):
        frontier.push(task(f"http://a.test/{i}", priority))
    assert urls(drain(frontier)) == [f"http://a.test/{i}" for i in (1, 3, 0, 2, 4)]


def test_priority_order_ties_in_discovery_order_across_hosts(make):
    frontier = make()
    for i, priority in enumerate([0.5, 0.9, 0.5, 0.9, 0.1, 0.5]):
        frontier.push(task(f"http://{'ab'[i % 2]}.test/{i}", priority))
    assert urls(drain(frontier)) == [
        "http://b.test/1", "http://b.test/3", "http://a.test/0", "http://a.test/2",
        "http://b.test/5", "http://a.test/4"]


def test_many_urls_come_out_in_priority_order(make):
    frontier = make()
    rng = random.Random(3)
    priorities = [rng.random() for _ in range(1000)]
    frontier.push_many([task(f"http://h{i % 7}.test/{i}", p, i) for i, p in enumerate(priorities)])
    popped = drain(frontier)
    assert [t.priority for t in popped] == sorted(priorities, reverse=True)
    assert all(t.url_id == int(t.url.rsplit("/", 1)[1]) for t in popped)


# -- found again, add_discovered ------------------------------------------------------------

def test_found_again_keeps_the_highest_priority_and_its_payload(make):
    frontier = make()
    # the payload: a field every frontier keeps (Redis keeps a link's anchor text and context
    # in the crawl database only: ``redis_frontier.IN_DATABASE_ONLY``)
    frontier.push(task("http://a.test/x", 0.2, depth=1))
    frontier.push(task("http://a.test/y", 0.5))
    assert frontier.push(task("http://a.test/x", 0.9, depth=2)) is True
    assert frontier.push(task("http://a.test/x", 0.1, depth=3)) is False
    assert frontier.push_many([task("http://a.test/z", 0.3), task("http://a.test/z", 0.2),
                               task("http://a.test/y", 0.6)]) == [True, False, True]
    assert len(frontier) == 3
    popped = drain(frontier)
    assert [(t.url, t.priority) for t in popped] == [
        ("http://a.test/x", 0.9), ("http://a.test/y", 0.6), ("http://a.test/z", 0.3)]
    assert popped[0].depth == 2


def test_add_discovered_queues_new_urls_and_only_raises_queued_ones(make):
    frontier = make()
    x, y = "http://a.test/x", "http://b.test/y"
    frontier.add_discovered([task(x, 0.3), task(y, 0.3)], [True, True])
    assert len(frontier) == 2
    frontier.add_discovered([task(y, 0.8)], [False])  # still queued: raised
    frontier.add_discovered([task(y, 0.1)], [False])  # lower: no change
    got = frontier.pop()
    assert (got.url, got.priority) == (y, 0.8)
    frontier.add_discovered([task(y, 0.9)], [False])  # in flight: not queued again
    assert len(frontier) == 1
    assert frontier.finish(got)[0]
    frontier.add_discovered([task(y, 0.9)], [False])  # fetched: never queued again
    assert len(frontier) == 1
    assert urls(drain(frontier)) == [x]


# -- bounds and eviction ----------------------------------------------------------------------

def test_a_full_frontier_evicts_the_lowest(make_whole):
    frontier = make_whole(max_size=3)
    for i, priority in enumerate([0.5, 0.1, 0.7, 0.3]):
        assert frontier.push(task(f"http://{'abc'[i % 3]}.test/{i}", priority))
    assert len(frontier) == 3
    assert urls(drain(frontier)) == ["http://c.test/2", "http://a.test/0", "http://a.test/3"]


@pytest.mark.parametrize("hosts", ["abc", "aaa"])
def test_eviction_ties_evict_the_latest_discovered(make_whole, hosts):
    frontier = make_whole(max_size=2)
    priorities = zip(hosts, [0.2, 0.2, 0.9], strict=True)
    flags = frontier.push_many([task(f"http://{host}.test/{i}", p)
                                for i, (host, p) in enumerate(priorities)])
    assert flags == [True, True, True]
    assert urls(drain(frontier)) == [f"http://{hosts[2]}.test/2", f"http://{hosts[0]}.test/0"]


def test_a_url_below_everything_in_a_full_frontier_is_evicted_itself(make_whole):
    frontier = make_whole(max_size=2)
    frontier.push_many([task("http://a.test/", 0.5), task("http://b.test/", 0.6)])
    assert frontier.push(task("http://c.test/", 0.1))  # queued, then evicted at once
    assert urls(drain(frontier)) == ["http://b.test/", "http://a.test/"]


def test_raising_a_queued_url_evicts_nothing(make_whole):
    frontier = make_whole(max_size=2)
    frontier.push_many([task("http://a.test/", 0.2), task("http://b.test/", 0.3)])
    assert frontier.push(task("http://a.test/", 0.9))
    assert urls(drain(frontier)) == ["http://a.test/", "http://b.test/"]


# -- politeness ---------------------------------------------------------------------------------

def test_one_request_in_flight_per_host(make):
    frontier = make()
    frontier.push_many([task("http://a.test/1", 0.9), task("http://a.test/2", 0.8),
                        task("http://b.test/1", 0.1)])
    first = frontier.pop()
    assert first.url == "http://a.test/1"
    assert frontier.pop().url == "http://b.test/1"  # a.test is busy
    assert frontier.pop() is None
    assert frontier.in_flight() == 2 and len(frontier) == 1
    assert frontier.next_ready_in() is None  # nothing waits: every host with URLs is busy
    assert frontier.finish(first)[0]
    assert frontier.pop().url == "http://a.test/2"


def test_urls_found_while_their_host_is_busy_wait_for_the_finish(make):
    frontier = make()
    frontier.add_discovered([task("http://a.test/1")], [True])
    first = frontier.pop()  # a.test's queue is now empty, its request in flight
    frontier.add_discovered([task("http://a.test/2"), task("http://a.test/3")], [True, True])
    assert frontier.pop() is None
    assert frontier.finish(first)[0]
    assert frontier.pop().url == "http://a.test/2"
    assert frontier.pop() is None


def test_the_wait_after_finish_is_the_larger_of_delay_and_politeness_delay(make, clock):
    frontier = make(delay=1.0)
    frontier.push_many([task(f"http://a.test/{i}", 0.5) for i in range(4)])
    assert frontier.finish(frontier.pop(), delay=3.0)[0]  # e.g. Crawl-delay: 3
    assert frontier.pop() is None
    assert frontier.next_ready_in() == pytest.approx(3.0)
    clock.advance(2.9)
    assert frontier.pop() is None
    clock.advance(0.2)
    second = frontier.pop()
    assert second.url == "http://a.test/1"
    assert frontier.finish(second, delay=0.2)[0]  # the politeness delay is the floor
    clock.advance(0.5)
    assert frontier.pop() is None
    clock.advance(0.6)
    third = frontier.pop()
    assert third.url == "http://a.test/2"
    assert frontier.finish(third)[0]  # no delay given: the politeness delay, nothing remembered
    assert frontier.next_ready_in() == pytest.approx(1.0)


def test_a_hot_host_does_not_block_the_others(make, clock):
    frontier = make()
    frontier.push_many([task(f"http://hot.test/{i}", 0.9) for i in range(50)])
    frontier.push_many([task(f"http://cold{i}.test/", 0.1) for i in range(5)])
    hot = frontier.pop()
    assert hot.url == "http://hot.test/0"
    others = [frontier.pop() for _ in range(5)]
    assert sorted(urls(others)) == [f"http://cold{i}.test/" for i in range(5)]
    assert frontier.pop() is None
    assert frontier.finish(hot, delay=10.0)[0]
    assert frontier.pop() is None  # the hot host sleeps; the cold ones are in flight
    clock.advance(10.0)
    assert frontier.pop().url == "http://hot.test/1"


def test_next_ready_in(make, clock):
    frontier = make()
    assert frontier.next_ready_in() is None  # nothing queued
    frontier.push_many([task("http://a.test/1", 0.9), task("http://a.test/2", 0.8)])
    assert frontier.next_ready_in() == 0
    first = frontier.pop()
    assert frontier.next_ready_in() is None  # a.test is busy: it waits for no time
    assert frontier.finish(first, delay=5.0)[0]
    assert frontier.next_ready_in() == pytest.approx(5.0)
    clock.advance(2.0)
    assert frontier.next_ready_in() == pytest.approx(3.0)
    frontier.push(task("http://b.test/1", 0.1))
    assert frontier.next_ready_in() == 0  # b.test may be contacted now
    assert frontier.finish(frontier.pop())[0]
    clock.advance(3.0)
    assert frontier.next_ready_in() == 0


def test_requeue_keeps_the_place_and_waits_the_retry_delay(make, clock):
    frontier = make()
    frontier.push_many([task("http://a.test/1", 0.5), task("http://a.test/2", 0.5)])
    got = frontier.pop()
    assert frontier.finish(got, requeue=True, delay=60.0, deltas={"requeued": 1}) == \
        (True, {"requeued": 1})
    assert len(frontier) == 2 and frontier.in_flight() == 0
    assert frontier.counters() == {"requeued": 1}
    assert frontier.pop() is None
    assert frontier.next_ready_in() == pytest.approx(60.0)
    clock.advance(60.0)
    again = frontier.pop()
    assert (again.url, again.priority) == ("http://a.test/1", 0.5)  # its discovery order


def test_a_retried_task_comes_back_with_its_attempt_count(make, clock):
    frontier = make()
    frontier.push_many([task("http://a.test/1", 0.7, url_id=3, depth=4),
                        task("http://a.test/2", 0.5)])
    got = frontier.pop()
    assert got.attempt == 0
    assert frontier.finish(replace(got, attempt=1), requeue=True, delay=5.0)[0]
    clock.advance(5.0)
    again = frontier.pop()
    assert (again.url, again.url_id, again.priority, again.depth, again.attempt) == \
        ("http://a.test/1", 3, 0.7, 4, 1)


def test_requeue_waits_at_least_the_politeness_delay(make, clock):
    frontier = make(delay=2.0)
    frontier.push(task("http://a.test/1"))
    assert frontier.finish(frontier.pop(), requeue=True, delay=0.5)[0]
    assert frontier.next_ready_in() == pytest.approx(2.0)
    clock.advance(2.0)
    assert frontier.pop().url == "http://a.test/1"


# -- finish: counters, tasks no longer in flight ---------------------------------------------

def test_finish_adds_deltas_to_the_counters(make):
    frontier = make()
    assert frontier.counters() == {}
    # two hosts of one registered domain: one shard, so finish sees one set of counters
    frontier.push_many([task("http://x.a.test/1"), task("http://y.a.test/1")])
    first, second = frontier.pop(), frontier.pop()
    assert frontier.finish(first, deltas={"fetched": 1, "targets": 0, "relevant": 2}) == \
        (True, {"fetched": 1, "relevant": 2})  # zero deltas are left out
    assert frontier.finish(second, deltas={"fetched": 1}) == (True, {"fetched": 2})
    assert frontier.counters() == {"fetched": 2, "relevant": 2}


def test_finish_of_a_task_not_in_flight_changes_nothing(make, clock):
    frontier = make(delay=1.0)
    frontier.push_many([task("http://a.test/1"), task("http://a.test/2"),
                        task("http://b.test/1", 0.5)])
    got = frontier.pop()
    assert frontier.finish(got, deltas={"fetched": 1}) == (True, {"fetched": 1})
    assert frontier.finish(got, requeue=True, delay=100.0, deltas={"fetched": 1}) == (False, {})
    never_popped = task("http://b.test/1", 0.5)
    assert frontier.finish(never_popped, delay=100.0, deltas={"fetched": 1}) == (False, {})
    assert frontier.counters() == {"fetched": 1}
    assert len(frontier) == 2 and frontier.in_flight() == 0  # nothing requeued
    assert frontier.pop().url == "http://b.test/1"  # b.test was not put to sleep
    clock.advance(1.0)
    assert frontier.pop().url == "http://a.test/2"  # a.test waits its delay, not 100 s


def test_in_flight_and_in_flight_below(make):
    frontier = make()
    frontier.push_many([task("http://a.test/1", 0.9), task("http://b.test/1", 0.5),
                        task("http://c.test/1", 0.1)])
    assert frontier.in_flight() == 0 and frontier.in_flight_below(1.0) == 0
    leased = {t.url: t for t in (frontier.pop(), frontier.pop(), frontier.pop())}
    assert frontier.in_flight() == 3
    assert [frontier.in_flight_below(x) for x in (0.1, 0.5, 0.6, 1.0)] == [0, 1, 2, 3]
    assert frontier.in_flight_below(-math.inf) == 0
    assert frontier.in_flight_below(math.inf) == 3
    assert frontier.in_flight_below(math.nan) == 0
    assert frontier.finish(leased["http://c.test/1"])[0]
    assert frontier.finish(leased["http://a.test/1"], requeue=True)[0]
    assert frontier.in_flight() == 1 and frontier.in_flight_below(1.0) == 1


# -- min_priority, best_priority ------------------------------------------------------------

def test_pop_respects_min_priority(make):
    frontier = make()
    frontier.push(task("http://a.test/1", 0.3))
    frontier.push(task("http://b.test/1", 0.6))
    assert frontier.pop(min_priority=0.7) is None
    assert len(frontier) == 2 and frontier.in_flight() == 0
    assert frontier.pop(min_priority=0.6).url == "http://b.test/1"  # the bound is inclusive
    assert frontier.pop(min_priority=0.5) is None
    assert frontier.pop(min_priority=-math.inf).url == "http://a.test/1"


def test_best_priority_counts_busy_and_sleeping_hosts(make, clock):
    frontier = make()
    assert frontier.best_priority() is None
    frontier.push_many([task("http://hot.test/1", 0.9), task("http://hot.test/2", 0.8),
                        task("http://cold.test/1", 0.1), task("http://cold.test/2", 0.05)])
    assert frontier.best_priority() == 0.9
    hot = frontier.pop()
    assert frontier.best_priority() == 0.8  # hot.test is busy
    assert frontier.finish(hot, delay=10.0)[0]
    assert frontier.best_priority() == 0.8  # hot.test sleeps
    # the low-priority rule: cold URLs wait while the better one waits for its host
    assert frontier.pop(min_priority=0.5 * frontier.best_priority()) is None
    assert frontier.in_flight() == 0 and len(frontier) == 3
    clock.advance(10.0)
    assert frontier.pop(min_priority=0.4).url == "http://hot.test/2"
    assert frontier.best_priority() == 0.1
    frontier.push(task("http://cold.test/1", 0.95))  # raised while queued
    assert frontier.best_priority() == 0.95
    assert len(drain(frontier)) == 2
    assert frontier.best_priority() is None


def test_a_host_sleeping_long_does_not_make_the_ready_urls_low(make, clock):
    """``best_priority(within=s)``, the low-priority rule's figure: a host that waits more
    than s seconds (its robots.txt failed: requeued with a long delay) does not count, so the
    ready hosts' URLs are not "low" against its best URL while it sleeps; a busy host and one
    ready within s still count."""
    frontier = make()
    frontier.push_many([task("http://sleepy.test/1", 0.9999), task("http://sleepy.test/2", 0.99),
                        task("http://busy.test/1", 0.6), task("http://busy.test/2", 0.55)] +
                       [task(f"http://ready{i}.test/1", 0.5 - i / 100) for i in range(3)])
    sleepy = frontier.pop()
    assert frontier.finish(sleepy, requeue=True, delay=60.0)[0]
    assert frontier.best_priority() == 0.9999
    assert frontier.best_priority(within=5.0) == 0.6
    busy = frontier.pop(min_priority=0.8 * frontier.best_priority(within=5.0))
    assert busy.url == "http://busy.test/1"
    assert frontier.best_priority(within=5.0) == 0.55  # busy.test counts while busy
    assert frontier.finish(busy, delay=3.0)[0]
    assert frontier.best_priority(within=5.0) == 0.55  # ... and while it waits 3 s
    # low below 0.8 x 0.55, not 0.8 x 0.9999: every ready URL goes, no low slot needed
    popped = [frontier.pop(min_priority=0.8 * frontier.best_priority(within=5.0))
              for _ in range(3)]
    assert urls(popped) == [f"http://ready{i}.test/1" for i in range(3)]
    clock.advance(56.0)  # sleepy.test may go in 4 s: its URLs count again
    assert frontier.best_priority(within=5.0) == 0.9999
    assert frontier.pop(min_priority=0.8 * 0.9999) is None
    clock.advance(4.0)
    assert frontier.pop(min_priority=0.8 * 0.9999).url == "http://sleepy.test/1"


@pytest.mark.parametrize("sleepers", [FAR_SKIPS - 1, FAR_SKIPS])
def test_past_far_skips_long_sleepers_the_best_ready_url_counts(make_whole, clock, sleepers):
    """``best_priority(within=)`` looks past at most ``FAR_SKIPS`` hosts sleeping long (a
    bounded walk); past them, it is the best ready priority (a busy host no longer counts)."""
    frontier = make_whole()
    frontier.push_many([task(f"http://sleepy{i}.test/1", 0.9 - i / 1000) for i in range(sleepers)]
                       + [task("http://busy.test/1", 0.7), task("http://busy.test/2", 0.65),
                          task("http://ready.test/1", 0.5), task("http://ready.test/2", 0.4)])
    for _ in range(sleepers):
        assert frontier.finish(frontier.pop(), requeue=True, delay=60.0)[0]
    assert frontier.pop().url == "http://busy.test/1"
    assert frontier.best_priority() == 0.9
    assert frontier.best_priority(within=5.0) == (0.65 if sleepers < FAR_SKIPS else 0.5)


def test_nan_priorities_are_refused(make):
    frontier = make()
    with pytest.raises(ValueError):
        frontier.push(task("http://a.test/", math.nan))
    with pytest.raises(ValueError):
        frontier.push_many([task("http://a.test/ok", 0.5), task("http://a.test/bad", math.nan)])
    with pytest.raises(ValueError):
        frontier.add_discovered([task("http://a.test/bad", math.nan)], [True])
    assert len(frontier) == 0 and frontier.best_priority() is None  # nothing of the batches


# -- domain diversity (soft) --------------------------------------------------------------------

def test_diversity_prefers_other_hosts_but_never_stalls(make_whole):
    frontier = make_whole(diversity=3)
    frontier.push_many([task(f"http://a.test/{i}", 0.9) for i in range(3)])
    frontier.push(task("http://b.test/0", 0.5))  # at least slack x 0.9
    assert urls(drain(frontier)) == ["http://a.test/0", "http://b.test/0",  # b jumps ahead once
                                     "http://a.test/1", "http://a.test/2"]  # then a again


def test_diversity_never_trades_a_good_url_for_a_far_worse_one(make_whole):
    frontier = make_whole(diversity=3, slack=0.5)
    frontier.push_many([task(f"http://a.test/{i}", 0.9) for i in range(3)])
    frontier.push(task("http://b.test/0", 0.1))  # below 0.5 x 0.9
    assert urls(drain(frontier)) == [f"http://a.test/{i}" for i in range(3)] + ["http://b.test/0"]


def test_diversity_slack_zero_is_the_strict_rule(make_whole):
    frontier = make_whole(diversity=3, slack=0.0)
    frontier.push_many([task(f"http://a.test/{i}", 0.9) for i in range(3)])
    frontier.push(task("http://b.test/0", 0.1))
    assert urls(drain(frontier))[:2] == ["http://a.test/0", "http://b.test/0"]


def test_diversity_window_is_the_last_k_minus_1_hosts(make_whole):
    frontier = make_whole(diversity=3)
    frontier.push_many([task(f"http://a.test/{i}", 0.9) for i in range(4)])
    frontier.push_many([task(f"http://{host}.test/", 0.8) for host in "bcd"])
    # any 3 consecutive pops come from 3 hosts while other hosts have URLs
    assert urls(drain(frontier)) == [
        "http://a.test/0", "http://b.test/", "http://c.test/", "http://a.test/1",
        "http://d.test/", "http://a.test/2", "http://a.test/3"]


def test_diversity_considers_ready_hosts_only(make_whole):
    frontier = make_whole(diversity=3)
    frontier.push_many([task("http://a.test/0", 0.9), task("http://a.test/1", 0.9),
                        task("http://b.test/0", 0.8), task("http://b.test/1", 0.8)])
    assert frontier.finish(frontier.pop())[0]  # a.test/0
    assert frontier.pop().url == "http://b.test/0"  # in flight: b.test stays busy
    assert frontier.pop().url == "http://a.test/1"  # a.test was popped lately, but is ready


def test_diversity_honours_min_priority(make_whole):
    frontier = make_whole(diversity=3, slack=0.5)
    frontier.push_many([task("http://a.test/0", 0.9), task("http://a.test/1", 0.9),
                        task("http://b.test/0", 0.5)])
    assert frontier.finish(frontier.pop())[0]
    got = frontier.pop(min_priority=0.6)  # b.test would be the diverse pick, but is below
    assert got is not None and got.url == "http://a.test/1"


def test_diversity_one_is_off(make_whole):
    frontier = make_whole(diversity=1, slack=0.0)
    frontier.push_many([task(f"http://a.test/{i}", 0.9) for i in range(2)])
    frontier.push(task("http://b.test/0", 0.8))
    assert urls(drain(frontier)) == ["http://a.test/0", "http://a.test/1", "http://b.test/0"]


# -- REDIS ONLY: leases (a cluster's pops are leased; LocalFrontier has no leases) ---------------

@pytest.fixture(params=["redis", "cluster"])
def make_leased(request, clock):
    """A RedisFrontier on the plain Redis, or one shard of a frontier on the Redis Cluster."""
    if request.param == "redis":
        return request.getfixturevalue("make_redis_frontier")
    client = request.getfixturevalue("redis_cluster_client")
    make = request.getfixturevalue("make_sharded_frontier")
    return lambda **kwargs: make(client, 1, **kwargs).shards[0]


def test_redis_only_expired_lease_is_reaped_and_the_url_comes_back(make_leased, clock):
    frontier = make_leased(lease_seconds=30.0)
    frontier.push_many([task("http://a.test/1", 0.9), task("http://a.test/2", 0.5)])
    lost = frontier.pop()  # the worker dies without finishing
    clock.advance(29.0)
    assert frontier.reap() == 0
    clock.advance(2.0)
    assert frontier.reap() == 1
    assert frontier.in_flight() == 0 and len(frontier) == 2
    assert frontier.in_flight_below(1.0) == 0
    again = frontier.pop()
    assert again.url == lost.url and again.priority == 0.9
    assert frontier.finish(lost, deltas={"fetched": 1}) == (False, {})  # a newer lease exists
    assert frontier.in_flight() == 1
    assert frontier.finish(again, deltas={"fetched": 1}) == (True, {"fetched": 1})
    assert frontier.finish(again) == (False, {})


def test_redis_only_url_pushed_again_while_leased_is_queued_once_after_reap(make_leased, clock):
    frontier = make_leased(lease_seconds=5.0)
    frontier.push(task("http://a.test/1", 0.9))
    leased = frontier.pop()
    assert frontier.push(task("http://a.test/1", 0.4)) is True  # in flight: queued anew
    clock.advance(6.0)
    assert frontier.reap() == 1
    assert len(frontier) == 1
    assert [(t.url, t.priority) for t in drain(frontier)] == [(leased.url, 0.9)]


def test_redis_only_lease_current_follows_finishes_and_reaps(make_leased, clock):
    frontier = make_leased(lease_seconds=30.0)
    frontier.push_many([task("http://a.test/1", 0.9), task("http://b.test/1", 0.5)])
    first, second = frontier.pop(), frontier.pop()
    assert frontier.lease_current(first) and frontier.lease_current(second)
    assert frontier.finish(second)[0]
    assert not frontier.lease_current(second)
    clock.advance(31.0)
    assert frontier.reap() == 1
    assert not frontier.lease_current(first)  # reaped
    again = frontier.pop()
    assert again.url == first.url
    assert frontier.lease_current(again) and not frontier.lease_current(first)
    assert frontier.lease_current(task(first.url))  # no token: any lease of the URL


def test_redis_only_renew_keeps_live_leases_from_the_reaper(make_leased, clock):
    frontier = make_leased(lease_seconds=30.0)
    frontier.push_many([task("http://a.test/1", 0.9), task("http://b.test/1", 0.5)])
    first, second = frontier.pop(), frontier.pop()
    assert frontier.renew([(first.url, first.lease), (second.url, "no-such-token")], 60.0) == 1
    clock.advance(31.0)
    assert frontier.reap() == 1  # second's lease was not renewed
    assert frontier.lease_current(first) and not frontier.lease_current(second)
    clock.advance(30.0)
    assert frontier.reap() == 1  # the renewed deadline has passed too
    assert frontier.renew([(first.url, first.lease)], 60.0) == 0  # reaped: not renewed
    assert frontier.in_flight() == 0 and len(frontier) == 2


def test_redis_only_leases_are_shared_by_every_client(make_leased, clock):
    import redis
    from redis.cluster import RedisCluster

    from jlse.scheduler.redis_client import is_cluster
    from jlse.scheduler.redis_frontier import RedisFrontier

    frontier = make_leased()
    if is_cluster(frontier.client):  # another machine's client of the same servers
        client = RedisCluster(startup_nodes=frontier.client.get_nodes())
    else:
        options = frontier.client.connection_pool.connection_kwargs
        client = redis.Redis(host=options["host"], port=options["port"], db=options["db"])
    other = RedisFrontier(client, frontier.prefix, clock=clock, diversity=1)
    frontier.push_many([task("http://a.test/1"), task("http://a.test/2")])
    got = frontier.pop()
    assert other.pop() is None  # the host is busy on every machine
    assert other.finish(got, deltas={"fetched": 1}) == (True, {"fetched": 1})
    assert frontier.counters() == {"fetched": 1}
    assert frontier.pop().url == "http://a.test/2"
