"""Issue 4's acceptance, as a new user runs it: the cluster make targets, an unseen web, a SIGKILL.

    .venv/bin/python scripts/acceptance_cluster.py [--pages 600] [--workers 2] [--seed 2027]
                                                   [--shards 3] [--set KEY=VALUE ...]

1. serves a sandbox web the project has never seen (``--seed``) as an HTTP proxy, with its own
   topic directory (seeds + samples) and request log;
2. ``make cluster-up WORKERS=n`` (dispatcher, n fetch workers, the learner, Flower), under a
   private Redis key prefix, run directory and PostgreSQL database; with ``--shards N`` (> 1),
   ``make cluster-up SHARDS=N``: a Redis Cluster of N masters (one replica each) on private
   ports, RabbitMQ as the broker and a dispatcher per shard;
3. ``jlse crawl --topic … --store postgresql://… --frontier redis://…``; when half the pages are
   fetched, one worker (the Celery parent and its children) is killed with SIGKILL;
4. waits for the crawl to exit, asks Flower's API for the tasks it saw, ``make status``, then
   ``make cluster-down``.

Checks (from the web server's own request log and the crawl database, not the crawler's word):
exit code 0 with the budget reached; no URL lost (every LinkTable URL fetched, rejected or in the
frontier); pages fetched twice at most as many as the killed worker had in flight; robots.txt and
Crawl-delay obeyed across workers; robots.txt requested once per host (a host whose robots.txt
answered 5xx may be asked again); Flower lists ``jlse.fetch`` and ``jlse.learn`` tasks.
Prints a report and exits non-zero if a check failed.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import psycopg2  # noqa: E402
import redis  # noqa: E402
from crawl_checks import (  # noqa: E402
    crawl_delay_breaches,
    duplicate_fetches,
    lost_urls,
    page_requests,
    robots_fetches_per_host,
    robots_violations,
)

from jlse.sandbox import SandboxServer, build_web  # noqa: E402
from jlse.scheduler.crawl_registry import CrawlRegistry  # noqa: E402
from jlse.scheduler.redis_client import connect  # noqa: E402

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
PG_ADMIN = os.environ.get("JLSE_ACCEPT_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
TAG = uuid.uuid4().hex[:8]
PREFIX = f"jlseaccept{TAG}:"
CRAWL_ID = "accept"
FLOWER_AUTH = f"accept:{uuid.uuid4().hex}"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=600)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=2027, help="sandbox seed (an unseen web)")
    parser.add_argument("--topic", default="cameras")
    parser.add_argument("--strategy", default="jlse")
    parser.add_argument("--latency", type=float, default=0.02, help="seconds per response")
    parser.add_argument("--shards", type=int, default=1,
                        help="frontier shards (> 1: a Redis Cluster, RabbitMQ)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a crawl setting (jlse crawl --set), e.g. fetch_batch=8")
    args = parser.parse_args()
    args.frontier = REDIS_URL
    if args.shards > 1:
        args.cluster_port = free_port_block(2 * args.shards)
        args.frontier = f"redis+cluster://127.0.0.1:{args.cluster_port}"
    return args


def free_port_block(count: int) -> int:
    from redis_cluster import pick_base_port

    return pick_base_port(count)


def make_env(args: argparse.Namespace, run_dir: Path, flower_port: int) -> dict[str, str]:
    env = dict(os.environ, REDIS_URL=REDIS_URL, JLSE_KEY_PREFIX=PREFIX, RUN_DIR=str(run_dir),
               FLOWER_PORT=str(flower_port), NODE_HOST=f"accept{TAG}", PYTHONUNBUFFERED="1",
               FLOWER_BASIC_AUTH=FLOWER_AUTH)  # Flower's API answers only with auth on
    env.pop("CELERY_BROKER_URL", None)
    if args.shards > 1:  # make cluster-up starts the Redis Cluster and takes RabbitMQ
        env.pop("REDIS_URL")
        env.update(SHARDS=str(args.shards), REDIS_CLUSTER_PORT=str(args.cluster_port))
    return env


def create_database() -> str:
    name = f"jlse_accept_{TAG}"
    admin = psycopg2.connect(PG_ADMIN)
    admin.autocommit = True
    with admin.cursor() as cursor:
        cursor.execute(f'CREATE DATABASE "{name}"')
    admin.close()
    return PG_ADMIN.rsplit("/", 1)[0] + f"/{name}"


def drop_database(url: str) -> None:
    admin = psycopg2.connect(PG_ADMIN)
    admin.autocommit = True
    with admin.cursor() as cursor:
        cursor.execute(f'DROP DATABASE IF EXISTS "{url.rsplit("/", 1)[1]}" WITH (FORCE)')
    admin.close()


def make(target: str, env: dict[str, str], workers: int) -> subprocess.CompletedProcess:
    started = time.monotonic()
    shards = f" SHARDS={env['SHARDS']}" if "SHARDS" in env else ""
    done = subprocess.run(["make", "-s", target, f"WORKERS={workers}", *shards.split()],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    print(f"$ make {target} WORKERS={workers}{shards}   ({time.monotonic() - started:.1f} s, "
          f"exit {done.returncode})")
    print("  " + (done.stdout + done.stderr).strip().replace("\n", "\n  "))
    return done


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def crawl_command(args: argparse.Namespace, topic_dir: Path, store_url: str,
                  proxy: str) -> list[str]:
    return [str(ROOT / ".venv/bin/jlse"), "crawl", "--topic", str(topic_dir),
            "--max-pages", str(args.pages), "--strategy", args.strategy,
            "--store", store_url, "--frontier", args.frontier, "--crawl-id", CRAWL_ID, "--json",
            "--no-progress", "--set", f"proxy={proxy}", "--set", "politeness_delay=0.2",
            *(option for setting in args.set for option in ("--set", setting))]
    # Lease settings stay at their defaults: the killed worker's URLs come back after
    # worker_lease_seconds (20 s), its heartbeat having stopped.


def kill_worker(run_dir: Path, registry: CrawlRegistry) -> tuple[int, int]:
    """SIGKILL worker1's whole session; (its pid, URLs leased in the whole cluster then: an
    upper bound on what the killed worker held)."""
    pid = int((run_dir / "worker1.pid").read_text().split()[0])
    os.killpg(pid, signal.SIGKILL)
    leases = registry.frontier(CRAWL_ID).in_flight()
    return pid, int(leases)


def flower_tasks(port: int) -> dict[str, int]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/api/tasks?limit=100000")
    token = base64.b64encode(FLOWER_AUTH.encode()).decode()
    request.add_header("Authorization", f"Basic {token}")
    with urllib.request.urlopen(request, timeout=10) as answer:
        tasks = json.load(answer)
    counts: dict[str, int] = {}
    for task in tasks.values():
        counts[task.get("name") or "?"] = counts.get(task.get("name") or "?", 0) + 1
    return counts


def run(args: argparse.Namespace, tmp: Path, store_url: str) -> list[str]:
    web = build_web(seed=args.seed)
    topic_dir = web.write_topic_dir(args.topic, tmp / "topic")
    run_dir, flower_port = tmp / "cluster", free_port()
    env = make_env(args, run_dir, flower_port)
    failures: list[str] = []
    client = None
    with SandboxServer(web, latency=args.latency) as server:
        # the workers' own proxy and database server (a worker never takes them from Redis)
        env.update(JLSE_PROXY=server.proxy_url, DATABASE_URL=store_url)
        if make("cluster-up", env, args.workers).returncode != 0:
            return ["make cluster-up failed"]
        client = connect(args.frontier)
        try:
            started = time.monotonic()
            crawl = subprocess.Popen(crawl_command(args, topic_dir, store_url, server.proxy_url),
                                     env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
            registry = CrawlRegistry(client, PREFIX)
            while _fetched(registry) < args.pages // 2 and crawl.poll() is None:
                time.sleep(0.1)
            pid, in_flight = kill_worker(run_dir, registry)
            print(f"SIGKILL worker1 (pid {pid}) at {_fetched(registry)} pages, "
                  f"{time.monotonic() - started:.1f} s in; {in_flight} URLs leased then")
            out, err = crawl.communicate(timeout=900)
            print(f"$ jlse crawl ... exit {crawl.returncode} after "
                  f"{time.monotonic() - started:.1f} s")
            if crawl.returncode != 0:
                return failures + [f"jlse crawl exited {crawl.returncode}: {err[-2000:]}"]
            summary = json.loads(out)
            print(f"  {summary['reason']}: {summary['fetched']} fetched, {summary['relevant']} "
                  f"relevant, Q-table version {summary.get('qtable_version')}")
            failures += check_crawl(summary, args, server, web, store_url, client, in_flight)
            failures += check_flower(flower_port, summary["fetched"])
            status = subprocess.run([str(ROOT / ".venv/bin/jlse"), "status", "--frontier",
                                     args.frontier], env=env, capture_output=True, text=True,
                                    timeout=60)
            print("$ jlse status\n  " + status.stdout.strip().replace("\n", "\n  "))
        finally:
            if make("cluster-down", env, args.workers).returncode != 0:
                failures.append("make cluster-down failed")
    return failures


def _fetched(registry: CrawlRegistry) -> int:
    try:
        return int(registry.counters(CRAWL_ID)["fetched"])
    except Exception:  # noqa: BLE001 - not registered yet
        return 0


def check_crawl(summary: dict, args: argparse.Namespace, server, web, store_url: str,
                client, in_flight: int) -> list[str]:
    log = server.log
    checks = {
        "budget reached": summary["fetched"] == args.pages,
        "no URL lost": not (lost := lost_urls(store_url, client, PREFIX, CRAWL_ID)),
        "robots.txt obeyed": not (robots := robots_violations(log, web)),
        "Crawl-delay obeyed": not (delays := crawl_delay_breaches(log, web)),
    }
    asked = robots_fetches_per_host(log)
    checks[f"robots.txt once per host ({sum(asked.values())} for {len(asked)} hosts)"] = \
        max(asked.values(), default=0) <= 1
    twice = duplicate_fetches(log)
    checks[f"fetched twice <= leased at the kill ({len(twice)} <= {in_flight})"] = \
        len(twice) <= in_flight
    hosts = len({entry.host for entry in log})
    pages = {f"http://{entry.host}{entry.path}" for entry in page_requests(log)}
    relevant = sum(web.is_relevant(url, args.topic) for url in pages)
    print(f"  web server saw {len(log)} requests to {hosts} hosts; twice: {twice[:5]}; "
          f"ground-truth harvest {relevant / max(len(pages), 1):.3f} ({relevant} of {len(pages)})")
    for name, ok in checks.items():
        print(f"  [{'ok' if ok else 'FAILED'}] {name}")
    details = {"lost": lost[:10], "robots": robots[:10], "delays": delays[:10],
               "robots.txt asked": {host: n for host, n in asked.items() if n > 1}}
    return [f"{name}: {details}" for name, ok in checks.items() if not ok]


def check_flower(port: int, fetched: int = 0) -> list[str]:
    try:
        counts = flower_tasks(port)
    except OSError as exc:
        return [f"Flower did not answer: {exc}"]
    print(f"  Flower lists tasks: {counts}")
    fetches = counts.get("jlse.fetch", 0) + counts.get("jlse.fetch_batch", 0)
    if counts.get("jlse.fetch_batch"):  # how full the batches were
        print(f"  {fetched} pages fetched in {fetches} fetch messages: "
              f"{fetched / fetches:.2f} a message")
    missing = [] if fetches else ["jlse.fetch"]  # or jlse.fetch_batch (fetch_batch > 1)
    missing += [name for name in ("jlse.learn",) if not counts.get(name)]
    return [f"Flower lists no {name} task" for name in missing]


def clear_prefix() -> None:
    """Remove this run's keys from the registry/frontier database and the broker's."""
    base = REDIS_URL.rsplit("/", 1)[0]
    for db in (REDIS_URL.rsplit("/", 1)[1] or "0", "1"):
        client = redis.Redis.from_url(f"{base}/{db}")
        keys = list(client.scan_iter(match=PREFIX + "*", count=1000))
        for start in range(0, len(keys), 1000):
            client.unlink(*keys[start:start + 1000])


def main() -> int:
    args = parse_args()
    store_url = create_database()
    try:
        with tempfile.TemporaryDirectory(prefix="jlse-accept-") as tmp:
            failures = run(args, Path(tmp), store_url)
    finally:
        drop_database(store_url)
        clear_prefix()
    print("\nacceptance:", "PASSED" if not failures else "FAILED")
    for failure in failures:
        print("  -", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
