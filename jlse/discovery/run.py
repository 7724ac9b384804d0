"""Assemble and run domain discovery from a topic directory (what ``jlse discover`` does)."""

from __future__ import annotations

import logging
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from jlse.discovery.bandit import make_chooser
from jlse.discovery.bootstrap import TopicOutError, check_topic_out, write_topic
from jlse.discovery.engine import Discovery
from jlse.discovery.fetching import Page, PageFetcher
from jlse.discovery.operators import OperatorMemory, Operators, topic_queries
from jlse.discovery.output import DiscoveryReport, build_report, seed_urls, write_outputs
from jlse.discovery.search import SearchClient, search_endpoint
from jlse.discovery.state import DiscoveryState, StateFiles
from jlse.errors import UnavailableError
from jlse.redact import redact_url
from jlse.run import log_to_file
from jlse.scheduler.store import open_store
from jlse.scheduler.store.sqlite import check_resumable, check_writable
from jlse.topic import (
    SAMPLE_SUFFIXES,
    Topic,
    TopicError,
    build_topic_model,
    load_topic,
    parse_sample,
)

log = logging.getLogger(__name__)


class DiscoverySetupError(ValueError):
    """Discovery cannot start (no samples nor keywords, bad search URL, existing run...)."""


@dataclass
class DiscoverySummary:
    reason: str
    rounds: int
    fetched: int
    fetched_before: int
    pages: int
    sites: int
    relevant_sites: int
    searches: int
    search_failures: int
    elapsed: float
    workdir: str
    sites_file: str
    pages_file: str
    seeds_file: str = ""
    topic_dir: str = ""  # --topic-out: a topic directory ready to crawl
    operators: dict[str, int] = field(default_factory=dict)  # rounds per operator

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def render(self) -> str:
        operators = ", ".join(f"{name} {count}" for name, count in sorted(self.operators.items()))
        session = self.fetched - self.fetched_before
        rate = f"{session / self.elapsed:.1f} pages/s" if self.elapsed > 0 else "-"
        lines = [
            f"discovery ended: {self.reason}",
            f"  rounds          {self.rounds} ({operators or 'none'})",
            f"  pages fetched   {self.fetched} ({session} in {self.elapsed:.1f} s, {rate}); "
            f"{self.pages} pages ranked",
            f"  sites           {self.sites} ranked, {self.relevant_sites} with pages judged "
            "relevant",
            f"  searches        {self.searches} requests, {self.search_failures} failed",
            f"  ranked sites    {self.sites_file}",
            f"  ranked pages    {self.pages_file}",
        ]
        if self.seeds_file:
            lines += [f"  seeds           {self.seeds_file} (a topic's seeds.txt as it is)"]
        if self.topic_dir:
            lines += [f"  topic           {self.topic_dir}: crawl it with "
                      f"jlse crawl --topic {self.topic_dir}"]
        return "\n".join(lines)


class DiscoveryProgress:
    """The bar of a discovery run: pages fetched of the budget, round, operator."""

    def __init__(self, total: int, initial: int, enabled: bool | None) -> None:
        self._bar = tqdm(total=total, initial=initial, unit="page", dynamic_ncols=True,
                         disable=not (sys.stderr.isatty() if enabled is None else enabled))

    def update(self, counters: dict, frontier_size: int, counted: bool = True) -> None:
        if counted:
            self._bar.update(1)

    def note(self, text: str) -> None:
        """Why the crawl runs below its concurrency: not shown (a round is short)."""

    def round_done(self, round_number: int, operator: str, pages: int) -> None:
        self._bar.set_postfix(round=round_number, operator=operator, pages=pages)

    def close(self) -> None:
        self._bar.close()


def default_workdir(topic: Topic) -> Path:
    return Path("runs") / f"{topic.name}-discovery"


def run_discovery(topic_dir: Path | str, search_url: str, overrides: dict[str, Any] | None = None,
                  workdir: Path | str | None = None, resume: bool = False, fresh: bool = False,
                  progress: bool | None = None, out: Path | str | None = None,
                  seeds_out: Path | str | None = None,
                  topic_out: Path | str | None = None,
                  bootstrap_samples: bool = False) -> DiscoverySummary:
    topic = load_topic(topic_dir, overrides, require_seeds=False)
    settings = topic.settings
    samples = _sample_pages(topic)
    if not samples and not settings.keywords:
        raise TopicError(f"{topic.path}: neither sample pages (samples/relevant/) nor keywords "
                         "(topic.toml) - discovery needs one of them to rank pages against")
    try:
        search_endpoint(search_url)
    except ValueError as exc:
        raise DiscoverySetupError(str(exc)) from None
    if bootstrap_samples and topic_out is None:
        raise DiscoverySetupError("--bootstrap-samples writes the samples into --topic-out DIR: "
                                  "give one")
    if topic_out is not None:
        try:
            check_topic_out(Path(topic_out), topic.path)
        except TopicOutError as exc:
            raise DiscoverySetupError(str(exc)) from None
    _check_output_files(out, seeds_out)
    workdir = Path(workdir) if workdir else default_workdir(topic)
    files = _prepare_workdir(workdir, resume, fresh)
    store = open_store(f"sqlite:///{(workdir / 'crawl.db').resolve()}")
    log_handler = log_to_file(workdir / "discover.log")
    bar = fetcher = search = None
    try:
        state, pages = files.load() if resume else (DiscoveryState(), [])
        search = SearchClient(search_url, rate=settings.search_rate,
                              retries=settings.search_retries, user_agent=settings.user_agent,
                              timeout=settings.read_timeout, cache=state.search_cache,
                              proxy=settings.search_proxy)
        fetched_before = store.stats().fetched
        bar = DiscoveryProgress(settings.max_pages, fetched_before, progress)
        fetcher = PageFetcher(settings, store, workdir, bar, build_topic_model(topic))
        fetcher.restore_counters()
        log.info("discovery of topic %s: %d seeds, %d samples, %d keywords, search %s, budget "
                 "%d pages", topic.name, len(topic.seeds), len(samples), len(settings.keywords),
                 f"{redact_url(search_url)} ({search.route})", settings.max_pages)
        discovery = _assemble(topic, samples, fetcher, search, files, state)
        discovery.on_round = bar.round_done
        if resume:
            discovery.restore(pages, store)
        started = time.monotonic()
        reason = discovery.run(topic.seeds)
        elapsed = time.monotonic() - started
        bar.close()
        report = build_report(discovery, topic.seeds, settings)
        paths = write_outputs(report, files.folder, out, seeds_out, settings.discovery_seed_sites)
        if topic_out is not None and reason != "interrupted":  # --resume writes it
            seeds = topic.seeds + seed_urls(report, settings.discovery_seed_sites)
            write_topic(Path(topic_out), topic.path, report, seeds, fetcher.repository.load,
                        settings.relevance_threshold, str(workdir), bootstrap_samples)
            paths["topic"] = str(topic_out)
        return _summarise(discovery, report, reason, elapsed, fetched_before, search, workdir,
                          paths)
    finally:
        if bar is not None:
            bar.close()
        if fetcher is not None:
            fetcher.close()
        if search is not None:
            search.close()
        store.close()
        logging.getLogger().removeHandler(log_handler)
        log_handler.close()


