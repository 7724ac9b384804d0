"""The network-namespace lab itself: hosts reach Redis and PostgreSQL over their own addresses.

Runs as root against the real Redis (127.0.0.1:6379) and PostgreSQL (127.0.0.1:5432). Without
root or ``ip netns`` the tests fail with ``NetnsUnavailable``, they are not skipped.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid

import pytest
import redis
from netns import IP, NetnsLab, NetnsUnavailable, cleanup_stale, require_netns

REDIS_TARGET = ("127.0.0.1", 6379)
PG_TARGET = ("127.0.0.1", 5432)
PYTHON = sys.executable  # the project's venv python, with redis and psycopg2


def _our_objects(subnet: int) -> list[str]:
    """Namespaces and links of lab subnet X that still exist."""
    netns = subprocess.run([IP, "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run([IP, "-o", "link"], capture_output=True, text=True).stdout
    names = [line.split()[0] for line in netns.splitlines() if line.strip()]
    names += [line.split(":")[1].strip().split("@")[0] for line in links.splitlines()]
    wanted = (f"jlbr{subnet}", f"jlns{subnet}h", f"jlv{subnet}h")
    return [name for name in names if name == wanted[0] or name.startswith(wanted[1:])]


def _wait_until(condition, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


@pytest.fixture()
def lab():
    require_netns()
    with NetnsLab() as made:
        made.redis = made.forward(6379, REDIS_TARGET)
        made.pg = made.forward(5432, PG_TARGET)
        yield made


def _ping_both(lab: NetnsLab, host) -> subprocess.CompletedProcess:
    script = textwrap.dedent(f"""
        import psycopg2, redis
        print(redis.Redis(host="{lab.gateway}", port=6379, socket_timeout=5).ping())
        conn = psycopg2.connect(host="{lab.gateway}", port=5432, user="postgres",
                                dbname="postgres", connect_timeout=5)
        with conn.cursor() as cur:
            cur.execute("SELECT 1")
            print(cur.fetchone()[0])
    """)
    return host.run([PYTHON, "-c", script], timeout=20)


def test_two_hosts_reach_redis_and_postgres_over_their_own_addresses(lab):
    first, second = lab.add_host("w1"), lab.add_host("w2")
    assert (first.address, second.address) == (f"10.231.{lab.subnet}.10", f"10.231.{lab.subnet}.11")
    for host in (first, second):
        own = host.run([IP, "-o", "-4", "addr", "show", "dev", "eth0"]).stdout
        assert f"inet {host.address}/24" in own
        done = _ping_both(lab, host)
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["True", "1"]
        cli = host.run(["redis-cli", "-h", lab.gateway, "-p", "6379", "ping"])
        assert cli.stdout.strip() == "PONG"
    # The services see the forwarder (127.0.0.1); the forwarder saw each host's own address.
    assert {ip for ip, _port in lab.redis.peers} == {first.address, second.address}
    assert {ip for ip, _port in lab.pg.peers} == {first.address, second.address}


def test_a_host_cannot_reach_the_machines_loopback_services_directly(lab):
    host = lab.add_host("w1")
    direct = host.run(["redis-cli", "-h", "127.0.0.1", "-p", "6379", "ping"])
    assert "PONG" not in direct.stdout


def test_forwarder_carries_many_concurrent_connections_both_ways(lab):
    host = lab.add_host("w1")
    prefix = f"jlse-netns-test:{uuid.uuid4().hex[:8]}"
    script = textwrap.dedent(f"""
        import threading, redis
        errors = []
        def one(i):
            try:
                client = redis.Redis(host="{lab.gateway}", port=6379, socket_timeout=10)
                value = bytes([i]) * 300_000
                client.set("{prefix}:%d" % i, value, ex=60)
                assert client.get("{prefix}:%d" % i) == value
                client.close()
            except Exception as exc:
                errors.append(repr(exc))
        threads = [threading.Thread(target=one, args=(i,)) for i in range(60)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        print(len(errors), errors[:3])
    """)
    try:
        done = host.run([PYTHON, "-c", script], timeout=25)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("0 "), done.stdout
        assert len(lab.redis.peers) >= 60
        assert _wait_until(lambda: lab.redis.open_connections == 0)
    finally:
        direct = redis.Redis(*REDIS_TARGET)
        keys = list(direct.scan_iter(f"{prefix}:*"))
        if keys:
            direct.delete(*keys)
        direct.close()


def test_forwarder_close_drops_connections_and_stops_listening(lab):
    client = socket.create_connection((lab.gateway, 6379), timeout=5)
    client.sendall(b"PING\r\n")
    assert client.recv(100) == b"+PONG\r\n"
    assert lab.redis.open_connections == 1
    lab.redis.close()
    try:
        assert client.recv(100) == b""
    except ConnectionResetError:
        pass
    client.close()
    with pytest.raises(OSError):
        socket.create_connection((lab.gateway, 6379), timeout=2)


def test_forwarder_closes_the_client_when_the_target_is_down(lab):
    with socket.socket() as spare:  # a port nobody listens on
        spare.bind(("127.0.0.1", 0))
        dead_port = spare.getsockname()[1]
    forwarder = lab.forward(0, ("127.0.0.1", dead_port))
    client = socket.create_connection((lab.gateway, forwarder.port), timeout=5)
    assert client.recv(100) == b""
    client.close()


def test_cut_host_fails_to_connect_and_reconnect_restores_it(lab):
    cut_off, neighbour = lab.add_host("w1"), lab.add_host("w2")
    attempt = [PYTHON, "-c",
               f"import socket; socket.create_connection(('{lab.gateway}', 6379), timeout=1.5)"]
    assert cut_off.run(attempt).returncode == 0
    cut_off.cut()
    started = time.monotonic()
    failed = cut_off.run(attempt, timeout=15)
    assert failed.returncode != 0
    assert "timed out" in failed.stderr or "unreachable" in failed.stderr.lower()
    assert time.monotonic() - started < 5
    assert _ping_both(lab, neighbour).returncode == 0  # only the cut host is affected
    cut_off.reconnect()
    started = time.monotonic()
    restored = _ping_both(lab, cut_off)
    assert restored.returncode == 0, restored.stderr
    assert time.monotonic() - started < 3


def test_popen_runs_in_the_namespace_in_its_own_process_group(lab):
    host = lab.add_host("w1")
    proc = host.popen(["sh", "-c", "ip -o -4 addr show dev eth0; sleep 60 & sleep 60"],
                      env={"JLSE_PROBE": "1"}, stdout=subprocess.PIPE, text=True)
    assert host.address in proc.stdout.readline()
    assert _wait_until(lambda: len(_namespace_pids(host)) >= 2)  # the sleeps (and maybe sh)
    assert os.getpgid(proc.pid) == proc.pid
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=5)
    proc.stdout.close()
    assert _wait_until(lambda: _namespace_pids(host) == [])


def _namespace_pids(host) -> list[str]:
    return subprocess.run([IP, "netns", "pids", host.netns], capture_output=True,
                          text=True).stdout.split()


def test_lab_removes_everything_on_exit_even_after_a_failure():
    with pytest.raises(RuntimeError, match="boom"):
        with NetnsLab() as lab:
            forwarder = lab.forward(6379, REDIS_TARGET)
            host = lab.add_host("w1")
            lab.add_host("w2")
            sleeper = host.popen(["sleep", "60"])
            assert len(_our_objects(lab.subnet)) == 5  # bridge, 2 veths, 2 namespaces
            raise RuntimeError("boom")
    assert _our_objects(lab.subnet) == []
    assert sleeper.poll() == -signal.SIGKILL
    assert forwarder.closed
    listening = subprocess.run(["ss", "-Htln"], capture_output=True, text=True).stdout
    assert f"{lab.gateway}:6379" not in listening


def test_concurrent_labs_get_distinct_subnets():
    with NetnsLab() as first, NetnsLab() as second:
        assert first.subnet != second.subnet
        assert first.bridge != second.bridge


def test_cleanup_stale_removes_what_a_killed_run_left_behind():
    script = textwrap.dedent("""
        import os, signal
        from netns import NetnsLab
        lab = NetnsLab().__enter__()
        lab.add_host("w1")
        print(lab.subnet, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    tests_dir = os.path.dirname(os.path.abspath(__file__))
    with NetnsLab() as live:  # claimed first, so the killed run takes another subnet
        live.add_host("w1")
        killed = subprocess.run([PYTHON, "-c", script], cwd=tests_dir, capture_output=True,
                                text=True, timeout=20)
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        subnet = int(killed.stdout)
        assert len(_our_objects(subnet)) == 3  # bridge, veth, namespace
        assert subnet in cleanup_stale()
        assert _our_objects(subnet) == []
        assert len(_our_objects(live.subnet)) == 3  # a live lab's objects survive the cleanup


def test_not_root_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(NetnsUnavailable, match="root"):
        NetnsLab().__enter__()


def test_missing_ip_command_is_a_clear_error(monkeypatch):
    import netns

    monkeypatch.setattr(netns, "IP", "/nonexistent/ip")
    with pytest.raises(NetnsUnavailable, match="not found"):
        require_netns()
