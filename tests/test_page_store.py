"""The distributed crawl's page store (workers/page_store.py): worker processes append WARC
records to their own files in one folder, the crawl database (real PostgreSQL) says where each
page's record is, and ``jlse export --content`` reads every page back from there."""

from __future__ import annotations

import io
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from page_store_checks import warcio_check

from jlse.export import PageContents, export_pages
from jlse.scheduler.crawl_registry import CrawlRegistry
from jlse.scheduler.store import open_store
from jlse.settings import Settings
from jlse.workers import page_store
from jlse.workers.warc import OPEN_SUFFIX, SUFFIX

REDIS_URL = os.environ.get("JLSE_TEST_REDIS", "redis://127.0.0.1:6379/0")
SEED = "http://mobile-insight.test/"


def _worker(root: str, crawl_id: str, pages: int, env: dict[str, str], torn=None) -> None:
    """A fetch worker process (the Celery task's code without Celery): pops leased URLs and
    runs ``CrawlContext.process`` on them until ``pages`` are written. ``torn``: then it begins
    one more record, writes half of it, sets the event ``torn`` and waits for its SIGKILL."""
    from jlse.workers.distributed import CrawlContext

    os.environ.update(env)
    registry = CrawlRegistry(redis.Redis.from_url(REDIS_URL), root)
    context = CrawlContext(crawl_id, registry)
    written, deadline = 0, time.monotonic() + 60
    while written < pages and time.monotonic() < deadline:
        task = context.frontier.pop()
        if task is None:
            time.sleep(0.05)
            continue
        start = context.start(task)
        written += context.process(task, start) == "ok"
    if torn is not None:  # the next record is cut in the middle of its write
        writer = context.engine.pipeline.fetcher.archive
        writer._file = _HalfWrite(writer._current_file(), torn)
        while True:
            task = context.frontier.pop()
            if task is not None:
                context.process(task, context.start(task))
            time.sleep(0.05)
    context.close()  # what the worker's shutdown does: its files are sealed


