"""The Celery tasks (thin: the work is in ``workers.distributed``)."""

from __future__ import annotations

import psycopg2
import redis
from celery import signals

from jlse.scheduler.store.base import StoreError
from jlse.workers.celery_app import FETCH_QUEUE, LEARN_QUEUE, LEARN_TIME_LIMIT, app

# Redis or PostgreSQL briefly unavailable: try again with exponential backoff (jittered).
_RETRY = {"autoretry_for": (redis.ConnectionError, redis.TimeoutError,
                            psycopg2.OperationalError, StoreError),
          "retry_backoff": 1, "retry_backoff_max": 60, "retry_jitter": True, "max_retries": 8}


@app.task(name="jlse.fetch", queue=FETCH_QUEUE, **_RETRY)
def fetch(crawl_id: str, task: dict) -> str:
    """Fetch, classify and store one leased URL of crawl ``crawl_id``; what became of it."""
    from jlse.workers.distributed import process_task

    return process_task(crawl_id, task)


@app.task(name="jlse.fetch_batch", queue=FETCH_QUEUE, **_RETRY)
def fetch_batch(crawl_id: str, tasks: list[dict]) -> str:
    """Fetch and classify leased URLs of crawl ``crawl_id`` together, write them together
    (the dispatcher sends ``fetch_batch`` of them a message); what became of them."""
    from jlse.workers.distributed import process_batch

    return process_batch(crawl_id, tasks)


@app.task(name="jlse.refill", queue=FETCH_QUEUE, **_RETRY)
def refill(crawl_id: str, shard: int) -> int:
    """Bring back URLs of one frontier shard that wait in the crawl database; how many."""
    from jlse.workers.distributed import refill_shard

    return refill_shard(crawl_id, shard)


# a learning round reads the whole link graph: its own time limit, under the broker's
# visibility timeout (a longer task would be handed out again); requests coalesce meanwhile
# (CrawlRegistry.claim_learning)
@app.task(name="jlse.learn", queue=LEARN_QUEUE, time_limit=LEARN_TIME_LIMIT,
          soft_time_limit=LEARN_TIME_LIMIT - 30, **_RETRY)
def learn(crawl_id: str) -> int:
    """Learn a Q-table from the crawl database and publish it; the version (0 if none)."""
    from jlse.workers.distributed import learn_qtable

    return learn_qtable(crawl_id)


@signals.worker_init.connect
def _preload(**_: object) -> None:
    """In the worker's main process, before the pool forks: the children share the result."""
    from jlse.workers.distributed import preload

    preload()


_keeper = None


@signals.worker_ready.connect
def _start_lease_keeper(**_: object) -> None:
    """In the worker's main process: renew the leases of the fetch tasks it holds."""
    global _keeper
    from jlse.scheduler.crawl_registry import CrawlRegistry, connect
    from jlse.workers.lease_keeper import LeaseKeeper

    _keeper = LeaseKeeper(CrawlRegistry(connect()))
    _keeper.start()


@signals.worker_shutdown.connect
def _stop_lease_keeper(**_: object) -> None:
    if _keeper is not None:
        _keeper.stop()


@signals.worker_process_shutdown.connect
@signals.worker_shutdown.connect
def _close_contexts(**_: object) -> None:
    """A pool child about to exit (prefork), or the worker itself (threads, solo): its WARC
    files in the page store are closed and sealed."""
    from jlse.workers.distributed import close_contexts

    close_contexts()
