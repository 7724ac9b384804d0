"""Stand-in for `jlse` that runs real Celery workers of stub_celery_app.

``worker --hostname NODE`` and ``learner --hostname NODE`` become Celery workers (queues fetch / learn, task
events on); ``dispatcher`` just waits, as nothing is to be dispatched in the test.
"""

from __future__ import annotations

import os
import sys
import time


def main(argv: list[str]) -> int:
    role = argv[0]
    if role == "dispatcher":
        while True:
            time.sleep(1)
    node = argv[argv.index("--hostname") + 1]
    queue = "fetch" if role == "worker" else "learn"
    celery = os.path.join(os.path.dirname(sys.executable), "celery")
    os.execv(celery, [celery, "-A", "stub_celery_app", "worker", "-E", "-Q", queue, "-n", node,
                      "--pool", "solo", "--without-mingle", "--without-gossip", "-l", "INFO"])
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
