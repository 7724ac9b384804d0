"""Crawls among servers that stall (jlse/sandbox/stalls.py): they cost time, never the crawl."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jlse.sandbox.stalls import HUB_HOST, NORMAL_HOST

REPO = Path(__file__).resolve().parent.parent
_started: list[subprocess.Popen] = []


@pytest.fixture(autouse=True)
def _no_crawl_left_running() -> Iterator[None]:
    """A crawl a failed test leaves running would go on requesting from the session's sandbox
    and upset the request counts of later tests: kill it."""
    yield
    while _started:
        proc = _started.pop()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def finish(proc: subprocess.Popen, timeout: float) -> tuple[str, str]:
    """(stdout, stderr) of a crawl; on a timeout, its last log lines in the failure."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"the crawl did not end within {timeout:.0f} s; its log ends:\n"
                    f"{err[-3000:]}")


def start_crawl(sandbox, tmp_path: Path, seeds: list[str], max_pages: int,
                **settings) -> subprocess.Popen:
    topic = tmp_path / "topic"
    topic.mkdir()
    (topic / "seeds.txt").write_text("\n".join(seeds) + "\n")
    args = [sys.executable, "-m", "jlse.cli", "crawl", "--topic", str(topic), "--workdir",
            str(tmp_path / "w"), "--max-pages", str(max_pages), "--strategy", "bfs",
            "--no-progress", "--json", "--set", f"proxy={sandbox.proxy_url}"]
    for key, value in settings.items():
        args += ["--set", f"{key}={value}"]
    proc = subprocess.Popen(args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    _started.append(proc)
    return proc


def test_ctrl_c_ends_a_crawl_with_headers_trickling_in(sandbox, tmp_path):
    """16 fetches stuck in slow headers (deadline 30 s): Ctrl+C still ends the crawl within
    seconds, exit 130, the pages in flight left queued."""
    proc = start_crawl(sandbox, tmp_path, [f"http://{HUB_HOST}/?slow=16"], 100_000,
                       politeness_delay=0.0)
    time.sleep(4.0)
    assert proc.poll() is None, proc.communicate()
    os.killpg(proc.pid, signal.SIGINT)
    signalled = time.monotonic()
    out, err = finish(proc, timeout=60)
    assert proc.returncode == 130, err[-2000:]
    assert time.monotonic() - signalled < 10.0
    assert json.loads(out)["reason"] == "interrupted"


def test_hanging_robots_txt_does_not_starve_a_normal_site(sandbox, tmp_path):
    """300 hosts whose robots.txt hangs, seeded before a normal site: the normal site's pages
    still fill the budget (robots.txt has its own deadline and slots)."""
    sandbox.clear_log()
    proc = start_crawl(sandbox, tmp_path, [f"http://{HUB_HOST}/?hang=300",
                                           f"http://{NORMAL_HOST}/"], 60,
                       politeness_delay=0.05, robots_deadline=2.0)
    out, err = finish(proc, timeout=300)  # a loaded CI machine
    assert proc.returncode == 0, err[-2000:]
    assert json.loads(out)["reason"] == "page budget reached"
    normal = [entry for entry in sandbox.log if entry.host == NORMAL_HOST]
    assert len(normal) >= 55
