"""WARC output: an embedded crawl and a distributed worker write request/response records of
every response (pages and robots.txt), read back with warcio, in size-rotated files."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

from jlse.records import CrawlTask, Outcome
from jlse.run import run_crawl
from jlse.settings import Settings
from jlse.workers.fetcher import FetchResult
from jlse.workers.warc import WarcWriter

FAST = {"strategy": "bfs", "politeness_delay": 0.0, "max_crawl_delay": 0.0, "concurrency": 4,
        "connect_timeout": 2.0, "read_timeout": 2.0, "fetch_deadline": 4.0}


@pytest.fixture(scope="module")
def phones_topic(sandbox_web, tmp_path_factory) -> Path:
    return sandbox_web.write_topic_dir("phones", tmp_path_factory.mktemp("topic") / "phones")


def read_records(directory: Path) -> list:
    """(file, type, uri, status, headers, body) of every record in ``directory``'s WARC files."""
    records = []
    for path in sorted(directory.glob("*.warc.gz")):
        with path.open("rb") as handle:
            for record in ArchiveIterator(handle):
                status = record.http_headers.get_statuscode() if record.http_headers else None
                records.append((path.name, record.rec_type,
                                record.rec_headers.get_header("WARC-Target-URI"), status,
                                record.http_headers, record.content_stream().read()))
    return records


def crawl(topic: Path, sandbox, workdir: Path, **extra):
    overrides = dict(FAST, proxy=sandbox.proxy_url, max_pages=60)
    overrides.update(extra)
    return run_crawl(topic, overrides, workdir=workdir, progress=False)


def test_embedded_crawl_writes_rotated_warc_files(phones_topic, sandbox, sandbox_web, tmp_path):
    sandbox.clear_log()
    summary = crawl(phones_topic, sandbox, tmp_path / "w", warc="also", warc_max_bytes=60_000,
                    page_processes=2)
    records = read_records(tmp_path / "w" / "warc")
    files = sorted({name for name, *_ in records})
    assert len(files) >= 3  # rotated by size, and each page process writes its own files
    assert len({name.split("-")[-2] for name in files}) == 2  # two page processes (pids)
    for path in (tmp_path / "w" / "warc").glob("*.warc.gz"):  # a full file was closed
        assert path.stat().st_size < 60_000 + 40_000
    types = Counter(kind for _, kind, *_ in records)
    assert types["warcinfo"] == len(files)
    # robots.txt included; a page still in flight when the budget was written (unfinished,
    # docs/architecture.md "The end of a crawl") may have been requested without its records being written
    assert types["request"] == types["response"]
    assert len(sandbox.log) - summary.unfinished <= types["request"] <= len(sandbox.log)
    responses = {uri: (status, headers, body)
                 for _, kind, uri, status, headers, body in records if kind == "response"}
    pages = [uri for uri, (status, _, _) in responses.items()
             if status == "200" and not uri.endswith("/robots.txt")]
    assert len(pages) >= 40
    for uri in pages:
        status, headers, body = responses[uri]
        assert body == sandbox_web.page_bytes(uri)
        assert headers.get_header("Content-Type").startswith("text/html")
        assert int(headers.get_header("Content-Length")) == len(body)
    robots = [uri for uri in responses if uri.endswith("/robots.txt")]
    assert responses[robots[0]][2].startswith(b"User-agent")
    requests = [headers for _, kind, _, _, headers, _ in records if kind == "request"]
    assert requests[0].protocol == "GET" and requests[0].get_header("User-Agent").startswith("jlse")
    assert requests[0].get_header("Host")
    assert (tmp_path / "w" / "pages").is_dir()  # "also": the page repository too


def test_warc_only_keeps_no_page_repository(phones_topic, sandbox, tmp_path):
    crawl(phones_topic, sandbox, tmp_path / "w", warc="only", max_pages=10, page_processes=0)
    assert not (tmp_path / "w" / "pages").exists()
    kinds = Counter(kind for _, kind, *_ in read_records(tmp_path / "w" / "warc"))
    assert kinds["response"] >= 10


def test_no_warc_by_default(phones_topic, sandbox, tmp_path):
    crawl(phones_topic, sandbox, tmp_path / "w", max_pages=5, page_processes=0)
    assert not (tmp_path / "w" / "warc").exists()


def test_unread_body_is_marked_truncated(tmp_path):
    writer = WarcWriter(tmp_path, 10_000_000)
    writer.write(FetchResult("http://a.test/big", Outcome.TOO_LARGE, status_code=200,
                             headers={"Content-Length": "9999999", "Content-Type": "text/html"},
                             reason="OK", http_version="HTTP/1.1"))
    writer.write(FetchResult("http://a.test/dead", Outcome.CONNECTION_ERROR))  # no response
    writer.close()
    records = [r for r in read_records(tmp_path) if r[1] == "response"]
    assert len(records) == 1
    with next(tmp_path.glob("*.warc.gz")).open("rb") as handle:
        response = [r for r in ArchiveIterator(handle) if r.rec_type == "response"][0]
        assert response.rec_headers.get_header("WARC-Truncated") == "length"


def test_distributed_worker_writes_its_own_warc_dir(registry, pg_store_url, sandbox, tmp_path,
                                                   monkeypatch):
    from jlse.workers.distributed import CrawlContext

    warc_dir = tmp_path / "worker-warc"
    monkeypatch.setenv("JLSE_WARC_DIR", str(warc_dir))
    # a worker's database, proxy and address guard come from its own environment
    monkeypatch.setenv("DATABASE_URL", pg_store_url)
    monkeypatch.setenv("JLSE_PROXY", sandbox.proxy_url)
    monkeypatch.setenv("JLSE_ALLOW_PRIVATE", "true")
    settings = Settings(strategy="bfs", politeness_delay=0.0, warc="only", proxy=sandbox.proxy_url,
                        allow_private=True, pages_store=False)  # no shared page store
    config = {"crawl_id": "warc1", "settings": settings.to_dict(), "status": "running",
              "store_url": pg_store_url, "max_pages": 10}
    registry.register("warc1", config, None, {})
    context = CrawlContext("warc1", registry)
    try:
        url = "http://mobile-insight.test/"
        context.engine.add_seeds([url], 1.0)
        task: CrawlTask = context.engine.frontier.pop()
        result = context.engine.process(task)
        assert result.fetch.outcome is Outcome.OK
    finally:
        context.close()
    uris = [(kind, uri) for _, kind, uri, *_ in read_records(warc_dir)]
    assert ("response", url) in uris and ("request", url) in uris
    assert ("response", "http://mobile-insight.test/robots.txt") in uris
