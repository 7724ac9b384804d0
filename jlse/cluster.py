"""Distributed mode from the command line: register a crawl, follow it, run the roles, status.

``jlse crawl --frontier redis://…`` registers the crawl in Redis (``scheduler.crawl_registry``)
and adds its seeds; the dispatcher (``jlse dispatcher``) feeds the Celery workers
(``jlse worker``), a learner worker (``jlse learner``) learns Q-tables. Which Redis: ``--frontier``
for the crawl command, ``REDIS_URL`` for the roles (they must name the same Redis database).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import signal
import time
from pathlib import Path
from typing import Any

import redis
from tqdm import tqdm

from jlse.cluster_watch import ProgressWatch, by_reason
from jlse.learner.publish import RedisQTableStore
from jlse.models.persist import topic_model_to_bytes
from jlse.models.strategy_catalog import make_strategy, strategy_class
from jlse.progress import CrawlSummary
from jlse.records import UNCOUNTED_OUTCOMES, CrawlTask, NewLink
from jlse.redact import strip_credentials, without_credentials
from jlse.run import CrawlSetupError
from jlse.scheduler.crawl_registry import (
    CrawlRegistry,
    check_crawl_id,
    connect,
    settings_from_config,
)
from jlse.scheduler.redis_client import ensure_memory_config, is_cluster
from jlse.scheduler.redis_ledger import set_host_counts
from jlse.scheduler.sharded_frontier import ShardedFrontier
from jlse.scheduler.store import open_store, redact_url
from jlse.scheduler.store.base import CrawlStore
from jlse.settings import Settings, apply_overrides
from jlse.topic import build_topic_model, load_topic

log = logging.getLogger(__name__)

META_CONFIG, META_MODEL = "cluster_config", "cluster_model_b64"
POLL_SECONDS = 0.5


def use_redis(url: str | None) -> None:
    """Make ``url`` the frontier Redis of this process (before the Celery app is imported)."""
    if url:
        os.environ["REDIS_URL"] = url


def frontier_of(registry: CrawlRegistry, crawl_id: str, settings: Settings) -> ShardedFrontier:
    return registry.frontier(crawl_id, settings)


# --- registering a crawl -------------------------------------------------------------------
def register_crawl(topic_dir: Path | str, overrides: dict[str, Any], store_url: str,
                   frontier_url: str, crawl_id: str | None = None,
                   resume: bool = False) -> str:
    """Register (or with ``resume`` re-register) a crawl and queue its seeds; its id."""
    topic = load_topic(topic_dir, overrides)
    settings = topic.settings
    strategy = strategy_class(settings.strategy)
    if strategy is not None and strategy.embedded_only:
        raise CrawlSetupError(f"strategy {settings.strategy!r} runs in the embedded crawl only "
                              "(without --frontier): its state lives in the crawl process")
    if settings.host_concurrency > 1:
        raise CrawlSetupError("host_concurrency: a cluster sends one request per host at a "
                              "time (the Redis frontier's politeness); use the embedded crawl")
    crawl_id = check_crawl_id(crawl_id or topic.name)
    registry = CrawlRegistry(connect(frontier_url))
    _check_not_running(registry, crawl_id, resume)
    given = settings.frontier_shards != 1 or "frontier_shards" in {
        key.replace("-", "_") for key in overrides}  # by --set or topic.toml
    settings = _shards_for(registry, crawl_id, settings, given, resume)
    ensure_memory_config(registry.client)
    model = build_topic_model(topic)
    blob = topic_model_to_bytes(model) if model is not None else None
    config = {"crawl_id": crawl_id, "topic": topic.name,
              "settings": without_credentials(settings.to_dict()),
              "store_url": strip_credentials(store_url), "seeds": topic.seeds,
              "max_pages": settings.max_pages, "status": "starting", "reason": "",
              "created_at": time.time(), "classified": model is not None}
    with open_store(store_url) as store:
        resuming = _check_resume(store, resume, store_url)
        _save_meta(store, config, blob, settings)
        counters = _resume_counters(registry, crawl_id, store, settings) if resuming else {}
        if not resuming:
            registry.clear(crawl_id)  # an old registration of this id (a finished crawl)
        registry.register(crawl_id, config, blob, counters)
        frontier = frontier_of(registry, crawl_id, settings)
        if resuming:
            set_host_counts(registry, crawl_id, store.host_fetch_counts())
            if frontier.stats()["seen"] == 0:  # Redis lost the frontier: PostgreSQL has it
                frontier.rebuild(store)
        seed_priority = make_strategy(settings.strategy, settings, model).seed_priority()
        _add_seeds(store, frontier, topic.seeds, seed_priority)
    registry.set_status(crawl_id, "running")
    return crawl_id


def _shards_for(registry: CrawlRegistry, crawl_id: str, settings: Settings, given: bool,
                resume: bool) -> Settings:
    """The crawl's ``frontier_shards``: on a Redis Cluster, one per master unless set; a
    resumed crawl keeps its own (its URLs and host ledger are placed by it)."""
    shards = settings.frontier_shards
    if resume and registry.exists(crawl_id):
        registered = registry.shard_count(crawl_id)
        if given and shards != registered:
            raise CrawlSetupError(f"crawl {crawl_id!r} runs on {registered} frontier shards: "
                                  "a resumed crawl keeps them (drop --set frontier_shards)")
        shards = registered
    elif not given and is_cluster(registry.client):
        shards = len(registry.client.get_primaries())
    if shards == settings.frontier_shards:
        return settings
    return apply_overrides(settings, {"frontier_shards": shards}, source="frontier")


def _check_not_running(registry: CrawlRegistry, crawl_id: str, resume: bool) -> None:
    if resume or not registry.exists(crawl_id):
        return
    if registry.config(crawl_id).get("status") in ("running", "starting"):
        raise CrawlSetupError(f"crawl {crawl_id!r} is running: continue it with --resume or "
                              "pick another --crawl-id")


def _check_resume(store: CrawlStore, resume: bool, store_url: str) -> bool:
    has_crawl = store.has_links()  # one row read, not a count of links
    if has_crawl and not resume:
        raise CrawlSetupError(f"{redact_url(store_url)} already holds a crawl: continue it with "
                              "--resume, or use another database")
    return has_crawl


def _save_meta(store: CrawlStore, config: dict, blob: bytes | None, settings: Settings) -> None:
    """PostgreSQL keeps what Redis holds, so a crawl survives the loss of Redis's data."""
    store.set_meta("topic", config["topic"])
    store.set_meta("strategy", settings.strategy)
    store.set_meta("settings", json.dumps(config["settings"]))
    store.set_meta(META_CONFIG, json.dumps(config))
    store.set_meta(META_MODEL, base64.b64encode(blob).decode("ascii") if blob else "")


