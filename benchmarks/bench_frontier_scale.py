"""The distributed frontier at scale, without the internet: memory per URL and central CPU per
page through 1 and 3 shards.

No HTTP and no Celery: a simulated crawl drives the real frontier code (``CrawlRegistry``,
``ShardedFrontier``, ``Dispatcher``) on Redis servers of its own (``scripts/redis-cluster.sh``:
one plain server for 1 shard, a Redis Cluster of N masters for N shards, private ports,
memory settings of ``MEMORY_CONFIG``). URLs are synthetic, their hosts Zipf-distributed
(exponent ``--zipf``, 1.0 by default) over ``--hosts`` hosts, each its own registered domain.

1. **Fill**: ``--urls`` URLs are discovered in page-sized batches through ``add_new`` (dedup +
   queue, the workers' path), with the default host window (``host_window``): Redis bytes per
   known URL (``used_memory`` delta over every node) and the seen sets' share of it
   (``MEMORY USAGE`` of a sample of them), URLs queued in Redis and spilled.
2. **Crawl**: ``--pages`` pages go through the hot path as a cluster runs it: the dispatcher's
   rounds (``Dispatcher.serve``, its ``send`` only collects the tasks), then per page the
   worker's checks before the fetch (``task_start``), the host ledger (``fetch_counts``), the
   page's ``--links`` out-links (``add_new``: ``--new-links`` of them new, the rest known) and
   the ack with its counters (``finish``). Printed: Redis CPU µs per page (INFO cpu over every
   node, and per node), the dispatcher's CPU µs per page (its own thread time), the simulated
   workers' client CPU µs per page (spread over worker machines in a real cluster), and the
   pages/s ceiling they imply: one Redis node serves ``1e6 / (Redis µs per page of its share)``
   pages/s, one dispatcher ``1e6 / (dispatcher µs per page)``.

    .venv/bin/python benchmarks/bench_frontier_scale.py --shards 1 3 [--urls 10000000]
        [--pages 200000] [--hosts 1000000] [--quick] [--interleave K] [--fetch-batch N ...]

``--fetch-batch N`` crawls as a cluster with the setting ``fetch_batch`` N does: the
dispatcher sends a round's tasks N to a message (``send_batch``), and a simulated worker takes
a message at a time as ``jlse.fetch_batch`` does (``CrawlContext.process_batch`` and
``CrawlEngine.write_batch``): the checks before the fetch of each URL, each page's host ledger,
then the links of every page of the message merged (``merge_links``) in one ``add_new``, then
each URL's ack. Several values are crawled by turns on the same filled frontier (every layout
gets the same batches), each with its own figures.

``--interleave K`` also crawls one shard and the largest ``--shards`` on one cluster node by
turns, K parts each, after filling both: the machine's load of those minutes falls on both
alike, so their ratio (the derived ceiling) holds still where runs minutes apart moved it by
±15%.

Results: ``benchmarks/results/frontier_scale.json``. The arithmetic to 1e8 and 1e9 URLs lives in
docs/distributed.md ("Sizing").
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np
import redis

from jlse.records import CrawlTask
from jlse.scheduler.crawl_registry import CrawlRegistry
from jlse.scheduler.dispatcher import Dispatcher
from jlse.scheduler.ledger import domain_keys
from jlse.scheduler.redis_frontier import LeasedTask
from jlse.scheduler.urls import host_of
from jlse.settings import Settings, apply_overrides

try:
    from jlse.workers.engine import merge_links
except ImportError:  # the code before fetch_batch (--baseline)
    merge_links = None

if hasattr(CrawlRegistry, "shard_count"):
    from jlse.scheduler.redis_client import connect, ensure_memory_config, is_cluster
    from jlse.scheduler.redis_ledger import RedisHostLedger
else:  # the code before shards (--baseline)
    from jlse.scheduler.crawl_registry import RedisHostLedger

    def connect(url: str) -> redis.Redis:
        return redis.Redis.from_url(url)

    def is_cluster(client: object) -> bool:
        return False

    def ensure_memory_config(client: object) -> None:
        return None

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "frontier_scale.json"
SCRIPT = ROOT / "scripts" / "redis-cluster.sh"
CRAWL = "scale"
FILL_BATCH = 2000
RAISED = 0.1  # share of the known out-links of a page found with a higher priority


class Urls:
    """Synthetic URLs: URL i's host is drawn once from the Zipf distribution (seeded)."""

    def __init__(self, hosts: int, zipf: float, seed: int = 7) -> None:
        weights = 1.0 / np.arange(1, hosts + 1) ** zipf
        self.cdf = np.cumsum(weights) / weights.sum()
        self.rng = np.random.default_rng(seed)
        self.known = np.zeros(0, dtype=np.int32)  # the host of each URL of the fill

    def hosts_for(self, count: int) -> np.ndarray:
        return np.searchsorted(self.cdf, self.rng.random(count))

    def index(self) -> None:
        """URL ids of the fill sorted by host, to draw a host's known URLs."""
        self.by_host = np.argsort(self.known, kind="stable")
        self.sorted_hosts = self.known[self.by_host]

    def host_of_task(self, task: CrawlTask) -> int:
        return int(task.url.split("site", 1)[1].split(".", 1)[0])

    def link_hosts(self, host: int, count: int, internal: float,
                   rng: random.Random) -> list[int]:
        drawn = self.hosts_for(count)
        return [host if rng.random() < internal else int(h) for h in drawn]

    def known_links(self, host: int, count: int, internal: float,
                    rng: random.Random) -> list[int]:
        """Ids of known URLs: of ``host`` with probability ``internal`` (if it has some)."""
        first = int(np.searchsorted(self.sorted_hosts, host, "left"))
        last = int(np.searchsorted(self.sorted_hosts, host, "right"))
        ids = []
        for _ in range(count):
            if last > first and rng.random() < internal:
                ids.append(int(self.by_host[rng.randrange(first, last)]))
            else:
                ids.append(rng.randrange(len(self.known)))
        return list(dict.fromkeys(ids))

    @staticmethod
    def url(i: int, host: int) -> str:
        return f"http://www.site{host}.com/c/{i % 97}/item-{i}.html"

    @staticmethod
    def priority(i: int) -> float:
        """URL i's priority when first found (a fixed pseudo-random value)."""
        return (i * 2654435761 % 1000003) / 1000003

    @staticmethod
    def task(i: int, host: int, priority: float) -> CrawlTask:
        return CrawlTask(url=Urls.url(i, host), url_id=i + 1, priority=priority, depth=2,
                         parent_id=i // 20 + 1, anchor_text=f"item {i} review")


# -- Redis servers of the benchmark -------------------------------------------------------------

class Servers:
    """``masters`` Redis nodes: one plain server, one cluster node holding every slot
    (``cluster``), or a Redis Cluster of ``masters`` masters (scripts/redis-cluster.sh)."""

    def __init__(self, masters: int, base_port: int, workdir: Path,
                 cluster: bool = False) -> None:
        self.shards, self.base_port, self.dir = masters, base_port, workdir
        self.cluster = cluster or masters > 1

    def __enter__(self) -> Servers:
        self.dir.mkdir(parents=True, exist_ok=True)
        if self.shards == 1:
            (self.dir / "nodes.conf").unlink(missing_ok=True)  # a killed run's slots
            cluster = ["--cluster-enabled", "yes", "--cluster-config-file",
                       str(self.dir / "nodes.conf")] if self.cluster else []
            subprocess.run(["redis-server", "--port", str(self.base_port), "--daemonize", "yes",
                            "--save", "", "--appendonly", "no", "--bind", "127.0.0.1",
                            "--dir", str(self.dir), "--pidfile", str(self.dir / "redis.pid"),
                            "--maxmemory-policy", "noeviction", *cluster], check=True)
            self.url = f"redis://127.0.0.1:{self.base_port}/0"
            if self.cluster:
                self._own_every_slot()
                self.url = f"redis+cluster://127.0.0.1:{self.base_port}"
        else:
            subprocess.run([str(SCRIPT), "start", str(self.dir), str(self.base_port),
                            str(self.shards), "0"], check=True, stdout=subprocess.DEVNULL)
            self.url = f"redis+cluster://127.0.0.1:{self.base_port}"
        for _ in range(50):
            try:
                client = connect(self.url)
                client.ping()
                break
            except Exception:  # noqa: BLE001 - still starting
                time.sleep(0.2)
        self.client = client
        ensure_memory_config(client)
        return self

    def _own_every_slot(self) -> None:
        node = redis.Redis(port=self.base_port)
        for _ in range(50):
            try:
                node.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
                break
            except redis.ConnectionError:  # still starting
                time.sleep(0.1)
        while node.cluster("info")["cluster_state"] != "ok":
            time.sleep(0.1)

    def __exit__(self, *exc: object) -> None:
        if self.shards == 1:
            subprocess.run(["redis-cli", "-p", str(self.base_port), "shutdown", "nosave"],
                           capture_output=True)
        else:
            subprocess.run([str(SCRIPT), "stop", str(self.dir)], capture_output=True)

    def nodes(self) -> list:
        """A plain client per node (masters)."""
        import redis

        if not is_cluster(self.client):
            return [self.client]
        return [redis.Redis(host=node.host, port=node.port)
                for node in self.client.get_primaries()]

    def used_memory(self) -> int:
        return sum(int(node.info("memory")["used_memory"]) for node in self.nodes())

    def cpu(self) -> list[float]:
        return [float(info["used_cpu_sys"]) + float(info["used_cpu_user"])
                for info in (node.info("cpu") for node in self.nodes())]


# -- the simulation ------------------------------------------------------------------------------

def run_interleaved(shards: int, args: argparse.Namespace) -> dict:
    """One shard (a plain Redis) and ``shards`` shards on one cluster node, filled alike, then
    crawled by turns, ``args.pages / args.interleave`` pages at a time (for each of the
    ``--fetch-batch`` values in turn): both see the machine's load of the same minutes, so
    their ratio does not move with it."""
    workdir = Path(args.workdir) / "interleaved"
    with Servers(1, args.base_port + 10, workdir / "one") as one_servers, \
            Servers(1, args.base_port + 60, workdir / "many", cluster=True) as many_servers:
        sides = []
        for count, servers in ((1, one_servers), (shards, many_servers)):
            registry = CrawlRegistry(servers.client, "jlsebench:")
            settings = register(registry, count, args)
            urls = Urls(args.hosts, args.zipf)
            fill(registry, servers, urls, args.urls, settings)
            sides.append({"shards": count, "parts": (registry, servers, urls, settings),
                          "next_id": args.urls, "done": {b: [] for b in args.fetch_batch}})
        chunk = argparse.Namespace(**dict(vars(args), pages=args.pages // args.interleave))
        for _ in range(args.interleave):
            for batch in args.fetch_batch:
                for side in sides:
                    done = crawl(*side["parts"][:3], chunk, side["parts"][3], side["next_id"],
                                 batch=batch)
                    side["next_id"] = done["next_id"]
                    side["done"][batch].append(done)
    by_batch = {batch: {side["shards"]: combine(side["done"][batch]) for side in sides}
                for batch in args.fetch_batch}
    for batch, crawled in by_batch.items():  # each turn's pair: how much the ratio moves
        crawled["turns"] = [[one["redis_cpu_us_per_page"], many["redis_cpu_us_per_page"]]
                            for one, many in zip(sides[0]["done"][batch],
                                                 sides[1]["done"][batch], strict=True)]
    for batch, crawled in by_batch.items():
        print(f"interleaved, fetch_batch {batch}: "
              + "; ".join(f"{count} shard(s) {json.dumps(crawled[count])}"
                          for count in (1, shards)), flush=True)
    first = by_batch[args.fetch_batch[0]]
    return {"shards": shards, "code": "interleaved",
            "redis_cpu_us_per_page": {count: first[count]["redis_cpu_us_per_page"]
                                      for count in (1, shards)},
            "by_batch": by_batch}


def combine(parts: list[dict]) -> dict:
    """The figures of several ``crawl`` calls of one layout and batch, as if one crawl."""
    pages = sum(part["pages"] for part in parts)
    seconds = sum(part["seconds"] for part in parts)

    def per_page(key: str, digits: int = 1) -> float:
        return round(sum(part[key] * part["pages"] for part in parts) / pages, digits)

    per_node = [round(sum(part["redis_cpu_us_per_node"][i] * part["pages"] for part in parts)
                      / pages, 1) for i in range(len(parts[0]["redis_cpu_us_per_node"]))]
    dispatcher_us = per_page("dispatcher_cpu_us_per_page")
    return {"pages": pages, "fetch_batch": parts[0]["fetch_batch"],
            "messages": sum(part["messages"] for part in parts),
            "push_calls_per_page": per_page("push_calls_per_page", 3),
            "seconds": round(seconds, 1), "pages_per_s_here": round(pages / seconds, 1),
            "redis_cpu_us_per_page": round(sum(per_node), 1), "redis_cpu_us_per_node": per_node,
            "dispatcher_cpu_us_per_page": dispatcher_us,
            "worker_client_cpu_us_per_page": per_page("worker_client_cpu_us_per_page"),
            "ceiling_pages_per_s": round(1e6 / max(per_node)) if max(per_node) > 0 else None,
            "dispatcher_ceiling_pages_per_s": round(1e6 / dispatcher_us) if dispatcher_us
            else None}


def register(registry: CrawlRegistry, shards: int, args: argparse.Namespace) -> Settings:
    values = {"max_pages": 10 ** 12, "politeness_delay": 0.0,
              "max_outstanding": args.outstanding, "frontier_size": 10 ** 9,
              "lease_seconds": 3600.0}
    if hasattr(Settings(), "frontier_shards"):  # not in the --baseline code
        values["frontier_shards"] = shards
    settings = apply_overrides(Settings(), values, source="benchmark")
    registry.clear(CRAWL)
    registry.register(CRAWL, {"crawl_id": CRAWL, "settings": settings.to_dict(),
                              "status": "running", "reason": "",
                              "max_pages": settings.max_pages}, None, {})
    return settings


def fill(registry: CrawlRegistry, servers: Servers, urls: Urls, count: int,
         settings: Settings) -> dict:
    frontier = registry.frontier(CRAWL, settings)
    before = servers.used_memory()
    urls.known = urls.hosts_for(count).astype(np.int32)
    started = time.perf_counter()
    for first in range(0, count, FILL_BATCH):
        size = min(FILL_BATCH, count - first)
        hosts = urls.known[first:first + size]
        frontier.add_new([Urls.task(first + j, int(hosts[j]), Urls.priority(first + j))
                          for j in range(size)])
    seconds = time.perf_counter() - started
    urls.index()
    used = servers.used_memory() - before
    stats = frontier.stats()
    seen_bytes = seen_share(registry)
    return {"urls": count, "seconds": round(seconds, 1), "bytes": used,
            "bytes_per_known_url": round(used / count, 1),
            "seen_bytes_per_url": round(seen_bytes / count, 2),
            "queued_in_redis": stats["queued"], "spilled_hosts": stats.get("spilled_hosts", 0),
            "spilled_urls": stats["evicted"], "hosts_with_urls": stats["hosts"]}


def seen_share(registry: CrawlRegistry, sample: int = 512) -> float:
    """Bytes of every seen set, from MEMORY USAGE of a sample of them."""
    from jlse.scheduler import redis_frontier

    sets = 1 << redis_frontier.SEEN_SHARD_BITS
    total = 0.0
    if hasattr(registry, "shard_count"):
        prefixes = [registry.frontier_prefix(CRAWL, shard)
                    for shard in range(registry.shard_count(CRAWL))]
    else:  # --baseline: one frontier
        prefixes = [registry.frontier_prefix(CRAWL)]
    for index, prefix in enumerate(prefixes):
        keys = [f"{prefix}seen:{n}" for n in random.Random(index).sample(range(sets), sample)]
        sizes = [registry.client.memory_usage(key, samples=0) or 0 for key in keys]
        total += sum(sizes) / sample * sets
    return total


def crawl(registry: CrawlRegistry, servers: Servers, urls: Urls, args: argparse.Namespace,
          settings: Settings, next_id: int | None = None, batch: int = 1) -> dict:
    """``args.pages`` pages of the crawl, the dispatcher sending ``batch`` tasks a message
    (``fetch_batch``; 1: a task a message, as before batches)."""
    frontier = registry.frontier(CRAWL, settings)
    shards = getattr(settings, "frontier_shards", 1)
    try:
        ledger = RedisHostLedger(registry, CRAWL, shards)
    except TypeError:  # --baseline
        ledger = RedisHostLedger(registry, CRAWL)
    sent: list[list[dict]] = []  # the round's messages, each a task or a batch's tasks
    if batch > 1:
        dispatcher = Dispatcher(registry, lambda crawl_id, task: sent.append([task]),
                                send_batch=lambda crawl_id, tasks: sent.append(list(tasks)))
        state = dispatcher._crawl(CRAWL)  # the crawl's fetch_batch, as if registered with it
        state.settings = replace(state.settings, fetch_batch=batch)
    else:
        dispatcher = Dispatcher(registry, lambda crawl_id, task: sent.append([task]))
    digest = dispatcher._crawl(CRAWL).config_sha1
    next_id = args.urls if next_id is None else next_id
    pushes = [0]  # add_new calls, each a PUSH request per shard its URLs reach
    count_push = count_push_requests(frontier, pushes)

    def work(bodies: list[dict], first_id: int) -> None:
        """One message, as a worker process does it (``jlse.fetch`` / ``jlse.fetch_batch``):
        the checks before each fetch, then each page's host ledger, the links of every page
        in one push, each URL's ack. A page's links are drawn with a generator of its own."""
        tasks = [LeasedTask.from_dict(body) for body in bodies]
        for task in tasks:
            task_start(registry, digest, task, shards)
        found = []
        for i, task in enumerate(tasks):
            page_first = first_id + i * args.new_links
            links = page_links(urls, task, page_first, args, random.Random(page_first))
            hosts = sorted({host_of(link.url) for link in links})
            ledger.fetch_counts(host_of(task.url),
                                hosts + [k for h in hosts for k in domain_keys(h)])
            found.append(links)
        merged = found[0] if len(found) == 1 else merge_links(
            [link for links in found for link in links])
        count_push(merged)
        frontier.add_new(merged)
        for task in tasks:
            frontier.finish(task, deltas={"fetched": 1, "relevant": 1})

    pages = dispatcher_cpu = 0.0
    messages = 0
    cpu_before, wall, process_cpu = servers.cpu(), time.perf_counter(), time.process_time()
    with ThreadPoolExecutor(args.threads) as pool:
        while pages < args.pages:
            started = time.thread_time()
            dispatcher.serve(CRAWL)
            dispatcher_cpu += time.thread_time() - started
            if not sent:
                break
            sizes = [len(message) for message in sent]
            starts = np.cumsum([0] + sizes[:-1]) * args.new_links + next_id
            list(pool.map(work, sent, [int(first) for first in starts]))
            next_id += sum(sizes) * args.new_links
            pages += sum(sizes)
            messages += len(sent)
            sent.clear()
    wall = time.perf_counter() - wall
    worker_cpu = time.process_time() - process_cpu - dispatcher_cpu
    cpu_after = servers.cpu()
    per_node = [round(1e6 * (b - a) / pages, 1) for a, b in zip(cpu_before, cpu_after,
                                                                  strict=True)]
    redis_us = sum(per_node)
    return {"pages": int(pages), "next_id": next_id, "fetch_batch": batch,
            "messages": messages, "push_calls_per_page": round(pushes[0] / pages, 3),
            "seconds": round(wall, 1), "pages_per_s_here": round(pages / wall, 1),
            "redis_cpu_us_per_page": round(redis_us, 1), "redis_cpu_us_per_node": per_node,
            "dispatcher_cpu_us_per_page": round(1e6 * dispatcher_cpu / pages, 1),
            "worker_client_cpu_us_per_page": round(1e6 * worker_cpu / pages, 1),
            # the busiest node saturates first: pages/s x its µs per page = 1e6 µs/s
            "ceiling_pages_per_s": round(1e6 / max(per_node)) if max(per_node) > 0 else None,
            "dispatcher_ceiling_pages_per_s": round(pages / dispatcher_cpu)}


def count_push_requests(frontier: object, pushes: list[int]):
    """A counter of the PUSH requests an ``add_new`` of these links makes: one per shard its
    URLs reach (``ShardedFrontier``), one on a frontier before shards."""
    if not hasattr(frontier, "shard_index"):
        def count(links: list) -> None:
            pushes[0] += 1 if links else 0
        return count

    def count(links: list) -> None:
        pushes[0] += len({frontier.shard_index(link.url) for link in links})
    return count


def page_links(urls: Urls, task: LeasedTask, next_id: int, args: argparse.Namespace,
               rng: random.Random) -> list[CrawlTask]:
    """A page's ``--links`` out-links: ``--new-links`` new URLs, the others known ones (one in
    RAISED found with a higher priority than before); a share ``--internal`` of them on the
    page's own host (a site's navigation), the rest on Zipf-drawn hosts."""
    host = urls.host_of_task(task)
    new = [Urls.task(next_id + j, int(h), Urls.priority(next_id + j))
           for j, h in enumerate(urls.link_hosts(host, args.new_links, args.internal, rng))]
    known = [Urls.task(k, int(urls.known[k]), Urls.priority(k) + (0.5 if rng.random() < RAISED
                                                                  else 0.0))
             for k in urls.known_links(host, args.links - args.new_links, args.internal, rng)]
    return new + known


def task_start(registry: CrawlRegistry, digest: str, task: LeasedTask, shards: int) -> None:
    try:
        registry.task_start(CRAWL, digest, task, shards=shards)
    except TypeError:  # --baseline
        registry.task_start(CRAWL, digest, task)


def run(shards: int, args: argparse.Namespace, one_node: bool = False) -> dict:
    """The simulation with ``shards`` shards, on as many masters (or, ``one_node``, all on one
    cluster node: their work without other Redis processes on this machine's cores)."""
    workdir = Path(args.workdir) / f"shards{shards}{'-one-node' if one_node else ''}"
    port = args.base_port + 100 * shards + (50 if one_node else 0)
    with Servers(1 if one_node else shards, port, workdir, cluster=one_node) as servers:
        registry = CrawlRegistry(servers.client, "jlsebench:")
        settings = register(registry, shards, args)
        urls = Urls(args.hosts, args.zipf)
        filled = fill(registry, servers, urls, args.urls, settings)
        print(f"{shards} shard(s) fill: {json.dumps(filled)}", flush=True)
        by_batch = crawl_batches(registry, servers, urls, args, settings)
        for crawled in by_batch.values():
            print(f"{shards} shard(s) crawl: {json.dumps(crawled)}", flush=True)
        return {"shards": shards, "fill": filled, "crawl": by_batch[args.fetch_batch[0]],
                "by_batch": by_batch, "host_window": getattr(settings, "host_window", None)}


def crawl_batches(registry: CrawlRegistry, servers: Servers, urls: Urls,
                  args: argparse.Namespace, settings: Settings) -> dict[int, dict]:
    """``crawl`` with each ``--fetch-batch`` value: one alone in one go, several by turns
    (``--interleave`` parts each, or one), so each sees the machine's load alike."""
    if len(args.fetch_batch) == 1:
        return {args.fetch_batch[0]: crawl(registry, servers, urls, args, settings,
                                           batch=args.fetch_batch[0])}
    turns = max(args.interleave, 1)
    chunk = argparse.Namespace(**dict(vars(args), pages=args.pages // turns))
    done: dict[int, list[dict]] = {batch: [] for batch in args.fetch_batch}
    next_id = args.urls
    for _ in range(turns):
        for batch in args.fetch_batch:
            part = crawl(registry, servers, urls, chunk, settings, next_id, batch=batch)
            next_id = part["next_id"]
            done[batch].append(part)
    return {batch: combine(parts) for batch, parts in done.items()}


def baseline_tree(ref: str) -> Path:
    """An importable tree of git ``ref`` (a worktree, and symlinks shaped like the installed
    package, as ``make lint`` builds them): run with PYTHONPATH=<it>."""
    sha = subprocess.run(["git", "rev-parse", "--short", ref], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout.strip()
    source, tree = Path(f"/tmp/jlse-base-{sha}"), Path(f"/tmp/jlse-base-{sha}-tree")
    if not source.exists():
        subprocess.run(["git", "worktree", "add", "-f", str(source), sha], cwd=ROOT, check=True,
                       capture_output=True)
    package = tree / "jlse"
    package.mkdir(parents=True, exist_ok=True)
    for item in [*(source / "jlse").iterdir(), *(source / d for d in
                                                  ("models", "scheduler", "workers", "learner"))]:
        link = package / item.name
        if not link.exists():
            link.symlink_to(item)
    return tree


def run_baseline(args: argparse.Namespace) -> dict:
    """This benchmark on the code of ``--baseline`` (1 shard: it has no others), in a child."""
    tree = baseline_tree(args.baseline)
    out = Path(args.workdir) / "baseline.json"
    argv = [sys.executable, str(Path(__file__).resolve()), "--shards", "1",
            "--urls", str(args.urls), "--pages", str(args.pages), "--hosts", str(args.hosts),
            "--zipf", str(args.zipf), "--links", str(args.links),
            "--new-links", str(args.new_links), "--internal", str(args.internal),
            "--outstanding", str(args.outstanding), "--threads", str(args.threads),
            "--base-port", str(args.base_port + 50), "--workdir", args.workdir + "/base",
            "--out", str(out)]
    env = dict(os.environ, PYTHONPATH=str(tree))
    subprocess.run(argv, cwd=tree, env=env, check=True)
    result = json.loads(out.read_text())["runs"][0]
    result["code"] = args.baseline
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", type=int, nargs="+", default=[1, 3])
    parser.add_argument("--urls", type=int, default=10_000_000)
    parser.add_argument("--pages", type=int, default=200_000)
    parser.add_argument("--hosts", type=int, default=1_000_000)
    parser.add_argument("--zipf", type=float, default=1.0)
    parser.add_argument("--links", type=int, default=20, help="out-links per page")
    parser.add_argument("--new-links", type=int, default=2, help="of them, new URLs")
    parser.add_argument("--internal", type=float, default=0.8,
                        help="share of a page's links to its own host")
    parser.add_argument("--outstanding", type=int, default=256)
    parser.add_argument("--threads", type=int, default=8,
                        help="simulated worker processes driving Redis at once")
    parser.add_argument("--base-port", type=int, default=17400)
    parser.add_argument("--workdir", default=os.environ.get("TMPDIR", "/tmp") + "/jlse-scale")
    parser.add_argument("--baseline", metavar="REF",
                        help="first run the code of git REF (1 shard), side by side")
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--quick", action="store_true", help="1e6 URLs, 20,000 pages")
    parser.add_argument("--interleave", type=int, default=0, metavar="K",
                        help="also crawl 1 shard and the largest --shards on one node by "
                             "turns, in K parts each (a ratio the machine's load does not move)")
    parser.add_argument("--no-one-node", action="store_true",
                        help="skip the runs with every shard on one node (the derived ceiling)")
    parser.add_argument("--fetch-batch", type=int, nargs="+", default=[1], metavar="N",
                        help="URLs per fetch message (the setting fetch_batch); several values "
                             "are crawled by turns, each layout with every value")
    args = parser.parse_args()
    if any(not 1 <= batch <= 64 for batch in args.fetch_batch):
        parser.error("--fetch-batch: 1 to 64 (the setting's range)")
    if max(args.fetch_batch) > 1 and merge_links is None:
        parser.error("--fetch-batch: this code has no fetch_batch")
    if args.outstanding < 2 * args.threads * max(args.fetch_batch):
        print(f"note: --outstanding {args.outstanding} < 2 x {args.threads} threads x "
              f"fetch_batch {max(args.fetch_batch)}: rounds give some threads no message",
              flush=True)
    if args.quick:
        args.urls, args.pages, args.hosts = 1_000_000, 20_000, 100_000
    results = [run_baseline(args)] if args.baseline else []
    for shards in args.shards:
        results.append(dict(run(shards, args), code="current"))
        if shards > 1 and not args.no_one_node:
            results.append(dict(run(shards, args, one_node=True), code="one node"))
    interleaved = run_interleaved(max(args.shards), args) if args.interleave else None
    report(results, interleaved)
    if interleaved:
        results.append(interleaved)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"args": vars(args), "runs": results}, indent=2))


def batches_of(run_: dict) -> dict:
    """A run's crawl figures per fetch_batch (a --baseline child's: its one crawl)."""
    return run_.get("by_batch") or {run_["crawl"].get("fetch_batch", 1): run_["crawl"]}


def report(results: list[dict], interleaved: dict | None = None) -> None:
    print(f"{'code':10} {'shards':>6} {'batch':>5} {'B/known URL':>11} {'seen B/URL':>10} "
          f"{'PUSH/page':>9} {'Redis µs/page':>13} {'dispatcher µs':>13} {'ceiling p/s':>11}")
    for run_ in results:
        fill_ = run_["fill"]
        for batch, crawl_ in batches_of(run_).items():
            print(f"{run_['code']:10} {run_['shards']:>6} {batch:>5} "
                  f"{fill_['bytes_per_known_url']:>11} {fill_['seen_bytes_per_url']:>10} "
                  f"{crawl_.get('push_calls_per_page', ''):>9} "
                  f"{crawl_['redis_cpu_us_per_page']:>13} "
                  f"{crawl_['dispatcher_cpu_us_per_page']:>13} "
                  f"{crawl_['ceiling_pages_per_s']:>11}")
    one = next((r for r in results if r["shards"] == 1 and r["code"] == "current"), None)
    for run_ in results:
        if run_["shards"] == 1 or run_["code"] != "current":
            continue
        for batch, crawl_ in batches_of(run_).items():
            with_batch = f"fetch_batch {batch}: "
            if one is not None and batch in batches_of(one):
                ratio = crawl_["ceiling_pages_per_s"] / \
                    batches_of(one)[batch]["ceiling_pages_per_s"]
                print(f"{with_batch}Redis ceiling, {run_['shards']} shards / 1 shard, measured "
                      f"with the {run_['shards']} masters on this machine's 2 cores: "
                      f"{ratio:.2f}x")
                alone = next((r for r in results if r["code"] == "one node"
                              and r["shards"] == run_["shards"]), None)
                if alone is not None:
                    print(with_batch + derived_ceiling(batches_of(one)[batch], run_["shards"],
                                                       crawl_, batches_of(alone)[batch]))
            if interleaved is not None and interleaved["shards"] == run_["shards"]:
                print(with_batch + interleaved_ceiling(
                    run_["shards"], crawl_, interleaved["by_batch"][batch]))


def busiest_share(spread: dict) -> float:
    """The busiest master's share of the Redis work of a crawl spread over its masters."""
    per_node = spread["redis_cpu_us_per_node"]
    return max(per_node) / sum(per_node)


def derived_ceiling(one: dict, shards: int, spread: dict, alone: dict) -> str:
    """The ceiling of ``spread``'s masters, each on a machine of its own: its shards' Redis CPU
    per page measured without other Redis processes on the cores (``alone``: every shard on
    one node), split between the masters as measured (``spread``). Each argument is the
    figures of one crawl (one fetch_batch)."""
    busiest = busiest_share(spread)
    ceiling = 1e6 / (alone["redis_cpu_us_per_page"] * busiest)
    ratio = ceiling / one["ceiling_pages_per_s"]
    spread["derived_ceiling_pages_per_s"] = round(ceiling)
    return (f"Redis ceiling, {shards} shards / 1 shard, one master per machine: "
            f"{ratio:.2f}x ({alone['redis_cpu_us_per_page']} µs per page for every "
            f"shard on one node, the busiest master's share {busiest:.3f})")


def interleaved_ceiling(shards: int, spread: dict, interleaved: dict) -> str:
    """``derived_ceiling`` from the interleaved runs of one fetch_batch: 1 shard and every
    shard on one node, by turns, split between the masters as ``spread`` (the same batch)
    measured them."""
    busiest = busiest_share(spread)
    one, many = interleaved[1], interleaved[shards]
    ratio = one["redis_cpu_us_per_page"] / (many["redis_cpu_us_per_page"] * busiest)
    interleaved["derived_ratio"] = round(ratio, 3)
    turns = sorted(one_us / (many_us * busiest) for one_us, many_us in interleaved["turns"])
    return (f"Redis ceiling, {shards} shards / 1 shard, one master per machine, "
            f"interleaved: {ratio:.2f}x ({one['redis_cpu_us_per_page']} µs per page for 1 "
            f"shard, {many['redis_cpu_us_per_page']} for {shards} on one node, by turns; the "
            f"busiest master's share {busiest:.3f}; PUSH requests per page "
            f"{one['push_calls_per_page']} / {many['push_calls_per_page']}; dispatcher CPU µs "
            f"per page {one['dispatcher_cpu_us_per_page']} / "
            f"{many['dispatcher_cpu_us_per_page']}; turn by turn {turns[0]:.2f}-{turns[-1]:.2f}"
            f"x, median {turns[len(turns) // 2]:.2f}x)")


if __name__ == "__main__":
    main()
