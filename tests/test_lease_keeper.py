"""Lease renewal: ``RedisFrontier.renew`` and the worker's heartbeat (workers/lease_keeper.py),
against the real Redis under a private key prefix (the ``registry`` fixture of conftest.py). The end-to-end case (a SIGKILLed worker's
leases come back after ``worker_lease_seconds``) is in test_distributed.py."""

from __future__ import annotations

import time

import pytest

from jlse.records import CrawlTask
from jlse.scheduler.redis_frontier import LeasedTask, RedisFrontier, fingerprint
from jlse.settings import Settings, SettingsError, apply_overrides
from jlse.workers.lease_keeper import LeaseKeeper


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def _tasks(*hosts: str) -> list[CrawlTask]:
    return [CrawlTask(url=f"http://{host}/", url_id=i, priority=0.5)
            for i, host in enumerate(hosts)]


def test_renew_moves_only_the_deadlines_of_live_tokens(registry):
    clock = FakeClock()
    frontier = RedisFrontier(registry.client, registry.frontier_prefix("r"), lease_seconds=150,
                             clock=clock)
    frontier.push_many(_tasks("a.test", "b.test"))
    first, second = frontier.pop(), frontier.pop()
    assert frontier.renew([(first.url, first.lease), (second.url, "0")], 10.0) == 1
    clock.now += 11
    assert frontier.reap() == 1  # first: renewed to 10 s and not renewed again
    assert frontier.lease_current(second) and not frontier.lease_current(first)
    again = frontier.pop()
    assert again.url == first.url
    assert frontier.renew([(first.url, first.lease)], 10.0) == 0  # the old token: left alone
    assert frontier.renew([], 10.0) == 0
    clock.now += 11
    assert frontier.reap() == 0  # neither: the new lease and second still have 150 s


def test_keeper_renews_held_leases_of_registered_crawls_only(registry):
    settings = apply_overrides(Settings(), {"lease_seconds": 60.0, "worker_lease_seconds": 8.0},
                               source="test")
    registry.register("k1", {"crawl_id": "k1", "settings": settings.to_dict(),
                             "status": "running", "reason": "", "max_pages": 10}, None, {})
    frontier = RedisFrontier(registry.client, registry.frontier_prefix("k1"), lease_seconds=60)
    frontier.push_many(_tasks("a.test", "b.test"))
    held, idle = frontier.pop(), frontier.pop()
    tasks = [("k1", held.to_dict()), ("k1", {"url": idle.url}),  # no token: not ours to renew
             ("unknown", held.to_dict())]
    keeper = LeaseKeeper(registry, held=lambda: tasks)
    assert keeper.renew_once() == 1
    deadline = registry.client.zscore(frontier.prefix + "deadline", fingerprint(held.url))
    untouched = registry.client.zscore(frontier.prefix + "deadline", fingerprint(idle.url))
    assert deadline == pytest.approx(time.time() + 8.0, abs=2.0)
    assert untouched == pytest.approx(time.time() + 60.0, abs=2.0)


def test_keeper_caps_the_renewal_at_lease_seconds(registry):
    settings = apply_overrides(Settings(), {"lease_seconds": 6.0}, source="test")  # < 20 s
    registry.register("k2", {"crawl_id": "k2", "settings": settings.to_dict(),
                             "status": "running", "reason": "", "max_pages": 10}, None, {})
    assert LeaseKeeper(registry, held=list).lease_seconds("k2") == 6.0
    assert LeaseKeeper(registry, held=list).lease_seconds("nobody") is None


def test_keeper_asks_again_for_a_crawl_gone_from_redis(registry):
    """Redis lost the crawl's keys, then ``jlse frontier rebuild`` restored them: the next
    heartbeat renews its leases again (it waited SETTINGS_TTL, 30 s, and the leases lapsed)."""
    keeper = LeaseKeeper(registry, held=list, clock=FakeClock())
    assert keeper.lease_seconds("k3") is None  # lost
    settings = apply_overrides(Settings(), {"lease_seconds": 9.0}, source="test")
    registry.register("k3", {"crawl_id": "k3", "settings": settings.to_dict(),
                             "status": "running", "reason": "", "max_pages": 10}, None, {})
    assert keeper.lease_seconds("k3") == 9.0  # rebuilt, one heartbeat later


def test_worker_lease_seconds_below_five_is_refused():
    with pytest.raises(SettingsError, match="worker_lease_seconds"):
        apply_overrides(Settings(), {"worker_lease_seconds": 2.0}, source="test")


def test_task_start_shortens_only_a_live_lease(registry):
    from jlse.scheduler.crawl_registry import config_sha1

    settings = apply_overrides(Settings(), {"lease_seconds": 150.0}, source="test")
    registry.register("k3", {"crawl_id": "k3", "settings": settings.to_dict(),
                             "status": "running", "reason": "", "max_pages": 10}, None, {})
    digest = config_sha1(registry.config_raw("k3"))
    frontier = RedisFrontier(registry.client, registry.frontier_prefix("k3"), lease_seconds=150)
    frontier.push_many(_tasks("a.test"))
    leased = frontier.pop()
    deadlines = frontier.prefix + "deadline"
    stale = LeasedTask(url=leased.url, url_id=0, priority=0.5, lease="0")  # never handed out
    assert not registry.task_start("k3", digest, stale, deadline=1.0).lease_current
    assert registry.client.zscore(deadlines, fingerprint(leased.url)) > time.time() + 100
    start = registry.task_start("k3", digest, leased, deadline=time.time() + 20)
    assert start.lease_current
    assert registry.client.zscore(deadlines, fingerprint(leased.url)) == pytest.approx(
        time.time() + 20, abs=2.0)