def store_counters(store: CrawlStore, settings: Settings) -> dict[str, int]:
    """The counters as the crawl database knows them (on resume and rebuild)."""
    stats = store.stats(settings.relevance_threshold)
    uncounted = {outcome.value for outcome in UNCOUNTED_OUTCOMES}
    fetched = sum(n for outcome, n in stats.outcomes.items() if outcome not in uncounted)
    return {"fetched": fetched, "relevant": stats.relevant, "targets": stats.targets,
            "rejected": stats.rejected}


def _resume_counters(registry: CrawlRegistry, crawl_id: str, store: CrawlStore,
                     settings: Settings) -> dict[str, int]:
    """The database's counts, and the learning mark still in Redis: without it a resumed
    jlse crawl would learn again on its first result."""
    counters = store_counters(store, settings)
    if registry.exists(crawl_id):
        learned = registry.counters(crawl_id)["learned_at_results"]
        counters["learned_at_results"] = min(int(learned), counters["targets"])
    return counters


def _add_seeds(store: CrawlStore, frontier: ShardedFrontier, seeds: list[str],
               priority: float) -> None:
    links = [NewLink(url=url, parent_id=None, depth=0, priority=priority) for url in seeds]
    ids = store.add_links(links)
    frontier.add_new([CrawlTask(url=link.url, url_id=url_id, priority=link.priority)
                      for link, (url_id, _) in zip(links, ids, strict=True)])


