"""Keeps a Celery worker running: ``jlse worker`` and ``jlse learner`` run Celery in a child
process and start it again when it dies.

Why: Celery and kombu do not always survive a Redis restart. With redis-py's reconnect retries,
a connection reset while Redis comes back can reach kombu's channel close after its connection
is gone; Celery logs "Unrecoverable error" and the worker exits (or stops consuming), and the
crawl loses that machine until someone restarts it. Under systemd ``Restart=on-failure`` would
do; ``make cluster-up`` and a worker started by hand have nothing else. Nothing is lost while
the child is down: its tasks are acknowledged late and their leases return to the frontier.

Signals: SIGTERM is passed on (Celery's warm shutdown) and the supervisor exits with the child.
SIGINT (Ctrl+C in a terminal) already reaches the child through the process group, so it is
not passed on again (a second SIGINT would make Celery's shutdown a cold one).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

log = logging.getLogger("jlse.worker")  # "jlse" loggers reach the terminal

CHILD_ENV = "JLSE_SUPERVISED_CHILD"  # set in the child: run Celery itself, not a supervisor
FIRST_BACKOFF = 1.0  # seconds before the first restart
MAX_BACKOFF = 30.0
STABLE_AFTER = 60.0  # a child that ran this long starts the backoff again from the beginning


def is_child() -> bool:
    return os.environ.get(CHILD_ENV) == "1"


class Supervisor:
    """Runs ``command`` until it exits with 0 or the supervisor is asked to stop."""

    def __init__(self, command: Sequence[str], clock=time.monotonic, sleep=time.sleep) -> None:
        self.command = list(command)
        self.clock, self.sleep = clock, sleep
        self.stopping = False
        self.restarts = 0
        self._child: subprocess.Popen | None = None

    def run(self) -> int:
        """The child's last exit code (0 after a requested stop)."""
        backoff = FIRST_BACKOFF
        while True:
            started = self.clock()
            code = self._run_child()
            if self.stopping or code == 0:
                return 0 if self.stopping else code
            backoff = FIRST_BACKOFF if self.clock() - started >= STABLE_AFTER else backoff
            log.warning("Celery worker exited with code %s; starting it again in %.0f s "
                        "(restart %d)", code, backoff, self.restarts + 1)
            self._sleep_unless_stopping(backoff)
            if self.stopping:
                return 0
            self.restarts += 1
            backoff = min(2 * backoff, MAX_BACKOFF)

    def _run_child(self) -> int:
        env = dict(os.environ, **{CHILD_ENV: "1"})
        self._child = subprocess.Popen(self.command, env=env)
        try:
            while True:
                try:
                    return self._child.wait()
                except InterruptedError:  # pragma: no cover - PEP 475 retries wait() itself
                    continue
        finally:
            self._child = None

    def _sleep_unless_stopping(self, seconds: float) -> None:
        deadline = self.clock() + seconds
        while not self.stopping and self.clock() < deadline:
            self.sleep(min(0.2, deadline - self.clock()))

    def on_signal(self, signum: int, _frame: object = None) -> None:
        self.stopping = True
        child = self._child
        if signum == signal.SIGTERM and child is not None and child.poll() is None:
            child.send_signal(signal.SIGTERM)


def supervise(argv: Sequence[str]) -> int:
    """Run ``python -m jlse.cli *argv`` as a supervised child; its exit code."""
    supervisor = Supervisor([sys.executable, "-m", "jlse.cli", *argv])
    signal.signal(signal.SIGTERM, supervisor.on_signal)
    signal.signal(signal.SIGINT, supervisor.on_signal)
    return supervisor.run()
