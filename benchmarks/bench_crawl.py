"""Embedded crawl throughput on the sandbox web: the current code, the baseline release, Scrapy.

For each configuration: start the sandbox web in its own process, then crawl it breadth-first
with the current jlse (A), the baseline release's jlse (B, a git worktree of ``--baseline``,
default 2b77270, run by the same interpreter), Scrapy (C), then A and B again (ABCAB: drift on
a shared machine shows as a gap between the two runs of one crawler, not between crawlers). Each
crawl is a child process; its peak memory is the peak of the summed RSS (and PSS) of its process
tree, polled every 0.2 s (``os.wait4`` sees one process only). Politeness is off and the sandbox
answers without latency, so this measures the crawlers' own cost. jlse runs the ``bfs`` strategy
with the topic model classifying every page and the page repository on (``store_pages``).

    .venv/bin/python benchmarks/bench_crawl.py            # 2,000 pages + a 20,000-page jlse run
    .venv/bin/python benchmarks/bench_crawl.py --no-20k   # 2,000 pages only
    .venv/bin/python benchmarks/bench_crawl.py --quick    # 1,000 pages only

Targets (issue): current jlse >= 2x Scrapy's pages/s and >= 1.8x the baseline's, overall (the
tail included), while classifying and storing every page; peak RSS of the whole process tree
under 500 MB for a 20,000-page crawl. Results go to ``benchmarks/results/crawl.json``.
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
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
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
TIMELINE = BENCH_DIR / "crawl_timeline.py"
JLSE = [sys.executable, "-m", "jlse.cli"]
DEFAULT_BASELINE = "2b77270"
RSS_TARGET_MB = 500
SCRAPY_TARGET = 2.0  # current jlse pages/s over Scrapy's, overall
BASELINE_TARGET = 1.8  # current jlse pages/s over the baseline release's, overall
RSS_POLL_S = 0.2
SERVER_START_TIMEOUT = 300.0
STAGES = ("fetch", "parse", "classify", "store")


@dataclass(frozen=True)
class Code:
    """A jlse source tree: the working tree (current) or a baseline worktree."""

    name: str  # "current" or "baseline"
    root: Path
    ref: str = ""

    def env(self) -> dict[str, str]:
        # PYTHONPATH precedes the editable install's finder, so this tree's packages win; a
        # baseline also needs its models/, scheduler/, workers/ and learner/ as jlse.*
        paths = [str(self.root)] if self.name == "current" else [str(import_root(self.root)),
                                                                  str(self.root)]
        return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


def import_root(tree: Path) -> Path:
    """A directory in ``tree`` whose ``jlse`` package is ``tree``'s, with ``tree``'s top-level
    packages as its subpackages, as the editable install maps them (and ``make lint``)."""
    package = tree / ".imports" / "jlse"
    if not package.exists():
        package.mkdir(parents=True)
        for item in (tree / "jlse").iterdir():
            (package / item.name).symlink_to(item)
        for name in ("models", "scheduler", "workers", "learner"):
            if (tree / name).is_dir() and not (package / name).exists():
                (package / name).symlink_to(tree / name)
    return package.parent


CURRENT = Code("current", ROOT)


@dataclass
class Config:
    name: str
    scale: float
    pages: int
    concurrency: int
    with_scrapy: bool = True
    with_baseline: bool = True


@dataclass
class Measured:
    """One child process: exit code, wall time, CPU time, peak RSS (own, tree) and output."""

    returncode: int
    wall: float
    cpu: float
    peak_rss_mb: float  # wait4: the child alone
    tree_rss_mb: float  # polled: the child and all its descendants, summed
    tree_pss_mb: float  # the same in PSS: shared (forked) pages counted once
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
    tool: str  # "jlse" or "scrapy"
    code: str = ""  # jlse: "current" or "baseline"
    pages: int = 0
    elapsed: float = 0.0
    pages_per_second: float = 0.0  # pages / elapsed of the crawl loop
    steady_pps: float | None = None  # over the middle 90% of pages: no start-up, no tail
    tail_s: float | None = None  # from the next-to-last page written (received) to the end
    wall: float = 0.0
    cpu_ms_per_page: float = 0.0  # the whole process (jlse: model training included)
    loop_cpu_ms: float | None = None  # jlse: the crawl process's own CPU ms/page in the loop
    server_cpu_ms: float | None = None  # the sandbox server's CPU ms/page during the run
    stages_ms: dict[str, float] = field(default_factory=dict)  # jlse's own split
    peak_rss_mb: float = 0.0  # the crawl process (wait4)
    tree_rss_mb: float = 0.0  # the crawl process and its descendants (polled)
    tree_pss_mb: float = 0.0  # the same in PSS
    classified: bool | None = None  # jlse: the topic model classified every page
    harvest: float | None = None  # ground truth: on-topic pages among those fetched
    known: float | None = None  # share of fetched URLs the sandbox truth lists
    mean_depth: float | None = None
    imported: str = ""  # jlse: the jlse package the crawl imported
    last_pages: list = field(default_factory=list)  # jlse: the last 3 written (what the tail is)
    detail: dict = field(default_factory=dict)  # outcomes (jlse) / statuses (Scrapy)
    error: str = ""


# --- child processes -------------------------------------------------------------------------
def _parent_of(pid: str) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return int(stat.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def process_tree(root: int) -> list[int]:
    """``root`` and all its descendants (one scan of /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            parent = _parent_of(entry.name)
            if parent is not None:
                children.setdefault(parent, []).append(int(entry.name))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, ()))
    return tree


