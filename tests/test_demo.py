"""``jlse demo``: one run directory per topic and strategy, so a second demo with another
strategy never replaces the first one's crawl."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from jlse.errors import EXIT_USAGE


def demo(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jlse.cli", "demo", "--workdir", str(workdir),
                           "--max-pages", "5", *args], capture_output=True, text=True,
                          timeout=300)


def test_a_demo_with_another_strategy_keeps_the_first_demos_crawl(tmp_path) -> None:
    first = demo(tmp_path)
    assert first.returncode == 0, first.stderr
    jlse_db = tmp_path / "phones-jlse" / "crawl" / "crawl.db"
    before = jlse_db.read_bytes()
    second = demo(tmp_path, "--strategy", "bfs")
    assert second.returncode == 0, second.stderr
    assert (tmp_path / "phones-bfs" / "crawl" / "crawl.db").is_file()
    assert jlse_db.read_bytes() == before


def test_an_unknown_strategy_is_refused_before_anything_is_deleted(tmp_path) -> None:
    """The strategy's name becomes part of the run directory's path, which is deleted."""
    kept = tmp_path / "keep" / "mine.txt"
    kept.parent.mkdir()
    kept.write_text("mine")
    done = demo(tmp_path / "a" / "demo", "--strategy", "x/../../../keep")
    assert done.returncode == EXIT_USAGE, done.stderr
    assert done.stderr.startswith("error: strategy: unknown strategy 'x/../../../keep'"), \
        done.stderr
    assert kept.read_text() == "mine"
