"""Servers that stall: a crawl's pace and its Ctrl+C when hosts trickle headers or hang robots.txt.

Runs ``jlse crawl`` (a child process, default settings except where said) against the sandbox
web's stall hosts (``jlse/sandbox/stalls.py``) and reads the sandbox's own request log:

1. 16 hosts that send their status line and headers one byte every 2 s, linked before a normal
   site: seconds to crawl 100 pages (the normal site is the only one that answers).
2. The same crawl with no budget, Ctrl+C (SIGINT) after 5 s: seconds from the signal to the exit.
3. 2,000 hosts whose robots.txt hangs, seeded before the normal site: the normal site's pages
   in 60 s (30 with ``--quick``) against the same crawl of the normal site alone (its pace kept,
   as a ratio); politeness delay 0.25 s.

    .venv/bin/python benchmarks/bench_stalls.py            # 60 s per run of part 3
    .venv/bin/python benchmarks/bench_stalls.py --quick    # 30 s

Targets (issue 15): the crawl finishes and stops on Ctrl+C within seconds; the normal site
keeps most of its pace while 2,000 robots.txt hang.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from jlse.sandbox import SandboxServer, build_web  # noqa: E402
from jlse.sandbox.stalls import HUB_HOST, NORMAL_HOST  # noqa: E402

JLSE = [sys.executable, "-m", "jlse.cli"]
RESULTS = ROOT / "benchmarks" / "results" / "stalls.json"
NORMAL_SEED = f"http://{NORMAL_HOST}/"
POLITENESS = 0.25  # the normal site alone: about 4 pages/s


def start_crawl(server: SandboxServer, seeds: list[str], workdir: Path, max_pages: int,
                **settings: object) -> subprocess.Popen:
    topic = workdir / "topic"
    topic.mkdir(parents=True, exist_ok=True)
    (topic / "seeds.txt").write_text("\n".join(seeds) + "\n")
    args = [*JLSE, "crawl", "--topic", str(topic), "--workdir", str(workdir / "w"),
            "--max-pages", str(max_pages), "--strategy", "bfs", "--no-progress", "--json",
            "--set", f"proxy={server.proxy_url}"]
    for key, value in settings.items():
        args += ["--set", f"{key}={value}"]
    return subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def normal_pages(server: SandboxServer) -> int:
    return sum(1 for entry in server.log if entry.host == NORMAL_HOST
               and entry.path != "/robots.txt")


def slow_headers_finish(server: SandboxServer, workdir: Path) -> dict:
    server.clear_log()
    started = time.monotonic()
    proc = start_crawl(server, [f"http://{HUB_HOST}/?slow=16"], workdir, 100,
                       politeness_delay=0.0)
    proc.communicate(timeout=600)
    return {"seconds": round(time.monotonic() - started, 1), "exit": proc.returncode,
            "normal_pages": normal_pages(server)}


def ctrl_c(server: SandboxServer, workdir: Path) -> dict:
    server.clear_log()
    proc = start_crawl(server, [f"http://{HUB_HOST}/?slow=16"], workdir, 1_000_000,
                       politeness_delay=0.0)
    time.sleep(5.0)
    os.killpg(proc.pid, signal.SIGINT)
    signalled = time.monotonic()
    try:
        proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
    return {"seconds_to_exit": round(time.monotonic() - signalled, 1), "exit": proc.returncode}


def paced_pages(server: SandboxServer, workdir: Path, seeds: list[str], seconds: float) -> int:
    server.clear_log()
    proc = start_crawl(server, seeds, workdir, 1_000_000, politeness_delay=POLITENESS)
    time.sleep(seconds)
    os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
    return normal_pages(server)


def hanging_robots(server: SandboxServer, workdir: Path, seconds: float) -> dict:
    alone = paced_pages(server, workdir / "alone", [NORMAL_SEED], seconds)
    hub = f"http://{HUB_HOST}/?hang=2000"  # seeded first: its 2,000 hosts come first
    with_hangs = paced_pages(server, workdir / "hang", [hub, NORMAL_SEED], seconds)
    return {"seconds": seconds, "normal_alone": alone, "normal_with_2000_hanging": with_hangs,
            "pace_kept": round(with_hangs / max(alone, 1), 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="30 s runs instead of 60 s")
    args = parser.parse_args()
    seconds = 30.0 if args.quick else 60.0
    results: dict[str, dict] = {}
    with SandboxServer(build_web(scale=0.2)) as server, \
            tempfile.TemporaryDirectory(prefix="bench-stalls-") as tmp:
        work = Path(tmp)
        results["slow_headers"] = slow_headers_finish(server, work / "slow")
        print(f"16 slow-header hosts: 100 pages in {results['slow_headers']['seconds']} s "
              f"(exit {results['slow_headers']['exit']})", flush=True)
        results["ctrl_c"] = ctrl_c(server, work / "ctrlc")
        print(f"Ctrl+C with 16 slow-header fetches in flight: exit "
              f"{results['ctrl_c']['exit']} after {results['ctrl_c']['seconds_to_exit']} s",
              flush=True)
        results["hanging_robots"] = hanging_robots(server, work / "robots", seconds)
        hanging = results["hanging_robots"]
        print(f"normal site in {seconds:.0f} s: {hanging['normal_alone']} pages alone, "
              f"{hanging['normal_with_2000_hanging']} with 2,000 hanging robots.txt "
              f"(pace kept {hanging['pace_kept']:.2f})", flush=True)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
