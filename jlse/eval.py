"""``jlse eval``: crawl one web with several strategies and compare them by the ground truth.

For every topic and strategy: a fresh crawl from the same topic directory (seeds, samples) to
the same page budget, then the metrics of docs/algorithms.md §1.12 over the crawl history in fetch
order (``fetches`` rows by id; robots.txt refusals, traps and other rows without a page request
are not pages). Relevance is judged by the ground truth, never by the crawler's classifier:

- harvest rate @N = ground-truth relevant pages among the first N fetched / N;
- target recall @N = |targets of the topic among the first N fetched| / |targets of the topic|.

A crawl that stops before N pages (empty frontier) has no HR@N (None, "-" in the tables); its
TR@N is the recall it ended with. On the sandbox web (default) the web is served in a child
process and the topic directories and ground truth are written once; on any other web give a
ground-truth file (JSON lines ``{"url", "topic", "target"}``), topic directories and a proxy.

On a web known in process (the sandbox) each topic also gets an oracle row (``jlse.oracle``: the
best fetch order from the same seeds, knowing every label and the link graph), and every crawl
its efficiency@N = HR@N / oracle HR@N (``jlse.eval_report``).

A strategy named ``S+truth`` (``jlse+truth``) crawls as ``S`` with every page judged by the
ground truth instead of the topic's classifier: between ``S`` and the oracle, it tells what the
classifier's mistakes cost from what the link ranking does.
"""

from __future__ import annotations

import itertools
import json
import logging
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode

import numpy as np

from jlse.eval_losses import counted_requests, page_losses
from jlse.eval_report import CURVE_STEP as CURVE_STEP  # re-exported
from jlse.eval_report import RUN_MARK, EvalReport, StrategyResult
from jlse.models.strategy_catalog import available_strategies
from jlse.oracle import oracle_for_web
from jlse.plots import plot_report
from jlse.run import run_crawl
from jlse.sandbox import RealWeb, SandboxWeb, build_web
from jlse.scheduler.urls import canonicalize, host_of, registered_domain
from jlse.settings import load_settings
from jlse.topic import read_seeds

log = logging.getLogger(__name__)

DEFAULT_CHECKPOINTS = (100, 250, 500, 1000, 1500, 2000)
SANDBOX_SETTINGS: dict[str, Any] = {  # the sandbox is local: no politeness, short timeouts
    "politeness_delay": 0.0,
    "max_crawl_delay": 0.0,
    "concurrency": 8,
    "robots_retry_after": 2.0,
    "connect_timeout": 3.0,
    "read_timeout": 3.0,
    "fetch_deadline": 6.0,
    "store_pages": False,
}
SERVER_START_TIMEOUT = 60.0


class EvalError(ValueError):
    """The evaluation cannot run (missing ground truth or topic directory, server failure)."""


# --- ground truth ---

def truth_key(url: str) -> str:
    """Canonical URL with sorted query arguments: how fetched URLs are matched to the truth."""
    canonical = canonicalize(url) or url.strip()
    base, sep, query = canonical.partition("?")
    if not sep:
        return canonical
    return f"{base}?{urlencode(sorted(parse_qsl(query, keep_blank_values=True)))}"


@dataclass
class GroundTruth:
    """The topic of every known page and whether it is a target (detail) page."""

    topic_of: dict[str, str] = field(default_factory=dict)  # truth_key(url) -> topic
    targets: dict[str, set[str]] = field(default_factory=dict)  # topic -> truth keys

    def add(self, url: str, topic: str, is_target: bool) -> None:
        key = truth_key(url)
        self.topic_of[key] = topic
        if is_target:
            self.targets.setdefault(topic, set()).add(key)

    def is_relevant(self, url: str, topic: str) -> bool:
        return self.topic_of.get(truth_key(url)) == topic

    def is_target(self, url: str, topic: str) -> bool:
        return truth_key(url) in self.targets.get(topic, ())


def load_truth(path: Path) -> GroundTruth:
    """Read a JSON-lines ground truth; malformed lines are logged and skipped."""
    if not path.is_file():
        raise EvalError(f"{path}: ground-truth file not found")
    truth, bad = GroundTruth(), 0
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                truth.add(str(row["url"]), str(row["topic"]), bool(row.get("target", False)))
            except (ValueError, KeyError, TypeError) as exc:
                bad += 1
                log.warning("%s:%d: skipped malformed ground-truth line (%s)", path, number, exc)
    if bad:
        log.warning("%s: %d malformed lines skipped", path, bad)
    if not truth.topic_of:
        raise EvalError(f"{path}: no ground-truth rows")
    return truth


