"""Where a sharded frontier's extra Redis work goes: Redis CPU per page of each step of the hot
path, for several frontier layouts crawled by turns (``bench_frontier_scale``'s simulation).

Each round of the simulated crawl runs its steps one after the other, each over every page of
the round on 8 threads, and reads the node's CPU (INFO) between them: the dispatcher's round
(its ``FIGURES`` and ``DISPATCH`` calls apart), the checks before the fetch (``task_start``),
the host ledger, the page's links (``add_new``) and the ack (``finish``). A layout is ``Np``
(N shards on one plain Redis) or ``Nc`` (N shards on one Redis Cluster node, as the derived
ceiling of ``bench_frontier_scale --interleave`` measures them), optionally ``:B`` for
``fetch_batch`` B: the links of B pages (a message's) merged in one ``add_new``, as
``CrawlEngine.write_batch`` writes them.

    .venv/bin/python benchmarks/frontier_shard_costs.py 1p 3p 3c 1p:8 3c:8 [--pages 9000]
        [--parts 3] [--batch-push]

``--batch-push`` adds every link of a round in calls of 1,000 (what the page's PUSH requests
cost beyond their links).
"""

from __future__ import annotations

import argparse
import random
import re
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import bench_frontier_scale as bench

from jlse.scheduler.dispatcher import Dispatcher
from jlse.scheduler.ledger import domain_keys
from jlse.scheduler.redis_frontier import LeasedTask
from jlse.scheduler.urls import host_of
from jlse.workers.engine import merge_links

STEPS = ("dispatch", "task_start", "ledger", "add_new", "finish")


def timed_scripts(dispatcher: Dispatcher, cpu: Any, spent: dict[str, float]) -> None:
    """Count the node's CPU of the dispatcher's FIGURES and DISPATCH calls apart."""
    for attr, name in (("_figures", "figures"), ("_script", "dispatch_script")):
        inner = getattr(dispatcher, attr)

        def call(*args: Any, inner: Any = inner, name: str = name, **kwargs: Any) -> Any:
            before = cpu()
            reply = inner(*args, **kwargs)
            spent[name] += cpu() - before
            spent[name + "_calls"] += 1
            return reply

        setattr(dispatcher, attr, call)


def crawl_part(side: dict, args: argparse.Namespace, pool: ThreadPoolExecutor) -> None:
    """``args.pages`` pages of ``side``'s crawl, step by step (the module's doc)."""
    registry, servers, urls, settings = side["parts"]
    cpu, spent = (lambda: node_cpu(side["node"])), side["cpu"]
    frontier = registry.frontier(bench.CRAWL, settings)
    ledger = side.setdefault("ledger", bench.RedisHostLedger(
        registry, bench.CRAWL, settings.frontier_shards))
    sent: list[dict] = []
    if "dispatcher" not in side:
        side["dispatcher"] = Dispatcher(registry, lambda crawl_id, task: sent.append(task))
        timed_scripts(side["dispatcher"], cpu, spent)
    dispatcher = side["dispatcher"]
    dispatcher.send = lambda crawl_id, task: sent.append(task)
    digest = dispatcher._crawl(bench.CRAWL).config_sha1
    pages = 0
    while pages < args.pages:
        marks = [cpu()]
        dispatcher.serve(bench.CRAWL)
        marks.append(cpu())
        if not sent:
            break
        tasks = [LeasedTask.from_dict(body) for body in sent]
        first = side["next_id"]
        links = [bench.page_links(urls, task, first + i * args.new_links, args,
                                  random.Random(first + i * args.new_links))
                 for i, task in enumerate(tasks)]
        list(pool.map(lambda task: bench.task_start(registry, digest, task,
                                                    settings.frontier_shards), tasks))
        marks.append(cpu())
        list(pool.map(lambda task, found: count_hosts(ledger, task, found), tasks, links))
        marks.append(cpu())
        add_links(frontier, links, pool, args.batch_push, side["batch"])
        marks.append(cpu())
        list(pool.map(lambda task: frontier.finish(task, deltas={"fetched": 1, "relevant": 1}),
                      tasks))
        marks.append(cpu())
        for step, before, after in zip(STEPS, marks[:-1], marks[1:], strict=True):
            spent[step] += after - before
        side["next_id"] = first + len(sent) * args.new_links
        pages += len(sent)
        side["pages"] += len(sent)
        sent.clear()


