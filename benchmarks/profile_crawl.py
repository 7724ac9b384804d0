"""Profile a ``jlse`` command across all its threads with cProfile.

``python -m cProfile -m jlse.cli crawl ...`` sees only the main thread, while the embedded
crawl fetches, parses and classifies in a thread pool. This wrapper gives every thread its own
profiler and merges them at exit::

    .venv/bin/python benchmarks/profile_crawl.py --out crawl.prof [--top 30] -- crawl --topic ...

It prints the top functions by cumulative time and writes the merged stats (pstats format,
readable with ``python -m pstats crawl.prof``). Profiling slows the crawl several-fold; read
the shares, not the absolute times. Times are each thread's CPU time unless ``--wall``.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

_profiles: list[cProfile.Profile] = []
_lock = threading.Lock()
_original_run = threading.Thread.run
# CPU time of the running thread by default: waiting on sockets and locks is not cost.
_timer = time.thread_time


def _profiled_run(self: threading.Thread) -> None:
    profile = cProfile.Profile(_timer)
    with _lock:
        _profiles.append(profile)
    profile.enable()
    try:
        _original_run(self)
    finally:
        profile.disable()


def profile_command(argv: list[str]) -> tuple[int, pstats.Stats]:
    """Run ``jlse argv`` with every thread profiled; returns its exit code and merged stats."""
    from jlse.cli import main as jlse_main

    threading.Thread.run = _profiled_run
    main_profile = cProfile.Profile(_timer)
    main_profile.enable()
    try:
        code = jlse_main(argv)
    finally:
        main_profile.disable()
        threading.Thread.run = _original_run
    stats = pstats.Stats(main_profile, stream=io.StringIO())
    with _lock:
        for profile in _profiles:
            stats.add(profile)
    return code, stats


def top_functions(stats: pstats.Stats, count: int, sort: str) -> str:
    stream = io.StringIO()
    stats.stream = stream
    stats.strip_dirs().sort_stats(sort).print_stats(count)
    return stream.getvalue()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="merged pstats file")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--sort", default="cumulative", help="pstats sort key")
    parser.add_argument("--wall", action="store_true", help="wall-clock time, not thread CPU")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the jlse arguments")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if args.wall:
        global _timer
        _timer = time.perf_counter
    code, stats = profile_command(command)
    stats.dump_stats(args.out)
    print(top_functions(stats, args.top, args.sort), file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
