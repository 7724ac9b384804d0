"""RobotsCache against the sandbox web: RFC 9309 status handling, Crawl-delay, caching, locking."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from jlse.scheduler.robots import (
    NOT_THERE_RETRY_AFTER,
    RobotsCache,
    agent_token,
    robots_origin,
)
from jlse.settings import Settings
from jlse.workers.fetcher import Fetcher

ROBOTS_PATHS = ("/robots.txt", "/real-robots.txt")


def make_cache(sandbox, **overrides) -> RobotsCache:
    settings = Settings(
        proxy=sandbox.proxy_url,
        connect_timeout=1.0,
        read_timeout=1.0,
        fetch_deadline=3.0,
        max_retries=1,
        retry_backoff=0.05,
        **overrides,
    )
    return RobotsCache(settings, Fetcher(settings).fetch_robots)


class RobotsRequests:
    """Counts the robots.txt requests the sandbox served to a host since this object was made."""

    def __init__(self, sandbox, host: str) -> None:
        self.sandbox, self.host = sandbox, host
        self.start = len(sandbox.log)

    def count(self) -> int:
        return sum(
            1
            for entry in list(self.sandbox.log)[self.start :]
            if entry.host == self.host and entry.path.split("?")[0] in ROBOTS_PATHS
        )


@pytest.mark.parametrize(
    ("user_agent", "token"),
    [
        ("jlse/0.1 (+https://x; focused crawler)", "jlse"),
        ("jlse", "jlse"),
        ("", "*"),
        ("My Bot/2.0", "My"),
    ],
)
def test_agent_token(user_agent: str, token: str) -> None:
    assert agent_token(user_agent) == token


@pytest.mark.parametrize(
    ("url", "origin"),
    [
        ("http://Faults.TEST/a/b?c", "http://faults.test"),
        ("http://faults.test:80/", "http://faults.test"),
        ("https://faults.test:443/x", "https://faults.test"),
        ("http://faults.test:8080/x", "http://faults.test:8080"),
        ("http://[::1]:8080/", "http://[::1]:8080"),
        ("ftp://faults.test/", None),
        ("http://[::1", None),
        ("/relative", None),
    ],
)
def test_robots_origin(url: str, origin: str | None) -> None:
    assert robots_origin(url) == origin


def test_404_allows_everything_and_is_cached(sandbox) -> None:
    cache = make_cache(sandbox)
    served = RobotsRequests(sandbox, "robots-404.test")
    first = cache.check("http://robots-404.test/page/1.html")
    second = cache.check("http://robots-404.test/page/2.html")
    assert first.allowed and first.fetched and not first.unavailable
    assert second.allowed and not second.fetched
    assert served.count() == 1


def test_500_makes_the_host_unavailable_until_the_retry_time(sandbox) -> None:
    cache = make_cache(sandbox, robots_retry_after=0.5)
    served = RobotsRequests(sandbox, "robots-500.test")
    verdict = cache.check("http://robots-500.test/page/1.html")
    assert not verdict.allowed and verdict.unavailable and verdict.fetched
    assert 0 < verdict.retry_after <= 0.5
    again = cache.check("http://robots-500.test/page/2.html")
    assert again.unavailable and not again.fetched
    time.sleep(0.6)
    retried = cache.check("http://robots-500.test/page/2.html")
    assert retried.unavailable and retried.fetched
    assert served.count() == 2  # two loads of one request each: no inline retries


def test_hanging_robots_is_unavailable_within_the_timeout(sandbox) -> None:
    cache = make_cache(sandbox)
    started = time.monotonic()
    verdict = cache.check("http://robots-hang.test/page/1.html")
    assert not verdict.allowed and verdict.unavailable
    assert time.monotonic() - started < 3.0


def test_a_host_that_is_not_there_is_asked_again_sooner_than_a_slow_one(sandbox) -> None:
    """Refused (a closed port, direct) or not found: asked again after NOT_THERE_RETRY_AFTER.
    Hanging (alive but slow) or 500: the full robots_retry_after."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    direct = Settings(allow_private=True, connect_timeout=1.0, read_timeout=1.0,
                      robots_retry_after=60.0)
    refused = RobotsCache(direct, Fetcher(direct).fetch_robots).check(
        f"http://127.0.0.1:{closed}/page.html")
    unknown = RobotsCache(direct, Fetcher(direct).fetch_robots).check(
        "http://no-such-host.invalid/page.html")
    for verdict in (refused, unknown):
        assert verdict.unavailable and 0 < verdict.retry_after <= NOT_THERE_RETRY_AFTER
    slow = make_cache(sandbox, robots_retry_after=60.0)
    for host in ("robots-hang.test", "robots-500.test"):
        verdict = slow.check(f"http://{host}/page/1.html")
        assert verdict.unavailable and verdict.retry_after > 55, host


