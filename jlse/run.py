"""Assemble and run an embedded crawl from a topic directory (what ``jlse crawl`` does)."""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jlse.embedded import EmbeddedCrawler
from jlse.export import WORKDIR_META
from jlse.learner.background import BackgroundLearner, QTableHolder, qtable_file_name
from jlse.learner.context_graph import ContextGraphLearner
from jlse.models import link_index, tokenizer
from jlse.models.context_graph import ContextGraphStrategy
from jlse.models.qtable import QTable
from jlse.models.self_training import SelfTrainedRelevance
from jlse.models.strategies import Strategy
from jlse.models.strategy_catalog import make_strategy
from jlse.progress import CrawlProgress, CrawlSummary
from jlse.redact import redact_url, without_credentials
from jlse.scheduler.store import open_store
from jlse.scheduler.store.base import CrawlStore
from jlse.scheduler.store.sqlite import check_resumable, check_writable
from jlse.settings import Settings
from jlse.topic import Topic, build_topic_model, load_topic
from jlse.workers.engine import CPU_STAGES, build_engine, cpu_counter, local_backends
from jlse.workers.page_pool import ProcessPagePool

log = logging.getLogger(__name__)


class CrawlSetupError(RuntimeError):
    """The crawl cannot start (existing crawl without --resume, bad store URL, ...)."""


def default_workdir(topic: Topic) -> Path:
    return Path("runs") / topic.name


def run_crawl(
    topic_dir: Path | str,
    overrides: dict[str, Any] | None = None,
    workdir: Path | str | None = None,
    store_url: str | None = None,
    resume: bool = False,
    fresh: bool = False,
    progress: bool | None = None,
    judge: Callable[[str], float] | None = None,
) -> CrawlSummary:
    topic = load_topic(topic_dir, overrides)
    settings = topic.settings
    workdir = Path(workdir) if workdir else default_workdir(topic)
    if workdir.exists() and not workdir.is_dir():
        raise CrawlSetupError(f"--workdir {workdir}: exists and is not a directory")
    if resume and fresh:
        raise CrawlSetupError("--resume and --fresh together: continue the crawl or start "
                              "over, not both")
    if fresh:
        _clear_workdir(workdir, store_url)
    if resume and not store_url:  # a missing, emptied or damaged crawl.db: say so, no new crawl
        check_resumable(str(workdir / "crawl.db"))
    check_writable(workdir)  # a read-only folder: one clear line, not a traceback later
    store_url = store_url or f"sqlite:///{(workdir / 'crawl.db').resolve()}"
    model = build_topic_model(topic)
    holder = QTableHolder(_latest_qtable(workdir / "qtables") if resume else None)
    strategy = make_strategy(settings.strategy, settings, model, holder.get)
    store = open_store(store_url)
    log_handler = log_to_file(workdir / "crawl.log")
    learner = crawler = None
    try:
        _log_start(topic, store_url, resume, model)
        resuming = _check_resume(store, resume, store_url)
        _write_meta(store, topic, settings, workdir)
        learner = _background_learner(settings, strategy, store_url, holder, workdir)
        crawler = _build_crawler(settings, store, strategy, model, workdir, progress, learner,
                                 resuming, holder, judge)
        if learner is not None:
            learner.start()
        if resuming:
            crawler.restore()
            if learner is not None:  # results found before the restart count towards cf
                learner.notify(crawler.counters.get("targets", 0))
        fetched_before = crawler.fetched()
        crawler.progress.watch_seeds(len(topic.seeds), settings)
        crawler.add_seeds(topic.seeds, strategy.seed_priority())
        started = time.monotonic()
        reason = crawler.run()
        elapsed = time.monotonic() - started
        crawler.progress.close()
        crawler.engine.close()
        summary = _summarise(crawler, store, settings, reason, elapsed, store_url, model is not None)
        summary.qtable_version = holder.version
        summary.fetched_before, summary.workdir = fetched_before, str(workdir)
        (workdir / "summary.json").write_text(json.dumps(summary.to_dict(), indent=2))
        return summary
    finally:
        if learner is not None:
            learner.stop()
        if crawler is not None and crawler.pool is not None:
            crawler.pool.close()
        store.close()
        logging.getLogger().removeHandler(log_handler)
        log_handler.close()


