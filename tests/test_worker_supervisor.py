"""``jlse worker`` keeps its Celery worker running (workers/supervisor.py).

The first tests drive the supervisor with tiny real child processes; the last one starts a real
``jlse worker`` on Redis, kills its Celery process as a broker crash would end it, and checks that
a new one comes up and that SIGTERM still stops everything.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jlse.workers.supervisor import FIRST_BACKOFF, Supervisor

REPO = Path(__file__).resolve().parent.parent
REDIS_URL = os.environ.get("JLSE_TEST_REDIS", "redis://127.0.0.1:6379/0")


def _exits_with(codes: list[int], counter: Path) -> list[str]:
    """A child that exits with ``codes[n]`` on its n-th start (counted in ``counter``)."""
    script = (f"import pathlib, sys; p = pathlib.Path({str(counter)!r}); "
              f"n = int(p.read_text()) if p.exists() else 0; p.write_text(str(n + 1)); "
              f"sys.exit({codes!r}[n])")
    return [sys.executable, "-c", script]


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_a_crashed_child_is_started_again_with_growing_backoff(tmp_path):
    fake = FakeTime()
    supervisor = Supervisor(_exits_with([1, 70, 0], tmp_path / "n"), fake.clock, fake.sleep)
    assert supervisor.run() == 0
    assert supervisor.restarts == 2
    assert (tmp_path / "n").read_text() == "3"
    assert sum(fake.slept) == pytest.approx(FIRST_BACKOFF + 2 * FIRST_BACKOFF)


def test_a_clean_exit_is_not_restarted(tmp_path):
    supervisor = Supervisor(_exits_with([0, 1], tmp_path / "n"))
    assert supervisor.run() == 0
    assert supervisor.restarts == 0
    assert (tmp_path / "n").read_text() == "1"


def test_a_stop_request_during_the_backoff_ends_it(tmp_path):
    fake = FakeTime()
    supervisor = Supervisor(_exits_with([1, 1], tmp_path / "n"), fake.clock,
                            lambda s: supervisor.on_signal(signal.SIGINT))
    assert supervisor.run() == 0
    assert (tmp_path / "n").read_text() == "1"  # not started again


def _log_has(path: Path, text: str, count: int, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while path.read_text(errors="replace").count(text) < count:
        assert proc.poll() is None, path.read_text(errors="replace")[-3000:]
        assert time.monotonic() < deadline, path.read_text(errors="replace")[-3000:]
        time.sleep(0.2)


def _celery_children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


@pytest.mark.slow
def test_jlse_worker_comes_back_after_its_celery_process_dies(tmp_path, registry):
    prefix = registry.root  # the registry fixture deletes its keys afterwards
    env = dict(os.environ, REDIS_URL=REDIS_URL, JLSE_KEY_PREFIX=prefix, PYTHONUNBUFFERED="1")
    env.pop("CELERY_BROKER_URL", None)
    log_path = tmp_path / "worker.log"
    name = f"sup@{prefix[:-1]}"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "jlse.cli", "worker", "--concurrency", "1", "--hostname", name],
            cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _log_has(log_path, f"{name} ready.", 1, proc, 60)
        (first,) = _celery_children(proc.pid)
        os.kill(first, signal.SIGKILL)  # as "Unrecoverable error" would end it, only harder
        _log_has(log_path, "starting it again", 1, proc, 10)
        _log_has(log_path, f"{name} ready.", 2, proc, 60)
        (second,) = _celery_children(proc.pid)
        assert second != first
        proc.send_signal(signal.SIGTERM)  # warm shutdown of the child, then the supervisor ends
        assert proc.wait(60) == 0
        assert _celery_children(proc.pid) == []
        with pytest.raises(ProcessLookupError):
            os.kill(second, 0)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(10)
