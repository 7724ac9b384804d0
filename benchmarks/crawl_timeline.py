"""Run a ``jlse`` command and record when the embedded crawl writes each fetched page.

    python benchmarks/crawl_timeline.py TIMELINE.json -- crawl --topic DIR ...

Writes ``{"start", "end", "written", "cpu_start", "cpu_end", "last"}``: the crawl loop's start
and end and the moment each page request's result was written (``time.monotonic``), the
process's CPU time at the loop's start and end (``time.process_time``: the loop's CPU without
imports and model training), and the last three pages written (URL, outcome, fetch time). From
them: the tail (the next-to-last page written to the end of the loop) and what held it.

It imports whichever ``jlse`` comes first on ``sys.path`` and patches only
``EmbeddedCrawler.run`` and ``EmbeddedCrawler._write``, which the current code and the baseline
release (2b77270) both have, so ``bench_crawl.py --baseline`` times both the same way. It does
not put the repository on ``sys.path``: ``PYTHONPATH`` picks the code under test.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any


def install_hooks(timeline: dict[str, Any]) -> None:
    from jlse import embedded

    crawler = embedded.EmbeddedCrawler
    original_run, original_write = crawler.run, crawler._write

    def run(self: Any) -> str:
        timeline["start"], timeline["cpu_start"] = time.monotonic(), time.process_time()
        try:
            return original_run(self)
        finally:
            timeline["end"], timeline["cpu_end"] = time.monotonic(), time.process_time()

    def write(self: Any, result: Any) -> None:
        original_write(self, result)
        if result.fetch is not None:  # a page request was made: it counts against the budget
            timeline["written"].append(time.monotonic())
            fetch = result.fetch
            timeline["last"] = timeline["last"][-2:] + [
                {"url": fetch.url, "outcome": str(fetch.outcome.value), "elapsed": fetch.elapsed}]

    crawler.run, crawler._write = run, write


def main() -> int:
    out, argv = Path(sys.argv[1]), sys.argv[2:]
    if argv[:1] == ["--"]:
        argv = argv[1:]
    timeline: dict[str, Any] = {"start": None, "end": None, "written": [], "last": []}
    install_hooks(timeline)
    from jlse.cli import main as jlse_main

    try:
        return jlse_main(argv)
    finally:
        timeline["jlse_file"] = sys.modules["jlse"].__file__
        out.write_text(json.dumps(timeline))


if __name__ == "__main__":
    sys.exit(main())
