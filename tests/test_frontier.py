from jlse.scheduler.frontier import LocalFrontier
from jlse.scheduler.politeness import HostPoliteness

from jlse.records import CrawlTask


def task(url: str, priority: float = 1.0, url_id: int = 0) -> CrawlTask:
    return CrawlTask(url=url, url_id=url_id, priority=priority)


def drain(frontier: LocalFrontier, ready=None) -> list[str]:
    urls = []
    while (t := frontier.pop(ready)) is not None:
        urls.append(t.url)
    return urls


def test_priority_order_ties_in_discovery_order():
    f = LocalFrontier(diversity=1)
    for i, p in enumerate([0.5, 0.9, 0.5, 0.9, 0.1]):
        f.push(task(f"http://a.test/{i}", p))
    assert drain(f) == ["http://a.test/1", "http://a.test/3", "http://a.test/0",
                        "http://a.test/2", "http://a.test/4"]


def test_found_again_keeps_highest_priority():
    f = LocalFrontier(diversity=1)
    f.push(task("http://a.test/x", 0.2))
    f.push(task("http://a.test/y", 0.5))
    assert f.push(task("http://a.test/x", 0.9)) is True
    assert f.push(task("http://a.test/x", 0.1)) is False  # lower: ignored
    assert len(f) == 2
    assert drain(f) == ["http://a.test/x", "http://a.test/y"]


def test_bounded_evicts_lowest():
    f = LocalFrontier(max_size=3, diversity=1)
    for i, p in enumerate([0.5, 0.1, 0.7, 0.3]):
        f.push(task(f"http://a.test/{i}", p))
    assert len(f) == 3 and f.evicted == 1
    assert drain(f) == ["http://a.test/2", "http://a.test/0", "http://a.test/3"]


def test_only_ready_hosts_are_popped():
    f = LocalFrontier(diversity=1)
    f.push(task("http://busy.test/1", 0.9))
    f.push(task("http://free.test/1", 0.1))
    got = f.pop(lambda host: host != "busy.test")
    assert got.url == "http://free.test/1"
    assert f.pop(lambda host: host != "busy.test") is None
    assert f.pop().url == "http://busy.test/1"


def test_domain_diversity_prefers_other_hosts_but_never_stalls():
    f = LocalFrontier(diversity=3)
    for i in range(3):
        f.push(task(f"http://a.test/{i}", 0.9))
    f.push(task("http://b.test/0", 0.5))
    order = drain(f)
    assert order[:2] == ["http://a.test/0", "http://b.test/0"]  # b jumps ahead once
    assert sorted(order[2:]) == ["http://a.test/1", "http://a.test/2"]  # then a again


def test_domain_diversity_never_trades_a_good_url_for_a_far_worse_one():
    f = LocalFrontier(diversity=3, slack=0.5)
    for i in range(3):
        f.push(task(f"http://a.test/{i}", 0.9))
    f.push(task("http://b.test/0", 0.1))  # below 0.5 * 0.9
    assert drain(f) == ["http://a.test/0", "http://a.test/1", "http://a.test/2", "http://b.test/0"]


def test_slack_zero_is_the_strict_rule():
    f = LocalFrontier(diversity=3, slack=0.0)
    for i in range(3):
        f.push(task(f"http://a.test/{i}", 0.9))
    f.push(task("http://b.test/0", 0.1))
    assert drain(f)[:2] == ["http://a.test/0", "http://b.test/0"]


def test_best_priority_and_min_priority():
    f = LocalFrontier(diversity=1)
    assert f.best_priority() is None
    f.push(task("http://a.test/0", 0.9))
    f.push(task("http://b.test/0", 0.2))
    assert f.best_priority() == 0.9
    busy = {"a.test"}
    assert f.pop(lambda host: host not in busy, min_priority=0.45) is None  # b waits for a
    assert f.pop(lambda host: host not in busy).url == "http://b.test/0"  # unless allowed
    f.push(task("http://a.test/1", 0.95))  # raised while queued elsewhere
    assert f.best_priority() == 0.95
    assert f.pop(min_priority=0.5).url == "http://a.test/1"


def test_many_urls_come_out_in_order():
    f = LocalFrontier(diversity=1)
    import random

    rng = random.Random(3)
    prios = [rng.random() for _ in range(2000)]
    for i, p in enumerate(prios):
        f.push(task(f"http://h{i % 7}.test/{i}", p))
    popped = [f.pop() for _ in range(2000)]
    assert [t.priority for t in popped] == sorted(prios, reverse=True)


def test_politeness_one_in_flight_and_delay():
    now = [100.0]
    p = HostPoliteness(delay=1.0, clock=lambda: now[0])
    assert p.is_ready("a.test")
    p.acquire("a.test")
    assert not p.is_ready("a.test")
    p.release("a.test", crawl_delay=2.0)
    assert not p.is_ready("a.test")
    assert p.next_ready_in() == 2.0  # Crawl-delay above the default delay wins
    now[0] += 2.0
    assert p.is_ready("a.test")
    p.acquire("a.test")
    p.release("a.test", blocked_for=60.0)  # robots.txt unavailable
    now[0] += 30
    assert not p.is_ready("a.test")


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
