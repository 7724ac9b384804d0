"""``jlse export``: the old default output, content columns (text, HTML, anchor and context of
the discovering link, final URL, outcome, bytes, ISO times), safe cells (no terminal escapes, no
spreadsheet formulas), read-only databases (SQLite and PostgreSQL), pipes and bad paths."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from jlse.export import DEFAULT_FIELDS, PageContents, export_pages
from jlse.records import FetchRecord, NewLink, Outcome
from jlse.run import run_crawl
from jlse.scheduler.store import StoreError, open_store
from jlse.workers.charset import decode_html

FAST = {"strategy": "bfs", "politeness_delay": 0.0, "max_crawl_delay": 0.0, "concurrency": 4,
        "connect_timeout": 2.0, "read_timeout": 2.0, "fetch_deadline": 4.0, "page_processes": 0}
HOSTILE_TITLE = "\x1b[2J\x1b]0;owned\x07Phone \x9b31m review"
FORMULA_TITLE = "=HYPERLINK(\"http://evil.test\",\"x\")"


def export(*args: str, input_dir: Path | None = None, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jlse.cli", "export", *args],
                          capture_output=True, timeout=120, **kwargs)


@pytest.fixture(scope="module")
def crawled(sandbox, sandbox_web, tmp_path_factory) -> Path:
    """A workdir of a 30-page crawl with the page repository and WARC files."""
    topic = sandbox_web.write_topic_dir("phones", tmp_path_factory.mktemp("topic") / "phones")
    workdir = tmp_path_factory.mktemp("export") / "w"
    run_crawl(topic, dict(FAST, proxy=sandbox.proxy_url, max_pages=30, warc="also"),
              workdir=workdir, progress=False)
    return workdir


def rows_of(done: subprocess.CompletedProcess) -> list[dict]:
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.decode("utf-8").splitlines()]


def test_default_output_keeps_its_columns(crawled):
    rows = rows_of(export("--workdir", str(crawled), "--all"))
    assert len(rows) == 30
    assert all(tuple(row) == DEFAULT_FIELDS for row in rows)
    assert all(isinstance(row["fetched_at"], float) for row in rows)
    done = export("--workdir", str(crawled), "--all", "--format", "csv")
    header = done.stdout.decode().splitlines()[0]
    assert header == ",".join(DEFAULT_FIELDS)


def test_content_columns(crawled, sandbox_web):
    rows = rows_of(export("--workdir", str(crawled), "--all", "--content", "--html",
                          "--times", "iso"))
    ok = [row for row in rows if row["outcome"] == "ok"]
    assert len(ok) >= 20
    for row in ok:
        assert row["final_url"] == row["url"] and row["n_bytes"] > 0
        assert datetime.fromisoformat(row["fetched_at"]).utcoffset().total_seconds() == 0
        assert row["discovered_at"] <= row["fetched_at"]
        served = sandbox_web.page_bytes(row["url"])
        assert row["html"] == decode_html(served, None)[0]
        assert row["title"] and row["title"] in row["text"]
    linked = [row for row in ok if row["parent_url"]]
    with open_store(f"sqlite:///{crawled / 'crawl.db'}") as store:
        for row in linked:
            stored = store.get_link(store.get_link_id(row["url"]))
            assert (row["anchor_text"], row["context"]) == (stored.anchor_text, stored.context)
    assert any(row["anchor_text"] for row in linked)
    redirects = [row for row in rows if row["outcome"] == "redirect"]
    assert all(row["final_url"] != row["url"] for row in redirects)


def test_text_comes_from_warc_files_without_a_page_repository(crawled, tmp_path):
    copy = tmp_path / "w"
    shutil.copytree(crawled, copy, ignore=shutil.ignore_patterns("pages"))
    rows = rows_of(export("--workdir", str(copy), "--all", "--fields", "url,outcome,text"))
    ok = [row for row in rows if row["outcome"] == "ok"]
    assert ok and all(len(row["text"]) > 100 for row in ok)
    shutil.rmtree(copy / "warc")
    done = export("--workdir", str(copy), "--all", "--fields", "url,text")
    assert all(row["text"] == "" for row in rows_of(done))
    assert b"have no stored copy" in done.stderr


def test_rows_name_their_warc_records(crawled):
    """The embedded crawl's rows say where each page's response record is: export reads it
    there, without scanning the WARC folder."""
    contents = PageContents(None, crawled / "warc")
    out = io.StringIO()
    with open_store(f"sqlite:///{crawled / 'crawl.db'}", read_only=True) as store:
        export_pages(store, out, min_relevance=None, fields=("url", "outcome", "text"),
                     contents=contents)
        located = [row for row in store.export_rows(min_relevance=None)
                   if row["outcome"] == "ok"]
    assert len(located) >= 20 and all(row["warc"] for row in located)
    assert contents.missing == 0 and contents._warc is None  # no folder scan was needed
    ok = [json.loads(line) for line in out.getvalue().splitlines()]
    assert all(row["text"] for row in ok if row["outcome"] == "ok")


@pytest.fixture()
def hostile_db(tmp_path) -> Path:
    path = tmp_path / "crawl.db"
    with open_store(f"sqlite:///{path}") as store:
        ids = store.add_links([NewLink("http://a.test/1", None, 0),
                               NewLink("http://a.test/2", None, 0, anchor_text="-1+1")])
        for (url_id, _), title in zip(ids, (HOSTILE_TITLE, FORMULA_TITLE), strict=True):
            store.record_fetch(FetchRecord(url_id, "", Outcome.OK, fetched_at=time.time(),
                                           status_code=200, relevance=0.9, title=title))
    return path


def test_control_characters_and_formulas_are_neutralised(hostile_db):
    done = export("--workdir", str(hostile_db.parent), "--format", "csv", "--content")
    assert done.returncode == 0, done.stderr
    out = done.stdout.decode("utf-8")
    assert "\x1b" not in out and "\x07" not in out and "\x9b" not in out
    rows = list(csv.DictReader(io.StringIO(out)))
    assert rows[0]["title"] == "\ufffd[2J\ufffd]0;owned\ufffdPhone \ufffd31m review"
    assert rows[1]["title"] == "'" + FORMULA_TITLE
    assert rows[1]["anchor_text"] == "'-1+1"
    jsonl = export("--workdir", str(hostile_db.parent)).stdout.decode("utf-8")
    assert "\x9b" not in jsonl and "\\u001b" not in jsonl
    assert json.loads(jsonl.splitlines()[0])["title"].startswith("\ufffd[2J")


def test_export_reads_a_read_only_database(hostile_db, tmp_path):
    source = tmp_path / "crawl"
    source.mkdir()
    shutil.copy(hostile_db, source / "crawl.db")
    with read_only_folder(source, tmp_path / "ro") as folder:
        with pytest.raises(OSError):
            (folder / "probe").write_text("x")  # the folder really is read-only
        before = sorted(os.listdir(folder))
        done = export("--workdir", str(folder))
        assert done.returncode == 0, done.stderr
        assert len(done.stdout.decode().splitlines()) == 2
        assert sorted(os.listdir(folder)) == before  # no -wal, -shm or journal made


@contextlib.contextmanager
def read_only_folder(source: Path, target: Path) -> Iterator[Path]:
    """``source`` seen read-only: a read-only bind mount for root (whom permissions do not
    stop), else the folder with its write bits removed."""
    if os.geteuid() != 0:
        source.chmod(0o555)
        try:
            yield source
        finally:
            source.chmod(stat.S_IRWXU)
        return
    target.mkdir()
    subprocess.run(["mount", "--bind", str(source), str(target)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(target)], check=True)
        yield target
    finally:
        subprocess.run(["umount", str(target)], check=True)


def test_read_only_postgresql_store(pg_store_url):
    with open_store(pg_store_url) as store:
        (url_id, _), = store.add_links([NewLink("http://a.test/", None, 0)])
        store.record_fetch(FetchRecord(url_id, "", Outcome.OK, fetched_at=time.time(),
                                       status_code=200, relevance=0.8, title=FORMULA_TITLE))
    with open_store(pg_store_url, read_only=True) as store:
        out = io.StringIO()
        assert export_pages(store, out, "csv", fields=("url", "title")) == 1
        assert "'=HYPERLINK" in out.getvalue()
        with pytest.raises(StoreError, match="read-only"):
            store.set_meta("written", "yes")


def test_read_only_open_creates_nothing(tmp_path):
    with pytest.raises(StoreError, match="no crawl database"):
        open_store(f"sqlite:///{tmp_path / 'missing.db'}", read_only=True)
    assert not (tmp_path / "missing.db").exists()
    with open_store(f"sqlite:///{tmp_path / 'crawl.db'}"):
        pass
    with open_store(f"sqlite:///{tmp_path / 'crawl.db'}", read_only=True) as store:
        with pytest.raises(StoreError, match="readonly"):
            store.set_meta("written", "yes")


def test_export_into_a_pipe_that_closes_early(crawled):
    proc = subprocess.Popen([sys.executable, "-m", "jlse.cli", "export", "--workdir",
                             str(crawled), "--all", "--html"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.readline()
    proc.stdout.close()
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert b"Traceback" not in stderr and b"BrokenPipe" not in stderr


def test_bad_export_arguments_are_one_line_errors(crawled, tmp_path):
    done = export("--workdir", str(crawled), "--fields", "url,secret")
    assert done.returncode == 2
    assert done.stderr.decode().splitlines()[0].startswith("error: unknown export field secret")
    done = export("--workdir", str(crawled), "--out", str(tmp_path / "no" / "such" / "x.csv"))
    assert done.returncode == 3
    lines = done.stderr.decode().splitlines()
    assert len(lines) == 1 and "no/such/x.csv" in lines[0] and "Traceback" not in lines[0]
    done = export("--workdir", str(tmp_path))
    assert done.returncode == 3 and "no crawl database" in done.stderr.decode()
