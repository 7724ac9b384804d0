"""The sharded frontier: routing by registered domain, per-shard rules, and the host windows
that spill URLs to the crawl database and bring every one of them back.

Runs on the real Redis (``client``) and both crawl databases (``store``); the contract
suite (``test_frontier_contract.py``) covers what a sharded frontier shares with the others.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from jlse.records import CrawlTask, FetchRecord, LinkStatus, NewLink, Outcome
from jlse.scheduler.redis_frontier import RedisFrontier
from jlse.scheduler.sharded_frontier import ShardedFrontier
from jlse.scheduler.shards import shard_of, shard_prefix
from jlse.scheduler.urls import host_of


@pytest.fixture(params=["redis", "cluster"])
def client(request):
    """The plain Redis, or the session's Redis Cluster of 3 masters."""
    return request.getfixturevalue("redis_client" if request.param == "redis"
                                   else "redis_cluster_client")


def task(url: str, priority: float = 1.0, url_id: int = 0) -> CrawlTask:
    return CrawlTask(url=url, url_id=url_id, priority=priority)


def hosts_of_shard(shard: int, shards: int, count: int, domain_hosts: bool = False) -> list[str]:
    """``count`` host names owned by ``shard`` (of different registered domains, or with
    ``domain_hosts`` subdomains of one)."""
    found = []
    for i in range(100_000):
        host = f"h{i}.one.test" if domain_hosts else f"site{i}.test"
        if shard_of(host, shards) == shard:
            found.append(host)
            if len(found) == count:
                return found
    raise AssertionError("no such hosts")


# -- routing --------------------------------------------------------------------------------

def test_a_domain_and_its_hosts_share_a_shard_and_domains_spread_evenly():
    assert shard_of("a.example.com", 7) == shard_of("b.example.com", 7) == \
        shard_of("example.com", 7) == shard_of("WWW.Example.com", 7)
    counts = Counter(shard_of(f"site{i}.test", 4) for i in range(8000))
    assert sorted(counts) == [0, 1, 2, 3]
    assert all(1800 <= n <= 2200 for n in counts.values()), counts
    assert all(shard_of(f"site{i}.test", 1) == 0 for i in range(100))


def test_each_shard_prefix_is_a_hash_tag_of_its_own():
    assert shard_prefix("jlse:c1:", "c1", 2) == "jlse:c1:{c1.2}:"


def test_urls_go_to_their_hosts_shard_and_come_out_in_priority_order(make_sharded_frontier,
                                                                    client):
    frontier = make_sharded_frontier(client, shards=3)
    rng = random.Random(5)
    tasks = [task(f"http://site{i % 40}.test/{i}", rng.random(), i) for i in range(600)]
    assert all(frontier.push_many(tasks))
    for index, shard in enumerate(frontier.shards):
        expected = sum(1 for t in tasks if shard_of(host_of(t.url), 3) == index)
        assert len(shard) == expected > 0
    assert len(frontier) == 600
    popped = []
    while (got := frontier.pop()) is not None:
        popped.append(got.priority)
        assert frontier.finish(got, deltas={"fetched": 1})[0]
    assert popped == sorted((t.priority for t in tasks), reverse=True)
    assert frontier.counters() == {"fetched": 600}


def test_links_of_many_pages_cost_one_push_per_shard(make_sharded_frontier, client,
                                                    monkeypatch):
    """A batch's links (``fetch_batch``) reach each shard in one PUSH script call, however
    many pages and hosts they come from: what makes batches cheaper for Redis."""
    frontier = make_sharded_frontier(client)
    calls: list[str] = []
    inner = RedisFrontier.add_new

    def counted(shard: RedisFrontier, tasks):
        calls.append(shard.prefix)
        return inner(shard, tasks)

    monkeypatch.setattr(RedisFrontier, "add_new", counted)
    hosts = [host for shard in range(3) for host in hosts_of_shard(shard, 3, 4)]
    frontier.add_discovered([task(f"http://{host}/{page}", 0.5, i) for i, (host, page)
                             in enumerate((host, page) for host in hosts for page in range(8))],
                            [True] * len(hosts) * 8)
    assert sorted(calls) == sorted(shard.prefix for shard in frontier.shards)
    assert len(frontier) == len(hosts) * 8


