"""Embedded crawl throughput on the sandbox web, side by side with Scrapy.

For each configuration: start the sandbox web in its own process, then crawl it breadth-first
with jlse, Scrapy, and jlse again (ABA: drift on a shared machine shows as a gap between the two
jlse runs), each in a child process whose peak RSS comes from ``os.wait4``. Politeness is off
and the sandbox answers without latency, so this measures the crawlers' own cost.

    .venv/bin/python benchmarks/bench_crawl.py            # 2,000 pages + a 20,000-page jlse run
    .venv/bin/python benchmarks/bench_crawl.py --quick    # 1,000 pages only

Targets (issue): jlse >= 1.0x Scrapy's pages/s while parsing, classifying and storing every page;
peak RSS under 500 MB for a 20,000-page crawl. Results go to ``benchmarks/results/crawl.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from jlse.scheduler.urls import canonicalize  # noqa: E402

from jlse.settings import DEFAULT_USER_AGENT, Settings  # noqa: E402

log = logging.getLogger("bench_crawl")

BENCH_DIR = ROOT / "benchmarks"
BENCH_VENV = BENCH_DIR / ".venv"
BENCH_PYTHON = BENCH_VENV / "bin" / "python"
RESULTS = BENCH_DIR / "results" / "crawl.json"
JLSE = [sys.executable, "-m", "jlse.cli"]
RSS_TARGET_MB = 500
SERVER_START_TIMEOUT = 300.0
STAGES = ("fetch", "parse", "classify", "store")


@dataclass
class Config:
    name: str
    scale: float
    pages: int
    concurrency: int
    with_scrapy: bool = True


@dataclass
class Measured:
    """One child process: its exit code, wall time, CPU time, peak RSS and output."""

    returncode: int
    wall: float
    cpu: float
    peak_rss_mb: float
    stdout: str
    stderr: str


@dataclass
class Fetched:
    """The pages one crawl fetched, in fetch order."""

    urls: list[str] = field(default_factory=list)
    times: list[float] = field(default_factory=list)  # seconds, any origin
    depths: list[int] = field(default_factory=list)


@dataclass
class Run:
    label: str
    tool: str
    pages: int = 0
    elapsed: float = 0.0
    pages_per_second: float = 0.0  # pages / elapsed of the crawl loop
    steady_pps: float | None = None  # over the middle 90% of pages: no start-up, no tail
    wall: float = 0.0
    cpu_ms_per_page: float = 0.0  # the whole process (jlse: model training included)
    stages_ms: dict[str, float] = field(default_factory=dict)  # jlse's own split
    peak_rss_mb: float = 0.0
    harvest: float | None = None  # ground truth: on-topic pages among those fetched
    known: float | None = None  # share of fetched URLs the sandbox truth lists
    mean_depth: float | None = None
    detail: dict = field(default_factory=dict)  # outcomes (jlse) / statuses (Scrapy)
    error: str = ""


# --- child processes -------------------------------------------------------------------------
def measure(cmd: list[str]) -> Measured:
    """Run ``cmd`` to completion; its rusage comes from wait4, not from RUSAGE_CHILDREN deltas."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        started = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=err,
                                stdin=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - started
        proc.returncode = os.waitstatus_to_exitcode(status)  # Popen must not wait again
        out.seek(0)
        err.seek(0)
        return Measured(proc.returncode, wall, usage.ru_utime + usage.ru_stime,
                        usage.ru_maxrss / 1024, out.read(), err.read())


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def sandbox_server(scale: float, logdir: Path):
    """The sandbox web in its own process (never the crawler's: GIL); yields the proxy URL."""
    port = free_port()
    logfile = logdir / f"sandbox-{port}.log"
    cmd = JLSE + ["sandbox", "serve", "--port", str(port), "--scale", str(scale),
                  "--latency", "0"]
    with open(logfile, "w") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
    try:
        yield _wait_for_proxy(proc, logfile)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_for_proxy(proc: subprocess.Popen, logfile: Path) -> str:
    deadline = time.monotonic() + SERVER_START_TIMEOUT
    while time.monotonic() < deadline:
        for word in logfile.read_text(errors="replace").split():
            if word.startswith("HTTP_PROXY="):
                return word.partition("=")[2]
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    raise RuntimeError(f"sandbox server did not start: {logfile.read_text(errors='replace')[-2000:]}")


