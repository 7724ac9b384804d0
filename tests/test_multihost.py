"""The distributed crawl across "machines": fetch workers in network namespaces (tests/netns.py).

Two worker hosts (``w1``, ``w2``) each run ``jlse worker`` in their own namespace and reach
Redis, PostgreSQL and the sandbox web only through the lab's forwarders on the bridge gateway;
the dispatcher, the learner and ``jlse crawl`` run in the root namespace. Redis and PostgreSQL
are private instances of this module (tests/private_services.py), so restarting them never
disturbs the machine's shared services. Root only: without ``ip netns`` the tests fail.
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
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg2
import pytest
import redis
from crawl_checks import crawl_delay_breaches, duplicate_fetches, lost_urls, robots_violations
from netns import NetnsLab, require_netns
from private_services import PrivatePostgres, PrivateRedis

from jlse.scheduler.crawl_registry import CrawlRegistry, worker_store_url
from jlse.scheduler.store import open_store

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
BUDGET = 200
CUT_BUDGET = 1000  # test 5
WORKER_CONCURRENCY = 2  # Celery processes per worker host: the most a killed host had in flight
FAST = {"politeness_delay": 0.02, "concurrency": 4, "robots_retry_after": 0.5,
        "connect_timeout": 2.0, "read_timeout": 2.0, "fetch_deadline": 4.0,
        "lease_seconds": 8.0, "cf": 30}
MAX_OUTSTANDING = 2 * FAST["concurrency"]  # the dispatcher's bound on leased URLs
_FETCH_DONE = re.compile(r"jlse\.fetch\[[^\]]+\] succeeded in [0-9.e-]+s: '([a-z_ ]+)'")


def _jlse(*args: str) -> list[str]:
    return [sys.executable, "-m", "jlse.cli", *args]


def _base_env(redis_url: str) -> dict[str, str]:
    env = dict(os.environ, REDIS_URL=redis_url, PYTHONUNBUFFERED="1")
    for name in ("CELERY_BROKER_URL", "JLSE_KEY_PREFIX", "DATABASE_URL"):
        env.pop(name, None)  # broker = db 1 of REDIS_URL, keys under the default "jlse:"
    return env


class MultiHostCluster:
    """Two worker hosts plus a dispatcher and a learner in the root namespace."""

    def __init__(self, lab: NetnsLab, services: dict, logs: Path) -> None:
        self.lab = lab
        self.logs = logs
        self.local_redis_url = services["redis"].url
        self.redis_url = f"redis://{lab.gateway}:{lab.redis_fwd.port}/0"  # as the hosts see it
        self.hosts = {name: lab.add_host(name) for name in ("w1", "w2")}
        # a worker's own proxy and database server (never taken from Redis)
        self.own_env = {"JLSE_PROXY": f"http://{lab.gateway}:{lab.web_fwd.port}",
                        "DATABASE_URL": f"postgresql://postgres@{lab.gateway}:{lab.pg_fwd.port}"
                                        "/postgres"}
        self.procs: dict[str, subprocess.Popen] = {}

    def log_path(self, name: str) -> Path:
        return self.logs / f"{name}.log"

    def log_text(self, name: str, since: int = 0) -> str:
        with open(self.log_path(name), "rb") as handle:
            handle.seek(since)
            return handle.read().decode(errors="replace")

    def log_size(self, name: str) -> int:
        return self.log_path(name).stat().st_size

    def start_worker(self, name: str) -> None:
        host = self.hosts[name]
        cmd = _jlse("worker", "--concurrency", str(WORKER_CONCURRENCY), "--hostname",
                    f"{name}@mh")
        env = {**_base_env(self.redis_url), "JLSE_WORKER_NAME": name, **self.own_env}
        with open(self.log_path(name), "ab") as log:
            self.procs[name] = host.popen(cmd, env=env, cwd=REPO, stdout=log,
                                          stderr=subprocess.STDOUT)
        self._wait_for(name, f"{name}@mh ready.")

    def start_local(self, name: str, *args: str, ready: str | None = None) -> None:
        with open(self.log_path(name), "ab") as log:
            self.procs[name] = subprocess.Popen(
                _jlse(*args), cwd=REPO, env={**_base_env(self.local_redis_url), **self.own_env},
                stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True)
        if ready:
            self._wait_for(name, ready)

    def _wait_for(self, name: str, text: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.log_text(name):
            assert self.procs[name].poll() is None, self.tail(name)
            assert time.monotonic() < deadline, f"{name} not ready\n{self.tail(name)}"
            time.sleep(0.2)

    def tail(self, name: str) -> str:
        return self.log_text(name)[-3000:]

    def kill(self, name: str) -> None:
        """SIGKILL the role's whole process group (a Celery worker and its pool processes)."""
        proc = self.procs.pop(name)
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(10)

    def stop_all(self) -> None:
        for name in list(self.procs):
            self.kill(name)

    def fetch_words(self, name: str, since: int = 0) -> list[str]:
        """What each fetch task finished by worker ``name`` since log offset ``since`` did."""
        return _FETCH_DONE.findall(self.log_text(name, since))


