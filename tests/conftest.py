"""Shared fixtures: a private PostgreSQL database and the sandbox web, per test session.

Real services only. If PostgreSQL is not reachable the tests fail with a clear message (run
``make services`` to start it) instead of being skipped.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import uuid
from collections.abc import Iterator

import pytest

PG_ADMIN_URL = os.environ.get("JLSE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
SESSION_TAG = uuid.uuid4().hex[:10]


def pytest_configure(config: pytest.Config) -> None:
    """The Ctrl+C tests send SIGINT to the crawls they start. A test run started in the
    background of a shell without job control (``cmd &`` in a script) inherits SIGINT ignored,
    and so would every crawl it starts: give the children Python's own handler instead (an
    ignored signal stays ignored across exec; a handled one is reset to the default).
    The workers the tests start keep their Q-table copies in the session's own directory,
    removed at its end (``learner/qtable_cache.py``), not in /dev/shm, and their page store
    (``workers/page_store.py``) there too, not in the repository's ./pages-store."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if "JLSE_QTABLE_CACHE" not in os.environ:
        os.environ["JLSE_QTABLE_CACHE"] = tempfile.mkdtemp(prefix="jlse-test-qtables-")
    if "JLSE_PAGES_STORE" not in os.environ:
        os.environ["JLSE_PAGES_STORE"] = tempfile.mkdtemp(prefix="jlse-test-pages-store-")


