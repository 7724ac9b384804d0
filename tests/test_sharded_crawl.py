"""A registered crawl over several frontier shards: the registry's per-shard state, the
dispatcher's rounds (one script per shard, the page budget the crawl's), and robots.txt
answers shared by every process. Real Redis under a private key prefix (``registry``)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import pytest

from jlse.records import CrawlTask, Outcome
from jlse.scheduler.crawl_registry import CrawlRegistry
from jlse.scheduler.dispatch_shards import REFILL_EVERY
from jlse.scheduler.dispatcher import Dispatcher, parse_shard_spec
from jlse.scheduler.redis_frontier import LeasedTask
from jlse.scheduler.redis_ledger import RedisHostLedger, set_host_counts
from jlse.scheduler.redis_robots import RedisRobotsStore, decode, encode
from jlse.scheduler.robots import RobotsCache
from jlse.scheduler.sharded_frontier import ShardedFrontier
from jlse.scheduler.shards import shard_of
from jlse.settings import Settings, apply_overrides

SHARDS = 3


def _register(registry: CrawlRegistry, crawl: str = "s1", **values) -> ShardedFrontier:
    settings = apply_overrides(Settings(), {"max_outstanding": 6, "politeness_delay": 0.0,
                                            "max_pages": 100, "frontier_shards": SHARDS,
                                            "domain_diversity": 1, **values}, source="test")
    registry.register(crawl, {"crawl_id": crawl, "settings": settings.to_dict(),
                              "status": "running", "reason": "",
                              "max_pages": settings.max_pages}, None, {"fetched": 5})
    return registry.frontier(crawl)


def _sites(count: int) -> list[str]:
    return [f"http://site{i}.test/" for i in range(count)]


def test_registration_writes_every_shard_and_counters_sum(registry):
    frontier = _register(registry)
    assert len(frontier.shards) == SHARDS
    for index, shard in enumerate(frontier.shards):
        assert shard.prefix == registry.frontier_prefix("s1", index)
        assert shard.prefix.startswith(registry.shard_prefix("s1", index))
        state = registry.client.hgetall(registry.shard_prefix("s1", index) + "state")
        assert state[b"active"] == b"1"
    assert registry.counters("s1")["fetched"] == 5  # the resumed figure, in shard 0
    registry.bump("s1", shard=2, fetched=3)
    assert registry.counters("s1")["fetched"] == 8
    registry.set_status("s1", "stopped", "test")
    assert all(registry.client.hget(registry.shard_prefix("s1", index) + "state", "active")
               == b"0" for index in range(SHARDS))
    assert registry.active() == []
    assert registry.clear("s1") > 0
    assert registry.known() == []


def test_the_host_ledger_keeps_hosts_and_domains_in_their_shard(registry):
    _register(registry)
    ledger = RedisHostLedger(registry, "s1")
    assert ledger.shards == SHARDS
    hosts = [f"h{i}.site{i}.test" for i in range(12)]
    for host in hosts:
        ledger.fetch_counts(host, [])
    ledger.fetch_counts("x.site0.test", [])
    counts = ledger.fetch_counts(None, hosts + ["@site0.test", "#site0.test", "other.test"])
    assert counts["h0.site0.test"] == 1 and counts["other.test"] == 0
    assert counts["@site0.test"] == 2 and counts["#site0.test"] == 2
    shard = shard_of("site0.test", SHARDS)
    key = registry.shard_prefix("s1", shard) + "hosts"
    assert registry.client.hget(key, "@site0.test") == b"2"
    assert ledger.note_robots_failure("h3.site3.test") == 1
    assert ledger.robots_failures("h3.site3.test") == 1
    set_host_counts(registry, "s1", {"a.test": 4, "b.a.test": 1})
    assert ledger.fetch_counts(None, ["a.test", "@a.test", "#a.test"]) == \
        {"a.test": 4, "@a.test": 5, "#a.test": 2}


def test_a_frontier_rebuild_keeps_the_shards_registration(registry):
    """The frontier's keys are a part of the shard's: clearing them (``rebuild``) leaves the
    shard's state, counters and host ledger alone."""
    frontier = _register(registry)
    registry.bump("s1", shard=1, fetched=2)
    frontier.push_many([CrawlTask(url=url, url_id=i) for i, url in enumerate(_sites(10))])
    frontier.clear()
    assert len(frontier) == 0
    assert registry.counters("s1")["fetched"] == 7
    assert all(registry.client.hget(registry.shard_prefix("s1", index) + "state", "sha1")
               for index in range(SHARDS))


