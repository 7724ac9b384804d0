"""Distributed crawls whose dispatcher sends ``fetch_batch`` URLs per Celery message: real
Redis, PostgreSQL and Celery worker processes (prefork, one process each), as in
test_distributed.py, whose cluster and helpers this module uses."""

from __future__ import annotations

import json
import re
import subprocess
import time

import psycopg2
import pytest
import test_distributed
from crawl_checks import crawl_delay_breaches, duplicate_fetches, robots_violations
from test_distributed import (
    BUDGET,
    REPO,
    _crawl_cmd,
    _env,
    _finish,
    _queued_urls_lost,
    _stop_if_running,
    _wait_fetched,
    kill_w1_mid_crawl,
)

from jlse.records import LinkStatus
from jlse.scheduler.store import open_store

# the fixtures of test_distributed, module-scoped here too
cluster = test_distributed.cluster
redis_client = test_distributed.redis_client
worker_env = test_distributed.worker_env
phones_topic = test_distributed.phones_topic
BATCH = 4


def _start(cmd: list[str]) -> subprocess.Popen:
    return subprocess.Popen(cmd, cwd=REPO, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _pages_per_transaction(store_url: str) -> list[int]:
    """How many crawl-history rows each writing transaction added, largest first."""
    conn = psycopg2.connect(store_url)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM fetches GROUP BY xmin::text ORDER BY 1 DESC")
            return [row[0] for row in cur.fetchall()]
    finally:
        conn.close()


def _reaped(cluster, crawl_id: str, offset: int) -> list[int]:
    return [int(n) for n in re.findall(rf"crawl {crawl_id}: (\d+) expired leases returned",
                                       cluster.tail_all("dispatcher")[offset:])]


@pytest.mark.slow
def test_batches_are_written_together_politely_and_keep_their_leases(
        cluster, phones_topic, sandbox, sandbox_web, pg_store_url, redis_client):
    """A batch's pages share one transaction; while a slow web makes batches outlast
    worker_lease_seconds, the heartbeat renews every URL of them: no lease is reaped and no
    page fetched twice."""
    sandbox.clear_log()
    cmd = _crawl_cmd(phones_topic, pg_store_url, "batch1", sandbox, "best-first",
                     fetch_batch=BATCH, worker_lease_seconds=5.0, lease_seconds=30.0,
                     read_timeout=10.0, fetch_deadline=12.0)
    proc = _start(cmd)
    offset = len(cluster.tail_all("dispatcher"))
    try:
        _wait_fetched(redis_client, "batch1", 60, proc)
        sandbox.set_latency(6.5)  # every request now outlasts a worker's lease
        time.sleep(7.0)
        sandbox.set_latency(0.0)
        out, err = _finish(proc, cluster, timeout=200)
    finally:
        sandbox.set_latency(0.0)
        if proc.poll() is None:
            proc.kill()
        _stop_if_running("batch1")
    assert proc.returncode == 0, (err[-3000:], cluster.tail("dispatcher"))
    assert json.loads(out)["fetched"] == BUDGET
    assert _reaped(cluster, "batch1", offset) == [], cluster.tail("dispatcher")
    assert duplicate_fetches(sandbox.log) == []
    assert robots_violations(sandbox.log, sandbox_web) == []
    assert crawl_delay_breaches(sandbox.log, sandbox_web) == []
    together = _pages_per_transaction(pg_store_url)
    print(f"fetch_batch {BATCH}: history rows per transaction {together[:12]}..., "
          f"{len(together)} transactions")
    assert max(together) > 1 and max(together) <= BATCH
    assert _queued_urls_lost(pg_store_url, redis_client, "batch1") == []


@pytest.mark.slow
def test_a_worker_killed_mid_batch_loses_no_url(cluster, phones_topic, sandbox, pg_store_url,
                                                redis_client):
    """SIGKILL while w1's batch is being fetched: its URLs come back after
    worker_lease_seconds and are fetched again; at most that batch is fetched twice."""
    sandbox.clear_log()
    cmd = _crawl_cmd(phones_topic, pg_store_url, "batchkill1", sandbox, "best-first",
                     fetch_batch=BATCH, lease_seconds=60.0, worker_lease_seconds=5.0)
    # w1 is halfway through a batch of slow fetches when it is killed
    out, reaped, after_kill = kill_w1_mid_crawl(cmd, "batchkill1", cluster, sandbox,
                                                redis_client)
    duplicates = duplicate_fetches(sandbox.log)
    print(f"SIGKILL mid-batch: {sum(reaped)} leases reaped, {len(duplicates)} pages fetched "
          f"twice, crawl done {after_kill:.1f} s later")
    assert reaped, cluster.tail("dispatcher")  # w1 held leases
    assert after_kill < 40, after_kill  # the 60 s lease would take over 60 s
    assert json.loads(out)["fetched"] == BUDGET
    assert len(duplicates) <= BATCH  # the killed worker's batch in flight
    assert _queued_urls_lost(pg_store_url, redis_client, "batchkill1") == []
    with open_store(pg_store_url) as store:
        statuses = {link.status for link in store.iter_links()}
    assert statuses <= {LinkStatus.QUEUED, LinkStatus.FETCHED, LinkStatus.REJECTED}