class _HalfWrite:
    """A WARC file whose next write stops halfway: the process is killed there."""

    def __init__(self, handle, torn) -> None:
        self.handle, self.torn = handle, torn

    def write(self, data: bytes) -> None:
        self.handle.write(data[: len(data) // 2])
        self.handle.flush()
        self.torn.set()
        time.sleep(60)

    def __getattr__(self, name: str):
        return getattr(self.handle, name)


@pytest.fixture()
def crawl(registry, pg_store_url, sandbox, tmp_path, monkeypatch):
    """A registered bfs crawl of the sandbox web whose workers write to tmp_path/store."""
    store = tmp_path / "store"
    env = {"DATABASE_URL": pg_store_url, "JLSE_PROXY": sandbox.proxy_url,
           "JLSE_ALLOW_PRIVATE": "true", page_store.ENV: str(store),
           "JLSE_WORKER_NAME": "host-a"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings = Settings(strategy="bfs", politeness_delay=0.0, proxy=sandbox.proxy_url,
                        allow_private=True, warc_max_bytes=40_000, max_pages=80)
    config = {"crawl_id": "ps1", "settings": settings.to_dict(), "status": "running",
              "store_url": pg_store_url, "max_pages": 80}
    registry.register("ps1", config, None, {})
    from jlse.workers.distributed import CrawlContext

    seeder = CrawlContext("ps1", registry)
    seeder.engine.add_seeds([SEED, "http://shop-phones.test/"], 1.0)
    seeder.close()
    return {"registry": registry, "store": store, "env": env, "db": pg_store_url}


SPAWN = multiprocessing.get_context("spawn")


def run_workers(crawl, pages: list[int], torn=None) -> list:
    procs = []
    for number, count in enumerate(pages):
        env = dict(crawl["env"], JLSE_WORKER_NAME=f"host-{'ab'[number]}")
        proc = SPAWN.Process(target=_worker, args=(crawl["registry"].root, "ps1", count, env,
                                                   torn if number == 0 else None))
        proc.start()
        procs.append(proc)
    return procs


def exported(db_url: str, store: Path) -> tuple[list[dict], PageContents]:
    contents = PageContents(None, store)
    out = io.StringIO()
    with open_store(db_url, read_only=True) as db:
        export_pages(db, out, min_relevance=None, fields=("url", "outcome", "text"),
                     contents=contents)
    return [json.loads(line) for line in out.getvalue().splitlines()], contents


def test_two_workers_write_one_store_and_export_reads_every_page(crawl, sandbox_web):
    procs = run_workers(crawl, [30, 30])
    for proc in procs:
        proc.join(90)
        assert proc.exitcode == 0
    store = crawl["store"]
    files = sorted(store.glob(f"*{SUFFIX}"))
    assert not list(store.glob(f"*{OPEN_SUFFIX}"))  # closed workers sealed their files
    hosts = {path.name.split("-")[-3] for path in files}
    assert len(hosts) == 2 and len(files) >= 4  # two processes, each rotated (40 kB files)
    rows, contents = exported(crawl["db"], store)
    ok = [row for row in rows if row["outcome"] == "ok"]
    assert len(ok) >= 60
    assert contents.missing == 0
    assert all(row["text"] for row in ok)
    with open_store(crawl["db"], read_only=True) as db:
        located = [row for row in db.export_rows(min_relevance=None) if row["outcome"] == "ok"]
    assert all(row["warc"] and (store / row["warc"][0]).is_file() for row in located)
    for row in located[:10]:  # the record named is the page's own response, byte for byte
        body, content_type = page_store.read_body(store, row["warc"])
        assert body == sandbox_web.page_bytes(row["url"]) and content_type.startswith("text/")
    checked = warcio_check(files)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_a_killed_worker_leaves_a_torn_tail_that_no_row_names(crawl):
    torn = SPAWN.Event()
    [proc] = run_workers(crawl, [12], torn=torn)
    store = crawl["store"]
    assert torn.wait(90), "the worker did not reach its torn write"
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(10)
    [open_file] = store.glob(f"*{OPEN_SUFFIX}")
    # every page of the killed worker is read back, from its .open file too
    rows, contents = exported(crawl["db"], store)
    ok = [row for row in rows if row["outcome"] == "ok"]
    assert len(ok) >= 12 and contents.missing == 0 and all(row["text"] for row in ok)
    # warcio check reads a torn gzip member as far as it goes and passes the file (even a
    # response missing only its gzip trailer gets "digest pass"): whole_length finds the tear
    assert warcio_check([open_file]).returncode == 0
    whole = page_store.whole_length(open_file)
    assert 0 < whole < open_file.stat().st_size
    with open_store(crawl["db"], read_only=True) as db:
        named = [row["warc"] for row in db.export_rows(min_relevance=None) if row["warc"]]
    in_open = [offset + length for name, offset, length in named
               if name + OPEN_SUFFIX == open_file.name]
    assert in_open and max(in_open) <= whole  # no row names the torn record
    sealed = page_store.seal(open_file)
    assert sealed.stat().st_size == whole == page_store.whole_length(sealed)
    assert not open_file.exists()
    checked = warcio_check(sorted(store.glob(f"*{SUFFIX}")))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    rows_after, contents = exported(crawl["db"], store)  # the sealed file, same offsets
    assert rows_after == rows and contents.missing == 0


def test_a_worker_refuses_a_store_it_cannot_write(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(page_store.PageStoreError, match="JLSE_PAGES_STORE"):
        page_store.check_writable(blocker / "store")
    assert page_store.store_dir({"JLSE_PAGES_STORE": "off"}) is None
    assert page_store.store_dir({}) == Path.cwd() / "pages-store"


def test_jlse_worker_does_not_start_without_a_writable_store(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    env = dict(os.environ, JLSE_PAGES_STORE=str(blocker / "store"))
    done = subprocess.run([sys.executable, "-m", "jlse.cli", "worker"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert f"the page store {blocker / 'store'} is not writable" in done.stderr
    assert "JLSE_PAGES_STORE" in done.stderr


def test_read_body_refuses_paths_outside_the_store(tmp_path):
    (tmp_path / "secret").write_bytes(b"x" * 100)
    assert page_store.read_body(tmp_path / "store", ("../secret", 0, 10)) is None
    assert page_store.read_body(tmp_path / "store", ("missing.warc.gz", 0, 10)) is None


def test_a_database_of_an_earlier_release_gets_the_location_columns(store_url):
    from jlse.records import FetchRecord, NewLink, Outcome

    with open_store(store_url) as db:
        [(url_id, _)] = db.add_links([NewLink("http://a.test/", None, 0)])
        db.record_fetch(FetchRecord(url_id, "http://a.test/", Outcome.OK, status_code=200))
        db._run(lambda cur: [cur.execute(f"ALTER TABLE fetches DROP COLUMN {name}")
                             for name in ("warc_file", "warc_offset", "warc_length")], "drop")
    with open_store(store_url, read_only=True) as db:  # read as it is
        [row] = db.export_rows(min_relevance=None)
        assert row["outcome"] == "ok" and row["warc"] is None
    with open_store(store_url) as db:  # a writer adds the columns
        db.record_fetch(FetchRecord(url_id, "http://a.test/", Outcome.OK, status_code=200,
                                    warc_file="x.warc.gz", warc_offset=7, warc_length=9))
        [row] = db.export_rows(min_relevance=None)
        assert row["warc"] == ("x.warc.gz", 7, 9)


def test_a_failed_write_leaves_its_file_and_the_next_record_starts_another(tmp_path):
    from jlse.records import Outcome
    from jlse.workers.fetcher import FetchResult
    from jlse.workers.warc import WarcWriter

    writer = WarcWriter(tmp_path, 10_000_000, sealing=True)
    page = FetchResult(url="http://a.test/", outcome=Outcome.OK, status_code=200,
                       body=b"<html><title>a</title>" + b"words " * 500,
                       headers={"Content-Type": "text/html"})
    first = writer.write(page)
    handle = writer._file
    writer._file = _FullDisk(handle)
    with pytest.raises(OSError):
        writer.write(page)
    second = writer.write(page)
    writer.close()
    assert second[0] != first[0]  # a new file
    [left] = tmp_path.glob(f"*{OPEN_SUFFIX}")  # the failed one, not renamed
    assert left.name == first[0] + OPEN_SUFFIX
    assert page_store.whole_length(left) < left.stat().st_size  # its torn tail
    for location in (first, second):
        assert page_store.read_body(tmp_path, location)[0] == page.body


class _FullDisk:
    """A file whose next write stops halfway with ENOSPC."""

    def __init__(self, handle) -> None:
        self.handle = handle

    def write(self, data: bytes) -> None:
        self.handle.write(data[: len(data) // 2])
        self.handle.flush()
        raise OSError(28, "No space left on device")

    def __getattr__(self, name: str):
        return getattr(self.handle, name)