def memory_kb(pid: int) -> tuple[int, int]:
    """(RSS, PSS) of one process; PSS splits pages shared with forked children between them."""
    rss = pss = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as rollup:
            for line in rollup:
                if line.startswith(b"Rss:"):
                    rss = int(line.split()[1])
                elif line.startswith(b"Pss:"):
                    pss = int(line.split()[1])
    except (OSError, ValueError):
        pass  # gone, or a zombie
    return rss, pss


class TreeRssPoller(threading.Thread):
    """Peaks of the summed RSS and PSS of a process tree, polled every ``RSS_POLL_S``."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.peak_rss_kb = self.peak_pss_kb = 0
        self._done = threading.Event()

    def run(self) -> None:
        while True:
            sizes = [memory_kb(pid) for pid in process_tree(self.pid)]
            self.peak_rss_kb = max(self.peak_rss_kb, sum(rss for rss, _ in sizes))
            self.peak_pss_kb = max(self.peak_pss_kb, sum(pss for _, pss in sizes))
            if self._done.wait(RSS_POLL_S):
                return

    def stop(self) -> tuple[float, float]:
        """Stop polling; the peaks (RSS, PSS) in MB."""
        self._done.set()
        self.join()
        return self.peak_rss_kb / 1024, self.peak_pss_kb / 1024


def measure(cmd: list[str], cwd: Path = ROOT, env: dict[str, str] | None = None) -> Measured:
    """Run ``cmd`` to completion; its rusage comes from wait4, not from RUSAGE_CHILDREN deltas."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        started = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=err,
                                stdin=subprocess.DEVNULL)
        poller = TreeRssPoller(proc.pid)
        poller.start()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - started
        tree_rss, tree_pss = poller.stop()
        proc.returncode = os.waitstatus_to_exitcode(status)  # Popen must not wait again
        out.seek(0)
        err.seek(0)
        return Measured(proc.returncode, wall, usage.ru_utime + usage.ru_stime,
                        usage.ru_maxrss / 1024, tree_rss, tree_pss, out.read(), err.read())


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass(frozen=True)
class Server:
    proxy: str  # the sandbox web's HTTP proxy URL
    pid: int

    def cpu_seconds(self) -> float:
        """The server's CPU time so far: it shares the machine's cores with the crawler."""
        try:
            with open(f"/proc/{self.pid}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def sandbox_server(scale: float, logdir: Path):
    """The sandbox web in its own process (never the crawler's: GIL); yields its ``Server``."""
    port = free_port()
    logfile = logdir / f"sandbox-{port}.log"
    cmd = JLSE + ["sandbox", "serve", "--port", str(port), "--scale", str(scale),
                  "--latency", "0"]
    with open(logfile, "w") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
    try:
        yield Server(_wait_for_proxy(proc, logfile), proc.pid)
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
                return word.partition("=")[2].rstrip(";,.)")
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


# --- the baseline release --------------------------------------------------------------------
def ensure_baseline(ref: str) -> Code:
    """A git worktree of ``ref`` under /tmp (reused when present), checked to import its own
    ``jlse`` and top-level ``models``/``workers`` packages rather than the installed ones."""
    sha = subprocess.run(["git", "rev-parse", "--verify", f"{ref}^{{commit}}"], cwd=ROOT,
                         check=True, capture_output=True, text=True).stdout.strip()
    tree = Path(tempfile.gettempdir()) / f"jlse-baseline-{sha[:12]}"
    if not (tree / "jlse" / "cli.py").exists():
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), sha], cwd=ROOT,
                       check=True, capture_output=True)
    code = Code("baseline", tree, f"{ref} ({sha[:12]})")
    probe = ("import jlse.cli, jlse.workers.pipeline as p; print(jlse.cli.__file__); "
             "print(p.__file__)")
    # not from ``tree`` itself: ``python -c`` puts the working directory first on the path
    files = subprocess.run([sys.executable, "-c", probe], cwd=import_root(tree), env=code.env(),
                           check=True, capture_output=True, text=True).stdout.split()
    if not all(Path(f).is_relative_to(tree) for f in files):
        raise RuntimeError(f"the baseline does not import from {tree}: {files}")
    print(f"baseline {code.ref}: {tree}; imports {', '.join(files)}", flush=True)
    return code


