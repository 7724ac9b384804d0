"""Prometheus metrics (prometheus_client): a text endpoint for an embedded crawl, a fetch
worker and the dispatcher. Each binds 127.0.0.1 unless told otherwise (``JLSE_METRICS_ADDR``).

* The pages a process writes (``observe_result``, called by the engine's writer in both modes):
  ``jlse_pages_fetched_total{outcome}``, ``jlse_relevant_pages_total``,
  ``jlse_urls_not_fetched_total{result}`` (rejected, requeued, retried, postponed) and the
  histogram ``jlse_fetch_seconds``.
* A crawl's state, read when scraped: ``jlse_crawl_pages{counter}`` (fetched, relevant, targets,
  rejected, ...), ``jlse_frontier_queued``, ``jlse_frontier_in_flight`` (in a cluster: leases)
  and ``jlse_qtable_version``; in a cluster per ``crawl_id`` (the dispatcher serves them).

A Celery worker writes pages in its pool's child processes: with ``JLSE_WORKER_METRICS_PORT``
set, the worker's main process points prometheus_client's multiprocess mode at a private folder
before the pool forks and serves the sum over its children.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric

if TYPE_CHECKING:
    from jlse.scheduler.crawl_registry import CrawlRegistry
    from jlse.scheduler.frontier import Frontier

log = logging.getLogger(__name__)

DEFAULT_ADDR = "127.0.0.1"
WORKER_PORT_ENV = "JLSE_WORKER_METRICS_PORT"
DISPATCHER_PORT_ENV = "JLSE_DISPATCHER_METRICS_PORT"
ADDR_ENV = "JLSE_METRICS_ADDR"
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


class _PageMetrics:
    """What this process's writer recorded (created on first use: after a worker's fork)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.fetched = Counter("jlse_pages_fetched", "Pages fetched (a request was made), by "
                               "outcome", ["outcome"], registry=self.registry)
        self.relevant = Counter("jlse_relevant_pages", "Fetched pages judged relevant",
                                registry=self.registry)
        self.not_fetched = Counter("jlse_urls_not_fetched", "URLs written without a page fetch, "
                                   "by result", ["result"], registry=self.registry)
        self.latency = Histogram("jlse_fetch_seconds", "Seconds one page fetch took",
                                 buckets=LATENCY_BUCKETS, registry=self.registry)


_pages: _PageMetrics | None = None
_pages_lock = threading.Lock()


def page_metrics() -> _PageMetrics:
    global _pages
    if _pages is None:
        with _pages_lock:
            if _pages is None:
                _pages = _PageMetrics()
    return _pages


def observe_result(word: str, outcome: str | None, elapsed: float, relevant: bool) -> None:
    """One written result: ``outcome`` of its fetch (None: no page was fetched; ``word`` says
    what became of the URL)."""
    metrics = page_metrics()
    if outcome is None:
        metrics.not_fetched.labels(word).inc()
        return
    metrics.fetched.labels(outcome).inc()
    metrics.latency.observe(elapsed)
    if relevant:
        metrics.relevant.inc()


class CrawlCollector:
    """An embedded crawl's state, read from its frontier at each scrape."""

    def __init__(self, frontier: Frontier, qtable_version: Callable[[], int]) -> None:
        self.frontier = frontier
        self.qtable_version = qtable_version

    def collect(self) -> Iterator[Metric]:
        yield from _crawl_families([((), self.frontier.counters(), len(self.frontier),
                                     self.frontier.in_flight(), self.qtable_version())], [])


class ClusterCollector:
    """Every active crawl of a cluster, read from Redis at each scrape (the dispatcher's)."""

    def __init__(self, registry: CrawlRegistry) -> None:
        self.registry = registry

    def collect(self) -> Iterator[Metric]:
        rows = []
        for crawl_id in self.registry.active():
            try:
                frontier = self.registry.frontier(crawl_id).stats()
                counters = self.registry.counters(crawl_id)
                versions = self.registry.workers(crawl_id).values()
            except Exception as exc:  # noqa: BLE001 - a scrape must not fail on one crawl
                log.warning("metrics: crawl %s unreadable: %s", crawl_id, exc)
                continue
            rows.append(((crawl_id,), counters, frontier["queued"], frontier["in_flight"],
                         max(versions, default=0)))
        yield from _crawl_families(rows, ["crawl_id"])


