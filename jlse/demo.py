"""``jlse demo`` / ``make demo``: a real crawl of the built-in sandbox web, nothing to set up.

The sandbox web runs in this process on loopback and is reached as an HTTP proxy, exactly as a
crawl of a real web through a proxy would be.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from jlse.run import run_crawl
from jlse.sandbox import SandboxServer, build_web

DEMO_SETTINGS = {
    "politeness_delay": 0.25,  # the sandbox is local; a real crawl keeps the 1 s default
    "robots_retry_after": 2.0,
    "connect_timeout": 3.0,
    "read_timeout": 3.0,
    "fetch_deadline": 6.0,
}


def run_demo(topic: str, max_pages: int, workdir: Path) -> int:
    web = build_web()
    if topic not in web.topics:
        raise ValueError(f"unknown demo topic {topic!r}; choose from {', '.join(web.topics)}")
    shutil.rmtree(workdir, ignore_errors=True)
    topic_dir = web.write_topic_dir(topic, workdir / "topic")
    with SandboxServer(web) as server:
        print(f"sandbox web: {len(web.sites)} sites, {web.n_pages} pages, proxy {server.proxy_url}")
        print(f"topic directory: {topic_dir}  (seeds, samples, topic.toml)")
        overrides = dict(DEMO_SETTINGS, proxy=server.proxy_url, max_pages=max_pages)
        summary = run_crawl(topic_dir, overrides, workdir=workdir / "crawl")
    print(summary.render())
    relevant_truth = sum(1 for t in web.iter_truth() if t.topic == topic)
    print(f"  (the sandbox holds {relevant_truth} pages on '{topic}'; "
          f"export them with: jlse export --workdir {workdir / 'crawl'})")
    return 0
