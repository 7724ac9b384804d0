"""scripts/cluster.sh (make cluster-up / cluster-down / worker ...) and the deploy/ files.

The roles are stand-ins (tests/cluster_fakes/): real processes that start, answer health probes,
die at start or ignore SIGTERM on demand, so the script's process handling is tested for real.
``test_real_celery_worker_and_flower`` runs a real Celery worker and Flower on the local Redis.
"""

from __future__ import annotations

import base64
import configparser
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "cluster.sh"
FAKES = ROOT / "tests" / "cluster_fakes"
DEPLOY = ROOT / "deploy"
ROLES = ["dispatcher", "worker1", "worker2", "learner", "flower"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _wait_dead(pids: list[int], seconds: float = 5.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        time.sleep(0.1)
    return [pid for pid in pids if _alive(pid)]


def _basic(credentials: str) -> str:
    return "Basic " + base64.b64encode(credentials.encode()).decode()


def _wait_for(condition: Callable[[], bool], seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.1)


def _started_pids(output: str) -> list[int]:
    lines = [line for line in output.splitlines() if line.startswith("cluster: started ")]
    return [int(line.split("(pid ", 1)[1].split(",")[0]) for line in lines]


def _pid_in(output: str, role: str) -> str:
    line = next(line for line in output.splitlines() if f"stopping {role} (pid" in line)
    return line.split("(pid ", 1)[1].rstrip(")")


class Cluster:
    """Runs scripts/cluster.sh against one private run directory."""

    def __init__(self, tmp_path: Path) -> None:
        self.run_dir = tmp_path / "run"
        self.flower_port = _free_port()
        self.env = {
            **os.environ,
            "RUN_DIR": str(self.run_dir),
            "JLSE": f"{sys.executable} {FAKES / 'fake_jlse.py'}",
            "CELERY": f"{sys.executable} {FAKES / 'fake_celery.py'}",
            "FLOWER_PORT": str(self.flower_port),
            "NODE_HOST": "testhost",
            "WORKERS": "2",
            "SETTLE": "1",
            "UP_TIMEOUT": "20",
            "STOP_GRACE": "3",
            "UP_FAIL_GRACE": "2",
        }
        for name in ("FAKE_DIE", "FAKE_IGNORE_TERM", "FAKE_NO_PING", "FLOWER_BASIC_AUTH"):
            self.env.pop(name, None)

    def run(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(SCRIPT), *args], env={**self.env, **env}, cwd=ROOT,
            capture_output=True, text=True, timeout=90,
        )

    def role_pid(self, role: str) -> int:
        return int((self.run_dir / f"{role}.pid").read_text())

    def pid_files(self) -> list[str]:
        return sorted(path.stem for path in self.run_dir.glob("*.pid"))

    def fake_pids(self) -> list[int]:
        """Main and pool-child pids every stand-in role recorded (including dead ones)."""
        files = [*self.run_dir.glob("fake-*.mainpid"), *self.run_dir.glob("fake-*.child")]
        return [int(path.read_text()) for path in files]

    def starts_logged(self, role: str) -> int:
        return (self.run_dir / f"{role}.log").read_text().count("cluster.sh starting")


@pytest.fixture()
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    handle = Cluster(tmp_path)
    yield handle
    handle.run("down", STOP_GRACE="1")
    for pid in handle.fake_pids():  # never leak a process, even when a test failed midway
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_up_starts_every_role_with_pid_files_and_healthy_flower(cluster: Cluster) -> None:
    result = cluster.run("up", FLOWER_BASIC_AUTH="admin:s3cret")
    assert result.returncode == 0, result.stderr
    assert "all 5 roles healthy" in result.stdout
    assert cluster.pid_files() == sorted(ROLES)
    assert all(_alive(cluster.role_pid(role)) for role in ROLES)
    worker_log = (cluster.run_dir / "worker2.log").read_text()
    assert "worker --hostname worker2@testhost" in worker_log
    with pytest.raises(urllib.error.HTTPError) as answer:  # Flower answers, behind basic auth
        urllib.request.urlopen(f"http://127.0.0.1:{cluster.flower_port}/", timeout=5)
    assert answer.value.code == 401
    flower = json.loads((cluster.run_dir / "fake-flower.json").read_text())
    assert flower["basic_auth"] == "admin:s3cret"
    assert "s3cret" not in " ".join(flower["argv"])  # kept out of `ps`
    assert f"--port={cluster.flower_port}" in flower["argv"]
    assert "--address=127.0.0.1" in flower["argv"]


def test_up_twice_starts_no_duplicates_and_adds_workers(cluster: Cluster) -> None:
    assert cluster.run("up").returncode == 0
    first = {role: cluster.role_pid(role) for role in ROLES}
    again = cluster.run("up", WORKERS="3")
    assert again.returncode == 0, again.stderr
    assert "dispatcher already running" in again.stdout
    assert {role: cluster.role_pid(role) for role in ROLES} == first
    assert all(cluster.starts_logged(role) == 1 for role in [*ROLES, "worker3"])
    assert cluster.pid_files() == sorted([*ROLES, "worker3"])


def test_role_dying_at_start_fails_with_its_log_and_leaves_nothing(cluster: Cluster) -> None:
    result = cluster.run("up", FAKE_DIE="learner")
    assert result.returncode != 0
    assert "learner exited during start-up" in result.stderr
    assert "cannot connect to the broker (fake failure)" in result.stderr
    assert cluster.pid_files() == []
    started = _started_pids(result.stdout)
    assert len(started) == 5
    assert _wait_dead([*started, *cluster.fake_pids()]) == []  # roles and pool children


def test_worker_never_answering_ping_times_out(cluster: Cluster) -> None:
    started = time.monotonic()
    result = cluster.run("up", FAKE_NO_PING="1", UP_TIMEOUT="3")
    assert result.returncode != 0
    assert time.monotonic() - started < 20
    assert "worker1 not healthy after 3s" in result.stderr
    assert "worker1@testhost ready" in result.stderr  # the log tail is shown
    assert cluster.pid_files() == []
    assert _wait_dead([*_started_pids(result.stdout), *cluster.fake_pids()]) == []


def test_up_keeps_roles_it_did_not_start_when_a_new_one_fails(cluster: Cluster) -> None:
    assert cluster.run("up").returncode == 0
    dispatcher = cluster.role_pid("dispatcher")
    failed = cluster.run("up", WORKERS="3", FAKE_DIE="worker")
    assert failed.returncode != 0
    assert "worker3 exited during start-up" in failed.stderr
    assert _alive(dispatcher)
    assert cluster.pid_files() == sorted(ROLES)


def test_down_stops_everything_killing_a_role_that_ignores_term(cluster: Cluster) -> None:
    assert cluster.run("up", FAKE_IGNORE_TERM="dispatcher").returncode == 0
    _wait_for(lambda: len(cluster.fake_pids()) == 8)  # 4 roles, each with a pool child
    pids = cluster.fake_pids()
    assert len(pids) == 8 and all(_alive(pid) for pid in pids)
    started = time.monotonic()
    down = cluster.run("down", STOP_GRACE="2")
    assert down.returncode == 0, down.stderr
    assert time.monotonic() - started >= 2  # it waited the grace period before KILL
    assert f"pid {_pid_in(down.stdout, 'dispatcher')} ignored TERM" in down.stdout
    assert _wait_dead(pids, 1.0) == []  # mains and their pool children
    assert cluster.pid_files() == []
    again = cluster.run("down")
    assert again.returncode == 0 and "nothing running" in again.stdout


def test_bad_worker_count_is_refused(cluster: Cluster) -> None:
    result = cluster.run("up", WORKERS="0")
    assert result.returncode != 0 and "WORKERS must be a positive integer" in result.stderr
    assert not cluster.run_dir.exists() or cluster.pid_files() == []


def test_metrics_port_gives_the_dispatcher_and_each_worker_their_own(cluster: Cluster) -> None:
    port = _free_port()
    result = cluster.run("up", METRICS_PORT=str(port))
    assert result.returncode == 0, result.stderr
    for role, env_name, expected in (("dispatcher", "JLSE_DISPATCHER_METRICS_PORT", port),
                                     ("worker1", "JLSE_WORKER_METRICS_PORT", port + 1),
                                     ("worker2", "JLSE_WORKER_METRICS_PORT", port + 2)):
        assert f"{role} metrics: http://127.0.0.1:{expected}/metrics" in result.stdout
        log = (cluster.run_dir / f"{role}.log").read_text()
        assert f"metrics: {{'{env_name}': '{expected}'}}" in log
    assert "metrics: {}" in (cluster.run_dir / "learner.log").read_text()


def test_bad_metrics_port_is_refused(cluster: Cluster) -> None:
    result = cluster.run("up", METRICS_PORT="65535")
    assert result.returncode != 0 and "METRICS_PORT must be a TCP port" in result.stderr
    assert cluster.pid_files() == []


def test_run_execs_one_role_in_the_foreground(cluster: Cluster) -> None:
    cluster.run_dir.mkdir()
    result = cluster.run("run", "worker", WORKER_NAME="w9@elsewhere", FAKE_DIE="worker")
    assert result.returncode == 3  # the role's own exit status: the shell was replaced
    assert "fake failure" in result.stderr
    unknown = cluster.run("run", "janitor")
    assert unknown.returncode != 0 and "unknown role" in unknown.stderr


def test_makefile_targets_call_the_script() -> None:
    def dry_run(*args: str) -> str:
        return subprocess.run(["make", "-n", *args], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout

    assert "WORKERS='3'" in dry_run("cluster-up", "WORKERS=3")
    assert "scripts/cluster.sh up" in dry_run("cluster-up")
    assert "scripts/cluster.sh down" in dry_run("cluster-down")
    for role in ("worker", "learner", "dispatcher", "flower"):
        assert f"scripts/cluster.sh run {role}" in dry_run(role)
    assert "scripts/cluster.sh status" in dry_run("status")
    assert "SHARDS='3'" in dry_run("cluster-up", "SHARDS=3")


def test_real_celery_worker_and_flower(cluster: Cluster) -> None:
    """cluster-up's health probes against real Celery workers and Flower on the local Redis."""
    import redis

    prefix = f"jlse_test_cluster_{uuid.uuid4().hex[:8]}:"
    env = {
        "JLSE": f"{sys.executable} {FAKES / 'celery_jlse.py'}",
        "CELERY": str(Path(sys.executable).parent / "celery"),
        "CELERY_APP": "stub_celery_app",
        "PYTHONPATH": str(FAKES),
        "CELERY_BROKER_URL": "redis://127.0.0.1:6379/1",
        "STUB_KEY_PREFIX": prefix,
        "NODE_HOST": f"h{uuid.uuid4().hex[:6]}",
        "FLOWER_BASIC_AUTH": "admin:s3cret",
        "UP_TIMEOUT": "60",
    }
    cluster.env.update(env)
    try:
        up = cluster.run("up")
        assert up.returncode == 0, up.stderr
        api = f"http://127.0.0.1:{cluster.flower_port}/api/workers?refresh=1"
        with pytest.raises(urllib.error.HTTPError, match="401"):
            urllib.request.urlopen(api, timeout=30)
        request = urllib.request.Request(api, headers={"Authorization": _basic("admin:s3cret")})
        workers = json.loads(urllib.request.urlopen(request, timeout=30).read())
        assert {f"worker1@{env['NODE_HOST']}", f"worker2@{env['NODE_HOST']}"} <= set(workers)
        down = cluster.run("down", STOP_GRACE="20")
        assert down.returncode == 0, down.stderr
        assert "ignored TERM" not in down.stdout  # Celery's warm shutdown answered TERM
        assert cluster.pid_files() == []
        assert _wait_dead(_started_pids(up.stdout), 1.0) == []
    finally:
        client = redis.Redis.from_url(env["CELERY_BROKER_URL"])
        keys = list(client.scan_iter(f"{prefix}*"))
        if keys:
            client.delete(*keys)


def _load_compose() -> dict:
    """deploy/docker-compose.yml parsed by PyYAML (from this Python or the system's)."""
    text = (DEPLOY / "docker-compose.yml").read_text()
    try:
        import yaml
    except ImportError:
        code = "import json, sys, yaml; print(json.dumps(yaml.safe_load(sys.stdin.read())))"
        done = subprocess.run(["python3", "-c", code], input=text, capture_output=True,
                              text=True, check=True)
        return json.loads(done.stdout)
    return yaml.safe_load(text)


def test_compose_file_has_every_role_and_safe_redis() -> None:
    compose = _load_compose()
    services = compose["services"]
    assert {"redis", "postgres", "dispatcher", "worker", "learner", "flower"} <= set(services)
    redis_command = services["redis"]["command"]
    assert "--maxmemory-policy noeviction" in redis_command
    assert "--appendonly yes" in redis_command
    assert "ports" not in services["redis"] and "ports" not in services["postgres"]
    assert "container_name" not in services["worker"]  # scalable
    assert "FLOWER_BASIC_AUTH" in services["flower"]["environment"]
    assert services["flower"]["ports"] == ["127.0.0.1:5555:5555"]
    for role in ("dispatcher", "worker", "learner", "flower"):
        assert services[role]["build"]["dockerfile"] == "deploy/Dockerfile"
        assert services[role]["environment"]["REDIS_URL"].startswith("redis://")
    assert ".[distributed]" in (DEPLOY / "Dockerfile").read_text()


@pytest.mark.parametrize("unit", ["jlse-dispatcher.service", "jlse-worker@.service",
                                  "jlse-learner.service", "jlse-flower.service"])
def test_systemd_unit_runs_its_role_from_the_env_file(unit: str) -> None:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # systemd keys are case-sensitive
    parser.read_string((DEPLOY / unit).read_text())
    service = parser["Service"]
    assert service["EnvironmentFile"] == "/etc/jlse/jlse.env"
    assert service["ExecStart"].startswith("/opt/jlse/.venv/bin/")
    role = unit.removeprefix("jlse-").split("@")[0].split(".")[0]
    assert role in service["ExecStart"]
    assert service["Restart"] == "on-failure"
    assert service["User"] == "jlse"
    assert service["KillSignal"] == "SIGTERM"
    if role != "flower":  # above the Celery task time limit (workers/celery_app.py: 120 s)
        assert int(service["TimeoutStopSec"]) > 120
    assert "WantedBy" in parser["Install"]


def test_env_example_names_every_setting_without_secrets() -> None:
    settings = dict(
        line.split("=", 1) for line in (DEPLOY / "jlse.env.example").read_text().splitlines()
        if line and not line.startswith("#")
    )
    for name in ("REDIS_URL", "CELERY_BROKER_URL", "DATABASE_URL", "PGPASSWORD",
                 "FLOWER_BASIC_AUTH"):
        assert name in settings
    assert "CHANGE-ME" in settings["PGPASSWORD"] and "CHANGE-ME" in settings["FLOWER_BASIC_AUTH"]
    assert ":" not in settings["DATABASE_URL"].split("@")[0].removeprefix("postgresql://")


def test_shards_start_a_redis_cluster_rabbitmq_and_a_dispatcher_per_shard(
        cluster: Cluster) -> None:
    from redis_cluster import pick_base_port

    port = pick_base_port(6)
    env = {"SHARDS": "3", "REDIS_CLUSTER_PORT": str(port), "REDIS_URL": "",
           "CELERY_BROKER_URL": ""}
    result = cluster.run("up", **env)
    assert result.returncode == 0, result.stderr
    dispatchers = [f"dispatcher{i}" for i in (1, 2, 3)]
    assert set(dispatchers) <= set(cluster.pid_files()) and "dispatcher" not in cluster.pid_files()
    for i, role in enumerate(dispatchers):
        assert f"dispatcher --shard {i}/3" in (cluster.run_dir / f"{role}.log").read_text()
    saved = (cluster.run_dir / "cluster.env").read_text()
    assert f"REDIS_URL=redis+cluster://127.0.0.1:{port}\n" in saved
    assert "CELERY_BROKER_URL=amqp://" in saved
    assert f"--frontier redis+cluster://127.0.0.1:{port} --set frontier_shards=3" in result.stdout
    nodes = cluster.run_dir / "redis-cluster"
    assert len(list(nodes.glob("node-*.pid"))) == 6  # 3 masters, 1 replica each
    down = cluster.run("down", STOP_GRACE="1", **env)
    assert down.returncode == 0, down.stderr
    assert not (cluster.run_dir / "cluster.env").exists()
    assert not list(nodes.glob("node-*.pid"))
