"""A Redis Cluster master killed mid-crawl: its replica takes over, no URL is lost, no page is
fetched twice but the ones in flight, and while the shard is down the other shards go on.

A crawl of 3 shards runs on its own cluster (3 masters, 1 replica each: ``fresh_redis_cluster``)
with the real registry, dispatcher and frontier; the "workers" are a loop in the test doing
what ``workers.distributed`` does for a page (the checks before the fetch, the fetch written
to the crawl database, two new links stored then pushed, the ack), retrying a page whose
shard fails, as Celery's autoretry does.
"""

from __future__ import annotations

import time
from collections import Counter

import pytest

from jlse.records import FetchRecord, LinkStatus, NewLink, Outcome
from jlse.scheduler.crawl_registry import CrawlRegistry
from jlse.scheduler.dispatcher import Dispatcher
from jlse.scheduler.redis_client import UNAVAILABLE, connect
from jlse.scheduler.redis_frontier import LeasedTask
from jlse.scheduler.shards import shard_of
from jlse.scheduler.store import open_store
from jlse.scheduler.urls import host_of
from jlse.settings import Settings, apply_overrides

SHARDS, HOSTS, FIRST_URLS = 3, 30, 150


class Crawl:
    def __init__(self, client, store) -> None:
        self.registry = CrawlRegistry(client, "jlsefail:")
        settings = apply_overrides(Settings(), {
            "frontier_shards": SHARDS, "max_pages": 10_000, "politeness_delay": 0.0,
            "max_outstanding": 12, "domain_diversity": 1, "host_window": 4},
            source="test")
        self.registry.register("f1", {"crawl_id": "f1", "settings": settings.to_dict(),
                                      "status": "running", "reason": "",
                                      "max_pages": settings.max_pages}, None, {})
        self.settings, self.store = settings, store
        self.frontier = self.registry.frontier("f1", settings)
        self.frontier.defer = self._defer  # as a worker does (workers.distributed)
        self.sent: list[dict] = []
        self.dispatcher = Dispatcher(self.registry, lambda crawl_id, task: self.sent.append(task))
        self.digest = self.dispatcher._crawl("f1").config_sha1
        self.fetched: list[str] = []
        self.next_url = 0
        self.deferred = 0

    def _defer(self, shard: int, tasks: list) -> None:
        self.deferred += len(tasks)
        with self.store.autocommit():
            self.store.defer_pushes(shard, [task.url_id for task in tasks])

    def discover(self, count: int) -> None:
        links = [NewLink(f"http://site{(self.next_url + i) % HOSTS}.test/{self.next_url + i}",
                         None, 1, "", priority=0.5) for i in range(count)]
        self.next_url += count
        with self.store.autocommit():
            ids = self.store.add_links(links)
        self.frontier.add_new([LeasedTask(url=link.url, url_id=url_id, priority=link.priority)
                               for link, (url_id, _) in zip(links, ids, strict=True)])

    def page(self, body: dict) -> None:
        """One page, as a worker does it; raises while the task's shard is unavailable."""
        task = LeasedTask.from_dict(body)
        start = self.registry.task_start("f1", self.digest, task, shards=SHARDS)
        if start is None or not start.lease_current:
            return  # reaped and handed out again: dropped
        link = self.store.get_link(task.url_id)
        if link.status is LinkStatus.QUEUED:
            self.fetched.append(task.url)  # the request to the web
            if self.next_url < 3 * FIRST_URLS:
                self.discover(2)
            with self.store.autocommit():
                self.store.record_fetch_once(FetchRecord(
                    url_id=task.url_id, url=task.url, outcome=Outcome.OK, fetched_at=1.0,
                    status_code=200))
        self.frontier.finish(task, deltas={"fetched": 1})

    def run(self, seconds: float, on_round=None) -> None:
        """Dispatch and work until the crawl is done (or ``seconds`` pass); a page whose
        shard fails is tried again next round."""
        retry: list[dict] = []
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if on_round is not None:
                on_round()
            self.dispatcher.serve("f1")
            self._refill()
            work, retry = retry + self.sent, []
            self.sent.clear()
            for body in work:
                try:
                    self.page(body)
                except UNAVAILABLE:
                    retry.append(body)
            if not work and self.registry.config("f1")["status"] == "done":
                return
            if not work:
                time.sleep(0.05)
        raise AssertionError(f"the crawl did not end in {seconds} s")

    def _refill(self) -> None:
        """What ``jlse.refill`` tasks do (the dispatcher sends them when a shard is due a
        refill or comes back)."""
        for index in range(SHARDS):
            try:
                with self.store.autocommit():
                    self.frontier.refill(self.store, [index])
            except UNAVAILABLE:
                pass


@pytest.mark.slow
def test_a_killed_master_loses_no_url_and_fetches_no_page_twice(fresh_redis_cluster,
                                                                pg_store_url):
    client = connect(fresh_redis_cluster.url)  # the crawl's own client: fails fast
    with open_store(pg_store_url) as store:
        crawl = Crawl(client, store)
        assert crawl.frontier.shards[0].wait_replicas == 1  # pushes wait for a replica
        crawl.discover(FIRST_URLS)
        victim = crawl.frontier.shards[1].prefix + "ready"
        state: dict = {"killed": None, "down": []}

        def kill_midway() -> None:
            shard = crawl.dispatcher._crawls["f1"].shards[1]
            if state["killed"] is None and len(crawl.fetched) >= 100:
                state["killed"] = fresh_redis_cluster.kill_master_of(victim)
                state["at_kill"] = len(crawl.fetched)
            elif state["killed"] is not None and shard.failing:
                state["down"].append(len(crawl.fetched))  # a round without shard 1

        crawl.run(180, kill_midway)
        assert state["killed"] is not None and state["down"]
        fetches = Counter(crawl.fetched)
        twice = [url for url, n in fetches.items() if n > 1]
        assert len(twice) <= crawl.settings.max_outstanding, twice  # at most those in flight
        everything = {link.url for link in store.iter_links()}
        assert set(fetches) == everything  # every URL ever queued was fetched: none lost
        assert crawl.frontier.stranded(store) == []
        while_down = crawl.fetched[state["at_kill"]:state["down"][-1]]
        assert while_down, state  # the other shards went on meanwhile
        assert all(shard_of(host_of(url), SHARDS) != 1 for url in while_down[12:])
        assert crawl.deferred > 0  # links into the dead shard waited in the crawl database
        assert store.count_deferred() == 0  # and its refills took every one back
    client.close()
