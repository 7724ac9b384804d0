"""Workers do not take their database, secrets, proxy or address guard from Redis (issue 15).

The end-to-end tests register a real crawl (real Redis, real PostgreSQL, the sandbox web as the
worker's own proxy), then rewrite the crawl config in Redis the way someone with write access to
Redis could, and run the ``jlse.fetch`` task body in a worker subprocess whose environment holds
its real settings and a ``PGPASSWORD``. Fake PostgreSQL and proxy listeners count connections.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from jlse.records import LinkStatus
from jlse.scheduler.store import open_store
from jlse.workers.worker_trust import (
    UntrustedConfig,
    WorkerEnvironment,
    database_url,
    trusted_config,
)

REPO = Path(__file__).resolve().parent.parent
REDIS_URL = os.environ.get("JLSE_TEST_REDIS", "redis://127.0.0.1:6379/0")
SECRET = "pgpass-must-never-leave-9f3c"
WORKER = """
import json, logging, sys
logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                    format="%(levelname)s %(name)s: %(message)s")
from jlse.workers.distributed import process_task
print(json.dumps([process_task(sys.argv[1], json.loads(task)) for task in sys.argv[2:]]))
"""
OWN = WorkerEnvironment("postgresql://crawler@db.example:5432/jlse?sslmode=require",
                        proxy="http://proxy.example:3128", allow_private=False,
                        allowed_networks=())


# --- the rules, without a worker -------------------------------------------------------------

def _config(**settings) -> dict:
    base = {"proxy": "http://proxy.example:3128", "politeness_delay": 0.5}
    return {"crawl_id": "c", "settings": {**base, **settings}, "status": "running",
            "store_url": "postgresql://crawler@db.example/crawl1?options=-csearch_path%3Dt_1"}


def test_the_database_is_the_workers_own_with_the_crawls_name_and_schema() -> None:
    trusted = trusted_config(_config(), OWN)
    assert trusted.store_url == ("postgresql://crawler@db.example:5432/crawl1"
                                 "?sslmode=require&options=-csearch_path%3Dt_1")
    assert trusted.settings.proxy == OWN.proxy and trusted.settings.politeness_delay == 0.5


@pytest.mark.parametrize(
    "registered",
    ["postgresql://crawler@evil.example/crawl1", "postgresql://crawler@db.example:5433/crawl1",
     "postgresql://crawler@db.example/host%3Devil.example",  # a dbname libpq would expand
     "postgresql://crawler@db.example/crawl1?options=-cstatement_timeout%3D1",
     "sqlite:////tmp/x.db"],
)
def test_a_registered_database_elsewhere_is_refused(registered: str) -> None:
    with pytest.raises(UntrustedConfig):
        database_url(registered, OWN.database_url)


def test_libpq_parameters_in_the_registered_url_are_ignored() -> None:
    url = database_url("postgresql://x:stolen@db.example/crawl1?host=evil.example&port=1"
                       "&sslmode=disable&passfile=/tmp/p", OWN.database_url)
    assert url == "postgresql://crawler@db.example:5432/crawl1?sslmode=require"


@pytest.mark.parametrize(
    ("settings", "reason"),
    [({"proxy": "http://evil.example:8080"}, "proxy"), ({"proxy": ""}, "proxy"),
     ({"allow_private": True}, "allow_private"),
     ({"allowed_networks": ["10.0.0.0/8"]}, "allowed_networks"),
     ({"max_bytes": 2**40}, "max_bytes"), ({"fetch_deadline": 1e9}, "fetch_deadline"),
     ({"concurrency": "lots"}, "concurrency"), ({"no_such_setting": 1}, "no_such_setting")],
)
def test_settings_a_worker_refuses(settings: dict, reason: str) -> None:
    with pytest.raises(UntrustedConfig, match=reason):
        trusted_config(_config(**settings), OWN).check_fetching()


def test_the_proxy_is_compared_without_credentials() -> None:
    own = WorkerEnvironment(OWN.database_url, "http://user:s3cret@proxy.example:3128", False, ())
    trusted = trusted_config(_config(proxy="http://user@proxy.example:3128"), own)
    assert trusted.settings.proxy == own.proxy  # the worker's, with its password


@pytest.mark.parametrize("change", [{"extra": 1}, {"settings": "x"}, {"max_pages": True}])
def test_unknown_keys_and_wrong_types_are_refused(change: dict) -> None:
    with pytest.raises(UntrustedConfig):
        trusted_config({**_config(), **change}, OWN)


# --- end to end: a worker subprocess, real Redis and PostgreSQL --------------------------------

class _Listener:
    """A TCP listener that counts connections and keeps what they send. As a fake PostgreSQL
    server it asks for a clear-text password, so a connecting client would hand it over."""

    def __init__(self, ask_password: bool) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.received = b""
        self.ask_password = ask_password
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            conn.settimeout(2)
            try:
                self.received += conn.recv(65536)
                if self.ask_password:  # AuthenticationCleartextPassword
                    conn.sendall(b"R\x00\x00\x00\x08\x00\x00\x00\x03")
                    self.received += conn.recv(65536)
            except OSError:
                pass
            conn.close()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture()
def listeners() -> Iterator[tuple[_Listener, _Listener]]:
    fake_pg, fake_proxy = _Listener(ask_password=True), _Listener(ask_password=False)
    yield fake_pg, fake_proxy
    fake_pg.close()
    fake_proxy.close()


@pytest.fixture()
def crawl(registry, pg_database_url, pg_store_url, sandbox, sandbox_web, tmp_path,
          monkeypatch) -> dict:
    """A bfs crawl of the sandbox registered by ``jlse crawl --frontier``'s own code."""
    from jlse.cluster import register_crawl

    monkeypatch.setenv("JLSE_KEY_PREFIX", registry.root)
    topic = sandbox_web.write_topic_dir("phones", tmp_path / "phones", n_samples=4)
    overrides = {"strategy": "bfs", "max_pages": 50, "politeness_delay": 0.0,
                 "proxy": sandbox.proxy_url, "connect_timeout": 2.0, "read_timeout": 2.0,
                 "fetch_deadline": 4.0}
    crawl_id = register_crawl(topic, overrides, pg_store_url, REDIS_URL, "trust")
    env = dict(os.environ, REDIS_URL=REDIS_URL, JLSE_KEY_PREFIX=registry.root,
               DATABASE_URL=pg_database_url, JLSE_PROXY=sandbox.proxy_url, PGPASSWORD=SECRET,
               PYTHONUNBUFFERED="1")
    env.pop("CELERY_BROKER_URL", None)
    return {"id": crawl_id, "registry": registry, "store_url": pg_store_url, "env": env,
            "key": registry.prefix(crawl_id) + "config"}