def test_task_start_reads_the_tasks_shard(registry):
    frontier = _register(registry)
    frontier.push_many([CrawlTask(url=url, url_id=i) for i, url in enumerate(_sites(10))])
    got = frontier.pop()
    digest = Dispatcher(registry, lambda *_: None)._crawl("s1").config_sha1
    start = registry.task_start("s1", digest, got, shards=SHARDS)
    assert start is not None and start.lease_current
    assert registry.task_start("s1", "0" * 40, got, shards=SHARDS) is None  # another config


@dataclass
class Recorder:
    sent: list

    def __call__(self, crawl_id: str, task: dict) -> None:
        self.sent.append(task)


def test_one_dispatcher_serves_every_shard_within_the_crawls_budget(registry):
    frontier = _register(registry, max_pages=12, max_outstanding=4)
    frontier.push_many([CrawlTask(url=url, url_id=i, priority=1 - i / 100)
                        for i, url in enumerate(_sites(40))])
    recorder = Recorder([])
    dispatcher = Dispatcher(registry, recorder)
    assert dispatcher.serve("s1")[0] == 4  # max_outstanding is the crawl's, not per shard
    assert {shard_of(t["url"].split("/")[2], SHARDS) for t in recorder.sent} != set()
    while frontier.in_flight():
        for item in list(recorder.sent):
            frontier.finish(LeasedTask.from_dict(item), deltas={"fetched": 1})
            recorder.sent.remove(item)
        dispatcher.serve("s1")
    assert registry.counters("s1")["fetched"] == 12  # the resumed 5 included
    assert registry.config("s1")["status"] == "done"


def test_dispatchers_split_the_shards_and_share_the_budget(registry):
    frontier = _register(registry, max_pages=25, max_outstanding=30)
    frontier.push_many([CrawlTask(url=url, url_id=i) for i, url in enumerate(_sites(60))])
    sent = [Recorder([]) for _ in range(SHARDS)]
    dispatchers = [Dispatcher(registry, sent[i], shard_spec=f"{i}/{SHARDS}")
                   for i in range(SHARDS)]
    for dispatcher in dispatchers:
        dispatcher.serve("s1")
    for index, recorder in enumerate(sent):
        assert {shard_of(t["url"].split("/")[2], SHARDS) for t in recorder.sent} <= {index}
    total = sum(len(recorder.sent) for recorder in sent)
    assert total == 25 - 5  # the budget, less the 5 fetched before; none over it
    for recorder in sent:
        for item in recorder.sent:
            frontier.finish(LeasedTask.from_dict(item), deltas={"fetched": 1})
    for dispatcher in dispatchers:
        dispatcher.serve("s1")
    assert registry.config("s1")["reason"] == "page budget reached"


def test_each_shard_keeps_its_share_of_the_domain_diversity_window(registry):
    # a shard makes about a third of the crawl's pops: 34 of them span about 100 of the crawl's
    assert [shard.diversity for shard in
            _register(registry, domain_diversity=100).shards] == [34] * SHARDS
    assert [shard.diversity for shard in
            _register(registry, "s2", domain_diversity=100, frontier_shards=1).shards] == [100]
    assert {shard.diversity for shard in _register(registry, "s3").shards} == {1}  # off


def test_a_shard_spec_is_checked():
    assert parse_shard_spec(None) == (0, 1) and parse_shard_spec("2/3") == (2, 3)
    for bad in ("3/3", "x", "1/0", "-1/2"):
        try:
            parse_shard_spec(bad)
        except ValueError as exc:
            assert "--shard" in str(exc)
        else:
            raise AssertionError(bad)