def ensure_bench_venv() -> None:
    """Scrapy lives in benchmarks/.venv only, never in the project's environment."""
    if BENCH_PYTHON.exists():
        return
    print("creating benchmarks/.venv with Scrapy ...", flush=True)
    subprocess.run(["python3", "-m", "venv", str(BENCH_VENV)], check=True)
    subprocess.run([str(BENCH_VENV / "bin" / "pip"), "install", "--quiet", "-r",
                    str(BENCH_DIR / "requirements-bench.txt")], check=True)


# --- the crawls ------------------------------------------------------------------------------
def jlse_crawl_args(topic_dir: Path, cfg: Config, proxy: str, workdir: Path) -> list[str]:
    return ["crawl", "--topic", str(topic_dir), "--max-pages", str(cfg.pages), "--strategy", "bfs",
            "--concurrency", str(cfg.concurrency), "--workdir", str(workdir), "--fresh",
            "--no-progress", "--json", "--set", f"proxy={proxy}", "--set", "politeness_delay=0",
            "--set", "max_crawl_delay=0", "--set", "store_pages=true"]


def run_jlse(label: str, topic_dir: Path, cfg: Config, proxy: str, workdir: Path
             ) -> tuple[Run, Fetched]:
    result = measure(JLSE + jlse_crawl_args(topic_dir, cfg, proxy, workdir))
    run = Run(label, "jlse", wall=result.wall, peak_rss_mb=result.peak_rss_mb)
    if result.returncode != 0:
        run.error = f"exit {result.returncode}: {result.stderr.strip()[-500:]}"
        return run, Fetched()
    summary = json.loads(result.stdout)
    run.pages = summary["fetched"]
    run.elapsed = summary["elapsed"]
    run.pages_per_second = summary["pages_per_second"]
    run.stages_ms = {k: round(v, 3) for k, v in summary.get("cpu_ms_per_page", {}).items()}
    run.detail = summary.get("outcomes", {})
    run.cpu_ms_per_page = 1000 * result.cpu / max(run.pages, 1)
    return run, exported_pages(workdir)


def exported_pages(workdir: Path) -> Fetched:
    out = workdir / "export.jsonl"
    result = measure(JLSE + ["export", "--workdir", str(workdir), "--all", "--format", "jsonl",
                             "--out", str(out)])
    if result.returncode != 0:
        log.warning("jlse export failed: %s", result.stderr.strip()[-500:])
        return Fetched()
    with open(out, encoding="utf-8") as lines:
        rows = sorted((json.loads(line) for line in lines if line.strip()),
                      key=lambda row: row["fetched_at"] or 0.0)
    return Fetched([row["url"] for row in rows], [row["fetched_at"] or 0.0 for row in rows],
                   [row["depth"] or 0 for row in rows])


def run_scrapy(label: str, topic_dir: Path, cfg: Config, proxy: str, workdir: Path
               ) -> tuple[Run, Fetched]:
    out = workdir / "scrapy.json"
    defaults = Settings()  # Scrapy gets jlse's own fetch policy
    result = measure([str(BENCH_PYTHON), str(BENCH_DIR / "scrapy_bfs.py"),
                      "--seeds", str(topic_dir / "seeds.txt"), "--max-pages", str(cfg.pages),
                      "--concurrency", str(cfg.concurrency), "--proxy", proxy,
                      "--user-agent", DEFAULT_USER_AGENT, "--retries", str(defaults.max_retries),
                      "--max-bytes", str(defaults.max_bytes),
                      "--timeout", str(defaults.read_timeout), "--out", str(out)])
    run = Run(label, "scrapy", wall=result.wall, peak_rss_mb=result.peak_rss_mb)
    if result.returncode != 0 or not out.exists():
        run.error = f"exit {result.returncode}: {result.stderr.strip()[-500:]}"
        return run, Fetched()
    summary = json.loads(out.read_text(encoding="utf-8"))
    run.pages = summary["pages"]
    run.elapsed = summary["elapsed"]
    run.pages_per_second = summary["pages_per_second"]
    run.detail = summary["statuses"]
    run.cpu_ms_per_page = 1000 * result.cpu / max(run.pages, 1)
    return run, Fetched(summary["urls"], summary["times"], summary["depths"])