def _pages_fetched(words: list[str]) -> int:
    """Tasks that did work (a fetch or a rejection), not stale or already-done redeliveries."""
    return sum(word not in ("stale", "already done") for word in words)


# --- module fixtures ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def services(tmp_path_factory) -> Iterator[dict]:
    private_redis = PrivateRedis(tmp_path_factory.mktemp("private-redis"))
    private_pg = PrivatePostgres()
    try:
        private_redis.start()
        private_pg.start()
        yield {"redis": private_redis, "pg": private_pg}
    finally:
        private_redis.stop()
        try:
            private_pg.stop()
        finally:
            private_pg.remove()


@pytest.fixture(scope="module")
def lab(services, sandbox) -> Iterator[NetnsLab]:
    require_netns()
    with NetnsLab() as made:
        made.redis_fwd = made.forward(0, ("127.0.0.1", services["redis"].port))
        made.pg_fwd = made.forward(0, ("127.0.0.1", services["pg"].port))
        made.web_fwd = made.forward(0, ("127.0.0.1", sandbox.port))
        yield made


@pytest.fixture(scope="module")
def cluster(lab, services, tmp_path_factory) -> Iterator[MultiHostCluster]:
    running = MultiHostCluster(lab, services, tmp_path_factory.mktemp("multihost-logs"))
    try:
        running.start_worker("w1")
        running.start_worker("w2")
        running.start_local("learner", "learner", "--hostname", "learner@mh", ready=" ready.")
        running.start_local("dispatcher", "--verbose", "dispatcher")
        yield running
    finally:
        running.stop_all()


@pytest.fixture(scope="module")
def redis_client(services) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(services["redis"].url, socket_connect_timeout=2)
    yield client
    client.close()


@pytest.fixture(scope="module")
def phones_topic(sandbox_web, tmp_path_factory) -> Path:
    return sandbox_web.write_topic_dir("phones", tmp_path_factory.mktemp("topic") / "phones")


@pytest.fixture()
def store_url(lab, services) -> str:
    """A fresh schema in the private PostgreSQL, addressed through the lab's forwarder."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    conn = psycopg2.connect(services["pg"].url)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f'CREATE SCHEMA "{schema}"')
    conn.close()
    return (f"postgresql://postgres@{lab.gateway}:{lab.pg_fwd.port}/postgres"
            f"?options=-csearch_path%3D{schema}")


# --- driving one crawl -------------------------------------------------------------------------
class Crawl:
    """``jlse crawl --frontier`` in the root namespace, with the checks every test makes."""

    def __init__(self, cluster: MultiHostCluster, topic: Path, store: str, crawl_id: str,
                 strategy: str = "best-first", budget: int = BUDGET, **extra) -> None:
        self.cluster, self.store_url, self.crawl_id = cluster, store, crawl_id
        proxy = f"http://{cluster.lab.gateway}:{cluster.lab.web_fwd.port}"
        args = ["crawl", "--topic", str(topic), "--max-pages", str(budget), "--strategy",
                strategy, "--store", store, "--frontier", cluster.local_redis_url,
                "--crawl-id", crawl_id, "--no-progress", "--json"]
        for key, value in dict(FAST, proxy=proxy, **extra).items():
            args += ["--set", f"{key}={value}"]
        self.proc = subprocess.Popen(_jlse(*args), cwd=REPO,
                                     env=_base_env(cluster.local_redis_url),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def fetched(self, client: redis.Redis) -> int:
        try:
            return int(CrawlRegistry(client, "jlse:").counters(self.crawl_id)["fetched"])
        except redis.ConnectionError:
            return -1

    def wait_fetched(self, client: redis.Redis, at_least: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while self.fetched(client) < at_least:
            assert self.proc.poll() is None, self.proc.stderr.read()[-3000:]
            assert time.monotonic() < deadline, (
                f"crawl {self.crawl_id}: {self.fetched(client)} of {at_least} pages in "
                f"{timeout} s\n" + "\n".join(f"--- {name}\n{self.cluster.tail(name)[-1500:]}"
                                             for name in ("dispatcher", "w1", "w2")))
            time.sleep(0.05)

    def finish(self, timeout: float = 120) -> dict:
        try:
            out, err = self.proc.communicate(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.communicate()
        assert self.proc.returncode == 0, (err[-3000:], self.cluster.tail("dispatcher"))
        return json.loads(out)


def _check_nothing_lost(summary: dict, crawl: Crawl, client: redis.Redis, budget: int) -> None:
    assert summary["reason"] == "page budget reached", summary
    assert summary["fetched"] == budget
    assert lost_urls(crawl.store_url, client, "jlse:", crawl.crawl_id) == []
    with open_store(crawl.store_url) as store:
        stats = store.stats()
    assert stats.fetched >= budget


def _worker_offsets(cluster: MultiHostCluster) -> dict[str, int]:
    return {name: cluster.log_size(name) for name in cluster.hosts}


def _check_both_hosts_worked(cluster: MultiHostCluster, offsets: dict[str, int]) -> None:
    """Each worker host fetched pages after ``offsets`` (e.g. it reconnected after a restart)."""
    shares = {name: _pages_fetched(cluster.fetch_words(name, since))
              for name, since in offsets.items()}
    assert all(share >= 5 for share in shares.values()), (shares, cluster.tail("w1"),
                                                          cluster.tail("w2"))


def _wait_until(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


def test_worker_sessions_end_transactions_left_idle(services):
    """What keeps a partitioned worker's open transaction from stalling the others (test 5)."""
    url = worker_store_url(services["pg"].url + "?options=-csearch_path%3Dpublic")
    with psycopg2.connect(url) as conn, conn.cursor() as cur:
        cur.execute("SELECT current_setting('idle_in_transaction_session_timeout'), "
                    "current_setting('search_path')")
        assert cur.fetchone() == ("5s", "public")
    assert worker_store_url("sqlite:///crawl.db") == "sqlite:///crawl.db"