def node_cpu(node: Any) -> float:
    """The node's CPU seconds so far (one client kept: a new connection costs the node more
    than a FIGURES call)."""
    info = node.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def count_hosts(ledger: Any, task: LeasedTask, links: list) -> None:
    hosts = sorted({host_of(link.url) for link in links})
    ledger.fetch_counts(host_of(task.url), hosts + [k for h in hosts for k in domain_keys(h)])


def add_links(frontier: Any, links: list[list], pool: ThreadPoolExecutor, batch: bool,
              fetch_batch: int = 1) -> None:
    if not batch:
        if fetch_batch > 1:  # a message's pages' links merged, one push (write_batch)
            links = [merge_links([link for page in links[start:start + fetch_batch]
                                  for link in page])
                     for start in range(0, len(links), fetch_batch)]
        list(pool.map(frontier.add_new, links))
        return
    flat = [link for page in links for link in page]
    for start in range(0, len(flat), 1000):
        frontier.add_new(flat[start:start + 1000])


def start_side(spec: str, port: int, args: argparse.Namespace, workdir: Path) -> dict:
    match = re.fullmatch(r"(\d+)([pc])(?::(\d+))?", spec)
    if match is None:
        raise SystemExit(f"{spec!r}: a layout is Np or Nc (N shards, plain Redis or cluster), "
                         "optionally :B (fetch_batch B)")
    shards, cluster = int(match.group(1)), match.group(2) == "c"
    servers = bench.Servers(1, port, workdir / spec.replace(":", "-"),
                            cluster=cluster).__enter__()
    registry = bench.CrawlRegistry(servers.client, "jlsebench:")
    settings = bench.register(registry, shards, args)
    urls = bench.Urls(args.hosts, args.zipf)
    started = time.perf_counter()
    bench.fill(registry, servers, urls, args.urls, settings)
    print(f"{spec}: filled in {time.perf_counter() - started:.0f} s", flush=True)
    return {"spec": spec, "batch": int(match.group(3) or 1), "servers": servers, "node": servers.nodes()[0], "parts": (registry, servers, urls, settings),
            "next_id": args.urls, "pages": 0, "cpu": defaultdict(float)}


def report(sides: list[dict]) -> None:
    print(f"{'layout':7} {'pages':>6} " + " ".join(f"{step:>10}" for step in STEPS)
          + f" {'total':>8}   (Redis CPU µs per page)")
    for side in sides:
        spent, pages = side["cpu"], side["pages"]
        values = [1e6 * spent[step] / pages for step in STEPS]
        print(f"{side['spec']:7} {pages:6} " + " ".join(f"{v:10.1f}" for v in values)
              + f" {sum(values):8.1f}")
        for name in ("figures", "dispatch_script"):
            calls = spent[name + "_calls"]
            if calls:
                print(f"    {name}: {1e6 * spent[name] / pages:.1f} µs per page, "
                      f"{calls / pages:.3f} calls per page, {1e6 * spent[name] / calls:.0f} µs "
                      f"per call")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("layouts", nargs="+", help="Np or Nc: N shards, plain Redis or "
                        "cluster; Np:B or Nc:B with fetch_batch B")
    parser.add_argument("--pages", type=int, default=9000)
    parser.add_argument("--parts", type=int, default=3)
    parser.add_argument("--urls", type=int, default=1_000_000)
    parser.add_argument("--hosts", type=int, default=100_000)
    parser.add_argument("--batch-push", action="store_true")
    parser.add_argument("--base-port", type=int, default=18800)
    parser.add_argument("--workdir", default="/tmp/jlse-shard-costs")
    given = parser.parse_args()
    args = argparse.Namespace(urls=given.urls, pages=given.pages // given.parts,
                              hosts=given.hosts, zipf=1.0, links=20, new_links=2, internal=0.8,
                              outstanding=256, threads=8, batch_push=given.batch_push)
    sides: list[dict] = []
    try:
        with ThreadPoolExecutor(args.threads) as pool:
            for i, spec in enumerate(given.layouts):
                sides.append(start_side(spec, given.base_port + 10 * i, args,
                                        Path(given.workdir)))
            for _ in range(given.parts):
                for side in sides:
                    crawl_part(side, args, pool)
    finally:
        for side in sides:
            side["servers"].__exit__(None, None, None)
    report(sides)


if __name__ == "__main__":
    main()
