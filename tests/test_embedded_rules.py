"""The embedded runner's low-priority rule, the same scenario as tests/test_dispatcher_rules.py.

One hot host with URLs at 1.0 .. 0.7 and junk (0.1) on six hosts, ready at once. Pages run on a
real ThreadPagePool whose page function answers at once with nothing fetched, so the test
pins the order in which the runner starts URLs, not what a web answered.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest

from jlse.embedded import EmbeddedCrawler
from jlse.models.strategies import BreadthFirst
from jlse.records import CrawlTask, NewLink
from jlse.scheduler.store import open_store
from jlse.settings import Settings
from jlse.workers.engine import build_engine, local_backends
from jlse.workers.page_pool import ThreadPagePool
from jlse.workers.pipeline import PageResult

HOT = [f"http://hot.test/{i}" for i in range(4)]
LOW_HOSTS = [f"low{i}.test" for i in range(6)]


def _started_priorities(tmp_path, share: float) -> list[float]:
    settings = Settings(strategy="bfs", politeness_delay=0.0, obey_robots=False,
                        priority_slack=0.5, low_priority_slots=8, low_priority_share=share,
                        concurrency=8, domain_diversity=1)
    store = open_store(f"sqlite:///{tmp_path / 'crawl.db'}")
    frontier, ledger = local_backends(settings)
    engine = build_engine(settings, store, frontier, ledger, BreadthFirst(), None,
                          robots_turn=True)
    links = [NewLink(url, None, 0, priority=1.0 - 0.1 * i) for i, url in enumerate(HOT)]
    links += [NewLink(f"http://{host}/{n}", None, 0, priority=0.1)
              for host in LOW_HOSTS for n in range(2)]
    engine.add_links(links, {})
    started: list[float] = []

    def page(task: CrawlTask) -> PageResult:
        started.append(task.priority)
        return PageResult(task)  # nothing fetched: the URL is simply done

    _run_to_the_end(settings, engine, ThreadPagePool(page, threads=8))
    return started


def _run_to_the_end(settings: Settings, engine, pool: ThreadPagePool) -> None:
    """Start and write pages until the frontier is empty; then close everything."""
    crawler = EmbeddedCrawler(settings, engine, pool=pool)
    try:
        while len(engine.frontier) or pool.in_flight():
            crawler._submit_ready(pool)
            crawler._write_all(pool.collect(timeout=1.0))
    finally:
        pool.close()
        engine.close()
        engine.store.close()


def test_low_urls_are_at_most_their_share_of_the_pages_started(tmp_path) -> None:
    started = _started_priorities(tmp_path, share=0.25)
    while_hot = started[:started.index(0.7) + 1]  # until the hot host's last URL started
    assert while_hot.count(0.1) <= 0.25 * len(while_hot) + 1, started
    assert sorted(started) == sorted([0.1] * 12 + [1.0, 0.9, 0.8, 0.7])  # none starved


def test_with_share_one_the_low_slots_alone_limit_junk(tmp_path) -> None:
    """The control: with low_priority_share 1 the junk fills the free slots at once."""
    started = _started_priorities(tmp_path, share=1.0)
    assert started[:2] == [1.0, 0.1] and started.index(0.7) > 6, started


def test_first_ctrl_c_asks_the_crawl_to_stop_and_a_second_interrupts() -> None:
    from jlse.embedded import _first_interrupt_stops

    class Crawl:
        stopped = 0

        def stop(self) -> None:
            self.stopped += 1

    crawl = Crawl()
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        with _first_interrupt_stops(crawl):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)  # the handler runs between bytecodes of the main thread
            assert crawl.stopped == 1  # no KeyboardInterrupt at an arbitrary line
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1.0)
    assert crawl.stopped == 1
    assert signal.getsignal(signal.SIGINT) is before  # restored


class _ShortLinksWaste(BreadthFirst):
    """As if the crawl had learnt that its short links (``/s/``) redirect to pages it has."""

    def __init__(self, lift: float) -> None:
        super().__init__()
        self.lift = lift

    def pop_lift(self, url: str) -> float:
        return self.lift if "/s/" in url else 1.0


def _short_links_engine(tmp_path, lift: float, links: list[NewLink]):
    """One URL at a time, short links' priority x ``lift`` at pop; ``links`` queued."""
    settings = Settings(strategy="bfs", politeness_delay=0.0, obey_robots=False,
                        concurrency=1, domain_diversity=1)
    store = open_store(f"sqlite:///{tmp_path / 'crawl.db'}")
    frontier, ledger = local_backends(settings)
    engine = build_engine(settings, store, frontier, ledger, _ShortLinksWaste(lift), None,
                          robots_turn=True)
    engine.add_links(links, {})
    return settings, engine


def test_popped_urls_are_re_ranked_by_what_was_learnt_since(tmp_path) -> None:
    settings, engine = _short_links_engine(
        tmp_path, 0.05, [NewLink(f"http://w{i}.test/s/{i}", None, 0, priority=0.9) for i in range(3)]
        + [NewLink(f"http://d{i}.test/story-{i}", None, 0, priority=0.5) for i in range(3)])
    started: list[tuple[str, float]] = []
    _run_to_the_end(settings, engine, ThreadPagePool(
        lambda task: started.append((task.url, task.priority)) or PageResult(task), threads=1))
    assert [url.split("/")[3] for url, _ in started] == ["story-0", "story-1", "story-2"] + ["s"] * 3
    assert [priority for _, priority in started[3:]] == pytest.approx([0.9 * 0.05] * 3)