def test_dedup_and_leases_stay_in_the_shard(make_sharded_frontier, client):
    frontier = make_sharded_frontier(client, shards=3)
    urls = [f"http://site{i}.test/" for i in range(30)]
    assert frontier.add_new([task(url) for url in urls]) == [True] * 30
    assert frontier.add_new([task(url) for url in urls]) == [False] * 30
    assert frontier.stats()["seen"] == 30
    got = frontier.pop()
    assert frontier.lease_current(got)
    assert frontier.renew([(got.url, got.lease)], 60.0) == 1
    assert frontier.in_flight() == 1 == frontier.shard_for(got.url).in_flight()


# -- per-shard rules ----------------------------------------------------------------------------

def test_the_bound_holds_per_shard(make_sharded_frontier, client):
    frontier = make_sharded_frontier(client, shards=2, max_size=3)
    for shard in (0, 1):
        hosts = hosts_of_shard(shard, 2, 4)
        frontier.push_many([task(f"http://{host}/", 0.1 * (i + 1)) for i, host in enumerate(hosts)])
    assert [len(shard) for shard in frontier.shards] == [3, 3]
    assert frontier.stats()["evicted"] == 2


def test_domain_diversity_holds_per_shard(make_sharded_frontier, client):
    frontier = make_sharded_frontier(client, shards=2, diversity=3, slack=0.1)
    a, b = hosts_of_shard(0, 2, 2)
    frontier.push_many([task(f"http://{a}/{i}", 0.9) for i in range(3)] +
                       [task(f"http://{b}/{i}", 0.5) for i in range(3)])
    order = []
    while (got := frontier.pop()) is not None:
        order.append(host_of(got.url))
        frontier.finish(got)
    assert order[:2] == [a, b]  # b is taken while a was popped lately


# -- host windows, spill and refill ----------------------------------------------------------

def _fetch_all(frontier: ShardedFrontier, store) -> list[str]:
    """A crawl's workers and dispatcher in one loop: pop, record the fetch in the crawl
    database, finish; refill whenever nothing is ready. The URLs in the order fetched."""
    fetched = []
    while True:
        got = frontier.pop()
        if got is None:
            if frontier.refill(store) == 0 and frontier.pop() is None and \
                    frontier.stats()["spilled_hosts"] == 0:
                return fetched
            continue
        with store.autocommit():
            store.record_fetch(FetchRecord(url_id=got.url_id, url=got.url, outcome=Outcome.OK,
                                           fetched_at=1.0, status_code=200))
        assert frontier.finish(got, deltas={"fetched": 1})[0]
        fetched.append(got.url)


def _discover(store, frontier, links: list[NewLink]) -> None:
    """What a worker does with new links: the database first, then the frontier."""
    with store.autocommit():
        ids = store.add_links(links)
    frontier.add_new([task(link.url, link.priority, url_id) for link, (url_id, _)
                      in zip(links, ids, strict=True)])


def test_a_host_beyond_its_window_spills_and_every_url_comes_back_once(
        make_sharded_frontier, client, store):
    frontier = make_sharded_frontier(client, shards=2, window=4)
    rng = random.Random(1)
    links = [NewLink(f"http://big.test/{i}", None, 1, "", priority=rng.random())
             for i in range(30)]
    links += [NewLink(f"http://small{i}.test/", None, 1, "", priority=0.5) for i in range(5)]
    _discover(store, frontier, links)
    assert len(frontier.shard_for("http://big.test/")) <= 4 + 5
    assert frontier.stats()["spilled_hosts"] == 1
    fetched = _fetch_all(frontier, store)
    assert sorted(fetched) == sorted(link.url for link in links)  # each exactly once
    big = [url for url in fetched if url.startswith("http://big.test/")]
    by_priority = sorted((link for link in links if "big" in link.url),
                         key=lambda link: -link.priority)
    assert big == [link.url for link in by_priority]  # the window keeps the host's order
    assert frontier.stats()["spilled_hosts"] == 0
    assert not list(store.iter_links(LinkStatus.QUEUED))


