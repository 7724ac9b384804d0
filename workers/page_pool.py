"""Where the embedded crawl runs its pages: daemon threads, or forked page processes.

The crawl's writer thread submits tasks and collects ``PageResult``s; both pools offer the same
methods. ``ThreadPagePool`` runs ``CrawlEngine.process`` on threads of the crawl process (one
core: the GIL). ``ProcessPagePool`` forks page processes, each running the pipeline on its own
threads, so parsing and classifying use every core while the crawl process alone owns the
frontier and the database. Tasks and results cross the pipes as JSON (no pickle). A host always
goes to the same process, so each host's robots.txt is fetched once.

A task submitted as holding no budget slot (its host's robots.txt is not known yet: mostly a
wait for robots.txt, cheap I/O) runs on a thread of its own, never queued behind the pages: the
runner bounds how many are in flight (``robots_slots``).

Threads and processes are daemons: a page that hangs (a server trickling its headers) never
keeps the crawl alive after its end; such a page stays queued for ``--resume``.
"""

from __future__ import annotations

import gc
import json
import logging
import multiprocessing
import os
import queue
import signal
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait

from jlse.records import CrawlTask
from jlse.scheduler.urls import host_of
from jlse.workers.pipeline import PageResult

log = logging.getLogger(__name__)

_STOP = None


@dataclass
class InFlight:
    task: CrawlTask
    started: float  # monotonic
    worker: int = 0  # the page process running it
    holds_budget: bool = True  # False: its host's robots.txt is not known yet (see running)


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

    def submit(self, task: CrawlTask, model_version: int = 0, holds_budget: bool = True) -> None:
        self._next_id += 1
        self._in_flight[self._next_id] = InFlight(task, self._clock(), holds_budget=holds_budget)
        if holds_budget:
            self._tasks.put((self._next_id, task))
        else:
            _run_aside(self._run, (self._next_id, task))

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

    def running(self, straggler_after: float, budget_only: bool = False) -> int:
        """Pages in flight for less than ``straggler_after`` seconds (they hold a fetch slot);
        with ``budget_only``, those of them submitted as holding a budget slot."""
        now = self._clock()
        return sum(now - page.started < straggler_after
                   and (page.holds_budget or not budget_only)
                   for page in self._in_flight.values())

    def waiting_for_robots(self) -> int:
        """Tasks in flight submitted as holding no budget slot (their own threads)."""
        return sum(not page.holds_budget for page in self._in_flight.values())

    def take_lost(self) -> list[CrawlTask]:
        """Tasks whose page process died: the caller queues them again (none for threads)."""
        return []

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
            self._run(item)

    def _run(self, item: tuple[int, CrawlTask]) -> None:
        key, task = item
        self._results.put((key, self._process(task)))  # process never raises


