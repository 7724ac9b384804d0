"""One distributed fetch worker's loop without Celery, for ``bench_outputs.py --distributed``.

Registers a bfs crawl of the sandbox web (real Redis, real PostgreSQL), then runs
``CrawlContext.process`` - the code of the ``jlse.fetch`` task: PostgreSQL writes, Redis
frontier, WARC records in the page store when it is on - on leased URLs until ``--pages`` are
fetched. Prints one JSON line: the CPU time of the loop (this process), its wall time, and the
bytes of the page store.

    .venv/bin/python benchmarks/page_store_worker.py --store URL --redis URL --root PREFIX \\
        --proxy URL --seeds FILE --pages 300 --page-store DIR|off
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import redis

from jlse.scheduler.crawl_registry import CrawlRegistry
from jlse.settings import Settings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in ("--store", "--redis", "--root", "--proxy", "--seeds", "--page-store"):
        parser.add_argument(name, required=True)
    parser.add_argument("--pages", type=int, default=300)
    args = parser.parse_args()
    on = args.page_store != "off"
    os.environ.update({"DATABASE_URL": args.store, "JLSE_PROXY": args.proxy,
                       "JLSE_ALLOW_PRIVATE": "true", "JLSE_PAGES_STORE": args.page_store})
    from jlse.workers.distributed import CrawlContext

    client = redis.Redis.from_url(args.redis)
    registry = CrawlRegistry(client, args.root)
    settings = Settings(strategy="bfs", politeness_delay=0.0, max_crawl_delay=0.0,
                        proxy=args.proxy, allow_private=True, pages_store=on,
                        max_pages=args.pages)
    registry.register("bench", {"crawl_id": "bench", "settings": settings.to_dict(),
                                "status": "running", "store_url": args.store,
                                "max_pages": args.pages}, None, {})
    context = CrawlContext("bench", registry)
    seeds = Path(args.seeds).read_text().split()
    context.engine.add_seeds(seeds, 1.0)
    fetched = 0
    wall, cpu = time.monotonic(), time.process_time()
    while fetched < args.pages:
        task = context.frontier.pop()
        if task is None:
            time.sleep(0.01)
            continue
        word = context.process(task, context.start(task))
        fetched += word not in ("rejected", "requeued", "retried", "postponed", "nothing")
    cpu, wall = time.process_time() - cpu, time.monotonic() - wall
    context.close()
    store_bytes = sum(path.stat().st_size for path in Path(args.page_store).glob("*")) \
        if on else 0
    print(json.dumps({"pages": fetched, "cpu_s": round(cpu, 3), "wall_s": round(wall, 2),
                      "store_bytes": store_bytes}))


if __name__ == "__main__":
    main()