def test_a_shard_whose_hosts_spilled_gets_a_refill_task(registry):
    frontier = _register(registry, host_window=2, max_outstanding=1)
    frontier.push_many([CrawlTask(url=f"http://big.test/{i}", url_id=i) for i in range(6)])
    refills: list[tuple[str, int]] = []
    now = [1000.0]
    dispatcher = Dispatcher(registry, Recorder([]), clock=lambda: now[0],
                            send_refill=lambda crawl, shard: refills.append((crawl, shard)))
    dispatcher.serve("s1")  # its first round refills every shard (URLs deferred before it)
    assert sorted(refills) == [("s1", shard) for shard in range(SHARDS)]
    refills.clear()
    dispatcher.serve("s1")
    assert refills == []  # at most one per shard and REFILL_EVERY
    now[0] += REFILL_EVERY
    dispatcher.serve("s1")  # /0 taken: the window is down to one, the host is due a refill
    assert refills == [("s1", shard_of("big.test", SHARDS))]  # the others are due nothing


@dataclass
class Answer:
    outcome: Outcome
    status_code: int | None
    text: str | None
    error: str = ""


def test_robots_txt_is_fetched_once_for_every_process_of_a_crawl(registry):
    _register(registry)
    fetched: list[str] = []

    def fetch(url: str) -> Answer:
        fetched.append(url)
        return Answer(Outcome.OK, 200, "User-agent: *\nDisallow: /private\nCrawl-delay: 2\n")

    settings = Settings()
    processes = [RobotsCache(settings, fetch, shared=RedisRobotsStore(
        registry.client, registry.prefix("s1"), "s1", SHARDS)) for _ in range(4)]
    for cache in processes:
        assert cache.check("http://site1.test/a").allowed
        assert not cache.check("http://site1.test/private/x").allowed
        assert cache.crawl_delay("site1.test") == 2.0
    assert fetched == ["http://site1.test/robots.txt"]
    assert processes[0].check("http://site1.test/").fetched is False


def test_an_unreachable_robots_txt_is_shared_only_for_its_retry_time(registry):
    store = RedisRobotsStore(registry.client, registry.prefix("s1"), "s1", SHARDS)
    store.put("http://down.test", Answer(Outcome.TIMEOUT, None, None, "timed out"), 0.05)
    assert store.get("http://down.test").outcome is Outcome.TIMEOUT
    import time

    time.sleep(0.1)
    assert store.get("http://down.test") is None


def test_stored_answers_round_trip_and_garbage_is_ignored():
    answer = Answer(Outcome.OK, 200, "User-agent: *\nAllow: /\n" + "x" * 10)
    stored = decode(encode(answer))
    assert (stored.outcome, stored.status_code, stored.text) == (Outcome.OK, 200, answer.text)
    assert decode(b"not\tours") is None and decode(b"ok\t200\t\nnot zlib") is None


def test_a_crawl_on_a_redis_cluster_gets_a_shard_per_master(redis_cluster_client):
    import uuid

    import pytest

    from jlse.cluster import _shards_for
    from jlse.run import CrawlSetupError

    registry = CrawlRegistry(redis_cluster_client, f"jlsetest{uuid.uuid4().hex[:6]}:")
    default = Settings()
    assert _shards_for(registry, "c1", default, False, False).frontier_shards == 3
    given = apply_overrides(default, {"frontier_shards": 5}, source="test")
    assert _shards_for(registry, "c1", given, True, False).frontier_shards == 5
    registry.register("c1", {"crawl_id": "c1", "settings": given.to_dict(), "status": "done"},
                      None, {})
    assert _shards_for(registry, "c1", default, False, True).frontier_shards == 5  # resumed
    with pytest.raises(CrawlSetupError, match="keeps them"):
        _shards_for(registry, "c1", apply_overrides(default, {"frontier_shards": 2}, "test"),
                    True, True)
    registry.clear("c1")


def _push_hot_and_junk(frontier) -> str:
    """Three URLs at 1.0 on one host of shard 0, one at 0.1 on each of 6 hosts of shard 1;
    returns the hot host."""
    from test_sharded_frontier import hosts_of_shard

    hot, = hosts_of_shard(0, SHARDS, 1)
    junk = hosts_of_shard(1, SHARDS, 6)
    frontier.push_many([CrawlTask(url=f"http://{hot}/{i}", url_id=i, priority=1.0)
                        for i in range(3)] +
                       [CrawlTask(url=f"http://{host}/", url_id=10 + i, priority=0.1)
                        for i, host in enumerate(junk)])
    return hot


