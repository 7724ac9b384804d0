"""Stand-in for the `celery` command in the tests of scripts/cluster.sh.

``-A APP inspect ping -d NODE``: succeeds when fake_jlse wrote ``fake-NODE.ready`` in RUN_DIR
(and FAKE_NO_PING is unset). ``-A APP flower --port P --address A``: serves HTTP 401 on A:P
and records its argv and FLOWER_BASIC_AUTH in ``fake-flower.json``. ``control ...``: no-op.
"""

from __future__ import annotations

import json
import os
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path


class _AuthRequired(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self.send_response(401)
        self.send_header("WWW-Authenticate", 'Basic realm="flower"')
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def _option(argv: list[str], name: str) -> str:
    for index, arg in enumerate(argv):
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
        if arg == name:
            return argv[index + 1]
    raise SystemExit(f"fake celery: {name} missing")


def _ping(argv: list[str], run_dir: Path) -> int:
    node = _option(argv, "-d")
    if os.environ.get("FAKE_NO_PING") or not (run_dir / f"fake-{node}.ready").exists():
        print("Error: No nodes replied within time constraint", file=sys.stderr)
        return 69
    print(f"-> {node}: OK pong")
    return 0


def _flower(argv: list[str], run_dir: Path) -> int:
    record = {"argv": argv, "basic_auth": os.environ.get("FLOWER_BASIC_AUTH")}
    (run_dir / "fake-flower.json").write_text(json.dumps(record))
    server = HTTPServer((_option(argv, "--address"), int(_option(argv, "--port"))), _AuthRequired)
    print("flower (fake) serving", flush=True)
    server.serve_forever()
    return 0


def main(argv: list[str]) -> int:
    run_dir = Path(os.environ["RUN_DIR"])
    if "ping" in argv:
        return _ping(argv, run_dir)
    if "flower" in argv:
        return _flower(argv, run_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