# --- metrics ---

def fetched_urls(db_path: Path) -> list[str]:
    """URLs of the page requests of a crawl, in fetch order (refusals without a request left out)."""
    if not db_path.is_file():
        raise EvalError(f"{db_path}: crawl database not found")
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        return [url for url, _, _ in counted_requests(conn)]
    finally:
        conn.close()


def harvest_curve(urls: Sequence[str], truth: GroundTruth, topic: str) -> np.ndarray:
    """HR after each page: element N-1 is the harvest rate @N."""
    relevant = np.array([truth.is_relevant(url, topic) for url in urls], dtype=float)
    return np.cumsum(relevant) / np.arange(1, len(urls) + 1) if len(urls) else np.zeros(0)


def recall_curve(urls: Sequence[str], truth: GroundTruth, topic: str) -> np.ndarray:
    """Target recall after each page: element N-1 is the target recall @N."""
    total = len(truth.targets.get(topic, ()))
    if total == 0 or not urls:
        return np.zeros(len(urls))
    seen: set[str] = set()
    new_targets = []
    for url in urls:
        key = truth_key(url)
        new_targets.append(truth.is_target(url, topic) and key not in seen)
        seen.add(key)
    return np.cumsum(np.array(new_targets, dtype=float)) / total


def sites_curve(urls: Sequence[str], truth: GroundTruth, topic: str) -> np.ndarray:
    """Relevant sites after each page: element N-1 counts the registered domains with a
    relevant page among the first N (TRES's count of relevant domains)."""
    found: set[str] = set()
    counts = np.zeros(len(urls))
    for position, url in enumerate(urls):
        if truth.is_relevant(url, topic):
            found.add(registered_domain(host_of(url)))
        counts[position] = len(found)
    return counts


def value_at(curve: np.ndarray, n: int, hold_last: bool) -> float | None:
    """The curve at N pages; past its end None, or its last value when ``hold_last``."""
    if len(curve) >= n:
        return float(curve[n - 1])
    if hold_last and len(curve):
        return float(curve[-1])
    return 0.0 if hold_last else None


def measure(topic: str, label: str, urls: Sequence[str], truth: GroundTruth,
            checkpoints: Sequence[int]) -> StrategyResult:
    hr, tr = harvest_curve(urls, truth, topic), recall_curve(urls, truth, topic)
    sites = sites_curve(urls, truth, topic)
    return StrategyResult(
        topic=topic, strategy=label, fetched=len(urls),
        n_targets=len(truth.targets.get(topic, ())),
        harvest_at={n: value_at(hr, n, hold_last=False) for n in checkpoints},
        recall_at={n: value_at(tr, n, hold_last=True) for n in checkpoints},
        sites_at={n: int(value_at(sites, n, hold_last=True) or 0) for n in checkpoints},
        harvest=hr.tolist(), recall=tr.tolist(),
    )


def relevance_threshold(topic_dir: Path, overrides: dict[str, Any]) -> float:
    """The threshold the crawl of ``topic_dir`` judged pages by (its settings and overrides)."""
    return load_settings(topic_dir / "topic.toml", overrides).relevance_threshold


# --- running the crawls ---

TRUTH_JUDGE = "+truth"  # a strategy name's suffix: pages judged by the ground truth


def strategy_and_judge(label: str, truth: GroundTruth, topic: str
                       ) -> tuple[str, Callable[[str], float] | None]:
    """The strategy a label names, and for ``S+truth`` the ground truth's judge of pages."""
    if not label.endswith(TRUTH_JUDGE):
        return label, None
    return label.removesuffix(TRUTH_JUDGE), lambda url: float(truth.is_relevant(url, topic))


