"""Where the embedded crawl runs its pages: a pool of daemon threads.

The crawl's writer thread submits tasks and collects ``PageResult``s. The threads are daemons
so a page that hangs (a server trickling its headers, a read that never ends) never keeps the
process alive after the crawl is over: the crawl leaves such a page queued (``--resume``
fetches it again) instead of waiting for it.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from jlse.records import CrawlTask
from jlse.workers.pipeline import PageResult

_STOP = None


@dataclass
class InFlight:
    task: CrawlTask
    started: float  # monotonic


class ThreadPagePool:
    def __init__(self, process: Callable[[CrawlTask], PageResult], threads: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._process = process
        self._clock = clock
        self._tasks: queue.SimpleQueue[tuple[int, CrawlTask] | None] = queue.SimpleQueue()
        self._results: queue.SimpleQueue[tuple[int, PageResult]] = queue.SimpleQueue()
        self._in_flight: dict[int, InFlight] = {}
        self._next_id = 0
        self._threads = [threading.Thread(target=self._work, name=f"fetch-{i}", daemon=True)
                         for i in range(threads)]
        for thread in self._threads:
            thread.start()

    def submit(self, task: CrawlTask) -> None:
        self._next_id += 1
        self._in_flight[self._next_id] = InFlight(task, self._clock())
        self._tasks.put((self._next_id, task))

    def collect(self, timeout: float) -> list[PageResult]:
        """The results ready within ``timeout`` seconds (waits for the first one only)."""
        done = []
        try:
            done.append(self._results.get(timeout=timeout))
            while True:
                done.append(self._results.get_nowait())
        except queue.Empty:
            pass
        results = []
        for key, result in done:
            if self._in_flight.pop(key, None) is not None:  # not abandoned
                results.append(result)
        return results

    def in_flight(self) -> list[InFlight]:
        return list(self._in_flight.values())

    def stragglers(self, after: float) -> int:
        """Pages in flight for ``after`` seconds or more."""
        now = self._clock()
        return sum(now - page.started >= after for page in self._in_flight.values())

    def abandon(self) -> list[CrawlTask]:
        """Forget the pages in flight (their results will be dropped); their tasks."""
        tasks = [page.task for page in self._in_flight.values()]
        self._in_flight.clear()
        return tasks

    def close(self) -> None:
        """Let idle threads end; busy ones end with their page (daemons: never waited for)."""
        for _ in self._threads:
            self._tasks.put(_STOP)

    def _work(self) -> None:
        while (item := self._tasks.get()) is not _STOP:
            key, task = item
            self._results.put((key, self._process(task)))  # process never raises
