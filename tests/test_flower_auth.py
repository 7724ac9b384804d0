"""Flower, as the project starts it (scripts/cluster.sh), always asks for a password (issue 15).

Flower's pages, ``/tasks/datatable`` among them, show task arguments (URLs, anchor text). The
real Flower is started with ``scripts/cluster.sh run flower`` (what ``make flower`` runs) on the
project's Celery app and the local Redis, without FLOWER_BASIC_AUTH in the environment.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "cluster.sh"
FAKES = ROOT / "tests" / "cluster_fakes"
REDIS_URL = os.environ.get("JLSE_TEST_REDIS", "redis://127.0.0.1:6379/0")
DATATABLE = ("/tasks/datatable?draw=1&start=0&length=10&search%5Bvalue%5D="
             "&order%5B0%5D%5Bcolumn%5D=0&order%5B0%5D%5Bdir%5D=asc&columns%5B0%5D%5Bdata%5D=name")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _env(run_dir: Path, port: int, **extra: str) -> dict[str, str]:
    env = dict(os.environ, RUN_DIR=str(run_dir), FLOWER_PORT=str(port), REDIS_URL=REDIS_URL,
               JLSE_KEY_PREFIX=f"jlsetest{uuid.uuid4().hex[:8]}:", PYTHONUNBUFFERED="1",
               CELERY=str(Path(sys.executable).parent / "celery"))
    env.update(extra)
    for name in ("FLOWER_BASIC_AUTH", "CELERY_BROKER_URL", "FLOWER_ADDRESS"):
        if name not in extra:
            env.pop(name, None)
    return env


def _get(url: str, credentials: str | None = None) -> int:
    headers = {}
    if credentials:
        headers["Authorization"] = "Basic " + base64.b64encode(credentials.encode()).decode()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.fixture()
def flower(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """The real Flower started by ``cluster.sh run flower``: (base URL, its first output)."""
    port = _free_port()
    log = tmp_path / "flower.out"
    with open(log, "wb") as out:
        proc = subprocess.Popen(["bash", str(SCRIPT), "run", "flower"], cwd=ROOT,
                                env=_env(tmp_path / "run", port), stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                _get(base + "/healthcheck")
                break
            except OSError:
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.3)
        yield base, log.read_text()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def test_flower_without_configured_password_asks_for_a_generated_one(
    flower: tuple[str, str], tmp_path: Path
) -> None:
    base, output = flower
    line = next(line for line in output.splitlines() if "Flower login (generated" in line)
    credentials = line.rsplit(": ", 1)[1].strip()
    user, _, password = credentials.partition(":")
    assert user == "admin" and len(password) >= 20
    auth_file = tmp_path / "run" / "flower-auth"
    assert auth_file.read_text().strip() == credentials
    assert stat.S_IMODE(auth_file.stat().st_mode) == 0o600
    for path in (DATATABLE, "/", "/tasks", "/api/tasks"):
        assert _get(base + path) == 401, path  # task arguments are nobody else's business
        assert _get(base + path, "admin:wrong") == 401, path
    assert _get(base + DATATABLE, credentials) == 200
    assert _get(base + "/tasks", credentials) == 200


def _fake_up(tmp_path: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    env = _env(tmp_path / "run", _free_port(), JLSE=f"{sys.executable} {FAKES / 'fake_jlse.py'}",
               CELERY=f"{sys.executable} {FAKES / 'fake_celery.py'}", NODE_HOST="testhost",
               WORKERS="1", SETTLE="1", UP_TIMEOUT="20", STOP_GRACE="3", **extra)
    return subprocess.run(["bash", str(SCRIPT), "up"], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=90)


def _down(tmp_path: Path) -> None:
    subprocess.run(["bash", str(SCRIPT), "down"], env=_env(tmp_path / "run", 1, STOP_GRACE="1"),
                   cwd=ROOT, capture_output=True, timeout=60)


def test_cluster_up_starts_flower_with_a_password_printed_once(tmp_path: Path) -> None:
    try:
        first = _fake_up(tmp_path)
        assert first.returncode == 0, first.stderr
        recorded = json.loads((tmp_path / "run" / "fake-flower.json").read_text())
        assert recorded["basic_auth"] and recorded["basic_auth"].startswith("admin:")
        assert "Flower login (generated" in first.stdout
        assert recorded["basic_auth"] in first.stdout
        assert recorded["basic_auth"] not in " ".join(recorded["argv"])  # not in `ps`
        assert "--address=127.0.0.1" in recorded["argv"]
        _down(tmp_path)
        again = _fake_up(tmp_path)  # a restart keeps the password and does not print it
        assert again.returncode == 0, again.stderr
        assert recorded["basic_auth"] not in again.stdout
        assert json.loads((tmp_path / "run" / "fake-flower.json").read_text())["basic_auth"] \
            == recorded["basic_auth"]
    finally:
        _down(tmp_path)


def test_a_configured_password_is_used_and_never_printed(tmp_path: Path) -> None:
    try:
        up = _fake_up(tmp_path, FLOWER_BASIC_AUTH="ops:correct-horse")
        assert up.returncode == 0, up.stderr
        assert "correct-horse" not in up.stdout + up.stderr
        recorded = json.loads((tmp_path / "run" / "fake-flower.json").read_text())
        assert recorded["basic_auth"] == "ops:correct-horse"
        assert not (tmp_path / "run" / "flower-auth").exists()
    finally:
        _down(tmp_path)


def test_a_malformed_password_is_refused(tmp_path: Path) -> None:
    up = _fake_up(tmp_path, FLOWER_BASIC_AUTH="no-colon")
    assert up.returncode != 0
    assert "FLOWER_BASIC_AUTH must be user:password" in up.stderr
