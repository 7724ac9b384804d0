"""What only the Redis frontier does, against the real Redis (``REDIS_URL``, default
127.0.0.1:6379): dedup, rebuild, payloads, the best index, threads, the dispatcher's round.
The behaviour both frontiers share (and the leases) is in ``test_frontier_contract.py``.

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
from dataclasses import replace
from pathlib import Path

import pytest
import redis

from jlse.records import CrawlTask, FetchRecord, LinkStatus, NewLink, Outcome
from jlse.scheduler.crawl_registry import CrawlRegistry
from jlse.scheduler.dispatcher import Dispatcher
from jlse.scheduler.redis_frontier import LeasedTask, RedisFrontier, fingerprint, task_json
from jlse.scheduler.sharded_frontier import ShardedFrontier
from jlse.settings import Settings, apply_overrides

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
REPO = Path(__file__).resolve().parents[1]


def task(url: str, priority: float = 1.0, url_id: int = 0, **extra) -> CrawlTask:
    return CrawlTask(url=url, url_id=url_id, priority=priority, **extra)


def drain(frontier: RedisFrontier) -> list[CrawlTask]:
    """Pop everything, acking each pop at once (no delay)."""
    popped = []
    while (got := frontier.pop()) is not None:
        popped.append(got)
        assert frontier.ack(got)
    return popped


def urls_of(tasks: list[CrawlTask]) -> list[str]:
    return [t.url for t in tasks]


# -- Redis specifics ---------------------------------------------------------------------------

def test_eviction_is_counted_and_ties_evict_the_latest(make_redis_frontier):
    frontier = make_redis_frontier(max_size=2)
    flags = frontier.push_many([task("http://a.test/0", 0.2), task("http://b.test/1", 0.2),
                                task("http://c.test/2", 0.9)])
    assert flags == [True, True, True]
    assert frontier.stats()["evicted"] == 1
    assert urls_of(drain(frontier)) == ["http://c.test/2", "http://a.test/0"]




def test_payload_round_trips_as_json(make_redis_frontier):
    frontier = make_redis_frontier()
    original = task("http://a.test/p", 0.25, 42, depth=3, parent_id=7, anchor_text="手机 评测",
                    context="near\tthe link", redirect_hops=1, pattern_run=2)
    frontier.push(original)
    got = frontier.pop()
    # the anchor text and context stay in the crawl database (the worker reads them there)
    assert CrawlTask.from_dict(got.to_dict()) == replace(original, anchor_text="", context="")
    assert b"anchor_text" not in task_json(original)
    assert b"depth" not in task_json(task("http://a.test/", 1.0))  # defaults left out














def test_works_with_a_decoding_client(make_redis_frontier, clock):
    client = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    frontier = make_redis_frontier()
    decoding = RedisFrontier(client, frontier.prefix, clock=clock, default_delay=2.0)
    assert decoding.add_new([task("http://a.test/é", 0.5, depth=2)]) == [True]
    got = decoding.pop()
    assert (got.url, got.depth) == ("http://a.test/é", 2)
    assert decoding.ack(got) and decoding.next_ready_in() == pytest.approx(2.0)
    client.close()


def test_worker_killed_with_sigkill_loses_no_url(make_redis_frontier, clock):
    frontier = make_redis_frontier(lease_seconds=60.0)
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




def test_add_new_dedups_by_fingerprint(make_redis_frontier):
    frontier = make_redis_frontier()
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
                                "seen": 2, "spilled_hosts": 0}
    assert len(fingerprint(x)) == 8




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


def test_rebuild_restores_exactly_the_queued_urls(make_redis_frontier, store):
    queued, every_url = _fill_store(store)
    frontier = make_redis_frontier()
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


def test_threads_never_hold_two_leases_of_one_host(make_redis_frontier):
    frontier = make_redis_frontier(clock=time.time)
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


# -- the best index (best_priority in O(log hosts)) ----------------------------------------

def test_best_index_follows_raises_evictions_releases_and_reaps(make_redis_frontier, clock):
    frontier = make_redis_frontier(max_size=2, lease_seconds=5.0)
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


def test_best_index_is_built_for_a_frontier_written_before_it(make_redis_frontier):
    frontier = make_redis_frontier()
    frontier.push_many([task("http://a.test/1", 0.9), task("http://b.test/1", 0.5)])
    frontier.client.delete(frontier.prefix + "best")  # as an older version left it
    frontier.push(task("http://c.test/1", 0.1))  # indexed; a.test and b.test are not yet
    assert frontier.best_priority() == 0.9
    assert frontier.client.zcard(frontier.prefix + "best") == 3






def test_best_priority_and_leases_match_a_model_under_random_operations(make_redis_frontier):
    rng = random.Random(11)
    frontier = make_redis_frontier(max_size=40)
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


def _register(registry: CrawlRegistry, **values) -> ShardedFrontier:
    settings = apply_overrides(Settings(), {"max_outstanding": 4, "politeness_delay": 0.0,
                                            "max_pages": 100, **values}, source="test")
    registry.register("c1", {"crawl_id": "c1", "settings": settings.to_dict(),
                             "status": "running", "reason": "", "max_pages": settings.max_pages},
                      None, {})
    return registry.frontier("c1")


def _count(frontier: ShardedFrontier, registry: CrawlRegistry, sent: dict) -> bool:
    """A worker finishing a sent task: fetched + 1, then the lease ends."""
    live, counters = frontier.finish(LeasedTask.from_dict(sent),
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
    frontier = _register(registry, max_outstanding=1, domain_diversity=1)
    frontier.push_many([task("http://a.test/1", 0.9), task("http://b.test/1", 0.5),
                        task("http://c.test/1", 0.1)])
    sent: list[dict] = []
    dispatcher = Dispatcher(registry, lambda crawl_id, t: sent.append(t))
    assert dispatcher.serve("c1")[0] == 1
    registry.client.zadd(frontier.shards[0].prefix + "deadline",
                         {fingerprint(sent[0]["url"]): 0})
    dispatcher._crawls["c1"].shards[0].last_reap = -1e9  # a reap is due
    assert dispatcher.serve("c1")[0] == 1  # reaped, and the same URL leased again
    assert sent[1]["url"] == sent[0]["url"] and sent[1]["lease"] != sent[0]["lease"]
    assert not frontier.lease_current(LeasedTask.from_dict(sent[0]))
    # --resume with other settings: seen at once
    _register(registry, max_outstanding=3, domain_diversity=1)
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
    assert registry.client.llen(frontier.shards[0].wake_key) == 1  # one token, however many acks
    started = time.monotonic()
    dispatcher.wait(5.0)
    assert time.monotonic() - started < 1.0
    frontier.push(task("http://a.test/2"))
    dispatcher.serve("c1")
    assert registry.client.llen(frontier.shards[0].wake_key) == 0  # a round takes the news in




def test_a_url_whose_task_redis_lost_is_skipped_and_refilled_from_the_database(registry):
    """Part of a crawl's keys lost (a failover's last writes, a manual delete): a queued URL
    whose task is gone is not handed out; its host is due a refill from PostgreSQL instead."""
    frontier = _register(registry).shards[0]
    frontier.push_many([task("http://a.test/1", 0.9), task("http://a.test/2", 0.8),
                        task("http://b.test/1", 0.5)])
    registry.client.hdel(frontier.prefix + "t:a.test", fingerprint("http://a.test/1"))
    popped = frontier.pop()
    assert popped is not None and popped.url == "http://a.test/2"
    assert frontier.stats()["evicted"] == 1  # counted as spilled: a refill brings it back
    assert registry.client.hexists(frontier.prefix + "spill", "a.test")


def test_a_failing_round_leaves_the_dispatcher_serving_the_other_crawls(registry, caplog):
    damaged = _register(registry)
    damaged.push_many([task("http://a.test/1")])
    registry.client.delete(damaged.shards[0].prefix + "ready")
    registry.client.set(damaged.shards[0].prefix + "ready", "not a sorted set")
    settings = apply_overrides(Settings(), {"max_outstanding": 4, "politeness_delay": 0.0},
                               source="test")
    registry.register("c2", {"crawl_id": "c2", "settings": settings.to_dict(),
                             "status": "running", "reason": "", "max_pages": 100}, None, {})
    registry.frontier("c2").push_many([task("http://b.test/1"), task("http://c.test/1")])
    sent: list[tuple[str, dict]] = []
    dispatcher = Dispatcher(registry, lambda crawl_id, t: sent.append((crawl_id, t)))
    assert dispatcher.round()[0] == 2
    assert {crawl_id for crawl_id, _ in sent} == {"c2"}
    assert "crawl c1: a frontier script failed" in caplog.text
    caplog.clear()
    dispatcher.round()
    assert "script failed" not in caplog.text  # said once, not every round


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
