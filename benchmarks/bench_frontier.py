"""Speed and memory of the Redis frontier with 1,000,000 URLs queued.

Fills a RedisFrontier with N URLs over ~10,000 hosts (pipelined ``push_many``), then times a few
thousand of each operation with the frontier full: push (one round trip each, and page-sized
batches of 100), leased pop, ack, reap, and ``add_new`` (dedup). Bytes per URL come from the
``used_memory`` delta of INFO memory (whole server: noisy if others use it) and from
``MEMORY USAGE`` of the frontier's own keys, split into queue+payload and fingerprints.
Uses its own key prefix and deletes its keys at the end.

    python benchmarks/bench_frontier.py [--urls 1000000] [--hosts 10000] [--ops 5000]
                                        [--redis redis://127.0.0.1:6379/0]
"""

from __future__ import annotations

import argparse
import random
import time
import uuid
from collections.abc import Callable, Iterator

import redis

from jlse.records import CrawlTask
from jlse.scheduler.redis_frontier import RedisFrontier, task_json

FILL_BATCH = 1000
PAGE_LINKS = 100


class BenchClock:
    """Real time plus an offset, so leases can be expired without waiting."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


def make_task(i: int, hosts: int, rng: random.Random) -> CrawlTask:
    host = i % hosts
    return CrawlTask(
        url=f"http://www.site{host:05d}.example.com/category/{i % 97}/item-{i}.html",
        url_id=i, priority=round(rng.random(), 6), depth=i % 6, parent_id=i // 80,
        anchor_text=f"product {i} review", context="price and battery life of the new model")


def batches(start: int, stop: int, size: int, hosts: int, seed: int) -> Iterator[list[CrawlTask]]:
    rng = random.Random(seed)
    for first in range(start, stop, size):
        yield [make_task(i, hosts, rng) for i in range(first, min(first + size, stop))]


def timed(call: Callable[[list[CrawlTask]], object], groups: Iterator[list[CrawlTask]]) -> tuple[int, float]:
    """Run ``call`` on each batch; (items, seconds spent inside the calls only)."""
    count, spent = 0, 0.0
    for group in groups:
        started = time.perf_counter()
        call(group)
        spent += time.perf_counter() - started
        count += len(group)
    return count, spent


def used_memory(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


def key_memory(client: redis.Redis, prefix: str) -> dict[str, int]:
    """MEMORY USAGE (exact, SAMPLES 0) of the frontier's keys, summed per kind of key."""
    keys = list(client.scan_iter(match=prefix + "*", count=5000))
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.memory_usage(key, samples=0)
    totals: dict[str, int] = {}
    for key, size in zip(keys, pipe.execute(), strict=True):
        name = key.decode()[len(prefix):]
        kind = name.split(":", 1)[0] if ":" in name else name
        totals[kind] = totals.get(kind, 0) + int(size or 0)
    return totals


def time_pops(frontier: RedisFrontier, count: int) -> tuple[list[CrawlTask], float]:
    started = time.perf_counter()
    popped = [frontier.pop() for _ in range(count)]
    elapsed = time.perf_counter() - started
    assert all(t is not None for t in popped), "fewer ready hosts than --ops"
    return popped, elapsed


def run(args: argparse.Namespace) -> None:
    client = redis.Redis.from_url(args.redis)
    clock = BenchClock()
    prefix = f"jlse:bench:{uuid.uuid4().hex[:12]}:"
    frontier = RedisFrontier(client, prefix, max_size=2 * args.urls, lease_seconds=300.0,
                             clock=clock)
    n, ops, hosts = args.urls, args.ops, args.hosts
    rows: list[tuple[str, int, float]] = []
    memory: dict[str, int] = {}
    try:
        before = used_memory(client)
        rows.append(("push_many fill (1000/call)",
                     *timed(frontier.push_many, batches(0, n, FILL_BATCH, hosts, 1))))
        memory["queue+payload (INFO used_memory delta)"] = used_memory(client) - before
        memory.update(key_memory(client, prefix))
        before = used_memory(client)
        rows.append(("add_new, all queued (1000/call)",
                     *timed(frontier.add_new, batches(0, n, FILL_BATCH, hosts, 1))))
        memory["fingerprints (INFO used_memory delta)"] = used_memory(client) - before
        seen_keys = key_memory(client, prefix)
        memory["seen"] = seen_keys.get("seen", 0)
        time_operations(frontier, clock, rows, n, ops, hosts)
        stats = frontier.stats()
    finally:
        started = time.perf_counter()
        deleted = frontier.clear()
        clear_seconds = time.perf_counter() - started
    json_bytes = sum(len(task_json(t)) for t in next(batches(0, 1000, 1000, hosts, 1))) / 1000
    report(rows, memory, n, hosts, stats, json_bytes)
    print(f"clear(): {deleted:,} keys unlinked in {clear_seconds:.2f} s")


def time_operations(frontier: RedisFrontier, clock: BenchClock, rows: list, n: int, ops: int,
                    hosts: int) -> None:
    """Time each operation ``ops`` times with the frontier full."""
    rows.append(("push, one per call", *timed(
        lambda group: [frontier.push(t) for t in group], batches(n, n + ops, 100, hosts, 2))))
    rows.append(("push_many, 100/call", *timed(
        frontier.push_many, batches(n + ops, n + 2 * ops, PAGE_LINKS, hosts, 3))))
    popped, elapsed = time_pops(frontier, ops)
    rows.append(("leased pop", ops, elapsed))
    started = time.perf_counter()
    assert all(frontier.ack(task) for task in popped)
    rows.append(("ack", ops, time.perf_counter() - started))
    time_pops(frontier, ops)
    clock.offset += frontier.lease_seconds + 1
    started = time.perf_counter()
    reaped = frontier.reap()
    rows.append(("reap (expired leases)", reaped, time.perf_counter() - started))
    rows.append(("add_new, new URLs (100/call)", *timed(
        frontier.add_new, batches(n + 2 * ops, n + 3 * ops, PAGE_LINKS, hosts, 4))))
    rows.append(("add_new, seen URLs (100/call)", *timed(
        frontier.add_new, batches(n + 2 * ops, n + 3 * ops, PAGE_LINKS, hosts, 4))))


def report(rows: list, memory: dict[str, int], n: int, hosts: int, stats: dict,
           json_bytes: float) -> None:
    print(f"\nRedis frontier, {n:,} URLs over {hosts:,} hosts; stats at the end: {stats}\n")
    print(f"{'operation':36} {'count':>9} {'seconds':>8} {'ops/s':>10}")
    for name, count, seconds in rows:
        print(f"{name:36} {count:>9,} {seconds:>8.2f} {count / seconds:>10,.0f}")
    print(f"\nmemory at {n:,} URLs (task JSON {json_bytes:.0f} bytes on average); "
          "MEMORY USAGE per key kind")
    print(f"{'part':40} {'bytes':>13} {'bytes/URL':>10}")
    for name, size in memory.items():
        print(f"{name:40} {size:>13,} {size / n:>10.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--urls", type=int, default=1_000_000)
    parser.add_argument("--hosts", type=int, default=10_000)
    parser.add_argument("--ops", type=int, default=5_000, help="timed pops/acks/pushes")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    run(parser.parse_args())


if __name__ == "__main__":
    main()