def _assemble(topic: Topic, samples: list[Page], fetcher: PageFetcher, search: SearchClient,
              files: StateFiles, state: DiscoveryState) -> Discovery:
    settings = topic.settings
    memory = OperatorMemory.from_dict(state.memory)
    queries = topic_queries(settings.keywords, topic.name, samples)
    discovery = Discovery(fetcher, None, make_chooser(settings.discovery_chooser, state.chooser),
                          files, state, topic.samples.relevant, topic.samples.irrelevant,
                          settings.keywords, settings)
    discovery.operators = Operators(search, memory, queries, discovery.corpus.in_links)
    discovery.operators.is_known = discovery.attempted.__contains__
    return discovery


def _sample_pages(topic: Topic) -> list[Page]:
    """The relevant samples as pages (their titles and meta make search queries)."""
    folder = topic.path / "samples" / "relevant"
    if not folder.is_dir():
        return []
    pages = []
    for file in sorted(folder.iterdir()):
        parsed = parse_sample(file) if file.suffix.lower() in SAMPLE_SUFFIXES else None
        if parsed is not None:
            pages.append(Page(url=file.name, host="", title=parsed.title,
                              description=parsed.description, keywords=parsed.keywords))
    return pages


def _check_output_files(*paths: Path | str | None) -> None:
    """Before anything is fetched: each output file's folder exists and is writable."""
    for path in paths:
        if path is None:
            continue
        folder = Path(path).parent
        if Path(path).is_dir():
            raise DiscoverySetupError(f"{path}: is a directory, give a file name")
        if not folder.is_dir():
            raise UnavailableError(f"{path}: folder {folder} does not exist")
        if not os.access(folder, os.W_OK):
            raise UnavailableError(f"{path}: folder {folder} is not writable")


def _prepare_workdir(workdir: Path, resume: bool, fresh: bool) -> StateFiles:
    if workdir.exists() and not workdir.is_dir():
        raise DiscoverySetupError(f"--workdir {workdir}: exists and is not a directory")
    if resume and fresh:
        raise DiscoverySetupError("--resume and --fresh together: continue the run or start "
                                  "over, not both")
    files = StateFiles(workdir)
    if fresh:
        for name in ("crawl.db", "crawl.db-wal", "crawl.db-shm", "discover.log"):
            (workdir / name).unlink(missing_ok=True)
        shutil.rmtree(files.folder, ignore_errors=True)
        shutil.rmtree(workdir / "pages", ignore_errors=True)
    if resume:
        if not files.exists():
            raise DiscoverySetupError(f"cannot resume: {workdir} holds no discovery run; start "
                                      "one without --resume")
        check_resumable(str(workdir / "crawl.db"))
    elif files.exists() or (workdir / "crawl.db").exists():
        raise DiscoverySetupError(f"{workdir} already holds a run: continue it with --resume, "
                                  "start over with --fresh, or pick another --workdir")
    check_writable(workdir)
    return files


def _summarise(discovery: Discovery, report: DiscoveryReport, reason: str, elapsed: float,
               fetched_before: int, search: SearchClient, workdir: Path,
               paths: dict[str, str]) -> DiscoverySummary:
    rounds: dict[str, int] = {}
    for row in discovery.state.history:
        rounds[row["operator"]] = rounds.get(row["operator"], 0) + 1
    return DiscoverySummary(
        reason=reason, rounds=discovery.state.round,
        fetched=discovery.fetcher.fetched(), fetched_before=fetched_before,
        pages=len(discovery.corpus.pages), sites=len(report.sites),
        relevant_sites=sum(site.relevant_pages > 0 for site in report.sites),
        searches=search.requests, search_failures=search.failures, elapsed=elapsed,
        workdir=str(workdir), sites_file=paths["sites"], pages_file=paths["pages"],
        seeds_file=paths.get("seeds", ""), topic_dir=paths.get("topic", ""), operators=rounds)
