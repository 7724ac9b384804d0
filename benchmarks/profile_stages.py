"""Where the embedded crawl's CPU goes, by stage, sampled with py-spy (all threads, low overhead).

    .venv/bin/pip install py-spy
    .venv/bin/python benchmarks/profile_stages.py [--pages 2000] [--raw stacks.txt]

Crawls the sandbox web as ``bench_crawl.py`` does (current code, bfs, every page classified and
stored, politeness off) under ``py-spy record --threads``, with stderr on a pseudo-terminal so
the progress bar runs as it does in a terminal (``--no-progress`` to turn it off). Each sampled
stack of a running thread goes to one bucket: the first rule of ``RULES`` that one of its frames
matches, so a stage owns what it calls (``canonicalize`` under the parser is parse; under the
writer it is not). Main-thread samples outside ``EmbeddedCrawler.run`` (imports, model
training) are start-up, not per-page cost. py-spy runs with ``--gil``: only the thread holding
the GIL is sampled (without it, threads idle in the pool's queue count as running), so the
figures are CPU under the GIL, the resource that bounds the crawl; native code that releases
it (SQLite, socket reads) shows as the gap to the loop's process_time. Prints CPU ms/page per bucket, split main thread /
pool threads, and which share could move to worker processes; then the tail (the time from the
next-to-last page written to the end of the crawl loop, and the last pages).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_crawl import CURRENT, JLSE, ROOT, TIMELINE, Config, jlse_crawl_args, sandbox_server  # noqa: E402

# (bucket, frame pattern): the first rule one frame of a stack matches names its bucket.
RULES: tuple[tuple[str, str], ...] = (
    ("progress bar", r"/jlse/progress\.py|/tqdm/"),
    ("frontier", r"/scheduler/(frontier|ledger)\.py"),
    ("page repository (files)", r"/scheduler/store/pages\.py"),
    ("store (SQLite)", r"/scheduler/store/|sqlite3"),
    ("trap filter", r"/scheduler/traps\.py"),
    ("strategy scoring", r"/models/strateg"),
    ("classify", r"/models/|page_text \("),
    ("parse: canonicalise", r"/scheduler/urls\.py.*/workers/parser(_links)?\.py|"
                            r"/workers/parser(_links)?\.py.*/scheduler/urls\.py"),
    ("parse: lxml + links", r"/workers/parser(_links)?\.py|/lxml/"),
    ("fetch: robots.txt", r"/scheduler/robots\.py"),
    ("fetch: decode", r"/workers/charset\.py"),
    ("fetch (requests/urllib3)", r"/workers/fetcher\.py|/requests/|/urllib3/|/http/client"),
    ("pipeline other", r"/workers/pipeline\.py"),
    ("writer: engine other", r"/workers/engine\.py"),
    ("crawl loop + pool", r"/jlse/embedded\.py|/concurrent/futures/|crawl_timeline\.py"),
)
POOL_THREAD = "fetch"  # the embedded crawl's thread_name_prefix
WHOLE_STACK = {"parse: canonicalise"}  # rules matched on the whole stack, not one frame
# What could run in worker processes (no shared state but the models), what stays in the writer.
MOVABLE = ("fetch", "parse", "classify", "strategy scoring", "pipeline other",
           "page repository (files)")
STAYS = ("store (SQLite)", "frontier", "trap filter", "writer: engine other", "progress bar",
         "crawl loop + pool")


def bucket_of(thread: str, frames: list[str]) -> str:
    """The bucket of one sampled stack (frames root first)."""
    if thread == "MainThread" and not any("EmbeddedCrawler.run " in f for f in frames):
        return "start-up (outside the loop)"
    if thread != "MainThread" and not thread.startswith(POOL_THREAD):
        return "other threads (jieba, tqdm)"
    stack = ";".join(frames)
    for bucket, pattern in RULES:
        where = [stack] if bucket in WHOLE_STACK else frames
        if any(re.search(pattern, frame) for frame in where):
            return bucket
    return "other (in the loop)"


def read_samples(raw: Path) -> Counter[tuple[str, str]]:
    """(bucket, "main"/"pool") -> samples, from py-spy's raw (folded) output with --threads."""
    counts: Counter[tuple[str, str]] = Counter()
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        head, *frames = stack.split(";")
        thread = head.partition(": ")[2] or "MainThread"
        role = "pool" if thread.startswith(POOL_THREAD) else "main"
        counts[bucket_of(thread, frames), role] += int(n)
    return counts


def drain(fd: int) -> None:
    """Read the pseudo-terminal the progress bar writes to until it closes."""
    try:
        while os.read(fd, 65536):
            pass
    except OSError:
        pass


