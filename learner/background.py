"""The embedded mode's learner: a thread of the crawl process that re-learns every ``cf`` results.

The crawl's writer calls ``notify(result_count)`` after each write; it only flips a flag, so
fetching never waits for learning. The thread reads the crawl database through its own
connection (SQLite in WAL mode lets it read while the writer writes) and swaps each new Q-table
into a ``QTableHolder``, where the link evaluators read it. The same thread learns ``cfc``'s layer
model when given its learner (``learner.context_graph``).
"""

from __future__ import annotations

import logging
import re
import threading
from pathlib import Path
from typing import Any

from jlse.learner.incremental import IncrementalLearner
from jlse.models.holder import ModelHolder
from jlse.models.qtable import QTable
from jlse.scheduler.store import CrawlStore, StoreError, open_store
from jlse.scheduler.store.base import redact_url
from jlse.settings import Settings

log = logging.getLogger(__name__)

KEEP_VERSIONS = 3  # Q-table files kept in qtable_dir
_FILE_NAME = re.compile(r"^qtable-v(\d+)\.npz$")


def qtable_file_name(version: int) -> str:
    return f"qtable-v{version}.npz"


QTableHolder = ModelHolder  # the name the Q-table users know


class BackgroundLearner:
    """Learns a new Q-table version each time the ResultTable has grown by ``settings.cf``.

    A failed round is logged (``last_error`` holds the most recent failure) and the crawl goes
    on with the previous table. ``learner`` (default: the JLSE ``IncrementalLearner``, which
    keeps G_w between rounds and reads it whole only on its first round) is anything with
    ``learn(store, version)`` returning a model with a ``version``, or None; only Q-tables are
    saved to ``qtable_dir``.
    """

    def __init__(self, settings: Settings, store_url: str, holder: QTableHolder,
                 qtable_dir: Path | None = None, keep_versions: int = KEEP_VERSIONS,
                 learner: Any = None) -> None:
        self.settings = settings
        self.store_url = store_url
        self.holder = holder
        self.qtable_dir = Path(qtable_dir) if qtable_dir is not None else None
        self.keep_versions = max(1, keep_versions)
        self.learner = learner if learner is not None else IncrementalLearner(settings)
        self.learned_versions = 0  # Q-tables learned by this instance
        self.last_error: str | None = None
        self._version = max(holder.version, self._latest_saved_version())
        self._next_learn_at = settings.cf  # result count that triggers the next round
        self._state = threading.Condition()
        self._pending = False
        self._running = False
        self._stopping = False
        self._thread: threading.Thread | None = None

    # --- the crawl's side ---
    def notify(self, result_count: int) -> None:
        """Schedule a round if ``result_count`` reached the next multiple of cf; never waits."""
        with self._state:
            if result_count < self._next_learn_at:
                return
            self._next_learn_at = result_count + self.settings.cf
            self._pending = True  # a round already running leaves at most this one more
            self._state.notify_all()

    def start(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="jlse-learner", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop after the round in progress, if any (waits at most ``timeout`` seconds)."""
        with self._state:
            self._stopping = True
            self._state.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.warning("learner: still learning after %.0f s; left to finish on its own",
                            timeout)

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until no round is running or scheduled; False if ``timeout`` ran out first."""
        with self._state:
            return self._state.wait_for(lambda: not (self._pending or self._running), timeout)

    # --- the learner thread ---
    def _loop(self) -> None:
        store: CrawlStore | None = None
        try:
            while self._next_round():
                try:
                    store = self._learn_round(store)
                finally:
                    with self._state:
                        self._running = False
                        self._state.notify_all()
        finally:
            if store is not None:
                store.close()

    def _next_round(self) -> bool:
        """Wait for a scheduled round and claim it; False when stopping."""
        with self._state:
            self._state.wait_for(lambda: self._pending or self._stopping)
            if self._stopping:
                return False
            self._pending = False
            self._running = True
            return True

    def _learn_round(self, store: CrawlStore | None) -> CrawlStore | None:
        """One round; returns the store connection to reuse (None after a store failure)."""
        try:
            if store is None:
                store = open_store(self.store_url)
            version = self._version + 1
            table = self.learner.learn(store, version)
            if isinstance(table, QTable):
                table.index.prepare()  # the search structures, here and not on a fetch thread
            if table is not None:
                self._version = version
                self.holder.set(table)
                self.learned_versions += 1
                self._save(table)
        except Exception as exc:  # a learner failure must never end the crawl
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.exception("learner: round failed on %s; the crawl goes on with Q-table v%d",
                          redact_url(self.store_url), self.holder.version)
            if isinstance(exc, StoreError) and store is not None:
                store.close()  # reconnect next round
                store = None
        return store

    # --- Q-table files ---
    def _save(self, table: QTable) -> None:
        if self.qtable_dir is None or not isinstance(table, QTable):
            return
        path = self.qtable_dir / qtable_file_name(table.version)
        try:
            self.qtable_dir.mkdir(parents=True, exist_ok=True)
            table.save(path)
        except OSError as exc:
            self.last_error = f"could not save {path}: {exc}"
            log.error("learner: could not save Q-table v%d to %s: %s", table.version, path, exc)
            return
        self._rotate()

    def _saved_versions(self) -> list[int]:
        if self.qtable_dir is None or not self.qtable_dir.is_dir():
            return []
        names = (_FILE_NAME.match(path.name) for path in self.qtable_dir.iterdir())
        return sorted(int(match.group(1)) for match in names if match)

    def _latest_saved_version(self) -> int:
        return max(self._saved_versions(), default=0)

    def _rotate(self) -> None:
        for version in self._saved_versions()[:-self.keep_versions]:
            path = self.qtable_dir / qtable_file_name(version)
            try:
                path.unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:
                log.warning("learner: could not delete old Q-table %s: %s", path, exc)

