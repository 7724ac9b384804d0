"""The progress bar of a crawl and its closing summary."""

from __future__ import annotations

import logging
import math
import shlex
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from jlse.records import Outcome
from jlse.redact import strip_credentials
from jlse.scheduler.frontier import HoldUps
from jlse.scheduler.robots import NOT_THERE_RETRY_AFTER
from jlse.settings import Settings

log = logging.getLogger(__name__)

NOTE_LOG_EVERY = 60.0  # seconds between crawl.log lines of a lasting hold-up

# A host answered (a page, an error status, a robots.txt that forbids) / no host could be asked.
ANSWERED = frozenset(o.value for o in (
    Outcome.OK, Outcome.NOT_HTML, Outcome.HTTP_ERROR, Outcome.REDIRECT,
    Outcome.TOO_MANY_REDIRECTS, Outcome.TOO_LARGE, Outcome.PARSE_ERROR,
    Outcome.ROBOTS_DISALLOWED))
UNREACHABLE = frozenset(o.value for o in (
    Outcome.CONNECTION_ERROR, Outcome.TIMEOUT, Outcome.ROBOTS_UNAVAILABLE))


class CrawlProgress:
    """A tqdm bar: pages fetched of the budget, relevant, harvest rate, frontier size, pages/s."""

    def __init__(self, total: int, initial: int = 0, enabled: bool | None = None) -> None:
        if enabled is None:
            enabled = sys.stderr.isatty()
        self._bar = tqdm(total=total, initial=initial, unit="page", disable=not enabled,
                         dynamic_ncols=True, smoothing=0.1)
        self._last_postfix = 0.0
        self._seeds: SeedWatch | None = None
        self._postfix: dict[str, Any] = {}
        self._note = ""  # why the crawl runs below its concurrency (hold_up_note)
        self._note_logged = -math.inf

    def watch_seeds(self, seeds: int, settings: Settings) -> None:
        """Warn on screen when every seed URL was turned back before any page was fetched."""
        self._seeds = SeedWatch(seeds, settings)

    def update(self, counters: Mapping[str, int], frontier_size: int,
               counted: bool = True) -> None:
        if counted:
            self._bar.update(1)
        if self._seeds is not None:
            self._seeds.check(counters)
        now = time.monotonic()
        if now - self._last_postfix < 0.25:
            return
        self._last_postfix = now
        fetched, relevant = counters.get("fetched", 0), counters.get("relevant", 0)
        harvest = relevant / fetched if fetched else 0.0
        self._postfix = {"relevant": relevant, "harvest": f"{harvest:.2f}",
                         "frontier": frontier_size}
        self._show_postfix(refresh=False)

    def note(self, text: str) -> None:
        """Say why the crawl is slow ("" once it is not); in crawl.log too, once a minute."""
        now = time.monotonic()
        if text and (not self._note or now - self._note_logged >= NOTE_LOG_EVERY):
            log.info("below concurrency: %s", text)
            self._note_logged = now
        if text != self._note:
            self._note = text
            self._show_postfix(refresh=True)

    def _show_postfix(self, refresh: bool) -> None:
        self._bar.set_postfix(self._postfix, refresh=False)
        if self._note:
            self._bar.postfix = f"{self._bar.postfix}, {self._note}".lstrip(", ")
        if refresh:
            self._bar.refresh()

    def close(self) -> None:
        self._bar.close()


def hold_up_note(hold_ups: HoldUps) -> str:
    """What holds the crawl back, for the progress line ("" when nothing is held)."""
    parts = []
    if hold_ups.waiting:
        hosts = f"{hold_ups.waiting} busy host{'' if hold_ups.waiting == 1 else 's'}"
        parts.append(f"waiting for {hosts} (politeness)")
    if hold_ups.low_urls:
        parts.append(f"{hold_ups.low_urls} low-priority URLs of {hold_ups.low_hosts} "
                     f"host{'' if hold_ups.low_hosts == 1 else 's'} held back (priority_slack)")
    return "; ".join(parts)


class SeedWatch:
    """Says early that nothing can be crawled: once every seed URL was turned back (its host's
    robots.txt unavailable: host not found, connection refused, server error) and no page was
    fetched, one warning; the crawl still retries as its settings say."""

    def __init__(self, seeds: int, settings: Settings) -> None:
        self.seeds = seeds
        self.retry_after = settings.robots_retry_after
        self.retries = settings.robots_unavailable_retries
        self.warned = False

    def check(self, counters: Mapping[str, float]) -> bool:
        """Warn if it is time to; True once it has warned."""
        if self.warned or counters.get("fetched", 0) or counters.get("requeued", 0) < self.seeds:
            return self.warned
        self.warned = True
        log.warning("no seed host could be reached so far: robots.txt of every seed host failed "
                    "(host not found, connection refused or server error; details in "
                    "crawl.log). Retrying each host %d times (one not found or refusing "
                    "connections every %.0f s, one timing out or answering 5xx every %.0f s), "
                    "then giving up", self.retries,
                    min(self.retry_after, NOT_THERE_RETRY_AFTER), self.retry_after)
        return True