def test_low_urls_are_low_against_the_best_of_the_whole_crawl(registry):
    """A shard holding only junk does not fill the free slots with it while a better URL of
    another shard waits for its host: "low" is below priority_slack x the crawl's best, and
    the low slots are the crawl's."""
    frontier = _register(registry, max_outstanding=8, low_priority_slots=1,
                         low_priority_share=1.0)
    _push_hot_and_junk(frontier)
    recorder = Recorder([])
    dispatcher = Dispatcher(registry, recorder)
    for _ in range(3):
        dispatcher.serve("s1")
    assert sorted(task["priority"] for task in recorder.sent) == [0.1, 1.0]


def test_a_host_sleeping_long_in_one_shard_does_not_hold_the_others_back(registry):
    """The crawl's best URL waits 10 minutes in shard 0 (robots.txt unavailable): it is not
    the crawl's best for the low-priority rule, so another shard's ready URLs are not "low"
    against it and take the free slots at once."""
    frontier = _register(registry, max_outstanding=8, low_priority_slots=1,
                         low_priority_share=0.1)
    hot = _push_hot_and_junk(frontier)
    leased = frontier.pop()
    assert leased.url.startswith(f"http://{hot}/") and frontier.release(leased, 600.0)
    recorder = Recorder([])
    dispatcher = Dispatcher(registry, recorder)
    for _ in range(3):
        dispatcher.serve("s1")
    assert sorted(task["priority"] for task in recorder.sent) == [0.1] * 6  # every junk host


def _three_shards_of_ready_hosts(registry, **values) -> ShardedFrontier:
    from test_sharded_frontier import hosts_of_shard

    frontier = _register(registry, low_priority_slots=20, low_priority_share=1.0, **values)
    scores = {0: [0.9, 0.5, 0.3], 1: [0.8, 0.7, 0.2], 2: [0.6, 0.4, 0.1]}
    tasks = []
    for shard, values in scores.items():
        for host, score in zip(hosts_of_shard(shard, SHARDS, 3), values, strict=True):
            tasks.append(CrawlTask(url=f"http://{host}/", url_id=len(tasks), priority=score))
    frontier.push_many(tasks)
    return frontier


def test_a_round_sends_every_shards_urls_in_the_crawls_order(registry):
    """One dispatcher serving every shard hands out URLs in the crawl's order, across shards."""
    _three_shards_of_ready_hosts(registry, max_outstanding=20)
    recorder = Recorder([])
    Dispatcher(registry, recorder).serve("s1")
    sent = [task["priority"] for task in recorder.sent]
    assert sent == sorted(sent, reverse=True) and len(sent) == 9


def test_fewer_slots_than_ready_urls_go_to_the_best_of_every_shard(registry):
    """Each shard pops only its share of the crawl's best ready URLs: the first shard called
    does not take every free slot with URLs worse than another shard's."""
    _three_shards_of_ready_hosts(registry, max_outstanding=4)
    recorder = Recorder([])
    dispatcher = Dispatcher(registry, recorder)
    dispatcher.serve("s1")
    assert [task["priority"] for task in recorder.sent] == [0.9, 0.8, 0.7, 0.6]
    dispatcher.serve("s1")  # nothing acknowledged: no slot is free
    assert len(recorder.sent) == 4


def test_the_low_slot_goes_to_the_best_low_url_of_every_shard(registry):
    """The crawl's one low-priority slot takes the best low URL over every shard, not the
    junk of the shard called first (low: below priority_slack x the crawl's best, 0.9)."""
    from test_sharded_frontier import hosts_of_shard

    frontier = _register(registry, max_outstanding=20, low_priority_slots=1,
                         low_priority_share=1.0, priority_slack=0.8)
    best, junk = hosts_of_shard(0, SHARDS, 2)
    [wanted] = hosts_of_shard(1, SHARDS, 1)
    frontier.push_many([CrawlTask(url=f"http://{best}/", url_id=1, priority=0.9),
                        CrawlTask(url=f"http://{junk}/", url_id=2, priority=0.01),
                        CrawlTask(url=f"http://{wanted}/", url_id=3, priority=0.7)])
    recorder = Recorder([])
    Dispatcher(registry, recorder).serve("s1")
    assert [task["priority"] for task in recorder.sent] == [0.9, 0.7]