# --- the crawls ------------------------------------------------------------------------------
def jlse_crawl_args(topic_dir: Path, cfg: Config, proxy: str, workdir: Path) -> list[str]:
    # bfs still classifies every page with the topic model (the summary says "classified")
    return ["crawl", "--topic", str(topic_dir), "--max-pages", str(cfg.pages), "--strategy", "bfs",
            "--concurrency", str(cfg.concurrency), "--workdir", str(workdir), "--fresh",
            "--no-progress", "--json", "--set", f"proxy={proxy}", "--set", "politeness_delay=0",
            "--set", "max_crawl_delay=0", "--set", "store_pages=true"]


def run_jlse(code: Code, label: str, topic_dir: Path, cfg: Config, proxy: str, workdir: Path
             ) -> tuple[Run, Fetched]:
    timeline = workdir / "timeline.json"
    cmd = [sys.executable, str(TIMELINE), str(timeline), "--"]
    result = measure(cmd + jlse_crawl_args(topic_dir, cfg, proxy, workdir), code.root, code.env())
    run = Run(label, "jlse", code.name, wall=result.wall, peak_rss_mb=result.peak_rss_mb,
              tree_rss_mb=result.tree_rss_mb, tree_pss_mb=result.tree_pss_mb)
    if result.returncode != 0:
        run.error = f"exit {result.returncode}: {result.stderr.strip()[-500:]}"
        return run, Fetched()
    summary = json.loads(result.stdout)
    run.pages = summary["fetched"]
    run.elapsed = summary["elapsed"]
    run.pages_per_second = summary["pages_per_second"]
    run.stages_ms = {k: round(v, 3) for k, v in summary.get("cpu_ms_per_page", {}).items()}
    run.classified = summary.get("classified")
    run.detail = summary.get("outcomes", {})
    run.cpu_ms_per_page = 1000 * result.cpu / max(run.pages, 1)
    read_timeline(run, timeline)
    return run, exported_pages(code, workdir)


def read_timeline(run: Run, path: Path) -> None:
    """The tail, the loop's CPU/page and the imported jlse from crawl_timeline.py's file."""
    try:
        timeline = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    written = sorted(timeline["written"])
    if len(written) >= 2 and timeline["end"]:
        run.tail_s = timeline["end"] - written[-2]
    if timeline.get("cpu_end") is not None:
        cpu = timeline["cpu_end"] - timeline["cpu_start"]
        run.loop_cpu_ms = 1000 * cpu / max(run.pages, 1)
    run.imported = timeline.get("jlse_file", "")
    run.last_pages = timeline.get("last", [])


def exported_pages(code: Code, workdir: Path) -> Fetched:
    out = workdir / "export.jsonl"
    result = measure(JLSE + ["export", "--workdir", str(workdir), "--all", "--format", "jsonl",
                             "--out", str(out)], code.root, code.env())
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
    run = Run(label, "scrapy", wall=result.wall, peak_rss_mb=result.peak_rss_mb,
              tree_rss_mb=result.tree_rss_mb, tree_pss_mb=result.tree_pss_mb)
    if result.returncode != 0 or not out.exists():
        run.error = f"exit {result.returncode}: {result.stderr.strip()[-500:]}"
        return run, Fetched()
    summary = json.loads(out.read_text(encoding="utf-8"))
    run.pages = summary["pages"]
    run.elapsed = summary["elapsed"]
    run.pages_per_second = summary["pages_per_second"]
    run.detail = summary["statuses"]
    run.cpu_ms_per_page = 1000 * result.cpu / max(run.pages, 1)
    times = sorted(summary["times"])  # seconds since the spider opened
    run.tail_s = summary["elapsed"] - times[-2] if len(times) >= 2 else None
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
Crawl = Callable[[str, Path, Config, str, Path], tuple[Run, Fetched]]