@dataclass
class CrawlSummary:
    reason: str
    fetched: int
    relevant: int
    targets: int
    elapsed: float
    frontier_left: int
    store_url: str
    outcomes: dict[str, int] = field(default_factory=dict)
    cpu_ms_per_page: dict[str, float] = field(default_factory=dict)
    classified: bool = True
    qtable_version: int = 0  # the learner's last Q-table (jlse strategies)
    unfinished: int = 0  # pages in flight when the crawl ended: still queued (--resume)
    fetched_before: int = 0  # pages a resumed crawl had fetched before this session
    workdir: str = ""  # the embedded crawl's workdir ("" in distributed mode)
    deferred: int = 0  # URLs found while their shard was down, waiting in the crawl database

    @property
    def harvest_rate(self) -> float:
        return self.relevant / self.fetched if self.fetched else 0.0

    @property
    def session_fetched(self) -> int:
        """Pages fetched in this session (a resumed crawl's earlier pages not included)."""
        return max(self.fetched - self.fetched_before, 0)

    @property
    def pages_per_second(self) -> float:
        """This session's pages over this session's time."""
        return self.session_fetched / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def reached_nothing(self) -> bool:
        """No host answered at all, and some could not be reached (DNS, connection,
        robots.txt): nothing could be crawled."""
        answered = sum(self.outcomes.get(outcome, 0) for outcome in ANSWERED)
        failed = sum(self.outcomes.get(outcome, 0) for outcome in UNREACHABLE)
        return answered == 0 and failed > 0 and self.reason != "interrupted"

    def export_line(self) -> str:
        """The export command of this crawl: its workdir (the crawl database, the pages); a
        database elsewhere as ``--store`` without its password (export reads PGPASSWORD or
        ~/.pgpass, as the crawl did)."""
        args = []
        if not self.workdir or not _is_workdir_db(self.store_url, self.workdir):
            args += ["--store", strip_credentials(self.store_url)]
        if self.workdir:
            args += ["--workdir", self.workdir]
        return (f"  export with     jlse export {shlex.join(args)} --format csv "
                "--out pages.csv")

    def to_dict(self) -> dict[str, Any]:
        data = dict(self.__dict__)
        data["harvest_rate"] = round(self.harvest_rate, 4)
        data["pages_per_second"] = round(self.pages_per_second, 2)
        data["session_fetched"] = self.session_fetched
        return data

    def render(self, with_export: bool = True) -> str:
        lines = [f"Crawl ended: {self.reason}", self._pages_line()]
        if self.classified:
            lines.append(f"  relevant        {self.relevant}  (harvest rate {self.harvest_rate:.3f})")
            lines.append(f"  target pages    {self.targets}")
        else:
            lines.append("  relevance       not judged (the topic has no samples or keywords)")
        lines.append(f"  frontier left   {self.frontier_left}")
        if self.deferred:
            lines.append(f"  deferred        {self.deferred}  (found while their shard was "
                         "down; in the crawl database: --resume queues them)")
        if self.unfinished:
            lines.append(f"  unfinished      {self.unfinished}  (in flight at the end; still "
                         "queued: --resume fetches them)")
        if self.outcomes:
            parts = ", ".join(f"{k} {v}" for k, v in sorted(self.outcomes.items(), key=lambda kv: -kv[1]))
            lines.append(f"  outcomes        {parts}")
        if self.cpu_ms_per_page:
            parts = ", ".join(f"{k} {v:.2f}" for k, v in self.cpu_ms_per_page.items())
            lines.append(f"  CPU ms/page     {parts}")
        lines.append(f"  crawl database  {self.store_url}")
        if with_export and not self.reached_nothing:
            lines.append(self.export_line())
        return "\n".join(lines)

    def _pages_line(self) -> str:
        rate = f"{self.pages_per_second:.1f} pages/s"
        if not self.fetched_before:
            return f"  pages fetched   {self.fetched}  in {self.elapsed:.1f} s  ({rate})"
        return (f"  pages fetched   {self.fetched}  ({self.session_fetched} in this session, "
                f"{self.elapsed:.1f} s: {rate})")


def _is_workdir_db(store_url: str, workdir: str) -> bool:
    """Whether ``store_url`` is the workdir's own crawl.db (what --workdir alone opens)."""
    prefix = "sqlite:///"
    return store_url.startswith(prefix) and \
        Path(store_url[len(prefix):]) == (Path(workdir) / "crawl.db").resolve()
