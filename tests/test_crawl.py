"""End-to-end embedded crawls of the sandbox web, checked against the server's request log."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from crawl_checks import (
    crawl_delay_breaches,
    duplicate_fetches,
    robots_violations,
    trap_fetches,
)

from jlse.records import LinkStatus
from jlse.run import CrawlSetupError, run_crawl
from jlse.scheduler.store import open_store

FAST = {"strategy": "bfs", "politeness_delay": 0.02, "concurrency": 8, "robots_retry_after": 0.5,
        "connect_timeout": 2.0, "read_timeout": 2.0, "fetch_deadline": 4.0}


@pytest.fixture(scope="module")
def phones_topic(sandbox_web, tmp_path_factory) -> Path:
    return sandbox_web.write_topic_dir("phones", tmp_path_factory.mktemp("topic") / "phones")


def crawl(topic: Path, sandbox, workdir: Path, max_pages: int, **extra):
    overrides = dict(FAST, proxy=sandbox.proxy_url, max_pages=max_pages)
    store_url = extra.pop("store_url", None)
    resume = extra.pop("resume", False)
    overrides.update(extra)
    return run_crawl(topic, overrides, workdir=workdir, store_url=store_url, resume=resume,
                     progress=False)


def test_bfs_crawl_reaches_budget_politely(phones_topic, sandbox, sandbox_web, tmp_path):
    sandbox.clear_log()
    summary = crawl(phones_topic, sandbox, tmp_path / "w", 400)
    log = sandbox.log
    assert summary.reason == "page budget reached"
    assert summary.fetched == 400
    assert duplicate_fetches(log) == []
    assert robots_violations(log, sandbox_web) == []
    assert crawl_delay_breaches(log, sandbox_web) == []
    assert trap_fetches(log, sandbox_web) <= 2 * 12
    with open_store(summary.store_url) as store:
        stats = store.stats()
        assert stats.fetched + stats.rejected >= 400
        assert sum(1 for _ in store.iter_links()) == stats.links
    assert (tmp_path / "w" / "summary.json").exists()
    assert (tmp_path / "w" / "crawl.log").stat().st_size > 0


def test_host_concurrency_with_politeness_off(phones_topic, sandbox, tmp_path):
    sandbox.clear_log()
    summary = crawl(phones_topic, sandbox, tmp_path / "w", 200, politeness_delay=0.0,
                    host_concurrency=4)
    assert summary.fetched == 200
    assert duplicate_fetches(sandbox.log) == []


def test_default_strategy_is_focused_when_the_topic_allows(phones_topic, tmp_path):
    from jlse.topic import load_topic

    assert load_topic(phones_topic).settings.strategy == "jlse"  # samples: the focused crawl
    assert load_topic(phones_topic, {"strategy": "ata"}).settings.strategy == "ata"
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "seeds.txt").write_text("http://a.test/\n")
    assert load_topic(bare).settings.strategy == "bfs"  # nothing to focus on


def test_crawl_judges_relevance(phones_topic, sandbox, sandbox_web, tmp_path):
    summary = crawl(phones_topic, sandbox, tmp_path / "w", 300)
    with open_store(summary.store_url) as store:
        rows = list(store.export_rows(min_relevance=None))
    judged = [(r["relevance"] >= 0.5, sandbox_web.is_relevant(r["url"], "phones"))
              for r in rows if r["relevance"] is not None and sandbox_web.truth(r["url"])]
    assert len(judged) > 100
    accuracy = sum(a == b for a, b in judged) / len(judged)
    assert accuracy > 0.8, accuracy


def test_existing_crawl_needs_resume(phones_topic, sandbox, tmp_path):
    crawl(phones_topic, sandbox, tmp_path / "w", 20)
    with pytest.raises(CrawlSetupError, match="--resume"):
        crawl(phones_topic, sandbox, tmp_path / "w", 40)


def test_resume_continues_without_refetching(phones_topic, sandbox, tmp_path):
    sandbox.clear_log()
    first = crawl(phones_topic, sandbox, tmp_path / "w", 60)
    second = crawl(phones_topic, sandbox, tmp_path / "w", 150, resume=True)
    assert first.fetched == 60 and second.fetched == 150
    # a page left in flight at the end of the first crawl (a straggler) is fetched again
    assert len(duplicate_fetches(sandbox.log)) <= first.unfinished


def test_a_hanging_page_does_not_hold_the_crawl(phones_topic, sandbox, tmp_path):
    topic = tmp_path / "topic"
    shutil.copytree(phones_topic, topic)
    seeds = (topic / "seeds.txt").read_text()
    (topic / "seeds.txt").write_text("http://faults.test/hang\n" + seeds)
    started = time.monotonic()
    summary = crawl(topic, sandbox, tmp_path / "w", 40, read_timeout=30.0, fetch_deadline=60.0,
                    straggler_seconds=1.0)
    assert time.monotonic() - started < 20  # the hanging page answers after 60 s
    assert summary.reason == "page budget reached" and summary.fetched == 40
    assert summary.unfinished >= 1
    with open_store(summary.store_url) as store:
        hung = store.get_link(store.get_link_id("http://faults.test/hang"))
        assert hung.status is LinkStatus.QUEUED  # --resume fetches it


def test_postgresql_store(phones_topic, sandbox, tmp_path, pg_store_url):
    sandbox.clear_log()
    summary = crawl(phones_topic, sandbox, tmp_path / "w", 120, store_url=pg_store_url)
    assert summary.fetched == 120
    assert duplicate_fetches(sandbox.log) == []
    with open_store(pg_store_url) as store:
        assert store.stats().fetched >= 120


def _wait_for_requests(sandbox, proc, at_least: int, timeout: float = 90.0) -> None:
    """Wait until the sandbox served ``at_least`` requests (a loaded machine starts slowly)."""
    deadline = time.monotonic() + timeout
    while len(sandbox.log) < at_least:
        assert proc.poll() is None, "the crawl ended before it could be interrupted"
        assert time.monotonic() < deadline, "the crawl did not start fetching"
        time.sleep(0.1)


def test_ctrl_c_stops_cleanly_and_resume_finishes(phones_topic, sandbox, tmp_path):
    """SIGINT mid-crawl: exit 130, nothing lost; --resume reaches the budget, no refetch."""
    sandbox.clear_log()
    workdir = tmp_path / "w"
    cmd = [sys.executable, "-m", "jlse.cli", "crawl", "--topic", str(phones_topic),
           "--workdir", str(workdir), "--max-pages", "120", "--no-progress", "--json",
           "--set", f"proxy={sandbox.proxy_url}", "--set", "politeness_delay=0.5",
           "--set", "concurrency=2", "--strategy", "bfs"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    _wait_for_requests(sandbox, proc, at_least=10)  # the crawl loop runs (not start-up)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    first = json.loads(out)
    assert first["reason"] == "interrupted" and 0 < first["fetched"] < 120
    done = subprocess.run(cmd[:-6] + ["--resume", "--set", f"proxy={sandbox.proxy_url}",
                                      "--set", "politeness_delay=0.02"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["fetched"] == 120
    assert duplicate_fetches(sandbox.log) == []


def test_fault_host_every_fault_survived(sandbox, tmp_path):
    """A crawl that meets every fault ends each one in an outcome and goes on."""
    topic = tmp_path / "faults"
    topic.mkdir()
    (topic / "seeds.txt").write_text(
        "http://faults.test/links.html\nhttp://robots-500.test/page/1.html\n"
        "http://robots-404.test/page/1.html\nhttp://robots-hang.test/page/1.html\n"
        "http://robots-delay.test/page/1.html\nhttp://no-such-host.test/\n"
    )
    summary = crawl(topic, sandbox, tmp_path / "w", 200, read_timeout=1.0, fetch_deadline=3.0,
                    robots_unavailable_retries=1, max_retries=1, retry_backoff=0.05)
    assert summary.reason in ("frontier empty", "page budget reached")
    with open_store(summary.store_url) as store:
        outcomes = store.stats().outcomes
        rows = {r["url"]: r for r in store.export_rows(min_relevance=None)}
    for expected in ("ok", "redirect", "http_error", "too_large", "not_html", "timeout",
                     "robots_disallowed", "robots_unavailable"):
        assert outcomes.get(expected, 0) > 0, (expected, outcomes)
    assert "http://faults.test/ok.html" in rows
    assert "http://faults.test/private/secret.html" not in rows


def test_bad_topic_is_a_clear_cli_error(tmp_path):
    (tmp_path / "t").mkdir()
    done = subprocess.run([sys.executable, "-m", "jlse.cli", "crawl", "--topic",
                           str(tmp_path / "t"), "--max-pages", "5"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "seeds.txt" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.slow
def test_unseen_web_through_env_proxy(tmp_path, monkeypatch):
    """Acceptance: a web built from another seed, reached only via HTTP_PROXY, 1,000 pages."""
    from jlse.sandbox import SandboxServer, build_web

    web = build_web(seed=2026)
    topic = web.write_topic_dir("cameras", tmp_path / "cameras")
    with SandboxServer(web) as server:
        monkeypatch.setenv("HTTP_PROXY", server.proxy_url)
        monkeypatch.setenv("http_proxy", server.proxy_url)
        overrides = dict(FAST, max_pages=1000, concurrency=12)
        summary = run_crawl(topic, overrides, workdir=tmp_path / "w", progress=False)
        log = server.log
    assert summary.reason == "page budget reached" and summary.fetched == 1000
    assert duplicate_fetches(log) == []
    assert robots_violations(log, web) == []
    assert crawl_delay_breaches(log, web) == []
    assert trap_fetches(log, web) <= 3 * 13  # three traps, each cut after max_pattern_run


def test_sigkill_loses_nothing(phones_topic, sandbox, tmp_path):
    """A crawl killed mid-page: on --resume only the pages in flight are fetched again."""
    sandbox.clear_log()
    workdir = tmp_path / "w"
    base = [sys.executable, "-m", "jlse.cli", "crawl", "--topic", str(phones_topic),
            "--workdir", str(workdir), "--max-pages", "100", "--no-progress", "--json",
            "--set", f"proxy={sandbox.proxy_url}", "--set", "concurrency=3", "--strategy", "bfs"]
    proc = subprocess.Popen(base + ["--set", "politeness_delay=0.5"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    _wait_for_requests(sandbox, proc, at_least=10)
    proc.kill()
    proc.wait(timeout=10)
    done = subprocess.run(base + ["--resume", "--set", "politeness_delay=0.02"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["fetched"] == 100
    assert len(duplicate_fetches(sandbox.log)) <= 3  # at most the pages in flight at the kill
    with open_store(f"sqlite:///{workdir / 'crawl.db'}") as store:
        stats = store.stats()
        assert stats.links == stats.queued + stats.fetched + stats.rejected


def test_export_cli(phones_topic, sandbox, tmp_path):
    crawl(phones_topic, sandbox, tmp_path / "w", 80)
    for fmt in ("jsonl", "csv"):
        out = tmp_path / f"pages.{fmt}"
        done = subprocess.run([sys.executable, "-m", "jlse.cli", "export", "--workdir",
                               str(tmp_path / "w"), "--format", fmt, "--out", str(out), "--all"],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        lines = out.read_text(encoding="utf-8").splitlines()
        assert len(lines) == 80 + (fmt == "csv")
    first = json.loads((tmp_path / "pages.jsonl").read_text().splitlines()[0])
    assert {"url", "title", "relevance", "is_target"} <= set(first)