# --- following a crawl ---------------------------------------------------------------------
def follow_crawl(frontier_url: str, crawl_id: str, progress: bool | None = None,
                 store_url: str | None = None) -> CrawlSummary:
    """Show progress from the Redis counters until the crawl is done or stopped.

    Ctrl+C marks the crawl stopped (the tasks in flight still finish) and returns."""
    registry = CrawlRegistry(connect(frontier_url))
    started = time.monotonic()
    fetched_before = int(registry.counters(crawl_id)["fetched"])
    bar = None
    try:
        config = registry.config(crawl_id)
        settings = settings_from_config(config)
        bar = tqdm(total=settings.max_pages, unit="page", dynamic_ncols=True, smoothing=0.1,
                   disable=None if progress is None else not progress)  # None: only on a TTY
        watch = ProgressWatch(settings, len(config.get("seeds", [])))
        reason = _poll(registry, crawl_id, settings, bar, watch)
    except KeyboardInterrupt:  # before polling began: the crawl must not run on unattended
        reason = _stop(registry, crawl_id)
    finally:
        if bar is not None:
            bar.close()
    summary = summarise(registry, crawl_id, reason, time.monotonic() - started, store_url)
    summary.fetched_before = fetched_before
    return summary


def _poll(registry: CrawlRegistry, crawl_id: str, settings: Settings, bar: tqdm,
          watch: ProgressWatch | None = None) -> str:
    """Show the counters until the crawl ends; Redis going away (a restart) only pauses it."""
    frontier = frontier_of(registry, crawl_id, settings)
    warned = {"gone": False, "unreachable": False}
    try:
        while True:
            try:
                ended = _poll_once(registry, crawl_id, frontier, bar, warned)
                if ended is None and watch is not None:
                    watch.check(registry.counters(crawl_id), frontier,
                                registry.refusals(crawl_id))
                warned["unreachable"] = False
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                if not warned["unreachable"]:
                    log.warning("Redis unreachable (%s); still following crawl %s", exc,
                                crawl_id)
                    warned["unreachable"] = True
                ended = None
            if ended is not None:
                return ended
            time.sleep(POLL_SECONDS)
    except KeyboardInterrupt:
        return _stop(registry, crawl_id)


def _poll_once(registry: CrawlRegistry, crawl_id: str, frontier: ShardedFrontier, bar: tqdm,
               warned: dict[str, bool]) -> str | None:
    """Update the bar; the crawl's end reason once it is done or stopped, else None."""
    raw = registry.config_raw(crawl_id)
    if raw is None:  # Redis lost the crawl's keys: `jlse frontier rebuild` restores them
        if not warned["gone"]:
            log.warning("crawl %s is gone from Redis; run `jlse frontier rebuild "
                        "--crawl-id %s` to continue it", crawl_id, crawl_id)
            warned["gone"] = True
        return None
    config = json.loads(raw)
    _show(bar, registry.counters(crawl_id), len(frontier))
    if config["status"] in ("done", "stopped"):
        return config.get("reason") or config["status"]
    return None


def _stop(registry: CrawlRegistry, crawl_id: str) -> str:
    """Mark the crawl stopped: the dispatcher sends no more of its tasks."""
    registry.set_status(crawl_id, "stopped", "interrupted")
    return "interrupted"


def _show(bar: tqdm, counters: dict[str, float], frontier_size: int) -> None:
    fetched = int(counters["fetched"])
    bar.update(max(0, min(fetched, bar.total) - bar.n))
    harvest = counters["relevant"] / fetched if fetched else 0.0
    bar.set_postfix(relevant=int(counters["relevant"]), harvest=f"{harvest:.2f}",
                    frontier=frontier_size, refresh=False)


