"""A retry is a request like any other: it waits the host's Crawl-delay in the frontier.

``retry-delay.test`` (jlse/sandbox/stalls.py) says ``Crawl-delay: 1`` and answers every page's
first request with 500. The sandbox server's own log is the judge.
"""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path

from crawl_checks import crawl_delay_breaches, page_requests

from jlse.run import run_crawl
from jlse.sandbox.stalls import RETRY_HOST
from jlse.scheduler.store import open_store

PAGES = 5


def retry_topic(directory: Path) -> Path:
    """A topic seeded on a fresh run of the retry site (its pages fail once more)."""
    directory.mkdir(parents=True, exist_ok=True)
    run = uuid.uuid4().hex[:12]
    (directory / "seeds.txt").write_text(f"http://{RETRY_HOST}/{run}/page/0.html\n")
    return directory


def check_retried_politely(log, web, outcomes: dict[str, int]) -> None:
    requests = Counter(entry.path.rsplit("/", 1)[-1] for entry in page_requests(log)
                       if entry.host == RETRY_HOST)
    assert crawl_delay_breaches(log, web) == []
    assert outcomes.get("ok", 0) == PAGES, outcomes
    assert all(requests[f"{n}.html"] == 2 for n in range(PAGES)), requests


def test_embedded_retries_wait_the_crawl_delay(sandbox, sandbox_web, tmp_path):
    sandbox.clear_log()
    summary = run_crawl(retry_topic(tmp_path / "topic"), {
        "strategy": "bfs", "proxy": sandbox.proxy_url, "max_pages": PAGES, "concurrency": 8,
        "politeness_delay": 0.0, "retry_backoff": 0.05, "max_retries": 2,
    }, workdir=tmp_path / "w", progress=False)
    with open_store(summary.store_url) as store:
        outcomes = store.stats().outcomes
    check_retried_politely(sandbox.log, sandbox_web, outcomes)
