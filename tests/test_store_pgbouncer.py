"""The crawl database through pgbouncer in transaction pooling mode (scripts/pgbouncer.sh).

The whole contract suite of test_store.py runs again with every PostgreSQL store opened
through a pgbouncer: nothing the store does may rely on session state across transactions.
Then 8 worker processes, 4 per "machine" (each machine's own pgbouncer with 2 server
connections), write pages together while PostgreSQL's connections are counted.
"""

from __future__ import annotations

import multiprocessing
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg2
import pytest
from private_services import free_port
from test_store import *  # noqa: F403  (the contract tests, run here through pgbouncer)
from test_store import fetched, new

from jlse.records import LinkStatus
from jlse.scheduler.crawl_registry import worker_store_url
from jlse.scheduler.store import StoreError, open_store

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "pgbouncer.sh"
POOL_SIZE = 2  # server connections per machine
MACHINES = 2
PROCESSES_PER_MACHINE = 4
PAGES_PER_PROCESS = 25

# Contract tests about SQLite alone, or about a direct connection (they kill its backend).
for _name in ("test_sqlite_paths_relative_absolute_and_bad",
              "test_unknown_scheme_names_it_and_the_supported_ones",
              "test_unreachable_postgresql_is_a_quick_store_error_without_password",
              "test_postgresql_reconnects_once_after_a_dropped_connection"):
    globals().pop(_name, None)


class Bouncer:
    def __init__(self, workdir: Path) -> None:
        self.dir = workdir
        self.port = free_port()
        subprocess.run([str(SCRIPT), "start", str(workdir), str(self.port), str(POOL_SIZE)],
                       check=True, capture_output=True, text=True, timeout=60)

    def stop(self) -> None:
        subprocess.run([str(SCRIPT), "stop", str(self.dir)], check=False, capture_output=True,
                       timeout=30)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def bouncers() -> Iterator[list[Bouncer]]:
    started: list[Bouncer] = []
    try:
        for machine in range(MACHINES):
            # Under /tmp itself: run as root, the script starts pgbouncer as nobody, who must
            # reach the folder (pytest's own tmp_path is under a folder only root enters).
            workdir = Path(tempfile.mkdtemp(prefix=f"jlse-test-pgbouncer{machine}-"))
            try:
                started.append(Bouncer(workdir))
            except subprocess.CalledProcessError as exc:
                pytest.fail(f"scripts/pgbouncer.sh could not start pgbouncer: {exc.stderr} "
                            "(make dev installs it)", pytrace=False)
        yield started
    finally:
        for bouncer in started:
            bouncer.stop()


@pytest.fixture()
def pooled_database(pg_database_url, bouncers) -> Iterator[tuple[str, list[str]]]:
    """A fresh database: its direct URL, and its URL through each machine's pgbouncer (a
    schema in the URL would need a startup parameter pgbouncer does not pass on)."""
    name = f"jlse_pgb_{uuid.uuid4().hex[:10]}"
    admin = psycopg2.connect(pg_database_url)
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{name}"')
    direct = f"{pg_database_url.rsplit('/', 1)[0]}/{name}"
    pooled = [f"postgresql://postgres@127.0.0.1:{b.port}/{name}" for b in bouncers]
    try:
        yield direct, pooled
    finally:
        for bouncer in bouncers:  # its server connections to the database go with it
            bouncer_admin(bouncer, f"KILL {name}")
        with admin.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


def bouncer_admin(bouncer: Bouncer, command: str) -> None:
    try:
        conn = psycopg2.connect(f"postgresql://postgres@127.0.0.1:{bouncer.port}/pgbouncer")
    except psycopg2.Error:
        return
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(command)
    except psycopg2.Error:
        pass
    finally:
        conn.close()


@pytest.fixture()
def store_url(pooled_database) -> str:
    """Overrides conftest's: the contract tests above get a store behind pgbouncer."""
    return pooled_database[1][0]


def server_connections(direct_url: str) -> int:
    conn = psycopg2.connect(direct_url)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database()"
                        " AND backend_type = 'client backend' AND pid <> pg_backend_pid()")
            return int(cur.fetchone()[0])
    finally:
        conn.close()


def _worker(url: str, number: int, ready, go) -> None:
    """One worker process's writes and reads, as a crawl makes them."""
    with open_store(url) as store:
        ready.wait()
        go.wait()
        [(parent, _)] = store.add_links([new(f"http://w{number}.test/")])
        for page in range(PAGES_PER_PROCESS):
            with store.autocommit():
                assert store.get_link(parent).status is LinkStatus.QUEUED
                assert store.record_fetch_once(fetched(parent))
            answers = store.add_links(
                [new(f"http://w{number}.test/{page}/{n}", parent) for n in range(20)]
                + [new(f"http://shared.test/{n}") for n in range(10)])
            parent = answers[0][0]
        assert len(store.queued_links_of_host(f"w{number}.test", 5)) == 5
        assert len(store.learning_graph(dead_ends=True)) >= PAGES_PER_PROCESS
        assert sum(1 for _ in store.iter_links(LinkStatus.FETCHED, batch=7)) >= PAGES_PER_PROCESS


def test_eight_worker_processes_on_two_machines_hold_at_most_four_connections(pooled_database):
    direct, pooled = pooled_database
    open_store(direct).close()  # the tables, made once
    context = multiprocessing.get_context("spawn")
    processes = MACHINES * PROCESSES_PER_MACHINE
    ready, go = context.Barrier(processes + 1), context.Event()
    # As a worker opens it: with idle_in_transaction_session_timeout in "options".
    workers = [context.Process(target=_worker,
                               args=(worker_store_url(pooled[n % MACHINES]), n, ready, go))
               for n in range(processes)]
    for worker in workers:
        worker.start()
    held: list[int] = []
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.is_set():
            held.append(server_connections(direct))
            time.sleep(0.02)

    ready.wait(timeout=120)  # every process has opened its store
    sampler = threading.Thread(target=sample)
    sampler.start()
    go.set()
    for worker in workers:
        worker.join(300)
    sampling.set()
    sampler.join(10)
    assert [worker.exitcode for worker in workers] == [0] * processes
    print(f"server connections held by {processes} worker processes: max {max(held)} "
          f"over {len(held)} samples")
    assert max(held) <= MACHINES * POOL_SIZE, held
    assert max(held) >= 2  # the pools were used, not bypassed
    with open_store(direct) as store:
        stats = store.stats()
    assert stats.fetched == processes * PAGES_PER_PROCESS
    assert stats.links == processes * (1 + 20 * PAGES_PER_PROCESS) + 10


def test_a_worker_url_opens_and_its_idle_timeout_holds(pooled_database):
    _, pooled = pooled_database
    with open_store(worker_store_url(pooled[0])) as store:
        setting = store._run(lambda cur: store._fetchone(
            cur, "SELECT current_setting('idle_in_transaction_session_timeout')"), "check")
    assert setting == ("5s",)  # set by pgbouncer's server connections, not the dropped options


def test_a_schema_in_the_url_is_refused_not_ignored(pooled_database):
    _, pooled = pooled_database
    with pytest.raises(StoreError, match="ignored the URL's search_path 'elsewhere'.*database"):
        open_store(f"{pooled[0]}?options=-csearch_path%3Delsewhere")
