"""Distributed crawls of the sandbox web: real Redis, PostgreSQL and Celery worker processes.

Each session uses a private Redis key prefix (``JLSE_KEY_PREFIX``: it prefixes the registry,
frontier and Q-table keys in db 0 and every broker key in db 1), a private PostgreSQL schema
per test, and its own worker, learner and dispatcher processes (``jlse worker`` etc.).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from crawl_checks import crawl_delay_breaches, duplicate_fetches, robots_violations
from prometheus_scrape import free_port, scrape, total

from jlse.records import LinkStatus
from jlse.run import run_crawl
from jlse.scheduler.crawl_registry import CrawlRegistry, RegistryError
from jlse.scheduler.store import open_store

REDIS_URL = os.environ.get("JLSE_TEST_REDIS", "redis://127.0.0.1:6379/0")
PREFIX = f"jlsetest{uuid.uuid4().hex[:8]}:"
REPO = Path(__file__).resolve().parent.parent
FAST = {"politeness_delay": 0.02, "concurrency": 8, "robots_retry_after": 0.5,
        "connect_timeout": 2.0, "read_timeout": 2.0, "fetch_deadline": 4.0,
        "lease_seconds": 8.0, "cf": 30}
BUDGET = 300
WORKER_ENV: dict[str, str] = {}  # a worker's own proxy and database (never from Redis)
METRICS_PORTS: dict[str, int] = {}  # Prometheus endpoint of each cluster process


@pytest.fixture(scope="module", autouse=True)
def worker_env(sandbox, pg_database_url) -> None:
    WORKER_ENV.update(JLSE_PROXY=sandbox.proxy_url, DATABASE_URL=pg_database_url)


def _env() -> dict[str, str]:
    env = dict(os.environ, REDIS_URL=REDIS_URL, JLSE_KEY_PREFIX=PREFIX, PYTHONUNBUFFERED="1",
               **WORKER_ENV)
    env.pop("CELERY_BROKER_URL", None)  # the default: db 1 of REDIS_URL's server
    return env


def hostname(name: str) -> str:
    """A cluster process's Celery hostname (this session's key prefix keeps it private)."""
    return f"{name}@{PREFIX[:-1]}"


def _jlse(*args: str) -> list[str]:
    return [sys.executable, "-m", "jlse.cli", *args]


class Cluster:
    """Worker, learner and dispatcher processes of one test module."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str, *args: str, ready: str | None = None,
              env: dict[str, str] | None = None) -> None:
        log = open(self.logs / f"{name}.log", "ab")
        offset = log.tell()  # a restarted process appends: only its own lines say "ready"
        self.procs[name] = subprocess.Popen(_jlse(*args), cwd=REPO, env={**_env(), **(env or {})},
                                            stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True)
        if ready:
            self._wait_for(name, ready, offset)

    def start_worker(self, name: str) -> None:
        port = METRICS_PORTS.setdefault(name, free_port())
        self.start(name, "worker", "--concurrency", "1", "--hostname", hostname(name),
                   ready=" ready.", env={"JLSE_WORKER_METRICS_PORT": str(port)})

    def _wait_for(self, name: str, text: str, offset: int = 0, timeout: float = 120.0) -> None:
        """Until ``text`` is in the log past ``offset`` (a worker's start, numba and jieba
        included, takes several times longer on a loaded machine)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with open(self.logs / f"{name}.log", "rb") as log:
                log.seek(offset)
                if text in log.read().decode(errors="replace"):
                    return
            assert self.procs[name].poll() is None, self.tail(name)
            time.sleep(0.2)
        raise AssertionError(f"{name} not ready after {timeout} s\n{self.tail(name)}")

    def tail(self, name: str) -> str:
        return self.tail_all(name)[-3000:]

    def tail_all(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text(errors="replace")

    def kill(self, name: str) -> None:
        proc = self.procs.pop(name)
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(10)

    def stop_all(self) -> None:
        for name in list(self.procs):
            self.kill(name)


def _clear_prefix(client: redis.Redis) -> None:
    keys = list(client.scan_iter(match=PREFIX + "*", count=1000))
    for start in range(0, len(keys), 1000):
        client.unlink(*keys[start:start + 1000])


@pytest.fixture(scope="module")
def redis_client() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=5)
    try:
        client.ping()
    except redis.ConnectionError as exc:
        pytest.fail(f"Redis is not reachable at {REDIS_URL} ({exc}); run `make services`",
                    pytrace=False)
    broker = redis.Redis.from_url(REDIS_URL.rsplit("/", 1)[0] + "/1")
    yield client
    _clear_prefix(client)
    _clear_prefix(broker)


@pytest.fixture(scope="module")
def cluster(redis_client, tmp_path_factory) -> Iterator[Cluster]:
    running = Cluster(tmp_path_factory.mktemp("cluster-logs"))
    try:
        running.start_worker("w1")
        running.start_worker("w2")
        running.start("learner", "learner", "--hostname", hostname("learner"),
                      ready=" ready.")
        port = METRICS_PORTS.setdefault("dispatcher", free_port())
        running.start("dispatcher", "--verbose", "dispatcher",  # INFO: reaped leases
                      env={"JLSE_DISPATCHER_METRICS_PORT": str(port)})
        yield running
    finally:
        running.stop_all()


@pytest.fixture(scope="module")
def phones_topic(sandbox_web, tmp_path_factory) -> Path:
    return sandbox_web.write_topic_dir("phones", tmp_path_factory.mktemp("topic") / "phones")


def _settings(sandbox, **extra) -> dict:
    return dict(FAST, proxy=sandbox.proxy_url, **extra)


def _crawl_cmd(topic: Path, store_url: str, crawl_id: str, sandbox, strategy: str,
               **extra) -> list[str]:
    args = ["crawl", "--topic", str(topic), "--max-pages", str(BUDGET), "--strategy", strategy,
            "--store", store_url, "--frontier", REDIS_URL, "--crawl-id", crawl_id,
            "--no-progress", "--json"]
    for key, value in _settings(sandbox, **extra).items():
        args += ["--set", f"{key}={value}"]
    return _jlse(*args)


def _stop_if_running(crawl_id: str) -> None:
    """A crawl a failed test leaves running is served on by the dispatcher until its budget is
    spent, on the same two workers: the next test's crawl would wait behind it. Stop it."""
    registry = CrawlRegistry(redis.Redis.from_url(REDIS_URL), PREFIX)
    try:
        if registry.config(crawl_id)["status"] == "running":
            registry.set_status(crawl_id, "stopped", "its test ended")
    except RegistryError:  # never registered, or gone with Redis's data
        pass
    finally:
        registry.client.close()


