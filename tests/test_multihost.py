"""The distributed crawl across "machines": fetch workers in network namespaces (tests/netns.py).

Two worker hosts (``w1``, ``w2``) each run ``jlse worker`` in their own namespace and reach
Redis, PostgreSQL and the sandbox web only through the lab's forwarders on the bridge gateway;
the dispatcher, the learner and ``jlse crawl`` run in the root namespace. Redis and PostgreSQL
are private instances of this module (tests/private_services.py), so restarting them never
disturbs the machine's shared services. Root only: without ``ip netns`` the tests fail.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg2
import pytest
import redis
from crawl_checks import crawl_delay_breaches, duplicate_fetches, robots_violations
from multihost import (
    BUDGET,
    MAX_OUTSTANDING,
    REPO,
    WORKER_CONCURRENCY,
    Crawl,
    MultiHostCluster,
    base_env,
    check_both_hosts_worked,
    check_nothing_lost,
    jlse,
    pages_fetched,
    private_schema_url,
    wait_until,
    worker_offsets,
)
from netns import NetnsLab, require_netns
from page_store_checks import check_page_store
from private_services import PrivatePostgres, PrivateRedis

from jlse.scheduler.crawl_registry import CrawlRegistry, worker_store_url

pytestmark = pytest.mark.slow

CUT_BUDGET = 1000  # test 5


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
    running = MultiHostCluster(lab, tmp_path_factory.mktemp("multihost-logs"),
                               services["redis"].url,
                               f"redis://{lab.gateway}:{lab.redis_fwd.port}/0")
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
    return private_schema_url(lab, services["pg"].url)


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
    check_nothing_lost(summary, crawl, redis_client, BUDGET)
    log = sandbox.log
    assert duplicate_fetches(log) == []
    assert robots_violations(log, sandbox_web) == []
    assert crawl_delay_breaches(log, sandbox_web) == []
    # The sandbox saw the pages come from both hosts' own addresses (through the forwarder).
    sources = {ip for ip, _port in cluster.lab.web_fwd.peers[peers_before:]}
    assert sources == {w1.address, w2.address}
    shares = {name: pages_fetched(cluster.fetch_words(name, offsets[name])) for name in offsets}
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
    check_nothing_lost(summary, crawl, redis_client, BUDGET)
    duplicates = duplicate_fetches(sandbox.log)
    print(f"SIGKILL of w1: {len(duplicates)} pages fetched twice")
    assert len(duplicates) <= WORKER_CONCURRENCY
    assert pages_fetched(cluster.fetch_words("w2", offset)) > BUDGET // 2  # w2 took over


# --- (3) Redis restarted empty; `jlse frontier rebuild` -------------------------------------
def test_redis_restart_then_frontier_rebuild(cluster, services, phones_topic, sandbox,
                                             store_url, redis_client):
    sandbox.clear_log()
    crawl = Crawl(cluster, phones_topic, store_url, "redis-restart")
    crawl.wait_fetched(redis_client, 60)
    services["redis"].restart()  # SHUTDOWN NOSAVE + start: every key is gone
    offsets = worker_offsets(cluster)
    assert not CrawlRegistry(redis_client, "jlse:").exists(crawl.crawl_id)
    time.sleep(1.0)
    assert crawl.proc.poll() is None, crawl.proc.stderr.read()[-3000:]  # waits for the rebuild
    rebuilt = subprocess.run(
        jlse("frontier", "rebuild", "--crawl-id", crawl.crawl_id, "--store", store_url,
              "--frontier", cluster.local_redis_url),
        cwd=REPO, env=base_env(cluster.local_redis_url), capture_output=True, text=True,
        timeout=60)
    assert rebuilt.returncode == 0, rebuilt.stderr[-3000:]
    assert "URLs queued" in rebuilt.stdout
    summary = crawl.finish()
    check_nothing_lost(summary, crawl, redis_client, BUDGET)
    duplicates = duplicate_fetches(sandbox.log)
    print(f"Redis restart: {len(duplicates)} pages fetched twice")
    assert len(duplicates) <= MAX_OUTSTANDING  # only the pages in flight at the restart
    check_both_hosts_worked(cluster, offsets)  # both Celery consumers came back


# --- (4) PostgreSQL restarted mid-crawl -------------------------------------------------------
def test_postgres_restart_mid_crawl(cluster, services, phones_topic, sandbox, store_url,
                                    redis_client):
    sandbox.clear_log()
    crawl = Crawl(cluster, phones_topic, store_url, "pg-restart")
    crawl.wait_fetched(redis_client, 60)
    services["pg"].restart()  # pg_ctl restart -m fast: every connection is dropped
    offsets = worker_offsets(cluster)
    summary = crawl.finish()
    check_nothing_lost(summary, crawl, redis_client, BUDGET)
    duplicates = duplicate_fetches(sandbox.log)
    print(f"PostgreSQL restart: {len(duplicates)} pages fetched twice")
    assert len(duplicates) <= MAX_OUTSTANDING
    check_both_hosts_worked(cluster, offsets)


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
    assert wait_until(lambda: pages_fetched(cluster.fetch_words("w1", rejoined_at)) >= 5,
                       timeout=60), cluster.tail("w1")
    summary = crawl.finish()
    check_nothing_lost(summary, crawl, redis_client, CUT_BUDGET)
    duplicates = duplicate_fetches(sandbox.log)
    print(f"cut host: {progress_while_cut} pages while cut ({progress_late_in_cut} in its last "
          f"2.5 s), reaped {reaped}, "
          f"{len(duplicates)} pages fetched twice")
    assert len(duplicates) <= WORKER_CONCURRENCY


# --- (6) the page store both worker hosts write: export reads every page -------------------
def test_export_reads_every_page_from_the_shared_page_store(cluster, phones_topic, store_url,
                                                            redis_client, tmp_path):
    orphans = set(cluster.pages_store.glob("*.open"))  # of the worker killed in test 2
    crawl = Crawl(cluster, phones_topic, store_url, "page-store", warc_max_bytes=100_000)
    summary = crawl.finish()
    check_nothing_lost(summary, crawl, redis_client, BUDGET)
    try:
        for name in ("w1", "w2"):  # a warm shutdown seals each process's files
            cluster.stop(name)
    finally:
        for name in ("w1", "w2"):
            cluster.start_worker(name)
    env = {key: value for key, value in cluster.root_env().items()
           if key != "JLSE_PAGES_STORE"}  # export finds the store the workers noted
    out = tmp_path / "pages.jsonl"
    exported = subprocess.run(jlse("export", "--store", store_url, "--all", "--content",
                                   "--out", str(out)),
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert exported.returncode == 0, exported.stderr[-3000:]
    counts = check_page_store(out, cluster.pages_store, {"w1", "w2"}, orphans)
    print(f"page store: {counts}")
    assert counts["ok_pages"] >= BUDGET * 0.9


# --- (7) the learner SIGKILLed mid-crawl and restarted ----------------------------------------
_ROUND = re.compile(r"Q-table v(\d+) \((full read|incremental)\)")


def test_learner_restart_mid_crawl_reads_the_graph_once_then_goes_on(cluster, phones_topic,
                                                                     store_url, redis_client):
    """A restarted learner rebuilds its graph from PostgreSQL once, then learns incrementally
    again, its versions above those published before; the crawl loses nothing meanwhile."""
    budget = BUDGET + 100
    offset = cluster.log_size("learner")
    # rounds every 10 results, and a crawl slow enough to go on while the learner restarts
    crawl = Crawl(cluster, phones_topic, store_url, "learner-restart", strategy="jlse",
                  budget=budget, cf=10, politeness_delay=0.3)
    try:
        assert wait_until(lambda: _ROUND.search(cluster.log_text("learner", offset)),
                          timeout=60), cluster.tail("learner")
        before = [int(v) for v, _ in _ROUND.findall(cluster.log_text("learner", offset))]
        cluster.kill("learner")
        restarted_at = cluster.log_size("learner")
        cluster.start_local("learner", "learner", "--hostname", "learner@mh")
        assert wait_until(lambda: " ready." in cluster.log_text("learner", restarted_at),
                          timeout=60), cluster.tail("learner")
        summary = crawl.finish()
    finally:
        if "learner" not in cluster.procs:
            cluster.start_local("learner", "learner", "--hostname", "learner@mh")
    check_nothing_lost(summary, crawl, redis_client, budget)
    assert wait_until(lambda: len(_ROUND.findall(cluster.log_text("learner", restarted_at))) >= 2,
                      timeout=30), cluster.tail("learner")
    after = _ROUND.findall(cluster.log_text("learner", restarted_at))
    print(f"learner restart: versions {before} before, {after} after")
    assert after[0][1] == "full read"  # its graph read once from PostgreSQL
    assert all(kind == "incremental" for _, kind in after[1:]), after
    assert int(after[0][0]) > max(before)
    assert summary["qtable_version"] >= int(after[0][0])
