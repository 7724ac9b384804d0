"""``jlse demo`` / ``make demo``: a real crawl of the built-in sandbox web, nothing to set up.

The sandbox web runs in this process on loopback and is reached as an HTTP proxy, exactly as a
crawl of a real web through a proxy would be.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from jlse.models.strategy_catalog import available_strategies
from jlse.progress import CrawlSummary
from jlse.run import run_crawl
from jlse.sandbox import SandboxServer, build_web
from jlse.scheduler.store import open_store
from jlse.settings import SettingsError

DEMO_SETTINGS = {
    "politeness_delay": 0.25,  # the sandbox is local; a real crawl keeps the 1 s default
    "robots_retry_after": 2.0,
    "connect_timeout": 3.0,
    "read_timeout": 3.0,
    "fetch_deadline": 6.0,
    "max_pages": 500,
    "strategy": "jlse",
}


def run_demo(topic: str, workdir: Path, overrides: dict[str, Any] | None = None) -> CrawlSummary:
    """Crawl the sandbox web for ``topic`` in ``demo_run_dir(workdir, ...)``, which is deleted
    and written anew; ``overrides`` (settings) win over the demo's own."""
    web = build_web()
    if topic not in web.topics:
        raise ValueError(f"unknown demo topic {topic!r}; choose from {', '.join(web.topics)}")
    settings = dict(DEMO_SETTINGS, **(overrides or {}))
    run_dir = demo_run_dir(workdir, topic, str(settings["strategy"]))
    shutil.rmtree(run_dir, ignore_errors=True)
    topic_dir = web.write_topic_dir(topic, run_dir / "topic")
    with SandboxServer(web) as server:
        print(f"sandbox web: {len(web.sites)} sites, {web.n_pages} pages, proxy {server.proxy_url}")
        print(f"topic directory: {topic_dir}  (seeds, samples, topic.toml)")
        settings["proxy"] = server.proxy_url
        summary = run_crawl(topic_dir, settings, workdir=run_dir / "crawl")
    print(summary.render(with_export=False))
    print(ground_truth_line(web, topic, summary.store_url))
    print(summary.export_line())
    return summary


def demo_run_dir(workdir: Path, topic: str, strategy: str) -> Path:
    """One run directory per topic and strategy, so that ``--strategy bfs`` leaves the jlse
    demo's database alone (the name is checked first: it becomes a path)."""
    if strategy not in available_strategies():
        raise SettingsError(f"strategy: unknown strategy {strategy!r}; choose one of "
                            f"{', '.join(available_strategies())}")
    return workdir / f"{topic}-{strategy}"


def ground_truth_line(web, topic: str, store_url: str) -> str:
    """Harvest judged by the sandbox's ground truth, not by the crawler's own classifier."""
    with open_store(store_url) as store:
        urls = [row["url"] for row in store.export_rows(min_relevance=None)]
    on_topic = sum(web.is_relevant(url, topic) for url in urls)
    total = sum(1 for t in web.iter_truth() if t.topic == topic)
    rate = on_topic / len(urls) if urls else 0.0
    return (f"  ground truth    {on_topic} of {len(urls)} fetched pages are on '{topic}' "
            f"(harvest {rate:.3f}); the sandbox holds {total}")
