"""Ctrl+C and --resume of a distributed crawl, end to end: real Redis (private prefix),
PostgreSQL (a private schema per crawl), Celery worker and dispatcher processes, the sandbox web.

The helpers and the Redis fixture are those of ``test_distributed``; this module runs its own
cluster (two fetch workers and the dispatcher: best-first needs no learner).
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import closing

import psycopg2
import pytest
import test_distributed
from crawl_checks import duplicate_fetches
from test_distributed import (
    BUDGET,
    FAST,
    PREFIX,
    REPO,
    Cluster,
    _counters,
    _crawl_cmd,
    _env,
    _queued_urls_lost,
    _wait_fetched,
)

from jlse.cluster import frontier_of, store_counters
from jlse.records import LinkStatus
from jlse.scheduler.crawl_registry import CrawlRegistry, settings_from_config
from jlse.scheduler.store import open_store

# the fixtures of test_distributed, module-scoped here too
redis_client = test_distributed.redis_client
worker_env = test_distributed.worker_env
phones_topic = test_distributed.phones_topic
STOP_AT = 30
MAX_OUTSTANDING = 2 * FAST["concurrency"]  # the dispatcher's default


@pytest.fixture(scope="module")
def resume_cluster(redis_client, tmp_path_factory) -> Iterator[Cluster]:
    running = Cluster(tmp_path_factory.mktemp("resume-logs"))
    try:
        running.start_worker("w1")
        running.start_worker("w2")
        running.start("dispatcher", "dispatcher")
        yield running
    finally:
        running.stop_all()


@pytest.fixture(scope="module")
def registry(redis_client) -> CrawlRegistry:
    return CrawlRegistry(redis_client, PREFIX)


def _new_schema(pg_database_url: str) -> str:
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with closing(psycopg2.connect(pg_database_url)) as conn, conn, conn.cursor() as cur:
        cur.execute(f'CREATE SCHEMA "{schema}"')
    return f"{pg_database_url}?options=-csearch_path%3D{schema}"


def _interrupt(cmd: list[str], registry: CrawlRegistry, crawl_id: str) -> dict:
    """Start the crawl, Ctrl+C it after STOP_AT pages; exit code, output, pages fetched at
    the signal."""
    proc = subprocess.Popen(cmd, cwd=REPO, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        _wait_fetched(registry.client, crawl_id, STOP_AT, proc)
        proc.send_signal(signal.SIGINT)
        at_sigint = int(_counters(registry.client, crawl_id)["fetched"])
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    return {"returncode": proc.returncode, "out": out, "err": err, "fetched": at_sigint}


def _wait_drained(registry: CrawlRegistry, crawl_id: str) -> float:
    """Wait until no lease of the stopped crawl is in flight; the seconds it took."""
    frontier = frontier_of(registry, crawl_id, settings_from_config(registry.config(crawl_id)))
    started = time.monotonic()
    while frontier.in_flight():
        assert time.monotonic() - started < FAST["lease_seconds"] + 20, frontier.stats()
        time.sleep(0.1)
    return time.monotonic() - started


def _resume(cmd: list[str], cluster: Cluster) -> dict:
    done = subprocess.run([*cmd, "--resume"], cwd=REPO, env=_env(), capture_output=True,
                          text=True, timeout=150)
    assert done.returncode == 0, (done.stderr[-3000:], cluster.tail("dispatcher"),
                                  cluster.tail("w1"))
    return json.loads(done.stdout)


def _check_resumed(summary: dict, store_url: str, registry: CrawlRegistry, crawl_id: str,
                   log) -> None:
    """The budget is reached, nothing was fetched twice or lost, counters match PostgreSQL."""
    print(f"{crawl_id} resumed: {summary['fetched']} pages, "
          f"{len(duplicate_fetches(log))} fetched twice")
    assert summary["reason"] == "page budget reached"
    assert summary["fetched"] == BUDGET  # see test_dispatcher_rules: never one page over
    assert duplicate_fetches(log) == []
    with closing(psycopg2.connect(store_url)) as conn, conn.cursor() as cur:
        cur.execute("SELECT url_id FROM fetches GROUP BY url_id HAVING count(*) > 1")
        assert cur.fetchall() == []
    assert _queued_urls_lost(store_url, registry.client, crawl_id) == []
    settings = settings_from_config(registry.config(crawl_id))
    with open_store(store_url) as store:
        statuses = {link.status for link in store.iter_links()}
        expected = store_counters(store, settings)
    assert statuses <= {LinkStatus.QUEUED, LinkStatus.FETCHED, LinkStatus.REJECTED}
    counters = {name: int(value) for name, value in _counters(registry.client, crawl_id).items()
                if name in expected}
    assert counters == expected


# --- Ctrl+C, then --resume with the Redis state kept --------------------------------------------
@pytest.fixture(scope="module")
def stopped(resume_cluster, phones_topic, sandbox, pg_database_url, registry) -> dict:
    store_url = _new_schema(pg_database_url)
    cmd = _crawl_cmd(phones_topic, store_url, "resume1", sandbox, "best-first")
    sandbox.clear_log()
    run = _interrupt(cmd, registry, "resume1")
    run.update(cmd=cmd, store_url=store_url, drained_in=_wait_drained(registry, "resume1"))
    return run


@pytest.mark.slow
def test_ctrl_c_stops_the_crawl_and_says_how_to_resume(stopped, registry, sandbox):
    assert stopped["returncode"] == 130, stopped["err"][-3000:]
    assert "resume1 is stopped" in stopped["err"]
    assert "--resume" in stopped["err"].splitlines()[-1]
    assert json.loads(stopped["out"])["reason"] == "interrupted"
    config = registry.config("resume1")
    assert (config["status"], config["reason"]) == ("stopped", "interrupted")
    assert "resume1" not in registry.active()
    # the tasks already sent finish, then nothing more is sent although URLs are queued
    settled = int(_counters(registry.client, "resume1")["fetched"])
    requests = len(sandbox.log)
    time.sleep(2.0)
    assert int(_counters(registry.client, "resume1")["fetched"]) == settled
    assert len(sandbox.log) == requests
    frontier = frontier_of(registry, "resume1", settings_from_config(config))
    assert frontier.in_flight() == 0 and len(frontier) > 0
    assert stopped["fetched"] <= settled <= stopped["fetched"] + MAX_OUTSTANDING + 2
    print(f"Ctrl+C at {stopped['fetched']} pages: {settled} once the tasks already sent "
          f"finished; leases drained {stopped['drained_in']:.1f} s after the client exited")


@pytest.mark.slow
def test_resume_reaches_the_budget_fetching_nothing_twice(stopped, resume_cluster, registry,
                                                          sandbox):
    summary = _resume(stopped["cmd"], resume_cluster)
    assert registry.config("resume1")["status"] == "done"
    _check_resumed(summary, stopped["store_url"], registry, "resume1", sandbox.log)


# --- Ctrl+C, Redis loses the crawl's keys, --resume rebuilds from PostgreSQL ----------------------
@pytest.mark.slow
def test_resume_after_redis_lost_the_crawl(resume_cluster, phones_topic, sandbox,
                                           pg_database_url, registry):
    store_url = _new_schema(pg_database_url)
    cmd = _crawl_cmd(phones_topic, store_url, "lost1", sandbox, "best-first")
    sandbox.clear_log()
    run = _interrupt(cmd, registry, "lost1")
    assert run["returncode"] == 130, run["err"][-3000:]
    _wait_drained(registry, "lost1")
    assert registry.clear("lost1") > 0
    assert not registry.exists("lost1")
    summary = _resume(cmd, resume_cluster)
    _check_resumed(summary, store_url, registry, "lost1", sandbox.log)


@pytest.mark.slow
def test_resume_right_after_ctrl_c(resume_cluster, phones_topic, sandbox, pg_database_url,
                                   registry):
    store_url = _new_schema(pg_database_url)
    cmd = _crawl_cmd(phones_topic, store_url, "quick1", sandbox, "best-first")
    sandbox.clear_log()
    run = _interrupt(cmd, registry, "quick1")
    assert run["returncode"] == 130, run["err"][-3000:]
    summary = _resume(cmd, resume_cluster)
    _check_resumed(summary, store_url, registry, "quick1", sandbox.log)


def test_resume_hint_repeats_the_command_with_resume():
    from jlse.cli import _resume_command, build_parser

    argv = ["crawl", "--topic", "my topic", "--fresh", "--frontier", "redis://h/0"]
    args = build_parser().parse_args(argv)
    args.argv = argv
    assert _resume_command(args) == "jlse crawl --topic 'my topic' --frontier redis://h/0 --resume"
    args.argv = [*argv[:3], "--resume"]
    assert _resume_command(args) == "jlse crawl --topic 'my topic' --resume"
