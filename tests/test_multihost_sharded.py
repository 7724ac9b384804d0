"""The sharded frontier across "machines": two worker hosts in network namespaces (tests/netns.py)
crawl through a real Redis Cluster of 3 masters with one replica each, listening on the lab's
bridge: one frontier shard per master, one dispatcher per shard (``--shard i/3``), the learner and
``jlse crawl`` in the root namespace. Celery's broker is a private Redis of its own and the crawl
database a private PostgreSQL, both reached from the hosts through the lab's forwarders.

(1) a crawl spreads over the shards and both hosts, and each host's robots.txt is asked once;
(2) a master is killed (its replica takes over) and a worker host is killed with SIGKILL in the
same crawl: no URL is lost and only pages in flight are fetched twice.
Root only: without ``ip netns`` the tests fail.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest
from crawl_checks import (
    crawl_delay_breaches,
    duplicate_fetches,
    lost_urls,
    page_requests,
    robots_fetches_per_host,
    robots_violations,
)
from multihost import (
    BUDGET,
    MAX_OUTSTANDING,
    WORKER_CONCURRENCY,
    Crawl,
    MultiHostCluster,
    check_nothing_lost,
    pages_fetched,
    private_schema_url,
)
from netns import NetnsLab, require_netns
from private_services import PrivatePostgres, PrivateRedis
from redis_cluster import RedisClusterProcesses

from jlse.scheduler.crawl_registry import CrawlRegistry
from jlse.scheduler.shards import shard_of
from jlse.scheduler.store import open_store
from jlse.scheduler.urls import host_of

pytestmark = pytest.mark.slow

SHARDS = 3


@pytest.fixture(scope="module")
def lab(sandbox) -> Iterator[NetnsLab]:
    require_netns()
    with NetnsLab() as made:
        yield made


@pytest.fixture(scope="module")
def services(lab, sandbox, tmp_path_factory) -> Iterator[dict]:
    broker = PrivateRedis(tmp_path_factory.mktemp("broker"))
    database = PrivatePostgres()
    frontier = None
    try:
        broker.start()
        database.start()
        frontier = RedisClusterProcesses(tmp_path_factory.mktemp("frontier"), masters=SHARDS,
                                         replicas=1, host=lab.gateway)
        lab.broker_fwd = lab.forward(0, ("127.0.0.1", broker.port))
        lab.pg_fwd = lab.forward(0, ("127.0.0.1", database.port))
        lab.web_fwd = lab.forward(0, ("127.0.0.1", sandbox.port))
        yield {"broker": broker, "pg": database, "frontier": frontier}
    finally:
        if frontier is not None:
            frontier.stop()
        broker.stop()
        try:
            database.stop()
        finally:
            database.remove()


@pytest.fixture(scope="module")
def cluster(lab, services, tmp_path_factory) -> Iterator[MultiHostCluster]:
    frontier_url = services["frontier"].url  # the masters listen on the bridge: both sides
    broker_port = services["broker"].port
    running = MultiHostCluster(
        lab, tmp_path_factory.mktemp("sharded-logs"), frontier_url, frontier_url,
        local_env={"CELERY_BROKER_URL": f"redis://127.0.0.1:{broker_port}/1"},
        hosts_env={"CELERY_BROKER_URL": f"redis://{lab.gateway}:{lab.broker_fwd.port}/1"})
    try:
        running.start_worker("w1")
        running.start_worker("w2")
        running.start_local("learner", "learner", "--hostname", "learner@mh", ready=" ready.")
        for index in range(SHARDS):  # the first one's log is "dispatcher" (Crawl's failures)
            name = "dispatcher" if index == 0 else f"dispatcher{index}"
            running.start_local(name, "--verbose", "dispatcher", "--shard", f"{index}/{SHARDS}")
        yield running
    finally:
        running.stop_all()


@pytest.fixture(scope="module")
def frontier_client(services):
    client = services["frontier"].client()
    yield client
    client.close()


@pytest.fixture(scope="module")
def phones_topic(sandbox_web, tmp_path_factory):
    return sandbox_web.write_topic_dir("phones", tmp_path_factory.mktemp("topic") / "phones")


@pytest.fixture()
def store_url(lab, services) -> str:
    """A fresh schema in the private PostgreSQL, addressed through the lab's forwarder."""
    return private_schema_url(lab, services["pg"].url)


