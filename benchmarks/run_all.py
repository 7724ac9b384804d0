"""Run every ``benchmarks/bench_*.py`` in turn (``--quick`` is passed on), printing their output.

    .venv/bin/python benchmarks/run_all.py [--quick]

A benchmark without a ``--quick`` option is run in full. Each runs in its own process, one
after the other (they would distort each other on this 2-core machine). Exits non-zero if any
benchmark failed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent


def bench_scripts() -> list[Path]:
    return sorted(BENCH_DIR.glob("bench_*.py"))


def takes_quick(script: Path) -> bool:
    """Whether the script offers ``--quick`` (one that does not runs in full)."""
    return '"--quick"' in script.read_text(encoding="utf-8")


def run_one(script: Path, quick: bool) -> int:
    if quick and not takes_quick(script):
        print(f"\nnote: {script.name} has no --quick option: running it in full", flush=True)
        quick = False
    cmd = [sys.executable, str(script)] + (["--quick"] if quick else [])
    print(f"\n##### {script.name} {'--quick' if quick else ''}".rstrip(), flush=True)
    started = time.monotonic()
    returncode = subprocess.run(cmd, cwd=BENCH_DIR.parent).returncode  # output goes straight through
    status = "ok" if returncode == 0 else f"FAILED (exit {returncode})"
    print(f"##### {script.name}: {status} in {time.monotonic() - started:.0f} s", flush=True)
    return returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="pass --quick to every benchmark")
    args = parser.parse_args(argv)
    scripts = bench_scripts()
    if not scripts:
        print("no benchmarks/bench_*.py found", file=sys.stderr)
        return 1
    failed = [s.name for s in scripts if run_one(s, args.quick) != 0]
    print(f"\n{len(scripts) - len(failed)} of {len(scripts)} benchmarks ok"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
