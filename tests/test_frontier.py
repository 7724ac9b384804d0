"""What only ``LocalFrontier`` and its ``HostPoliteness`` do; the behaviour both frontiers share
is tested once, on both, in ``test_frontier_contract.py``."""

import math

from jlse.records import CrawlTask
from jlse.scheduler.frontier import HoldUps, LocalFrontier
from jlse.scheduler.politeness import HostPoliteness


def task(url: str, priority: float = 1.0, url_id: int = 0) -> CrawlTask:
    return CrawlTask(url=url, url_id=url_id, priority=priority)


def drain(frontier: LocalFrontier) -> list[str]:
    """Pop everything, finishing each pop at once (a pop keeps its host busy until then)."""
    urls = []
    while (t := frontier.pop()) is not None:
        urls.append(t.url)
        assert frontier.finish(t)[0]
    return urls


def test_evictions_are_counted_and_membership_follows_the_queue():
    f = LocalFrontier(max_size=3, diversity=1)
    for i, p in enumerate([0.5, 0.1, 0.7, 0.3]):
        f.push(task(f"http://a.test/{i}", p))
    assert len(f) == 3 and f.evicted == 1
    assert "http://a.test/1" not in f and "http://a.test/3" in f
    got = f.pop()
    assert got.url == "http://a.test/2" and got.url not in f


def test_host_concurrency_allows_several_requests_to_one_host():
    f = LocalFrontier(diversity=1, host_concurrency=2)
    for i in range(3):
        f.push(task(f"http://a.test/{i}", 0.9))
    first, second = f.pop(), f.pop()
    assert (first.url, second.url) == ("http://a.test/0", "http://a.test/1")
    assert f.pop() is None and f.next_ready_in() is None  # both slots of a.test in flight
    assert f.finish(first)[0]
    assert f.next_ready_in() == 0
    assert f.pop().url == "http://a.test/2"


def test_restored_counters_are_where_finish_adds():
    f = LocalFrontier(diversity=1)
    f.restore_counters({"fetched": 10, "relevant": 4})
    f.push(task("http://a.test/"))
    assert f.finish(f.pop(), deltas={"fetched": 1}) == (True, {"fetched": 11})
    assert f.counters() == {"fetched": 11, "relevant": 4}


def test_eviction_heap_stays_proportional_to_the_queue():
    f = LocalFrontier(diversity=1)
    for i in range(5000):
        f.push(task(f"http://h{i % 50}.test/{i}", (i * 7919 % 1000) / 1000))
        if i % 2:
            assert f.finish(f.pop())[0]
    assert len(f) == 2500
    assert len(f._lowest) <= 2 * len(f) + 1000
    assert len(drain(f)) == 2500


def test_politeness_one_in_flight_and_delay():
    now = [100.0]
    p = HostPoliteness(delay=1.0, clock=lambda: now[0])
    assert p.is_ready("a.test")
    p.acquire("a.test")
    assert not p.is_ready("a.test")
    assert p.blocked() == {"a.test": None}
    p.release("a.test", 2.0)  # Crawl-delay above the default delay wins
    assert not p.is_ready("a.test")
    assert p.next_ready_in() == 2.0
    now[0] += 2.0
    assert p.is_ready("a.test") and p.blocked() == {}
    p.acquire("a.test")
    p.release("a.test", 60.0)  # robots.txt unavailable
    now[0] += 30
    assert not p.is_ready("a.test")
    now[0] += 30
    p.acquire("a.test")
    p.release("a.test")  # nothing remembered: the default delay
    assert p.next_ready_in() == 1.0


def test_politeness_host_concurrency_allows_several_in_flight():
    p = HostPoliteness(delay=0.0, host_concurrency=3)
    for _ in range(3):
        assert p.is_ready("a.test")
        p.acquire("a.test")
    assert not p.is_ready("a.test")
    assert p.is_ready("b.test")
    p.release("a.test")
    assert p.is_ready("a.test")
    assert p.busy_hosts == 1
    p.release("a.test")
    p.release("a.test")
    assert p.busy_hosts == 0


def test_hold_ups_count_waiting_hosts_and_low_urls_of_ready_ones():
    now = [100.0]
    f = LocalFrontier(diversity=1, delay=5.0, clock=lambda: now[0])
    f.push_many([task("http://hot.test/1", 1.0), task("http://hot.test/2", 0.95),
                 task("http://warm.test/1", 0.9), task("http://junk.test/1", 0.3),
                 task("http://junk.test/2", 0.2), task("http://junk2.test/1", 0.1)])
    assert f.hold_ups(0.8) == HoldUps(hosts=4, waiting=0, low_hosts=2, low_urls=3)
    hot = f.pop()
    assert f.hold_ups(0.8) == HoldUps(hosts=4, waiting=1, low_hosts=2, low_urls=3)  # busy
    f.finish(hot)
    warm = f.pop()
    f.finish(warm)  # warm.test's last URL: it has none queued, its delay does not count
    assert f.hold_ups(0.8) == HoldUps(hosts=3, waiting=1, low_hosts=2, low_urls=3)
    assert f.hold_ups(-math.inf).low_urls == 0  # no bound: nothing is held back as low
    now[0] += 5.0  # hot.test's politeness delay is over
    assert f.hold_ups(0.8).waiting == 0
