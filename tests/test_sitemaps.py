"""Sitemaps as a source of URLs: robots.txt's Sitemap: lines, index files, gzip, plain text,
the byte caps, and the same rules as links (scope, robots.txt, dedup, politeness)."""

from __future__ import annotations

import gzip
from collections import Counter
from pathlib import Path

import pytest

from jlse.run import run_crawl
from jlse.sandbox import sitemaps as site
from jlse.workers.sitemaps import SitemapTooLarge, parse_sitemap

SITEMAP_FILES = ("/sitemap-index.xml", "/sitemap.xml", "/sitemap-more.xml.gz",
                 "/sitemap-text.txt", "/sitemap-bomb.xml.gz")
FAST = {"strategy": "bfs", "politeness_delay": 0.0, "max_crawl_delay": 0.0, "concurrency": 4,
        "connect_timeout": 2.0, "read_timeout": 2.0, "fetch_deadline": 6.0, "page_processes": 0,
        "max_pages": 40}


@pytest.fixture()
def topic(tmp_path) -> Path:
    folder = tmp_path / "topic"
    folder.mkdir()
    (folder / "seeds.txt").write_text(f"http://{site.HOST}/\n")
    (folder / "topic.toml").write_text('name = "sitemaps"\n')
    return folder


def crawl(topic: Path, sandbox, workdir: Path, **extra) -> list:
    sandbox.clear_log()
    overrides = dict(FAST, proxy=sandbox.proxy_url, allowed_domains=[site.HOST])
    overrides.update(extra)
    run_crawl(topic, overrides, workdir=workdir, progress=False)
    return sandbox.log


def test_sitemaps_are_off_by_default(topic, sandbox, tmp_path):
    paths = {entry.path for entry in crawl(topic, sandbox, tmp_path / "w")}
    assert paths == {"/robots.txt", "/", "/pages/1.html"}


def test_sitemap_urls_are_crawled_through_the_same_rules(topic, sandbox, tmp_path):
    log = crawl(topic, sandbox, tmp_path / "w", sitemaps=True)
    requests = Counter((entry.host, entry.path) for entry in log)
    assert set(requests.values()) == {1}  # every file and page once
    assert {host for host, _ in requests} == {site.HOST}  # elsewhere.test: out of scope
    paths = {path for _, path in requests}
    assert {f"/pages/{n}.html" for n in range(1, site.PAGES + 1)} <= paths  # index, gzip, text
    assert set(SITEMAP_FILES) <= paths
    assert "/private/secret.html" not in paths  # robots.txt
    assert not any(path.startswith("/bomb/") for path in paths)  # past the decompression cap
    assert len(paths) == 3 + site.PAGES + len(SITEMAP_FILES) - 1  # robots, home, pages, files


def test_sitemap_requests_keep_the_host_delay(topic, sandbox, tmp_path):
    log = crawl(topic, sandbox, tmp_path / "w", sitemaps=True, politeness_delay=0.2,
                max_pages=6)
    times = sorted(entry.t for entry in log)
    assert len(times) >= 8
    assert min(later - earlier for earlier, later in zip(times, times[1:], strict=False)) >= 0.19


def test_sitemap_limits(topic, sandbox, tmp_path):
    log = crawl(topic, sandbox, tmp_path / "w", sitemaps=True, sitemap_max_files=1,
                sitemap_max_urls=2)
    paths = {entry.path for entry in log}
    assert paths & set(SITEMAP_FILES) == {"/sitemap-index.xml"}
    crawl(topic, sandbox, tmp_path / "w2", sitemaps=True, sitemap_max_urls=2)
    listed = {entry.path for entry in sandbox.log} - set(SITEMAP_FILES) - {"/robots.txt", "/"}
    assert len(listed - {"/pages/1.html"}) <= 2


def test_parse_sitemap_formats_and_hostile_input():
    urlset = parse_sitemap(site._urlset(["http://a.test/1", "http://a.test/2"]), 10_000)
    assert (urlset.is_index, urlset.locations) == (False, ["http://a.test/1", "http://a.test/2"])
    assert parse_sitemap(gzip.compress(b"http://a.test/x\n\nhttp://a.test/y\n"), 100).locations \
        == ["http://a.test/x", "http://a.test/y"]
    assert parse_sitemap(site._index().body, 10_000).is_index
    with pytest.raises(SitemapTooLarge):
        parse_sitemap(gzip.compress(b" " * 5000), 4000)
    xxe = (b'<?xml version="1.0"?><!DOCTYPE u [<!ENTITY x SYSTEM "file:///etc/hostname">]>'
           b"<urlset><url><loc>http://a.test/&x;</loc></url></urlset>")
    assert all("\n" not in loc and len(loc) < 30 for loc in parse_sitemap(xxe, 10_000).locations)