class ProcessPagePool(ThreadPagePool):
    """``processes`` forked page processes with ``threads`` threads each.

    ``refresh(version)`` runs in a page process before a task whose ``model_version`` is new
    to it (a learning strategy's model, e.g. loading a Q-table the learner saved); it returns
    False to be asked again with the next task. Fork, so build the pool before the crawl
    starts its own threads."""

    def __init__(self, process: Callable[[CrawlTask], PageResult], processes: int,
                 threads: int, refresh: Callable[[int], bool] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._in_flight: dict[int, InFlight] = {}
        self._next_id = 0
        self._lost: list[CrawlTask] = []
        context = multiprocessing.get_context("fork")
        # What exists now (modules, the topic model, jieba's dictionary) is shared with the
        # page processes copy-on-write; the garbage collector would touch every object and
        # copy its page into each process, so it leaves these objects alone from now on.
        gc.collect()
        gc.freeze()
        self._conns: list[Connection | None] = []
        self._procs = []
        for number in range(processes):
            mine, theirs = context.Pipe(duplex=True)
            # the child closes the crawl's ends of the pipes: a page process must see EOF when
            # the crawl process dies, even if killed
            crawl_ends = [conn for conn in self._conns if conn is not None] + [mine]
            proc = context.Process(target=_page_process, name=f"jlse-pages-{number}",
                                   args=(theirs, crawl_ends, process, threads, refresh),
                                   daemon=True)
            proc.start()
            theirs.close()
            self._conns.append(mine)
            self._procs.append(proc)

    def submit(self, task: CrawlTask, model_version: int = 0, holds_budget: bool = True) -> None:
        worker = self._worker_for(task.url)
        self._next_id += 1
        self._in_flight[self._next_id] = InFlight(task, self._clock(), worker, holds_budget)
        message = json.dumps([self._next_id, task.to_dict(), model_version, holds_budget],
                             ensure_ascii=False)
        try:
            self._conns[worker].send_bytes(message.encode("utf-8", "surrogatepass"))
        except OSError:
            self._worker_died(worker)

    def _worker_for(self, url: str) -> int:
        live = [n for n, conn in enumerate(self._conns) if conn is not None]
        if not live:
            raise RuntimeError("every page process has died; continue with --resume")
        return live[zlib.crc32(host_of(url).encode("utf-8", "surrogatepass")) % len(live)]

    def collect(self, timeout: float) -> list[PageResult]:
        results = []
        for conn in wait([c for c in self._conns if c is not None], timeout):
            worker = self._conns.index(conn)
            try:
                while conn.poll():
                    key, _, body = conn.recv_bytes().partition(b"\n")
                    if self._in_flight.pop(int(key), None) is not None:  # not abandoned
                        results.append(PageResult.from_json(body))
            except (EOFError, OSError):
                self._worker_died(worker)
        return results

    def _worker_died(self, worker: int) -> None:
        log.error("page process %d died; its %d pages go back to the frontier", worker,
                  sum(page.worker == worker for page in self._in_flight.values()))
        self._conns[worker] = None
        for key in [k for k, page in self._in_flight.items() if page.worker == worker]:
            self._lost.append(self._in_flight.pop(key).task)

    def take_lost(self) -> list[CrawlTask]:
        lost, self._lost = self._lost, []
        return lost

    def close(self) -> None:
        """End the page processes (pages still running in them are abandoned)."""
        for conn in self._conns:
            if conn is not None:
                conn.close()
        for proc in self._procs:
            proc.join(timeout=1.0)
            if proc.is_alive():
                proc.terminate()


def _page_process(conn: Connection, crawl_ends: list[Connection],
                  process: Callable[[CrawlTask], PageResult], threads: int,
                  refresh: Callable[[int], bool] | None) -> None:
    """A page process: tasks in, results out, until the crawl closes the pipe."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl+C is the crawl process's to handle
    for end in crawl_ends:
        end.close()
    tasks: queue.SimpleQueue[tuple[int, CrawlTask] | None] = queue.SimpleQueue()
    send_lock = threading.Lock()

    def run(item: tuple[int, CrawlTask]) -> None:
        key, task = item
        body = process(task).to_json()  # process never raises
        try:
            with send_lock:
                conn.send_bytes(b"%d\n" % key + body)
        except OSError:  # the crawl closed the pipe: it is over
            os._exit(0)

    def work() -> None:
        while (item := tasks.get()) is not None:
            run(item)

    for number in range(threads):
        threading.Thread(target=work, name=f"page-{number}", daemon=True).start()
    version = -1
    try:
        while True:
            key, task, model_version, holds_budget = json.loads(conn.recv_bytes())
            if refresh is not None and model_version != version and refresh(model_version):
                version = model_version
            item = (key, CrawlTask.from_dict(task))
            if holds_budget:
                tasks.put(item)
            else:
                _run_aside(run, item)
    except (EOFError, OSError):
        pass
    os._exit(0)  # daemon threads may be inside a hanging fetch: do not wait for them


def _run_aside(run: Callable[[tuple[int, CrawlTask]], None], item: tuple[int, CrawlTask]
               ) -> None:
    """Run one task on a daemon thread of its own (a robots.txt wait: see the module doc)."""
    threading.Thread(target=run, args=(item,), name="robots", daemon=True).start()
