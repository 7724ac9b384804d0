"""A network-namespace lab: run processes as separate "hosts" on one Linux machine (root only).

``NetnsLab`` makes a bridge ``jlbr<X>`` with address 10.231.X.1/24 and, per ``add_host``, a
namespace ``jlns<X>h<i>`` joined to the bridge by a veth pair (``jlv<X>h<i>``), address
10.231.X.(10+i)/24, default route via the bridge. Services that listen on loopback only (Redis,
PostgreSQL) are reached through ``lab.forward``: a TCP proxy listening on the bridge address.

    with NetnsLab() as lab:
        lab.forward(6379, target=("127.0.0.1", 6379))
        worker = lab.add_host("w1")
        proc = worker.popen([...], env={"REDIS_URL": f"redis://{lab.gateway}:6379/0"})

A subnet X is claimed by holding an flock on ``/run/jlse-netns/<X>.lock`` for the lab's life, so
concurrent labs never collide and ``cleanup_stale`` removes only what killed runs left behind.
"""

from __future__ import annotations

import fcntl
import os
import re
import selectors
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

IP = shutil.which("ip") or "/usr/sbin/ip"
LOCK_DIR = Path("/run/jlse-netns")
SUBNET_PREFIX = "10.231"
_OUR_NAME = re.compile(r"^jl(?:br|ns|v)(\d+)")


class NetnsUnavailable(RuntimeError):
    """The lab cannot run here: not root, or ``ip netns`` does not work."""


def require_netns() -> None:
    """Raise ``NetnsUnavailable`` with the reason unless namespaces can be made here."""
    if os.geteuid() != 0:
        raise NetnsUnavailable("the network-namespace tests must run as root (ip netns needs it)")
    if not os.path.exists(IP):
        raise NetnsUnavailable(f"iproute2 `ip` not found (looked for {IP})")
    probe = subprocess.run([IP, "netns", "list"], capture_output=True, text=True)
    if probe.returncode != 0:
        raise NetnsUnavailable(f"`ip netns list` failed: {probe.stderr.strip()}")


def _ip(*args: str, check: bool = True) -> str:
    done = subprocess.run([IP, *args], capture_output=True, text=True)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def _namespaces() -> list[str]:
    return [line.split()[0] for line in _ip("netns", "list").splitlines() if line.strip()]


def _links() -> list[str]:
    names = [line.split(":")[1].strip() for line in _ip("-o", "link").splitlines()]
    return [name.split("@")[0] for name in names]


def _kill_namespace_processes(netns: str) -> None:
    for pid in _ip("netns", "pids", netns, check=False).split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass


def _remove_subnet_objects(subnet: int) -> None:
    """Delete every namespace and link of subnet X (ours by name), killing what runs inside."""
    for netns in _namespaces():
        if _OUR_NAME.match(netns) and int(_OUR_NAME.match(netns).group(1)) == subnet:
            _kill_namespace_processes(netns)
            _ip("netns", "delete", netns, check=False)
    for link in _links():
        if _OUR_NAME.match(link) and int(_OUR_NAME.match(link).group(1)) == subnet:
            _ip("link", "delete", link, check=False)