# --- ground truth ----------------------------------------------------------------------------
def load_truth(scale: float, workdir: Path) -> dict[str, str]:
    """Canonical URL -> topic of every sandbox page."""
    path = workdir / "truth.jsonl"
    result = measure(JLSE + ["sandbox", "truth", "--scale", str(scale), "--out", str(path)])
    if result.returncode != 0:
        raise RuntimeError(f"jlse sandbox truth failed: {result.stderr.strip()[-500:]}")
    truth = {}
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                row = json.loads(line)
                truth[canonicalize(row["url"]) or row["url"]] = row.get("topic") or ""
    return truth


def score_pages(run: Run, fetched: Fetched, truth: dict[str, str], topic: str) -> set[str]:
    """Set the run's harvest (ground truth), depth and steady rate; returns its canonical URLs."""
    canonical = [canonicalize(url) or url for url in fetched.urls]
    if canonical:
        run.known = sum(url in truth for url in canonical) / len(canonical)
        run.harvest = sum(truth.get(url) == topic for url in canonical) / len(canonical)
        run.mean_depth = sum(fetched.depths) / len(fetched.depths)
    run.steady_pps = steady_rate(fetched.times)
    return set(canonical)


def steady_rate(times: list[float], trim: float = 0.05) -> float | None:
    """Pages/s between the 5% and the 95% page: without start-up and the slow-page tail."""
    ordered = sorted(times)
    first, last = int(trim * len(ordered)), int((1 - trim) * len(ordered)) - 1
    if last - first < 10 or ordered[last] <= ordered[first]:
        return None
    return (last - first) / (ordered[last] - ordered[first])


# --- one configuration -----------------------------------------------------------------------
def bench_config(cfg: Config, topic: str, tmp: Path) -> dict:
    print(f"\n== {cfg.name}: scale {cfg.scale:g}, {cfg.pages} pages, concurrency "
          f"{cfg.concurrency} ==", flush=True)
    topic_dir = tmp / f"topic-{cfg.name}"
    made = measure(JLSE + ["sandbox", "topic", topic, "--scale", str(cfg.scale),
                           "--out", str(topic_dir)])
    if made.returncode != 0:
        raise RuntimeError(f"jlse sandbox topic failed: {made.stderr.strip()[-500:]}")
    truth = load_truth(cfg.scale, tmp)
    plan = [("jlse A", run_jlse), ("scrapy B", run_scrapy), ("jlse A'", run_jlse)]
    if not cfg.with_scrapy:
        plan = plan[:1]
    runs, url_sets = [], {}
    with sandbox_server(cfg.scale, tmp) as proxy:
        for number, (label, crawl) in enumerate(plan):
            workdir = tmp / f"{cfg.name}-run{number}"
            workdir.mkdir()
            run, fetched = crawl(label, topic_dir, cfg, proxy, workdir)
            url_sets[label] = score_pages(run, fetched, truth, topic)
            runs.append(run)
            print(f"  {label:<9} {run.pages:>6} pages  {run.pages_per_second:8.1f} pages/s  "
                  f"peak RSS {run.peak_rss_mb:6.1f} MB {run.error}", flush=True)
    return summarise(cfg, runs, url_sets)


def _ratio(runs: list[Run], rate: str) -> float | None:
    """Mean of the jlse runs' rate over Scrapy's (``rate`` names a Run field)."""
    jlse = [getattr(r, rate) for r in runs if r.tool == "jlse" and getattr(r, rate)]
    scrapy = [getattr(r, rate) for r in runs if r.tool == "scrapy" and getattr(r, rate)]
    if not jlse or not scrapy:
        return None
    return sum(jlse) / len(jlse) / scrapy[0]


def summarise(cfg: Config, runs: list[Run], url_sets: dict[str, set[str]]) -> dict:
    ok_runs = [r for r in runs if not r.error]
    ratio = _ratio(ok_runs, "pages_per_second")
    overlap = None
    if url_sets.get("jlse A") and url_sets.get("scrapy B"):
        a, b = url_sets["jlse A"], url_sets["scrapy B"]
        overlap = len(a & b) / len(a | b)
    peak = max((r.peak_rss_mb for r in runs if r.tool == "jlse"), default=0.0)
    return {
        "config": cfg.__dict__, "runs": [r.__dict__ for r in runs],
        "ratio_jlse_scrapy": ratio, "ratio_steady": _ratio(ok_runs, "steady_pps"),
        "url_overlap_jaccard": overlap, "jlse_peak_rss_mb": peak,
        "targets": {"ratio_ge_1": None if ratio is None else ratio >= 1.0,
                    "rss_under_500mb": peak < RSS_TARGET_MB},
    }


# --- the report ------------------------------------------------------------------------------
def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


