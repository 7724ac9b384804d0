"""The client following a distributed crawl (`jlse crawl --frontier ...`) outlives a Redis
restart: it waits, warns once, and returns when the crawl ends. A private redis-server is
stopped and started again under it (no Celery needed)."""

from __future__ import annotations

import logging
import threading
import time

import pytest
from private_services import PrivateRedis, ServiceUnavailable
from tqdm import tqdm

from jlse import cluster
from jlse.scheduler.crawl_registry import CrawlRegistry, connect
from jlse.settings import Settings

CRAWL = "follow1"


@pytest.fixture()
def private_redis(tmp_path) -> PrivateRedis:
    server = PrivateRedis(tmp_path)
    try:
        server.start()
    except ServiceUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)
    yield server
    server.stop()


def _register(registry: CrawlRegistry, status: str) -> None:
    config = {"crawl_id": CRAWL, "settings": Settings().to_dict(), "status": status,
              "reason": "budget" if status == "done" else "", "max_pages": 100}
    registry.register(CRAWL, config, None, {})


def _follow_in_thread(registry: CrawlRegistry) -> tuple[threading.Thread, dict]:
    outcome: dict = {}

    def follow() -> None:
        bar = tqdm(total=100, disable=True)
        try:
            outcome["reason"] = cluster._poll(registry, CRAWL, Settings(), bar)
        except BaseException as exc:  # noqa: BLE001 - the test reports what killed the thread
            outcome["error"] = exc

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    return thread, outcome


def test_following_a_crawl_survives_a_redis_restart(private_redis, caplog):
    caplog.set_level(logging.WARNING, logger="jlse.cluster")
    registry = CrawlRegistry(connect(private_redis.url), "jlsetest:")
    _register(registry, "running")
    thread, outcome = _follow_in_thread(registry)
    time.sleep(4 * cluster.POLL_SECONDS)
    private_redis.stop()
    time.sleep(6 * cluster.POLL_SECONDS)  # polls while nothing listens
    assert thread.is_alive(), outcome
    private_redis.start()  # every key was lost: the crawl comes back as a rebuild would bring it
    _register(registry, "done")
    thread.join(timeout=30)
    assert not thread.is_alive(), "the client did not notice the crawl ended"
    assert outcome == {"reason": "budget"}
    unreachable = [r for r in caplog.records if "Redis unreachable" in r.getMessage()]
    assert len(unreachable) == 1, [r.getMessage() for r in caplog.records]