def _finish(proc: subprocess.Popen, cluster: Cluster, timeout: float) -> tuple[str, str]:
    """(stdout, stderr) of a crawl; on a timeout, a failure with what every process logged
    last (below pytest's own timeout, which would say nothing)."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        names = sorted(cluster.procs, key=lambda name: name != "dispatcher")  # it first
        tails = {name: cluster.tail(name)[-1500:] for name in names}
        pytest.fail(f"the crawl did not end within {timeout:.0f} s\ncrawl: {err[-1500:]}\n"
                    + "\n".join(f"{name}: {tail}" for name, tail in tails.items()))


def _run_crawl(cmd: list[str], cluster: Cluster, timeout: float = 150.0) -> dict:
    try:
        done = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True,
                              timeout=timeout)
    finally:
        _stop_if_running(cmd[cmd.index("--crawl-id") + 1])
    assert done.returncode == 0, (done.stderr[-3000:], cluster.tail("dispatcher"),
                                  cluster.tail("w1"))
    return json.loads(done.stdout)


def _truth_harvest(store_url: str, web) -> float:
    with open_store(store_url) as store:
        urls = [row["url"] for row in store.export_rows(min_relevance=None)]
    return sum(web.is_relevant(url, "phones") for url in urls) / len(urls)


def _counters(redis_client, crawl_id: str) -> dict:
    return CrawlRegistry(redis_client, PREFIX).counters(crawl_id)


def _wait_fetched(redis_client, crawl_id: str, at_least: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while _counters(redis_client, crawl_id)["fetched"] < at_least:
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < deadline, "crawl made no progress"
        time.sleep(0.1)


def _queued_urls_lost(store_url: str, redis_client, crawl_id: str) -> list[str]:
    """Queued URLs of the crawl database that the Redis frontier neither queues nor leases."""
    frontier = CrawlRegistry(redis_client, PREFIX).frontier(crawl_id)
    with open_store(store_url) as store:
        stranded = frontier.stranded(store)
        return [url for url in stranded
                if not _parent_pending(store, store.get_link(store.get_link_id(url)))]


def _parent_pending(store, link) -> bool:
    """A link written by a worker killed before it reached Redis: its page is still queued
    (the lease was reaped), so fetching that page again queues the link again."""
    parent = store.get_link(link.parent_id) if link.parent_id is not None else None
    return parent is not None and parent.status is LinkStatus.QUEUED


# --- (1) + (4): a jlse crawl on two workers, compared with the embedded crawl -----------------
@pytest.fixture(scope="module")
def jlse_crawl(cluster, phones_topic, sandbox, pg_database_url) -> dict:
    schema = f"t_{uuid.uuid4().hex[:12]}"
    import psycopg2

    with psycopg2.connect(pg_database_url) as conn, conn.cursor() as cur:
        cur.execute(f'CREATE SCHEMA "{schema}"')
    store_url = f"{pg_database_url}?options=-csearch_path%3D{schema}"
    sandbox.clear_log()
    started = time.monotonic()
    summary = _run_crawl(_crawl_cmd(phones_topic, store_url, "jlse1", sandbox, "jlse"), cluster)
    return {"summary": summary, "log": sandbox.log, "store_url": store_url,
            "elapsed": time.monotonic() - started}


@pytest.mark.slow
def test_distributed_crawl_matches_embedded(jlse_crawl, phones_topic, sandbox, sandbox_web,
                                            tmp_path):
    summary, log = jlse_crawl["summary"], jlse_crawl["log"]
    assert summary["reason"] == "page budget reached"
    assert summary["fetched"] == BUDGET
    assert duplicate_fetches(log) == []
    assert robots_violations(log, sandbox_web) == []
    assert crawl_delay_breaches(log, sandbox_web) == []
    with open_store(jlse_crawl["store_url"]) as store:
        stats = store.stats()
    assert stats.fetched + stats.rejected >= BUDGET
    distributed = _truth_harvest(jlse_crawl["store_url"], sandbox_web)
    embedded_summary = run_crawl(phones_topic, _settings(sandbox, max_pages=BUDGET,
                                                          strategy="jlse"),
                                 workdir=tmp_path / "embedded", progress=False)
    assert embedded_summary.fetched == BUDGET
    embedded = _truth_harvest(embedded_summary.store_url, sandbox_web)
    print(f"ground-truth harvest @{BUDGET}: distributed {distributed:.3f}, "
          f"embedded {embedded:.3f}, distributed crawl {jlse_crawl['elapsed']:.1f} s")
    # three runs each: distributed 0.940-0.950, embedded 0.900-0.963 (the distributed crawl
    # once trailed by 0.15: its workers fetched a page in the robots.txt task); a better
    # distributed crawl is no failure, one below the embedded crawl's spread is
    assert distributed > embedded - 0.1
    assert distributed > 0.5  # breadth-first harvests about a quarter on the sandbox


@pytest.mark.slow
def test_learner_publishes_qtable_that_workers_use(jlse_crawl, redis_client):
    registry = CrawlRegistry(redis_client, PREFIX)
    summary = jlse_crawl["summary"]
    assert summary["targets"] >= FAST["cf"]  # so at least one learning round was due
    assert summary["qtable_version"] >= 1
    from jlse.learner.publish import RedisQTableStore

    qtables = RedisQTableStore(redis_client, registry.qtable_prefix("jlse1"))
    table = qtables.load()
    assert table is not None and table.version == summary["qtable_version"]
    assert table.index.n_vertices_ > 0
    # both fetch workers switched to a published version while crawling
    workers = registry.workers("jlse1")
    assert len(workers) == 2, workers
    assert all(version >= 1 for version in workers.values()), workers


# --- Prometheus: the dispatcher and both workers scraped while a crawl runs ------------------
def _scrape_workers() -> dict[str, dict]:
    return {name: scrape(METRICS_PORTS[name]) for name in ("w1", "w2")}


@pytest.mark.slow
def test_prometheus_scrape_of_a_running_cluster(cluster, phones_topic, sandbox, pg_store_url,
                                                redis_client):
    before = _scrape_workers()
    cmd = _crawl_cmd(phones_topic, pg_store_url, "metrics1", sandbox, "best-first",
                     politeness_delay=0.1)
    proc = subprocess.Popen(cmd, cwd=REPO, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        _wait_fetched(redis_client, "metrics1", 60, proc)
        running = scrape(METRICS_PORTS["dispatcher"])
        out, err = _finish(proc, cluster, timeout=150)
    finally:
        if proc.poll() is None:
            proc.kill()
        _stop_if_running("metrics1")
    assert proc.returncode == 0, (err[-3000:], cluster.tail("dispatcher"))
    summary = json.loads(out)
    crawl = (("crawl_id", "metrics1"),)
    # the dispatcher serves the crawl's state from Redis while it runs
    assert 60 <= running[("jlse_crawl_pages", (("counter", "fetched"), *crawl))] < BUDGET
    assert running[("jlse_frontier_queued", crawl)] > 0
    assert ("jlse_frontier_in_flight", crawl) in running
    assert ("jlse_qtable_version", crawl) in running
    # each worker serves what its own pool processes wrote; together, every page of the crawl
    after = _scrape_workers()
    grown = {name: {metric: total(after[name], metric) - total(before[name], metric)
                    for metric in ("jlse_pages_fetched_total", "jlse_relevant_pages_total",
                                   "jlse_fetch_seconds_count")}
             for name in after}
    print(f"Prometheus: dispatcher saw {running[('jlse_crawl_pages', (('counter', 'fetched'), *crawl))]:.0f}"
          f" pages mid-crawl; workers wrote {grown}")
    assert all(growth["jlse_pages_fetched_total"] > 0 for growth in grown.values()), grown
    assert sum(growth["jlse_pages_fetched_total"] for growth in grown.values()) >= \
        summary["fetched"]
    assert sum(growth["jlse_relevant_pages_total"] for growth in grown.values()) >= \
        summary["relevant"]
    assert all(growth["jlse_fetch_seconds_count"] == growth["jlse_pages_fetched_total"]
               for growth in grown.values()), grown


# --- (2) a worker killed with SIGKILL mid-crawl ------------------------------------------------
@pytest.mark.slow
def test_sigkilled_worker_loses_nothing(cluster, phones_topic, sandbox, pg_store_url,
                                        redis_client):
    """Also: the killed worker's leases come back after worker_lease_seconds (its heartbeat
    stopped), not after the far longer lease_seconds.

    The kill lands while w1 is inside a page fetch (the sandbox answers slowly for a moment), so
    the task it holds has started. Killed in the millisecond between receiving a task and
    starting it, its lease would last lease_seconds instead: that is the design (docs/distributed.md), not
    what this test is about."""
    sandbox.clear_log()
    cmd = _crawl_cmd(phones_topic, pg_store_url, "kill1", sandbox, "best-first",
                     lease_seconds=60.0, worker_lease_seconds=5.0)
    out, reaped, after_kill = kill_w1_mid_crawl(cmd, "kill1", cluster, sandbox, redis_client)
    print(f"SIGKILL: {sum(reaped)} leases reaped, crawl done {after_kill:.1f} s later")
    assert reaped, cluster.tail("dispatcher")  # w1 held a lease
    assert after_kill < 40, after_kill  # measured 5-6 s; the 60 s lease would take over 60 s
    summary = json.loads(out)
    assert summary["fetched"] == BUDGET
    duplicates = duplicate_fetches(sandbox.log)
    print(f"SIGKILL: {len(duplicates)} pages fetched twice")
    assert len(duplicates) <= 1  # the killed worker's one in-flight page
    assert _queued_urls_lost(pg_store_url, redis_client, "kill1") == []
    with open_store(pg_store_url) as store:
        statuses = {link.status for link in store.iter_links()}
    assert statuses <= {LinkStatus.QUEUED, LinkStatus.FETCHED, LinkStatus.REJECTED}


SLOW_FETCH = 1.0  # seconds each request takes while w1 is killed
W1 = hostname("w1")  # the worker killed


def kill_w1_mid_crawl(cmd: list[str], crawl_id: str, cluster, sandbox,
                      redis_client) -> tuple[str, list[int], float]:
    """Run the crawl ``cmd``; after 80 pages, SIGKILL worker w1 halfway through a task of slow
    fetches, and let the crawl finish (w1 restarted after it). The crawl's output, the leases
    the dispatcher reaped, and the seconds from the kill to the end."""
    proc = subprocess.Popen(cmd, cwd=REPO, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    offset = len(cluster.tail_all("dispatcher"))
    try:
        _wait_fetched(redis_client, crawl_id, 80, proc)
        sandbox.set_latency(SLOW_FETCH)
        _wait_w1_in_a_slow_task(proc)
        cluster.kill("w1")
        killed_at = time.monotonic()
        sandbox.set_latency(0.0)
        out, err = _finish(proc, cluster, timeout=240)
        after_kill = time.monotonic() - killed_at
    finally:
        sandbox.set_latency(0.0)
        if proc.poll() is None:
            proc.kill()
        _stop_if_running(crawl_id)
        cluster.start_worker("w1")  # for the tests after this one
    assert proc.returncode == 0, (err[-3000:], cluster.tail("dispatcher"))
    reaped = re.findall(rf"crawl {crawl_id}: (\d+) expired leases returned",
                        cluster.tail_all("dispatcher")[offset:])
    return out, [int(n) for n in reaped], after_kill


def _wait_w1_in_a_slow_task(proc: subprocess.Popen) -> None:
    """Until w1 is halfway through a slow task: one it did not run when first asked (Celery's
    ``inspect active``), still running ``SLOW_FETCH / 2`` later. The sandbox was slowed before
    that first answer, so the task's fetches are slow and its leases have had a heartbeat.
    (Timing it by the sandbox's request log killed w1 between tasks now and then: both
    workers' requests look alike.)"""
    inspect = _celery_app().control.inspect(destination=[W1], timeout=5.0, limit=1)

    def running() -> set[str]:
        assert proc.poll() is None, proc.stderr.read()
        return {task["id"] for task in (inspect.active() or {}).get(W1, [])}

    seen = running()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        started = running() - seen
        if started:
            time.sleep(SLOW_FETCH / 2)
            if started & running():
                return
        seen |= started
        time.sleep(0.02)
    raise AssertionError("w1 was not halfway through a slow task in 60 s")


def _celery_app():
    """A Celery client of the test cluster's broker (its key prefix is read when made)."""
    from jlse.workers.celery_app import make_app

    saved = dict(os.environ)
    os.environ.update(_env())
    try:
        return make_app()
    finally:
        os.environ.clear()
        os.environ.update(saved)


# --- (3) Redis loses the crawl's keys; `jlse frontier rebuild` restores them ------------------
@pytest.mark.slow
def test_frontier_rebuild_after_redis_data_loss(cluster, phones_topic, sandbox, pg_store_url,
                                                redis_client):
    sandbox.clear_log()
    cmd = _crawl_cmd(phones_topic, pg_store_url, "flush1", sandbox, "best-first")
    proc = subprocess.Popen(cmd, cwd=REPO, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        _wait_fetched(redis_client, "flush1", 80, proc)
        _clear_prefix(redis_client)  # the frontier Redis lost everything of this session
        time.sleep(1.0)
        assert proc.poll() is None  # the crawl waits for the rebuild
        rebuilt = subprocess.run(
            _jlse("frontier", "rebuild", "--crawl-id", "flush1", "--store", pg_store_url,
                  "--frontier", REDIS_URL),
            cwd=REPO, env=_env(), capture_output=True, text=True, timeout=60)
        assert rebuilt.returncode == 0, rebuilt.stderr
        assert "URLs queued" in rebuilt.stdout
        out, err = _finish(proc, cluster, timeout=200)
    finally:
        if proc.poll() is None:
            proc.kill()
        _stop_if_running("flush1")
    assert proc.returncode == 0, (err[-3000:], cluster.tail("dispatcher"))
    summary = json.loads(out)
    # counters are reset from PostgreSQL by the rebuild: a page written but not yet counted at
    # that moment is counted twice (at most the pages in flight)
    assert BUDGET <= summary["fetched"] <= BUDGET + FAST["concurrency"]
    with open_store(pg_store_url) as store:
        assert store.stats().fetched >= BUDGET
    # only pages in flight when Redis lost its data may be fetched twice
    duplicates = duplicate_fetches(sandbox.log)
    print(f"Redis data loss: {len(duplicates)} pages fetched twice")
    assert len(duplicates) <= 2 * FAST["concurrency"]
    assert _queued_urls_lost(pg_store_url, redis_client, "flush1") == []


# --- retries wait the host's Crawl-delay in the Redis frontier --------------------------------
def test_distributed_retries_wait_the_crawl_delay(cluster, sandbox, sandbox_web, pg_store_url,
                                                  tmp_path):
    from test_retries import PAGES, check_retried_politely, retry_topic

    sandbox.clear_log()
    args = ["crawl", "--topic", str(retry_topic(tmp_path / "topic")), "--max-pages", str(PAGES),
            "--strategy", "bfs", "--store", pg_store_url, "--frontier", REDIS_URL,
            "--crawl-id", "retries1", "--no-progress", "--json"]
    for key, value in _settings(sandbox, politeness_delay=0.0, retry_backoff=0.05).items():
        args += ["--set", f"{key}={value}"]
    _run_crawl(_jlse(*args), cluster, timeout=120)
    with open_store(pg_store_url) as store:
        outcomes = store.stats().outcomes
    check_retried_politely(sandbox.log, sandbox_web, outcomes)


# --- the topic model travels through Redis as raw arrays + JSON --------------------------------
def test_topic_model_bytes_round_trip_and_refuse_pickle(phones_topic):
    import pickle

    import numpy as np

    from jlse.models.persist import ModelFileError, topic_model_from_bytes, topic_model_to_bytes
    from jlse.topic import build_topic_model, load_topic

    model = build_topic_model(load_topic(phones_topic))
    copy = topic_model_from_bytes(topic_model_to_bytes(model))
    text = "smartphone battery camera review 手机 价格"
    assert copy.relevance_page(text) == pytest.approx(model.relevance_page(text))
    with pytest.raises(ModelFileError):
        topic_model_from_bytes(pickle.dumps({"evil": 1}))
    buffer = __import__("io").BytesIO()
    np.save(buffer, np.array([object()], dtype=object), allow_pickle=True)
    with pytest.raises(ModelFileError):
        topic_model_from_bytes(buffer.getvalue())