def profiled_crawl(args: argparse.Namespace, tmp: Path, raw: Path) -> dict:
    """Crawl under py-spy; returns crawl_timeline.py's timeline plus the crawl's summary."""
    cfg = Config("profile", args.scale, args.pages, args.concurrency)
    topic_dir = tmp / "topic"
    subprocess.run(JLSE + ["sandbox", "topic", args.topic, "--scale", str(args.scale),
                           "--out", str(topic_dir)], cwd=ROOT, check=True, capture_output=True)
    timeline, workdir = tmp / "timeline.json", tmp / "crawl"
    with sandbox_server(args.scale, tmp) as server:
        crawl = jlse_crawl_args(topic_dir, cfg, server.proxy, workdir)
        if not args.no_progress:
            crawl.remove("--no-progress")
        for setting in args.set:
            crawl += ["--set", setting]
        cmd = [args.py_spy, "record", "--gil", "--nonblocking", "--threads", "--full-filenames",
               "-r", str(args.rate), "-f", "raw", "-o", str(raw), "--", sys.executable, str(TIMELINE), str(timeline),
               "--"] + crawl
        run_with_tty_stderr(cmd, tmp / "stdout.txt")  # py-spy's messages and the crawl's JSON
    data = json.loads(timeline.read_text())
    data["summary"] = json.loads((workdir / "summary.json").read_text())
    return data


def run_with_tty_stderr(cmd: list[str], stdout: Path) -> None:
    main_fd, tty_fd = os.openpty()
    reader = threading.Thread(target=drain, args=(main_fd,), daemon=True)
    reader.start()
    with open(stdout, "w") as out:
        code = subprocess.run(cmd, cwd=ROOT, env=CURRENT.env(), stdout=out, stderr=tty_fd).returncode
    os.close(tty_fd)
    reader.join(5)
    os.close(main_fd)
    if code != 0:
        raise RuntimeError(f"profiled crawl failed (exit {code})")


def report(counts: Counter[tuple[str, str]], rate: float, timeline: dict) -> str:
    pages = timeline["summary"]["fetched"]
    per_page = 1000 / rate / pages  # ms of CPU per sample, per page
    buckets = sorted({b for b, _ in counts}, key=lambda b: -sum(counts[b, r] for r in ("main", "pool")))
    loop = {b: counts[b, "main"] + counts[b, "pool"] for b in buckets
            if not b.startswith(("start", "other threads"))}
    total = sum(loop.values())
    lines = [f"{pages} pages; {rate:g} samples/s of the GIL holder; CPU ms/page (sampled)",
             f"{'bucket':<28} {'main':>7} {'pool':>7} {'total':>7} {'share':>6}"]
    for b in buckets:
        main, pool = counts[b, "main"] * per_page, counts[b, "pool"] * per_page
        share = f"{100 * loop[b] / total:5.1f}%" if b in loop else "     -"
        lines.append(f"{b:<28} {main:7.2f} {pool:7.2f} {main + pool:7.2f} {share:>6}")
    loop_cpu = 1000 * (timeline["cpu_end"] - timeline["cpu_start"]) / pages
    lines.append(f"{'crawl loop, sampled':<28} {'':>7} {'':>7} {total * per_page:7.2f}   "
                 f"(process_time over the loop: {loop_cpu:.2f} ms/page)")
    lines += split_lines(loop, total)
    return "\n".join(lines)


def split_lines(loop: dict[str, int], total: int) -> list[str]:
    def share(names: tuple[str, ...]) -> float:
        return 100 * sum(n for b, n in loop.items() if b.startswith(names)) / max(total, 1)

    no_fetch = tuple(name for name in MOVABLE if name != "fetch")
    return [f"could move to worker processes (fetch, parse, classify, scoring, page files): "
            f"{share(MOVABLE):.0f}% of the loop's CPU ({share(no_fetch):.0f}% without fetch)",
            f"stays in the main process (store, frontier, traps, writer, progress, loop): "
            f"{share(STAYS):.0f}%"]


def tail_lines(timeline: dict) -> list[str]:
    written = sorted(timeline["written"])
    end, start = timeline["end"], timeline["start"]
    lines = [f"crawl loop {end - start:.2f} s; {len(written)} pages written"]
    for n in (1, 2, 10, 20):
        if len(written) > n:
            page = written[-n - 1]
            lines.append(f"  from page {len(written) - n} written ({page - start:.2f} s) to the "
                         f"end: {end - page:.2f} s")
    lines += [f"  last: {p['url']} ({p['outcome']}, fetch {p['elapsed'] or 0:.2f} s)"
              for p in timeline.get("last", [])]
    return lines


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--scale", type=float, default=1)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--topic", default="phones")
    parser.add_argument("--rate", type=float, default=250, help="py-spy samples per second")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a crawl setting, e.g. page_processes=0 (threads only)")
    parser.add_argument("--raw", type=Path, help="keep py-spy's folded stacks here")
    parser.add_argument("--py-spy", default=shutil.which("py-spy") or
                        str(Path(sys.executable).parent / "py-spy"))
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    with tempfile.TemporaryDirectory(prefix="profile-stages-") as tmp:
        raw = args.raw or Path(tmp) / "stacks.txt"
        timeline = profiled_crawl(args, Path(tmp), raw)
        counts = read_samples(raw)
    print(report(counts, args.rate, timeline))
    print("\n".join(tail_lines(timeline)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
