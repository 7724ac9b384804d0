"""The Redis frontier against the real Redis (``REDIS_URL``, default 127.0.0.1:6379).

Each test uses its own key prefix, deleted afterwards. An unreachable Redis fails the tests.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
import redis
from jlse.scheduler.crawl_registry import CrawlRegistry
from jlse.scheduler.dispatcher import Dispatcher
from jlse.scheduler.frontier import Frontier, LocalFrontier
from jlse.scheduler.redis_frontier import LeasedTask, RedisFrontier, fingerprint, task_json

from jlse.records import CrawlTask, FetchRecord, LinkStatus, NewLink, Outcome
from jlse.settings import Settings, apply_overrides

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
REPO = Path(__file__).resolve().parents[1]


class FakeClock:
    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture(scope="module")
def redis_client():
    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=5)
    try:
        client.ping()
    except redis.RedisError as exc:
        pytest.fail(f"Redis is not reachable at {REDIS_URL} ({exc}). "
                    "Start it with `make services` or set REDIS_URL.", pytrace=False)
    yield client
    client.close()


@pytest.fixture()
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture()
def make_frontier(redis_client, clock):
    made: list[RedisFrontier] = []

    def make(**kwargs) -> RedisFrontier:
        kwargs.setdefault("clock", clock)
        frontier = RedisFrontier(redis_client, f"jlse:test:{uuid.uuid4().hex}:", **kwargs)
        made.append(frontier)
        return frontier

    yield make
    for frontier in made:
        frontier.clear()
        assert list(redis_client.scan_iter(match=frontier.prefix + "*")) == []


def task(url: str, priority: float = 1.0, url_id: int = 0, **extra) -> CrawlTask:
    return CrawlTask(url=url, url_id=url_id, priority=priority, **extra)


def drain(frontier: Frontier) -> list[CrawlTask]:
    """Pop everything; a leasing frontier acks each pop at once (no delay)."""
    popped = []
    while (got := frontier.pop()) is not None:
        popped.append(got)
        if isinstance(frontier, RedisFrontier):
            assert frontier.ack(got)
    return popped


def urls_of(tasks: list[CrawlTask]) -> list[str]:
    return [t.url for t in tasks]


# -- the shared contract: LocalFrontier and RedisFrontier behave alike ------------------------

@pytest.fixture(params=["local", "redis"])
def any_frontier(request):
    def make(max_size: int = 100_000) -> Frontier:
        if request.param == "local":
            return LocalFrontier(max_size=max_size, diversity=1)
        return request.getfixturevalue("make_frontier")(max_size=max_size)

    return make


def test_contract_priority_order_ties_in_discovery_order(any_frontier):
    frontier = any_frontier()
    for i, priority in enumerate([0.5, 0.9, 0.5, 0.9, 0.1, 0.5]):
        host = "ab"[i % 2]
        frontier.push(task(f"http://{host}.test/{i}", priority))
    assert urls_of(drain(frontier)) == [
        "http://b.test/1", "http://b.test/3", "http://a.test/0", "http://a.test/2",
        "http://b.test/5", "http://a.test/4"]


def test_contract_found_again_keeps_highest(any_frontier):
    frontier = any_frontier()
    frontier.push(task("http://a.test/x", 0.2))
    frontier.push(task("http://a.test/y", 0.5))
    assert frontier.push(task("http://a.test/x", 0.9, anchor_text="better")) is True
    assert frontier.push(task("http://a.test/x", 0.1)) is False
    assert len(frontier) == 2
    popped = drain(frontier)
    assert urls_of(popped) == ["http://a.test/x", "http://a.test/y"]
    assert popped[0].priority == 0.9 and popped[0].anchor_text == "better"


def test_contract_full_frontier_evicts_lowest(any_frontier):
    frontier = any_frontier(max_size=3)
    for i, priority in enumerate([0.5, 0.1, 0.7, 0.3]):
        frontier.push(task(f"http://{'abc'[i % 3]}.test/{i}", priority))
    assert len(frontier) == 3
    assert urls_of(drain(frontier)) == ["http://c.test/2", "http://a.test/0", "http://a.test/3"]


# -- Redis specifics ---------------------------------------------------------------------------

def test_eviction_is_counted_and_ties_evict_the_latest(make_frontier):
    frontier = make_frontier(max_size=2)
    flags = frontier.push_many([task("http://a.test/0", 0.2), task("http://b.test/1", 0.2),
                                task("http://c.test/2", 0.9)])
    assert flags == [True, True, True]
    assert frontier.stats()["evicted"] == 1
    assert urls_of(drain(frontier)) == ["http://c.test/2", "http://a.test/0"]


def test_many_urls_come_out_in_priority_order(make_frontier):
    frontier = make_frontier()
    rng = random.Random(3)
    priorities = [rng.random() for _ in range(1000)]
    frontier.push_many([task(f"http://h{i % 7}.test/{i}", p, i) for i, p in enumerate(priorities)])
    assert frontier.hosts() == 7
    popped = drain(frontier)
    assert [t.priority for t in popped] == sorted(priorities, reverse=True)
    assert all(isinstance(t.url_id, int) for t in popped)


def test_payload_round_trips_as_json(make_frontier):
    frontier = make_frontier()
    original = task("http://a.test/p", 0.25, 42, depth=3, parent_id=7, anchor_text="手机 评测",
                    context="near\tthe link", redirect_hops=1, pattern_run=2)
    frontier.push(original)
    got = frontier.pop()
    assert CrawlTask.from_dict(got.to_dict()) == original
    assert b"anchor_text" not in task_json(task("http://a.test/", 1.0))  # defaults left out


def test_one_request_in_flight_per_host(make_frontier):
    frontier = make_frontier()
    frontier.push_many([task("http://a.test/1", 0.9), task("http://a.test/2", 0.8),
                        task("http://b.test/1", 0.1)])
    first = frontier.pop()
    assert first.url == "http://a.test/1"
    assert frontier.pop().url == "http://b.test/1"  # a.test is busy
    assert frontier.pop() is None
    assert frontier.in_flight() == 2 and len(frontier) == 1
    assert frontier.next_ready_in() is None  # nothing waits: every host with URLs is busy
    assert frontier.ack(first)
    assert frontier.pop().url == "http://a.test/2"


def test_urls_found_while_their_host_is_busy_wait_for_the_ack(make_frontier):
    frontier = make_frontier()
    frontier.push(task("http://a.test/1"))
    first = frontier.pop()  # a.test's queue is now empty, its request in flight
    assert frontier.add_new([task("http://a.test/2"), task("http://a.test/3")]) == [True, True]
    assert frontier.pop() is None
    assert frontier.ack(first)
    assert frontier.pop().url == "http://a.test/2"
    assert frontier.pop() is None


def test_delay_after_ack_is_honoured(make_frontier, clock):
    frontier = make_frontier(default_delay=1.0)
    frontier.push_many([task(f"http://a.test/{i}", 0.5) for i in range(3)])
    assert frontier.ack(frontier.pop(), delay=3.0)  # e.g. Crawl-delay: 3
    assert frontier.pop() is None
    assert frontier.next_ready_in() == pytest.approx(3.0)
    clock.advance(2.9)
    assert frontier.pop() is None
    clock.advance(0.2)
    second = frontier.pop()
    assert second.url == "http://a.test/1"
    assert frontier.ack(second, delay=0.2)  # the default delay is the floor
    clock.advance(0.5)
    assert frontier.pop() is None
    clock.advance(0.6)
    assert frontier.pop().url == "http://a.test/2"


def test_a_hot_host_does_not_block_the_others(make_frontier, clock):
    frontier = make_frontier()
    frontier.push_many([task(f"http://hot.test/{i}", 0.9) for i in range(500)])
    frontier.push_many([task(f"http://cold{i}.test/", 0.1) for i in range(5)])
    hot = frontier.pop()
    assert hot.url == "http://hot.test/0"
    others = [frontier.pop() for _ in range(5)]
    assert sorted(urls_of(others)) == [f"http://cold{i}.test/" for i in range(5)]
    assert frontier.pop() is None
    assert frontier.ack(hot, delay=10.0)
    assert frontier.pop() is None  # the hot host sleeps; the cold ones are in flight
    clock.advance(10.0)
    assert frontier.pop().url == "http://hot.test/1"


def test_expired_lease_is_reaped_and_the_url_comes_back(make_frontier, clock):
    frontier = make_frontier(lease_seconds=30.0)
    frontier.push_many([task("http://a.test/1", 0.9), task("http://a.test/2", 0.5)])
    lost = frontier.pop()  # the worker dies without acking
    clock.advance(29.0)
    assert frontier.reap() == 0
    clock.advance(2.0)
    assert frontier.reap() == 1
    assert frontier.in_flight() == 0 and len(frontier) == 2
    again = frontier.pop()
    assert again.url == lost.url and again.priority == 0.9
    assert frontier.ack(lost) is False  # the old lease was reaped; a newer one exists
    assert frontier.in_flight() == 1
    assert frontier.ack(again) is True
    assert frontier.ack(again) is False


def test_url_pushed_again_while_leased_is_queued_once_after_reap(make_frontier, clock):
    frontier = make_frontier(lease_seconds=5.0)
    frontier.push(task("http://a.test/1", 0.9))
    leased = frontier.pop()
    assert frontier.push(task("http://a.test/1", 0.4)) is True  # in flight: queued anew
    clock.advance(6.0)
    assert frontier.reap() == 1
    assert len(frontier) == 1
    assert [(t.url, t.priority) for t in drain(frontier)] == [(leased.url, 0.9)]


def test_works_with_a_decoding_client(make_frontier, clock):
    client = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    frontier = make_frontier()
    decoding = RedisFrontier(client, frontier.prefix, clock=clock, default_delay=2.0)
    assert decoding.add_new([task("http://a.test/é", 0.5, anchor_text="手机")]) == [True]
    got = decoding.pop()
    assert (got.url, got.anchor_text) == ("http://a.test/é", "手机")
    assert decoding.ack(got) and decoding.next_ready_in() == pytest.approx(2.0)
    client.close()


def test_worker_killed_with_sigkill_loses_no_url(make_frontier, clock):
    frontier = make_frontier(lease_seconds=60.0)
    frontier.push_many([task("http://a.test/1", 0.9, 1), task("http://b.test/1", 0.5, 2)])
    child = (
        "import os, signal, redis\n"
        "from scheduler.redis_frontier import RedisFrontier\n"
        f"f = RedisFrontier(redis.Redis.from_url({REDIS_URL!r}), {frontier.prefix!r},"
        f" lease_seconds=60.0, clock=lambda: {clock.now!r})\n"
        "print(f.pop().url, flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n")
    done = subprocess.run([sys.executable, "-c", child], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == -9, done.stderr
    assert done.stdout.strip() == "http://a.test/1"
    assert frontier.in_flight() == 1 and len(frontier) == 1
    clock.advance(61.0)
    assert frontier.reap() == 1
    assert sorted(urls_of(drain(frontier))) == ["http://a.test/1", "http://b.test/1"]


def test_release_requeues_in_place_after_retry_after(make_frontier, clock):
    frontier = make_frontier()
    frontier.push_many([task("http://a.test/1", 0.5), task("http://a.test/2", 0.5)])
    got = frontier.pop()
    assert frontier.release(got, retry_after=60.0)
    assert len(frontier) == 2 and frontier.in_flight() == 0
    assert frontier.pop() is None
    assert frontier.next_ready_in() == pytest.approx(60.0)
    clock.advance(60.0)
    assert frontier.pop().url == "http://a.test/1"  # keeps its discovery order


def test_add_new_dedups_by_fingerprint(make_frontier):
    frontier = make_frontier()
    x, y = "http://a.test/x", "http://b.test/y"
    assert frontier.add_new([task(x, 0.3), task(y, 0.3), task(x, 0.3)]) == [True, True, False]
    assert frontier.add_new([task(y, 0.8)]) == [True]  # still queued: priority raised
    assert frontier.add_new([task(y, 0.1)]) == [False]
    popped = frontier.pop()
    assert popped.url == y and popped.priority == 0.8
    assert frontier.ack(popped)
    assert frontier.add_new([task(y, 0.9)]) == [False]  # fetched: never queued again
    assert len(frontier) == 1
    assert frontier.stats() == {"queued": 1, "in_flight": 0, "hosts": 1, "evicted": 0,
                                "seen": 2}
    assert len(fingerprint(x)) == 8


def test_nan_priority_is_refused(make_frontier):
    with pytest.raises(ValueError):
        make_frontier().push(task("http://a.test/", float("nan")))


def _fill_store(store) -> tuple[dict[str, float], list[str]]:
    """Links in every state; returns the queued URLs with priorities and every URL."""
    links = [NewLink(f"http://h{i % 5}.test/{i}", None, 1, f"a{i}", priority=i / 100)
             for i in range(60)]
    ids = [link_id for link_id, _ in store.add_links(links)]
    for link_id in ids[:20]:
        store.record_fetch(FetchRecord(url_id=link_id, url="", outcome=Outcome.OK,
                                       fetched_at=time.time(), status_code=200))
    for link_id in ids[20:25]:
        store.reject(link_id, Outcome.TRAP, "test")
    queued = {link.url: link.priority for link in links[25:]}
    return queued, [link.url for link in links]


def test_rebuild_restores_exactly_the_queued_urls(make_frontier, store):
    queued, every_url = _fill_store(store)
    frontier = make_frontier()
    frontier.add_new([task(url, 0.5) for url in every_url])
    frontier.pop()
    frontier.clear()  # Redis lost its data
    assert len(frontier) == 0 and frontier.stats()["seen"] == 0
    assert frontier.rebuild(store) == len(queued)
    assert frontier.stats()["seen"] == len(every_url)
    assert frontier.add_new([task(every_url[0], 0.9)]) == [False]  # fetched: dedup holds
    assert frontier.add_new([task("http://new.test/", 0.01)]) == [True]
    popped = {t.url: t.priority for t in drain(frontier)}
    assert popped.pop("http://new.test/") == 0.01
    assert popped == pytest.approx(queued)
    assert len(queued) == sum(1 for _ in store.iter_links(LinkStatus.QUEUED))


def test_threads_never_hold_two_leases_of_one_host(make_frontier):
    frontier = make_frontier(clock=time.time)
    n_urls, n_hosts = 2000, 50
    frontier.push_many([task(f"http://h{i % n_hosts}.test/{i}", (i * 7919 % 1000) / 1000, i)
                        for i in range(n_urls)])
    lock = threading.Lock()
    active: set[str] = set()
    popped: list[str] = []
    overlaps: list[str] = []

    def worker() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            got = frontier.pop()
            if got is None:
                with lock:
                    if len(popped) >= n_urls:
                        return
                time.sleep(0.0005)
                continue
            host = got.url.split("/")[2]
            with lock:
                if host in active:
                    overlaps.append(host)
                active.add(host)
                popped.append(got.url)
            time.sleep(0.0002)  # hold the "request" a moment so overlaps would show
            with lock:
                active.discard(host)  # before the ack: the host stays busy until then
            assert frontier.ack(got)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert overlaps == []
    counts = Counter(popped)
    assert len(counts) == n_urls and set(counts.values()) == {1}
    assert len(frontier) == 0 and frontier.in_flight() == 0


# -- best priority, min_priority, lease checks (the dispatcher's and worker's API) ------------

def test_contract_best_priority_is_the_best_queued(any_frontier):
    frontier = any_frontier()
    assert frontier.best_priority() is None
    frontier.push(task("http://a.test/1", 0.9))
    frontier.push(task("http://a.test/2", 0.7))
    frontier.push(task("http://b.test/1", 0.4))
    assert frontier.best_priority() == 0.9
    first = frontier.pop()
    assert first.url == "http://a.test/1"
    assert frontier.best_priority() == 0.7  # a.test's next URL counts, busy host or not
    if isinstance(frontier, RedisFrontier):
        assert frontier.ack(first)
    assert len(drain(frontier)) == 2
    assert frontier.best_priority() is None


def test_contract_pop_respects_min_priority(any_frontier):
    frontier = any_frontier()
    frontier.push(task("http://a.test/1", 0.3))
    frontier.push(task("http://b.test/1", 0.6))
    assert frontier.pop(min_priority=0.7) is None
    assert len(frontier) == 2
    assert frontier.pop(min_priority=0.6).url == "http://b.test/1"  # the bound is inclusive
    assert frontier.pop(min_priority=0.5) is None
    assert frontier.pop(min_priority=float("-inf")).url == "http://a.test/1"


def test_best_priority_counts_busy_and_sleeping_hosts(make_frontier, clock):
    frontier = make_frontier()
    frontier.push_many([task("http://hot.test/1", 0.9), task("http://hot.test/2", 0.8),
                        task("http://cold.test/1", 0.1), task("http://cold.test/2", 0.05)])
    hot = frontier.pop()
    assert frontier.best_priority() == 0.8  # hot.test is busy
    assert frontier.ack(hot, delay=10.0)
    assert frontier.best_priority() == 0.8  # hot.test sleeps
    # the low-priority rule: cold URLs wait while the better one waits for its host
    assert frontier.pop(min_priority=0.5 * frontier.best_priority()) is None
    assert frontier.in_flight() == 0 and len(frontier) == 3
    clock.advance(10.0)
    assert frontier.pop(min_priority=0.4).url == "http://hot.test/2"
    assert frontier.best_priority() == 0.1


def test_best_index_follows_raises_evictions_releases_and_reaps(make_frontier, clock):
    frontier = make_frontier(max_size=2, lease_seconds=5.0)
    frontier.add_new([task("http://a.test/1", 0.2), task("http://b.test/1", 0.3)])
    assert frontier.best_priority() == 0.3
    assert frontier.add_new([task("http://a.test/1", 0.9)]) == [True]  # raised
    assert frontier.best_priority() == 0.9
    frontier.push(task("http://c.test/1", 0.5))  # evicts b.test/1
    assert frontier.stats()["evicted"] == 1
    got = frontier.pop()
    assert got.url == "http://a.test/1" and frontier.best_priority() == 0.5
    assert frontier.release(got)
    assert frontier.best_priority() == 0.9
    got = frontier.pop()
    clock.advance(6.0)
    assert frontier.best_priority() == 0.5
    assert frontier.reap() == 1
    assert frontier.best_priority() == 0.9
    assert frontier.client.zcard(frontier.prefix + "best") == frontier.hosts() == 2


def test_best_index_is_built_for_a_frontier_written_before_it(make_frontier):
    frontier = make_frontier()
    frontier.push_many([task("http://a.test/1", 0.9), task("http://b.test/1", 0.5)])
    frontier.client.delete(frontier.prefix + "best")  # as an older version left it
    frontier.push(task("http://c.test/1", 0.1))  # indexed; a.test and b.test are not yet
    assert frontier.best_priority() == 0.9
    assert frontier.client.zcard(frontier.prefix + "best") == 3


def test_lease_current_follows_acks_and_reaps(make_frontier, clock):
    frontier = make_frontier(lease_seconds=30.0)
    frontier.push_many([task("http://a.test/1", 0.9), task("http://b.test/1", 0.5)])
    first, second = frontier.pop(), frontier.pop()
    assert frontier.lease_current(first) and frontier.lease_current(second)
    assert frontier.ack(second)
    assert not frontier.lease_current(second)
    clock.advance(31.0)
    assert frontier.reap() == 1
    assert not frontier.lease_current(first)  # reaped
    again = frontier.pop()
    assert again.url == first.url
    assert frontier.lease_current(again) and not frontier.lease_current(first)
    assert frontier.lease_current(task(first.url))  # no token: any lease of the URL


def test_in_flight_below_counts_leased_priorities(make_frontier, clock):
    frontier = make_frontier(lease_seconds=30.0)
    frontier.push_many([task("http://a.test/1", 0.9), task("http://b.test/1", 0.5),
                        task("http://c.test/1", 0.1)])
    leased = {t.url: t for t in (frontier.pop(), frontier.pop(), frontier.pop())}
    assert [frontier.in_flight_below(x) for x in (0.1, 0.5, 0.6, 1.0)] == [0, 1, 2, 3]
    assert frontier.in_flight_below(float("-inf")) == 0
    assert frontier.in_flight_below(float("inf")) == 3
    assert frontier.ack(leased["http://c.test/1"])
    assert frontier.release(leased["http://a.test/1"])
    assert frontier.in_flight_below(1.0) == 1
    clock.advance(31.0)
    assert frontier.reap() == 1
    assert frontier.in_flight_below(1.0) == 0


def test_best_priority_and_leases_match_a_model_under_random_operations(make_frontier):
    rng = random.Random(11)
    frontier = make_frontier(max_size=40)
    queued: dict[str, float] = {}  # the model: what must be queued, and leased
    leased: dict[str, CrawlTask] = {}
    for _ in range(600):
        action = rng.random()
        if action < 0.45:
            url, priority = f"http://h{rng.randrange(8)}.test/{rng.randrange(80)}", rng.random()
            if frontier.push(task(url, priority)):
                queued[url] = max(queued.get(url, -1.0), priority)
            if len(queued) > 40:
                del queued[min(queued, key=queued.get)]
        elif action < 0.75:
            bound = rng.choice([None, rng.random()])
            got = frontier.pop(min_priority=bound)
            if got is not None:
                assert bound is None or got.priority >= bound
                assert queued.pop(got.url) == got.priority
                leased[got.url] = got
        elif leased:
            url = rng.choice(sorted(leased))
            got = leased.pop(url)
            if rng.random() < 0.5:
                assert frontier.ack(got)
            else:
                assert frontier.release(got)
                queued[url] = max(queued.get(url, -1.0), got.priority)
                if len(queued) > 40:
                    del queued[min(queued, key=queued.get)]
        assert _best_index(frontier) == _best_per_host(queued)  # maintained, not rebuilt
        assert frontier.best_priority() == (max(queued.values()) if queued else None)
        cut = rng.random()
        assert frontier.in_flight_below(cut) == sum(t.priority < cut for t in leased.values())
        assert len(frontier) == len(queued) and frontier.in_flight() == len(leased)


def _best_index(frontier: RedisFrontier) -> dict[str, float]:
    entries = frontier.client.zrange(frontier.prefix + "best", 0, -1, withscores=True)
    return {host.decode(): score for host, score in entries}


def _best_per_host(queued: dict[str, float]) -> dict[str, float]:
    best: dict[str, float] = {}
    for url, priority in queued.items():
        host = url.split("/")[2]
        best[host] = max(best.get(host, -1.0), priority)
    return best


# -- the dispatcher's round, the wake list and counted acks -----------------------------------

@pytest.fixture()
def registry(redis_client):
    root = f"jlse:test:{uuid.uuid4().hex}:"
    yield CrawlRegistry(redis_client, root)
    keys = list(redis_client.scan_iter(match=root + "*", count=1000))
    if keys:
        redis_client.unlink(*keys)


def _register(registry: CrawlRegistry, **values) -> RedisFrontier:
    settings = apply_overrides(Settings(), {"max_outstanding": 4, "politeness_delay": 0.0,
                                            "max_pages": 100, **values}, source="test")
    registry.register("c1", {"crawl_id": "c1", "settings": settings.to_dict(),
                             "status": "running", "reason": "", "max_pages": settings.max_pages},
                      None, {})
    return RedisFrontier(registry.client, registry.frontier_prefix("c1"))


def _count(frontier: RedisFrontier, registry: CrawlRegistry, sent: dict) -> bool:
    """A worker finishing a sent task: fetched + 1, then the lease ends."""
    live, counters = frontier.finish(LeasedTask.from_dict(sent),
                                     counters_key=registry.prefix("c1") + "counters",
                                     deltas={"fetched": 1, "relevant": 0})
    assert counters.keys() == {"fetched"}
    return live


def test_dispatch_round_keeps_max_outstanding_and_the_page_budget(registry):
    frontier = _register(registry, max_pages=6)
    frontier.push_many([task(f"http://h{i}.test/", 1.0 - i / 100) for i in range(10)])
    sent: list[dict] = []
    dispatcher = Dispatcher(registry, lambda crawl_id, t: sent.append(t))
    assert dispatcher.serve("c1")[0] == 4  # max_outstanding
    assert [t["url"] for t in sent] == [f"http://h{i}.test/" for i in range(4)]  # best first
    assert dispatcher.serve("c1")[0] == 0
    assert _count(frontier, registry, sent[0]) and _count(frontier, registry, sent[1])
    assert dispatcher.serve("c1")[0] == 2  # 6 - 2 fetched - 2 in flight
    for item in sent[2:]:
        assert _count(frontier, registry, item)
    assert frontier.in_flight() == 0 and registry.counters("c1")["fetched"] == 6
    assert dispatcher.serve("c1")[0] == 0
    assert registry.config("c1")["status"] == "done"
    assert registry.config("c1")["reason"] == "page budget reached"


def test_dispatch_round_reaps_and_follows_a_new_registration(registry):
    frontier = _register(registry, max_outstanding=1)
    frontier.push_many([task("http://a.test/1", 0.9), task("http://b.test/1", 0.5),
                        task("http://c.test/1", 0.1)])
    sent: list[dict] = []
    dispatcher = Dispatcher(registry, lambda crawl_id, t: sent.append(t))
    assert dispatcher.serve("c1")[0] == 1
    registry.client.zadd(frontier.prefix + "deadline", {fingerprint(sent[0]["url"]): 0})
    dispatcher._crawls["c1"].last_reap = -1e9  # a reap is due
    assert dispatcher.serve("c1")[0] == 1  # reaped, and the same URL leased again
    assert sent[1]["url"] == sent[0]["url"] and sent[1]["lease"] != sent[0]["lease"]
    assert not frontier.lease_current(LeasedTask.from_dict(sent[0]))
    _register(registry, max_outstanding=3)  # --resume with other settings: seen at once
    assert dispatcher.serve("c1")[0] == 2
    assert frontier.in_flight() == 3


def test_a_stopped_crawl_gets_no_more_tasks(registry):
    frontier = _register(registry, max_outstanding=1)
    frontier.push_many([task("http://a.test/1"), task("http://b.test/1")])
    sent: list[dict] = []
    dispatcher = Dispatcher(registry, lambda crawl_id, t: sent.append(t))
    assert dispatcher.round()[0] == 1
    registry.set_status("c1", "stopped", "interrupted")
    assert frontier.ack(LeasedTask.from_dict(sent[0]))
    assert dispatcher.serve("c1")[0] == 0  # the round's script sees it, whatever was cached
    assert dispatcher.round()[0] == 0 and len(frontier) == 1


def test_acks_wake_a_waiting_dispatcher(registry):
    frontier = _register(registry)
    frontier.push_many([task("http://a.test/1"), task("http://b.test/1")])
    sent: list[dict] = []
    dispatcher = Dispatcher(registry, lambda crawl_id, t: sent.append(t))
    dispatcher.serve("c1")
    started = time.monotonic()
    dispatcher.wait(0.4)  # no lease ended: waits it out
    assert time.monotonic() - started >= 0.25
    for item in sent:
        assert frontier.ack(LeasedTask.from_dict(item))
    assert registry.client.llen(frontier.wake_key) == 1  # one token, however many acks
    started = time.monotonic()
    dispatcher.wait(5.0)
    assert time.monotonic() - started < 1.0
    frontier.push(task("http://a.test/2"))
    dispatcher.serve("c1")
    assert registry.client.llen(frontier.wake_key) == 0  # a round takes the news in


def test_finish_counts_only_with_the_live_lease(make_frontier, redis_client, clock):
    frontier = make_frontier(lease_seconds=30.0)
    counters = frontier.prefix + "counters"
    frontier.push_many([task("http://a.test/1"), task("http://b.test/1")])
    first, second = frontier.pop(), frontier.pop()
    live, values = frontier.finish(first, counters_key=counters,
                                   deltas={"fetched": 1, "targets": 0, "relevant": 2})
    assert live and values == {"fetched": 1, "relevant": 2}
    assert frontier.finish(first, counters_key=counters, deltas={"fetched": 1}) == (False, {})
    clock.advance(31.0)
    assert frontier.reap() == 1
    again = frontier.pop()
    assert frontier.finish(second, counters_key=counters, deltas={"fetched": 1}) == (False, {})
    assert frontier.finish(again, counters_key=counters, deltas={"fetched": 1}) == \
        (True, {"fetched": 2})  # the reaped URL is counted once, by its live lease
    assert int(redis_client.hget(counters, "fetched")) == 2


def test_record_fetch_once_counts_a_page_once(pg_store_url):
    from jlse.scheduler.store import open_store

    with open_store(pg_store_url) as store:
        (url_id, _), = store.add_links([NewLink("http://a.test/1", None, 0, "a")])
        record = FetchRecord(url_id=url_id, url="http://a.test/1", outcome=Outcome.OK,
                             fetched_at=time.time(), status_code=200, relevance=0.9,
                             is_target=True, title="first")
        assert store.record_fetch_once(record)
        record.title = "second"
        assert not store.record_fetch_once(record)  # written meanwhile: history row only
        stats = store.stats()
        assert (stats.fetched, stats.targets, stats.outcomes) == (1, 1, {"ok": 2})
        assert store.get_link(url_id).title == "first"


def test_autocommit_calls_write_and_leave_transactions_as_they_were(pg_store_url):
    from jlse.scheduler.store import open_store

    with open_store(pg_store_url) as store:
        with store.autocommit():
            ids = store.add_links([NewLink(f"http://a.test/{i}", None, 0, "a", priority=0.5)
                                   for i in range(3)])
            again = store.add_links([NewLink("http://a.test/0", None, 0, "a", priority=0.9)])
            assert again == [(ids[0][0], False)]
            assert store.get_link(ids[0][0]).priority == 0.9
            assert store.record_fetch_once(FetchRecord(url_id=ids[1][0], url="",
                                                       outcome=Outcome.OK))
        assert not store._conn.autocommit
        store.reject(ids[2][0], Outcome.TRAP, "test")  # a two-statement transaction again
        stats = store.stats()
        assert (stats.queued, stats.fetched, stats.rejected) == (1, 1, 1)