def crawl_and_measure(topic: str, topic_dir: Path, label: str, overrides: dict[str, Any],
                      workdir: Path, truth: GroundTruth,
                      checkpoints: Sequence[int]) -> StrategyResult:
    log.info("eval: crawling %s with %s", topic, label)
    strategy, judge = strategy_and_judge(overrides.get("strategy", label), truth, topic)
    try:
        summary = run_crawl(topic_dir, dict(overrides, strategy=strategy), workdir=workdir,
                            fresh=True, progress=False, judge=judge)
    except (ValueError, RuntimeError, OSError) as exc:  # one failed crawl must not end the eval
        log.error("eval: %s/%s failed: %s", topic, label, exc)
        result = measure(topic, label, [], truth, checkpoints)
        result.reason = f"failed: {exc}"
        return result
    result = measure(topic, label, fetched_urls(workdir / "crawl.db"), truth, checkpoints)
    result.elapsed, result.reason = summary.elapsed, summary.reason
    result.losses = page_losses(workdir / "crawl.db", truth.topic_of, truth_key, topic,
                                max(checkpoints), relevance_threshold(topic_dir, overrides))
    log.info("eval: %s/%s fetched %d in %.1f s (%s)", topic, label, result.fetched,
             summary.elapsed, summary.reason)
    return result


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_for_port(port: int, process: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise EvalError(f"the sandbox server exited with code {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise EvalError(f"the sandbox server did not start within {timeout:.0f} s")


@contextmanager
def sandbox_process(seed: int, discovery: bool = False, scale: float = 1.0,
                    real_fraction: float | None = None, web_name: str = "real"):
    """Serve the sandbox web (``seed``, ``scale``; with ``discovery`` the discovery web, whose
    search API answers on the same address; with ``real_fraction`` the real-text web
    ``web_name`` of that fraction) in a child process; yields its proxy URL."""
    port = _free_port()
    command = [sys.executable, "-m", "jlse.cli", "sandbox", "serve", "--port", str(port),
               "--seed", str(seed)] + (["--discovery"] if discovery else []) + (
               ["--scale", str(scale)] if scale != 1.0 else [])
    if real_fraction is not None:
        command += ["--web", web_name, "--fraction", str(real_fraction)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               cwd=Path(__file__).resolve().parent.parent)
    try:
        _wait_for_port(port, process, SERVER_START_TIMEOUT)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _prepare_web(web: Any, topics: Sequence[str], out_dir: Path,
                 ) -> tuple[Path, dict[str, Path]]:
    """Write the truth file and the topic directories of an in-process web."""
    known = getattr(web, "topics", None)
    unknown = [topic for topic in topics if known is not None and topic not in known]
    if unknown:
        raise EvalError(f"unknown topic(s) {unknown} of the web; choose from {known}")
    truth_file = out_dir / "truth.jsonl"
    if hasattr(web, "write_truth"):
        web.write_truth(truth_file)
    else:
        with truth_file.open("w", encoding="utf-8") as handle:
            for page in web.iter_truth():
                handle.write(json.dumps({"url": page.url, "topic": page.topic, "target": bool(
                    getattr(page, "is_target", False)), "crawlable": page.crawlable}) + "\n")
    dirs = {topic: web.write_topic_dir(topic, out_dir / "topics" / topic) for topic in topics}
    return truth_file, dirs


def oracle_rows(web: Any, topic_dirs: dict[str, Path], truth: GroundTruth, budget: int,
                checkpoints: Sequence[int]) -> list[StrategyResult]:
    """The oracle's row of each topic: its fetch order from the topic's seeds, measured."""
    rows = []
    for topic, topic_dir in topic_dirs.items():
        started = time.monotonic()
        seeds = read_seeds(Path(topic_dir) / "seeds.txt")
        urls = oracle_for_web(web, topic, seeds, budget, key=truth_key)
        row = measure(topic, "oracle", urls, truth, checkpoints)
        row.elapsed = time.monotonic() - started
        row.reason = "oracle" if len(urls) == budget else "oracle: nothing fetchable left"
        rows.append(row)
        log.info("eval: oracle of %s: %d pages in %.1f s", topic, len(urls), row.elapsed)
    return rows


def _check_inputs(topics: Sequence[str], strategies: Sequence[str], budget: int,
                  checkpoints: Sequence[int], repeats: int = 1) -> None:
    if repeats < 1:
        raise EvalError(f"repeats: at least 1, got {repeats}")
    if not topics or not strategies:
        raise EvalError("give at least one topic and one strategy")
    unknown = [s for s in strategies
               if s.removesuffix(TRUTH_JUDGE) not in available_strategies()]
    if unknown:
        raise EvalError(f"unknown strategy {unknown}; "
                        f"choose from {', '.join(available_strategies())} "
                        f"(each may end in {TRUTH_JUDGE}: pages judged by the ground truth)")
    if budget < 1 or any(n < 1 for n in checkpoints):
        raise EvalError("budget and checkpoints must be at least 1")


def run_eval(
    topics: list[str],
    strategies: list[str],
    budget: int = 2000,
    out_dir: Path = Path("runs/eval"),
    seed: int = 7,
    checkpoints: Sequence[int] = DEFAULT_CHECKPOINTS,
    cf_sweep: list[int] | None = None,
    truth_file: Path | None = None,
    topic_dirs: dict[str, Path] | None = None,
    proxy: str | None = None,
    overrides: dict[str, Any] | None = None,
    web: Any | None = None,
    oracle: bool = True,
    repeats: int = 1,
) -> EvalReport:
    """Crawl each topic with each strategy and write report.md, report.json and the plots.

    The web: the sandbox of ``seed`` by default; ``web``, another web known in process (with
    ``iter_truth``, ``page_bytes``, ``write_topic_dir``; served through ``proxy``, or, for a
    ``SandboxWeb`` or ``RealWeb``, by a child process); or, with ``truth_file``, any web reached through
    ``proxy`` with ``topic_dirs``. On a web known in process, ``oracle`` adds each topic's oracle
    row and every crawl's efficiency (``jlse.oracle``). ``overrides`` are settings applied to
    every crawl (after the sandbox's own). ``repeats`` crawls each topic with each strategy
    that many times (runs vary with timing): rows ``S #1``, ``S #2``..., crawled in
    ``OUT/topic/S-1``..., and the report's spread section gives their mean and range."""
    checkpoints = sorted({n for n in checkpoints if n <= budget} or {budget})
    _check_inputs(topics, strategies, budget, checkpoints, repeats)
    if web is not None and truth_file is not None:
        raise EvalError("give a web or a truth file, not both")
    if web is not None and not proxy and not isinstance(web, SandboxWeb | RealWeb):
        raise EvalError("this web is served elsewhere: give the proxy that reaches it")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if truth_file is None:
        web = build_web(seed=seed) if web is None else web
        truth_file, topic_dirs = _prepare_web(web, topics, out_dir)
    missing = [t for t in topics if not topic_dirs or t not in topic_dirs]
    if missing:
        raise EvalError(f"no topic directory for {missing}: give topic_dirs for every topic")
    truth = load_truth(Path(truth_file))
    report = EvalReport(budget=budget, checkpoints=list(checkpoints), web=web_record(web),
                        repeats=repeats)
    with _proxy_for(web, proxy) as proxy_url:
        base = dict(SANDBOX_SETTINGS) if web is not None else {}
        base.update(overrides or {})
        base.update(max_pages=budget, proxy=proxy_url or "")
        for topic in topics:
            for run, strategy in itertools.product(range(1, repeats + 1), strategies):
                label, folder = run_label(strategy, run, repeats)
                report.results.append(crawl_and_measure(
                    topic, topic_dirs[topic], label, dict(base, strategy=strategy),
                    out_dir / topic / folder, truth, checkpoints))
            for cf in cf_sweep or ():
                report.sweep.append(crawl_and_measure(
                    topic, topic_dirs[topic], f"jlse cf={cf}", dict(base, strategy="jlse", cf=cf),
                    out_dir / topic / f"jlse-cf{cf}", truth, checkpoints))
    if web is not None and oracle:
        try:
            report.oracle = oracle_rows(web, {t: topic_dirs[t] for t in topics}, truth, budget,
                                        checkpoints)
        except (ValueError, OSError, RuntimeError) as exc:  # the crawls stay measured
            log.error("eval: no oracle: %s", exc)
            report.oracle_note = f"oracle: failed ({exc})"
        report.add_efficiency()
    elif web is not None:
        report.oracle_note = "oracle: not computed (--no-oracle)"
    report.plots = [str(path) for path in plot_report(report, out_dir)]
    report.write(out_dir)
    return report


def run_label(strategy: str, run: int, repeats: int) -> tuple[str, str]:
    """A crawl's row label and folder: the strategy's name, or with repeats ``S #run`` in
    ``S-run``."""
    if repeats == 1:
        return strategy, strategy
    return f"{strategy}{RUN_MARK}{run}", f"{strategy}-{run}"


def web_record(web: Any | None) -> dict[str, Any]:
    """Which web was crawled, for the report (nothing for a web known by its truth file)."""
    if isinstance(web, RealWeb):
        return {"name": web.web_name, "seed": web.seed, "fraction": web.fraction}
    if isinstance(web, SandboxWeb):
        return {"name": "sandbox", "seed": web.seed}
    return {}


@contextmanager
def _proxy_for(web: Any | None, proxy: str | None):
    """The given proxy; for a sandbox or real-text web (``RealWeb`` or a subclass: the
    newswire web) without one, a server of our own."""
    if isinstance(web, RealWeb) and not proxy:
        with sandbox_process(web.seed, real_fraction=web.fraction,
                             web_name=web.web_name) as url:
            yield url
    elif isinstance(web, SandboxWeb) and not proxy:
        with sandbox_process(web.seed, web.discovery, web.scale) as url:
            yield url
    else:
        yield proxy