def _build_crawler(settings: Settings, store: CrawlStore, strategy: Strategy, model,
                   workdir: Path, progress: bool | None, learner: BackgroundLearner | None,
                   resuming: bool, holder: QTableHolder,
                   judge: Callable[[str], float] | None = None) -> EmbeddedCrawler:
    """The engine, its page pool (forked before any thread of the crawl starts) and the
    progress bar."""
    frontier, ledger = local_backends(settings, store if resuming else None)
    engine = build_engine(settings, store, frontier, ledger, strategy, model, workdir / "pages",
                          on_targets=None if learner is None else learner.notify,
                          robots_turn=True, judge=judge)
    pool = None
    processes = page_processes(settings, strategy)
    if processes:
        if model is not None:  # built once here and shared, not once per page process
            tokenizer.prepare(["中文"])
            # the compiled KDE-NB kernel too: a page process loading (or, on a cold numba
            # cache, compiling) it on its first relevant page held that page for seconds
            model.link_text_relevance(["prepare"], ["prepare"])
        if strategy.learns == "qtable":
            link_index.prepare_search()
        threads = -(-2 * settings.concurrency // processes)
        pool = ProcessPagePool(engine.process, processes, threads,
                               refresh=_qtable_loader(holder, workdir / "qtables"))
    bar = CrawlProgress(settings.max_pages, enabled=progress)
    return EmbeddedCrawler(settings, engine, bar, pool, model_version=lambda: holder.version)


def page_processes(settings: Settings, strategy: Strategy) -> int:
    """How many page processes the embedded crawl forks (0: threads only)."""
    if strategy.learns == "pages":  # its page log must live in the crawl process
        return 0
    if settings.page_processes >= 0:
        return settings.page_processes
    cores = os.cpu_count() or 1
    return cores if cores > 1 else 0


def _qtable_loader(holder: QTableHolder, directory: Path) -> Callable[[int], bool]:
    """In a page process: load the Q-table version the crawl process has (saved by the
    learner); False while its file is not there yet."""
    def load(version: int) -> bool:
        if version <= holder.version:
            return True
        try:
            holder.set(QTable.load(directory / qtable_file_name(version)))
        except (OSError, ValueError):
            return False
        return True

    return load


def _background_learner(settings: Settings, strategy, store_url: str, holder: QTableHolder,
                        workdir: Path) -> BackgroundLearner | None:
    """The learner thread of a learning strategy: JLSE's Q-tables, or cfc's layer model."""
    if strategy.learns == "qtable":
        return BackgroundLearner(settings, store_url, holder, workdir / "qtables")
    if isinstance(strategy, ContextGraphStrategy):
        return BackgroundLearner(settings, store_url, strategy.layer_model,
                                 learner=ContextGraphLearner(settings, strategy.page_log))
    return None


def _latest_qtable(directory: Path) -> QTable | None:
    """The newest saved Q-table of a crawl being resumed, if any loads."""
    for path in sorted(directory.glob("qtable-v*.npz"), key=_version_of, reverse=True):
        try:
            return QTable.load(path)
        except (OSError, ValueError) as exc:
            log.warning("cannot load %s: %s", path, exc)
    return None


def _version_of(path: Path) -> int:
    digits = "".join(ch for ch in path.stem if ch.isdigit())
    return int(digits) if digits else -1


def _clear_workdir(workdir: Path, store_url: str | None) -> None:
    if store_url and not store_url.startswith("sqlite"):
        raise CrawlSetupError("--fresh only clears the default SQLite store; use a new database")
    for name in ("crawl.db", "crawl.db-wal", "crawl.db-shm", "summary.json"):
        (workdir / name).unlink(missing_ok=True)
    shutil.rmtree(workdir / "pages", ignore_errors=True)
    shutil.rmtree(workdir / "warc", ignore_errors=True)
    shutil.rmtree(workdir / "qtables", ignore_errors=True)


def _check_resume(store: CrawlStore, resume: bool, store_url: str) -> bool:
    has_crawl = store.has_links()  # one row read, not a count of links
    if resume and not has_crawl:
        raise CrawlSetupError(f"cannot resume: {redact_url(store_url)} holds no crawl; start a "
                              "new crawl without --resume")
    if has_crawl and not resume:
        raise CrawlSetupError(
            f"{redact_url(store_url)} already holds a crawl: continue it with --resume, "
            "start over with --fresh, or pick another --workdir"
        )
    return has_crawl


def _log_start(topic: Topic, store_url: str, resume: bool, model: Any) -> None:
    """What this crawl is, as the first lines of its crawl.log."""
    settings = topic.settings
    changed = without_credentials(settings.non_defaults())
    changed.pop("strategy", None)
    log.info("%s crawl of topic %s (%s): strategy %s, %d seeds, page budget %d, store %s",
             "resumed" if resume else "new", topic.name, topic.path, settings.strategy,
             len(topic.seeds), settings.max_pages, redact_url(store_url))
    log.info("settings that differ from the defaults: %s",
             ", ".join(f"{key}={value!r}" for key, value in changed.items()) or "none")
    log.info("topic model: %s", topic.model_origin or "none")
    log.info("self-training: %s", self_training_status(settings, model))


def self_training_status(settings: Settings, model: Any) -> str:
    """Whether the page classifier will learn from the crawl's pages, and if not why."""
    if not settings.self_training:
        return "off (self_training = false)"
    reason = SelfTrainedRelevance.why_not(model)
    return f"off: {reason}" if reason else \
        "on (the sample NB and the keywords label the crawl's pages)"


def _write_meta(store: CrawlStore, topic: Topic, settings: Settings, workdir: Path) -> None:
    previous = store.get_meta("strategy")
    if previous and previous != settings.strategy:
        log.warning("resuming a %s crawl with strategy %s", previous, settings.strategy)
    store.set_meta("topic", topic.name)
    store.set_meta(WORKDIR_META, str(workdir.resolve()))  # its pages: jlse export says where
    store.set_meta("strategy", settings.strategy)
    store.set_meta("settings", json.dumps(without_credentials(settings.to_dict())))


def _summarise(crawler: EmbeddedCrawler, store: CrawlStore, settings: Settings, reason: str,
               elapsed: float, store_url: str, classified: bool) -> CrawlSummary:
    c = crawler.counters
    stats = store.stats(settings.relevance_threshold)
    per_page = max(c.get("fetched", 0), 1)
    cpu = {stage: c.get(cpu_counter(stage), 0) / 1e6 for stage in CPU_STAGES}
    return CrawlSummary(
        reason=reason, fetched=c.get("fetched", 0), relevant=c.get("relevant", 0),
        targets=c.get("targets", 0), elapsed=elapsed, frontier_left=len(crawler.frontier),
        store_url=redact_url(store_url), outcomes=stats.outcomes, classified=classified,
        cpu_ms_per_page={k: 1000 * v / per_page for k, v in cpu.items()},
        unfinished=crawler.unfinished,
    )


def log_to_file(path: Path) -> logging.Handler:
    """Every outcome worth a line goes to the crawl's log file, not the terminal."""
    root = logging.getLogger()
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setLevel(logging.INFO)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    if root.level > logging.INFO or root.level == logging.NOTSET:
        root.setLevel(logging.INFO)
    return handler