def _try_lock(subnet: int) -> int | None:
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    fd = os.open(LOCK_DIR / f"{subnet}.lock", os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def cleanup_stale() -> list[int]:
    """Remove leftovers of killed labs (subnets whose lock nobody holds); returns those subnets."""
    require_netns()
    found = {int(m.group(1)) for name in _namespaces() + _links() if (m := _OUR_NAME.match(name))}
    cleaned = []
    for subnet in sorted(found):
        fd = _try_lock(subnet)
        if fd is None:
            continue  # a live lab owns it
        try:
            _remove_subnet_objects(subnet)
            cleaned.append(subnet)
        finally:
            os.close(fd)
    return cleaned


def _subnet_in_use(subnet: int) -> bool:
    text = _ip("-o", "addr") + _ip("route")
    return f"{SUBNET_PREFIX}.{subnet}." in text


class _Side:
    """One socket of a proxied connection; ``outbox`` holds bytes still to be written to it."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.outbox = bytearray()
        self.read_eof = False
        self.write_shut = False
        self.peer: _Side = self
        self.mask = 0


class Forwarder:
    """A TCP proxy: accepts on ``listen`` and pipes each connection to ``target`` (one thread).

    ``peers`` lists the source address of every accepted connection, in order: the target
    sees the proxy's own address, so tests assert on client addresses here.
    """

    def __init__(self, listen: tuple[str, int], target: tuple[str, int]) -> None:
        self.target = target
        self._listener = socket.create_server(listen)
        self._listener.setblocking(False)
        self.address, self.port = self._listener.getsockname()[:2]
        self.peers: list[tuple[str, int]] = []
        self._sides: set[_Side] = set()
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self._wake_reader, self._wake_writer = socket.socketpair()
        self._selector.register(self._wake_reader, selectors.EVENT_READ, None)
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=f"forward-{self.port}", daemon=True)
        self._thread.start()

    @property
    def open_connections(self) -> int:
        return len(self._sides) // 2

    @property
    def closed(self) -> bool:
        return not self._thread.is_alive()

    def close(self) -> None:
        """Stop accepting and drop every proxied connection."""
        if self._stopping:
            return
        self._stopping = True
        self._wake_writer.send(b"x")
        self._thread.join(timeout=5)

    def _run(self) -> None:
        try:
            while not self._stopping:
                for key, _events in self._selector.select(timeout=1.0):
                    if key.fileobj is self._listener:
                        self._accept()
                    elif key.data in self._sides:  # not dropped earlier in this batch
                        self._serve(key.data, _events)
        finally:
            for side in list(self._sides):
                self._drop(side)
            self._selector.close()
            for sock in (self._listener, self._wake_reader, self._wake_writer):
                sock.close()

    def _accept(self) -> None:
        try:
            client, source = self._listener.accept()
        except BlockingIOError:
            return
        self.peers.append(source[:2])
        try:
            upstream = socket.create_connection(self.target, timeout=2)
        except OSError:
            client.close()  # target down: the client sees the connection closed
            return
        client_side, upstream_side = _Side(client), _Side(upstream)
        client_side.peer, upstream_side.peer = upstream_side, client_side
        for side in (client_side, upstream_side):
            side.sock.setblocking(False)
            self._sides.add(side)
            self._update(side)

    def _serve(self, side: _Side, events: int) -> None:
        try:
            if events & selectors.EVENT_WRITE:
                self._flush(side)
            if events & selectors.EVENT_READ:
                self._read(side)
        except OSError:
            self._drop(side)
            return
        if side.read_eof and side.peer.read_eof and not side.outbox and not side.peer.outbox:
            self._drop(side)
            return
        self._update(side)
        self._update(side.peer)

    def _read(self, side: _Side) -> None:
        try:
            data = side.sock.recv(65536)
        except BlockingIOError:
            return
        if not data:
            side.read_eof = True
        side.peer.outbox += data
        self._flush(side.peer)

    def _flush(self, side: _Side) -> None:
        if side.outbox:
            try:
                sent = side.sock.send(side.outbox)
            except BlockingIOError:
                sent = 0
            del side.outbox[:sent]
        if not side.outbox and side.peer.read_eof and not side.write_shut:
            side.sock.shutdown(socket.SHUT_WR)
            side.write_shut = True

    def _update(self, side: _Side) -> None:
        # Read only while the peer has nothing queued: backpressure instead of unbounded buffers.
        wanted = 0 if side.read_eof or side.peer.outbox else selectors.EVENT_READ
        wanted |= selectors.EVENT_WRITE if side.outbox else 0
        if wanted == side.mask:
            return
        if side.mask == 0:
            self._selector.register(side.sock, wanted, side)
        elif wanted == 0:
            self._selector.unregister(side.sock)
        else:
            self._selector.modify(side.sock, wanted, side)
        side.mask = wanted

    def _drop(self, side: _Side) -> None:
        for each in (side, side.peer):
            if each in self._sides:
                self._sides.discard(each)
                if each.mask:
                    self._selector.unregister(each.sock)
                each.sock.close()


class Host:
    """One namespace on the lab bridge: ``address``, ``popen``/``run`` inside it, ``cut``/``reconnect``."""

    def __init__(self, name: str, netns: str, veth: str, address: str) -> None:
        self.name = name
        self.netns = netns
        self.veth = veth  # the host-side end, on the bridge
        self.address = address
        self.processes: list[subprocess.Popen] = []

    def popen(self, cmd: Sequence[str], env: Mapping[str, str] | None = None,
              **kwargs) -> subprocess.Popen:
        """Start ``cmd`` in the namespace, in its own process group; ``env`` adds to os.environ."""
        full_env = {**os.environ, **(env or {})}
        proc = subprocess.Popen([IP, "netns", "exec", self.netns, *cmd], env=full_env,
                                start_new_session=True, **kwargs)
        self.processes.append(proc)
        return proc

    def run(self, cmd: Sequence[str], env: Mapping[str, str] | None = None,
            timeout: float = 30, **kwargs) -> subprocess.CompletedProcess:
        """Run ``cmd`` in the namespace to completion (output captured as text unless overridden)."""
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        full_env = {**os.environ, **(env or {})}
        return subprocess.run([IP, "netns", "exec", self.netns, *cmd], env=full_env,
                              timeout=timeout, **kwargs)

    def kill_all(self) -> None:
        """SIGKILL every process in the namespace (this host "loses power")."""
        _kill_namespace_processes(self.netns)
        for proc in self.processes:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass

    def cut(self) -> None:
        """Take the host's link down: its packets are dropped, as in a network partition."""
        _ip("link", "set", self.veth, "down")

    def reconnect(self, timeout: float = 5.0) -> None:
        """Bring the link back up and wait until both ends report carrier (operstate UP)."""
        _ip("link", "set", self.veth, "up")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            outside = _ip("-o", "link", "show", self.veth)
            inside = _ip("-n", self.netns, "-o", "link", "show", "eth0")
            if "state UP" in outside and "state UP" in inside:
                # ARP entries left INCOMPLETE while cut would hold the next packet for a 1 s retry.
                _ip("-n", self.netns, "neigh", "flush", "dev", "eth0", check=False)
                _ip("neigh", "flush", "to", self.address, check=False)
                return
            time.sleep(0.02)
        raise TimeoutError(f"{self.name}: link did not come back up within {timeout}s")

    def __repr__(self) -> str:
        return f"Host({self.name!r}, {self.address}, netns={self.netns})"


class NetnsLab:
    """A bridge with hosts and forwarders; ``with NetnsLab() as lab`` removes all of it on exit."""

    def __init__(self) -> None:
        self.subnet: int | None = None
        self.bridge = ""
        self.gateway = ""
        self.hosts: dict[str, Host] = {}
        self.forwarders: list[Forwarder] = []
        self._lock_fd: int | None = None

    def __enter__(self) -> NetnsLab:
        require_netns()
        self._claim_subnet()
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
        except Exception:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def _claim_subnet(self) -> None:
        for subnet in range(1, 255):
            fd = _try_lock(subnet)
            if fd is None:
                continue
            _remove_subnet_objects(subnet)  # leftovers of a killed run that held this subnet
            if _subnet_in_use(subnet):
                os.close(fd)  # someone else's network
                continue
            self._lock_fd, self.subnet = fd, subnet
            self.bridge = f"jlbr{subnet}"
            self.gateway = f"{SUBNET_PREFIX}.{subnet}.1"
            return
        raise NetnsUnavailable(f"no free {SUBNET_PREFIX}.X.0/24 subnet for a lab")

    def add_host(self, name: str) -> Host:
        """A new namespace on the bridge with address 10.231.X.(10+i)."""
        if name in self.hosts:
            raise ValueError(f"host {name!r} already exists")
        index = len(self.hosts)
        if index > 244:
            raise ValueError("at most 245 hosts per lab")
        netns, veth = f"jlns{self.subnet}h{index}", f"jlv{self.subnet}h{index}"
        host = Host(name, netns, veth, f"{SUBNET_PREFIX}.{self.subnet}.{10 + index}")
        self.hosts[name] = host
        _ip("netns", "add", netns)
        _ip("link", "add", veth, "type", "veth", "peer", "name", f"{veth}p")
        _ip("link", "set", f"{veth}p", "netns", netns)
        _ip("link", "set", veth, "master", self.bridge, "up")
        _ip("-n", netns, "link", "set", f"{veth}p", "name", "eth0")
        _ip("-n", netns, "addr", "add", f"{host.address}/24", "dev", "eth0")
        _ip("-n", netns, "link", "set", "eth0", "up")
        _ip("-n", netns, "link", "set", "lo", "up")
        _ip("-n", netns, "route", "add", "default", "via", self.gateway)
        return host

    def forward(self, listen_port: int, target: tuple[str, int]) -> Forwarder:
        """Proxy ``gateway:listen_port`` (0 = any free port) to ``target`` in this namespace."""
        forwarder = Forwarder((self.gateway, listen_port), target)
        self.forwarders.append(forwarder)
        return forwarder

    def close(self) -> None:
        """Kill the hosts' processes and remove namespaces, links and forwarders (idempotent)."""
        for forwarder in self.forwarders:
            forwarder.close()
        self.forwarders.clear()
        for host in self.hosts.values():
            host.kill_all()
        self.hosts.clear()
        if self.subnet is not None:
            _remove_subnet_objects(self.subnet)
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