def test_a_shard_reads_its_low_urls_only_as_far_as_the_low_slots_reach(registry):
    """A round's read of a shard lists every ready URL that may not be low (at or above
    priority_slack x the shard's own best), and of the others only one more than the crawl's
    low slots; the low slot still goes to the best low URL of every shard."""
    from test_sharded_frontier import hosts_of_shard

    frontier = _register(registry, max_outstanding=20, low_priority_slots=1,
                         low_priority_share=1.0, priority_slack=0.8)
    hot, *junk = hosts_of_shard(0, SHARDS, 7)
    wanted, other = hosts_of_shard(1, SHARDS, 2)
    frontier.push_many([CrawlTask(url=f"http://{hot}/", url_id=1, priority=1.0),
                        CrawlTask(url=f"http://{hot}/2", url_id=4, priority=0.95),
                        CrawlTask(url=f"http://{wanted}/", url_id=2, priority=0.7),
                        CrawlTask(url=f"http://{other}/", url_id=3, priority=0.05)] +
                       [CrawlTask(url=f"http://{host}/", url_id=10 + i, priority=0.1 + i / 100)
                        for i, host in enumerate(junk)])
    recorder = Recorder([])
    dispatcher = Dispatcher(registry, recorder)
    dispatcher.serve("s1")
    assert [task["priority"] for task in recorder.sent] == [1.0, 0.7]
    dispatcher._crawls.clear()  # read again, as at the start of a round
    dispatcher._read_others("s1", dispatcher._crawl("s1"), force=True)
    ready = dispatcher._crawls["s1"].ready  # the hot host is busy: its shard's best is 0.95
    assert ready[0] == pytest.approx([0.15, 0.14]) and ready[1] == [0.05]


def test_shares_read_from_the_short_lists_are_those_of_the_full_ones():
    """The round's calls (shares and floors) from ready lists cut as ``FIGURES`` cuts them
    (above priority_slack x the shard's best, then one more than the low slots) are those of
    the full lists, over random rounds (negative priorities, slack 0 to 1, 2 to 4 shards)."""
    import random

    from jlse.scheduler.dispatch_shards import CrawlState

    for trial in range(3000):
        rng = random.Random(trial)
        shards, slots, low_slots = rng.randint(2, 4), rng.randint(1, 8), rng.randint(1, 3)
        settings = apply_overrides(Settings(), {
            "priority_slack": rng.choice([0.0, 0.5, 0.8, 1.0]), "low_priority_slots": low_slots,
            "max_outstanding": slots, "frontier_shards": shards}, source="test")
        full, short = (CrawlState("sha", settings, dict.fromkeys(range(shards)), slots)
                       for _ in range(2))
        for index in range(shards):
            ready = sorted((round(rng.uniform(-1, 2), 2) for _ in range(rng.randint(0, 10))),
                           reverse=True)
            best = max(ready + [round(rng.uniform(-1, 2), 2)])
            above = sum(score >= settings.priority_slack * best for score in ready)
            low, in_flight = rng.randint(0, 1), rng.randint(0, 2)
            for crawl, listed in ((full, ready[:slots]),
                                  (short, ready[:min(slots, above + low_slots + 1)])):
                crawl.seen[index] = (0, in_flight, len(ready), 0)
                crawl.low[index], crawl.best[index], crawl.ready[index] = low, best, listed
        assert list(full.round_calls()) == list(short.round_calls()), trial


def test_learning_requests_coalesce_while_a_round_waits(registry, monkeypatch):
    """A round is sent each time the results grow by cf, but not while one sent earlier has not
    started: the learn queue holds at most one round per crawl (plus the one running)."""
    import jlse.scheduler.crawl_registry as crawl_registry

    _register(registry, cf=10)
    claims = [registry.claim_learning("s1", targets, 10) for targets in (10, 15, 20, 30)]
    assert claims == [True, False, False, False]  # 20 and 30: the first round has not started
    registry.learning_started("s1")
    assert registry.claim_learning("s1", 35, 10) is False  # 30 were already counted
    monkeypatch.setattr(crawl_registry, "LEARN_PENDING_SECONDS", 0.2)
    assert registry.claim_learning("s1", 40, 10) is True
    assert "learn_pending_until" not in registry.counters("s1")
    assert registry.claim_learning("s1", 50, 10) is False
    time.sleep(0.3)  # the round sent at 40 never started (lost in transit): sent again
    assert registry.claim_learning("s1", 60, 10) is True