COLUMNS = (f"{'run':<9} {'pages':>6} {'pages/s':>8} {'steady':>7} {'ratio':>6} "
           + " ".join(f"{s:>8}" for s in STAGES)
           + f" {'CPU/page':>8} {'RSS MB':>7} {'wall s':>6} {'depth':>5} {'harvest':>7}"
           f" {'known':>5}")


def _row(r: dict, scrapy_pps: float | None) -> str:
    if r["error"]:
        return f"{r['label']:<9} FAILED {r['error']}"
    ratio = r["pages_per_second"] / scrapy_pps if scrapy_pps and r["tool"] == "jlse" else None
    stages = " ".join(f"{_fmt(r['stages_ms'].get(s), '8.2f'):>8}" for s in STAGES)
    return (f"{r['label']:<9} {r['pages']:>6} {r['pages_per_second']:>8.1f} "
            f"{_fmt(r['steady_pps'], '7.1f'):>7} {_fmt(ratio, '6.2f'):>6} {stages} "
            f"{r['cpu_ms_per_page']:>8.2f} {r['peak_rss_mb']:>7.1f} {r['wall']:>6.1f} "
            f"{_fmt(r['mean_depth'], '5.2f'):>5} {_fmt(r['harvest'], '7.3f'):>7} "
            f"{_fmt(r['known'], '5.2f'):>5}")


def render_table(result: dict) -> str:
    cfg = result["config"]
    scrapy = [r for r in result["runs"] if r["tool"] == "scrapy" and not r["error"]]
    scrapy_pps = scrapy[0]["pages_per_second"] if scrapy else None
    lines = [f"{cfg['name']}: scale {cfg['scale']:g}, {cfg['pages']} pages, concurrency "
             f"{cfg['concurrency']}", COLUMNS]
    lines += [_row(r, scrapy_pps) for r in result["runs"]]
    lines.append(f"jlse/Scrapy pages/s (mean of A, A'): {_fmt(result['ratio_jlse_scrapy'], '.2f')}"
                 f", steady: {_fmt(result['ratio_steady'], '.2f')};  URL overlap A vs B "
                 f"(Jaccard): {_fmt(result['url_overlap_jaccard'], '.2f')};  jlse peak RSS "
                 f"{result['jlse_peak_rss_mb']:.0f} MB (target < {RSS_TARGET_MB})")
    return "\n".join(lines)


LEGEND = """pages/s: pages / crawl-loop time (jlse: its summary's elapsed; Scrapy: spider open to close).
steady: pages/s between the 5% and 95% page (no start-up, no slow-page tail).
ratio: pages/s over Scrapy's. fetch..store: jlse's CPU ms/page per stage (its own split).
CPU/page: the whole child process (jlse: imports and model training included). RSS: peak (wait4).
depth: mean link depth. harvest: share of fetched pages on the topic (sandbox truth);
known: share of fetched URLs the truth lists (redirect targets, error pages, robots.txt are not)."""


def plan_configs(args: argparse.Namespace) -> list[Config]:
    if args.quick:
        return [Config("quick", args.scale or 1, args.pages or 1000, args.concurrency)]
    configs = [Config("small", args.scale or 1, args.pages or 2000, args.concurrency)]
    if not args.no_20k:
        configs.append(Config("20k", 4, 20_000, args.concurrency, with_scrapy=args.scrapy_20k))
    return configs


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, help="page budget of the main run (default 2000)")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--scale", type=float, help="sandbox scale of the main run (default 1)")
    parser.add_argument("--topic", default="phones", help="sandbox topic")
    parser.add_argument("--quick", action="store_true", help="scale 1, 1,000 pages, no 20k run")
    parser.add_argument("--scrapy-20k", action="store_true", help="Scrapy in the 20k run too")
    parser.add_argument("--no-20k", action="store_true", help="skip the 20,000-page run")
    parser.add_argument("--out", type=Path, default=RESULTS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    ensure_bench_venv()
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-crawl-") as tmp:
        for cfg in plan_configs(args):
            results.append(bench_config(cfg, args.topic, Path(tmp)))
    print()
    for result in results:
        print(render_table(result), end="\n\n")
    print(LEGEND, end="\n\n")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"time": time.strftime("%Y-%m-%dT%H:%M:%S"),
                                    "cpus": os.cpu_count(), "results": results}, indent=2))
    print(f"results written to {args.out}")
    failed = any(r["error"] for result in results for r in result["runs"])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
