"""Why a distributed crawl makes no progress, said on the screen of ``jlse crawl --frontier``:
no seed host can be reached, nothing was dispatched (no dispatcher), no fetch worker answers,
a worker refuses the crawl (its config asks for what the worker's environment does not
allow)."""

from __future__ import annotations

import logging
import time

from jlse.progress import SeedWatch
from jlse.scheduler.sharded_frontier import ShardedFrontier
from jlse.settings import Settings

log = logging.getLogger(__name__)

LIVENESS_AFTER = 5.0  # seconds without a fetched page before the CLI asks why


class ProgressWatch:
    """Says on screen, early, why a distributed crawl makes no progress: no seed host can be
    reached, no fetch worker answers a ping, or nothing was dispatched (no dispatcher)."""

    def __init__(self, settings: Settings, seeds: int) -> None:
        self.seeds = SeedWatch(seeds, settings) if seeds else None
        self.started = time.monotonic()
        self.asked = False
        self.refused: set[str] = set()  # the refusals already said

    def check(self, counters: dict[str, float], frontier: ShardedFrontier,
              refusals: dict[str, str] | None = None) -> None:
        if self.seeds is not None:
            self.seeds.check(counters)
        for why, workers in by_reason(refusals or {}).items():
            if why not in self.refused:  # once per reason, however many processes give it
                self.refused.add(why)
                log.warning("%s refuse%s this crawl: %s", _workers_named(workers),
                            "s" if len(workers) == 1 else "", why)
        if self.asked or counters["fetched"] or time.monotonic() - self.started < LIVENESS_AFTER:
            return
        self.asked = True
        stats = frontier.stats()
        if not counters.get("requeued") and not stats["in_flight"] and stats["queued"]:
            log.warning("no URL was dispatched in %.0f s: is the dispatcher running? Start it "
                        "with `jlse dispatcher` (or `make cluster-up`)", LIVENESS_AFTER)
        if not live_workers():
            log.warning("no fetch worker answered: start one with `jlse worker` (or `make "
                        "cluster-up`), with the same REDIS_URL; the crawl waits for it")


def live_workers(timeout: float = 1.0) -> list[str]:
    """The Celery workers that answer a ping (what `jlse status` lists)."""
    from jlse.workers.celery_app import app

    replies = app.control.inspect(timeout=timeout).ping() or {}
    return sorted(name for name, reply in replies.items() if reply.get("ok") == "pong")


def by_reason(refusals: dict[str, str]) -> dict[str, list[str]]:
    """Worker -> reason, as reason -> the workers giving it (sorted)."""
    grouped: dict[str, list[str]] = {}
    for worker, why in sorted(refusals.items()):
        grouped.setdefault(why, []).append(worker)
    return grouped


def _workers_named(workers: list[str]) -> str:
    if len(workers) == 1:
        return f"worker {workers[0]}"
    return f"{len(workers)} worker processes ({', '.join(workers)})"