def summarise(registry: CrawlRegistry, crawl_id: str, reason: str,
              elapsed: float, store_url: str | None = None) -> CrawlSummary:
    """The crawl's summary; its database is ``store_url`` (the caller's own: a URL read from
    Redis is never connected to) or, without one, ``DATABASE_URL``."""
    config = registry.config(crawl_id)
    settings = settings_from_config(config)
    counters = registry.counters(crawl_id)
    with open_store(_own_store_url(store_url)) as store:
        outcomes = store.stats(settings.relevance_threshold).outcomes
        deferred = store.count_deferred()
    qtables = RedisQTableStore(registry.client, registry.qtable_prefix(crawl_id))
    return CrawlSummary(
        reason=reason, fetched=int(counters["fetched"]), relevant=int(counters["relevant"]),
        targets=int(counters["targets"]), elapsed=elapsed,
        frontier_left=len(frontier_of(registry, crawl_id, settings)),
        store_url=redact_url(config["store_url"]), outcomes=outcomes,
        classified=bool(config.get("classified", True)),
        qtable_version=qtables.current_version(), deferred=deferred)


def _own_store_url(store_url: str | None) -> str:
    """``store_url``, else ``DATABASE_URL``: never the URL registered in Redis, which anyone
    who can write to Redis could point at a server of theirs (and get PGPASSWORD)."""
    store_url = store_url or os.environ.get("DATABASE_URL")
    if not store_url:
        raise CrawlSetupError("give the crawl database with --store (or DATABASE_URL)")
    return store_url


# --- recovery ------------------------------------------------------------------------------
def rebuild_frontier(crawl_id: str, store_url: str | None, frontier_url: str) -> int:
    """Restore a crawl's Redis state from PostgreSQL (after Redis lost it); URLs queued."""
    registry = CrawlRegistry(connect(frontier_url))
    config = registry.config(crawl_id) if registry.exists(crawl_id) else None
    with open_store(_own_store_url(store_url)) as store:
        if config is None:
            config = _config_from_store(store, crawl_id)
            raw_model = store.get_meta(META_MODEL) or ""
            blob = base64.b64decode(raw_model) if raw_model else None
            settings = settings_from_config(config)
            counters = {**store_counters(store, settings), "learned_at_results": 0}
            registry.register(crawl_id, dict(config, status="starting"), blob, counters)
        settings = settings_from_config(config)
        set_host_counts(registry, crawl_id, store.host_fetch_counts())
        queued = frontier_of(registry, crawl_id, settings).rebuild(store)
    registry.set_status(crawl_id, "running")
    return queued


def _config_from_store(store: CrawlStore, crawl_id: str) -> dict[str, Any]:
    raw = store.get_meta(META_CONFIG)
    if not raw:
        raise CrawlSetupError("the crawl database holds no distributed crawl to rebuild")
    config = json.loads(raw)
    if config.get("crawl_id") != crawl_id:
        raise CrawlSetupError(f"the crawl database holds crawl {config.get('crawl_id')!r}, "
                              f"not {crawl_id!r}")
    return config


# --- the roles -----------------------------------------------------------------------------
def run_dispatcher(shard_spec: str | None = None) -> None:
    """The dispatcher role, until SIGTERM or Ctrl+C (``shard_spec`` "i/k": see Dispatcher)."""
    from jlse.scheduler.dispatcher import Dispatcher
    from jlse.workers.celery_app import FETCH_QUEUE, app

    def send(crawl_id: str, task: dict) -> None:  # a short argsrepr: no saferepr per task
        app.send_task("jlse.fetch", args=[crawl_id, task], queue=FETCH_QUEUE,
                      argsrepr=f"({crawl_id!r}, {task.get('url', '')!r})", kwargsrepr="{}")

    def send_batch(crawl_id: str, tasks: list[dict]) -> None:
        app.send_task("jlse.fetch_batch", args=[crawl_id, tasks], queue=FETCH_QUEUE,
                      argsrepr=f"({crawl_id!r}, {len(tasks)} URLs from "
                               f"{tasks[0].get('url', '')!r})", kwargsrepr="{}")

    def send_refill(crawl_id: str, shard: int) -> None:
        app.send_task("jlse.refill", args=[crawl_id, shard], queue=FETCH_QUEUE)

    dispatcher = Dispatcher(CrawlRegistry(connect()), send, send_refill=send_refill,
                            shard_spec=shard_spec, send_batch=send_batch)
    signal.signal(signal.SIGTERM, lambda *_: dispatcher.stop())
    try:
        dispatcher.run()
    except KeyboardInterrupt:
        pass


