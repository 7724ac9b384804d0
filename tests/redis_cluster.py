"""A real Redis Cluster of private ``redis-server`` processes for the tests.

``RedisClusterProcesses`` starts one with scripts/redis-cluster.sh on ports it picks at run
time, so test sessions on one machine never collide, and lets a test kill the master of a key,
wait for its replica to take over and restart the killed node (it rejoins as a replica).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from redis import Redis, RedisError
from redis.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "redis-cluster.sh"
HOST = "127.0.0.1"
BUS_OFFSET = 10000  # a node's cluster bus listens on its port + 10000
# Node and bus ports are drawn below Linux's ephemeral range (32768+): the kernel never hands
# one of them to a client socket between the check and the start.
BASE_PORTS = range(12000, 22000)
START_ATTEMPTS = 3


class ClusterUnavailable(RuntimeError):
    """The cluster cannot be started here (redis-server missing, or it did not come up)."""


def _port_free(port: int, host: str = HOST) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def pick_base_port(count: int, host: str = HOST) -> int:
    """A base port such that base..base+count-1 and their bus ports are all free now."""
    for _ in range(200):
        base = random.randrange(BASE_PORTS.start, BASE_PORTS.stop - count)
        ports = range(base, base + count)
        if all(_port_free(p, host) and _port_free(p + BUS_OFFSET, host) for p in ports):
            return base
    raise ClusterUnavailable(f"no {count} free ports (and bus ports) in {BASE_PORTS}")


def alive(pid: int) -> bool:
    """True if ``pid`` runs (a zombie, dead but not yet reaped by init, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _slot_ranges(view: list) -> list[tuple[int, int, int]]:
    """CLUSTER SLOTS -> [(first, last, master port)]."""
    return [(int(entry[0]), int(entry[1]), int(entry[2][1])) for entry in view]


def _wait(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} within {timeout:g}s")
        time.sleep(0.05)


class RedisClusterProcesses:
    """A Redis Cluster of ``masters`` masters with ``replicas`` replicas each, started at once
    in ``dir`` (its nodes' files); ``stop()`` ends it."""

    def __init__(self, dir: Path, masters: int = 3, replicas: int = 1, host: str = HOST) -> None:
        if shutil.which("redis-server") is None:
            raise ClusterUnavailable("redis-server not found on PATH; install the redis-server "
                                     "package (`make services` does) to run the cluster tests")
        self.dir = Path(dir)
        self.host = host  # the nodes listen and announce themselves there
        self.masters = masters
        self.replicas = replicas
        self.count = masters * (1 + replicas)
        self._lost_slots: dict[int, list[tuple[int, int]]] = {}  # killed port -> its slots
        began = time.monotonic()
        self.base_port = self._start()
        self.startup_seconds = time.monotonic() - began

    def _script(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                              timeout=120, env=dict(os.environ, REDIS_CLUSTER_HOST=self.host))

    def _start(self) -> int:
        for _ in range(START_ATTEMPTS):
            base = pick_base_port(self.count, self.host)
            done = self._script("start", str(self.dir), str(base), str(self.masters),
                                str(self.replicas))
            if done.returncode == 0:
                return base
            self._script("stop", str(self.dir))
            if "already in use" not in done.stderr:  # else another session took a port first
                raise ClusterUnavailable(f"the Redis Cluster did not start:\n{done.stderr}")
        raise ClusterUnavailable(f"no free ports after {START_ATTEMPTS} attempts:\n{done.stderr}")

    @property
    def ports(self) -> list[int]:
        return list(range(self.base_port, self.base_port + self.count))

    @property
    def url(self) -> str:
        return f"redis+cluster://{self.host}:{self.base_port}"

    @property
    def startup_nodes(self) -> list[tuple[str, int]]:
        return [(self.host, port) for port in self.ports]

    def client(self, **kwargs) -> RedisCluster:
        """A redis-py cluster client (bytes replies) that knows every node."""
        nodes = [ClusterNode(host, port) for host, port in self.startup_nodes]
        return RedisCluster(startup_nodes=nodes, decode_responses=False, **kwargs)

    def node(self, port: int) -> Redis:
        """A plain client of one node (CLUSTER, INFO, WAIT, ROLE)."""
        return Redis(self.host, port, socket_timeout=2, socket_connect_timeout=2)

    def _live_ports(self) -> list[int]:
        return [port for port in self.ports if port not in self._lost_slots]

    def _command(self, port: int, *args):
        with self.node(port) as conn:
            return conn.execute_command(*args)

    def _slots_view(self) -> list[tuple[int, int, int]]:
        for port in self._live_ports():
            try:
                return _slot_ranges(self._command(port, "CLUSTER SLOTS"))
            except RedisError:
                continue
        raise ClusterUnavailable("no node of the cluster answers")

    def master_of(self, key: str | bytes) -> int:
        """The port of the master serving ``key``'s slot (as the live nodes see it)."""
        slot = key_slot(key.encode() if isinstance(key, str) else key)
        for first, last, port in self._slots_view():
            if first <= slot <= last:
                return port
        raise ClusterUnavailable(f"slot {slot} is served by no master")

    def pid_of(self, port: int) -> int:
        return int((self.dir / f"node-{port}.pid").read_text().split()[0])

    def kill_master_of(self, key: str | bytes) -> int:
        """SIGKILL the master serving ``key``; returns its port."""
        port = self.master_of(key)
        self._lost_slots[port] = [(a, b) for a, b, owner in self._slots_view() if owner == port]
        pid = self.pid_of(port)
        os.kill(pid, signal.SIGKILL)
        _wait(lambda: not alive(pid), 10, f"node {port} did not die")
        return port

    def _served_elsewhere(self, port: int, first_slot: int) -> int | None:
        """The master serving ``first_slot`` if every live node agrees it is not ``port`` and
        reports cluster_state:ok, else None."""
        owners = set()
        for live in self._live_ports():
            try:
                state = self._command(live, "CLUSTER INFO")["cluster_state"]
                view = _slot_ranges(self._command(live, "CLUSTER SLOTS"))
            except RedisError:
                continue  # a node restarting: it is not part of the verdict
            if state != "ok":
                return None
            owners |= {owner for a, b, owner in view if a <= first_slot <= b}
        return owners.pop() if len(owners) == 1 and port not in owners else None

    def wait_failover(self, port: int, timeout: float = 30) -> int:
        """Until another node serves the slots of the killed master ``port`` and every reachable
        node reports cluster_state:ok; returns the new master's port."""
        first_slot = self._lost_slots[port][0][0]
        promoted: list[int] = []

        def done() -> bool:
            owner = self._served_elsewhere(port, first_slot)
            promoted[:] = [owner] if owner else []
            return owner is not None

        try:
            _wait(done, timeout, f"no replica took over the slots of node {port}")
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}\n{self.status()}") from None
        return promoted[0]

    def _rejoined(self, port: int) -> bool:
        try:
            replication = self._command(port, "INFO", "replication")
            state = self._command(port, "CLUSTER INFO")["cluster_state"]
        except RedisError:
            return False
        return (replication.get("role") == "slave"
                and replication.get("master_link_status") == "up"
                and state == "ok")

    def restart(self, port: int, timeout: float = 30) -> None:
        """Start the killed node ``port`` again from its nodes.conf; returns once it is a
        replica in sync with its master."""
        done = self._script("restart-node", str(self.dir), str(port))
        if done.returncode != 0:
            raise ClusterUnavailable(f"node {port} did not restart:\n{done.stderr}")
        self._lost_slots.pop(port, None)
        _wait(lambda: self._rejoined(port), timeout, f"node {port} did not rejoin as a replica")

    def status(self) -> str:
        done = self._script("status", str(self.dir))
        return done.stdout + done.stderr

    def stop(self) -> None:
        """Stop every node and remove their files (idempotent)."""
        self._script("stop", str(self.dir))