# --- (1) one crawl, two worker hosts ---------------------------------------------------------
def test_crawl_across_two_worker_hosts(cluster, phones_topic, sandbox, sandbox_web, store_url,
                                       redis_client):
    w1, w2 = cluster.hosts["w1"], cluster.hosts["w2"]
    peers_before = len(cluster.lab.web_fwd.peers)
    offsets = {name: cluster.log_size(name) for name in ("w1", "w2")}
    sandbox.clear_log()
    crawl = Crawl(cluster, phones_topic, store_url, "two-hosts", strategy="jlse")
    summary = crawl.finish()
    _check_nothing_lost(summary, crawl, redis_client, BUDGET)
    log = sandbox.log
    assert duplicate_fetches(log) == []
    assert robots_violations(log, sandbox_web) == []
    assert crawl_delay_breaches(log, sandbox_web) == []
    # The sandbox saw the pages come from both hosts' own addresses (through the forwarder).
    sources = {ip for ip, _port in cluster.lab.web_fwd.peers[peers_before:]}
    assert sources == {w1.address, w2.address}
    shares = {name: _pages_fetched(cluster.fetch_words(name, offsets[name])) for name in offsets}
    print(f"two hosts: pages per host {shares}, Q-table v{summary['qtable_version']}")
    assert all(share >= BUDGET // 10 for share in shares.values()), shares
    assert sum(shares.values()) >= BUDGET
    assert summary["qtable_version"] >= 1  # the learner (root namespace) learned from them


# --- (2) one worker host's process group killed with SIGKILL -------------------------------
def test_sigkill_of_one_worker_host_loses_nothing(cluster, phones_topic, sandbox, store_url,
                                                  redis_client):
    sandbox.clear_log()
    offset = cluster.log_size("w2")
    crawl = Crawl(cluster, phones_topic, store_url, "kill-host")
    try:
        crawl.wait_fetched(redis_client, 60)
        cluster.kill("w1")
        summary = crawl.finish()
    finally:
        cluster.start_worker("w1")  # for the tests after this one
    _check_nothing_lost(summary, crawl, redis_client, BUDGET)
    duplicates = duplicate_fetches(sandbox.log)
    print(f"SIGKILL of w1: {len(duplicates)} pages fetched twice")
    assert len(duplicates) <= WORKER_CONCURRENCY
    assert _pages_fetched(cluster.fetch_words("w2", offset)) > BUDGET // 2  # w2 took over


# --- (3) Redis restarted empty; `jlse frontier rebuild` -------------------------------------
def test_redis_restart_then_frontier_rebuild(cluster, services, phones_topic, sandbox,
                                             store_url, redis_client):
    sandbox.clear_log()
    crawl = Crawl(cluster, phones_topic, store_url, "redis-restart")
    crawl.wait_fetched(redis_client, 60)
    services["redis"].restart()  # SHUTDOWN NOSAVE + start: every key is gone
    offsets = _worker_offsets(cluster)
    assert not CrawlRegistry(redis_client, "jlse:").exists(crawl.crawl_id)
    time.sleep(1.0)
    assert crawl.proc.poll() is None, crawl.proc.stderr.read()[-3000:]  # waits for the rebuild
    rebuilt = subprocess.run(
        _jlse("frontier", "rebuild", "--crawl-id", crawl.crawl_id, "--store", store_url,
              "--frontier", cluster.local_redis_url),
        cwd=REPO, env=_base_env(cluster.local_redis_url), capture_output=True, text=True,
        timeout=60)
    assert rebuilt.returncode == 0, rebuilt.stderr[-3000:]
    assert "URLs queued" in rebuilt.stdout
    summary = crawl.finish()
    _check_nothing_lost(summary, crawl, redis_client, BUDGET)
    duplicates = duplicate_fetches(sandbox.log)
    print(f"Redis restart: {len(duplicates)} pages fetched twice")
    assert len(duplicates) <= MAX_OUTSTANDING  # only the pages in flight at the restart
    _check_both_hosts_worked(cluster, offsets)  # both Celery consumers came back


# --- (4) PostgreSQL restarted mid-crawl -------------------------------------------------------
def test_postgres_restart_mid_crawl(cluster, services, phones_topic, sandbox, store_url,
                                    redis_client):
    sandbox.clear_log()
    crawl = Crawl(cluster, phones_topic, store_url, "pg-restart")
    crawl.wait_fetched(redis_client, 60)
    services["pg"].restart()  # pg_ctl restart -m fast: every connection is dropped
    offsets = _worker_offsets(cluster)
    summary = crawl.finish()
    _check_nothing_lost(summary, crawl, redis_client, BUDGET)
    duplicates = duplicate_fetches(sandbox.log)
    print(f"PostgreSQL restart: {len(duplicates)} pages fetched twice")
    assert len(duplicates) <= MAX_OUTSTANDING
    _check_both_hosts_worked(cluster, offsets)


# --- (5) a worker host cut off the network, then reconnected -------------------------------
def test_cut_off_worker_host_leases_are_reaped_and_it_rejoins(cluster, phones_topic, sandbox,
                                                              store_url, redis_client):
    cut_host = cluster.hosts["w1"]
    sandbox.clear_log()
    dispatcher_offset = cluster.log_size("dispatcher")
    # A budget w2 cannot finish alone during the ~9 s partition: w1 must still find work after.
    crawl = Crawl(cluster, phones_topic, store_url, "cut-host", budget=CUT_BUDGET, lease_seconds=5.0,
                  politeness_delay=0.2)
    try:
        crawl.wait_fetched(redis_client, 40)
        cut_host.cut()
        cut_at = crawl.fetched(redis_client)
        # Beyond lease_seconds (w1's leases are reaped) and the workers' idle-in-transaction
        # timeout (PostgreSQL ends w1's open transaction and its row locks, which would stall
        # w2's inserts of the same links for as long as the partition lasts).
        time.sleep(6.5)
        unblocked_at = crawl.fetched(redis_client)
        time.sleep(2.5)
        progress_while_cut = crawl.fetched(redis_client) - cut_at
        progress_late_in_cut = crawl.fetched(redis_client) - unblocked_at
    finally:
        cut_host.reconnect()
    rejoined_at = cluster.log_size("w1")
    assert progress_late_in_cut > 0, (cluster.tail("w2"), cluster.tail("dispatcher"))  # w2 alone
    reaped = re.findall(r"(\d+) expired leases returned", cluster.log_text("dispatcher",
                                                                           dispatcher_offset))
    assert sum(map(int, reaped)) >= 1, cluster.tail("dispatcher")
    assert _wait_until(lambda: _pages_fetched(cluster.fetch_words("w1", rejoined_at)) >= 5,
                       timeout=60), cluster.tail("w1")
    summary = crawl.finish()
    _check_nothing_lost(summary, crawl, redis_client, CUT_BUDGET)
    duplicates = duplicate_fetches(sandbox.log)
    print(f"cut host: {progress_while_cut} pages while cut ({progress_late_in_cut} in its last "
          f"2.5 s), reaped {reaped}, "
          f"{len(duplicates)} pages fetched twice")
    assert len(duplicates) <= WORKER_CONCURRENCY


