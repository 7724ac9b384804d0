"""What the outputs cost: an embedded crawl with ``warc`` off, ``also`` and ``only``
(wall time, CPU, WARC bytes per page), and ``jlse export --content`` of the result; with
``--distributed``, a distributed fetch worker with its page store off and on.

The sandbox web is served from its own process; each crawl is a ``jlse crawl --fresh`` of the
phones topic, bfs, politeness off, SQLite, in alternating order (off, also, only, ...).
``--distributed``: instead, ``page_store_worker.py`` runs the ``jlse.fetch`` task's code in one
process over the machine's Redis and PostgreSQL (a fresh schema and key prefix each run), page
store off and on in alternating order, and prints per-page CPU and store bytes side by side.

    .venv/bin/python benchmarks/bench_outputs.py [--pages 1000] [--runs 2] [--distributed]

Results go to ``benchmarks/results/outputs.json`` (``outputs-distributed.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
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


PG_ADMIN = os.environ.get("JLSE_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
WORKER = Path(__file__).resolve().parent / "page_store_worker.py"


def worker_run(topic: Path, proxy: str, pages: int, store: Path | None) -> dict:
    """One ``page_store_worker.py`` run on a fresh schema and key prefix (both removed)."""
    import psycopg2
    import redis

    schema, root = f"bench_{uuid.uuid4().hex[:10]}", f"jlsebench{uuid.uuid4().hex[:8]}:"
    admin = psycopg2.connect(PG_ADMIN)
    admin.autocommit = True
    admin.cursor().execute(f'CREATE SCHEMA "{schema}"')
    try:
        cmd = [sys.executable, str(WORKER), "--store",
               f"{PG_ADMIN}?options=-csearch_path%3D{schema}", "--redis", REDIS_URL,
               "--root", root, "--proxy", proxy, "--seeds", str(topic / "seeds.txt"),
               "--pages", str(pages), "--page-store", str(store) if store else "off"]
        run = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
        if run.returncode != 0:
            sys.exit(f"worker failed: {run.stderr[-2000:]}")
        return json.loads(run.stdout.splitlines()[-1])
    finally:
        admin.cursor().execute(f'DROP SCHEMA "{schema}" CASCADE')
        admin.close()
        client = redis.Redis.from_url(REDIS_URL)
        keys = list(client.scan_iter(match=root + "*", count=1000))
        if keys:
            client.unlink(*keys)


def distributed(args: argparse.Namespace) -> None:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        with sandbox_server(1.0, tmp_path) as server:
            topic = tmp_path / "phones"
            measure(JLSE + ["sandbox", "topic", "phones", "--out", str(topic)])
            for run in range(args.runs):
                for mode in ("off", "on"):
                    store = tmp_path / f"store-{run}" if mode == "on" else None
                    row = dict(worker_run(topic, server.proxy, args.pages, store),
                               pages_store=mode, run=run)
                    print(json.dumps(row), flush=True)
                    rows.append(row)
    print(side_by_side(rows))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    (RESULTS.parent / "outputs-distributed.json").write_text(
        json.dumps({"pages": args.pages, "results": rows}, indent=1))


def side_by_side(rows: list[dict]) -> str:
    """Per-page CPU and store bytes of each mode (all its runs together), and the difference."""
    totals = {}
    for mode in ("off", "on"):
        mine = [row for row in rows if row["pages_store"] == mode]
        pages = sum(row["pages"] for row in mine)
        totals[mode] = (1000 * sum(row["cpu_s"] for row in mine) / pages,
                        sum(row["store_bytes"] for row in mine) / pages)
    (cpu_off, _), (cpu_on, bytes_on) = totals["off"], totals["on"]
    return (f"pages_store  cpu ms/page  store bytes/page\n"
            f"off          {cpu_off:11.2f}  {0:16.0f}\n"
            f"on           {cpu_on:11.2f}  {bytes_on:16.0f}\n"
            f"on - off     {cpu_on - cpu_off:+11.2f} ({100 * (cpu_on / cpu_off - 1):+.1f} %)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--distributed", action="store_true",
                        help="a distributed fetch worker, page store off and on")
    args = parser.parse_args()
    if args.distributed:
        distributed(args)
        return
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
