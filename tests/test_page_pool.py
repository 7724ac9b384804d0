"""The page pools: threads, and forked page processes (JSON over pipes, host affinity)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from jlse.records import CrawlTask, FetchRecord, NewLink, Outcome
from jlse.workers.page_pool import ProcessPagePool, ThreadPagePool
from jlse.workers.pipeline import PageResult

RELEASE = threading.Event()


def fake_page(task: CrawlTask) -> PageResult:
    """A page answered without the network; ``/slow`` pages wait, ``/hang`` waits for RELEASE."""
    if task.url.endswith("/slow"):
        time.sleep(0.5)
    if task.url.endswith("/hang"):
        RELEASE.wait(30)
    record = FetchRecord(task.url_id, task.url, Outcome.OK, relevance=0.5, title=f"pid {os.getpid()}")
    link = NewLink(url=task.url + "/child", parent_id=task.url_id, depth=1, anchor_text="手机")
    return PageResult(task, fetch=record, links=[link], cpu={"parse": 0.001})


def collect_all(pool, expected: int, timeout: float = 20.0) -> list[PageResult]:
    results: list[PageResult] = []
    deadline = time.monotonic() + timeout
    while len(results) < expected and time.monotonic() < deadline:
        results += pool.collect(timeout=0.2)
    return results


@pytest.fixture()
def process_pool():
    pool = ProcessPagePool(fake_page, processes=2, threads=4)
    yield pool
    pool.close()


def test_page_processes_return_every_result_as_sent(process_pool):
    tasks = [CrawlTask(url=f"http://h{i % 5}.test/{i}", url_id=i) for i in range(40)]
    for task in tasks:
        process_pool.submit(task)
    results = collect_all(process_pool, 40)
    assert sorted(r.task.url_id for r in results) == list(range(40))
    assert all(r.links[0].anchor_text == "手机" and r.fetch.outcome is Outcome.OK
               for r in results)
    assert not process_pool.in_flight()
    pids = {r.fetch.title for r in results}
    assert len(pids) == 2 and f"pid {os.getpid()}" not in pids  # both page processes worked
    by_host = {}
    for r in results:  # host affinity: one host, one process (robots.txt fetched once)
        by_host.setdefault(r.task.url.split("/")[2], set()).add(r.fetch.title)
    assert all(len(titles) == 1 for titles in by_host.values())


def test_a_killed_page_process_gives_its_pages_back(process_pool):
    tasks = [CrawlTask(url=f"http://h{i}.test/slow", url_id=i) for i in range(8)]
    for task in tasks:
        process_pool.submit(task)
    victim = process_pool._procs[0]
    os.kill(victim.pid, signal.SIGKILL)
    results, lost = [], []
    deadline = time.monotonic() + 20
    while len(results) + len(lost) < 8 and time.monotonic() < deadline:
        results += process_pool.collect(timeout=0.2)
        lost += process_pool.take_lost()
    assert lost and len(results) + len(lost) == 8
    assert {t.url_id for t in lost}.isdisjoint(r.task.url_id for r in results)
    process_pool.submit(CrawlTask(url="http://h0.test/again", url_id=99))  # goes to the other
    assert [r.task.url_id for r in collect_all(process_pool, 1)] == [99]


def test_stragglers_hold_no_budget_slot_and_are_abandoned() -> None:
    RELEASE.clear()
    pool = ThreadPagePool(fake_page, threads=4)
    pool.submit(CrawlTask(url="http://a.test/hang", url_id=1))
    pool.submit(CrawlTask(url="http://b.test/ok", url_id=2))
    pool.submit(CrawlTask(url="http://c.test/hang", url_id=3), holds_budget=False)
    assert [r.task.url_id for r in collect_all(pool, 1)] == [2]
    assert pool.running(60, budget_only=True) == 1  # the page of a host without robots.txt: 0
    assert pool.running(60) == 2
    time.sleep(0.3)
    assert pool.running(0.2) == 0 and pool.running(60, budget_only=True) == 1
    assert sorted(t.url_id for t in pool.abandon()) == [1, 3]
    RELEASE.set()
    assert pool.collect(timeout=0.5) == []  # the abandoned page's late result is dropped
    pool.close()


@pytest.mark.parametrize("kind", ["threads", "processes"])
def test_robots_waits_run_beside_busy_page_threads(kind) -> None:
    """Every page thread hangs; tasks of hosts whose robots.txt is not known yet (holding no
    budget slot) still run at once, each on a thread of its own."""
    RELEASE.clear()
    pool = ThreadPagePool(fake_page, threads=2) if kind == "threads" else \
        ProcessPagePool(fake_page, processes=1, threads=2)
    try:
        for n in range(2):
            pool.submit(CrawlTask(url=f"http://a.test/{n}/hang", url_id=n))
        for n in range(2, 12):
            pool.submit(CrawlTask(url=f"http://h{n}.test/slow", url_id=n), holds_budget=False)
        assert pool.waiting_for_robots() == 10
        started = time.monotonic()
        assert sorted(r.task.url_id for r in collect_all(pool, 10)) == list(range(2, 12))
        assert time.monotonic() - started < 3.0  # queued behind the hanging pages: never
        assert pool.waiting_for_robots() == 0 and len(pool.in_flight()) == 2
    finally:
        RELEASE.set()
        pool.close()


def test_page_processes_learn_the_model_version() -> None:
    seen: list[int] = []

    def refresh(version: int) -> bool:
        seen.append(version)  # in the page process; reported back through the title
        return version != 3  # version 3's file is "not there yet": asked again

    def page(task: CrawlTask) -> PageResult:
        return PageResult(task, fetch=FetchRecord(task.url_id, task.url, Outcome.OK,
                                                  title=",".join(map(str, seen))))

    pool = ProcessPagePool(page, processes=1, threads=1, refresh=refresh)
    try:
        for url_id, version in enumerate([0, 0, 2, 3, 3, 4]):
            pool.submit(CrawlTask(url=f"http://a.test/{url_id}", url_id=url_id), version)
            collect_all(pool, 1)
        pool.submit(CrawlTask(url="http://a.test/last", url_id=9), 4)
        assert collect_all(pool, 1)[0].fetch.title == "0,2,3,3,4"
    finally:
        pool.close()


def test_page_processes_end_when_the_crawl_process_is_killed(tmp_path) -> None:
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(os.path.dirname(__file__))!r})
        from test_page_pool import fake_page
        from jlse.workers.page_pool import ProcessPagePool
        pool = ProcessPagePool(fake_page, processes=2, threads=2)
        print(" ".join(str(p.pid) for p in pool._procs), flush=True)
        time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    pids = [int(pid) for pid in proc.stdout.readline().split()]
    assert len(pids) == 2
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(pid) for pid in pids)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except FileNotFoundError:
        return False