def _crawl_families(rows: Iterable[tuple[tuple[str, ...], dict[str, Any], int, int, int]],
                    labels: list[str]) -> Iterator[Metric]:
    pages = GaugeMetricFamily("jlse_crawl_pages", "The crawl's counters (fetched, relevant, "
                              "targets, rejected, ...)", labels=[*labels, "counter"])
    queued = GaugeMetricFamily("jlse_frontier_queued", "URLs queued in the frontier", labels=labels)
    in_flight = GaugeMetricFamily("jlse_frontier_in_flight", "URLs being fetched (in a cluster: "
                                  "leased)", labels=labels)
    version = GaugeMetricFamily("jlse_qtable_version", "Q-table version in use", labels=labels)
    for key, counters, n_queued, n_in_flight, qtable in rows:
        for name, value in sorted(counters.items()):
            if not name.startswith("cpu_"):
                pages.add_metric([*key, name], float(value))
        queued.add_metric(list(key), n_queued)
        in_flight.add_metric(list(key), n_in_flight)
        version.add_metric(list(key), qtable)
    yield from (pages, queued, in_flight, version)


class _Chain:
    """One collector made of several."""

    def __init__(self, *sources: Any) -> None:
        self.sources = sources

    def collect(self) -> Iterator[Metric]:
        for source in self.sources:
            yield from source.collect()


class MetricsServer:
    """The HTTP endpoint (``/metrics`` or any path) on ``addr:port``, in a daemon thread."""

    def __init__(self, port: int, *sources: Any, addr: str | None = None) -> None:
        registry = CollectorRegistry()
        registry.register(_Chain(*sources))
        self.addr = addr or os.environ.get(ADDR_ENV) or DEFAULT_ADDR
        try:
            self._server, self._thread = start_http_server(port, self.addr, registry)
        except OSError as exc:
            raise OSError(exc.errno, f"metrics port {self.addr}:{port}: {exc.strerror}") from None
        self.port = self._server.server_port
        log.info("Prometheus metrics on http://%s:%d/metrics", self.addr, self.port)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def serve_crawl(port: int, frontier: Frontier, qtable_version: Callable[[], int]
                ) -> MetricsServer:
    """An embedded crawl's endpoint: its pages and its frontier."""
    return MetricsServer(port, page_metrics().registry, CrawlCollector(frontier, qtable_version))


def serve_dispatcher(registry: CrawlRegistry) -> MetricsServer | None:
    """The dispatcher's endpoint on ``JLSE_DISPATCHER_METRICS_PORT`` (None when unset)."""
    port = _port_from_env(DISPATCHER_PORT_ENV)
    return None if port is None else MetricsServer(port, ClusterCollector(registry))


def serve_worker() -> MetricsServer | None:
    """A fetch worker's endpoint on ``JLSE_WORKER_METRICS_PORT`` (None when unset). Called in
    the worker's main process before its pool forks: the children write their metrics to a
    private folder (multiprocess mode), which this endpoint sums."""
    port = _port_from_env(WORKER_PORT_ENV)
    if port is None:
        return None
    from prometheus_client import values
    from prometheus_client.multiprocess import MultiProcessCollector

    folder = tempfile.mkdtemp(prefix="jlse-metrics-")
    atexit.register(shutil.rmtree, folder, True)
    os.environ[_MULTIPROC_ENV] = folder
    # prometheus_client picks its value class when imported: pick again, now that the folder
    # is set, so the metrics the children create (page_metrics) write to it.
    values.ValueClass = values.get_value_class()
    collector = CollectorRegistry()
    MultiProcessCollector(collector, path=folder)
    return MetricsServer(port, collector)


def _port_from_env(name: str) -> int | None:
    raw = os.environ.get(name, "").strip()
    if not raw or raw == "0":
        return None
    try:
        port = int(raw)
    except ValueError:
        raise ValueError(f"{name}: expected a TCP port, got {raw!r}") from None
    if not 0 < port <= 65535:
        raise ValueError(f"{name}: expected a TCP port, got {raw!r}")
    return port
