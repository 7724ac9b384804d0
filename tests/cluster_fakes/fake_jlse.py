"""Stand-in for `jlse dispatcher|worker|learner` in the tests of scripts/cluster.sh.

Behaviour is chosen by environment variables (comma-separated role names):
FAKE_DIE (exit at start with an error), FAKE_IGNORE_TERM (ignore SIGTERM).
Every role starts one child process, like a Celery prefork pool, and writes into RUN_DIR
``fake-<node>.mainpid`` (its own pid), ``fake-<node>.child`` (the child's) and ``fake-<node>.ready``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def _listed(variable: str, role: str) -> bool:
    return role in os.environ.get(variable, "").split(",")


def main(argv: list[str]) -> int:
    role = argv[0]
    node = argv[argv.index("--hostname") + 1] if "--hostname" in argv else role
    run_dir = Path(os.environ["RUN_DIR"])
    if _listed("FAKE_DIE", role):
        print(f"{role}: fatal: cannot connect to the broker (fake failure)", file=sys.stderr)
        return 3
    if _listed("FAKE_IGNORE_TERM", role):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    (run_dir / f"fake-{node}.mainpid").write_text(str(os.getpid()))
    (run_dir / f"fake-{node}.child").write_text(str(child.pid))
    (run_dir / f"fake-{node}.ready").touch()
    metrics = {name: value for name, value in os.environ.items() if name.startswith("JLSE_") and name.endswith("METRICS_PORT")}
    print(f"{node} ready (argv: {' '.join(argv)}; metrics: {metrics})", flush=True)
    while True:
        time.sleep(0.2)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