def _run_worker(crawl: dict, n_tasks: int = 1) -> tuple[list[str], str, list[str]]:
    """Pop ``n_tasks`` leased URLs and run the fetch task on them in a worker subprocess:
    what became of each, the worker's log, and the URLs."""
    frontier = crawl["registry"].frontier(crawl["id"])
    tasks = [frontier.pop() for _ in range(n_tasks)]
    assert all(tasks), "the frontier has no URL ready"
    done = subprocess.run(
        [sys.executable, "-c", WORKER, crawl["id"], *(json.dumps(t.to_dict()) for t in tasks)],
        cwd=REPO, env=crawl["env"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr, [t.url for t in tasks]


def _tamper(crawl: dict, **changes) -> None:
    """Rewrite the crawl's config in Redis as someone with write access there would: the
    config and the digest each shard checks it against."""
    from jlse.scheduler.crawl_registry import config_sha1

    registry, client = crawl["registry"], crawl["registry"].client
    config = json.loads(client.get(crawl["key"]))
    for key, value in changes.items():
        if key in ("proxy", "allow_private"):
            config["settings"][key] = value
        else:
            config[key] = value
    raw = json.dumps(config)
    client.set(crawl["key"], raw)
    for shard in range(registry.shard_count(crawl["id"])):
        client.hset(registry.shard_prefix(crawl["id"], shard) + "state", "sha1",
                    config_sha1(raw.encode()))


def _fetched(store_url: str, urls: list[str]) -> list[str]:
    with open_store(store_url) as store:
        links = [store.get_link(store.get_link_id(url)) for url in urls]
    return [link.url for link in links if link.status is not LinkStatus.QUEUED]


def test_honest_config_is_crawled(crawl, listeners) -> None:
    results, log, urls = _run_worker(crawl)
    assert results != ["refused"], log
    assert _fetched(crawl["store_url"], urls) == urls


@pytest.mark.parametrize("target", ["database", "proxy", "both"])
def test_rewritten_config_sends_nothing_elsewhere(crawl, listeners, target: str) -> None:
    fake_pg, fake_proxy = listeners
    changes = {}
    if target in ("database", "both"):
        changes["store_url"] = f"postgresql://postgres@127.0.0.1:{fake_pg.port}/jlse"
    if target in ("proxy", "both"):
        changes["proxy"] = f"http://127.0.0.1:{fake_proxy.port}"
    _tamper(crawl, **changes)
    results, log, urls = _run_worker(crawl, n_tasks=2)
    assert results == ["refused", "refused"]
    assert fake_pg.connections == 0 and fake_proxy.connections == 0
    assert SECRET.encode() not in fake_pg.received
    refusals = [line for line in log.splitlines() if "crawl trust refused:" in line]
    assert len(refusals) == 1, log  # logged once, with the reason
    assert ("proxy" if target == "proxy" else "database server") in refusals[0]
    assert _fetched(crawl["store_url"], urls) == []  # still queued: the leases run out


def test_libpq_overrides_in_a_rewritten_store_url_are_ignored(crawl, listeners) -> None:
    fake_pg, _ = listeners
    schema_url = crawl["store_url"]
    _tamper(crawl, store_url=f"{schema_url}&host=127.0.0.1&port={fake_pg.port}&sslmode=disable")
    results, log, urls = _run_worker(crawl)
    assert results != ["refused"], log  # the crawl goes on, in the worker's own database
    assert fake_pg.connections == 0
    assert _fetched(schema_url, urls) == urls


def test_allow_private_cannot_be_switched_on_from_redis(crawl, listeners) -> None:
    _tamper(crawl, allow_private=True)
    results, log, _ = _run_worker(crawl)
    assert results == ["refused"]
    assert "allow_private" in log and "JLSE_ALLOW_PRIVATE" in log


def test_frontier_rebuild_never_opens_the_store_url_from_redis(crawl, listeners) -> None:
    fake_pg, _ = listeners
    _tamper(crawl, store_url=f"postgresql://postgres@127.0.0.1:{fake_pg.port}/jlse")
    env = {key: value for key, value in crawl["env"].items() if key != "DATABASE_URL"}
    done = subprocess.run([sys.executable, "-m", "jlse.cli", "frontier", "rebuild", "--crawl-id",
                           crawl["id"], "--frontier", REDIS_URL], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert done.stderr.splitlines()[0] == \
        "error: give the crawl database with --store (or DATABASE_URL)"
    assert fake_pg.connections == 0


def test_a_task_of_a_crawl_gone_from_redis_is_skipped_not_raised(crawl, listeners) -> None:
    """Redis lost the crawl (its config) while its tasks sat in the broker: each is skipped
    with one warning, no traceback; its URL stays queued for `jlse frontier rebuild`."""
    frontier = crawl["registry"].frontier(crawl["id"])
    tasks = [frontier.pop() for _ in range(2)]
    crawl["registry"].client.delete(crawl["key"])
    done = subprocess.run(
        [sys.executable, "-c", WORKER, crawl["id"], *(json.dumps(t.to_dict()) for t in tasks)],
        cwd=REPO, env=crawl["env"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == ["refused", "refused"]
    skipped = [line for line in done.stderr.splitlines() if "crawl trust skipped:" in line]
    assert len(skipped) == 1 and "not registered in Redis" in skipped[0], done.stderr
    assert "Traceback" not in done.stderr
    assert _fetched(crawl["store_url"], [t.url for t in tasks]) == []


def test_a_refusal_reaches_the_crawls_screen_and_status(crawl, listeners, caplog) -> None:
    """A worker whose own proxy is not the crawl's refuses it (the rule above); the crawl's
    screen (``jlse crawl --frontier``) and ``jlse status`` say so and why, not only the
    worker's log: a crawl all of whose workers refuse it otherwise shows 0 pages and no
    reason."""
    from jlse.cluster import _crawl_status, render_status
    from jlse.cluster_watch import ProgressWatch
    from jlse.settings import Settings

    _, fake_proxy = listeners
    crawl["env"]["JLSE_PROXY"] = f"http://127.0.0.1:{fake_proxy.port}"
    results, log, _ = _run_worker(crawl)
    assert results == ["refused"], log
    refusals = crawl["registry"].refusals(crawl["id"])
    [(worker, why)] = refusals.items()
    assert "proxy" in why and "JLSE_PROXY" in why
    shown = render_status({"crawls": {crawl["id"]: _crawl_status(crawl["registry"], crawl["id"])},
                           "workers": {}})
    assert f"refused by {worker}: {why}" in shown
    watch = ProgressWatch(Settings(), seeds=0)
    frontier = crawl["registry"].frontier(crawl["id"])
    counters = crawl["registry"].counters(crawl["id"])
    with caplog.at_level("WARNING"):
        watch.check(counters, frontier, refusals)
        watch.check(counters, frontier, refusals)  # said once
    said = [r.getMessage() for r in caplog.records if "refuses this crawl" in r.getMessage()]
    assert said == [f"worker {worker} refuses this crawl: {why}"]
    watch.check(counters, frontier, {**refusals, "other:1": why})  # the same reason: said
    assert len([r for r in caplog.records if "refuses" in r.getMessage()]) == 1