def test_a_url_put_back_and_found_again_higher_starts_at_its_raised_priority(tmp_path) -> None:
    short = "http://w.test/s/1"
    settings, engine = _short_links_engine(
        tmp_path, 0.5, [NewLink(short, None, 0, priority=0.3)]  # popped: 0.15, put back
        + [NewLink(f"http://d{i}.test/story-{i}", None, 0, priority=0.2) for i in range(3)])
    started: list[str] = []

    def page(task: CrawlTask) -> PageResult:
        started.append(task.url)
        found_again = [NewLink(short, None, 1, priority=0.9)] if task.url.endswith("story-0") \
            else []
        return PageResult(task, links=found_again)

    _run_to_the_end(settings, engine, ThreadPagePool(page, threads=1))
    assert started[:2] == ["http://d0.test/story-0", short]  # 0.9 x 0.5, before the stories


def test_a_url_put_back_costs_its_host_no_delay() -> None:
    from jlse.scheduler.frontier import LocalFrontier

    frontier = LocalFrontier(delay=5.0)
    frontier.push(CrawlTask(url="http://a.test/s/1", url_id=1, priority=0.9))
    task = frontier.pop()
    frontier.put_back(CrawlTask(url=task.url, url_id=1, priority=0.1))
    again = frontier.pop()
    assert again is not None and again.priority == 0.1  # the host was not held back


def test_a_host_sleeping_long_does_not_hold_the_ready_hosts_back(tmp_path) -> None:
    """The hot host's best URL waits 10 minutes (its robots.txt answered 500: requeued with
    robots_retry_after): the junk hosts are ready and nothing better may go within
    LOW_AFTER_IDLE, so their URLs are not "low" and fill the free slots at once, not one low
    slot and then one page per LOW_AFTER_IDLE."""
    settings = Settings(strategy="bfs", politeness_delay=0.0, obey_robots=False,
                        priority_slack=0.5, low_priority_slots=1, low_priority_share=0.1,
                        concurrency=8, domain_diversity=1)
    store = open_store(f"sqlite:///{tmp_path / 'crawl.db'}")
    frontier, ledger = local_backends(settings)
    engine = build_engine(settings, store, frontier, ledger, BreadthFirst(), None,
                          robots_turn=True)
    engine.add_links([NewLink(HOT[0], None, 0, priority=1.0)] +
                     [NewLink(f"http://{host}/{n}", None, 0, priority=0.1)
                      for host in LOW_HOSTS for n in range(2)], {})
    hot = frontier.pop()
    assert hot.url == HOT[0] and frontier.finish(hot, requeue=True, delay=600.0)[0]
    pool = ThreadPagePool(PageResult, threads=8)
    crawler = EmbeddedCrawler(settings, engine, pool=pool)
    try:
        crawler._submit_ready(pool)
        assert crawler._started == len(LOW_HOSTS)  # one per junk host: each is ready
        assert crawler._low_priority_bound() == 0.5 * 0.1
    finally:
        pool.close()
        engine.close()
        engine.store.close()


class _SeedsFirst(BreadthFirst):
    """Seeds at 1.0, every link at 0.5: "low" (below priority_slack 0.8) while a seed waits."""

    def score_links(self, page_relevance, depth, anchors, urls, contexts,
                    parent_priority=1.0, page_text="", page_url="") -> np.ndarray:
        return np.full(len(urls), 0.5)


def test_a_host_whose_robots_txt_fails_does_not_throttle_the_crawl(sandbox, tmp_path) -> None:
    """A real crawl of the sandbox web: matchday.test's robots.txt answers 500, so its seed,
    the best URL queued, waits ``robots_retry_after``. The other site's links are not "low"
    against it: the 40 pages take seconds. (Against it, one page per LOW_AFTER_IDLE: the stop
    below ended the crawl short of them.)"""
    settings = Settings(strategy="bfs", politeness_delay=0.0, proxy=sandbox.proxy_url,
                        robots_retry_after=600.0, concurrency=4, max_pages=40,
                        domain_diversity=1)
    store = open_store(f"sqlite:///{tmp_path / 'crawl.db'}")
    frontier, ledger = local_backends(settings)
    engine = build_engine(settings, store, frontier, ledger, _SeedsFirst(), None,
                          robots_turn=True)
    crawler = EmbeddedCrawler(settings, engine)
    crawler.add_seeds(["http://matchday.test/", "http://recipe-box.test/"], 1.0)
    stop = threading.Timer(120.0, crawler.stop)  # far beyond the few seconds it takes
    stop.start()
    try:
        reason = crawler.run()
    finally:
        stop.cancel()
        engine.close()
        store.close()
    assert reason == "page budget reached", (reason, crawler.counters)
    assert frontier.best_priority() == 1.0  # matchday.test's seed, still waiting