def crawl_plan(cfg: Config, baseline: Code | None) -> list[tuple[str, Crawl]]:
    """ABCAB: current, baseline, Scrapy, current, baseline (without what is switched off)."""
    current = ("jlse A", partial(run_jlse, CURRENT))
    plan = [current]
    if cfg.with_baseline and baseline is not None:
        plan.append(("base B", partial(run_jlse, baseline)))
    if cfg.with_scrapy:
        plan.append(("scrapy C", run_scrapy))
    if len(plan) > 1:
        plan += [(f"{label}'", crawl) for label, crawl in plan if crawl is not run_scrapy]
    return plan


def bench_config(cfg: Config, topic: str, tmp: Path, baseline: Code | None) -> dict:
    print(f"\n== {cfg.name}: scale {cfg.scale:g}, {cfg.pages} pages, concurrency "
          f"{cfg.concurrency} ==", flush=True)
    topic_dir = tmp / f"topic-{cfg.name}"
    made = measure(JLSE + ["sandbox", "topic", topic, "--scale", str(cfg.scale),
                           "--out", str(topic_dir)])
    if made.returncode != 0:
        raise RuntimeError(f"jlse sandbox topic failed: {made.stderr.strip()[-500:]}")
    truth = load_truth(cfg.scale, tmp)
    runs, url_sets = [], {}
    with sandbox_server(cfg.scale, tmp) as server:
        for number, (label, crawl) in enumerate(crawl_plan(cfg, baseline)):
            workdir = tmp / f"{cfg.name}-run{number}"
            workdir.mkdir()
            server_cpu = server.cpu_seconds()
            run, fetched = crawl(label, topic_dir, cfg, server.proxy, workdir)
            run.server_cpu_ms = 1000 * (server.cpu_seconds() - server_cpu) / max(run.pages, 1)
            url_sets[label] = score_pages(run, fetched, truth, topic)
            runs.append(run)
            print(f"  {label:<9} {run.pages:>6} pages  {run.pages_per_second:8.1f} pages/s  "
                  f"tail {_fmt(run.tail_s, '5.2f')} s  tree RSS {run.tree_rss_mb:6.1f} MB, PSS "
                  f"{run.tree_pss_mb:6.1f} MB "
                  f"{run.error}", flush=True)
    return summarise(cfg, runs, url_sets)


def _mean_rate(runs: list[Run], key: str, rate: str) -> float | None:
    """Mean ``rate`` (a Run field) of the runs whose code (jlse) or tool (Scrapy) is ``key``."""
    values = [getattr(r, rate) for r in runs if key in (r.code, r.tool) and getattr(r, rate)]
    return sum(values) / len(values) if values else None


def _ratio(runs: list[Run], top: str, bottom: str, rate: str) -> float | None:
    a, b = _mean_rate(runs, top, rate), _mean_rate(runs, bottom, rate)
    return None if a is None or b is None else a / b


def _mean_stages(runs: list[Run], code: str) -> dict[str, float]:
    picked = [r.stages_ms for r in runs if r.code == code and r.stages_ms]
    order = {stage: n for n, stage in enumerate(STAGES)}
    keys = sorted({k for stages in picked for k in stages}, key=lambda k: (order.get(k, 99), k))
    return {k: round(sum(s.get(k, 0.0) for s in picked) / len(picked), 3) for k in keys}


