"""What a discovery run keeps in its workdir, so ``--resume`` continues it.

``discovery/pages.jsonl``  one line per page discovery fetched (appended each round)
``discovery/state.json``   round, operator chooser, operator memory, search cache (atomic)

Pages are also in the crawl database and the page repository (``fetching``): a page fetched
by a round that was cut short is rebuilt from there on ``--resume``, so none is lost.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from jlse.discovery.fetching import Page

log = logging.getLogger(__name__)

STATE_VERSION = 1


@dataclass
class DiscoveryState:
    round: int = 0
    chooser: dict = field(default_factory=dict)
    memory: dict = field(default_factory=dict)
    search_cache: dict[str, list[dict]] = field(default_factory=dict)
    history: list[dict] = field(default_factory=list)  # one row per round (operator, pages...)

    def to_dict(self) -> dict:
        return {"version": STATE_VERSION, "round": self.round, "chooser": self.chooser,
                "memory": self.memory, "search_cache": self.search_cache,
                "history": self.history}

    @classmethod
    def from_dict(cls, data: dict) -> DiscoveryState:
        if data.get("version") != STATE_VERSION:
            raise ValueError(f"discovery state version {data.get('version')!r}, expected "
                             f"{STATE_VERSION}")
        return cls(int(data["round"]), dict(data["chooser"]), dict(data["memory"]),
                   dict(data["search_cache"]), list(data.get("history", [])))


class StateFiles:
    """The discovery folder of a workdir."""

    def __init__(self, workdir: Path) -> None:
        self.folder = workdir / "discovery"
        self.pages_path = self.folder / "pages.jsonl"
        self.state_path = self.folder / "state.json"

    def exists(self) -> bool:
        return self.state_path.exists()

    def load(self) -> tuple[DiscoveryState, list[Page]]:
        try:
            state = DiscoveryState.from_dict(json.loads(self.state_path.read_text("utf-8")))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{self.state_path}: unreadable discovery state ({exc}); start "
                             "over with --fresh") from None
        return state, list(self._read_pages())

    def append_pages(self, pages: Iterable[Page]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        with self.pages_path.open("a", encoding="utf-8") as handle:
            for page in pages:
                handle.write(json.dumps(page.to_dict(), ensure_ascii=False) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def save(self, state: DiscoveryState) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        temp = self.state_path.with_suffix(".tmp")
        temp.write_text(json.dumps(state.to_dict(), ensure_ascii=False), encoding="utf-8")
        os.replace(temp, self.state_path)

    def _read_pages(self) -> Iterable[Page]:
        if not self.pages_path.exists():
            return
        with self.pages_path.open(encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                try:
                    yield Page.from_dict(json.loads(line))
                except (ValueError, TypeError):  # a line cut by a crash: rebuilt from the store
                    log.warning("%s:%d: unreadable line skipped", self.pages_path, number)
