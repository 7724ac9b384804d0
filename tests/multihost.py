"""The distributed crawl across "machines" (tests/netns.py), shared by the multi-host tests:
worker hosts in network namespaces, the other roles in the root namespace, ``jlse crawl``
driven from the root namespace with the checks every test makes."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import psycopg2
import redis
from crawl_checks import lost_urls
from netns import NetnsLab

from jlse.scheduler.crawl_registry import CrawlRegistry
from jlse.scheduler.store import open_store

REPO = Path(__file__).resolve().parent.parent
BUDGET = 200
WORKER_CONCURRENCY = 2  # Celery processes per worker host: the most a killed host had in flight
FAST = {"politeness_delay": 0.02, "concurrency": 4, "robots_retry_after": 0.5,
        "connect_timeout": 2.0, "read_timeout": 2.0, "fetch_deadline": 4.0,
        "lease_seconds": 8.0, "cf": 30}
MAX_OUTSTANDING = 2 * FAST["concurrency"]  # the dispatcher's bound on leased URLs
_FETCH_DONE = re.compile(r"jlse\.fetch\[[^\]]+\] succeeded in [0-9.e-]+s: '([a-z_ ]+)'")


def jlse(*args: str) -> list[str]:
    return [sys.executable, "-m", "jlse.cli", *args]


def base_env(redis_url: str) -> dict[str, str]:
    env = dict(os.environ, REDIS_URL=redis_url, PYTHONUNBUFFERED="1")
    for name in ("CELERY_BROKER_URL", "JLSE_KEY_PREFIX", "DATABASE_URL"):
        env.pop(name, None)  # broker = db 1 of REDIS_URL, keys under the default "jlse:"
    return env


class MultiHostCluster:
    """Two worker hosts plus a dispatcher and a learner in the root namespace."""

    def __init__(self, lab: NetnsLab, logs: Path, local_redis_url: str, hosts_redis_url: str,
                 local_env: dict[str, str] | None = None,
                 hosts_env: dict[str, str] | None = None) -> None:
        self.lab = lab
        self.logs = logs
        self.local_redis_url = local_redis_url  # as the root namespace sees it
        self.redis_url = hosts_redis_url  # as the hosts see it
        self.local_env = local_env or {}  # e.g. CELERY_BROKER_URL, where it is not REDIS_URL's
        self.hosts_env = hosts_env or {}
        self.hosts = {name: lab.add_host(name) for name in ("w1", "w2")}
        # the page store both worker hosts write (one folder: the namespaces share the disk)
        self.pages_store = logs / "pages-store"
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
        cmd = jlse("worker", "--concurrency", str(WORKER_CONCURRENCY), "--hostname",
                    f"{name}@mh")
        env = {**base_env(self.redis_url), "JLSE_WORKER_NAME": name, **self.own_env,
               "JLSE_PAGES_STORE": str(self.pages_store), **self.hosts_env}
        with open(self.log_path(name), "ab") as log:
            self.procs[name] = host.popen(cmd, env=env, cwd=REPO, stdout=log,
                                          stderr=subprocess.STDOUT)
        self._wait_for(name, f"{name}@mh ready.")

    def start_local(self, name: str, *args: str, ready: str | None = None) -> None:
        with open(self.log_path(name), "ab") as log:
            self.procs[name] = subprocess.Popen(
                jlse(*args), cwd=REPO, env={**self.root_env(), **self.own_env},
                stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True)
        if ready:
            self._wait_for(name, ready)

    def root_env(self) -> dict[str, str]:
        """The environment of a process in the root namespace."""
        return {**base_env(self.local_redis_url), **self.local_env}

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

    def stop(self, name: str, timeout: float = 60.0) -> None:
        """SIGTERM to the role's supervisor: Celery's warm shutdown (pool processes end their
        tasks and close their crawls); SIGKILL if it is not over within ``timeout``."""
        proc = self.procs[name]
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
        self.kill(name)

    def stop_all(self) -> None:
        for name in list(self.procs):
            self.kill(name)

    def fetch_words(self, name: str, since: int = 0) -> list[str]:
        """What each fetch task finished by worker ``name`` since log offset ``since`` did."""
        return _FETCH_DONE.findall(self.log_text(name, since))


def pages_fetched(words: list[str]) -> int:
    """Tasks that did work (a fetch or a rejection), not stale or already-done redeliveries."""
    return sum(word not in ("stale", "already done") for word in words)



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
        self.proc = subprocess.Popen(jlse(*args), cwd=REPO, env=cluster.root_env(),
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


def check_nothing_lost(summary: dict, crawl: Crawl, client: redis.Redis, budget: int,
                       overshoot: int = 0) -> None:
    """The budget reached (``overshoot``: pages beyond it allowed, where several dispatchers
    each pop within the figures of their last read) and every URL fetched or queued."""
    assert summary["reason"] == "page budget reached", summary
    assert budget <= summary["fetched"] <= budget + overshoot, summary
    assert lost_urls(crawl.store_url, client, "jlse:", crawl.crawl_id) == []
    with open_store(crawl.store_url) as store:
        stats = store.stats()
    assert stats.fetched >= budget


def worker_offsets(cluster: MultiHostCluster) -> dict[str, int]:
    return {name: cluster.log_size(name) for name in cluster.hosts}


def check_both_hosts_worked(cluster: MultiHostCluster, offsets: dict[str, int]) -> None:
    """Each worker host fetched pages after ``offsets`` (e.g. it reconnected after a restart)."""
    shares = {name: pages_fetched(cluster.fetch_words(name, since))
              for name, since in offsets.items()}
    assert all(share >= 5 for share in shares.values()), (shares, cluster.tail("w1"),
                                                          cluster.tail("w2"))


def wait_until(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


def private_schema_url(lab: NetnsLab, admin_url: str) -> str:
    """A fresh schema in the private PostgreSQL at ``admin_url``, as the hosts reach it
    (through the lab's forwarder ``lab.pg_fwd``)."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    conn = psycopg2.connect(admin_url)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f'CREATE SCHEMA "{schema}"')
    conn.close()
    return (f"postgresql://postgres@{lab.gateway}:{lab.pg_fwd.port}/postgres"
            f"?options=-csearch_path%3D{schema}")