def summarise(cfg: Config, runs: list[Run], url_sets: dict[str, set[str]]) -> dict:
    ok = [r for r in runs if not r.error]
    ratios = {f"{top}/{bottom}" + ("" if rate == "pages_per_second" else " steady"):
              _ratio(ok, top, bottom, rate)
              for top, bottom in (("current", "scrapy"), ("current", "baseline"))
              for rate in ("pages_per_second", "steady_pps")}
    overlap = None
    if url_sets.get("jlse A") and url_sets.get("scrapy C"):
        a, b = url_sets["jlse A"], url_sets["scrapy C"]
        overlap = len(a & b) / len(a | b)
    peak = max((r.tree_rss_mb for r in runs if r.code == "current"), default=0.0)
    peak_pss = max((r.tree_pss_mb for r in runs if r.code == "current"), default=0.0)
    to_scrapy, to_base = ratios["current/scrapy"], ratios["current/baseline"]
    return {
        "config": cfg.__dict__, "runs": [r.__dict__ for r in runs], "ratios": ratios,
        "stages_ms": {code: _mean_stages(ok, code) for code in ("current", "baseline")},
        "classified": all(r.classified for r in ok if r.tool == "jlse"),
        "url_overlap_jaccard": overlap, "current_tree_rss_mb": peak,
        "current_tree_pss_mb": peak_pss,
        "targets": {
            f"current/scrapy >= {SCRAPY_TARGET}": None if to_scrapy is None else to_scrapy >= SCRAPY_TARGET,
            f"current/baseline >= {BASELINE_TARGET}": None if to_base is None else to_base >= BASELINE_TARGET,
            f"tree RSS < {RSS_TARGET_MB} MB": peak < RSS_TARGET_MB,
            f"tree PSS < {RSS_TARGET_MB} MB": peak_pss < RSS_TARGET_MB,
        },
    }


# --- the report ------------------------------------------------------------------------------
def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


COLUMNS = (f"{'run':<9} {'pages':>6} {'pages/s':>8} {'steady':>7} {'tail s':>6} {'/Scrapy':>7} "
           + " ".join(f"{s:>8}" for s in STAGES)
           + f" {'loop CPU':>8} {'CPU/page':>8} {'server':>6} {'RSS MB':>7} {'tree MB':>7} {'PSS MB':>7} {'wall s':>6} {'depth':>5}"
           f" {'harvest':>7} {'known':>5}")


def _row(r: dict, scrapy_pps: float | None) -> str:
    if r["error"]:
        return f"{r['label']:<9} FAILED {r['error']}"
    ratio = r["pages_per_second"] / scrapy_pps if scrapy_pps and r["tool"] == "jlse" else None
    stages = " ".join(f"{_fmt(r['stages_ms'].get(s), '8.2f'):>8}" for s in STAGES)
    return (f"{r['label']:<9} {r['pages']:>6} {r['pages_per_second']:>8.1f} "
            f"{_fmt(r['steady_pps'], '7.1f'):>7} {_fmt(r['tail_s'], '6.2f'):>6} "
            f"{_fmt(ratio, '7.2f'):>7} {stages} "
            f"{_fmt(r['loop_cpu_ms'], '8.2f'):>8} {r['cpu_ms_per_page']:>8.2f} {_fmt(r['server_cpu_ms'], '6.2f'):>6} {r['peak_rss_mb']:>7.1f} {r['tree_rss_mb']:>7.1f} {r['tree_pss_mb']:>7.1f} "
            f"{r['wall']:>6.1f} {_fmt(r['mean_depth'], '5.2f'):>5} "
            f"{_fmt(r['harvest'], '7.3f'):>7} {_fmt(r['known'], '5.2f'):>5}")


def _stage_line(code: str, stages: dict[str, float]) -> str:
    if not stages:
        return f"  {code:<8} -"
    shown = ", ".join(f"{k} {v:.2f}" for k, v in stages.items())
    return f"  {code:<8} {shown}  (sum {sum(stages.values()):.2f})"


def _tail_line(r: dict) -> str:
    last = r["last_pages"][-1]
    return (f"  {r['label']}: tail {_fmt(r['tail_s'], '.2f')} s; last page written {last['url']} "
            f"({last['outcome']}, fetch {last['elapsed'] or 0:.2f} s)")