def test_a_full_shard_spills_many_hosts_and_strands_none(make_sharded_frontier, client,
                                                         store):
    frontier = make_sharded_frontier(client, shards=3, max_size=20, window=5)
    rng = random.Random(2)
    links = [NewLink(f"http://site{rng.randrange(25)}.test/{i}", None, 1, "",
                     priority=rng.random()) for i in range(400)]
    unique = {link.url: link for link in links}
    _discover(store, frontier, list(unique.values()))
    assert all(len(shard) <= 20 for shard in frontier.shards)
    fetched = _fetch_all(frontier, store)
    assert Counter(fetched) == Counter(list(unique))  # every URL fetched, none twice


def test_a_refill_skips_urls_leased_or_just_finished(make_sharded_frontier, client,
                                                     store):
    """The database may still say "queued" for a URL whose fetch is being written: a refill
    must not queue it again."""
    frontier = make_sharded_frontier(client, shards=1, window=2)
    links = [NewLink(f"http://big.test/{i}", None, 1, "", priority=1.0 - i / 10)
             for i in range(5)]
    _discover(store, frontier, links)
    first = frontier.pop()
    assert frontier.finish(first)[0]  # finished, but its fetch not yet in the database
    second = frontier.pop()  # leased
    assert frontier.stats()["queued"] == 0
    assert frontier.refill(store) == 2  # big.test/2 and /3: not /0 (done) nor /1 (leased)
    assert frontier.stats()["spilled_hosts"] == 1  # /4 is still to come
    assert frontier.finish(second)[0]
    again = []
    while (got := frontier.pop()) is not None:
        again.append(got.url)
        frontier.finish(got)
    assert first.url not in again and second.url not in again


def test_a_refill_claim_that_is_never_completed_lapses(make_sharded_frontier, client,
                                                       store, clock):
    frontier = make_sharded_frontier(client, shards=1, window=2)
    shard = frontier.shards[0]
    links = [NewLink(f"http://big.test/{i}", None, 1, "", priority=1.0) for i in range(6)]
    _discover(store, frontier, links)
    for _ in range(2):
        frontier.finish(frontier.pop())
    claim = shard._run("refill_claim", [shard.prefix, repr(clock()), "60", 10, shard.max_size,
                                        shard.window])
    assert claim[0] == b"big.test"  # a refiller claims the host, then dies
    assert shard.refill(store) == 0  # claimed: nobody else takes it
    clock.advance(61)
    assert shard.refill(store) == 2  # the claim lapsed


def test_hosts_with_few_urls_pay_no_window(make_sharded_frontier, client):
    """The queue and task hash of a small host stay compact (listpack) in Redis."""
    frontier = make_sharded_frontier(client, shards=1, window=1000)
    frontier.push_many([task(f"http://small.test/{i}", 0.5) for i in range(20)])
    prefix = frontier.shards[0].prefix
    assert client.object("encoding", prefix + "q:small.test") == b"listpack"
    assert client.object("encoding", prefix + "t:small.test") == b"listpack"


@pytest.mark.parametrize("shards", [1, 3])
def test_rebuild_puts_every_queued_url_in_its_shard(make_sharded_frontier, client, store,
                                                    shards):
    frontier = make_sharded_frontier(client, shards=shards)
    links = [NewLink(f"http://site{i}.test/{j}", None, 1, "", priority=0.5)
             for i in range(20) for j in range(3)]
    with store.autocommit():
        store.add_links(links)
    assert frontier.rebuild(store) == 60
    for index, shard in enumerate(frontier.shards):
        assert len(shard) == sum(1 for link in links
                                 if shard_of(host_of(link.url), shards) == index)
    assert isinstance(frontier.shards[0], RedisFrontier)
