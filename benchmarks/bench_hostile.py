"""The hostile web (``jlse.sandbox.hostile``): memory with hostile pages in flight, and the share
of a crawl each trap takes.

    .venv/bin/python benchmarks/bench_hostile.py [--pages 16] [--budget 300] [--before]
        [--farm-seconds 300] [--only rss|traps|farm]

1. Peak RSS: ``jlse crawl`` (embedded, default page processes, concurrency 16) whose seeds are
   ``--pages`` copies of the 200,000-link gzip page (``links.hostile.test/big.html?copy=N``,
   16 requests in flight to that host), the process tree's RSS summed and sampled every 20 ms.
2. Trap share: a bfs crawl of ``--budget`` pages from three seeds, the subdomain trap
   (``s0.subtrap.test``), the ``?id=`` trap (``ids.hostile.test``) and a normal site: the share
   of fetched pages on each trap. ``--before`` also runs it with the domain and query-variant
   budgets off (the behaviour before them).
3. Link farm: ``jlse crawl`` (embedded, default settings, bfs, 100 pages) seeded with
   ``farm.hostile.test``, whose 1,997 hosts' robots.txt never answer, listed before the normal
   site: the normal site's pages (and the robots.txt requests) within ``--farm-seconds``.
"""

from __future__ import annotations

import argparse
import math
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from jlse.run import run_crawl
from jlse.sandbox import SandboxServer, build_web, hostile

OFF = {"max_hosts_per_domain": 10**9, "max_pages_per_domain": 10**9,
       "max_query_variants": 10**9}


def tree_rss(root: int) -> int:
    """Summed RSS (bytes) of ``root`` and its descendants."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(entry)
        children.setdefault(int(fields[1]), []).append(pid)
        rss[pid] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        todo.extend(children.get(pid, []))
    return total


def topic_dir(base: Path, seeds: list[str]) -> Path:
    base.mkdir(parents=True)
    (base / "seeds.txt").write_text("\n".join(seeds) + "\n")
    (base / "topic.toml").write_text('name = "hostile"\n')
    return base


def peak_rss(server: SandboxServer, pages: int, work: Path) -> tuple[float, float, int]:
    """(peak MB of the crawl's process tree, seconds, pages fetched)."""
    seeds = [f"http://{hostile.LINKS_HOST}/big.html?copy={n}" for n in range(pages)]
    topic = topic_dir(work / "big-topic", seeds)
    cmd = [sys.executable, "-m", "jlse.cli", "crawl", "--topic", str(topic), "--workdir",
           str(work / "big"), "--max-pages", str(pages), "--no-progress", "--strategy", "bfs",
           "--set", f"proxy={server.proxy_url}", "--set", "politeness_delay=0",
           "--set", f"host_concurrency={pages}", "--set", "store_pages=false"]
    started = time.monotonic()
    process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = 0
    while process.poll() is None:
        peak = max(peak, tree_rss(process.pid))
        time.sleep(0.02)
    elapsed = time.monotonic() - started
    if process.returncode != 0:
        sys.exit(f"crawl failed: {process.stderr.read().decode()[-500:]}")
    with sqlite3.connect(work / "big" / "crawl.db") as conn:
        fetched = conn.execute("SELECT COUNT(*) FROM links WHERE status = 'fetched'").fetchone()
    return peak / 2**20, elapsed, fetched[0]


def link_farm(server: SandboxServer, seconds: float, work: Path) -> dict[str, float]:
    """A bfs crawl of 100 pages seeded with the farm, stopped after ``seconds``: the normal
    site's pages, the seconds to its first one, the robots.txt requests to the farm's hosts."""
    topic = topic_dir(work / "farm-topic", [f"http://{hostile.FARM_HOST}/"])
    cmd = [sys.executable, "-m", "jlse.cli", "crawl", "--topic", str(topic), "--workdir",
           str(work / "farm"), "--max-pages", "100", "--no-progress", "--strategy", "bfs",
           "--set", f"proxy={server.proxy_url}"]
    server.clear_log()
    started = time.monotonic()
    process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    elapsed = time.monotonic() - started
    log = server.log
    normal = [e.t for e in log if e.host == hostile.NORMAL_HOST and e.path != "/robots.txt"]
    robots = sum(e.host.startswith("dead-robots-") and e.path == "/robots.txt" for e in log)
    first = min(normal, default=math.nan) - started
    return {"normal": len(normal), "first": first, "robots": robots, "seconds": elapsed}


def trap_shares(server: SandboxServer, budget: int, work: Path, extra: dict) -> dict[str, float]:
    seeds = [f"http://s0.{hostile.SUBTRAP_DOMAIN}/", f"http://{hostile.IDS_HOST}/item?id=0",
             f"http://{hostile.NORMAL_HOST}/"]
    topic = topic_dir(work / "topic", seeds)
    overrides = {"strategy": "bfs", "politeness_delay": 0.0, "concurrency": 8,
                 "proxy": server.proxy_url, "max_pages": budget, **extra}
    run_crawl(topic, overrides, workdir=work / "w", progress=False)
    with sqlite3.connect(work / "w" / "crawl.db") as conn:
        urls = [url for (url,) in conn.execute("SELECT url FROM links WHERE status = 'fetched'")]
    hosts = [url.split("/")[2] for url in urls]
    n = max(1, len(urls))
    return {"fetched": len(urls),
            "subdomain trap": sum(h.endswith("." + hostile.SUBTRAP_DOMAIN) for h in hosts) / n,
            "?id= trap": sum(h == hostile.IDS_HOST for h in hosts) / n,
            "normal site": sum(h == hostile.NORMAL_HOST for h in hosts) / n}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=16)
    parser.add_argument("--budget", type=int, default=300)
    parser.add_argument("--before", action="store_true", help="also run with the budgets off")
    parser.add_argument("--farm-seconds", type=float, default=300.0)
    parser.add_argument("--only", choices=("rss", "traps", "farm"))
    args = parser.parse_args()
    server = SandboxServer(build_web())
    server.start()
    try:
        if args.only in (None, "rss"):
            report_rss(server, args.pages)
        if args.only in (None, "traps"):
            report_traps(server, args.budget, args.before)
        if args.only in (None, "farm"):
            with tempfile.TemporaryDirectory() as tmp:
                farm = link_farm(server, args.farm_seconds, Path(tmp))
            print(f"link farm of {hostile.FARM_HOSTS} dead robots.txt hosts: {farm['normal']} "
                  f"pages of the normal site in {farm['seconds']:.0f} s, the first after "
                  f"{farm['first']:.0f} s ({farm['robots']} robots.txt requests)")
    finally:
        server.stop()


def report_rss(server: SandboxServer, pages: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        hostile.big_page_gzip()
        peak, elapsed, fetched = peak_rss(server, pages, Path(tmp))
    print(f"peak RSS, {pages} pages of 200,000 links in flight: {peak:.0f} MB "
          f"(process tree; {fetched} pages in {elapsed:.1f} s)")


def report_traps(server: SandboxServer, budget: int, before: bool) -> None:
    runs = [("with the budgets", {})] + ([("budgets off", OFF)] if before else [])
    for label, extra in runs:
        with tempfile.TemporaryDirectory() as tmp:
            shares = trap_shares(server, budget, Path(tmp), extra)
        print(f"trap share of a {budget}-page bfs crawl, {label}: " + ", ".join(
            f"{name} {value:.1%}" if name != "fetched" else f"{value} fetched"
            for name, value in shares.items()))


if __name__ == "__main__":
    main()