def test_crawl_delay_and_disallow_are_read(sandbox) -> None:
    cache = make_cache(sandbox)
    allowed = cache.check("http://robots-delay.test/page/1.html")
    refused = cache.check("http://robots-delay.test/no/page.html")
    assert allowed.allowed and allowed.crawl_delay == 2.0
    assert not refused.allowed and not refused.unavailable
    assert cache.crawl_delay("robots-delay.test") == 2.0
    assert cache.crawl_delay("http://robots-delay.test/any") == 2.0
    assert cache.crawl_delay("robots-404.test") is None  # never fetched: no fetch here either


def test_crawl_delay_is_capped(sandbox) -> None:
    cache = make_cache(sandbox, max_crawl_delay=0.5)
    assert cache.check("http://robots-delay.test/page/1.html").crawl_delay == 0.5


def test_redirected_robots_is_followed(sandbox) -> None:
    cache = make_cache(sandbox)
    assert not cache.check("http://robots-redirect.test/blocked/page.html").allowed
    assert cache.check("http://robots-redirect.test/page/1.html").allowed


def test_disallowed_path_is_refused(sandbox) -> None:
    cache = make_cache(sandbox)
    assert not cache.check("http://faults.test/private/secret.html").allowed
    assert cache.check("http://faults.test/ok.html").allowed


def test_concurrent_checks_fetch_robots_once(sandbox) -> None:
    cache = make_cache(sandbox)
    served = RobotsRequests(sandbox, "robots-delay.test")
    verdicts = []
    barrier = threading.Barrier(8)

    def check(n: int) -> None:
        barrier.wait()
        verdicts.append(cache.check(f"http://robots-delay.test/page/{n}.html"))

    threads = [threading.Thread(target=check, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert len(verdicts) == 8 and all(v.allowed for v in verdicts)
    assert sum(v.fetched for v in verdicts) == 1
    assert served.count() == 1


def test_least_recently_used_host_is_evicted(sandbox) -> None:
    cache = make_cache(sandbox, robots_cache_size=2)
    served_a = RobotsRequests(sandbox, "robots-404.test")
    served_b = RobotsRequests(sandbox, "robots-delay.test")
    a, b, c = (
        "http://robots-404.test/page/1.html",
        "http://robots-delay.test/page/1.html",
        "http://faults.test/ok.html",
    )
    cache.check(a)
    cache.check(b)
    assert not cache.check(a).fetched  # a is now the most recently used
    cache.check(c)  # evicts b
    assert not cache.check(a).fetched
    assert cache.check(b).fetched
    assert (served_a.count(), served_b.count()) == (1, 2)


def test_entries_expire_after_the_ttl(sandbox) -> None:
    cache = make_cache(sandbox, robots_cache_ttl=0.3)
    assert cache.check("http://robots-404.test/page/1.html").fetched
    assert not cache.check("http://robots-404.test/page/1.html").fetched
    time.sleep(0.4)
    assert cache.check("http://robots-404.test/page/1.html").fetched


def test_obey_robots_false_allows_without_fetching(sandbox) -> None:
    cache = make_cache(sandbox, obey_robots=False)
    served = RobotsRequests(sandbox, "faults.test")
    verdict = cache.check("http://faults.test/private/secret.html")
    assert verdict.allowed and not verdict.fetched
    assert served.count() == 0


def test_fetch_function_that_raises_makes_the_host_unavailable() -> None:
    def broken_fetch(url: str):
        raise RuntimeError("boom")

    cache = RobotsCache(Settings(), broken_fetch)
    verdict = cache.check("http://example.test/")
    assert verdict.unavailable and not verdict.allowed


def test_robots_slots_bound_the_fetches_at_once(sandbox) -> None:
    """With every robots.txt slot busy (a hanging robots.txt), another host is pending: its URL
    waits in the frontier instead of holding a fetch slot."""
    cache = make_cache(sandbox, robots_slots=1, robots_deadline=2.0)
    hanging = threading.Thread(
        target=cache.check, args=("http://h7.robots-hang.stall.test/page/1.html",), daemon=True)
    hanging.start()
    time.sleep(0.3)
    verdict = cache.check("http://normal.stall.test/page/0.html")
    assert verdict.pending and not verdict.allowed
    hanging.join(timeout=5)
    verdict = cache.check("http://normal.stall.test/page/0.html")
    assert verdict.allowed and verdict.fetched and not verdict.pending


def test_hosts_waiting_for_a_slot_stay_away_longer_as_more_wait(sandbox) -> None:
    cache = make_cache(sandbox, robots_slots=1, robots_deadline=2.0)
    hanging = threading.Thread(
        target=cache.check, args=("http://h8.robots-hang.stall.test/page/1.html",), daemon=True)
    hanging.start()
    time.sleep(0.3)
    first = cache.check("http://h9.robots-hang.stall.test/page/1.html")
    for n in range(10, 60):
        last = cache.check(f"http://h{n}.robots-hang.stall.test/page/1.html")
    assert first.pending and last.pending
    assert 1.0 <= first.retry_after <= 2 * 2.0 * 1.5  # one host waiting: about two rounds
    assert last.retry_after >= 2.0 * 51 * 0.5  # 51 hosts waiting for one slot
