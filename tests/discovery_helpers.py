"""Helpers of test_discovery.py: ``jlse discover`` run as a subprocess against the sandbox
server of the test process, and readers of what a run leaves behind (outputs, crawl.db,
discovery state, the server's request log)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from jlse.records import LinkStatus
from jlse.sandbox.search import serves as is_search_host
from jlse.scheduler.store import open_store

# Small politeness (the sandbox is ours), searches not throttled unless a test is about it.
FAST = ["--set", "politeness_delay=0.05", "--set", "search_rate=20",
        "--set", "robots_retry_after=0.5"]
SITE_KEYS = {"site", "rank", "score", "pages", "relevant_pages", "operator", "evidence", "seed"}
PAGE_KEYS = {"url", "site", "rank", "relevance", "operator", "round", "title"}
OPERATORS = {"seeds", "forward", "backward", "keyword", "related", "unknown", "home"}


def subprocess_env(proxy: str) -> dict[str, str]:
    """The environment of a ``jlse`` subprocess: the sandbox as its HTTP proxy, nothing else."""
    env = {key: value for key, value in os.environ.items()
           if key.lower() not in ("http_proxy", "https_proxy", "all_proxy", "no_proxy")}
    return dict(env, HTTP_PROXY=proxy, http_proxy=proxy, PYTHONUNBUFFERED="1")


def jlse_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "jlse.cli", *args]


def start(proxy: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen(jlse_argv(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=subprocess_env(proxy))


def run(proxy: str, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(jlse_argv(*args), capture_output=True, text=True, timeout=timeout,
                          env=subprocess_env(proxy))


def run_all(proxy: str, commands: dict[str, list[str]], timeout: float = 240,
            ) -> dict[str, subprocess.CompletedProcess]:
    """Several ``jlse`` commands at once (their start-up, a few seconds each, overlaps)."""
    procs = {name: start(proxy, *args) for name, args in commands.items()}
    done = {}
    try:
        for name, proc in procs.items():
            out, err = proc.communicate(timeout=timeout)
            done[name] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    finally:
        for proc in procs.values():
            stop(proc)
    return done


def stop(proc: subprocess.Popen) -> None:
    """Kill ``proc`` if it still runs (a test that failed midway leaves nothing behind)."""
    if proc.poll() is None:
        proc.kill()
        proc.communicate()


def resume_hint(stderr: str) -> list[str]:
    """The ``jlse discover ... --resume`` line an interrupted run prints, as argv for
    ``jlse_argv``."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip().startswith("jlse ")]
    assert lines, f"no resume command in stderr: {stderr!r}"
    argv = shlex.split(lines[-1])
    assert argv[0] == "jlse" and "--resume" in argv, argv
    return argv[1:]


def wait_for_round(proc: subprocess.Popen, workdir: Path, at_least: int,
                   timeout: float = 120.0) -> int:
    """Wait until the run saved the state of round ``at_least``; that round."""
    state = workdir / "discovery" / "state.json"
    deadline = time.monotonic() + timeout
    while True:
        assert proc.poll() is None, "the discovery ended before it could be interrupted: " + \
            proc.communicate()[1][-2000:]
        try:
            done = json.loads(state.read_text("utf-8"))["round"]
        except (OSError, ValueError, KeyError):
            done = 0
        if done >= at_least:
            return done
        assert time.monotonic() < deadline, f"round {at_least} not reached in {timeout} s"
        time.sleep(0.05)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]


def state_of(workdir: Path) -> dict:
    return json.loads((workdir / "discovery" / "state.json").read_text("utf-8"))


@dataclass
class StoreView:
    """What a workdir's crawl.db holds."""

    fetched: list[str] = field(default_factory=list)  # URLs with status fetched
    links: list[str] = field(default_factory=list)  # every URL
    outcomes: dict[str, int] = field(default_factory=dict)
    stats_fetched: int = 0


def store_view(workdir: Path) -> StoreView:
    view = StoreView()
    with open_store(f"sqlite:///{(workdir / 'crawl.db').resolve()}", read_only=True) as store:
        for link in store.iter_links():
            view.links.append(link.url)
            if link.status is LinkStatus.FETCHED:
                view.fetched.append(link.url)
        stats = store.stats()
        view.outcomes, view.stats_fetched = dict(stats.outcomes), stats.fetched
    return view


def web_requests(log) -> list:
    """The logged requests for the web's sites (the search engine's left out)."""
    return [entry for entry in log if not is_search_host(entry.host)]


def search_requests(log) -> list:
    return [entry for entry in log if is_search_host(entry.host)]


def one_error_line(stderr: str) -> str:
    """The ``error: ...`` line of a refused command; no traceback around it."""
    assert "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, stderr
    return errors[0]
