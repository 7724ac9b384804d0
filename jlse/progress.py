"""The progress bar of a crawl and its closing summary."""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tqdm import tqdm


class CrawlProgress:
    """A tqdm bar: pages fetched of the budget, relevant, harvest rate, frontier size, pages/s."""

    def __init__(self, total: int, initial: int = 0, enabled: bool | None = None) -> None:
        if enabled is None:
            enabled = sys.stderr.isatty()
        self._bar = tqdm(total=total, initial=initial, unit="page", disable=not enabled,
                         dynamic_ncols=True, smoothing=0.1)
        self._last_postfix = 0.0

    def update(self, counters: Mapping[str, int], frontier_size: int,
               counted: bool = True) -> None:
        if counted:
            self._bar.update(1)
        now = time.monotonic()
        if now - self._last_postfix < 0.25:
            return
        self._last_postfix = now
        fetched, relevant = counters.get("fetched", 0), counters.get("relevant", 0)
        harvest = relevant / fetched if fetched else 0.0
        self._bar.set_postfix(relevant=relevant, harvest=f"{harvest:.2f}",
                              frontier=frontier_size, refresh=False)

    def close(self) -> None:
        self._bar.close()


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

    @property
    def harvest_rate(self) -> float:
        return self.relevant / self.fetched if self.fetched else 0.0

    @property
    def pages_per_second(self) -> float:
        return self.fetched / self.elapsed if self.elapsed > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        data = dict(self.__dict__)
        data["harvest_rate"] = round(self.harvest_rate, 4)
        data["pages_per_second"] = round(self.pages_per_second, 2)
        return data

    def render(self) -> str:
        lines = [
            f"Crawl ended: {self.reason}",
            f"  pages fetched   {self.fetched}  in {self.elapsed:.1f} s"
            f"  ({self.pages_per_second:.1f} pages/s)",
        ]
        if self.classified:
            lines.append(f"  relevant        {self.relevant}  (harvest rate {self.harvest_rate:.3f})")
            lines.append(f"  target pages    {self.targets}")
        else:
            lines.append("  relevance       not judged (the topic has no samples or keywords)")
        lines.append(f"  frontier left   {self.frontier_left}")
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
        return "\n".join(lines)
