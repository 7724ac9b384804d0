"""What the outputs cost: an embedded crawl with ``warc`` off, ``also`` and ``only``
(wall time, CPU, WARC bytes per page), and ``jlse export --content`` of the result.

The sandbox web is served from its own process; each crawl is a ``jlse crawl --fresh`` of the
phones topic, bfs, politeness off, SQLite, in alternating order (off, also, only, ...).

    .venv/bin/python benchmarks/bench_outputs.py [--pages 1000] [--runs 2]

Results go to ``benchmarks/results/outputs.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from bench_crawl import JLSE, measure, sandbox_server

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "outputs.json"
MODES = ("off", "also", "only")


def crawl(topic: Path, workdir: Path, proxy: str, pages: int, warc: str) -> dict:
    cmd = JLSE + ["crawl", "--topic", str(topic), "--workdir", str(workdir), "--fresh",
                  "--max-pages", str(pages), "--strategy", "bfs", "--no-progress",
                  "--set", f"proxy={proxy}", "--set", "politeness_delay=0",
                  "--set", "max_crawl_delay=0", "--set", f"warc={warc}"]
    run = measure(cmd)
    if run.returncode != 0:
        sys.exit(f"crawl failed: {run.stderr[-2000:]}")
    warc_bytes = sum(path.stat().st_size for path in (workdir / "warc").glob("*.warc.gz"))
    return {"warc": warc, "wall_s": round(run.wall, 2), "cpu_s": round(run.cpu, 2),
            "pages_per_s": round(pages / run.wall, 1), "warc_bytes": warc_bytes,
            "warc_bytes_per_page": round(warc_bytes / pages)}


def export(workdir: Path, out: Path) -> dict:
    started = time.monotonic()
    run = measure(JLSE + ["export", "--workdir", str(workdir), "--all", "--content",
                          "--times", "iso", "--format", "csv", "--out", str(out)])
    if run.returncode != 0:
        sys.exit(f"export failed: {run.stderr[-2000:]}")
    rows = out.read_text(encoding="utf-8").count("\n")
    return {"export_content_s": round(time.monotonic() - started, 2),
            "export_bytes": out.stat().st_size, "export_lines": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        with sandbox_server(1.0, tmp_path) as server:
            topic = tmp_path / "phones"
            measure(JLSE + ["sandbox", "topic", "phones", "--out", str(topic)])
            for run in range(args.runs):
                for mode in MODES:
                    workdir = tmp_path / f"w-{mode}"
                    row = crawl(topic, workdir, server.proxy, args.pages, mode)
                    if mode != "off":
                        row.update(export(workdir, tmp_path / f"{mode}.csv"))
                    row["run"] = run
                    print(json.dumps(row), flush=True)
                    results.append(row)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"pages": args.pages, "results": results}, indent=1))


if __name__ == "__main__":
    main()