def _pages_per_shard(log) -> Counter:
    return Counter(shard_of(entry.host, SHARDS) for entry in page_requests(log))


# --- (1) one crawl over 3 shards and two worker hosts -----------------------------------------
def test_sharded_crawl_across_two_worker_hosts(cluster, phones_topic, sandbox, sandbox_web,
                                               store_url, frontier_client):
    peers_before = len(cluster.lab.web_fwd.peers)
    offsets = {name: cluster.log_size(name) for name in ("w1", "w2")}
    sandbox.clear_log()
    crawl = Crawl(cluster, phones_topic, store_url, "sharded", strategy="jlse")
    summary = crawl.finish()
    registry = CrawlRegistry(frontier_client, "jlse:")
    assert registry.shard_count(crawl.crawl_id) == SHARDS  # one shard per master
    check_nothing_lost(summary, crawl, frontier_client, BUDGET, overshoot=MAX_OUTSTANDING)
    log = sandbox.log
    assert duplicate_fetches(log) == []
    assert robots_violations(log, sandbox_web) == []
    assert crawl_delay_breaches(log, sandbox_web) == []
    asked = robots_fetches_per_host(log)
    assert asked and max(asked.values()) == 1, asked  # once per crawl, whichever host asks
    per_shard = _pages_per_shard(log)
    sources = {ip for ip, _port in cluster.lab.web_fwd.peers[peers_before:]}
    shares = {name: pages_fetched(cluster.fetch_words(name, offsets[name])) for name in offsets}
    print(f"3 shards, two hosts: pages per shard {dict(per_shard)}, per host {shares}, "
          f"robots.txt {sum(asked.values())} requests for {len(asked)} hosts")
    # a shard's pages are sent by its own dispatcher only: two shards, two dispatchers at work
    assert len(per_shard) >= 2, per_shard
    with open_store(store_url) as store:
        known = {shard_of(host_of(link.url), SHARDS) for link in store.iter_links()}
    assert known == set(range(SHARDS))  # URLs were queued in every shard
    assert sources == {host.address for host in cluster.hosts.values()}
    assert all(share >= BUDGET // 10 for share in shares.values()), shares


# --- (2) a master and a worker host killed mid-crawl -------------------------------------------
def test_killed_master_and_worker_host_lose_no_url(cluster, services, phones_topic, sandbox,
                                                   store_url, frontier_client):
    nodes = services["frontier"]
    sandbox.clear_log()
    offset = cluster.log_size("w2")
    crawl = Crawl(cluster, phones_topic, store_url, "sharded-kill")
    victim = CrawlRegistry(frontier_client, "jlse:").frontier_prefix(crawl.crawl_id, 1) + "ready"
    killed = None
    try:
        crawl.wait_fetched(frontier_client, 60)
        killed = nodes.kill_master_of(victim)
        cluster.kill("w1")
        promoted = nodes.wait_failover(killed)
        summary = crawl.finish(timeout=180)
    finally:
        cluster.start_worker("w1")  # for the tests after this one
        if killed is not None:
            nodes.restart(killed)
    assert promoted != killed
    assert summary["reason"] == "page budget reached", summary
    # one dispatcher per shard: each pops within what it last read of the others
    assert BUDGET <= summary["fetched"] <= BUDGET + MAX_OUTSTANDING, summary
    with open_store(store_url) as store:  # pushed while their shard failed over: they wait
        waiting = {link.url for shard in range(SHARDS)  # in the database for its next refill
                   for link in store.deferred_pushes(shard, 100_000)}
    lost = [entry for entry in lost_urls(store_url, frontier_client, "jlse:", crawl.crawl_id)
            if entry.split(" (")[0] not in waiting]
    print(f"{len(waiting)} URLs waiting for their shard's refill")
    assert lost == []
    duplicates = duplicate_fetches(sandbox.log)
    print(f"master {killed} and worker host w1 killed: {len(duplicates)} pages fetched twice")
    # the killed host's pages in flight, and those whose end the dead master had not yet
    # passed to its replica
    assert len(duplicates) <= WORKER_CONCURRENCY + MAX_OUTSTANDING, duplicates
    assert pages_fetched(cluster.fetch_words("w2", offset)) > BUDGET // 2  # w2 took over