def run_worker(queue: str, concurrency: int, hostname: str | None,
               pool: str | None = None) -> None:
    """A Celery worker on ``queue`` ("fetch" or "learn", named as ``celery_app`` names them;
    events on, for Flower)."""
    from jlse.workers.celery_app import FETCH_QUEUE, LEARN_QUEUE, app

    queue = {"fetch": FETCH_QUEUE, "learn": LEARN_QUEUE}[queue]
    app.conf.worker_hijack_root_logger = True  # the worker logs as Celery does (INFO)
    argv = ["worker", "-Q", queue, "-c", str(concurrency), "-E", "--loglevel=INFO"]
    if hostname:
        argv += ["-n", hostname]
    if pool:
        argv += ["-P", pool]
    app.worker_main(argv)


def cluster_status(crawl_id: str | None = None, ping_timeout: float = 1.0) -> dict[str, Any]:
    """Per crawl: status, frontier, leases, pages/s, harvest, Q-table version; worker health."""
    from jlse.workers.celery_app import app

    registry = CrawlRegistry(connect())
    crawls = {}
    for cid in [crawl_id] if crawl_id else registry.known():
        crawls[cid] = _crawl_status(registry, cid)
    replies = app.control.inspect(timeout=ping_timeout).ping() or {}
    workers = {name: reply.get("ok") == "pong" for name, reply in replies.items()}
    return {"crawls": crawls, "workers": workers}


def _crawl_status(registry: CrawlRegistry, crawl_id: str) -> dict[str, Any]:
    config = registry.config(crawl_id)
    settings = settings_from_config(config)
    counters = registry.counters(crawl_id)
    stats = frontier_of(registry, crawl_id, settings).stats()
    fetched = int(counters["fetched"])
    qtables = RedisQTableStore(registry.client, registry.qtable_prefix(crawl_id))
    return {
        "status": config["status"], "reason": config.get("reason", ""),
        "strategy": settings.strategy, "max_pages": settings.max_pages, "fetched": fetched,
        "relevant": int(counters["relevant"]), "targets": int(counters["targets"]),
        "harvest_rate": round(counters["relevant"] / fetched, 4) if fetched else 0.0,
        "pages_per_s": counters.get("pages_per_s", 0.0), "frontier": stats["queued"],
        "in_flight": stats["in_flight"], "hosts": stats["hosts"],
        "qtable_version": qtables.current_version(),
        "worker_qtables": registry.workers(crawl_id),
        "refusals": registry.refusals(crawl_id),
    }


def render_status(status: dict[str, Any]) -> str:
    lines = []
    for cid, s in status["crawls"].items():
        lines.append(f"crawl {cid}: {s['status']} {s['reason']}".rstrip())
        lines.append(f"  fetched {s['fetched']}/{s['max_pages']}  {s['pages_per_s']:.1f} pages/s"
                     f"  harvest {s['harvest_rate']:.3f}  targets {s['targets']}")
        lines.append(f"  frontier {s['frontier']} queued on {s['hosts']} hosts, "
                     f"{s['in_flight']} in flight;  Q-table v{s['qtable_version']}")
        lines += [f"  refused by {', '.join(workers)}: {why}"
                  for why, workers in by_reason(s.get("refusals", {})).items()]
    if not status["crawls"]:
        lines.append("no crawls registered")
    workers = status["workers"]
    lines.append(f"workers ({len(workers)} answered): " +
                 (", ".join(f"{n} {'ok' if ok else 'BAD'}" for n, ok in sorted(workers.items()))
                  or "none"))
    return "\n".join(lines)
