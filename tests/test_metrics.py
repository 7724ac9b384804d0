"""Prometheus endpoints: a running embedded crawl, the dispatcher (every active crawl in Redis)
and a fetch worker whose pages are written by forked children (multiprocess mode). Scraped over
HTTP and parsed with prometheus_client's own parser."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_scrape import free_port, scrape

from jlse.records import CrawlTask
from jlse.scheduler.dispatcher import Dispatcher
from jlse.scheduler.metrics import ClusterCollector, MetricsServer
from jlse.settings import Settings


def wait_for_scrape(port: int, proc: subprocess.Popen, timeout: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read()
        try:
            return scrape(port)
        except OSError:
            time.sleep(0.2)
    raise AssertionError("the metrics endpoint never answered")


def test_embedded_crawl_serves_metrics_that_move(sandbox, sandbox_web, tmp_path):
    topic = sandbox_web.write_topic_dir("phones", tmp_path / "phones")
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "jlse.cli", "crawl", "--topic", str(topic), "--workdir",
         str(tmp_path / "w"), "--max-pages", "150", "--strategy", "bfs", "--no-progress",
         "--set", f"proxy={sandbox.proxy_url}", "--set", f"metrics_port={port}",
         "--concurrency", "1", "--set", "politeness_delay=0.2", "--set", "page_processes=0"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    ok = ("jlse_pages_fetched_total", (("outcome", "ok"),))
    try:
        first = wait_for_scrape(port, proc)
        second = first
        while second.get(ok, 0) <= first.get(ok, 0):  # the values move while it crawls
            time.sleep(0.2)
            second = scrape(port)
    finally:
        proc.wait(timeout=120)
    assert proc.returncode == 0
    assert second[("jlse_crawl_pages", (("counter", "fetched"),))] >= second[ok] > 0
    assert ("jlse_frontier_queued", ()) in second and ("jlse_frontier_in_flight", ()) in second
    assert second[("jlse_fetch_seconds_count", ())] == sum(
        value for (name, _), value in second.items() if name == "jlse_pages_fetched_total")
    assert ("jlse_qtable_version", ()) in second
    with pytest.raises(OSError):  # the crawl is over: the endpoint is closed
        scrape(port)


def test_endpoint_binds_loopback_by_default():
    server = MetricsServer(0)
    try:
        assert server.addr == "127.0.0.1"
        assert server._server.server_address[0] == "127.0.0.1"
    finally:
        server.close()


def test_dispatcher_serves_every_active_crawl(registry, monkeypatch):
    settings = Settings(strategy="bfs", politeness_delay=0.0)
    registry.register("m1", {"crawl_id": "m1", "settings": settings.to_dict(),
                             "status": "running", "store_url": "", "max_pages": 100}, None, {})
    frontier = registry.frontier("m1", settings)
    frontier.push_many([CrawlTask(url=f"http://h{n}.test/", url_id=n + 1) for n in range(5)])
    registry.note_worker("m1", "w1:1", 3)
    registry.bump("m1", fetched=7, relevant=2)
    port = free_port()
    monkeypatch.setenv("JLSE_DISPATCHER_METRICS_PORT", str(port))
    dispatcher = Dispatcher(registry, send=lambda crawl_id, task: None)
    dispatcher.round = lambda: (0, 0.05)  # serve metrics only: no task is sent
    thread = threading.Thread(target=dispatcher.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                metrics = scrape(port)
                break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        crawl = (("crawl_id", "m1"),)
        assert metrics[("jlse_frontier_queued", crawl)] == 5
        assert metrics[("jlse_frontier_in_flight", crawl)] == 0
        assert metrics[("jlse_qtable_version", crawl)] == 3
        assert metrics[("jlse_crawl_pages", (("counter", "fetched"), *crawl))] == 7
        frontier.pop()  # a lease
        metrics = scrape(port)
        assert metrics[("jlse_frontier_queued", crawl)] == 4
        assert metrics[("jlse_frontier_in_flight", crawl)] == 1
    finally:
        dispatcher.stop()
        thread.join(timeout=5)


def test_cluster_collector_skips_no_crawl_when_none_is_active(registry):
    assert [family.samples for family in ClusterCollector(registry).collect()] == [[]] * 4


WORKER = textwrap.dedent("""
    import multiprocessing, os, sys, urllib.request
    from jlse.scheduler.metrics import observe_result, serve_worker

    server = serve_worker()  # as the worker's main process does before its pool forks

    def child(n):
        for _ in range(n):
            observe_result("ok", "ok", 0.2, relevant=True)
        observe_result("requeued", None, 0.0, relevant=False)

    procs = [multiprocessing.get_context("fork").Process(target=child, args=(n,))
             for n in (3, 4)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join()
    url = f"http://127.0.0.1:{server.port}/metrics"
    sys.stdout.write(urllib.request.urlopen(url, timeout=5).read().decode())
""")


def test_worker_endpoint_sums_its_pool_processes(tmp_path):
    port = free_port()
    env = dict(os.environ, JLSE_WORKER_METRICS_PORT=str(port))
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    done = subprocess.run([sys.executable, "-c", WORKER], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(done.stdout)
               for s in family.samples}
    assert samples[("jlse_pages_fetched_total", (("outcome", "ok"),))] == 7
    assert samples[("jlse_relevant_pages_total", ())] == 7
    assert samples[("jlse_urls_not_fetched_total", (("result", "requeued"),))] == 2
    assert samples[("jlse_fetch_seconds_count", ())] == 7
    assert samples[("jlse_fetch_seconds_bucket", (("le", "0.25"),))] == 7