def render_table(result: dict) -> str:
    cfg = result["config"]
    scrapy = [r for r in result["runs"] if r["tool"] == "scrapy" and not r["error"]]
    scrapy_pps = scrapy[0]["pages_per_second"] if scrapy else None
    lines = [f"{cfg['name']}: scale {cfg['scale']:g}, {cfg['pages']} pages, concurrency "
             f"{cfg['concurrency']}", COLUMNS]
    lines += [_row(r, scrapy_pps) for r in result["runs"]]
    lines.append("pages/s ratios (mean of each crawler's runs, this invocation): " + ";  ".join(
        f"{k} {_fmt(v, '.2f')}" for k, v in result["ratios"].items()))
    lines.append("jlse CPU ms/page by stage (mean of runs):")
    lines += [_stage_line(code, stages) for code, stages in result["stages_ms"].items()]
    lines.append(f"URL overlap A vs C (Jaccard): {_fmt(result['url_overlap_jaccard'], '.2f')};  "
                 f"current peak of the process tree: RSS {result['current_tree_rss_mb']:.0f} "
                 f"MB, PSS {result['current_tree_pss_mb']:.0f} MB;  "
                 f"every page classified: {result['classified']}")
    lines += [_tail_line(r) for r in result["runs"] if r["last_pages"]]
    lines.append("targets: " + ", ".join(f"{k}: {v}" for k, v in result["targets"].items()))
    return "\n".join(lines)


LEGEND = """jlse A = current code, base B = baseline release (same interpreter, its own packages),
scrapy C = Scrapy; ' = second run (ABCAB). jlse: strategy bfs, topic model on every page,
pages stored (store_pages=true), politeness off.
pages/s: pages / crawl-loop time (jlse: its summary's elapsed; Scrapy: spider open to close).
steady: pages/s between the 5% and 95% page (no start-up, no slow-page tail).
tail s: from the next-to-last page written (Scrapy: received) to the end of the crawl loop.
/Scrapy: pages/s over Scrapy's. fetch..store: jlse's CPU ms/page per stage (its own split).
loop CPU: the jlse crawl process's own CPU ms/page during the loop (all its threads, no
start-up, page processes not included).
CPU/page: the whole child process (jlse: imports and model training included).
server: the sandbox server's CPU ms/page during the run (it shares the 2 cores).
RSS MB: peak of the crawl process (wait4); tree MB / PSS MB: peak of the summed RSS / PSS of the
process and its descendants, polled every 0.2 s (RSS counts pages forked children share with
the parent once per process; PSS splits them). depth: mean link depth. harvest: share of fetched pages
on the topic (sandbox truth); known: share of fetched URLs the truth lists."""


def plan_configs(args: argparse.Namespace) -> list[Config]:
    with_baseline = args.baseline is not None
    if args.quick:
        return [Config("quick", args.scale or 1, args.pages or 1000, args.concurrency,
                       with_baseline=with_baseline)]
    configs = [Config("small", args.scale or 1, args.pages or 2000, args.concurrency,
                      with_baseline=with_baseline)]
    if not args.no_20k:
        configs.append(Config("20k", 4, 20_000, args.concurrency, with_scrapy=args.scrapy_20k,
                              with_baseline=with_baseline and args.baseline_20k))
    return configs


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, help="page budget of the main run (default 2000)")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--scale", type=float, help="sandbox scale of the main run (default 1)")
    parser.add_argument("--topic", default="phones", help="sandbox topic")
    parser.add_argument("--quick", action="store_true", help="scale 1, 1,000 pages, no 20k run")
    parser.add_argument("--baseline", default=DEFAULT_BASELINE, metavar="REF",
                        help=f"git ref of the baseline release (default {DEFAULT_BASELINE})")
    parser.add_argument("--no-baseline", dest="baseline", action="store_const", const=None,
                        help="no baseline runs")
    parser.add_argument("--baseline-20k", action="store_true", help="the baseline in the 20k run too")
    parser.add_argument("--scrapy-20k", action="store_true", help="Scrapy in the 20k run too")
    parser.add_argument("--no-20k", action="store_true", help="skip the 20,000-page run")
    parser.add_argument("--out", type=Path, default=RESULTS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    ensure_bench_venv()
    baseline = ensure_baseline(args.baseline) if args.baseline else None
    load = os.getloadavg()
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-crawl-") as tmp:
        for cfg in plan_configs(args):
            results.append(bench_config(cfg, args.topic, Path(tmp), baseline))
    print()
    for result in results:
        print(render_table(result), end="\n\n")
    print(LEGEND, end="\n\n")
    print(f"load average at the start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} "
          f"({os.cpu_count()} CPUs)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"), "cpus": os.cpu_count(),
        "loadavg_start": load, "baseline": baseline.ref if baseline else None,
        "results": results}, indent=2))
    print(f"results written to {args.out}")
    failed = any(r["error"] for result in results for r in result["runs"])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