def pytest_unconfigure(config: pytest.Config) -> None:
    cache = os.environ.get("JLSE_QTABLE_CACHE", "")
    if os.path.basename(cache).startswith("jlse-test-qtables-"):
        shutil.rmtree(cache, ignore_errors=True)
    pages = os.environ.get("JLSE_PAGES_STORE", "")
    if os.path.basename(pages).startswith("jlse-test-pages-store-"):
        shutil.rmtree(pages, ignore_errors=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A report's captured output as valid UTF-8: a test that logs undecodable bytes
    (surrogate escapes) would otherwise break the report's way back from a pytest-xdist
    worker process."""
    outcome = yield
    report = outcome.get_result()
    report.sections = [(name, _utf8(content)) for name, content in report.sections]


def _utf8(text: str) -> str:
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _pg_admin_connection():
    import psycopg2

    try:
        conn = psycopg2.connect(PG_ADMIN_URL, connect_timeout=5)
    except psycopg2.OperationalError as exc:
        pytest.fail(
            f"PostgreSQL is not reachable at {PG_ADMIN_URL} ({exc}). "
            "Start it with `make services` or set JLSE_TEST_PG.",
            pytrace=False,
        )
    conn.autocommit = True
    return conn


@pytest.fixture(scope="session")
def pg_database_url() -> Iterator[str]:
    """URL of a PostgreSQL database private to this test session, dropped afterwards."""
    name = f"jlse_test_{SESSION_TAG}"
    admin = _pg_admin_connection()
    with admin.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{name}"')
    base = PG_ADMIN_URL.rsplit("/", 1)[0]
    try:
        yield f"{base}/{name}"
    finally:
        with admin.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


@pytest.fixture()
def pg_store_url(pg_database_url: str) -> Iterator[str]:
    """A fresh, empty schema in the session database for one test (search_path set in the URL)."""
    import psycopg2

    schema = f"t_{uuid.uuid4().hex[:12]}"
    conn = psycopg2.connect(pg_database_url)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield f"{pg_database_url}?options=-csearch_path%3D{schema}"
    finally:
        with conn.cursor() as cur:
            cur.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        conn.close()


@pytest.fixture()
def pg_partitioned_store_url(pg_store_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """``pg_store_url`` made a crawl database with partitioned links (schema 3, opt-in through
    JLSE_LINK_PARTITIONS); the variable is unset again, so later opens read the layout from
    the database, as a worker's would."""
    from jlse.scheduler.store import open_store
    from jlse.scheduler.store.partitions import LINK_PARTITIONS, PARTITIONS_ENV

    with monkeypatch.context() as env:
        env.setenv(PARTITIONS_ENV, str(LINK_PARTITIONS))
        open_store(pg_store_url).close()
    return pg_store_url


# Every backend and layout the contract suites run on: PostgreSQL both unpartitioned (the
# default) and partitioned.
STORE_BACKENDS = {"sqlite": None, "postgresql": "pg_store_url",
                  "postgresql-partitioned": "pg_partitioned_store_url"}


@pytest.fixture(params=list(STORE_BACKENDS))
def store_url(request, tmp_path) -> str:
    """A crawl database URL on each backend: the contract suites run on all of them."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/crawl.db"
    return request.getfixturevalue(STORE_BACKENDS[request.param])


@pytest.fixture()
def store(store_url):
    from jlse.scheduler.store import open_store

    with open_store(store_url) as opened:
        yield opened


@pytest.fixture(scope="session")
def sandbox_web():
    """The default sandbox web (deterministic), built once per session."""
    from jlse.sandbox import build_web

    return build_web()


@pytest.fixture(scope="session")
def discovery_web():
    """The discovery web (the sandbox plus its long tail), built once per session; each test
    module serves it on a server of its own (their request logs stay apart)."""
    from jlse.sandbox import build_web

    return build_web(discovery=True)


@pytest.fixture(scope="session")
def sandbox(sandbox_web) -> Iterator:
    """The sandbox web served on loopback for the whole session; ``sandbox.proxy_url``."""
    from jlse.sandbox import SandboxServer

    server = SandboxServer(sandbox_web)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def real_redis(url: str):
    """A client of the real Redis at ``url``; an unreachable one fails the test (never a skip)."""
    import redis

    client = redis.Redis.from_url(url, socket_connect_timeout=5)
    try:
        client.ping()
    except redis.RedisError as exc:
        pytest.fail(f"Redis is not reachable at {url} ({exc}); run `make services`",
                    pytrace=False)
    return client


@pytest.fixture()
def registry() -> Iterator:
    """A crawl registry on the real Redis (``JLSE_TEST_REDIS``) under a private key prefix,
    deleted afterwards. An unreachable Redis fails the test."""
    from jlse.scheduler.crawl_registry import CrawlRegistry

    client = real_redis(os.environ.get("JLSE_TEST_REDIS", "redis://127.0.0.1:6379/0"))
    root = f"jlsetest{uuid.uuid4().hex[:8]}:"
    yield CrawlRegistry(client, root)
    keys = list(client.scan_iter(match=root + "*", count=1000))
    if keys:
        client.unlink(*keys)
    client.close()


# -- frontier fixtures: the contract suite (test_frontier_contract.py) and the Redis tests ----

class FakeClock:
    """A clock the tests move by hand: frontiers take ``clock=``, so no test sleeps."""

    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture()
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(scope="session")
def redis_client() -> Iterator:
    """A client of the real Redis (``JLSE_TEST_REDIS``, else ``REDIS_URL``); unreachable
    fails the test."""
    client = real_redis(os.environ.get("JLSE_TEST_REDIS", os.environ.get(
        "REDIS_URL", "redis://127.0.0.1:6379/0")))
    yield client
    client.close()


@pytest.fixture()
def make_redis_frontier(redis_client, clock):
    """``make(**kwargs)``: a RedisFrontier under a private key prefix on the fake clock, with
    domain diversity off unless asked for; its keys are deleted afterwards."""
    from jlse.scheduler.redis_frontier import RedisFrontier

    made: list = []

    def make(**kwargs) -> RedisFrontier:
        kwargs.setdefault("clock", clock)
        kwargs.setdefault("diversity", 1)
        frontier = RedisFrontier(redis_client, f"jlse:test:{uuid.uuid4().hex}:", **kwargs)
        made.append(frontier)
        return frontier

    yield make
    for frontier in made:
        frontier.clear()
        assert list(redis_client.scan_iter(match=frontier.prefix + "*")) == []


@pytest.fixture()
def make_sharded_frontier(clock):
    """``make(client, shards=3, **kwargs)``: a ShardedFrontier of ``shards`` RedisFrontier
    shards on ``client`` (a plain Redis or a Redis Cluster), each under a private prefix with
    its own hash tag, on the fake clock, domain diversity off unless asked for; every key is
    deleted afterwards."""
    from jlse.scheduler.redis_frontier import RedisFrontier
    from jlse.scheduler.sharded_frontier import ShardedFrontier

    made: list = []

    def make(client, shards: int = 3, **kwargs) -> ShardedFrontier:
        kwargs.setdefault("clock", clock)
        kwargs.setdefault("diversity", 1)
        tag = uuid.uuid4().hex
        frontier = ShardedFrontier([RedisFrontier(client, f"jlse:test:{{{tag}.{i}}}:", **kwargs)
                                    for i in range(shards)])
        made.append(frontier)
        return frontier

    yield make
    for frontier in made:
        frontier.clear()
        assert frontier.stats()["queued"] == 0


# -- Redis Cluster fixtures (tests/redis_cluster.py): private redis-server processes ----------

def _redis_cluster(directory):
    from redis_cluster import ClusterUnavailable, RedisClusterProcesses

    try:
        return RedisClusterProcesses(directory, masters=3, replicas=1)
    except ClusterUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory) -> Iterator:
    """A Redis Cluster (3 masters, 1 replica each) for the whole session. A test that kills a
    node must use ``fresh_redis_cluster``; a missing redis-server fails the test."""
    cluster = _redis_cluster(tmp_path_factory.mktemp("redis-cluster"))
    yield cluster
    cluster.stop()


@pytest.fixture()
def fresh_redis_cluster(tmp_path) -> Iterator:
    """A Redis Cluster of this test alone (3 masters, 1 replica each), for destructive tests."""
    cluster = _redis_cluster(tmp_path / "redis-cluster")
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def redis_cluster_client(redis_cluster) -> Iterator:
    """One ``RedisCluster`` client of the session's cluster."""
    client = redis_cluster.client()
    yield client
    client.close()
