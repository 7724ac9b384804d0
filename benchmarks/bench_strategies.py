"""Embedded crawl throughput of the ``jlse`` strategy against ``bfs`` on the sandbox web.

The sandbox web is served from its own process; the crawls alternate (bfs, jlse, bfs, jlse, ...)
in child processes, each a ``jlse crawl --fresh`` of the same topic with the same settings as
``benchmarks/bench_crawl.py`` (politeness off, no latency, page repository on, SQLite). jlse
pays for everything it does on top of bfs: anchor similarity and the Q-table search for every
out-link of a relevant page, and the background learner re-learning G_w every ``cf`` results.

Target (issue): jlse's pages/s at least 80% of bfs's. "Politeness off" means no delay and
``--host-concurrency`` requests in flight per host (default: as many as ``--concurrency``);
``--host-concurrency 1`` keeps one request per host, where a focused crawl that finds its topic
on few hosts waits for them (that measures the web's shape, not the strategy's cost).

    .venv/bin/python benchmarks/bench_strategies.py [--pages 2000] [--runs 2] [--concurrency 16]

Results go to ``benchmarks/results/strategies.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from pathlib import Path

from bench_crawl import (
    JLSE,
    Run,
    exported_pages,
    load_truth,
    measure,
    sandbox_server,
    score_pages,
)

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "strategies.json"
STRATEGIES = ("bfs", "jlse")
TARGET_RATIO = 0.8


def crawl_args(strategy: str, topic_dir: Path, args: argparse.Namespace, proxy: str,
               workdir: Path) -> list[str]:
    """``jlse crawl`` as bench_crawl.py runs it, with ``strategy``."""
    return ["crawl", "--topic", str(topic_dir), "--max-pages", str(args.pages),
            "--strategy", strategy, "--concurrency", str(args.concurrency),
            "--workdir", str(workdir), "--fresh", "--no-progress", "--json",
            "--set", f"proxy={proxy}", "--set", "politeness_delay=0",
            "--set", "max_crawl_delay=0", "--set", "store_pages=true",
            "--set", f"host_concurrency={args.host_concurrency or args.concurrency}"]


def run_crawl(label: str, strategy: str, topic_dir: Path, args: argparse.Namespace, proxy: str,
              workdir: Path, truth: dict[str, str]) -> Run:
    result = measure(JLSE + crawl_args(strategy, topic_dir, args, proxy, workdir))
    run = Run(label, strategy, wall=result.wall, peak_rss_mb=result.peak_rss_mb)
    if result.returncode != 0:
        run.error = f"exit {result.returncode}: {result.stderr.strip()[-500:]}"
        return run
    summary = json.loads(result.stdout)
    run.pages = summary["fetched"]
    run.elapsed = summary["elapsed"]
    run.pages_per_second = summary["pages_per_second"]
    run.stages_ms = {k: round(v, 3) for k, v in summary.get("cpu_ms_per_page", {}).items()}
    run.cpu_ms_per_page = 1000 * result.cpu / max(run.pages, 1)
    run.detail = {"reason": summary.get("reason"), "qtables": latest_qtable(workdir / "qtables")}
    score_pages(run, exported_pages(workdir), truth, args.topic)
    return run


def latest_qtable(directory: Path) -> int:
    """The version of the last Q-table the learner saved (versions count from 1), 0 if none."""
    versions = [int(path.stem.rpartition("-v")[2]) for path in directory.glob("qtable-v*.npz")]
    return max(versions, default=0)


def mean_rate(runs: list[Run], tool: str, rate: str) -> float | None:
    values = [getattr(r, rate) for r in runs if r.tool == tool and not r.error and getattr(r, rate)]
    return sum(values) / len(values) if values else None


def ratio(runs: list[Run], rate: str) -> float | None:
    jlse, bfs = mean_rate(runs, "jlse", rate), mean_rate(runs, "bfs", rate)
    return jlse / bfs if jlse and bfs else None


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def render(runs: list[Run]) -> str:
    lines = [f"{'run':<7} {'pages':>6} {'pages/s':>8} {'steady':>7} {'fetch':>6} {'parse':>6} "
             f"{'classify':>8} {'store':>6} {'CPU/page':>8} {'RSS MB':>7} {'harvest':>7} "
             f"{'Q-tables':>8}  stop"]
    for r in runs:
        if r.error:
            lines.append(f"{r.label:<7} FAILED {r.error}")
            continue
        stages = " ".join(f"{_fmt(r.stages_ms.get(s), '6.2f'):>6}"
                          for s in ("fetch", "parse"))
        lines.append(
            f"{r.label:<7} {r.pages:>6} {r.pages_per_second:>8.1f} {_fmt(r.steady_pps, '7.1f'):>7} "
            f"{stages} {_fmt(r.stages_ms.get('classify'), '8.2f'):>8} "
            f"{_fmt(r.stages_ms.get('store'), '6.2f'):>6} {r.cpu_ms_per_page:>8.2f} "
            f"{r.peak_rss_mb:>7.1f} {_fmt(r.harvest, '7.3f'):>7} {r.detail.get('qtables', 0):>8}"
            f"  {r.detail.get('reason', '')}")
    lines.append(f"jlse/bfs pages/s: {_fmt(ratio(runs, 'pages_per_second'), '.2f')} "
                 f"(steady: {_fmt(ratio(runs, 'steady_pps'), '.2f')}); target >= {TARGET_RATIO}")
    return "\n".join(lines)


LEGEND = """pages/s: pages / crawl-loop time; steady: between the 5% and the 95% page.
fetch..store: CPU ms/page per stage as the crawl splits it (classify includes scoring the
out-links); CPU/page: the whole child process (model training and the learner included).
harvest: share of fetched pages on the topic (sandbox truth). Q-tables: learned during the crawl."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=2, help="runs of each strategy")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--host-concurrency", type=int, default=0,
                        help="requests in flight per host (default: --concurrency)")
    parser.add_argument("--topic", default="phones", help="sandbox topic")
    parser.add_argument("--out", type=Path, default=RESULTS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="bench-strategies-") as tmp_name:
        tmp = Path(tmp_name)
        topic_dir = tmp / "topic"
        made = measure(JLSE + ["sandbox", "topic", args.topic, "--out", str(topic_dir)])
        if made.returncode != 0:
            raise RuntimeError(f"jlse sandbox topic failed: {made.stderr.strip()[-500:]}")
        truth = load_truth(1, tmp)
        print(f"{args.pages} pages, concurrency {args.concurrency}, topic {args.topic}, "
              f"politeness off ({args.host_concurrency or args.concurrency} per host); "
              f"{args.runs} runs of each strategy, alternating", flush=True)
        with sandbox_server(1, tmp) as proxy:
            for number in range(args.runs):
                for strategy in STRATEGIES:
                    label = f"{strategy} {number + 1}"
                    workdir = tmp / f"{strategy}-{number}"
                    run = run_crawl(label, strategy, topic_dir, args, proxy, workdir, truth)
                    runs.append(run)
                    print(f"  {label:<7} {run.pages:>6} pages {run.pages_per_second:8.1f} pages/s "
                          f"{run.error}", flush=True)
    print()
    print(render(runs), end="\n\n")
    print(LEGEND)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"), "pages": args.pages,
        "concurrency": args.concurrency, "topic": args.topic,
        "host_concurrency": args.host_concurrency or args.concurrency,
        "runs": [r.__dict__ for r in runs],
        "ratio_jlse_bfs": ratio(runs, "pages_per_second"),
        "ratio_steady": ratio(runs, "steady_pps"), "target": TARGET_RATIO,
    }, indent=2))
    print(f"results written to {args.out}")
    return 1 if any(r.error for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
