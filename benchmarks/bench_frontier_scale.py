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
        [--pages 200000] [--hosts 1000000] [--quick] [--interleave K]

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
    crawled by turns, ``args.pages / args.interleave`` pages at a time: both see the machine's
    load of the same minutes, so their ratio does not move with it."""
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
                          "next_id": args.urls, "pages": 0, "redis_us": 0.0})
        chunk = argparse.Namespace(**dict(vars(args), pages=args.pages // args.interleave))
        for _ in range(args.interleave):
            for side in sides:
                done = crawl(*side["parts"][:3], chunk, side["parts"][3], side["next_id"])
                side["next_id"] = done["next_id"]
                side["pages"] += done["pages"]
                side["redis_us"] += done["redis_cpu_us_per_page"] * done["pages"]
    figures = {side["shards"]: round(side["redis_us"] / side["pages"], 1) for side in sides}
    print(f"interleaved, Redis CPU µs per page: {figures}", flush=True)
    return {"shards": shards, "code": "interleaved", "redis_cpu_us_per_page": figures}


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
          settings: Settings, next_id: int | None = None) -> dict:
    frontier = registry.frontier(CRAWL, settings)
    shards = getattr(settings, "frontier_shards", 1)
    try:
        ledger = RedisHostLedger(registry, CRAWL, shards)
    except TypeError:  # --baseline
        ledger = RedisHostLedger(registry, CRAWL)
    sent: list[dict] = []
    dispatcher = Dispatcher(registry, lambda crawl_id, task: sent.append(task))
    digest = dispatcher._crawl(CRAWL).config_sha1
    next_id = args.urls if next_id is None else next_id

    def work(body: dict, first_id: int) -> None:
        """One page, as a worker does it (its links drawn with a generator of its own)."""
        task = LeasedTask.from_dict(body)
        task_start(registry, digest, task, shards)
        links = page_links(urls, task, first_id, args, random.Random(first_id))
        hosts = sorted({host_of(link.url) for link in links})
        ledger.fetch_counts(host_of(task.url), hosts + [k for h in hosts for k in domain_keys(h)])
        frontier.add_new(links)
        frontier.finish(task, deltas={"fetched": 1, "relevant": 1})

    pages = dispatcher_cpu = 0.0
    cpu_before, wall, process_cpu = servers.cpu(), time.perf_counter(), time.process_time()
    with ThreadPoolExecutor(args.threads) as pool:
        while pages < args.pages:
            started = time.thread_time()
            dispatcher.serve(CRAWL)
            dispatcher_cpu += time.thread_time() - started
            if not sent:
                break
            first_ids = range(next_id, next_id + len(sent) * args.new_links, args.new_links)
            list(pool.map(work, sent, first_ids))
            next_id += len(sent) * args.new_links
            pages += len(sent)
            sent.clear()
    wall = time.perf_counter() - wall
    worker_cpu = time.process_time() - process_cpu - dispatcher_cpu
    cpu_after = servers.cpu()
    per_node = [round(1e6 * (b - a) / pages, 1) for a, b in zip(cpu_before, cpu_after,
                                                                  strict=True)]
    redis_us = sum(per_node)
    return {"pages": int(pages), "next_id": next_id, "seconds": round(wall, 1),
            "pages_per_s_here": round(pages / wall, 1),
            "redis_cpu_us_per_page": round(redis_us, 1), "redis_cpu_us_per_node": per_node,
            "dispatcher_cpu_us_per_page": round(1e6 * dispatcher_cpu / pages, 1),
            "worker_client_cpu_us_per_page": round(1e6 * worker_cpu / pages, 1),
            # the busiest node saturates first: pages/s x its µs per page = 1e6 µs/s
            "ceiling_pages_per_s": round(1e6 / max(per_node)) if max(per_node) > 0 else None,
            "dispatcher_ceiling_pages_per_s": round(pages / dispatcher_cpu)}


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
        crawled = crawl(registry, servers, urls, args, settings)
        print(f"{shards} shard(s) crawl: {json.dumps(crawled)}", flush=True)
        return {"shards": shards, "fill": filled, "crawl": crawled,
                "host_window": getattr(settings, "host_window", None)}


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
    args = parser.parse_args()
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


def report(results: list[dict], interleaved: dict | None = None) -> None:
    print(f"{'code':10} {'shards':>6} {'B/known URL':>11} {'seen B/URL':>10} "
          f"{'Redis µs/page':>13} {'dispatcher µs':>13} {'ceiling p/s':>11}")
    for run_ in results:
        fill_, crawl_ = run_["fill"], run_["crawl"]
        print(f"{run_['code']:10} {run_['shards']:>6} {fill_['bytes_per_known_url']:>11} "
              f"{fill_['seen_bytes_per_url']:>10} {crawl_['redis_cpu_us_per_page']:>13} "
              f"{crawl_['dispatcher_cpu_us_per_page']:>13} {crawl_['ceiling_pages_per_s']:>11}")
    one = next((r for r in results if r["shards"] == 1 and r["code"] == "current"), None)
    for run_ in results:
        if run_["shards"] == 1 or run_["code"] != "current":
            continue
        if one is not None:
            ratio = run_["crawl"]["ceiling_pages_per_s"] / one["crawl"]["ceiling_pages_per_s"]
            print(f"Redis ceiling, {run_['shards']} shards / 1 shard, measured with the "
                  f"{run_['shards']} masters on this machine's 2 cores: {ratio:.2f}x")
            alone = next((r for r in results if r["code"] == "one node"
                          and r["shards"] == run_["shards"]), None)
            if alone is not None:
                print(derived_ceiling(one, run_, alone))
        if interleaved is not None and interleaved["shards"] == run_["shards"]:
            print(interleaved_ceiling(run_, interleaved))


def derived_ceiling(one: dict, spread: dict, alone: dict) -> str:
    """The ceiling of ``spread``'s masters, each on a machine of its own: its shards' Redis CPU
    per page measured without other Redis processes on the cores (``alone``: every shard on
    one node), split between the masters as measured (``spread``)."""
    per_node = spread["crawl"]["redis_cpu_us_per_node"]
    busiest = max(per_node) / sum(per_node)
    ceiling = 1e6 / (alone["crawl"]["redis_cpu_us_per_page"] * busiest)
    ratio = ceiling / one["crawl"]["ceiling_pages_per_s"]
    spread["crawl"]["derived_ceiling_pages_per_s"] = round(ceiling)
    return (f"Redis ceiling, {spread['shards']} shards / 1 shard, one master per machine: "
            f"{ratio:.2f}x ({alone['crawl']['redis_cpu_us_per_page']} µs per page for every "
            f"shard on one node, the busiest master's share {busiest:.3f})")



def interleaved_ceiling(spread: dict, interleaved: dict) -> str:
    """``derived_ceiling`` from the interleaved runs: 1 shard and every shard on one node, by
    turns, split between the masters as ``spread`` measured them."""
    per_node = spread["crawl"]["redis_cpu_us_per_node"]
    busiest = max(per_node) / sum(per_node)
    figures = interleaved["redis_cpu_us_per_page"]
    one, many = figures[1], figures[spread["shards"]]
    return (f"Redis ceiling, {spread['shards']} shards / 1 shard, one master per machine, "
            f"interleaved: {one / (many * busiest):.2f}x ({one} µs per page for 1 shard, {many} "
            f"for {spread['shards']} on one node, by turns; the busiest master's share "
            f"{busiest:.3f})")


if __name__ == "__main__":
    main()
