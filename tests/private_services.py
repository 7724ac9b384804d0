"""Private Redis and PostgreSQL instances that a test module may stop and restart at will.

The machine's shared services (127.0.0.1:6379 and :5432) serve other suites, so restart tests
start their own: ``PrivateRedis`` (no persistence: a restart loses every key, as a crashed
cache server would) and ``PrivatePostgres`` (a throwaway cluster made by ``initdb``, trust
auth, run as the ``postgres`` user because initdb refuses root). Both listen on 127.0.0.1 and
a free port only, and ``stop`` is idempotent.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path


class ServiceUnavailable(RuntimeError):
    """A private service cannot be started here (binary missing, or it did not come up)."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_for_port(port: int, up: bool, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            listening = True
        except OSError:
            listening = False
        if listening == up:
            return True
        time.sleep(0.05)
    return False


class PrivateRedis:
    """``redis-server`` on a free port with ``--save "" --appendonly no``; ``restart`` loses all."""

    def __init__(self, workdir: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise ServiceUnavailable("redis-server not found on PATH (install the redis-server "
                                     "package); the restart tests need a private instance")
        self.binary = binary
        self.workdir = workdir
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        log = open(self.workdir / "redis.log", "ab")
        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.workdir), "--maxmemory-policy", "noeviction"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        if not _wait_for_port(self.port, up=True, timeout=10):
            self.stop()
            raise ServiceUnavailable(f"private redis-server did not listen on {self.port}:\n"
                                     + self.log_tail())

    def stop(self) -> None:
        """SHUTDOWN NOSAVE (no persistence: every key is gone) and wait for the exit."""
        if self.proc is None:
            return
        subprocess.run(["redis-cli", "-p", str(self.port), "shutdown", "nosave"],
                       capture_output=True, timeout=10)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)
        self.proc = None
        _wait_for_port(self.port, up=False, timeout=5)

    def restart(self) -> None:
        self.stop()
        self.start()

    def log_tail(self) -> str:
        return (self.workdir / "redis.log").read_text(errors="replace")[-2000:]


def _postgres_bin() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda path: int(path.split("/")[4]) if path.split("/")[4].isdigit() else 0)
    if not found:
        raise ServiceUnavailable("initdb not found under /usr/lib/postgresql/*/bin (install the "
                                 "postgresql server package)")
    return Path(found[-1]).parent


class PrivatePostgres:
    """A throwaway PostgreSQL cluster (trust auth) on a free port; ``restart`` is pg_ctl's."""

    def __init__(self) -> None:
        self.bin = _postgres_bin()
        self.port = free_port()
        self.user = "postgres"
        # Under /tmp, owned by postgres: pytest's own tmp dirs are root-only (mode 0700).
        self.root = Path(tempfile.mkdtemp(prefix="jlse-private-pg-"))
        self.datadir = self.root / "data"
        self.logfile = self.root / "postgres.log"
        entry = pwd.getpwnam(self.user)
        os.chown(self.root, entry.pw_uid, entry.pw_gid)
        self.running = False

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _as_postgres(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        command = [*args] if os.geteuid() != 0 else ["runuser", "-u", self.user, "--", *args]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              cwd=self.root)
        if done.returncode != 0:
            raise ServiceUnavailable(f"{' '.join(args[:2])} failed ({done.returncode}):\n"
                                     f"{done.stdout[-1500:]}{done.stderr[-1500:]}\n"
                                     + self.log_tail())
        return done

    def start(self) -> None:
        if not self.datadir.exists():
            self._as_postgres(str(self.bin / "initdb"), "-D", str(self.datadir), "-U", self.user,
                              "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C.UTF-8")
        self._pg_ctl("start", "-w", "-t", "60")
        self.running = True

    def restart(self) -> None:
        """``pg_ctl restart -m fast``: every client connection is dropped."""
        self._pg_ctl("restart", "-m", "fast", "-w", "-t", "60")

    def stop(self) -> None:
        if self.running:
            self.running = False
            self._pg_ctl("stop", "-m", "immediate", "-w", "-t", "30")

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def _pg_ctl(self, action: str, *extra: str) -> None:
        options = (f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
                   "-c fsync=off -c max_connections=200")
        self._as_postgres(str(self.bin / "pg_ctl"), action, "-D", str(self.datadir),
                          "-l", str(self.logfile), "-o", options, *extra, timeout=90)

    def log_tail(self) -> str:
        try:
            return self.logfile.read_text(errors="replace")[-2000:]
        except OSError:
            return ""
