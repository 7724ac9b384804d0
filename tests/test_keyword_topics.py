"""Topics given by keywords alone: the keywords' VSM by default and why (``jlse train``), and
``jlse discover --topic-out`` writing a topic to crawl, with samples bootstrapped on request."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from jlse.discovery.bootstrap import PSEUDO_NEGATIVES, check_topic_out, write_topic
from jlse.discovery.output import DiscoveryReport, PageRow
from jlse.sandbox import SandboxServer
from jlse.topic import build_topic_model, load_topic, read_bootstrap, read_seeds

FAST = ["--set", "politeness_delay=0.02", "--set", "robots_retry_after=0.5",
        "--set", "search_rate=50"]


def jlse(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jlse.cli", *args], capture_output=True,
                          text=True, timeout=timeout)


def keyword_topic(folder: Path, keywords: str = '["digital camera", "mirrorless camera"]',
                  seeds: str = "http://a.test/\n") -> Path:
    folder.mkdir(parents=True)
    (folder / "topic.toml").write_text(f'name = "cams"\nkeywords = {keywords}\n', "utf-8")
    (folder / "seeds.txt").write_text(seeds, "utf-8")
    return folder


def page_rows(count: int) -> list[PageRow]:
    """Ranked pages, best first; the second half judged irrelevant by the topic model."""
    return [PageRow(url=f"http://s{i % 7}.test/p{i}", site=f"s{i % 7}.test", rank=i + 1,
                    relevance=0.9 if i < count // 2 else 0.1, operator="keyword", round=1,
                    title=f"page {i}") for i in range(count)]


def body(url: str) -> bytes:
    return f"<html><title>{url}</title><body>camera lens {url}</body></html>".encode()


def test_a_keyword_only_topic_is_judged_by_the_vsm_and_train_says_why(tmp_path) -> None:
    topic_dir = keyword_topic(tmp_path / "kw")
    topic = load_topic(topic_dir)
    model = build_topic_model(topic)
    assert model.sources_["relevance"] == "vsm"
    assert "keyword-only topic" in topic.model_origin
    assert f"jlse discover --topic {topic_dir} --search URL --topic-out NEW_DIR " \
        "--bootstrap-samples" in topic.model_origin  # the hint is a command that works
    done = jlse("train", "--topic", str(topic_dir), "--out", str(tmp_path / "model"))
    assert done.returncode == 0, done.stderr
    assert "relevance model vsm" in done.stdout
    assert "why: the position-weighted VSM of the 2 keywords" in done.stdout
    assert "no labelled sample pages" in done.stdout


def test_topic_out_keeps_the_topic_and_adds_the_discovered_seeds(tmp_path) -> None:
    source = keyword_topic(tmp_path / "kw")
    report = DiscoveryReport([], page_rows(20))
    summary = write_topic(tmp_path / "out", source, report, ["http://a.test/", "http://b.test/",
                                                             "http://a.test/"], body, 0.5, "run")
    assert summary == {}
    assert read_seeds(tmp_path / "out" / "seeds.txt") == ["http://a.test/", "http://b.test/"]
    assert (tmp_path / "out" / "topic.toml").read_bytes() == (source / "topic.toml").read_bytes()
    assert not (tmp_path / "out" / "samples").exists()  # no samples made up unless asked
    assert load_topic(tmp_path / "out").settings.keywords == ["digital camera", "mirrorless camera"]


def test_bootstrapped_samples_are_the_best_pages_and_pages_judged_irrelevant(tmp_path) -> None:
    source = keyword_topic(tmp_path / "kw")
    rows = page_rows(200)
    rows[0].relevance = 0.2  # ranked first but judged irrelevant: not a pseudo-positive
    summary = write_topic(tmp_path / "out", source, DiscoveryReport([], rows), ["http://a.test/"],
                          body, 0.5, "runs/x", bootstrap=True)
    positives, negatives = summary["relevant"]["urls"], summary["irrelevant"]["urls"]
    assert positives[0] == rows[1].url and rows[0].url not in positives
    assert len(positives) == 30 and all(row.relevance >= 0.5 for row in rows
                                        if row.url in positives)
    judged_out = {row.url for row in rows if row.relevance < 0.5}
    assert len(negatives) == PSEUDO_NEGATIVES and set(negatives) <= judged_out
    assert read_bootstrap(tmp_path / "out") == summary
    topic = load_topic(tmp_path / "out")
    assert len(topic.samples.relevant) == 30 and len(topic.samples.irrelevant) == PSEUDO_NEGATIVES
    assert build_topic_model(topic).sources_["relevance"] == "page_nb"
    assert "bootstrapped by jlse discover" in topic.model_origin


def test_a_bootstrap_short_of_a_class_says_what_is_missing_not_the_same_command(
        tmp_path) -> None:
    """Every discovered page judged relevant: no irrelevant samples could be made up. The
    topic is judged by the VSM, and `jlse train` says what to add instead of sending the user
    back to --bootstrap-samples (which made this topic: following it would loop)."""
    source = keyword_topic(tmp_path / "kw")
    rows = [row for row in page_rows(40) if row.relevance >= 0.5]
    write_topic(tmp_path / "out", source, DiscoveryReport([], rows), ["http://a.test/"], body,
                0.5, "runs/x", bootstrap=True)
    done = jlse("train", "--topic", str(tmp_path / "out"), "--out", str(tmp_path / "model"))
    assert done.returncode == 0, done.stderr
    assert "relevance model vsm" in done.stdout and "--bootstrap-samples" not in done.stdout
    assert "bootstrapped by jlse discover have 20 relevant and 0 irrelevant pages" in done.stdout
    assert f"Add irrelevant pages to {tmp_path / 'out' / 'samples' / 'irrelevant'}/" in done.stdout


def test_bootstrap_keeps_the_topics_own_samples(tmp_path) -> None:
    source = keyword_topic(tmp_path / "kw")
    own = source / "samples" / "relevant"
    own.mkdir(parents=True)
    (own / "mine.html").write_bytes(body("mine"))
    summary = write_topic(tmp_path / "out", source, DiscoveryReport([], page_rows(40)), [], body,
                          0.5, "run", bootstrap=True)
    assert summary["relevant"] == {"from": "the source topic's samples", "pages": 1}
    assert sorted(p.name for p in (tmp_path / "out/samples/relevant").iterdir()) == ["mine.html"]
    assert summary["irrelevant"]["pages"] == 20


def test_topic_out_refuses_a_directory_with_files_or_the_source(tmp_path) -> None:
    source = keyword_topic(tmp_path / "kw")
    with pytest.raises(ValueError, match="not an empty directory"):
        check_topic_out(source, tmp_path / "elsewhere")
    (tmp_path / "empty").mkdir()
    check_topic_out(tmp_path / "empty", source)
    with pytest.raises(ValueError, match="not the source topic"):
        check_topic_out(tmp_path / "new", tmp_path / "sub" / ".." / "new")


@pytest.mark.parametrize("args, message", [
    (["--bootstrap-samples"], "--bootstrap-samples writes the samples into --topic-out"),
    (["--topic-out", "{topic}"], "not an empty directory"),
])
def test_discover_refuses_bad_topic_out_before_fetching(tmp_path, args, message) -> None:
    topic_dir = keyword_topic(tmp_path / "kw")
    args = [arg.replace("{topic}", str(topic_dir)) for arg in args]
    done = jlse("discover", "--topic", str(topic_dir), "--search", "http://127.0.0.1:9",
                "--workdir", str(tmp_path / "wd"), "--no-progress", *args)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "wd").exists()


@pytest.fixture(scope="module")
def discovery_sandbox(discovery_web):
    server = SandboxServer(discovery_web, port=0)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_discover_then_crawl_from_keywords(discovery_sandbox, tmp_path) -> None:
    """The README's keyword-only path: discover --topic-out, then crawl the topic it wrote."""
    web = discovery_sandbox.web
    source = web.write_topic_dir("cameras", tmp_path / "kw", keywords_only=True)
    search = f"http://127.0.0.1:{discovery_sandbox.port}"
    proxy = ["--set", f"proxy={discovery_sandbox.proxy_url}"]
    out = tmp_path / "found"
    done = jlse("discover", "--topic", str(source), "--search", search, "--max-pages", "60",
                "--workdir", str(tmp_path / "wd"), "--topic-out", str(out), "--bootstrap-samples",
                "--no-progress", *proxy, *FAST)
    assert done.returncode == 0, done.stderr
    assert f"jlse crawl --topic {out}" in done.stdout
    seeds = read_seeds(out / "seeds.txt")
    assert seeds[: len(read_seeds(source / "seeds.txt"))] == read_seeds(source / "seeds.txt")
    assert len(seeds) > len(read_seeds(source / "seeds.txt"))
    bootstrap = json.loads((out / "samples" / "bootstrap.json").read_text("utf-8"))
    assert bootstrap["relevant"]["pages"] > 0
    crawl = jlse("crawl", "--topic", str(out), "--max-pages", "30", "--workdir",
                 str(tmp_path / "crawl"), "--no-progress", "--json", *proxy, *FAST)
    assert crawl.returncode == 0, crawl.stderr
    assert json.loads(crawl.stdout)["fetched"] == 30
